import DeviceState
import Foundation
import Hummingbird
import PushCrypto
import PushModels

/// The push-bouncer API that self-hosted Zulip servers speak (docs/wire.md §1).
extension IngestAPI {
    func addBouncerRoutes(to router: Router<IngestContext>) {
        router.post("/api/v1/remotes/server/register") { request, context in
            try await registerServer(request, context: context)
        }
        router.post("/api/v1/remotes/server/analytics") { request, context in
            try await uploadAnalytics(request, context: context)
        }
        router.get("/api/v1/remotes/server/analytics/status") { request, context in
            _ = try await authenticator.authenticate(request, context: context, failure: .invalidServer)
            // PushRelay keeps no statistics. Answering "everything up to the largest id is
            // already here" makes a Zulip server upload only its realm list, never its count
            // tables (whose rows would be discarded anyway).
            return success([
                "last_realm_count_id": .int(Self.everythingUploaded),
                "last_installation_count_id": .int(Self.everythingUploaded),
                "last_realmauditlog_id": .int(Self.everythingUploaded),
            ])
        }
        router.post("/api/v1/remotes/push/e2ee/register") { request, context in
            try await registerE2EEDevice(request, context: context)
        }
        router.post("/api/v1/remotes/push/e2ee/notify") { request, context in
            try await bouncerNotify(request, context: context)
        }
    }

    func registerServer(_ request: Request, context: IngestContext) async throws -> Response {
        try await authenticator.countRegistration(request, context: context)
        let body = try await RequestFields.read(request, limit: limits.maxBodyBytes)
        let uuid = try body.uuid("zulip_org_id")
        let key = try body.string("zulip_org_key")
        guard Syntax.isAPIKey(key) else {
            throw APIError.badRequest("zulip_org_key: must be 64 ASCII letters and digits", field: "zulip_org_key")
        }
        let hostname = try body.string("hostname")
        guard Syntax.isHostname(hostname) else {
            throw APIError.badRequest(
                "hostname: must be a host name (ASCII letters, digits, '-', '.', optional :port), 1 to \(Syntax.maxHostnameBytes) bytes",
                field: "hostname")
        }
        let email = try body.string("contact_email")
        guard Syntax.isEmail(email) else {
            throw APIError.badRequest(
                "contact_email: must be an email address of at most \(Syntax.maxEmailBytes) bytes",
                field: "contact_email")
        }
        let newKey = try body.optionalString("new_org_key")
        if let newKey, !Syntax.isAPIKey(newKey) {
            throw APIError.badRequest("new_org_key: must be 64 ASCII letters and digits", field: "new_org_key")
        }
        do {
            let created = try await servers.register(
                uuid: uuid, apiKey: key, hostname: hostname, contactEmail: email, newAPIKey: newKey,
                allowCreate: openServerRegistration)
            if newKey != nil { authenticator.forgetAll() }
            return success(["created": .bool(created)])
        } catch ServerRegistrationError.keyMismatch {
            throw APIError.invalidServer
        } catch ServerRegistrationError.registrationClosed {
            throw APIError(
                status: .forbidden, code: "REGISTRATION_CLOSED",
                message: "This relay does not take new servers; ask its operator to register yours")
        }
    }

