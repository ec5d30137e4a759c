import DeviceState
import Foundation
import Hummingbird
import PushCrypto
import PushModels
import RedisClient

/// The push-bouncer API that self-hosted Zulip servers speak (docs/protocols.md §1).
extension IngestAPI {
    func addBouncerRoutes(to router: Router<IngestContext>) {
        router.post("/api/v1/remotes/server/register") { request, context in
            try await registerServer(request, context: context)
        }
        router.post("/api/v1/remotes/server/deactivate") { request, context in
            let server = try await authenticator.authenticate(request, context: context, api: .zulip)
            // Zulip's bouncer keeps everything a deactivated server owns; it only refuses it.
            try await servers.deactivate(uuid: server)
            authenticator.forgetAll()
            return success()
        }
        router.post("/api/v1/remotes/server/analytics") { request, context in
            try await uploadAnalytics(request, context: context)
        }
        router.get("/api/v1/remotes/server/analytics/status") { request, context in
            let server = try await authenticator.authenticate(request, context: context, api: .zulip)
            let ids = try await servers.analyticsIDs(uuid: server)
            return success([
                "last_realm_count_id": .int(ids.realmCount),
                "last_installation_count_id": .int(ids.installationCount),
                "last_realmauditlog_id": .int(ids.realmAuditLog),
            ])
        }
        router.post("/api/v1/remotes/push/e2ee/register") { request, context in
            try await registerE2EEDevice(request, context: context)
        }
        router.post("/api/v1/remotes/push/e2ee/notify") { request, context in
            try await bouncerNotify(request, context: context)
        }
        addZulipLegacyRoutes(to: router)
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
            // Zulip's bouncer answers this one with its internal code (the endpoint is not wrapped).
            throw APIError(
                status: .badRequest, code: "INVALID_ZULIP_SERVER",
                message: "Zulip server auth failure: key does not match role \(uuid)", data: ["role": .string(uuid)])
        } catch ServerRegistrationError.deactivated {
            throw APIError(
                status: .unauthorized, code: "REALM_DEACTIVATED",
                message: "The mobile push notification service registration for your server has been deactivated")
        } catch ServerRegistrationError.registrationClosed {
            throw APIError(
                status: .forbidden, code: "REGISTRATION_CLOSED",
                message: "This relay does not take new servers; ask its operator to register yours")
        }
    }

    /// Zulip's analytics upload. The relay keeps no statistics: of the count tables it
    /// keeps the largest row id (so `analytics/status` answers what it holds and the
    /// server sends only newer rows), and it keeps the server's version facts and its
    /// realm list. The realm list is how a Zulip server makes realms its own: the
    /// explicit ownership step of the Zulip API.
    func uploadAnalytics(_ request: Request, context: IngestContext) async throws -> Response {
        let server = try await authenticator.authenticate(request, context: context, api: .zulip)
        let body = try await RequestFields.read(request, limit: limits.maxAnalyticsBodyBytes)
        let lastIDs = ZulipAnalyticsIDs(
            realmCount: try Self.largestRowID(body, "realm_counts"),
            installationCount: try Self.largestRowID(body, "installation_counts"),
            realmAuditLog: try Self.largestRowID(body, "realmauditlog_rows"))
        let realmList = try Self.jsonField(body, "realms")?.arrayValue ?? []
        if let value = try Self.jsonField(body, "realms"), value != .null, value.arrayValue == nil {
            throw APIError.badRequest("realms: must be a JSON list of realms", field: "realms")
        }
        guard realmList.count <= limits.maxRealmsPerServer else {
            throw APIError(
                status: .contentTooLarge, code: "TOO_MANY_REALMS",
                message: "realms: at most \(limits.maxRealmsPerServer) realms per server", field: "realms")
        }
        // Every entry is checked before any realm is registered.
        var infos: [ZulipRealmInfo] = []
        for (index, item) in realmList.enumerated() {
            infos.append(try Self.realmInfo(item, path: "realms[\(index)]"))
        }
        var seen = Set<String>()
        infos = infos.filter { seen.insert($0.uuid).inserted }
        // A realm another server uploaded fails the whole upload, before anything is stored.
        let owners = try await realms.owners(infos.map(\.uuid))
        if owners.contains(where: { $0 != nil && $0 != server }) {
            throw APIError.badRequest("Duplicate registration detected.")
        }
        let outcomes = try await realms.register(
            infos.map(\.uuid), to: server, maxRealms: limits.maxRealmsPerServer)
        var statuses: [String: JSONValue] = [:]
        for (info, outcome) in zip(infos, outcomes) {
            switch outcome {
            case .registered, .alreadyYours:
                statuses[info.uuid] = Self.pushStatus
            case .taken:
                throw APIError.badRequest("Duplicate registration detected.")
            case .quotaExceeded:
                throw APIError.realmQuotaExceeded(limit: limits.maxRealmsPerServer)
            }
        }
        if !infos.isEmpty || body.has("realms") {
            try await realms.describe(infos, of: server, storage: devices.storage)
        }
        let featureLevel: Int64?
        switch try Self.jsonField(body, "api_feature_level") {
        case .int(let level)?: featureLevel = level
        case nil, .null?: featureLevel = nil
        default: throw APIError.badRequest("api_feature_level: must be an integer", field: "api_feature_level")
        }
        try await servers.recordAnalytics(
            uuid: server, version: Self.shortText(try Self.jsonField(body, "version")),
            mergeBase: Self.shortText(try Self.jsonField(body, "merge_base")), apiFeatureLevel: featureLevel,
            lastIDs: lastIDs)
        return success(["realms": .object(statuses)])
    }

    /// What every realm is told of its pushes: allowed, with no end (Zulip's answer for
    /// a plan that never lapses).
    static let pushStatus: JSONValue = ["can_push": true, "expected_end_timestamp": .null]

    /// A Zulip form field that carries JSON text (a JSON body carries the value itself).
    static func jsonField(_ body: RequestFields, _ name: String) throws -> JSONValue? {
        guard let value = body.json[name] else { return nil }
        guard body.isForm, case .string(let text) = value else { return value }
        guard let decoded = try? Wire.decode(JSONValue.self, from: Array(text.utf8)) else {
            throw APIError.badRequest("\(name): must be JSON", field: name)
        }
        return decoded
    }

    /// The largest `id` of an uploaded table's rows (0 when it has none).
    static func largestRowID(_ body: RequestFields, _ name: String) throws -> Int64 {
        guard let value = try jsonField(body, name), value != .null else { return 0 }
        guard let rows = value.arrayValue else {
            throw APIError.badRequest("\(name): must be a JSON list", field: name)
        }
        var largest: Int64 = 0
        for (index, row) in rows.enumerated() {
            guard let id = row["id"]?.intValue, id >= 0 else {
                throw APIError.badRequest(
                    "\(name)[\(index)].id: must be a non-negative integer", field: "\(name)[\(index)].id")
            }
            largest = max(largest, id)
        }
        return largest
    }

    /// A version string as stored: at most 128 visible characters, else not stored.
    static func shortText(_ value: JSONValue?) -> String? {
        guard let text = value?.stringValue, Syntax.isVisibleASCII(text, maxBytes: 128) else { return nil }
        return text
    }

    /// One realm of the upload. Only `uuid` is required; the rest is stored when present.
    static func realmInfo(_ item: JSONValue, path: String) throws -> ZulipRealmInfo {
        guard item.objectValue != nil else { throw APIError.badRequest("\(path): must be an object", field: path) }
        guard let given = item["uuid"]?.stringValue, let uuid = UUID(uuidString: given)?.uuidString.lowercased() else {
            throw APIError.badRequest("\(path).uuid: must be a UUID", field: "\(path).uuid")
        }
        func text(_ key: String, maxBytes: Int = 1024) throws -> String {
            switch item[key] {
            case nil, .null?: return ""
            case .string(let value)? where value.utf8.count <= maxBytes: return value
            default:
                throw APIError.badRequest(
                    "\(path).\(key): must be a string of at most \(maxBytes) bytes", field: "\(path).\(key)")
            }
        }
        func flag(_ key: String) throws -> Bool {
            switch item[key] {
            case nil, .null?: return false
            case .bool(let value)?: return value
            default: throw APIError.badRequest("\(path).\(key): must be a boolean", field: "\(path).\(key)")
            }
        }
        let orgType: Int64
        switch item["org_type"] {
        case nil, .null?: orgType = 0
        case .int(let value)?: orgType = value
        default: throw APIError.badRequest("\(path).org_type: must be an integer", field: "\(path).org_type")
        }
        return ZulipRealmInfo(
            uuid: uuid, host: try text("host"), url: try text("url"), name: try text("name"), orgType: orgType,
            deactivated: try flag("deactivated"), isSystemBotRealm: try flag("is_system_bot_realm"),
            ownerSecret: try text("uuid_owner_secret"))
    }

    /// Whose a realm is, as Zulip's bouncer tells it: the caller's (true), never uploaded
    /// (false: each endpoint decides), or another server's (403).
    func zulipRealm(_ realm: String, server: String) async throws -> Bool {
        switch try await servers.realmOwner(realm) {
        case server?: return true
        case nil: return false
        case _?:
            throw APIError(
                status: .forbidden, code: "REMOTE_REALM_SERVER_MISMATCH_ERROR",
                message:
                    "Your organization is registered to a different Zulip server. Please contact Zulip support for assistance in resolving this issue."
            )
        }
    }

    /// The E2EE endpoints need the realm uploaded first.
    func requireBouncerRealm(_ realm: String, server: String) async throws {
        guard try await zulipRealm(realm, server: server) else {
            throw APIError(status: .forbidden, code: "MISSING_REMOTE_REALM", message: "Organization not registered")
        }
    }

    /// `remotes/push/e2ee/register`, both dialects: Zulip 12.x sends `token_id`, which must
    /// be the sealed token's; Zulip 11.x sends `push_account_id` and reads back `device_id`.
    func registerE2EEDevice(_ request: Request, context: IngestContext) async throws -> Response {
        let server = try await authenticator.authenticate(request, context: context, api: .zulip)
        let body = try await RequestFields.read(request, limit: limits.maxBodyBytes)
        let realm = try body.uuid("realm_uuid")
        let tokenID = try body.optionalString("token_id")
        let account = tokenID == nil ? try body.int("push_account_id") : nil
        let sealed = try body.string("encrypted_push_registration")
        let publicKey = try body.string("bouncer_public_key")
        try await requireBouncerRealm(realm, server: server)
        let registration = try openRegistration(
            sealed: sealed, bouncerPublicKey: publicKey, rules: .zulip, tokenID: tokenID)
        let id = try await registerWithinQuota(
            DeviceRegistration(
                realmUUID: RealmID(realm), userID: nil, token: registration.token, appID: registration.appID,
                pushAccountID: account, pushKey: nil),
            server: server
        ).id
        guard let tokenID else { return success(["device_id": .int(id.rawValue)]) }
        try await devices.redis.command(
            "SET", RedisArgument(devices.keys.zulipTokenID(realm: RealmID(realm), tokenID: tokenID)), RedisArgument(id))
        return success()
    }

    /// `remotes/push/e2ee/notify`, both dialects: items name their device by `token_id`
    /// (12.x, answered with `delete_token_ids`) or `device_id` (11.x, `delete_device_ids`).
    func bouncerNotify(_ request: Request, context: IngestContext) async throws -> Response {
        let server = try await authenticator.authenticate(request, context: context, api: .zulip)
        let body = try await RequestFields.read(request, limit: limits.maxBodyBytes)
        let realm = try body.uuid("realm_uuid")
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
            // One push per device: a repeated device is sent once (its first entry).
            if seen.insert(tokenID ?? "\(entry.deviceID)").inserted { parsed.append((entry, tokenID)) }
        }
        guard parsed.count <= limits.maxDeviceIDs else {
            throw APIError.tooManyTargets(field: "push_requests", limit: limits.maxDeviceIDs)
        }
        try await requireBouncerRealm(realm, server: server)
        let byTokenID = parsed.first?.tokenID != nil
        if byTokenID {
            // 12.x: the realm's token ids name the devices.
            let found = try await devices.redis.command(
                ["MGET"]
                    + parsed.map {
                        RedisArgument(devices.keys.zulipTokenID(realm: RealmID(realm), tokenID: $0.tokenID ?? ""))
                    }
            ).array
            for i in parsed.indices { parsed[i].item.deviceID = DeviceID(i < found.count ? (found[i].int ?? -1) : -1) }
        }
        let known = try await devices.devices(parsed.map(\.item.deviceID).filter { $0.rawValue >= 0 })
        var deleted: [JSONValue] = []
        var items: [PassThroughItem] = []
        var counts: [Provider: Int] = [:]
        for (item, tokenID) in parsed {
            // A legacy-API device is not an E2EE one, even in the caller's realm.
            guard let device = known[item.deviceID], device.realmUUID.rawValue == realm, device.status == .active,
                device.zulipLegacyOwner == nil
            else {
                deleted.append(tokenID.map { .string($0) } ?? .int(item.deviceID.rawValue))
                continue
            }
            counts[device.provider, default: 0] += 1
            items.append(item)
        }
        if !items.isEmpty {
            let record = PushRequestRecord(
                notificationID: NotificationID(UUID().uuidString.lowercased()), serverUUID: ServerID(server),
                realmUUID: RealmID(realm),
                acceptedAtMs: Wire.nowMillis(), request: .passThrough(items: items))
            try await acceptor.publish(record)
        }
        var answer: [String: JSONValue] = [
            "apple_successfully_sent_count": .int(Int64(counts[.apns] ?? 0)),
            "android_successfully_sent_count": .int(Int64(counts[.fcm] ?? 0)),
            "realm_push_status": Self.pushStatus,
        ]
        let sorted = Array(Set(deleted)).sorted { Wire.canonical($0).lexicographicallyPrecedes(Wire.canonical($1)) }
        if byTokenID || parsed.isEmpty { answer["delete_token_ids"] = .array(sorted) }
        if !byTokenID {
            answer["delete_device_ids"] = .array(
                deleted.compactMap(\.intValue).reduce(into: Set<Int64>()) { $0.insert($1) }.sorted().map { .int($0) })
        }
        return success(answer)
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
