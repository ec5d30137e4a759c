import Foundation

/// base64url (RFC 4648 §5), the alphabet of Web Push keys, VAPID and Telegram's `p`.
public enum Base64URL {
    /// Without padding, as Web Push and JWTs write it.
    public static func encode(_ bytes: some Sequence<UInt8>) -> String {
        Data(bytes).base64EncodedString()
            .replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    /// Decodes base64url with or without padding; nil for any other character (the
    /// standard alphabet's `+` and `/` included).
    public static func decode(_ text: String) -> [UInt8]? {
        var body = text
        while body.hasSuffix("=") { body.removeLast() }
        guard body.utf8.allSatisfy(isAlphabet) else { return nil }
        var standard = body.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        let remainder = standard.utf8.count % 4
        guard remainder != 1 else { return nil }
        if remainder > 0 { standard += String(repeating: "=", count: 4 - remainder) }
        return Data(base64Encoded: standard).map(Array.init)
    }

    /// A character of the base64url alphabet (RFC 4648 §5), padding excluded.
    public static func isAlphabet(_ byte: UInt8) -> Bool {
        byte.isASCIIAlphanumeric || byte == UInt8(ascii: "-") || byte == UInt8(ascii: "_")
    }
}

/// An https URL a device handed us (a Web Push or simple push endpoint, a WNS channel):
/// parsed strictly, so the host and port the relay connects to are the ones checked.
public struct PushEndpoint: Sendable, Hashable, CustomStringConvertible {
    /// The longest endpoint accepted (UnifiedPush allows 1000 bytes; browsers' push
    /// services stay far below 2048).
    public static let maximumLength = 2048

    public let url: String
    /// Lower-cased host name or IP literal, IPv6 without brackets.
    public let host: String
    public let port: Int

    /// `https://host[:port]` as VAPID's `aud` wants it (RFC 8292 §2: the origin).
    public var origin: String {
        let shownHost = host.contains(":") ? "[\(host)]" : host
        return port == 443 ? "https://\(shownHost)" : "https://\(shownHost):\(port)"
    }

    public var description: String { origin }

    /// Only `https://` with a host, no user info, no white space or control characters.
    public init(_ text: String, field: String) throws(PayloadValidationError) {
        guard !text.isEmpty, text.utf8.count <= Self.maximumLength else {
            throw PayloadValidationError(field: field, problem: "must be 1 to \(Self.maximumLength) bytes")
        }
        guard !Syntax.hasControlOrSpace(text), text.unicodeScalars.allSatisfy(\.isASCII) else {
            throw PayloadValidationError(field: field, problem: "must be an ASCII URL without spaces")
        }
        guard text.lowercased().hasPrefix("https://"), let components = URLComponents(string: text),
            components.scheme?.lowercased() == "https", let rawHost = components.host, !rawHost.isEmpty
        else {
            throw PayloadValidationError(field: field, problem: "must be an https URL with a host")
        }
        guard components.user == nil, components.password == nil else {
            throw PayloadValidationError(field: field, problem: "must not carry user information")
        }
        var host = rawHost.lowercased()
        if host.hasPrefix("[") && host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        guard Syntax.isHostname(host), !host.contains("..") else {
            throw PayloadValidationError(field: field, problem: "has an invalid host")
        }
        let port = components.port ?? 443
        guard (1...65535).contains(port) else {
            throw PayloadValidationError(field: field, problem: "has an invalid port")
        }
        self.url = text
        self.host = host
        self.port = port
    }
}

/// A Web Push subscription (Telegram token type 10, `PushSubscription.toJSON()`):
/// `{"endpoint": …, "keys": {"p256dh": …, "auth": …}}`, keys in base64url.
public struct WebPushSubscription: Sendable, Hashable {
    public let endpoint: PushEndpoint
    /// The user agent's P-256 public key, 65 bytes uncompressed (0x04 ‖ X ‖ Y).
    public let p256dh: [UInt8]
    /// The 16-byte authentication secret.
    public let auth: [UInt8]

    public init(endpoint: PushEndpoint, p256dh: [UInt8], auth: [UInt8]) throws(PayloadValidationError) {
        guard p256dh.count == 65, p256dh.first == 0x04 else {
            throw PayloadValidationError(
                field: "token.keys.p256dh", problem: "must be a 65-byte uncompressed P-256 point in base64url")
        }
        guard auth.count == 16 else {
            throw PayloadValidationError(field: "token.keys.auth", problem: "must be 16 bytes in base64url")
        }
        self.endpoint = endpoint
        self.p256dh = p256dh
        self.auth = auth
    }

    /// Parses the JSON text of a subscription.
    public init(json text: String) throws(PayloadValidationError) {
        let value: JSONValue
        do {
            value = try JSONReader.parse(Array(text.utf8))
        } catch {
            throw PayloadValidationError(field: "token", problem: "must be a Web Push subscription as JSON")
        }
        guard let endpoint = value["endpoint"]?.stringValue else {
            throw PayloadValidationError(field: "token.endpoint", problem: "is required (a string)")
        }
        guard let keys = value["keys"]?.objectValue, let p256dh = keys["p256dh"]?.stringValue,
            let auth = keys["auth"]?.stringValue
        else {
            throw PayloadValidationError(field: "token.keys", problem: "must hold the strings p256dh and auth")
        }
        guard let point = Base64URL.decode(p256dh) else {
            throw PayloadValidationError(field: "token.keys.p256dh", problem: "must be base64url")
        }
        guard let secret = Base64URL.decode(auth) else {
            throw PayloadValidationError(field: "token.keys.auth", problem: "must be base64url")
        }
        try self.init(endpoint: try PushEndpoint(endpoint, field: "token.endpoint"), p256dh: point, auth: secret)
    }

    /// The one spelling stored and indexed: the same subscription registered twice is
    /// the same device.
    public var canonicalJSON: String {
        let value: JSONValue = [
            "endpoint": .string(endpoint.url),
            "keys": ["p256dh": .string(Base64URL.encode(p256dh)), "auth": .string(Base64URL.encode(auth))],
        ]
        return String(decoding: Wire.canonical(value), as: UTF8.self)
    }
}
