import DeviceState
import Foundation
import Hummingbird
import PushCrypto
import PushModels

/// The native API, for realms whose devices hand the relay their push keys.
extension IngestAPI {
    func addNativeRoutes(to router: Router<BasicRequestContext>) {
        router.post("/v1/devices") { request, _ in try await registerDevice(request) }
        router.delete("/v1/devices/:device_id") { request, context in
            try await deleteDevice(request, id: context.parameters.get("device_id"))
        }
        router.get("/v1/devices") { request, _ in try await listDevices(request) }
        router.post("/v1/notify") { request, _ in try await notify(request) }
        router.get("/v1/feedback") { request, _ in try await feedback(request) }
        router.get("/v1/bouncer-public-keys") { _, _ in
            success(["public_keys": .array(bouncerKeys.publicKeysBase64.map { .string($0) })])
        }
    }

    /// Checks that `realm` belongs to `server`, claiming it on first use when `claim` is set.
    func ownRealm(_ realm: String, server: String, claim: Bool) async throws {
        let owner = claim ? try await servers.claimRealm(realm, for: server) : try await servers.realmOwner(realm)
        guard owner == server else {
            if owner == nil { throw APIError(status: .notFound, code: "REALM_NOT_FOUND", message: "Unknown realm") }
            throw APIError.realmForbidden
        }
    }

    func registerDevice(_ request: Request) async throws -> Response {
        let server = try await authenticator.authenticate(request, failure: .unauthorized)
        let body = try await RequestFields.read(request, limit: limits.maxBodyBytes)
        let realm = try body.uuid("realm_uuid")
        let userID = try body.int("user_id")
        let registration: OpenedRegistration
        if body.has("encrypted_push_registration") {
            registration = try openRegistration(
                sealed: try body.string("encrypted_push_registration"),
                bouncerPublicKey: try body.string("bouncer_public_key"))
        } else {
            registration = try tokenAndApp(
                kind: try body.string("token_kind"), token: try body.string("token"),
                appID: try body.optionalString("ios_app_id"), path: "")
        }
        let keyText = try body.string("push_key")
        let key: PushKey
        do { key = try PushKey(base64: keyText) } catch { throw APIError.invalid(error, code: "INVALID_PUSH_KEY") }
        let keyID = try body.int("push_key_id")
        guard let keyID32 = UInt32(exactly: keyID) else {
            throw APIError.badRequest("push_key_id: must be an unsigned 32-bit integer", field: "push_key_id")
        }
        try await ownRealm(realm, server: server, claim: true)
        let (id, created) = try await devices.register(
            DeviceRegistration(
                realmUUID: realm, userID: userID, token: registration.token, appID: registration.appID,
                pushAccountID: try body.optionalInt("push_account_id"), pushKey: (keyID32, key)))
        return success(["device_id": .int(id), "created": .bool(created)], status: created ? .created : .ok)
    }

    func deleteDevice(_ request: Request, id: String?) async throws -> Response {
        let server = try await authenticator.authenticate(request, failure: .unauthorized)
        guard let id = id.flatMap({ Int64($0) }) else { throw APIError.deviceNotFound }
        // Another server's device answers 404 too: its existence is not disclosed.
        guard let device = try await devices.device(id), try await servers.realmOwner(device.realmUUID) == server
        else { throw APIError.deviceNotFound }
        try await devices.delete(device)
        return success(["device_id": .int(id)])
    }

    func listDevices(_ request: Request) async throws -> Response {
        let server = try await authenticator.authenticate(request, failure: .unauthorized)
        let query = request.uri.queryParameters
        guard let realmText = query.get("realm_uuid"), let realm = UUID(uuidString: realmText)?.uuidString.lowercased()
        else { throw APIError.badRequest("realm_uuid: must be a UUID", field: "realm_uuid") }
        guard let userID = query.get("user_id").flatMap({ Int64($0) }) else {
            throw APIError.badRequest("user_id: must be an integer", field: "user_id")
        }
        try await ownRealm(realm, server: server, claim: false)
        let found = try await devices.devices(try await devices.deviceIDs(realm: realm, userID: userID))
        let list: [JSONValue] = found.values.sorted { $0.id < $1.id }.map { d in
            var entry: [String: JSONValue] = [
                "device_id": .int(d.id), "token_kind": .string(d.provider.rawValue),
                "token": .string(DeviceToken.redact(d.token)), "status": .string(d.status.rawValue),
                "registered_at_ms": .int(d.registeredAtMs),
                "push_key_ids": .array(d.keys.keys.sorted().map { .int(Int64($0)) }),
            ]
            if let app = d.appID { entry["ios_app_id"] = .string(app) }
            if let account = d.pushAccountID { entry["push_account_id"] = .int(account) }
            if let current = d.currentKeyID { entry["current_push_key_id"] = .int(Int64(current)) }
            if let reason = d.invalidReason { entry["invalid_reason"] = .string(reason) }
            return .object(entry)
        }
        return success(["devices": .array(list)])
    }

