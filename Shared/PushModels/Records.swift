/// Topic envelopes. Every value on a topic is compact JSON carrying `schema`, so
/// operators can read topics with kcat and tools can read older versions.
/// Notification plaintext never appears here in the clear: native requests carry it
/// sealed with the pipeline key (`SealedBlob`); pass-through payloads are already
/// ciphertext encrypted by the realm; legacy Zulip payloads travel sealed like native
/// plaintext, and their provider bodies stay sealed on `push.outbound`.
///
/// Each record's fields are declared once, in `Records.wire`: `scripts/wiregen.py`
/// generates the structs, their stored properties, `init(fields:)` and `write(to:)`
/// (`Generated/Records+Wire.swift`). What is written by hand is here: initializers,
/// nested types, schema versions and views.

extension SealedBlob {
    /// How a blob is sealed. Extensible, so a record sealed by a newer relay still
    /// decodes here and merely fails to open.
    public struct Algorithm: RawRepresentable, Sendable, Codable, Hashable {
        public var rawValue: String
        public init(rawValue: String) { self.rawValue = rawValue }

        /// XChaCha20-Poly1305 (IETF) with the record's `SealBinding` as associated data:
        /// `nonce(24) || ciphertext || MAC(16)`.
        public static let xchacha20poly1305 = Algorithm(rawValue: "xchacha20poly1305")
    }

    public init(keyID: String, alg: Algorithm? = nil, box: String) {
        self.keyID = keyID
        self.alg = alg
        self.box = box
    }
}

extension PassThroughItem {
    public init(
        deviceID: DeviceID, apnsPriority: APNsPriority? = nil, apnsPushType: Named<APNsPushType>? = nil,
        fcmPriority: Named<FCMPriority>? = nil, payload: JSONValue
    ) {
        self.deviceID = deviceID
        self.apnsPriority = apnsPriority
        self.apnsPushType = apnsPushType
        self.fcmPriority = fcmPriority
        self.payload = payload
    }
}

/// What ingest accepted, by kind: each kind carries exactly what it needs, so a stage
/// never meets a request without its user or its payload. New platforms' request kinds
/// add a case here.
public enum PushRequest: Sendable, Equatable {
    /// The relay encrypts with each device's key (native API). `deviceIDs` nil: every
    /// active device of the user. The plaintext notification JSON travels sealed with
    /// the pipeline key, bound to (notification, realm, user).
    case native(userID: Int64, deviceIDs: [DeviceID]?, type: NotificationType, sealedPayload: SealedBlob)
    /// The realm encrypted already; payloads travel unchanged, one per device (bouncer API).
    case passThrough(items: [PassThroughItem])
    /// Zulip's legacy (non-E2EE) bouncer API: the server's APNs and FCM payloads, sealed
    /// as `ZulipLegacyPayload` (bound to no user id), for the user's legacy devices when
    /// ingest accepted the request. `user` is `uuid:{user_uuid}` or `id:{user_id}`.
    case legacy(user: ZulipUserKey, deviceIDs: [DeviceID], sealedPayload: SealedBlob)
    /// gorush's API (`POST /api/push`) and the Status push server: one notification in
    /// gorush's form (`GorushContent`), readable by the relay like legacy content, for
    /// devices the request registered under the calling server. Sealed bound to no user.
    case gorush(deviceIDs: [DeviceID], sealedPayload: SealedBlob)
}

extension PushRequestRecord {
    public static let currentSchema = 1

    public init(
        notificationID: NotificationID, serverUUID: ServerID, realmUUID: RealmID, acceptedAtMs: Int64,
        request: PushRequest
    ) {
        self.schema = Self.currentSchema
        self.notificationID = notificationID
        self.serverUUID = serverUUID
        self.realmUUID = realmUUID
        self.acceptedAtMs = acceptedAtMs
        self.request = request
    }

    /// The partition key: one user's notifications (or one realm's pass-through batch) in order.
    public var partitionKey: String {
        switch request {
        case .native(let userID, _, _, _): "\(realmUUID):\(userID)"
        case .passThrough: realmUUID.rawValue
        case .legacy(let user, _, _): "\(serverUUID):\(user)"
        // A large send's records (one notification, its devices split) spread over the
        // partitions, so they are encrypted side by side.
        case .gorush(let ids, _): "\(realmUUID):\(notificationID):\(ids.first?.rawValue ?? 0)"
        }
    }

    // Read-only views for tools and tests.
    public var userID: Int64? {
        if case .native(let userID, _, _, _) = request { return userID }
        return nil
    }

    public var deviceIDs: [DeviceID]? {
        switch request {
        case .native(_, let ids, _, _): ids
        case .legacy(_, let ids, _), .gorush(let ids, _): ids
        case .passThrough(let items): items.map(\.deviceID)
        }
    }

    public var sealedPayload: SealedBlob? {
        switch request {
        case .native(_, _, _, let sealed), .legacy(_, _, let sealed), .gorush(_, let sealed): sealed
        case .passThrough: nil
        }
    }

