/// The push service a device token belongs to, named as `token_kind` names it. Records
/// name it so each stage can pick the right client; new platforms add a case here and a
/// client in Providers.
public enum Provider: String, Sendable, Codable, CaseIterable {
    case apns
    case fcm
    /// Apple VoIP pushes (PushKit): push type `voip`, topic `<bundle id>.voip`.
    case apnsVoIP = "apns_voip"
    /// Web Push (RFC 8030/8291/8292): the token is the subscription JSON.
    case webpush
    /// Simple push / UnifiedPush: a wake-up `PUT version=<n>` to an https endpoint, or an
    /// encrypted Web Push message when the registration carries Web Push keys.
    case simplepush
    /// Huawei Push Kit (HMS Core).
    case hms
    /// Windows Push Notification Services: the token is the channel URI.
    case wns

    /// Telegram's `token_type` numbers (docs/protocols.md §5) for the live services.
    public static let telegramTokenTypes: [Int: Provider] = [
        1: .apns, 2: .fcm, 4: .simplepush, 8: .wns, 9: .apnsVoIP, 10: .webpush, 13: .hms,
    ]

    /// Telegram's other `token_type` numbers, and why the relay cannot deliver to them.
    public static let unsupportedTelegramTokenTypes: [Int: String] = [
        3: "MPNS (Microsoft Push Notification Service) was shut down by Microsoft; use WNS (8)",
        5: "Ubuntu Phone push was discontinued with Ubuntu Touch's push servers",
        6: "BlackBerry push was discontinued by BlackBerry",
        7: "an MTProto separate session is not a push service: the client keeps its own connection",
        11: "MPNS VoIP was shut down by Microsoft with MPNS; use WNS (8)",
        12: "Tizen push was discontinued by Samsung",
    ]

    /// Whether the provider is one of Apple's (one token-auth connection logic for both).
    public var isAPNs: Bool { self == .apns || self == .apnsVoIP }

    /// The token is an https URL (or, for Web Push, a JSON object holding one) that a
    /// device chose: outbound requests to it go through the relay's endpoint guard.
    public var hasDeviceChosenEndpoint: Bool { self == .webpush || self == .simplepush || self == .wns }
}

/// How a payload is encrypted for a device. Records name the scheme next to the
/// key id so devices can hold keys of several schemes over time.
public enum EncryptionScheme: String, Sendable, Codable {
    /// libsodium `crypto_secretbox_easy` (XSalsa20-Poly1305), key tag byte 0x31.
    case secretbox
    /// Telegram's MTProto 2.0 push encryption with a 256-byte device `secret`
    /// (docs/protocols.md §5): AES-256-IGE, `{"p": base64url(...)}`.
    case mtproto2
    /// RFC 8291 Web Push message encryption (`aes128gcm`) to the subscription's keys.
    case aes128gcm
}

/// A device's push token, with the rules every provider puts on it.
public struct DeviceToken: Sendable, Hashable {
    public let provider: Provider
    public let value: String

    public static let maximumLength = 4096
    /// APNs tokens are opaque bytes, 32 today; Apple says they may grow, so up to 100.
    public static let apnsHexLengths = 64...200

