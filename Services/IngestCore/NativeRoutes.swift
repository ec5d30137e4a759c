import DeviceState
import Foundation
import Hummingbird
import Metrics
import PushCrypto
import PushModels
import ServiceKit

/// The native API, for realms whose devices hand the relay their push keys.
struct NativeController: Sendable {
    let authenticator: ServerAuthenticator
    let registrar: DeviceRegistrar
    let ownership: RealmOwnership
    let devices: any DeviceRegistry
    let realms: any RealmRegistry
    let idempotency: any IdempotencyStore
    let acceptor: Acceptor
    let sealer: PayloadSealer
    let bouncerKeys: BouncerKeyring
    let limits: Limits
    /// What the dispatchers can send to (a dry run says whether a device's provider is configured).
    let providers: CachedProviderDirectory

    func routes() -> RouteCollection<IngestContext> {
        let router = RouteCollection(context: IngestContext.self)
        router.post("/v1/realms") { request, context in try await registerRealm(request, context: context) }
        router.post("/v1/devices") { request, context in try await registerDevice(request, context: context) }
        router.delete("/v1/devices/:device_id") { request, context in
            try await deleteDevice(request, context: context, id: context.parameters.get("device_id"))
        }
        router.get("/v1/devices") { request, context in try await listDevices(request, context: context) }
        router.post("/v1/notify") { request, context in try await notify(request, context: context) }
        router.get("/v1/feedback") { request, context in try await feedback(request, context: context) }
        router.get("/v1/bouncer-public-keys") { _, _ in
            success(["public_keys": .array(bouncerKeys.publicKeysBase64.map { .string($0) })])
        }
        return router
    }

    /// `POST /v1/realms {realm_uuid}`: the explicit step that makes a realm the calling
    /// server's. 201 when new, 200 when it already was; a realm has one owner for good.
    func registerRealm(_ request: Request, context: IngestContext) async throws -> Response {
        let server = try await authenticator.authenticate(request, context: context, api: .native)
        let body = try await RequestFields.read(request, limit: limits.maxBodyBytes)
        let realm = RealmID(try body.uuid("realm_uuid"))
        switch try await realms.register(realm, to: server, maxRealms: limits.maxRealmsPerServer) {
        case .registered: return success(["realm_uuid": .string(realm.rawValue), "created": true], status: .created)
        case .alreadyYours: return success(["realm_uuid": .string(realm.rawValue), "created": false])
        case .taken:
            throw APIError(
                status: .conflict, code: "REALM_UNAVAILABLE", message: "This realm uuid cannot be registered",
                field: "realm_uuid")
        case .quotaExceeded:
            throw APIError.realmQuotaExceeded(limit: limits.maxRealmsPerServer)
        }
    }

    func registerDevice(_ request: Request, context: IngestContext) async throws -> Response {
        let server = try await authenticator.authenticate(request, context: context, api: .native)
        let body = try await RequestFields.read(request, limit: limits.maxBodyBytes)
        let realm = RealmID(try body.uuid("realm_uuid"))
        let userID = try body.int("user_id")
        let registration: OpenedRegistration
        if body.has("encrypted_push_registration") {
            registration = try registrar.openRegistration(
                sealed: try body.string("encrypted_push_registration"),
                bouncerPublicKey: try body.string("bouncer_public_key"))
        } else {
            registration = try DeviceRegistrar.tokenAndApp(
                kind: try DeviceRegistrar.nativeTokenKind(body), token: try Self.nativeToken(body),
                appID: try body.optionalString("ios_app_id"), path: "")
        }
        let pushKey = try Self.deviceKey(body, provider: registration.token.provider)
        let account = try body.optionalInt("push_account_id")
        try await ownership.requireOwn(realm, server: server)
        let (id, created) = try await registrar.registerWithinQuota(
            DeviceRegistration(
                realmUUID: realm, userID: userID, token: registration.token, appID: registration.appID,
                pushAccountID: account, pushKey: pushKey, api: .native),
            server: server)
        return success(["device_id": .int(id.rawValue), "created": .bool(created)], status: created ? .created : .ok)
    }

