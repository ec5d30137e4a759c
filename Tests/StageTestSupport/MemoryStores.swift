@testable import DeviceState
import Foundation
import IngestCore
import PushCrypto
import PushModels
import Synchronization

// In-memory stores behind ingest's seams (DeviceState/Registries.swift and the store
// protocols beside them), for the router tests: the same answers as the Redis stores,
// kept in a dictionary behind a lock. Each is a reference, so two routers on one set of
// stores are two ingest instances on one Redis.

/// Every store ingest uses, in memory.
final class MemoryIngestStores: Sendable {
    let servers: MemoryServerRegistry
    let realms = MemoryRealmRegistry()
    let devices = MemoryDeviceRegistry()
    let legacy: MemoryLegacyDeviceRegistry
    let clients = MemoryClientCounters()
    let idempotency = MemoryIdempotencyStore()
    let gorush = MemoryGorushStore()
    let status = MemoryStatusRegistrationStore()
    let deliveryStatus = MemoryDeliveryStatusStore()

    init(pepper: APIKeyPepper) {
        servers = MemoryServerRegistry(pepper: pepper)
        legacy = MemoryLegacyDeviceRegistry(devices: devices)
    }

    /// The stores as ingest takes them.
    var ingestStores: IngestStores {
        IngestStores(
            servers: servers, devices: devices, legacyDevices: legacy, realms: realms, clients: clients,
            idempotency: idempotency, gorush: gorush, status: status, deliveryStatus: deliveryStatus)
    }
}

/// Servers by uuid: their key's HMAC under the pepper, deactivation, analytics, and the
/// requests leased per window.
final class MemoryServerRegistry: ServerRegistry {
    struct Server {
        var credential: String
        var deactivated = false
        var hostname = ""
        var analytics = ZulipAnalyticsIDs(realmCount: 0, installationCount: 0, realmAuditLog: 0)
    }

    let pepper: APIKeyPepper
    private let state = Mutex<(servers: [ServerID: Server], leased: [String: Int], hostnames: [String: ServerID])>(
        ([:], [:], [:]))

    init(pepper: APIKeyPepper) { self.pepper = pepper }

    func register(
        uuid: ServerID, apiKey: String, hostname: String, contactEmail: String, newAPIKey: String?, allowCreate: Bool,
        nowMs: Int64
    ) async throws -> Bool {
        let hmac = pepper.hmacHex(apiKey)
        return try state.withLock { state in
            var created = false
            var server: Server
            if let existing = state.servers[uuid] {
                guard pepper.verify(apiKey, hmacHex: existing.credential) else {
                    throw ServerRegistrationError.keyMismatch
                }
                guard !existing.deactivated else { throw ServerRegistrationError.deactivated }
                server = existing
            } else {
                guard allowCreate else { throw ServerRegistrationError.registrationClosed }
                server = Server(credential: hmac)
                created = true
            }
            let held = state.hostnames[hostname].map { $0 != uuid && state.servers[$0]?.hostname == hostname } ?? false
            if !held { state.hostnames[hostname] = uuid }
            server.hostname = hostname
            if let newAPIKey { server.credential = pepper.hmacHex(newAPIKey) }
            state.servers[uuid] = server
            return created
        }
    }

    func verify(uuid: ServerID, apiKey: String) async throws -> (check: ServerCredentialCheck, credential: String) {
        guard let server = state.withLock({ $0.servers[uuid] }), pepper.verify(apiKey, hmacHex: server.credential)
        else { return (.invalid, "") }
        return (server.deactivated ? .deactivated : .valid, server.credential)
    }

    func deactivate(uuid: ServerID, nowMs: Int64) async throws {
        state.withLock { $0.servers[uuid]?.deactivated = true }
    }

    func recordAnalytics(
        uuid: ServerID, version: String?, mergeBase: String?, apiFeatureLevel: Int64?, lastIDs: ZulipAnalyticsIDs,
        nowMs: Int64
    ) async throws {
        state.withLock { $0.servers[uuid]?.analytics = lastIDs }
    }

