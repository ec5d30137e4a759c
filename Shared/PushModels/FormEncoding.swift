import Foundation

/// `application/x-www-form-urlencoded` as Python's requests writes a dict (`quote_plus`):
/// how Zulip servers send their bouncer requests, and how the relay posts OAuth 2.0
/// client-credentials grants (Huawei, WNS).
public func formURLEncoded(_ fields: [(String, String)]) -> [UInt8] {
    let unreserved = Set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~".utf8)
    func encode(_ text: String) -> String {
        var out = ""
        for byte in text.utf8 {
            if unreserved.contains(byte) {
                out.unicodeScalars.append(Unicode.Scalar(byte))
            } else if byte == UInt8(ascii: " ") {
                out += "+"
            } else {
                out += String(format: "%%%02X", byte)
            }
        }
        return out
    }
    return Array(fields.map { "\(encode($0.0))=\(encode($0.1))" }.joined(separator: "&").utf8)
}