    /// How the device's notifications are encrypted, as the listing shows it.
    static func encryptionName(_ device: DeviceRecord) -> String {
        if let scheme = device.currentKey?.scheme { return scheme.rawValue }
        switch device.provider {
        case .webpush: return EncryptionScheme.aes128gcm.rawValue
        case .simplepush:
            return device.token.hasPrefix("{") ? EncryptionScheme.aes128gcm.rawValue : "none (wake-up only)"
        default: return "none"
        }
    }

    /// The key a device's notifications are encrypted with:
    /// - `push_key` and `push_key_id` (Zulip's secretbox key) for APNs, FCM, APNs VoIP,
    ///   Huawei and WNS devices;
    /// - or, for FCM and APNs VoIP, a Telegram-style `secret` (the 256-byte MTProto auth
    ///   key, base64 or base64url) instead;
    /// - none for Web Push and simple push: a message is encrypted to the subscription's
    ///   own keys, and a wake-up carries no content.
    static func deviceKey(_ body: RequestFields, provider: Provider) throws -> (id: UInt32, key: PushKey)? {
        let hasKey = body.has("push_key") || body.has("push_key_id")
        if provider == .webpush || provider == .simplepush {
            guard !hasKey, !body.has("secret") else {
                throw APIError.badRequest(
                    "push_key, secret: not used for \(provider.rawValue) tokens; messages are encrypted to the subscription's keys",
                    field: hasKey ? "push_key" : "secret")
            }
            return nil
        }
        if let secretText = try body.optionalString("secret") {
            guard provider == .fcm || provider == .apnsVoIP else {
                throw APIError.badRequest(
                    "secret: only FCM and APNs VoIP devices encrypt with an MTProto secret", field: "secret")
            }
            guard !hasKey else {
                throw APIError.badRequest("secret: give push_key or secret, not both", field: "secret")
            }
            let bytes = Data(base64Encoded: secretText).map(Array.init) ?? Base64URL.decode(secretText)
            guard let bytes else { throw APIError.badRequest("secret: must be base64 or base64url", field: "secret") }
            do {
                let key = try PushKey(mtprotoAuthKey: bytes)
                return (key.mtprotoKeyID, key)
            } catch {
                throw APIError.invalid(error, code: "INVALID_PUSH_KEY")
            }
        }
        let key: PushKey
        do {
            key = try PushKey(base64: try body.string("push_key"))
        } catch let error as PayloadValidationError {
            throw APIError.invalid(error, code: "INVALID_PUSH_KEY")
        }
        let keyID = try body.int("push_key_id")
        guard let keyID32 = UInt32(exactly: keyID) else {
            throw APIError.badRequest("push_key_id: must be an unsigned 32-bit integer", field: "push_key_id")
        }
        return (keyID32, key)
    }

    func deleteDevice(_ request: Request, context: IngestContext, id: String?) async throws -> Response {
        let server = try await authenticator.authenticate(request, context: context, api: .native)
        guard
            // One canonical form: `007` and `+7` are not device 7.
            let id = id.flatMap({ Syntax.canonicalInt64(Substring($0)) }).flatMap({ $0 > 0 ? DeviceID($0) : nil })
        else {
            throw APIError.deviceNotFound
        }
        // Another server's device answers 404 too: its existence is not disclosed.
        // Zulip legacy-API devices are removed through that API (remotes/push/unregister).
        guard let device = try await devices.device(id), device.zulipLegacyOwner == nil,
            try await ownership.owner(of: device.realmUUID) == server
        else { throw APIError.deviceNotFound }
        // Only the call that removed it takes it off the quota (two deletes race).
        if try await devices.delete(device) { try await realms.countDevice(server: server, by: -1) }
        return success(["device_id": .int(id.rawValue)])
    }

