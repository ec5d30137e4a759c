/// The push service a device token belongs to. Records name it so each stage can
/// pick the right client; new platforms add a case here and a client in Providers.
public enum Provider: String, Sendable, Codable, CaseIterable {
    case apns
    case fcm
}

/// How a payload is encrypted for a device. Records name the scheme next to the
/// key id so devices can hold keys of several schemes over time.
public enum EncryptionScheme: String, Sendable, Codable {
    /// libsodium `crypto_secretbox_easy` (XSalsa20-Poly1305), key tag byte 0x31.
    case secretbox
}

/// A device's push token, with the rules every provider puts on it.
public struct DeviceToken: Sendable, Hashable {
    public let provider: Provider
    public let value: String

    public static let maximumLength = 4096
    /// APNs tokens are opaque bytes, 32 today; Apple says they may grow, so up to 100.
    public static let apnsHexLengths = 64...200

    /// Validates a token for `provider`, by bytes:
    /// - APNs: 32 to 100 bytes in hexadecimal (either case);
    /// - FCM: 1 to 4096 of the characters FCM registration tokens use: ASCII letters,
    ///   digits, `-`, `_`, `:` and `.`.
    /// How strictly a token's syntax is judged.
    public enum Rules: Sendable {
        /// The native API's rules, above.
        case strict
        /// Zulip's bouncer rules, for the Zulip APIs: an APNs token is any run of
        /// hexadecimal digits (1 to 4096); Apple answers the ones it does not know.
        case zulip
    }

    public init(provider: Provider, value: String, rules: Rules = .strict) throws(PayloadValidationError) {
        let bytes = value.utf8
        guard !bytes.isEmpty else { throw PayloadValidationError(field: "token", problem: "must not be empty") }
        guard bytes.count <= Self.maximumLength else {
            throw PayloadValidationError(field: "token", problem: "must be at most \(Self.maximumLength) bytes")
        }
        switch provider {
        case .apns where rules == .zulip:
            guard bytes.allSatisfy(\.isHexDigit) else {
                throw PayloadValidationError(field: "token", problem: "an APNs token must be hexadecimal digits")
            }
        case .apns:
            guard Self.apnsHexLengths.contains(bytes.count), bytes.count % 2 == 0, bytes.allSatisfy(\.isHexDigit) else {
                throw PayloadValidationError(
                    field: "token", problem: "an APNs token must be 64 to 200 hexadecimal digits (32 to 100 bytes)")
            }
        case .fcm:
            guard bytes.allSatisfy({ $0.isASCIIAlphanumeric || $0 == 0x2d || $0 == 0x5f || $0 == 0x3a || $0 == 0x2e })
            else {
                throw PayloadValidationError(
                    field: "token", problem: "an FCM token may hold only ASCII letters, digits, '-', '_', ':' and '.'")
            }
        }
        self.provider = provider
        // APNs accepts either case; keeping one form makes the token index stable.
        self.value = provider == .apns ? value.lowercased() : value
    }

    /// A short, non-reversible form for logs and records: never log a full token.
    public var redacted: String { Self.redact(value) }

    public static func redact(_ token: String) -> String {
        guard token.count > 8 else { return "…" }
        return "\(token.prefix(4))…\(token.suffix(4))"
    }
}

extension UInt8 {
    var isHexDigit: Bool {
        (0x30...0x39).contains(self) || (0x41...0x46).contains(self) || (0x61...0x66).contains(self)
    }
}

/// APNs `apns-priority` (docs/protocols.md §2), with `unknown` for a value a newer
/// record or realm carries.
public enum APNsPriority: Sendable, Hashable, Codable, ExpressibleByIntegerLiteral, CustomStringConvertible {
    /// 10: deliver now (alerts).
    case immediate
    /// 5: power-considerate; required for background pushes.
    case considerate
    /// 1: prioritise the device's power over everything.
    case low
    case unknown(Int)

    public init(_ value: Int) {
        switch value {
        case 10: self = .immediate
        case 5: self = .considerate
        case 1: self = .low
        default: self = .unknown(value)
        }
    }

    public init(integerLiteral value: Int) { self.init(value) }

    public var value: Int {
        switch self {
        case .immediate: 10
        case .considerate: 5
        case .low: 1
        case .unknown(let value): value
        }
    }

    public var description: String { String(value) }

    public init(from decoder: any Decoder) throws {
        self.init(try decoder.singleValueContainer().decode(Int.self))
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.singleValueContainer()
        try c.encode(value)
    }
}

/// APNs `apns-push-type` (docs/protocols.md §2), with `unknown` for types Apple adds later.
public enum APNsPushType: String, Sendable, Hashable, CaseIterable {
    case alert, background, voip, location, complication, fileprovider, mdm, liveactivity, pushtotalk, widgets
    case controls
}

/// FCM `android.priority` (docs/protocols.md §3).
public enum FCMPriority: String, Sendable, Hashable, CaseIterable {
    case high, normal
}

/// A closed set of names with room for the ones it does not know: a record or a realm
/// may carry a value this build has no case for, which is kept and passed on as given.
public enum Named<Known: RawRepresentable & Sendable & Hashable>: Sendable, Hashable, Codable,
    ExpressibleByStringLiteral, CustomStringConvertible
where Known.RawValue == String {
    case known(Known)
    case unknown(String)

    public init(_ name: String) {
        self = Known(rawValue: name).map(Named.known) ?? .unknown(name)
    }

    public init(stringLiteral value: String) { self.init(value) }

    public var name: String {
        switch self {
        case .known(let known): known.rawValue
        case .unknown(let name): name
        }
    }

    public var description: String { name }

    public init(from decoder: any Decoder) throws {
        self.init(try decoder.singleValueContainer().decode(String.self))
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.singleValueContainer()
        try c.encode(name)
    }
}

/// Delivery settings derived from the notification type, the same for every provider.
public struct DeliveryClass: WireObject, Equatable {
    /// APNs `apns-priority`: 10 alerts now, 5 is the power-conserving priority background pushes require.
    public var apnsPriority: APNsPriority
    /// APNs `apns-push-type`.
    public var apnsPushType: Named<APNsPushType>
    /// FCM `android.priority`.
    public var fcmPriority: Named<FCMPriority>

    public init(apnsPriority: APNsPriority, apnsPushType: Named<APNsPushType>, fcmPriority: Named<FCMPriority>) {
        self.apnsPriority = apnsPriority
        self.apnsPushType = apnsPushType
        self.fcmPriority = fcmPriority
    }

    public init(fields: WireFields) throws {
        apnsPriority = APNsPriority(try fields.int("apns_priority"))
        apnsPushType = Named(try fields.string("apns_push_type"))
        fcmPriority = Named(try fields.string("fcm_priority"))
    }

    public func write(to object: inout JSONObjectWriter) {
        object.field("apns_priority", apnsPriority.value)
        object.field("apns_push_type", apnsPushType.name)
        object.field("fcm_priority", fcmPriority.name)
    }

    public init(_ type: NotificationType) {
        self =
            type.isAlert
            ? DeliveryClass(apnsPriority: .immediate, apnsPushType: .known(.alert), fcmPriority: .known(.high))
            : DeliveryClass(apnsPriority: .considerate, apnsPushType: .known(.background), fcmPriority: .known(.normal))
    }
}
