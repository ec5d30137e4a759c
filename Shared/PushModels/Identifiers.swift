import Foundation

/// Small wrapper types for the ids records carry, so a device id is never passed where
/// a user id belongs, nor a realm where a server is meant. Each encodes as its bare
/// value (the standard library's coding of a `RawRepresentable`): the wire form of
/// every record is unchanged.
public protocol Identifier: RawRepresentable, Sendable, Hashable, Comparable, Codable, CustomStringConvertible
where RawValue: Comparable & Sendable & Codable & CustomStringConvertible {
    init(rawValue: RawValue)
}

extension Identifier {
    public init(_ rawValue: RawValue) { self.init(rawValue: rawValue) }
    public var description: String { rawValue.description }
    public static func < (a: Self, b: Self) -> Bool { a.rawValue < b.rawValue }
}

extension Identifier where RawValue == String {
    public init(stringLiteral value: String) { self.init(rawValue: value) }
}

/// The id the relay gives a notification at acceptance (a UUID string), one per notify.
public struct NotificationID: Identifier, ExpressibleByStringLiteral {
    public var rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }
}

/// A device's id in the relay (a positive 64-bit integer from `{p}device:seq`; Zulip's
/// legacy devices are numbered in the same sequence).
public struct DeviceID: Identifier, ExpressibleByIntegerLiteral {
    public var rawValue: Int64
    public init(rawValue: Int64) { self.rawValue = rawValue }
    public init(integerLiteral value: Int64) { rawValue = value }
}

/// A realm's UUID, as its server names it.
public struct RealmID: Identifier, ExpressibleByStringLiteral {
    public var rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }
}

/// A registered server's UUID (a Zulip server, or a native API caller).
public struct ServerID: Identifier, ExpressibleByStringLiteral {
    public var rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }
}

/// A user of Zulip's legacy (non-E2EE) API as their devices are filed: `uuid:{user_uuid}`
/// or `id:{user_id}` (`ZulipLegacyUser` makes it from the ids a request gives).
public struct ZulipUserKey: Identifier, ExpressibleByStringLiteral {
    public var rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }
}

extension UUID {
    /// A random (version 4) UUID from the kernel's generator, through `RandomBytes` (a
    /// system call per 256 UUIDs). Foundation's `UUID()` opens `/dev/urandom` on every call
    /// on Linux, and `SystemRandomNumberGenerator` makes a system call per 8 bytes.
    public static func random() -> UUID {
        UUID(uuid: randomUUIDBytes())
    }

    static func randomUUIDBytes() -> uuid_t {
        var b: uuid_t = (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
        withUnsafeMutableBytes(of: &b) { raw in
            RandomBytes.fill(raw)
            raw[6] = raw[6] & 0x0F | 0x40  // version 4
            raw[8] = raw[8] & 0x3F | 0x80  // RFC 4122 variant
        }
        return b
    }
}

extension UUID {
    /// The 16 bytes of a UUID written `8-4-4-4-12` in hex digits of either case; nil for
    /// anything else. (Foundation's `UUID(uuidString:)` parses with `sscanf`, and
    /// `uuidString` formats with `snprintf`: ~15,000 instructions for the pair.)
    public static func bytes(parsing text: String) -> [UInt8]? {
        guard let canonical = Syntax.canonicalUUID(text) else { return nil }
        return Syntax.bytes(fromHex: canonical.utf8.filter { $0 != UInt8(ascii: "-") })
    }

    /// `8-4-4-4-12` lowercase hex digits of 16 bytes: `uuidString.lowercased()` without
    /// Foundation's formatting and its two strings.
    public static func lowercaseText(_ raw: UnsafeRawBufferPointer) -> String {
        String(unsafeUninitializedCapacity: 36) { out in
            var at = 0
            for (index, byte) in raw.prefix(16).enumerated() {
                if index == 4 || index == 6 || index == 8 || index == 10 {
                    out[at] = UInt8(ascii: "-")
                    at += 1
                }
                out[at] = Syntax.hexDigit(byte >> 4)
                out[at + 1] = Syntax.hexDigit(byte & 0x0F)
                at += 2
            }
            return at
        }
    }
}

extension NotificationID {
    /// A fresh notification id: a random UUID, lowercase.
    public static func random() -> NotificationID {
        var bytes = UUID.randomUUIDBytes()
        return NotificationID(withUnsafeBytes(of: &bytes) { UUID.lowercaseText($0) })
    }
}