    func analyticsIDs(uuid: ServerID) async throws -> ZulipAnalyticsIDs {
        state.withLock { $0.servers[uuid]?.analytics }
            ?? ZulipAnalyticsIDs(realmCount: 0, installationCount: 0, realmAuditLog: 0)
    }

    func leaseQuota(server: ServerID, want: Int, returning: Int, limit: Int, windowSeconds: Int, nowMs: Int64)
        async throws -> ServerStore.QuotaLease
    {
        let window = WindowCounter.window(nowMs: nowMs, seconds: windowSeconds)
        return state.withLock { state in
            let key = "\(server):\(window)"
            let used = max(0, (state.leased[key] ?? 0) - max(0, returning))
            let granted = max(0, min(max(0, want), max(0, limit) - used))
            state.leased[key] = used + granted
            let record = state.servers[server]
            return ServerStore.QuotaLease(
                granted: granted, window: window, credential: record?.credential ?? "",
                deactivated: record?.deactivated ?? false)
        }
    }

    /// The first server registered with `hostname` (as the Redis store's index keeps it).
    func server(hostname: String) async throws -> ServerID? {
        state.withLock { state in
            state.hostnames[hostname].flatMap { state.servers[$0]?.hostname == hostname ? $0 : nil }
        }
    }

    func replaceKey(uuid: ServerID, newAPIKey: String, nowMs: Int64) async throws {
        state.withLock { $0.servers[uuid]?.credential = pepper.hmacHex(newAPIKey) }
    }

    /// The server's record as stored (for checks a route cannot show).
    func server(_ uuid: ServerID) -> Server? { state.withLock { $0.servers[uuid] } }
}

/// Realms by uuid with their owners, each server's realms and device count.
final class MemoryRealmRegistry: RealmRegistry {
    private let state = Mutex<
        (
            owners: [RealmID: ServerID], realmsOf: [ServerID: Set<RealmID>], devices: [ServerID: Int64],
            infos: [RealmID: ZulipRealmInfo]
        )
    >(([:], [:], [:], [:]))

    func register(_ realms: [RealmID], to server: ServerID, maxRealms: Int, nowMs: Int64) async throws
        -> [RealmRegistration]
    {
        state.withLock { state in
            realms.map { realm in
                switch state.owners[realm] {
                case server?: return .alreadyYours
                case _?: return .taken
                case nil:
                    guard state.realmsOf[server, default: []].count < maxRealms else { return .quotaExceeded }
                    state.owners[realm] = server
                    state.realmsOf[server, default: []].insert(realm)
                    return .registered
                }
            }
        }
    }

    func owners(_ realms: [RealmID]) async throws -> [ServerID?] {
        state.withLock { state in realms.map { state.owners[$0] } }
    }

    func describe(_ realms: [ZulipRealmInfo], of server: ServerID, storage: StorageKeyring, nowMs: Int64) async throws {
        state.withLock { state in
            for info in realms { state.infos[info.uuid] = info }
        }
    }

    func deviceCount(server: ServerID) async throws -> Int64 { state.withLock { $0.devices[server] ?? 0 } }

    func countDevice(server: ServerID, by delta: Int64) async throws {
        state.withLock { $0.devices[server] = max(0, ($0.devices[server] ?? 0) + delta) }
    }

    /// What the server's last analytics upload said of a realm.
    func info(_ realm: RealmID) -> ZulipRealmInfo? { state.withLock { $0.infos[realm] } }
}

/// Devices by id, found again by (realm, provider, token, push account), with their
/// users, push keys, invalidations and Zulip token ids.
final class MemoryDeviceRegistry: DeviceRegistry {
    struct State {
        var nextID: Int64 = 0
        var devices: [DeviceID: DeviceRecord] = [:]
        var index: [String: DeviceID] = [:]
        var users: [String: Set<DeviceID>] = [:]
        var tokenIDs: [String: DeviceID] = [:]
        var feedback: [RealmID: [FeedbackEntry]] = [:]
    }