    func listDevices(_ request: Request, context: IngestContext) async throws -> Response {
        let server = try await authenticator.authenticate(request, context: context, api: .native)
        let query = request.uri.queryParameters
        guard let realmText = query.get("realm_uuid"),
            let realm = Syntax.canonicalUUID(String(realmText)).map(RealmID.init)
        else { throw APIError.badRequest("realm_uuid: must be a UUID", field: "realm_uuid") }
        guard let userID = query.get("user_id").flatMap({ Syntax.canonicalInt64(Substring($0)) }) else {
            throw APIError.badRequest("user_id: must be an integer", field: "user_id")
        }
        try await ownership.requireOwn(realm, server: server)
        let found = try await devices.devices(try await devices.deviceIDs(realm: realm, userID: userID))
        let list: [JSONValue] = found.values.sorted { $0.id < $1.id }.map { d in
            var entry: [String: JSONValue] = [
                "device_id": .int(d.id.rawValue), "token_kind": .string(d.provider.rawValue),
                "token": .string(DeviceToken.redact(d.token)), "status": .string(d.status.name),
                "registered_at_ms": .int(d.registeredAtMs),
                "push_key_ids": .array(d.keys.keys.sorted().map { .int(Int64($0)) }),
            ]
            if let number = Provider.telegramTokenTypes.first(where: { $0.value == d.provider })?.key {
                entry["token_type"] = .int(Int64(number))
            }
            entry["encryption"] = .string(Self.encryptionName(d))
            if let app = d.appID { entry["ios_app_id"] = .string(app) }
            if let account = d.pushAccountID { entry["push_account_id"] = .int(account) }
            if let current = d.currentKeyID { entry["current_push_key_id"] = .int(Int64(current)) }
            if let reason = d.status.invalidReason { entry["invalid_reason"] = .string(reason.name) }
            return .object(entry)
        }
        return success(["devices": .array(list)])
    }

    /// The token as text. A Web Push subscription may also come as the JSON object
    /// itself rather than as a string holding it.
    static func nativeToken(_ body: RequestFields) throws -> String {
        if let object = body.json["token"], object.objectValue != nil {
            return String(decoding: Wire.canonical(object), as: UTF8.self)
        }
        return try body.string("token")
    }

    func notify(_ request: Request, context: IngestContext) async throws -> Response {
        let server = try await authenticator.authenticate(request, context: context, api: .native)
        let key = try IdempotencyKey(request)
        let body = try await RequestFields.read(request, limit: limits.maxBodyBytes)
        let realm = RealmID(try body.uuid("realm_uuid"))
        let userID = try body.int("user_id")
        let (type, payload) = try notificationPayload(body, userID: userID)
        let requestedIDs = try deviceIDs(body)
        let plaintext = try Self.plaintext(payload, limit: limits.maxPlaintextBytes)
        let dryRunMode = try Self.dryRunMode(body)
        if dryRunMode != .off {
            let targets = try await targets(
                realm: realm, userID: userID, requestedIDs: requestedIDs,
                ownerCheck: { try await ownership.requireOwn(realm, server: server) })
            if dryRunMode == .pipeline {
                return try await pipelineDryRun(
                    server: server, realm: realm, userID: userID, targets: targets, type: type, plaintext: plaintext)
            }
            return try await dryRun(realm: realm, userID: userID, ids: targets.ids, type: type, plaintext: plaintext)
        }
        guard let key else {
            // Without a key nothing is written before the owner check: it runs alongside the
            // first read of the targets (see `targets`).
            let targets = try await targets(
                realm: realm, userID: userID, requestedIDs: requestedIDs,
                ownerCheck: { try await ownership.requireOwn(realm, server: server) })
            return try await acceptNotification(
                server: server, realm: realm, userID: userID, targets: targets, type: type, plaintext: plaintext
            ).http
        }
        try await ownership.requireOwn(realm, server: server)
        if let earlier = try await key.claim(
            server: server, fingerprint: Fingerprint.hex(Fingerprint.sha256(body.bytes)), store: idempotency,
            publishTimeout: limits.publishTimeout)
        {
            return earlier
        }
        let response: StoredAnswer
        do {
            response = try await acceptNotification(
                server: server, realm: realm, userID: userID,
                targets: try await targets(
                    realm: realm, userID: userID, requestedIDs: requestedIDs, ownerCheck: {}),
                type: type, plaintext: plaintext)
        } catch {
            try? await key.abandon(server: server, store: idempotency)
            throw error
        }
        // The notification is accepted: the answer is 202 whatever happens to the stored
        // copy. If it cannot be kept, the claim stays pending until it expires, so a retry
        // meanwhile gets 409 rather than a second notification.
        do {
            try await key.complete(
                server: server, response: response, store: idempotency, ttlSeconds: limits.idempotencyTTLSeconds)
        } catch {
            RelayMetrics.idempotencyStoreFailures.increment()
        }
        return response.http
    }

