import DeviceState
import Foundation
import Hummingbird
import PushCrypto
import PushModels

/// Zulip's E2EE push API on the bouncer (docs/protocols.md §1): devices registered with
/// sealed registrations, and notifications the realm encrypted already, passed through.
struct ZulipE2EEController: Sendable {
    let authenticator: ServerAuthenticator
    let registrar: DeviceRegistrar
    let ownership: RealmOwnership
    let devices: any DeviceRegistry
    let acceptor: Acceptor
    let limits: Limits

    func routes() -> RouteCollection<IngestContext> {
        let router = RouteCollection(context: IngestContext.self)
        router.post("/api/v1/remotes/push/e2ee/register") { request, context in
            try await registerE2EEDevice(request, context: context)
        }
        router.post("/api/v1/remotes/push/e2ee/notify") { request, context in
            try await bouncerNotify(request, context: context)
        }
        return router
    }

    /// `remotes/push/e2ee/register`, both dialects: Zulip 12.x sends `token_id`, which must
    /// be the sealed token's; Zulip 11.x sends `push_account_id` and reads back `device_id`.
    func registerE2EEDevice(_ request: Request, context: IngestContext) async throws -> Response {
        let server = try await authenticator.authenticate(request, context: context, api: .zulip)
        let body = try await RequestFields.read(request, limit: limits.maxBodyBytes)
        let realm = RealmID(try body.uuid("realm_uuid"))
        let tokenID = try body.optionalString("token_id")
        let account = tokenID == nil ? try body.int("push_account_id") : nil
        let sealed = try body.string("encrypted_push_registration")
        let publicKey = try body.string("bouncer_public_key")
        try await ownership.requireZulipRealm(realm, server: server)
        let registration = try registrar.openRegistration(
            sealed: sealed, bouncerPublicKey: publicKey, rules: .zulip, tokenID: tokenID)
        let id = try await registrar.registerWithinQuota(
            DeviceRegistration(
                realmUUID: realm, userID: nil, token: registration.token, appID: registration.appID,
                pushAccountID: account, pushKey: nil, api: .zulipE2EE),
            server: server
        ).id
        guard let tokenID else { return success(["device_id": .int(id.rawValue)]) }
        try await devices.bindZulipTokenID(tokenID, realm: realm, to: id)
        return success()
    }

    /// `remotes/push/e2ee/notify`, both dialects: items name their device by `token_id`
    /// (12.x, answered with `delete_token_ids`) or `device_id` (11.x, `delete_device_ids`).
    func bouncerNotify(_ request: Request, context: IngestContext) async throws -> Response {
        let server = try await authenticator.authenticate(request, context: context, api: .zulip)
        let body = try await RequestFields.read(request, limit: limits.maxBodyBytes)
        let realm = RealmID(try body.uuid("realm_uuid"))
        var parsed = try pushRequests(body)
        try await ownership.requireZulipRealm(realm, server: server)
        let byTokenID = parsed.first?.tokenID != nil
        if byTokenID {
            // 12.x: the realm's token ids name the devices.
            let found = try await devices.devices(
                zulipTokenIDs: parsed.map { $0.tokenID ?? "" }, realm: realm)
            for i in parsed.indices {
                let device: DeviceID? = i < found.count ? found[i] : nil
                parsed[i].item.deviceID = device ?? DeviceID(-1)
            }
        }
        let known = try await devices.devices(parsed.map(\.item.deviceID).filter { $0.rawValue >= 0 })
        var deleted: [JSONValue] = []
        var items: [PassThroughItem] = []
        var counts: [Provider: Int] = [:]
        for (item, tokenID) in parsed {
            // A legacy-API device is not an E2EE one, even in the caller's realm.
            guard let device = known[item.deviceID], device.realmUUID == realm, device.status == .active,
                device.zulipLegacyOwner == nil
            else {
                deleted.append(tokenID.map { .string($0) } ?? .int(item.deviceID.rawValue))
                continue
            }
            counts[device.provider, default: 0] += 1
            items.append(item)
        }
        var accepted: NotificationID?
        if !items.isEmpty {
            let record = PushRequestRecord(
                notificationID: NotificationID.random(), serverUUID: server,
                realmUUID: realm,
                acceptedAtMs: Wire.nowMillis(), request: .passThrough(items: items))
            try await acceptor.publish(record)
            accepted = record.notificationID
        }
        var answer: [String: JSONValue] = [
            "apple_successfully_sent_count": .int(Int64(counts[.apns] ?? 0)),
            "android_successfully_sent_count": .int(Int64(counts[.fcm] ?? 0)),
            "realm_push_status": RealmOwnership.zulipPushStatus,
        ]
        let sorted = Array(Set(deleted)).sorted { Wire.canonical($0).lexicographicallyPrecedes(Wire.canonical($1)) }
        if byTokenID || parsed.isEmpty { answer["delete_token_ids"] = .array(sorted) }
        if !byTokenID {
            answer["delete_device_ids"] = .array(
                deleted.compactMap(\.intValue).reduce(into: Set<Int64>()) { $0.insert($1) }.sorted().map { .int($0) })
        }
        var response = success(answer)
        // For `GET /v1/notifications/{id}` with the same credentials: Zulip's answer has no place for it.
        if let accepted { response.headers[NotificationStatusController.notificationIDsHeader] = accepted.rawValue }
        return response
    }