    private let state = Mutex(State())
    private let keysKept = Mutex(3)
    /// How many devices are stored.
    var count: Int { state.withLock { $0.devices.count } }
    var maxStoredKeys: Int {
        get { keysKept.withLock { $0 } }
        set { keysKept.withLock { $0 = newValue } }
    }

    private static func indexKey(_ realm: RealmID, _ provider: Provider, _ token: String, _ account: Int64?) -> String {
        "\(realm)|\(provider.rawValue)|\(token)|\(account.map(String.init) ?? "-")"
    }

    private static func userKey(_ realm: RealmID, _ userID: Int64) -> String { "\(realm)|\(userID)" }

    func isRegistered(_ r: DeviceRegistration) async throws -> Bool {
        let key = Self.indexKey(r.realmUUID, r.token.provider, r.token.value, r.pushAccountID)
        return state.withLock { $0.index[key] != nil }
    }

    func register(_ r: DeviceRegistration, nowMs: Int64) async throws -> (id: DeviceID, created: Bool) {
        let key = Self.indexKey(r.realmUUID, r.token.provider, r.token.value, r.pushAccountID)
        return state.withLock { state in
            let existing = state.index[key]
            let id =
                existing
                ?? {
                    state.nextID += 1
                    return DeviceID(state.nextID)
                }()
            var record =
                state.devices[id]
                ?? DeviceRecord(
                    id: id, realmUUID: r.realmUUID, userID: nil, provider: r.token.provider, token: r.token.value,
                    appID: nil, pushAccountID: nil, currentKeyID: nil, keys: [:], status: .active,
                    registeredAtMs: nowMs, createdAtMs: nowMs)
            if let previous = record.userID, let userID = r.userID, previous != userID {
                state.users[Self.userKey(r.realmUUID, previous)]?.remove(id)
            }
            record.userID = r.userID ?? record.userID
            record.appID = r.appID ?? record.appID
            record.pushAccountID = r.pushAccountID ?? record.pushAccountID
            record.api = r.api ?? record.api
            record.status = .active
            record.registeredAtMs = nowMs
            if let (keyID, pushKey) = r.pushKey {
                record.keys[keyID] = pushKey
                record.currentKeyID = keyID
                // The current key and the newest before it, as the Redis store keeps them.
                while record.keys.count > max(1, maxStoredKeys),
                    let oldest = record.keys.keys.filter({ $0 != keyID }).min()
                {
                    record.keys[oldest] = nil
                }
            }
            state.devices[id] = record
            state.index[key] = id
            if let userID = r.userID { state.users[Self.userKey(r.realmUUID, userID), default: []].insert(id) }
            return (id, existing == nil)
        }
    }

    func devices(_ ids: [DeviceID]) async throws -> [DeviceID: DeviceRecord] {
        state.withLock { state in
            var found: [DeviceID: DeviceRecord] = [:]
            for id in ids { found[id] = state.devices[id] }
            return found
        }
    }

    func deviceIDs(realm: RealmID, userID: Int64) async throws -> [DeviceID] {
        state.withLock { Array($0.users[Self.userKey(realm, userID)] ?? []).sorted() }
    }

    func delete(_ device: DeviceRecord) async throws -> Bool {
        state.withLock { state in
            guard state.devices.removeValue(forKey: device.id) != nil else { return false }
            state.index = state.index.filter { $0.value != device.id }
            if let userID = device.userID { state.users[Self.userKey(device.realmUUID, userID)]?.remove(device.id) }
            return true
        }
    }

