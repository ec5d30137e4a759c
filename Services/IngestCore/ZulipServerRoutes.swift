import DeviceState
import Foundation
import Hummingbird
import PushCrypto
import PushModels

/// Zulip's server housekeeping on the bouncer API (docs/protocols.md §1): a server
/// registers (and rotates its key), deactivates, and uploads its analytics, which is how
/// its realms become its own.
struct ZulipServerController: Sendable {
    let authenticator: ServerAuthenticator
    let servers: any ServerRegistry
    let realms: any RealmRegistry
    /// Seals the realms' owner secrets at rest.
    let storage: StorageKeyring
    let limits: Limits
    /// Whether servers may register themselves (`open`) or only by `pushrelay` (`closed`).
    let openRegistration: Bool
    /// Zulip's registration transfer.
    let transfers: RegistrationTransfers

    func routes() -> RouteCollection<IngestContext> {
        let router = RouteCollection(context: IngestContext.self)
        router.post("/api/v1/remotes/server/register") { request, context in
            try await registerServer(request, context: context)
        }
        // Zulip's registration transfer: no credentials (the server may have lost them);
        // control of the registered hostname is the proof.
        router.post("/api/v1/remotes/server/register/transfer") { request, _ in try await transfers.begin(request) }
        router.post("/api/v1/remotes/server/register/verify_challenge") { request, _ in
            try await transfers.verify(request)
        }
        router.post("/api/v1/remotes/server/deactivate") { request, context in
            let server = try await authenticator.authenticate(request, context: context, api: .zulip)
            // Zulip's bouncer keeps everything a deactivated server owns; it only refuses it.
            try await servers.deactivate(uuid: server, nowMs: Wire.nowMillis())
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
        return router
    }

    func registerServer(_ request: Request, context: IngestContext) async throws -> Response {
        try await authenticator.countRegistration(request, context: context)
        let body = try await RequestFields.read(request, limit: limits.maxBodyBytes)
        let uuid = ServerID(try body.uuid("zulip_org_id"))
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
                allowCreate: openRegistration, nowMs: Wire.nowMillis())
            if newKey != nil { authenticator.forgetAll() }
            return success(["created": .bool(created)])
        } catch ServerRegistrationError.keyMismatch {
            // Zulip's bouncer answers this one with its internal code (the endpoint is not wrapped).
            throw APIError(
                status: .badRequest, code: "INVALID_ZULIP_SERVER",
                message: "Zulip server auth failure: key does not match role \(uuid)",
                data: ["role": .string(uuid.rawValue)])
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
        var seen = Set<RealmID>()
        infos = infos.filter { seen.insert($0.uuid).inserted }
        // A realm another server uploaded fails the whole upload, before anything is stored.
        let owners = try await realms.owners(infos.map(\.uuid))
        if owners.contains(where: { $0 != nil && $0 != server }) {
            throw APIError.badRequest("Duplicate registration detected.")
        }
        let outcomes = try await realms.register(
            infos.map(\.uuid), to: server, maxRealms: limits.maxRealmsPerServer, nowMs: Wire.nowMillis())
        var statuses: [String: JSONValue] = [:]
        for (info, outcome) in zip(infos, outcomes) {
            switch outcome {
            case .registered, .alreadyYours:
                statuses[info.uuid.rawValue] = RealmOwnership.zulipPushStatus
            case .taken:
                throw APIError.badRequest("Duplicate registration detected.")
            case .quotaExceeded:
                throw APIError.realmQuotaExceeded(limit: limits.maxRealmsPerServer)
            }
        }
        if !infos.isEmpty || body.has("realms") {
            try await realms.describe(infos, of: server, storage: storage, nowMs: Wire.nowMillis())
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
            lastIDs: lastIDs, nowMs: Wire.nowMillis())
        return success(["realms": .object(statuses)])
    }

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
        guard let given = item["uuid"]?.stringValue, let uuid = Syntax.canonicalUUID(given) else {
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
            uuid: RealmID(uuid), host: try text("host"), url: try text("url"), name: try text("name"), orgType: orgType,
            deactivated: try flag("deactivated"), isSystemBotRealm: try flag("is_system_bot_realm"),
            ownerSecret: try text("uuid_owner_secret"))
    }
}