    func notify(_ request: Request) async throws -> Response {
        let server = try await authenticator.authenticate(request, failure: .unauthorized)
        let body = try await RequestFields.read(request, limit: limits.maxBodyBytes)
        let realm = try body.uuid("realm_uuid")
        let userID = try body.int("user_id")
        guard let payloadJSON = body.json["payload"] else {
            throw APIError.badRequest("payload: is required", field: "payload")
        }
        let notification: ZulipNotification
        do { notification = try ZulipNotification(validating: payloadJSON) } catch {
            throw APIError.invalid(error, code: "INVALID_PAYLOAD")
        }
        guard notification.userID == userID else {
            throw APIError.badRequest(
                "payload.user_id: must equal user_id", code: "INVALID_PAYLOAD", field: "payload.user_id")
        }
        var requestedIDs: [Int64]?
        if body.has("device_ids") {
            do { requestedIDs = try body.reader.intArray("device_ids") } catch { throw APIError.invalid(error) }
        }
        let plaintext = Wire.canonical(payloadJSON)
        guard plaintext.count <= limits.maxPlaintextBytes else {
            throw APIError(
                status: .contentTooLarge, code: "PAYLOAD_TOO_LARGE",
                message: "payload: encrypted it would exceed the providers' 4096-byte limit (max \(limits.maxPlaintextBytes) bytes of JSON)",
                field: "payload")
        }
        try await ownRealm(realm, server: server, claim: true)

        let userDevices = try await devices.deviceIDs(realm: realm, userID: userID)
        let targets = requestedIDs ?? userDevices
        let loaded = try await devices.devices(targets)
        var deleteIDs: [Int64] = []
        var deliverable = 0
        for id in targets {
            guard let device = loaded[id], device.realmUUID == realm, device.userID == userID,
                device.status == .active
            else {
                deleteIDs.append(id)
                continue
            }
            deliverable += 1
        }
        let notificationID = UUID().uuidString.lowercased()
        if !targets.isEmpty {
            let sealed: SealedBlob
            do { sealed = try pipelineKeys.seal(plaintext) } catch { throw APIError.internalError }
            try await acceptor.publish(
                PushRequestRecord(
                    kind: .native, notificationID: notificationID, serverUUID: server, realmUUID: realm,
                    userID: userID, deviceIDs: requestedIDs, notificationType: notification.type,
                    sealedPayload: sealed, acceptedAtMs: Wire.nowMillis()))
        }
        return success(
            [
                "notification_id": .string(notificationID), "device_count": .int(Int64(deliverable)),
                "delete_device_ids": .array(Array(Set(deleteIDs)).sorted().map { .int($0) }),
            ], status: .accepted)
    }

    func feedback(_ request: Request) async throws -> Response {
        let server = try await authenticator.authenticate(request, failure: .unauthorized)
        let query = request.uri.queryParameters
        guard let realmText = query.get("realm_uuid"), let realm = UUID(uuidString: realmText)?.uuidString.lowercased()
        else { throw APIError.badRequest("realm_uuid: must be a UUID", field: "realm_uuid") }
        let after: String? = query.get("after").map { String($0) }
        if let after, after.split(separator: "-").count != 2 || !after.allSatisfy({ $0.isNumber || $0 == "-" }) {
            throw APIError.badRequest("after: must be a cursor returned by this endpoint", field: "after")
        }
        let limit = min(max(query.get("limit").flatMap { Int($0) } ?? 100, 1), 1000)
        try await ownRealm(realm, server: server, claim: false)
        let entries = try await devices.feedback(realm: realm, after: after, limit: limit)
        let invalidated: [JSONValue] = entries.map { entry in
            let fields: [String: JSONValue] = [
                "device_id": .int(entry.deviceID), "reason": .string(entry.reason), "at_ms": .int(entry.atMs),
                "cursor": .string(entry.cursor),
            ]
            return .object(fields)
        }
        let next: JSONValue
        if let last = entries.last { next = .string(last.cursor) } else if let after { next = .string(after) } else {
            next = .null
        }
        return success(["invalidated": .array(invalidated), "next_cursor": next])
    }
}