    /// Zulip's analytics upload. PushRelay keeps no statistics; it takes the `realms`
    /// list, which is how a Zulip server tells its bouncer which realms are its own
    /// (the explicit ownership step), and answers each realm's push status.
    func uploadAnalytics(_ request: Request, context: IngestContext) async throws -> Response {
        let server = try await authenticator.authenticate(request, context: context, failure: .invalidServer)
        let body = try await RequestFields.read(request, limit: limits.maxBodyBytes)
        var realmList: [JSONValue] = []
        if let value = body.json["realms"], value != .null {
            // Zulip form-encodes each field as JSON text.
            let decoded: JSONValue?
            if case .string(let text) = value { decoded = try? Wire.decode(JSONValue.self, from: Array(text.utf8)) } else {
                decoded = value
            }
            guard let items = decoded?.arrayValue else {
                throw APIError.badRequest("realms: must be a JSON list of realms", field: "realms")
            }
            realmList = items
        }
        guard realmList.count <= limits.maxRealmsPerServer else {
            throw APIError(
                status: .contentTooLarge, code: "TOO_MANY_REALMS",
                message: "realms: at most \(limits.maxRealmsPerServer) realms per server", field: "realms")
        }
        // Every entry is checked before any realm is registered.
        var wanted: [(index: Int, uuid: String)] = []
        for (index, item) in realmList.enumerated() {
            let reader = FieldReader(json: item, path: "realms[\(index)]")
            let uuidText: String
            do { uuidText = try reader.string("uuid") } catch { throw APIError.invalid(error) }
            guard let realm = UUID(uuidString: uuidText)?.uuidString.lowercased() else {
                throw APIError.badRequest("realms[\(index)].uuid: must be a UUID", field: "realms[\(index)].uuid")
            }
            // Zulip's bouncer keeps deactivated realms too (as the uploader's).
            wanted.append((index, realm))
        }
        let outcomes = try await realms.register(
            wanted.map(\.uuid), to: server, maxRealms: limits.maxRealmsPerServer)
        var statuses: [String: JSONValue] = [:]
        for (entry, outcome) in zip(wanted, outcomes) {
            switch outcome {
            case .registered, .alreadyYours:
                statuses[entry.uuid] = ["can_push": true, "expected_end_timestamp": .null]
            case .taken:
                // Zulip's bouncer answers a realm uploaded by two servers so.
                throw APIError(
                    status: .badRequest, code: "BAD_REQUEST", message: "Duplicate registration detected.",
                    field: "realms[\(entry.index)].uuid")
            case .quotaExceeded:
                throw APIError.realmQuotaExceeded(limit: limits.maxRealmsPerServer)
            }
        }
        return success(["realms": .object(statuses)])
    }

    /// The realm belongs to the calling server. Unknown realms and other servers'
    /// realms get the same answer, so a caller learns nothing of realms not its own.
    func requireBouncerRealm(_ realm: String, server: String) async throws {
        guard try await servers.realmOwner(realm) == server else {
            throw APIError(
                status: .forbidden, code: "MISSING_REMOTE_REALM",
                message: "Realm \(realm) is not registered to this server; upload it with remotes/server/analytics")
        }
    }

    func registerE2EEDevice(_ request: Request, context: IngestContext) async throws -> Response {
        let server = try await authenticator.authenticate(request, context: context, failure: .invalidServer)
        let body = try await RequestFields.read(request, limit: limits.maxBodyBytes)
        let realm = try body.uuid("realm_uuid")
        let account = try body.int("push_account_id")
        let registration = try openRegistration(
            sealed: try body.string("encrypted_push_registration"),
            bouncerPublicKey: try body.string("bouncer_public_key"))
        try await requireBouncerRealm(realm, server: server)
        let id = try await registerWithinQuota(
            DeviceRegistration(
                realmUUID: realm, userID: nil, token: registration.token, appID: registration.appID,
                pushAccountID: account, pushKey: nil),
            server: server
        ).id
        return success(["device_id": .int(id)])
    }

    func bouncerNotify(_ request: Request, context: IngestContext) async throws -> Response {
        let server = try await authenticator.authenticate(request, context: context, failure: .invalidServer)
        let body = try await RequestFields.read(request, limit: limits.maxBodyBytes)
        let realm = try body.uuid("realm_uuid")
        guard let requests = body.json["push_requests"]?.arrayValue else {
            throw APIError.badRequest("push_requests: must be an array", field: "push_requests")
        }
        var items: [PassThroughItem] = []
        var seen = Set<Int64>()
        for (index, item) in requests.enumerated() {
            let parsed = try Self.passThroughItem(item, path: "push_requests[\(index)]")
            // One push per device: a repeated device id is sent once (its first entry).
            if seen.insert(parsed.deviceID).inserted { items.append(parsed) }
        }
        guard items.count <= limits.maxDeviceIDs else {
            throw APIError.tooManyTargets(field: "push_requests", limit: limits.maxDeviceIDs)
        }
        try await requireBouncerRealm(realm, server: server)
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

    /// The largest integer every JSON reader keeps exactly (2^53 − 1).
    static let everythingUploaded: Int64 = 9_007_199_254_740_991

    /// Base64 characters, standard and URL-safe, with padding.
    static let base64Alphabet = Set(
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/-_=".utf8)

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
