/// Topic envelopes. Every value on a topic is compact JSON carrying `schema`, so
/// operators can read topics with kcat and tools can read older versions.
/// Notification plaintext never appears here in the clear: native requests carry it
/// sealed with the pipeline key (`SealedBlob`); pass-through payloads are already
/// ciphertext encrypted by the realm; legacy Zulip payloads travel sealed like native
/// plaintext, and their provider bodies stay sealed on `push.outbound`.

/// Ciphertext sealed with a pipeline key that only the stages hold (ingest, encryptor,
/// dispatcher).
public struct SealedBlob: WireObject, Equatable {
    /// How a blob is sealed. Extensible, so a record sealed by a newer relay still
    /// decodes here and merely fails to open.
    public struct Algorithm: RawRepresentable, Sendable, Codable, Hashable {
        public var rawValue: String
        public init(rawValue: String) { self.rawValue = rawValue }

        /// XChaCha20-Poly1305 (IETF) with the record's `SealBinding` as associated data:
        /// `nonce(24) || ciphertext || MAC(16)`.
        public static let xchacha20poly1305 = Algorithm(rawValue: "xchacha20poly1305")
    }

    /// Which pipeline key sealed it, so keys can rotate while records are in flight.
    public var keyID: String
    /// Absent: the first form, libsodium secretbox without associated data
    /// (`nonce(24) || MAC(16) || ciphertext`), still opened for records already in flight.
    public var alg: Algorithm?
    /// base64 of the sealed bytes, framed as `alg` says.
    public var box: String

    public init(keyID: String, alg: Algorithm? = nil, box: String) {
        self.keyID = keyID
        self.alg = alg
        self.box = box
    }

    public init(fields: WireFields) throws {
        keyID = try fields.string("key_id")
        alg = try fields.string(ifPresent: "alg").map(Algorithm.init(rawValue:))
        box = try fields.string("box")
    }

    public func write(to object: inout JSONObjectWriter) {
        object.field("alg", alg?.rawValue)
        object.field("box", box)
        object.field("key_id", keyID)
    }
}

/// One item of a pass-through (bouncer API) notify: a payload the realm already encrypted.
public struct PassThroughItem: WireObject, Equatable {
    public var deviceID: DeviceID
    public var apnsPriority: APNsPriority?
    public var apnsPushType: Named<APNsPushType>?
    public var fcmPriority: Named<FCMPriority>?
    /// The provider body as the realm sent it (APNs body, or the FCM data before stringification).
    public var payload: JSONValue

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

    public init(fields: WireFields) throws {
        deviceID = DeviceID(try fields.int64("device_id"))
        apnsPriority = try fields.int(ifPresent: "apns_priority").map { APNsPriority($0) }
        apnsPushType = try fields.string(ifPresent: "apns_push_type").map { Named($0) }
        fcmPriority = try fields.string(ifPresent: "fcm_priority").map { Named($0) }
        payload = try fields.value("payload")
    }

    public func write(to object: inout JSONObjectWriter) {
        object.field("apns_priority", apnsPriority?.value)
        object.field("apns_push_type", apnsPushType?.name)
        object.field("device_id", deviceID.rawValue)
        object.field("fcm_priority", fcmPriority?.name)
        object.field("payload", payload)
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
    case legacy(user: String, deviceIDs: [DeviceID], sealedPayload: SealedBlob)
    /// gorush's API (`POST /api/push`) and the Status push server: one notification in
    /// gorush's form (`GorushContent`), readable by the relay like legacy content, for
    /// devices the request registered under the calling server. Sealed bound to no user.
    case gorush(deviceIDs: [DeviceID], sealedPayload: SealedBlob)
}

/// `push.requests`: what ingest accepted, keyed by realm and user so one user's
/// notifications stay in order. On the wire: a flat JSON object, `kind` naming which of
/// the other fields are present (unchanged since schema 1).
public struct PushRequestRecord: WireObject, Equatable {
    public static let currentSchema = 1

    public enum Kind: String, Sendable {
        case native
        case passThrough = "pass_through"
        case legacy
        case gorush
    }