    public var items: [PassThroughItem]? {
        if case .passThrough(let items) = request { return items }
        return nil
    }
}

/// What a legacy request seals on `push.requests`: the Zulip server's payloads as it
/// sent them (a removal already cut to its newest ids), and the FCM priority. The
/// encryptor builds the provider bodies from it (`ZulipLegacy`).
public struct ZulipLegacyPayload: Sendable, Codable, Equatable {
    public var apnsPayload: JSONValue
    public var gcmPayload: JSONValue
    public var fcmPriority: String

    enum CodingKeys: String, CodingKey {
        case apnsPayload = "apns_payload"
        case gcmPayload = "gcm_payload"
        case fcmPriority = "fcm_priority"
    }

    public init(apnsPayload: JSONValue, gcmPayload: JSONValue, fcmPriority: String) {
        self.apnsPayload = apnsPayload
        self.gcmPayload = gcmPayload
        self.fcmPriority = fcmPriority
    }
}

extension OutboundRecord {
    public static let currentSchema = 5

    /// The fields but the body take under 512 bytes; the body is written as an escaped
    /// string (a quarter more for its quotes), the sealed ones in base64. From 512 bytes
    /// an outbound record with a full provider body was copied three times as it grew.
    public var encodedSizeHint: Int {
        512 + body.count + body.count / 4 + (sealedBody?.box.utf8.count ?? 0) + (sealedToken?.box.utf8.count ?? 0)
            + token.utf8.count
    }

    public init(
        notificationID: NotificationID, deviceID: DeviceID, realmUUID: RealmID, provider: Provider, token: String,
        appID: String?, delivery: DeliveryClass, body: JSONValue, expiresAt: Int64? = nil,
        collapseID: String? = nil, acceptedAtMs: Int64, registeredAtMs: Int64? = nil, sealedToken: SealedBlob? = nil,
        sealedBody: SealedBlob? = nil
    ) {
        self.schema = Self.currentSchema
        self.notificationID = notificationID
        self.deviceID = deviceID
        self.realmUUID = realmUUID
        self.provider = provider
        self.token = token
        self.sealedToken = sealedToken
        self.sealedBody = sealedBody
        self.appID = appID
        self.delivery = delivery
        self.body = sealedBody == nil ? Wire.canonical(body) : []
        self.expiresAt = expiresAt
        self.collapseID = collapseID
        self.acceptedAtMs = acceptedAtMs
        self.registeredAtMs = registeredAtMs
    }

    /// Partition key: one device's pushes stay in order.
    public var partitionKey: String { "\(deviceID)" }

    /// True when the push is useless at `nowMs` (its expiry has passed).
    public func isExpired(atMs nowMs: Int64) -> Bool {
        guard let expiresAt else { return false }
        return nowMs / 1000 > expiresAt
    }
}

/// Whether a push's provider is told when it expires.
public enum ProviderExpiry: String, Sendable, Equatable {
    /// Not told: the provider's own default applies (APNs stores it by its policy, FCM
    /// keeps it four weeks), as gorush sends a notification without `expiration`.
    case providerDefault = "provider_default"
}

/// How a push is to be sent, when not for real (`send_mode` on `push.requests`,
/// `push.outbound` and `push.deliveries`).
public enum SendMode: String, Sendable, Equatable {
    /// A pipeline dry run: FCM and Huawei are asked to check the message without
    /// delivering it (`validate_only`); no other provider is contacted (checked locally).
    case validateOnly = "validate_only"

    /// The providers that check a message without delivering it (FCM's and Huawei's
    /// `validate_only`); a dry run's push to any other is not sent at all.
    public static let validatingProviders: Set<Provider> = [.fcm, .hms]
}

/// How a provider body is to be read (`OutboundRecord.bodyForm`).
public enum BodyForm: String, Sendable, Equatable {
    /// The provider message's fields, without the token.
    case message
}

extension DeadLetterRecord {
    public static let currentSchema = 1

    public enum Cause: String, Sendable {
        /// Retryable errors until the attempts ran out.
        case attemptsExhausted = "attempts_exhausted"
        /// Its expiry passed before it could be sent.
        case expired
        /// The provider refused it for good (bad payload, topic, credentials, no provider).
        case rejected
    }

    public init(
        cause: Cause, lastError: String?, httpStatus: Int?, attempts: Int, deadAtMs: Int64, record: OutboundRecord
    ) {
        self.schema = Self.currentSchema
        self.cause = cause
        self.lastError = lastError
        self.httpStatus = httpStatus
        self.attempts = attempts
        self.deadAtMs = deadAtMs
        self.record = record
    }
}

extension FeedbackRecord {
    public static let currentSchema = 1

    public init(
        deviceID: DeviceID, realmUUID: RealmID, provider: Provider, tokenFingerprint: String, reason: OutcomeReason,
        providerTimestampMs: Int64?, notificationID: NotificationID, observedAtMs: Int64
    ) {
        self.schema = Self.currentSchema
        self.deviceID = deviceID
        self.realmUUID = realmUUID
        self.provider = provider
        self.tokenFingerprint = tokenFingerprint
        self.reason = reason
        self.providerTimestampMs = providerTimestampMs
        self.notificationID = notificationID
        self.observedAtMs = observedAtMs
    }
}