    /// Validates a token for `provider`, by bytes:
    /// - APNs and APNs VoIP: 32 to 100 bytes in hexadecimal (either case), kept lower-case;
    /// - FCM and Huawei: 1 to 4096 of the characters their tokens use: ASCII letters,
    ///   digits, `-`, `_`, `:` and `.`;
    /// - Web Push: the subscription JSON (an https endpoint, a P-256 `p256dh`, a 16-byte
    ///   `auth`), kept in one canonical spelling;
    /// - simple push: an https endpoint, or a Web Push subscription;
    /// - WNS: the https channel URI.
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
        var canonical = value
        switch provider {
        case .apns where rules == .zulip:
            guard bytes.allSatisfy(\.isHexDigit) else {
                throw PayloadValidationError(field: "token", problem: "an APNs token must be hexadecimal digits")
            }
            // APNs accepts either case; keeping one form makes the token index stable.
            canonical = value.lowercased()
        case .apns, .apnsVoIP:
            guard Self.apnsHexLengths.contains(bytes.count), bytes.count % 2 == 0, bytes.allSatisfy(\.isHexDigit) else {
                throw PayloadValidationError(
                    field: "token", problem: "an APNs token must be 64 to 200 hexadecimal digits (32 to 100 bytes)")
            }
            canonical = value.lowercased()
        case .fcm, .hms:
            guard bytes.allSatisfy({ $0.isASCIIAlphanumeric || $0 == 0x2d || $0 == 0x5f || $0 == 0x3a || $0 == 0x2e })
            else {
                let name = provider == .fcm ? "an FCM" : "a Huawei"
                throw PayloadValidationError(
                    field: "token", problem: "\(name) token may hold only ASCII letters, digits, '-', '_', ':' and '.'")
            }
        case .webpush:
            canonical = try WebPushSubscription(json: value).canonicalJSON
        case .simplepush:
            // An endpoint URL, or a subscription with Web Push keys (UnifiedPush with encryption).
            if value.hasPrefix("{") {
                canonical = try WebPushSubscription(json: value).canonicalJSON
            } else {
                _ = try PushEndpoint(value, field: "token")
            }
        case .wns:
            _ = try PushEndpoint(value, field: "token")
        }
        self.provider = provider
        self.value = canonical
    }

    /// The Web Push subscription a `webpush` token, or a `simplepush` token with keys, holds.
    public var webPushSubscription: WebPushSubscription? {
        Self.webPushSubscription(provider: provider, token: value)
    }

    public static func webPushSubscription(provider: Provider, token: String) -> WebPushSubscription? {
        guard provider == .webpush || (provider == .simplepush && token.hasPrefix("{")) else { return nil }
        return try? WebPushSubscription(json: token)
    }

    /// The https endpoint the relay calls for the token: a Web Push or simple push
    /// endpoint, or a WNS channel URI; nil for other providers and malformed tokens.
    public static func endpoint(provider: Provider, token: String) -> PushEndpoint? {
        guard provider.hasDeviceChosenEndpoint else { return nil }
        if token.hasPrefix("{") { return webPushSubscription(provider: provider, token: token)?.endpoint }
        return try? PushEndpoint(token, field: "token")
    }

    /// A short, non-reversible form for logs and records: never log a full token.
    public var redacted: String { Self.redact(value) }

    public static func redact(_ token: String) -> String {
        guard token.count > 8 else { return "…" }
        return "\(token.prefix(4))…\(token.suffix(4))"
    }
}

extension UInt8 {
    public var isHexDigit: Bool {
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

/// A closed set of names with room for the ones it does not know: a record, a realm or a
/// provider may carry a value this build has no case for, which is kept and passed on as
/// given. Not `ExpressibleByStringLiteral`: a known name is written by its case.
public enum Named<Known: RawRepresentable & Sendable & Hashable>: Sendable, Hashable, Codable,
    CustomStringConvertible
where Known.RawValue == String {
    case known(Known)
    case unknown(String)

    public init(_ name: String) {
        self = Known(rawValue: name).map(Named.known) ?? .unknown(name)
    }

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
/// A priority left out (nil, absent on the wire) is one the provider is not told, so its
/// own default applies: gorush's API sends no `apns-priority` without `priority`, and no
/// `android` block at all.
public struct DeliveryClass: WireObject, Equatable {
    /// APNs `apns-priority`: 10 alerts now, 5 is the power-conserving priority background
    /// pushes require; nil sends no header (APNs then uses 10).
    public var apnsPriority: APNsPriority?
    /// APNs `apns-push-type`.
    public var apnsPushType: Named<APNsPushType>
    /// FCM `android.priority` (Huawei's `urgency`, Web Push's `Urgency`); nil leaves it out.
    public var fcmPriority: Named<FCMPriority>?

    public init(apnsPriority: APNsPriority?, apnsPushType: Named<APNsPushType>, fcmPriority: Named<FCMPriority>?) {
        self.apnsPriority = apnsPriority
        self.apnsPushType = apnsPushType
        self.fcmPriority = fcmPriority
    }

    public init(fields: WireFields) throws {
        apnsPriority = try fields.int(ifPresent: "apns_priority").map { APNsPriority($0) }
        apnsPushType = Named(try fields.string("apns_push_type"))
        fcmPriority = try fields.string(ifPresent: "fcm_priority").map { Named($0) }
    }

    public func write(to object: inout JSONObjectWriter) {
        if let apnsPriority { object.field("apns_priority", apnsPriority.value) }
        object.field("apns_push_type", apnsPushType.name)
        if let fcmPriority { object.field("fcm_priority", fcmPriority.name) }
    }

    public init(_ type: NotificationType) {
        self =
            type.isAlert
            ? DeliveryClass(apnsPriority: .immediate, apnsPushType: .known(.alert), fcmPriority: .known(.high))
            : DeliveryClass(apnsPriority: .considerate, apnsPushType: .known(.background), fcmPriority: .known(.normal))
    }
}