    /// The notification's type and its payload: Zulip's, or Telegram's
    /// `{"data": {"loc_key", …}}`, for `userID`.
    func notificationPayload(_ body: RequestFields, userID: Int64) throws -> (NotificationType, JSONValue) {
        guard let payloadJSON = body.json["payload"] else {
            throw APIError.badRequest("payload: is required", field: "payload")
        }
        let type: NotificationType
        let payloadUserID: Int64?
        let userField: String
        do {
            if TelegramNotification.isTelegram(payloadJSON) {
                let telegram = try TelegramNotification(validating: payloadJSON)
                (type, payloadUserID, userField) = (telegram.type, telegram.userID, "payload.data.user_id")
            } else {
                let zulip = try ZulipNotification(validating: payloadJSON)
                (type, payloadUserID, userField) = (zulip.type, zulip.userID, "payload.user_id")
            }
        } catch {
            throw APIError.invalid(error, code: "INVALID_PAYLOAD")
        }
        if let payloadUserID, payloadUserID != userID {
            throw APIError.badRequest("\(userField): must equal user_id", code: "INVALID_PAYLOAD", field: userField)
        }
        return (type, payloadJSON)
    }

    /// The payload's plaintext (canonical JSON), within the plaintext limit.
    static func plaintext(_ payload: JSONValue, limit: Int) throws -> [UInt8] {
        let plaintext = Wire.canonical(payload)
        guard plaintext.count <= limit else {
            throw APIError(
                status: .contentTooLarge, code: "PAYLOAD_TOO_LARGE",
                message:
                    "payload: encrypted it would exceed the providers' 4096-byte limit (max \(limit) bytes of JSON)",
                field: "payload")
        }
        return plaintext
    }

    /// `device_ids`, when given: each once (a repeated id is one device: one push, listed once).
    func deviceIDs(_ body: RequestFields) throws -> [DeviceID]? {
        guard body.has("device_ids") else { return nil }
        let ids: [DeviceID]
        do { ids = Self.unique(try body.reader.intArray("device_ids").map { DeviceID($0) }) } catch {
            throw APIError.invalid(error)
        }
        guard ids.count <= limits.maxDeviceIDs else {
            throw APIError.tooManyTargets(field: "device_ids", limit: limits.maxDeviceIDs)
        }
        return ids
    }

    static func unique(_ ids: [DeviceID]) -> [DeviceID] {
        var seen = Set<DeviceID>()
        return ids.filter { seen.insert($0).inserted }
    }

    /// The devices asked for, or else all the user's, each with its standing. `ownerCheck`
    /// runs alongside the first read and shares its Redis round trip; that read is one
    /// round trip whatever the realm holds, and nothing that depends on what it found is
    /// read before the check passes, so a server learns nothing of another's realm, not
    /// even from how long its 404 took.
    func targets(
        realm: RealmID, userID: Int64, requestedIDs: [DeviceID]?,
        ownerCheck: @Sendable () async throws -> Void
    ) async throws -> Targets {
        async let owned: Void = ownerCheck()
        // Counted from each device's standing alone: the encryptor is the one that opens
        // tokens and keys, once, for the targets published here.
        if let requestedIDs {
            let standings = try await devices.standings(requestedIDs)
            try await owned
            return Targets(ids: requestedIDs, standings: standings)
        }
        let ids = try await devices.deviceIDs(realm: realm, userID: userID)
        try await owned
        return Targets(ids: ids, standings: try await devices.standings(ids))
    }