    func feedback(realm: RealmID, after cursor: String?, limit: Int) async throws -> [FeedbackEntry] {
        let entries = state.withLock { $0.feedback[realm] ?? [] }
        let start = cursor.flatMap { cursor in entries.firstIndex { $0.cursor == cursor }.map { $0 + 1 } } ?? 0
        return Array(entries.dropFirst(cursor == nil ? 0 : start).prefix(limit))
    }

    func bindZulipTokenID(_ tokenID: String, realm: RealmID, to device: DeviceID) async throws {
        state.withLock { $0.tokenIDs["\(realm)|\(tokenID)"] = device }
    }

    func devices(zulipTokenIDs tokenIDs: [String], realm: RealmID) async throws -> [DeviceID?] {
        state.withLock { state in tokenIDs.map { state.tokenIDs["\(realm)|\($0)"] } }
    }

    /// Files a legacy-API device of `owner` (`{server}|{user}`): `id` renewed, or a new one.
    func storeLegacy(
        _ id: DeviceID?, token: DeviceToken, appID: String?, realm: RealmID?, owner: String, nowMs: Int64
    ) -> DeviceID {
        state.withLock { state in
            let id =
                id
                ?? {
                    state.nextID += 1
                    return DeviceID(state.nextID)
                }()
            var record = DeviceRecord(
                id: id, realmUUID: realm ?? RealmID(""), userID: nil, provider: token.provider, token: token.value,
                appID: appID, pushAccountID: nil, currentKeyID: nil, keys: [:], status: .active,
                registeredAtMs: nowMs, createdAtMs: state.devices[id]?.createdAtMs ?? nowMs)
            record.zulipLegacyOwner = ZulipLegacyOwner(stored: owner)
            state.devices[id] = record
            return id
        }
    }

    /// A provider called the device's token dead (feedback's change): invalid, and listed
    /// for the realm's feedback. False when it was invalid already or is unknown.
    @discardableResult
    func invalidate(_ id: DeviceID, reason: OutcomeReason, nowMs: Int64 = Wire.nowMillis()) -> Bool {
        state.withLock { state in
            guard var record = state.devices[id], record.status == .active else { return false }
            record.status = .invalid(reason: reason, atMs: nowMs)
            state.devices[id] = record
            let sequence = state.feedback[record.realmUUID]?.count ?? 0
            state.feedback[record.realmUUID, default: []].append(
                FeedbackEntry(cursor: "\(nowMs)-\(sequence)", deviceID: id, reason: reason.name, atMs: nowMs))
            return true
        }
    }
}

/// Legacy-API devices: per (server, user key) an index of token fields to device ids,
/// each device a record in the device registry, as `ZulipLegacyDevices` keeps them.
final class MemoryLegacyDeviceRegistry: LegacyDeviceRegistry {
    let devices: MemoryDeviceRegistry
    private let indexes = Mutex<[String: [String: DeviceID]]>([:])

    init(devices: MemoryDeviceRegistry) { self.devices = devices }

    private static func indexKey(_ server: ServerID, _ userKey: ZulipUserKey) -> String { "\(server)|\(userKey)" }

    func fields(_ token: DeviceToken) -> [String] { ["\(token.provider.rawValue):\(token.value)"] }

    func register(
        server: ServerID, user: ZulipLegacyUser, token: DeviceToken, appID: String?, realm: RealmID?, nowMs: Int64
    )
        async throws -> (id: DeviceID, countDelta: Int64)
    {
        guard let primary = user.primary else { throw MemoryFailure(what: "no user") }
        let field = fields(token)[0]
        let known = indexes.withLock { $0[Self.indexKey(server, primary)]?[field] }
        let id = devices.storeLegacy(
            known, token: token, appID: appID, realm: realm, owner: "\(server)|\(primary)", nowMs: nowMs)
        indexes.withLock { $0[Self.indexKey(server, primary), default: [:]][field] = id }
        var delta: Int64 = known == nil ? 1 : 0
        if let secondary = user.secondary {
            delta -= Int64(try await remove(server: server, userKeys: [secondary], fields: [field]))
        }
        return (id, delta)
    }