    public var schema: Int
    public var notificationID: NotificationID
    public var serverUUID: ServerID
    public var realmUUID: RealmID
    /// When ingest accepted it (ms since the epoch), for latency and expiry.
    public var acceptedAtMs: Int64
    public var request: PushRequest

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

    public var kind: Kind {
        switch request {
        case .native: .native
        case .passThrough: .passThrough
        case .legacy: .legacy
        case .gorush: .gorush
        }
    }

    /// A record whose kind lacks a field it needs does not decode: it is counted and
    /// skipped as unreadable, never half-handled.
    public init(fields: WireFields) throws {
        schema = try fields.int("schema")
        notificationID = NotificationID(try fields.string("notification_id"))
        serverUUID = ServerID(try fields.string("server_uuid"))
        realmUUID = RealmID(try fields.string("realm_uuid"))
        acceptedAtMs = try fields.int64("accepted_at_ms")
        switch try fields.named("kind") as Kind {
        case .native:
            request = .native(
                userID: try fields.int64("user_id"),
                deviceIDs: try fields.int64s(ifPresent: "device_ids")?.map { DeviceID($0) },
                type: try fields.named(ifPresent: "notification_type") ?? .message,
                sealedPayload: try fields.object("sealed_payload"))
        case .passThrough:
            request = .passThrough(items: try fields.objects("items"))
        case .legacy:
            request = .legacy(
                user: try fields.string("legacy_user"), deviceIDs: try fields.int64s("device_ids").map { DeviceID($0) },
                sealedPayload: try fields.object("sealed_payload"))
        case .gorush:
            request = .gorush(
                deviceIDs: try fields.int64s("device_ids").map { DeviceID($0) },
                sealedPayload: try fields.object("sealed_payload"))
        }
    }

    public func write(to object: inout JSONObjectWriter) {
        object.field("accepted_at_ms", acceptedAtMs)
        switch request {
        case .native(let userID, let deviceIDs, let type, let sealed):
            object.field("device_ids", deviceIDs?.map(\.rawValue))
            object.field("kind", kind)
            object.field("notification_id", notificationID.rawValue)
            object.field("notification_type", type)
            object.field("realm_uuid", realmUUID.rawValue)
            object.field("schema", schema)
            object.field("sealed_payload", sealed)
            object.field("server_uuid", serverUUID.rawValue)
            object.field("user_id", userID)
        case .passThrough(let items):
            object.field("items", items)
            object.field("kind", kind)
            object.field("notification_id", notificationID.rawValue)
            object.field("realm_uuid", realmUUID.rawValue)
            object.field("schema", schema)
            object.field("server_uuid", serverUUID.rawValue)
        case .legacy(let user, let deviceIDs, let sealed):
            object.field("device_ids", deviceIDs.map(\.rawValue))
            object.field("kind", kind)
            object.field("legacy_user", user)
            object.field("notification_id", notificationID.rawValue)
            object.field("realm_uuid", realmUUID.rawValue)
            object.field("schema", schema)
            object.field("sealed_payload", sealed)
            object.field("server_uuid", serverUUID.rawValue)
        case .gorush(let deviceIDs, let sealed):
            object.field("device_ids", deviceIDs.map(\.rawValue))
            object.field("kind", kind)
            object.field("notification_id", notificationID.rawValue)
            object.field("realm_uuid", realmUUID.rawValue)
            object.field("schema", schema)
            object.field("sealed_payload", sealed)
            object.field("server_uuid", serverUUID.rawValue)
        }
    }

