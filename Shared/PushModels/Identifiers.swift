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

extension UUID {
    /// A random (version 4) UUID from the system's generator (`getrandom`). Foundation's
    /// `UUID()` opens `/dev/urandom` on every call on Linux: a measurable cost per request.
    public static func random() -> UUID {
        var generator = SystemRandomNumberGenerator()
        var b = (generator.next() as UInt64, generator.next() as UInt64)
        return withUnsafeMutableBytes(of: &b) { raw in
            raw[6] = raw[6] & 0x0F | 0x40  // version 4
            raw[8] = raw[8] & 0x3F | 0x80  // RFC 4122 variant
            return UUID(
                uuid: (
                    raw[0], raw[1], raw[2], raw[3], raw[4], raw[5], raw[6], raw[7], raw[8], raw[9], raw[10], raw[11],
                    raw[12], raw[13], raw[14], raw[15]
                ))
        }
    }
}

extension NotificationID {
    /// A fresh notification id: a random UUID, lowercase.
    public static func random() -> NotificationID { NotificationID(UUID.random().uuidString.lowercased()) }
}