    func isRegistered(server: ServerID, user: ZulipLegacyUser, token: DeviceToken) async throws -> Bool {
        guard let primary = user.primary else { return false }
        let field = fields(token)[0]
        return indexes.withLock { $0[Self.indexKey(server, primary)]?[field] != nil }
    }

    func unregister(server: ServerID, user: ZulipLegacyUser, token: DeviceToken) async throws -> Int {
        try await remove(server: server, userKeys: user.all, fields: fields(token))
    }

    func unregisterAll(server: ServerID, user: ZulipLegacyUser) async throws -> Int {
        let ids = indexes.withLock { indexes in
            user.all.flatMap { indexes.removeValue(forKey: Self.indexKey(server, $0))?.values.map { $0 } ?? [] }
        }
        return try await deleteDevices(ids)
    }

    func devices(server: ServerID, user: ZulipLegacyUser) async throws -> (
        entries: [ZulipLegacyEntry], fields: Set<String>, folded: Int
    ) {
        var seen: Set<String> = []
        var entries: [ZulipLegacyEntry] = []
        var duplicates: [(ZulipUserKey, String)] = []
        let snapshot = indexes.withLock { indexes in user.all.map { ($0, indexes[Self.indexKey(server, $0)] ?? [:]) } }
        for (userKey, index) in snapshot {
            for (field, id) in index.sorted(by: { $0.key < $1.key }) {
                guard let provider = Provider(rawValue: String(field.prefix { $0 != ":" })) else { continue }
                if !seen.insert(field).inserted {
                    duplicates.append((userKey, field))
                    continue
                }
                entries.append(ZulipLegacyEntry(provider: provider, deviceID: id, field: field))
            }
        }
        var folded = 0
        for (userKey, field) in duplicates {
            folded += try await remove(server: server, userKeys: [userKey], fields: [field])
        }
        return (entries.sorted { $0.deviceID < $1.deviceID }, seen, folded)
    }

    private func remove(server: ServerID, userKeys: [ZulipUserKey], fields: [String]) async throws -> Int {
        let ids = indexes.withLock { indexes in
            userKeys.flatMap { userKey in
                fields.compactMap { indexes[Self.indexKey(server, userKey)]?.removeValue(forKey: $0) }
            }
        }
        return try await deleteDevices(Array(Set(ids)))
    }

    private func deleteDevices(_ ids: [DeviceID]) async throws -> Int {
        var removed = 0
        for device in try await devices.devices(ids).values where try await devices.delete(device) { removed += 1 }
        return removed
    }
}

/// Failed authentications and server registrations per (client, window).
final class MemoryClientCounters: ClientCounters {
    private let counts = Mutex<[String: Int64]>([:])

    private func add(_ key: String, _ delta: Int64) -> Int64 {
        counts.withLock { counts in
            counts[key, default: 0] += delta
            return counts[key] ?? 0
        }
    }

    func countAuthAttempt(client: String, window: Int64, windowSeconds: Int) async throws -> Int64 {
        add("af|\(client)|\(window)", 1)
    }

    func forgiveAuthAttempt(client: String, window: Int64) async throws { _ = add("af|\(client)|\(window)", -1) }

    func countServerRegistration(client: String, window: Int64, windowSeconds: Int) async throws -> Int64 {
        add("sr|\(client)|\(window)", 1)
    }

    func countTransferVerification(window: Int64, windowSeconds: Int) async throws -> Int64 {
        add("tv|\(window)", 1)
    }
}

/// Idempotency records per (server, key); they never expire here.
final class MemoryIdempotencyStore: IdempotencyStore {
    struct Record {
        var fingerprint: String
        var claim: String
        var answer: IdempotentAnswer?
    }

    private let records = Mutex<[String: Record]>([:])

