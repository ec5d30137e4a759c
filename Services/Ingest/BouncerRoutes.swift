import DeviceState
import Foundation
import Hummingbird
import PushCrypto
import PushModels

/// The push-bouncer API that self-hosted Zulip servers speak (protocols.md §1).
extension IngestAPI {
    func addBouncerRoutes(to router: Router<BasicRequestContext>) {
        router.post("/api/v1/remotes/server/register") { request, _ in try await registerServer(request) }
        router.post("/api/v1/remotes/push/e2ee/register") { request, _ in try await registerE2EEDevice(request) }
        router.post("/api/v1/remotes/push/e2ee/notify") { request, _ in try await bouncerNotify(request) }
    }

    func registerServer(_ request: Request) async throws -> Response {
        let body = try await RequestFields.read(request, limit: limits.maxBodyBytes)
        let uuid = try body.uuid("zulip_org_id")
        let key = try body.string("zulip_org_key")
        guard key.count == 64 else {
            throw APIError.badRequest("zulip_org_key: must be 64 characters", field: "zulip_org_key")
        }
        let hostname = try body.string("hostname")
        guard !hostname.isEmpty, hostname.count <= 128 else {
            throw APIError.badRequest("hostname: must be 1 to 128 characters", field: "hostname")
        }
        let email = try body.string("contact_email")
        guard email.contains("@"), email.count <= 254 else {
            throw APIError.badRequest("contact_email: must be an email address", field: "contact_email")
        }
        let newKey = try body.optionalString("new_org_key")
        if let newKey, newKey.count != 64 {
            throw APIError.badRequest("new_org_key: must be 64 characters", field: "new_org_key")
        }
        do {
            let created = try await servers.register(
                uuid: uuid, apiKey: key, hostname: hostname, contactEmail: email, newAPIKey: newKey)
            if newKey != nil { authenticator.forgetAll() }
            return success(["created": .bool(created)])
        } catch ServerRegistrationError.keyMismatch {
            throw APIError.invalidServer
        }
    }

    func registerE2EEDevice(_ request: Request) async throws -> Response {
        let server = try await authenticator.authenticate(request, failure: .invalidServer)
        let body = try await RequestFields.read(request, limit: limits.maxBodyBytes)
        let realm = try body.uuid("realm_uuid")
        let account = try body.int("push_account_id")
        let registration = try openRegistration(
            sealed: try body.string("encrypted_push_registration"),
            bouncerPublicKey: try body.string("bouncer_public_key"))
        guard try await servers.claimRealm(realm, for: server) == server else {
            throw APIError(
                status: .forbidden, code: "MISSING_REMOTE_REALM",
                message: "Realm \(realm) is not registered to this server")
        }
        let (id, _) = try await devices.register(
            DeviceRegistration(
                realmUUID: realm, userID: nil, token: registration.token, appID: registration.appID,
                pushAccountID: account, pushKey: nil))
        return success(["device_id": .int(id)])
    }

    func bouncerNotify(_ request: Request) async throws -> Response {
        let server = try await authenticator.authenticate(request, failure: .invalidServer)
        let body = try await RequestFields.read(request, limit: limits.maxBodyBytes)
        let realm = try body.uuid("realm_uuid")
        guard let requests = body.json["push_requests"]?.arrayValue else {
            throw APIError.badRequest("push_requests: must be an array", field: "push_requests")
        }
        var items: [PassThroughItem] = []
        for (index, item) in requests.enumerated() {
            items.append(try Self.passThroughItem(item, path: "push_requests[\(index)]"))
        }
        guard try await servers.realmOwner(realm) == server else {
            throw APIError(
                status: .forbidden, code: "MISSING_REMOTE_REALM",
                message: "Realm \(realm) is not registered to this server")
        }
        let known = try await devices.devices(items.map(\.deviceID))
        var deleteIDs: [Int64] = []
        var counts: [Provider: Int] = [:]
        for item in items {
            guard let device = known[item.deviceID], device.realmUUID == realm, device.status == .active else {
                deleteIDs.append(item.deviceID)
                continue
            }
            counts[device.provider, default: 0] += 1
        }
        if !items.isEmpty {
            let record = PushRequestRecord(
                kind: .passThrough, notificationID: UUID().uuidString.lowercased(), serverUUID: server,
                realmUUID: realm, items: items, acceptedAtMs: Wire.nowMillis())
            try await acceptor.publish(record)
        }
        return success([
            "apple_successfully_sent_count": .int(Int64(counts[.apns] ?? 0)),
            "android_successfully_sent_count": .int(Int64(counts[.fcm] ?? 0)),
            "delete_device_ids": .array(Array(Set(deleteIDs)).sorted().map { .int($0) }),
            "realm_push_status": ["can_push": true, "expected_end_timestamp": .null],
        ])
    }

    /// Validates one `push_requests` entry: APNs entries carry `http_headers`, FCM ones `fcm_priority`.
    static func passThroughItem(_ item: JSONValue, path: String) throws -> PassThroughItem {
        let reader = FieldReader(json: item, path: path)
        do throws(PayloadValidationError) {
            guard item.objectValue != nil else {
                throw PayloadValidationError(field: path, problem: "must be an object")
            }
            let deviceID = try reader.int("device_id")
            let payload = try reader.object("payload")
            let payloadReader = FieldReader(json: payload, path: "\(path).payload")
            _ = try payloadReader.string("encrypted_data")
            if !payloadReader.has("push_key_id") && !payloadReader.has("push_account_id") {
                throw PayloadValidationError(field: "\(path).payload.push_key_id", problem: "is required")
            }
            _ = try payloadReader.optionalInt("push_key_id")
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
                    deviceID: deviceID, apnsPriority: Int(priority), apnsPushType: pushType, payload: payload)
            }
            let priority = try reader.optionalString("fcm_priority") ?? "high"
            guard ["high", "normal"].contains(priority) else {
                throw reader.error("fcm_priority", "must be high or normal")
            }
            return PassThroughItem(deviceID: deviceID, fcmPriority: priority, payload: payload)
        } catch {
            throw APIError.invalid(error)
        }
    }
}