/// The final outcome of one notification for one device.
///
/// Two outcomes are named by the relay's reason that alone leads to them
/// (`unknown_device`, `expired`): their names are `StageReason`'s, so each is declared
/// once, and its names are spelt out in `rawValue` rather than given as raw values.
public enum DeliveryOutcome: RawRepresentable, Sendable, Hashable, Codable, CaseIterable {
    case sent
    case invalidToken
    case unknownDevice
    case failed
    case expired
    /// A redelivered or replayed push whose pair the provider had already accepted: not sent again.
    case alreadySent
    /// The device's own preferences (Status push server) say not to notify; `reason` says which.
    case filtered

    /// The name on the wire and in metric labels.
    public var rawValue: String {
        switch self {
        case .sent: "sent"
        case .invalidToken: "invalid_token"
        case .unknownDevice: StageReason.unknownDevice.rawValue
        case .failed: "failed"
        case .expired: StageReason.expired.rawValue
        case .alreadySent: "already_sent"
        case .filtered: "filtered"
        }
    }

    public init?(rawValue: String) {
        guard let outcome = Self.allCases.first(where: { $0.rawValue == rawValue }) else { return nil }
        self = outcome
    }
}

extension HookDeliveryRecord {
    public static let currentSchema = 1

    public init(server: ServerID, delivery: DeliveryRecord) {
        self.schema = Self.currentSchema
        self.serverUUID = server
        self.delivery = delivery
    }
}

extension DeliveryRecord {
    public static let currentSchema = 1

    public init(
        notificationID: NotificationID, realmUUID: RealmID, deviceID: DeviceID?, provider: Provider?,
        outcome: DeliveryOutcome,
        reason: OutcomeReason?, httpStatus: Int? = nil, attempts: Int, acceptedAtMs: Int64, completedAtMs: Int64,
        providerMessageID: String? = nil
    ) {
        self.schema = Self.currentSchema
        self.notificationID = notificationID
        self.realmUUID = realmUUID
        self.deviceID = deviceID
        self.provider = provider
        self.outcome = outcome
        self.reason = reason
        self.httpStatus = httpStatus
        self.attempts = attempts
        self.acceptedAtMs = acceptedAtMs
        self.completedAtMs = completedAtMs
        self.providerMessageID = providerMessageID
    }
}

/// Topic names, configurable per deployment; these are the defaults.
public struct TopicNames: Sendable, Equatable {
    public var requests = "push.requests"
    public var outbound = "push.outbound"
    public var feedback = "push.feedback"
    public var deliveries = "push.deliveries"
    public var deadLetter = "push.deadletter"
    /// Failed pushes on their way to servers' feedback hooks.
    public var hooks = "push.hooks"
    /// Retry topic names start with this and end with the retry stage: `push.retry.1`, `push.retry.2`, …
    public var retryPrefix = "push.retry."

    public init() {}

    /// The retry topic of stage `stage` (1-based): named by stage, not by delay, so
    /// changing the delays never strands records in a topic nobody reads.
    public func retry(_ stage: Int) -> String { "\(retryPrefix)\(stage)" }

    public func all(retryStages: Int) -> [String] {
        [requests, outbound, feedback, deliveries, deadLetter, hooks] + (1...max(1, retryStages)).map(retry)
    }
}

/// Kafka header names the stages and tools share.
public enum RecordHeader {
    /// The notification a record belongs to, on every topic, for tracing.
    public static let notificationID = "notification_id"
    /// On retry topics: ms since the epoch before which the record is not handled.
    public static let due = "pushrelay-due-ms"
    /// Set by the replay tool on re-driven records (its value: when, or `force` to
    /// re-send pairs already delivered); carried from `push.requests` to `push.outbound`.
    public static let replay = "pushrelay-replay"
}

extension DeliveryRecord {
    /// The outcome of a topic record that does not decode, when its notification and realm
    /// can still be read from `value` (`device_id` too, on `push.outbound`): `failed` with
    /// `reason`, so the realm's outcome stream accounts for it. Nil when it names neither.
    public static func malformed(_ value: [UInt8], reason: StageReason, nowMs: Int64) -> DeliveryRecord? {
        guard let json = try? Wire.decode(JSONValue.self, from: value),
            let notification = json["notification_id"]?.stringValue, let realm = json["realm_uuid"]?.stringValue
        else { return nil }
        return DeliveryRecord(
            notificationID: NotificationID(notification), realmUUID: RealmID(realm),
            deviceID: json["device_id"]?.intValue.map { DeviceID($0) }, provider: nil, outcome: .failed,
            reason: .stage(reason), attempts: 0, acceptedAtMs: json["accepted_at_ms"]?.intValue ?? 0,
            completedAtMs: nowMs)
    }
}