    func claim(server: ServerID, key: String, fingerprint: String, claimID: String, pendingSeconds: Int64)
        async throws -> IdempotencyClaim
    {
        records.withLock { records in
            if let record = records["\(server)|\(key)"] {
                return .held(fingerprint: record.fingerprint, answer: record.answer)
            }
            records["\(server)|\(key)"] = Record(fingerprint: fingerprint, claim: claimID)
            return .claimed
        }
    }

    func complete(server: ServerID, key: String, claimID: String, answer: IdempotentAnswer, ttlSeconds: Int)
        async throws
    {
        records.withLock { records in
            guard records["\(server)|\(key)"]?.claim == claimID else { return }
            records["\(server)|\(key)"]?.answer = answer
        }
    }

    func abandon(server: ServerID, key: String, claimID: String) async throws {
        records.withLock { records in
            guard let record = records["\(server)|\(key)"], record.claim == claimID, record.answer == nil else {
                return
            }
            records["\(server)|\(key)"] = nil
        }
    }
}

/// gorush's hooks, callers' ids and counters.
final class MemoryGorushStore: GorushStore {
    struct State {
        var hooks: [ServerID: GorushHook] = [:]
        var callerIDs: [NotificationID: String] = [:]
        var submitted: [ServerID: [String: Int64]] = [:]
        var outcomes: [RealmID: [String: Int64]] = [:]
        var counted: Set<String> = []
    }

    private let state = Mutex(State())

    func hook(server: ServerID) async throws -> GorushHook? { state.withLock { $0.hooks[server] } }
    func hookURL(server: ServerID) async throws -> String? { state.withLock { $0.hooks[server]?.url } }
    func setHook(server: ServerID, _ hook: GorushHook) async throws { state.withLock { $0.hooks[server] = hook } }
    func deleteHook(server: ServerID) async throws { state.withLock { $0.hooks[server] = nil } }

    func rememberCallerIDs(_ ids: [(NotificationID, String)], ttlSeconds: Int) async throws {
        state.withLock { state in for (id, caller) in ids { state.callerIDs[id] = caller } }
    }

    func callerID(of notification: NotificationID) async throws -> String? {
        state.withLock { $0.callerIDs[notification] }
    }

    func countSubmitted(server: ServerID, tokens: Int, notifications: Int) async throws {
        state.withLock { state in
            state.submitted[server, default: [:]]["total_count", default: 0] += Int64(tokens)
            state.submitted[server, default: [:]]["submitted_tasks", default: 0] += Int64(notifications)
        }
    }

    func counters(server: ServerID, realm: RealmID) async throws -> GorushCounters {
        state.withLock { GorushCounters(submitted: $0.submitted[server] ?? [:], outcomes: $0.outcomes[realm] ?? [:]) }
    }

    func countOutcomes(_ outcomes: [CountedOutcome]) async throws {
        state.withLock { state in
            for outcome in outcomes
            where state.counted.insert("\(outcome.topic):\(outcome.partition):\(outcome.offset)").inserted {
                state.outcomes[outcome.realm, default: [:]][outcome.field, default: 0] += 1
            }
        }
    }
}

/// Status registrations per (hashed key, installation), request claims and client counts.
final class MemoryStatusRegistrationStore: StatusRegistrationStore {
    struct Registration {
        var version: UInt64
        var bytes: [UInt8]?
        var device: DeviceID?
    }

    struct State {
        var registrations: [String: [String: Registration]] = [:]
        var messages: [String: [UInt8]?] = [:]
        var requests: [String: Int64] = [:]
    }

    private let state = Mutex(State())

    func storedVersion(hashedKey: String, installation: String) async throws -> UInt64 {
        state.withLock { $0.registrations[hashedKey]?[installation]?.version ?? 0 }
    }

