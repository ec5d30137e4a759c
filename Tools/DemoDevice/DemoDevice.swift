import AsyncHTTPClient
import Crypto
import Foundation
import NIOCore
import PushCrypto
import PushModels

/// demo-device: plays the phone in the dev stack. Reads what the provider fakes
/// received for a token and decrypts it as the app would, with the device's side of
/// its scheme. Usage: demo-device <control-url> <token> <key-file>, where the key file
/// holds one of:
/// - a push key (base64 of tag 0x31 + 32 bytes): Zulip's secretbox `encrypted_data`;
/// - a device `secret` (base64 of 256 bytes): Telegram's MTProto `{"p": …}`;
/// - `{"p256dh_private": <base64url 32 bytes>, "auth": <base64url 16 bytes>}`: a Web
///   Push subscription's private key and auth secret, for `aes128gcm` bodies.
/// For Web Push, simple push and WNS the token is the endpoint URL.
/// `demo-device status-waku <waku-node-url> <server-key-hex> <apns-topic>` plays a Status
/// app over Waku instead (`StatusWakuDemo`).
@main
struct DemoDevice {
    enum DeviceKey {
        case push(PushKey)
        case webPush(P256.KeyAgreement.PrivateKey, auth: [UInt8])
    }

    static func main() async throws {
        let args = CommandLine.arguments
        if args.count == 5, args[1] == "status-waku" {
            try await StatusWakuDemo.run(node: args[2], serverKeyHex: args[3], apnsTopic: args[4])
            return
        }
        guard args.count == 4 else {
            FileHandle.standardError.write(Data("usage: demo-device <control-url> <token> <key-file>\n".utf8))
            exit(2)
        }
        let (control, token, keyFile) = (args[1], args[2], args[3])
        let key = try deviceKey(
            try String(contentsOfFile: keyFile, encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines))
        var pushes: [JSONValue] = []
        for provider in Provider.allCases {
            let response = try await HTTPClient.shared.execute(
                HTTPClientRequest(url: "\(control)/\(provider.rawValue)/received"), timeout: .seconds(10))
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
            let body = push["body"] ?? .null
            do {
                guard let plaintext = try decrypt(body, with: key) else {
                    print("  body: \(String(decoding: Wire.canonical(body), as: UTF8.self).prefix(120))")
                    continue
                }
                print("  decrypted:      \(String(decoding: plaintext, as: UTF8.self))")
            } catch {
                print("  cannot decrypt with this device's key: \(error)")
            }
        }
    }

    static func deviceKey(_ text: String) throws -> DeviceKey {
        if text.hasPrefix("{") {
            let json = try JSONDecoder().decode(JSONValue.self, from: Data(text.utf8))
            guard let raw = json["p256dh_private"]?.stringValue.flatMap(Base64URL.decode),
                let auth = json["auth"]?.stringValue.flatMap(Base64URL.decode)
            else { throw PushCrypto.CryptoError(.invalidInput, "a Web Push key file needs p256dh_private and auth") }
            return .webPush(try P256.KeyAgreement.PrivateKey(rawRepresentation: raw), auth: auth)
        }
        if let bytes = Data(base64Encoded: text), bytes.count == 256 {
            return .push(try PushKey(mtprotoAuthKey: Array(bytes)))
        }
        return .push(try PushKey(base64: text))
    }

    /// The body's encrypted part, wherever the provider put it (a data map's values may
    /// be JSON text, as Huawei's `data` string is); nil when there is none.
    static func decrypt(_ body: JSONValue, with key: DeviceKey) throws -> [UInt8]? {
        var candidates = [body]
        if let text = body.stringValue, let inner = try? Wire.decode(JSONValue.self, from: Array(text.utf8)) {
            candidates.append(inner)
        }
        for case let object? in candidates.map(\.objectValue) {
            for value in object.values {
                if let text = value.stringValue, let inner = try? Wire.decode(JSONValue.self, from: Array(text.utf8)) {
                    candidates.append(inner)
                } else if value.objectValue != nil {
                    candidates.append(value)
                }
            }
        }
        for candidate in candidates {
            switch key {
            case .webPush(let privateKey, let auth):
                if let text = candidate["aes128gcm"]?.stringValue, let bytes = Base64URL.decode(text) {
                    return try WebPushEncryption.decrypt(bytes, privateKey: privateKey, auth: auth)
                }
            case .push(let pushKey):
                if let text = candidate["encrypted_data"]?.stringValue ?? candidate["p"]?.stringValue {
                    return try pushKey.decrypt(text)
                }
            }
        }
        return nil
    }
}
