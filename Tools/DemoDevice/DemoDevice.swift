import AsyncHTTPClient
import Foundation
import PushCrypto
import PushModels

/// demo-device: plays the phone in the dev stack. Reads what the provider fakes
/// received for a token and decrypts it with the device's push key, as the Zulip app
/// would. Usage: demo-device <control-url> <token> <push-key-file>
@main
struct DemoDevice {
    static func main() async throws {
        let args = CommandLine.arguments
        guard args.count == 4 else {
            FileHandle.standardError.write(Data("usage: demo-device <control-url> <token> <push-key-file>\n".utf8))
            exit(2)
        }
        let (control, token, keyFile) = (args[1], args[2], args[3])
        let key = try PushKey(
            base64: try String(contentsOfFile: keyFile, encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
        )
        var pushes: [JSONValue] = []
        for provider in ["apns", "fcm"] {
            let response = try await HTTPClient.shared.execute(
                HTTPClientRequest(url: "\(control)/\(provider)/received"), timeout: .seconds(10))
            let body = try await response.body.collect(upTo: 64 << 20)
            let all = try JSONDecoder().decode(JSONValue.self, from: Data(body.readableBytesView))
            pushes += (all.arrayValue ?? []).filter { $0["token"]?.stringValue == token }
        }
        if pushes.isEmpty { print("no pushes received yet for this device") }
        for push in pushes {
            let provider = push["provider"]?.stringValue ?? "?"
            let status = push["status"]?.intValue ?? 0
            print(
                "\(provider) status=\(status) headers=\(String(decoding: Wire.canonical(push["headers"] ?? .null), as: UTF8.self))"
            )
            guard let encrypted = push["body"]?["encrypted_data"]?.stringValue else { continue }
            print("  encrypted_data: \(encrypted.prefix(48))…")
            do {
                print("  decrypted:      \(String(decoding: try key.decrypt(encrypted), as: UTF8.self))")
            } catch {
                print("  cannot decrypt with this device's key: \(error)")
            }
        }
    }
}
