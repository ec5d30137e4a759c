import DeviceState
import Foundation
import Hummingbird
import PushCrypto
import PushModels

/// Zulip's legacy (non-E2EE) bouncer API (docs/api/zulip.md §5): the server
/// registers its users' tokens with the relay and sends its APNs and FCM payloads in
/// the clear; the relay builds the provider requests as Zulip's bouncer does. The
/// payloads are content the relay can read: they travel sealed with the pipeline key
/// and are never logged.
struct ZulipLegacyController: Sendable {
    let authenticator: ServerAuthenticator
    let ownership: RealmOwnership
    let legacyDevices: any LegacyDeviceRegistry
    let realms: any RealmRegistry
    let acceptor: Acceptor
    let sealer: PayloadSealer
    let limits: Limits

    func routes() -> RouteCollection<IngestContext> {
        let router = RouteCollection(context: IngestContext.self)
        router.post("/api/v1/remotes/push/register") { request, context in
            try await legacyRegister(request, context: context)
        }
        router.post("/api/v1/remotes/push/unregister") { request, context in
            let (server, body) = try await legacyRequest(request, context: context)
            let user = try Self.legacyUser(body)
            _ = try await legacyRealm(body, server: server)
            let removed: Int
            if let token = try? Self.legacyToken(body) {
                removed = try await legacyDevices.unregister(server: server, user: user, token: token)
            } else {
                removed = 0
            }
            guard removed > 0 else { throw APIError.badRequest("Token does not exist") }
            try await realms.countDevice(server: server, by: -Int64(removed))
            return success()
        }
        router.post("/api/v1/remotes/push/unregister/all") { request, context in
            let (server, body) = try await legacyRequest(request, context: context)
            let user = try Self.legacyUser(body)
            _ = try await legacyRealm(body, server: server)
            let removed = try await legacyDevices.unregisterAll(server: server, user: user)
            if removed > 0 { try await realms.countDevice(server: server, by: -Int64(removed)) }
            return success()
        }
        router.post("/api/v1/remotes/push/notify") { request, context in
            try await legacyNotify(request, context: context)
        }
        router.post("/api/v1/remotes/push/test_notification") { request, context in
            try await legacyTestNotification(request, context: context)
        }
        return router
    }

    func legacyRequest(_ request: Request, context: IngestContext) async throws -> (ServerID, RequestFields) {
        let server = try await authenticator.authenticate(request, context: context, api: .zulip)
        return (server, try await RequestFields.read(request, limit: limits.maxBodyBytes))
    }

    /// `user_uuid` and/or `user_id`; one is required.
    static func legacyUser(_ body: RequestFields) throws -> ZulipLegacyUser {
        let uuid: String? =
            switch body.json["user_uuid"] {
            case nil, .null?: nil
            default: try body.uuid("user_uuid")
            }
        let id: Int64? =
            switch body.json["user_id"] {
            case nil, .null?: nil
            default: try body.int("user_id")
            }
        guard uuid != nil || id != nil else { throw APIError.badRequest("Missing user_id or user_uuid") }
        return ZulipLegacyUser(userID: id, userUUID: uuid)
    }

    /// The realm named by `realm_uuid` when the caller uploaded it (legacy calls go ahead
    /// without one, as in Zulip's bouncer); another server's realm is refused.
    func legacyRealm(_ body: RequestFields, server: ServerID) async throws -> RealmID? {
        switch body.json["realm_uuid"] {
        case nil, .null?: return nil
        default:
            let realm = RealmID(try body.uuid("realm_uuid"))
            return try await ownership.isZulipRealm(realm, server: server) ? realm : nil
        }
    }