    func store(
        hashedKey: String, installation: String, version: UInt64, registration: [UInt8]?, device: DeviceID?,
        maxInstallations: Int
    ) async throws -> StatusStoreOutcome {
        state.withLock { state in
            var installations = state.registrations[hashedKey] ?? [:]
            let stored = installations[installation]
            if let stored, stored.version >= version { return .stale }
            let active = installations.filter { $0.value.bytes != nil }
            if registration != nil, active[installation] == nil, active.count >= maxInstallations { return .full }
            installations[installation] = Registration(version: version, bytes: registration, device: device)
            state.registrations[hashedKey] = installations
            return .stored(previousDevice: stored?.device)
        }
    }

    func registrations(hashedKey: String, installation: String?) async throws -> [StoredStatusRegistration] {
        state.withLock { state in
            let installations = state.registrations[hashedKey] ?? [:]
            let parts = installation.map { [$0] } ?? installations.keys.sorted()
            return parts.compactMap { part in
                guard let stored = installations[part], let bytes = stored.bytes else { return nil }
                return StoredStatusRegistration(bytes: bytes, device: stored.device)
            }
        }
    }

    func countRequest(client: String, nowMs: Int64, windowSeconds: Int) async throws -> Int64 {
        let window = WindowCounter.window(nowMs: nowMs, seconds: windowSeconds)
        return state.withLock { state in
            state.requests["\(client)|\(window)", default: 0] += 1
            return state.requests["\(client)|\(window)"] ?? 0
        }
    }

    func claimMessage(_ messageID: String, pendingSeconds: Int) async throws -> StatusMessageClaim {
        state.withLock { state in
            guard let earlier = state.messages[messageID] else {
                state.messages[messageID] = .some(nil)
                return .claimed
            }
            return earlier.map { .answered($0) } ?? .busy
        }
    }

    func keepAnswer(_ messageID: String, answer: [UInt8]?, ttlSeconds: Int) async throws {
        state.withLock { $0.messages[messageID] = .some(answer) }
    }

    func releaseMessage(_ messageID: String) async throws {
        state.withLock { _ = $0.messages.removeValue(forKey: messageID) }
    }
}

/// Delivery status as `RedisDeliveryStatusStore` keeps it: per device the state furthest
/// along (`DeviceDeliveryStatus.replaces`), at most `limits.maxDevices` devices.
final class MemoryDeliveryStatusStore: DeliveryStatusStore {
    let limits: DeliveryStatusLimits
    private let state = Mutex<[NotificationID: NotificationStatus]>([:])

    init(limits: DeliveryStatusLimits = DeliveryStatusLimits()) { self.limits = limits }

    func record(_ updates: [DeliveryStatusUpdate]) async throws {
        state.withLock { all in
            for update in updates {
                var entry =
                    all[update.notification]
                    ?? NotificationStatus(
                        realm: update.realm, server: nil, acceptedAtMs: nil, devices: [:], overall: nil,
                        truncated: false)
                entry.server = entry.server ?? update.server
                entry.acceptedAtMs = entry.acceptedAtMs ?? update.acceptedAtMs
                let targets = update.targets ?? []
                for device in targets.prefix(limits.maxDevices) where entry.devices[device] == nil {
                    entry.devices[device] = DeviceDeliveryStatus(.accepted, atMs: update.acceptedAtMs ?? 0)
                }
                if targets.count > limits.maxDevices { entry.truncated = true }
                if let status = update.status {
                    if let device = update.device {
                        if let current = entry.devices[device] {
                            if status.replaces(current) { entry.devices[device] = status }
                        } else if entry.devices.count < limits.maxDevices {
                            entry.devices[device] = status
                        } else {
                            entry.truncated = true
                        }
                    } else if entry.overall.map({ status.replaces($0) }) ?? true {
                        entry.overall = status
                    }
                }
                all[update.notification] = entry
            }
        }
    }

    func status(of notification: NotificationID) async throws -> NotificationStatus? {
        state.withLock { $0[notification] }
    }
}