    /// The partition key: one user's notifications (or one realm's pass-through batch) in order.
    public var partitionKey: String {
        switch request {
        case .native(let userID, _, _, _): "\(realmUUID):\(userID)"
        case .passThrough: realmUUID.rawValue
        case .legacy(let user, _, _): "\(serverUUID):\(user)"
        case .gorush: "\(realmUUID):\(notificationID)"
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

/// `push.outbound` (and the retry and dead-letter topics): one ready-to-send push for
/// one device. Schema 2 added `attempts`, `last_error` and `not_before_ms`; schema 3
/// carries the token sealed (`sealed_token`, no `token`); schema 4 may carry the body
/// sealed (`sealed_body`, no `body`); schema 5 carries the provider body as the exact
/// bytes to send, in the JSON string `body_json`, instead of a JSON object in `body`.
/// Older records decode with those absent (a schema ≤ 4 `body` object is written out
/// canonically once, as the encryptor of that time would have sent it).
public struct OutboundRecord: WireObject, Equatable {
    public static let currentSchema = 5

    public var schema: Int
    public var notificationID: NotificationID
    public var deviceID: DeviceID
    public var realmUUID: RealmID
    public var provider: Provider
    /// The device token in the clear, in memory only while the record carries
    /// `sealedToken`: it is then never encoded. Empty after decoding a sealed record
    /// until the dispatcher opens `sealedToken`. Records before the token was sealed
    /// carry it here, in the clear, and still decode.
    public var token: String
    /// The token sealed with the pipeline key, bound to (notification, realm, device).
    /// When present, `token` is left out of the encoded record.
    public var sealedToken: SealedBlob?
    /// APNs topic (the app's bundle id); unused for FCM.
    public var appID: String?
    public var delivery: DeliveryClass
    /// The provider body, built once by the encryptor and sent unchanged: the APNs JSON
    /// body, or the FCM `data` object (all values strings), as canonical JSON bytes.
    /// Empty in memory while `sealedBody` holds it, until the dispatcher opens it.
    public var body: [UInt8]
    /// A body the relay can read (legacy Zulip content), sealed with the pipeline key and
    /// bound to (notification, realm, device). When present, `body` is not encoded.
    /// Schema 4.
    public var sealedBody: SealedBlob?
    /// How FCM and Huawei read `body`: nil, the data object (or string) alone; `message`,
    /// the message's own fields (`notification`, `data`, `android`, …) without the token,
    /// as gorush's API sends them.
    public var bodyForm: BodyForm?
    /// Unix seconds after which the push is useless; nil keeps the provider's default.
    public var expiresAt: Int64?
    public var collapseID: String?
    public var acceptedAtMs: Int64
    /// When the device's registration was last renewed (ms), to judge APNs 410 timestamps.
    public var registeredAtMs: Int64?
    /// Provider attempts made so far (nil: none yet).
    public var attempts: Int?
    /// The reason of the last retryable answer, carried to the dead-letter topic.
    public var lastError: String?
    /// On a retry topic: not to be sent before this time (ms since the epoch).
    public var notBeforeMs: Int64?

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

    public init(fields: WireFields) throws {
        schema = try fields.int("schema")
        notificationID = NotificationID(try fields.string("notification_id"))
        deviceID = DeviceID(try fields.int64("device_id"))
        realmUUID = RealmID(try fields.string("realm_uuid"))
        provider = try fields.named("provider")
        sealedToken = try fields.object(ifPresent: "sealed_token")
        // A record carries the token in one form or the other.
        token = sealedToken == nil ? try fields.string("token") : try fields.string(ifPresent: "token") ?? ""
        appID = try fields.string(ifPresent: "app_id")
        delivery = try fields.object("delivery")
        sealedBody = try fields.object(ifPresent: "sealed_body")
        bodyForm = try fields.named(ifPresent: "body_form")
        if sealedBody != nil {
            body = []
        } else if let text = try fields.string(ifPresent: "body_json") {
            body = Array(text.utf8)
        } else {
            body = Wire.canonical(try fields.value("body"))
        }
        expiresAt = try fields.int64(ifPresent: "expires_at")
        collapseID = try fields.string(ifPresent: "collapse_id")
        acceptedAtMs = try fields.int64("accepted_at_ms")
        registeredAtMs = try fields.int64(ifPresent: "registered_at_ms")
        attempts = try fields.int(ifPresent: "attempts")
        lastError = try fields.string(ifPresent: "last_error")
        notBeforeMs = try fields.int64(ifPresent: "not_before_ms")
    }

    /// The clear token is written only when the record has no sealed one, the body only
    /// when it is not sealed.
    public func write(to object: inout JSONObjectWriter) {
        object.field("accepted_at_ms", acceptedAtMs)
        object.field("app_id", appID)
        object.field("attempts", attempts)
        if sealedBody == nil { object.field("body_json", utf8: body) }
        if let bodyForm { object.field("body_form", bodyForm) }
        object.field("collapse_id", collapseID)
        object.field("delivery", delivery)
        object.field("device_id", deviceID.rawValue)
        object.field("expires_at", expiresAt)
        object.field("last_error", lastError)
        object.field("not_before_ms", notBeforeMs)
        object.field("notification_id", notificationID.rawValue)
        object.field("provider", provider)
        object.field("realm_uuid", realmUUID.rawValue)
        object.field("registered_at_ms", registeredAtMs)
        object.field("schema", schema)
        object.field("sealed_body", sealedBody)
        object.field("sealed_token", sealedToken)
        if sealedToken == nil { object.field("token", token) }
    }

    /// Partition key: one device's pushes stay in order.
    public var partitionKey: String { "\(deviceID)" }

    /// True when the push is useless at `nowMs` (its expiry has passed).
    public func isExpired(atMs nowMs: Int64) -> Bool {
        guard let expiresAt else { return false }
        return nowMs / 1000 > expiresAt
    }
}

/// How a provider body is to be read (`OutboundRecord.bodyForm`).
public enum BodyForm: String, Sendable, Equatable {
    /// The provider message's fields, without the token.
    case message
}

/// `push.deadletter`: a push the relay gave up on, with its last error, so an operator
/// can inspect it and re-drive it once the cause is fixed.
public struct DeadLetterRecord: WireObject, Equatable {
    public static let currentSchema = 1

    public enum Cause: String, Sendable {
        /// Retryable errors until the attempts ran out.
        case attemptsExhausted = "attempts_exhausted"
        /// Its expiry passed before it could be sent.
        case expired
        /// The provider refused it for good (bad payload, topic, credentials, no provider).
        case rejected
    }

    public var schema: Int
    public var cause: Cause
    public var lastError: String?
    public var httpStatus: Int?
    public var attempts: Int
    public var deadAtMs: Int64
    /// The push as it was last tried, so it can be re-driven: ciphertext, and the token
    /// sealed (only records from before tokens were sealed carry it in the clear).
    public var record: OutboundRecord

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

    public init(fields: WireFields) throws {
        schema = try fields.int("schema")
        cause = try fields.named("cause")
        lastError = try fields.string(ifPresent: "last_error")
        httpStatus = try fields.int(ifPresent: "http_status")
        attempts = try fields.int("attempts")
        deadAtMs = try fields.int64("dead_at_ms")
        record = try fields.object("record")
    }

    public func write(to object: inout JSONObjectWriter) {
        object.field("attempts", attempts)
        object.field("cause", cause)
        object.field("dead_at_ms", deadAtMs)
        object.field("http_status", httpStatus)
        object.field("last_error", lastError)
        object.field("record", record)
        object.field("schema", schema)
    }
}

/// `push.feedback`: a provider said a token is dead.
public struct FeedbackRecord: WireObject, Equatable {
    public static let currentSchema = 1

    public var schema: Int
    public var deviceID: DeviceID
    public var realmUUID: RealmID
    public var provider: Provider
    /// SHA-256 prefix of the token the provider rejected, so feedback can ignore a
    /// report about a token the device has since replaced.
    public var tokenFingerprint: String
    public var reason: String
    /// APNs 410 `timestamp` (ms): the token was invalid from then on.
    public var providerTimestampMs: Int64?
    public var notificationID: NotificationID
    public var observedAtMs: Int64

    public init(
        deviceID: DeviceID, realmUUID: RealmID, provider: Provider, tokenFingerprint: String, reason: String,
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

    public init(fields: WireFields) throws {
        schema = try fields.int("schema")
        deviceID = DeviceID(try fields.int64("device_id"))
        realmUUID = RealmID(try fields.string("realm_uuid"))
        provider = try fields.named("provider")
        tokenFingerprint = try fields.string("token_fingerprint")
        reason = try fields.string("reason")
        providerTimestampMs = try fields.int64(ifPresent: "provider_timestamp_ms")
        notificationID = NotificationID(try fields.string("notification_id"))
        observedAtMs = try fields.int64("observed_at_ms")
    }

    public func write(to object: inout JSONObjectWriter) {
        object.field("device_id", deviceID.rawValue)
        object.field("notification_id", notificationID.rawValue)
        object.field("observed_at_ms", observedAtMs)
        object.field("provider", provider)
        object.field("provider_timestamp_ms", providerTimestampMs)
        object.field("realm_uuid", realmUUID.rawValue)
        object.field("reason", reason)
        object.field("schema", schema)
        object.field("token_fingerprint", tokenFingerprint)
    }
}

/// The final outcome of one notification for one device.
public enum DeliveryOutcome: String, Sendable, Codable, CaseIterable {
    case sent
    case invalidToken = "invalid_token"
    case unknownDevice = "unknown_device"
    case failed
    case expired
    /// A redelivered or replayed push whose pair the provider had already accepted: not sent again.
    case alreadySent = "already_sent"
    /// The device's own preferences (Status push server) say not to notify; `reason` says which.
    case filtered
}

/// `push.deliveries`: one record per final outcome, for accounting and incident analysis.
public struct DeliveryRecord: WireObject, Equatable {
    public static let currentSchema = 1

    public var schema: Int
    public var notificationID: NotificationID
    public var realmUUID: RealmID
    public var deviceID: DeviceID?
    public var provider: Provider?
    public var outcome: DeliveryOutcome
    /// Provider reason or relay reason (`device_inactive`, `not_in_realm`, …).
    public var reason: String?
    public var httpStatus: Int?
    public var attempts: Int
    public var acceptedAtMs: Int64
    public var completedAtMs: Int64
    /// The provider's id for the push (APNs `apns-id`, FCM message name).
    public var providerMessageID: String?

    public init(
        notificationID: NotificationID, realmUUID: RealmID, deviceID: DeviceID?, provider: Provider?,
        outcome: DeliveryOutcome,
        reason: String?, httpStatus: Int? = nil, attempts: Int, acceptedAtMs: Int64, completedAtMs: Int64,
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

    public init(fields: WireFields) throws {
        schema = try fields.int("schema")
        notificationID = NotificationID(try fields.string("notification_id"))
        realmUUID = RealmID(try fields.string("realm_uuid"))
        deviceID = try fields.int64(ifPresent: "device_id").map { DeviceID($0) }
        provider = try fields.named(ifPresent: "provider")
        outcome = try fields.named("outcome")
        reason = try fields.string(ifPresent: "reason")
        httpStatus = try fields.int(ifPresent: "http_status")
        attempts = try fields.int("attempts")
        acceptedAtMs = try fields.int64("accepted_at_ms")
        completedAtMs = try fields.int64("completed_at_ms")
        providerMessageID = try fields.string(ifPresent: "provider_message_id")
    }

    public func write(to object: inout JSONObjectWriter) {
        object.field("accepted_at_ms", acceptedAtMs)
        object.field("attempts", attempts)
        object.field("completed_at_ms", completedAtMs)
        object.field("device_id", deviceID?.rawValue)
        object.field("http_status", httpStatus)
        object.field("notification_id", notificationID.rawValue)
        object.field("outcome", outcome)
        object.field("provider", provider)
        object.field("provider_message_id", providerMessageID)
        object.field("realm_uuid", realmUUID.rawValue)
        object.field("reason", reason)
        object.field("schema", schema)
    }
}

/// Topic names, configurable per deployment; these are the defaults.
public struct TopicNames: Sendable, Equatable {
    public var requests = "push.requests"
    public var outbound = "push.outbound"
    public var feedback = "push.feedback"
    public var deliveries = "push.deliveries"
    public var deadLetter = "push.deadletter"
    /// Retry topic names start with this and end with the retry stage: `push.retry.1`, `push.retry.2`, …
    public var retryPrefix = "push.retry."

    public init() {}

    /// The retry topic of stage `stage` (1-based): named by stage, not by delay, so
    /// changing the delays never strands records in a topic nobody reads.
    public func retry(_ stage: Int) -> String { "\(retryPrefix)\(stage)" }

    public func all(retryStages: Int) -> [String] {
        [requests, outbound, feedback, deliveries, deadLetter] + (1...max(1, retryStages)).map(retry)
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