    /// `token_kind` (1 APNs, 2 FCM) and `token`, with Zulip's bouncer's messages.
    static func legacyToken(_ body: RequestFields) throws -> DeviceToken {
        let kind = try body.int("token_kind")
        let token = try body.string("token")
        let provider: Provider
        switch kind {
        case 1: provider = .apns
        case 2: provider = .fcm
        default: throw APIError.badRequest("Invalid token type")
        }
        guard !token.isEmpty, token.utf8.count <= DeviceToken.maximumLength else {
            throw APIError.badRequest("Empty or invalid length token")
        }
        do {
            return try DeviceToken(provider: provider, value: token, rules: .zulip)
        } catch {
            throw APIError.badRequest(provider == .apns ? "Invalid APNS token" : "Invalid FCM token")
        }
    }

    /// `remotes/push/register`: `token`, `token_kind`, `ios_app_id` (APNs), and the user.
    func legacyRegister(_ request: Request, context: IngestContext) async throws -> Response {
        let (server, body) = try await legacyRequest(request, context: context)
        let token = try Self.legacyToken(body)
        var appID: String?
        if token.provider == .apns {
            guard let given = try body.optionalString("ios_app_id") else {
                throw APIError.badRequest("Missing ios_app_id")
            }
            guard Syntax.isZulipAppID(given) else { throw APIError.badRequest("ios_app_id has invalid format") }
            appID = given
        }
        let user = try Self.legacyUser(body)
        let realm = try await legacyRealm(body, server: server)
        // A device already registered renews, whatever the quota.
        if try await realms.deviceCount(server: server) >= Int64(limits.maxDevicesPerServer),
            try await !legacyDevices.isRegistered(server: server, user: user, token: token)
        {
            throw APIError.deviceQuotaExceeded(limit: limits.maxDevicesPerServer)
        }
        let (_, delta) = try await legacyDevices.register(
            server: server, user: user, token: token, appID: appID, realm: realm,
            nowMs: Wire.nowMillis())
        if delta != 0 { try await realms.countDevice(server: server, by: delta) }
        return success()
    }

    /// `remotes/push/notify`: sends the server's payloads to every legacy device of the
    /// user, and answers Zulip's fields. The counts are the user's devices; the tokens
    /// the server listed that the relay does not hold come back in `deleted_devices`.
    func legacyNotify(_ request: Request, context: IngestContext) async throws -> Response {
        let (server, body) = try await legacyRequest(request, context: context)
        let user = try Self.legacyUser(body)
        let apns = body.json["apns_payload"] ?? [:]
        let gcm = body.json["gcm_payload"] ?? [:]
        guard apns.objectValue != nil else {
            throw APIError.badRequest("apns_payload: must be an object", field: "apns_payload")
        }
        guard gcm.objectValue != nil else {
            throw APIError.badRequest("gcm_payload: must be an object", field: "gcm_payload")
        }
        let priority: String
        do {
            priority = try ZulipLegacy.fcmPriority(gcmOptions: body.json["gcm_options"], gcmPayload: gcm)
        } catch {
            throw APIError.badRequest(error.message)
        }
        let androidListed = try Self.tokenList(body, "android_devices")
        let appleListed = try Self.tokenList(body, "apple_devices")
        let realm = try await legacyRealm(body, server: server)
        let (apnsPayload, gcmPayload) = ZulipLegacy.truncatingRemoval(apns: apns, gcm: gcm)
        let plaintext = try Wire.encode(
            ZulipLegacyPayload(apnsPayload: apnsPayload, gcmPayload: gcmPayload, fcmPriority: priority))
        guard plaintext.count <= limits.maxBodyBytes else {
            throw APIError(status: .contentTooLarge, code: "REQUEST_TOO_LARGE", message: "The payloads are too large")
        }

        let (entries, fields) = try await legacyDevicesOf(server: server, user: user)
        var accepted: NotificationID?
        if !entries.isEmpty {
            accepted = try await publishLegacy(
                server: server, realm: realm, user: user, deviceIDs: entries.map(\.deviceID), plaintext: plaintext)
        }
        func unknown(_ tokens: [String], _ provider: Provider) -> [JSONValue] {
            tokens.filter { text in
                guard let token = try? DeviceToken(provider: provider, value: text, rules: .zulip) else { return true }
                return !legacyDevices.knows(token, in: fields)
            }.sorted().map { .string($0) }
        }
        var response = success([
            "total_android_devices": .int(Int64(entries.count { $0.provider == .fcm })),
            "total_apple_devices": .int(Int64(entries.count { $0.provider == .apns })),
            "deleted_devices": [
                "android_devices": .array(unknown(androidListed, .fcm)),
                "apple_devices": .array(unknown(appleListed, .apns)),
            ],
            "realm": realm == nil ? .null : RealmOwnership.zulipPushStatus,
        ])
        if let accepted { response.headers[NotificationStatusController.notificationIDsHeader] = accepted.rawValue }
        return response
    }