    /// `push_requests`, each checked, one per device (a repeated device is sent once: its
    /// first entry), all naming their device alike.
    func pushRequests(_ body: RequestFields) throws -> [(item: PassThroughItem, tokenID: String?)] {
        guard let requests = body.json["push_requests"]?.arrayValue else {
            throw APIError.badRequest("push_requests: must be an array", field: "push_requests")
        }
        var parsed: [(item: PassThroughItem, tokenID: String?)] = []
        var seen = Set<String>()
        for (index, item) in requests.enumerated() {
            let path = "push_requests[\(index)]"
            let tokenID = try Self.tokenIDField(item, path: path)
            if index > 0, (tokenID == nil) != (parsed.first?.tokenID == nil) {
                throw APIError.badRequest(
                    "\(path): all push requests name their device alike (token_id or device_id)", field: path)
            }
            let entry = try Self.passThroughItem(item, path: path, byTokenID: tokenID != nil)
            if seen.insert(tokenID ?? "\(entry.deviceID)").inserted { parsed.append((entry, tokenID)) }
        }
        guard parsed.count <= limits.maxDeviceIDs else {
            throw APIError.tooManyTargets(field: "push_requests", limit: limits.maxDeviceIDs)
        }
        return parsed
    }

    /// An item's `token_id` (12.x), or nil when it names its device by `device_id` (11.x).
    static func tokenIDField(_ item: JSONValue, path: String) throws -> String? {
        switch item["token_id"] {
        case nil, .null?: return nil
        case .string(let id)? where id.utf8.count <= 64 && Syntax.isVisibleASCII(id, maxBytes: 64): return id
        default: throw APIError.badRequest("\(path).token_id: must be a base64 token id", field: "\(path).token_id")
        }
    }

    /// Base64 characters, standard and URL-safe, with padding.
    static let base64Alphabet = Set(
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/-_=".utf8)

    /// Validates one `push_requests` entry: APNs entries carry `http_headers`, FCM ones `fcm_priority`.
    /// `byTokenID` (12.x): the device is named by `token_id`; its id is filled in later.
    static func passThroughItem(_ item: JSONValue, path: String, byTokenID: Bool = false) throws -> PassThroughItem {
        let reader = FieldReader(json: item, path: path)
        do throws(PayloadValidationError) {
            guard item.objectValue != nil else {
                throw PayloadValidationError(field: path, problem: "must be an object")
            }
            let deviceID = byTokenID ? -1 : try reader.int("device_id")
            let payload = try reader.object("payload")
            let payloadReader = FieldReader(json: payload, path: "\(path).payload")
            let encrypted = try payloadReader.string("encrypted_data")
            // The realm's ciphertext goes to the provider as it is: base64, within its 4 KiB.
            guard !encrypted.isEmpty, encrypted.utf8.count <= 4096,
                encrypted.utf8.allSatisfy({ Self.base64Alphabet.contains($0) })
            else {
                throw payloadReader.error("encrypted_data", "must be base64 of at most 4096 bytes")
            }
            if !payloadReader.has("push_key_id") && !payloadReader.has("push_account_id") {
                throw PayloadValidationError(field: "\(path).payload.push_key_id", problem: "is required")
            }
            if let keyID = try payloadReader.optionalInt("push_key_id"), UInt32(exactly: keyID) == nil {
                throw payloadReader.error("push_key_id", "must be an unsigned 32-bit integer")
            }
            _ = try payloadReader.optionalInt("push_account_id")
            if reader.has("http_headers") {
                let headers = FieldReader(json: try reader.object("http_headers"), path: "\(path).http_headers")
                let priority = try headers.optionalInt("apns_priority") ?? 10
                guard [10, 5, 1].contains(priority) else {
                    throw headers.error("apns_priority", "must be 10, 5 or 1")
                }
                let pushType = try headers.optionalString("apns_push_type") ?? "alert"
                guard ["alert", "background"].contains(pushType) else {
                    throw headers.error("apns_push_type", "must be alert or background")
                }
                if pushType == "background" && priority == 10 {
                    throw headers.error("apns_priority", "background pushes must use priority 5 or 1")
                }
                return PassThroughItem(
                    deviceID: DeviceID(deviceID), apnsPriority: APNsPriority(Int(priority)),
                    apnsPushType: Named(pushType),
                    payload: payload)
            }
            let priority = try reader.optionalString("fcm_priority") ?? "high"
            guard ["high", "normal"].contains(priority) else {
                throw reader.error("fcm_priority", "must be high or normal")
            }
            return PassThroughItem(deviceID: DeviceID(deviceID), fcmPriority: Named(priority), payload: payload)
        } catch {
            throw APIError.invalid(error)
        }
    }
}