    struct Targets {
        let ids: [DeviceID]
        var standings: [DeviceID: DeviceStanding]
    }

    /// Counts the targets, seals and publishes one notification; the answer it gives.
    func acceptNotification(
        server: ServerID, realm: RealmID, userID: Int64, targets: Targets,
        type: NotificationType, plaintext: [UInt8], sendMode: SendMode? = nil
    ) async throws -> StoredAnswer {
        var deleteIDs: [DeviceID] = []
        var deliverable = 0
        for id in targets.ids {
            guard let standing = targets.standings[id], standing.isDeliverable(realm: realm, userID: userID) else {
                deleteIDs.append(id)
                continue
            }
            deliverable += 1
        }
        let notificationID = NotificationID.random()
        if !targets.ids.isEmpty {
            let sealed = try sealer.seal(plaintext, notificationID: notificationID, realm: realm, userID: userID)
            var record = PushRequestRecord(
                notificationID: notificationID, serverUUID: server, realmUUID: realm,
                acceptedAtMs: Wire.nowMillis(),
                request: .native(userID: userID, deviceIDs: targets.ids, type: type, sealedPayload: sealed))
            record.sendMode = sendMode
            try await acceptor.publish(record)
        }
        return StoredAnswer(
            status: 202,
            fields: [
                "notification_id": .string(notificationID.rawValue), "device_count": .int(Int64(deliverable)),
                "delete_device_ids": .array(Array(Set(deleteIDs)).sorted().map { .int($0.rawValue) }),
            ])
    }

    func feedback(_ request: Request, context: IngestContext) async throws -> Response {
        let server = try await authenticator.authenticate(request, context: context, api: .native)
        let query = request.uri.queryParameters
        guard let realmText = query.get("realm_uuid"),
            let realm = Syntax.canonicalUUID(String(realmText)).map(RealmID.init)
        else { throw APIError.badRequest("realm_uuid: must be a UUID", field: "realm_uuid") }
        let after: String? = query.get("after").map { String($0) }
        if let after, !Self.isCursor(after) {
            throw APIError.badRequest("after: must be a cursor returned by this endpoint", field: "after")
        }
        var limit = 100
        if let text = query.get("limit") {
            guard let n = Syntax.parseUInt64(Substring(text)), (1...1000).contains(n) else {
                throw APIError.badRequest("limit: must be a whole number from 1 to 1000", field: "limit")
            }
            limit = Int(n)
        }
        try await ownership.requireOwn(realm, server: server)
        let entries = try await devices.feedback(realm: realm, after: after, limit: limit)
        let invalidated: [JSONValue] = entries.map { entry in
            let fields: [String: JSONValue] = [
                "device_id": .int(entry.deviceID.rawValue), "reason": .string(entry.reason), "at_ms": .int(entry.atMs),
                "cursor": .string(entry.cursor),
            ]
            return .object(fields)
        }
        let next: JSONValue
        if let last = entries.last {
            next = .string(last.cursor)
        } else if let after {
            next = .string(after)
        } else {
            next = .null
        }
        return success(["invalidated": .array(invalidated), "next_cursor": next])
    }

    /// A Redis stream id as the feedback endpoint hands them out: `ms-seq`, two
    /// ASCII-decimal numbers that each fit in UInt64, without leading zeros (the one
    /// form Redis writes them in).
    static func isCursor(_ text: String) -> Bool {
        let parts = text.split(separator: "-", omittingEmptySubsequences: false)
        let numbers = parts.compactMap { part in
            part.count > 1 && part.first == "0" ? nil : Syntax.parseUInt64(part)
        }
        // The largest stream id has nothing after it; Redis refuses it as an exclusive start.
        return parts.count == 2 && numbers.count == 2 && numbers != [.max, .max]
    }
}