    /// `remotes/push/test_notification`: one test push to one registered device.
    func legacyTestNotification(_ request: Request, context: IngestContext) async throws -> Response {
        let (server, body) = try await legacyRequest(request, context: context)
        let user = try Self.legacyUser(body)
        let realm = try await legacyRealm(body, server: server)
        let base = body.json["base_payload"] ?? [:]
        guard base.objectValue != nil else {
            throw APIError.badRequest("base_payload: must be an object", field: "base_payload")
        }
        let notRecognized = APIError.badRequest(
            "Device not recognized by the push bouncer", code: "INVALID_REMOTE_PUSH_DEVICE_TOKEN")
        guard let token = try? Self.legacyToken(body) else { throw notRecognized }
        let forms = Set(legacyDevices.fields(token))
        let (entries, _) = try await legacyDevicesOf(server: server, user: user)
        guard let id = entries.first(where: { forms.contains($0.field) })?.deviceID else { throw notRecognized }
        let (apns, gcm) = ZulipLegacy.testNotification(
            basePayload: base, nowSeconds: Int64(Date().timeIntervalSince1970))
        let plaintext = try Wire.encode(ZulipLegacyPayload(apnsPayload: apns, gcmPayload: gcm, fcmPriority: "high"))
        let accepted = try await publishLegacy(
            server: server, realm: realm, user: user, deviceIDs: [id], plaintext: plaintext)
        var response = success()
        response.headers[NotificationStatusController.notificationIDsHeader] = accepted.rawValue
        return response
    }

    /// The user's legacy devices; duplicates folded on the way come off the server's count.
    func legacyDevicesOf(server: ServerID, user: ZulipLegacyUser) async throws -> (
        entries: [ZulipLegacyEntry], fields: Set<String>
    ) {
        let (entries, fields, folded) = try await legacyDevices.devices(server: server, user: user)
        if folded > 0 { try await realms.countDevice(server: server, by: -Int64(folded)) }
        return (entries, fields)
    }

    /// A list of tokens the server believes it has (absent: none).
    static func tokenList(_ body: RequestFields, _ name: String) throws -> [String] {
        guard let value = body.json[name], value != .null else { return [] }
        guard let items = value.arrayValue, items.count <= 10_000,
            let tokens = Optional(items.compactMap(\.stringValue)), tokens.count == items.count
        else {
            throw APIError.badRequest("\(name): must be a list of tokens", field: name)
        }
        return tokens
    }

    /// Seals the payloads with the pipeline key and publishes one legacy request; its id.
    @discardableResult
    func publishLegacy(
        server: ServerID, realm: RealmID?, user: ZulipLegacyUser, deviceIDs: [DeviceID], plaintext: [UInt8]
    ) async throws -> NotificationID {
        let notificationID = NotificationID.random()
        let realmUUID = realm ?? RealmID("")
        let sealed = try sealer.seal(plaintext, notificationID: notificationID, realm: realmUUID, userID: nil)
        let record = PushRequestRecord(
            notificationID: notificationID, serverUUID: server, realmUUID: realmUUID,
            acceptedAtMs: Wire.nowMillis(),
            request: .legacy(user: user.key, deviceIDs: deviceIDs, sealedPayload: sealed))
        try await acceptor.publish(record)
        return notificationID
    }
}
