import PushCrypto
import PushModels

// The seams ingest's controllers are written against, one per kind of state. The Redis
// stores conform (below); the router tests wire in-memory ones, so each API's routes
// run without Redis.

/// Realm-hosting servers: registration, credentials, deactivation, Zulip's analytics
/// facts, and leases of their rate-limit windows (`ServerStore`).
public protocol ServerRegistry: Sendable {
    /// Registers a server, or updates it when `apiKey` is its key; true when created.
    /// Throws `ServerRegistrationError`.
    func register(
        uuid: ServerID, apiKey: String, hostname: String, contactEmail: String, newAPIKey: String?, allowCreate: Bool,
        nowMs: Int64
    ) async throws -> Bool
    /// The key check, and the stored credential it passed against (`leaseQuota` reads it back).
    func verify(uuid: ServerID, apiKey: String) async throws -> (check: ServerCredentialCheck, credential: String)
    func deactivate(uuid: ServerID, nowMs: Int64) async throws
    func recordAnalytics(
        uuid: ServerID, version: String?, mergeBase: String?, apiFeatureLevel: Int64?, lastIDs: ZulipAnalyticsIDs,
        nowMs: Int64
    ) async throws
    func analyticsIDs(uuid: ServerID) async throws -> ZulipAnalyticsIDs
    /// The server registered with `hostname` (Zulip's registration transfer), if any.
    func server(hostname: String) async throws -> ServerID?
    /// Gives the server a new API key; the old one stops working.
    func replaceKey(uuid: ServerID, newAPIKey: String, nowMs: Int64) async throws
    /// Up to `want` requests of the server's window, after giving back `returning`; never
    /// more than `limit` granted per window, with the server's credential and deactivation.
    func leaseQuota(server: ServerID, want: Int, returning: Int, limit: Int, windowSeconds: Int, nowMs: Int64)
        async throws -> ServerStore.QuotaLease
}

/// Realms and whose they are, Zulip's facts about them, and each server's device count
/// (`RealmDirectory`).
public protocol RealmRegistry: Sendable {
    /// Registers each realm to `server` (all or none over `maxRealms`), in order.
    func register(_ realms: [RealmID], to server: ServerID, maxRealms: Int, nowMs: Int64) async throws
        -> [RealmRegistration]
    /// The owning server of each realm (nil: never registered), in order.
    func owners(_ realms: [RealmID]) async throws -> [ServerID?]
    /// Stores what a server uploaded about its realms (all registered to it already).
    func describe(_ realms: [ZulipRealmInfo], of server: ServerID, storage: StorageKeyring, nowMs: Int64) async throws
    func deviceCount(server: ServerID) async throws -> Int64
    /// Counts devices in or out of the server's device quota (never below 0).
    func countDevice(server: ServerID, by delta: Int64) async throws
}

extension RealmRegistry {
    /// Registers one realm to `server`: a realm has one owner, for good.
    public func register(_ realm: RealmID, to server: ServerID, maxRealms: Int) async throws -> RealmRegistration {
        try await register([realm], to: server, maxRealms: maxRealms, nowMs: Wire.nowMillis())[0]
    }
}

/// Devices as ingest registers, reads, lists and removes them (`DeviceStore`).
public protocol DeviceRegistry: Sendable {
    /// Whether this registration would renew a device rather than create one.
    func isRegistered(_ registration: DeviceRegistration) async throws -> Bool
    /// Registers or renews a device; its id and whether it is new.
    func register(_ registration: DeviceRegistration, nowMs: Int64) async throws -> (id: DeviceID, created: Bool)
    func devices(_ ids: [DeviceID]) async throws -> [DeviceID: DeviceRecord]
    /// Whose each device is and whether it is active, without reading its token or keys:
    /// what ingest needs to count a notification's targets.
    func standings(_ ids: [DeviceID]) async throws -> [DeviceID: DeviceStanding]
    func deviceIDs(realm: RealmID, userID: Int64) async throws -> [DeviceID]
    /// Deletes a device; true when this call removed it.
    func delete(_ device: DeviceRecord) async throws -> Bool
    /// A realm's invalidations after `cursor`, oldest first.
    func feedback(realm: RealmID, after cursor: String?, limit: Int) async throws -> [FeedbackEntry]
    /// Binds Zulip 12.x's `token_id` in a realm to a device.
    func bindZulipTokenID(_ tokenID: String, realm: RealmID, to device: DeviceID) async throws
    /// The devices `tokenIDs` name in `realm`, in order.
    func devices(zulipTokenIDs tokenIDs: [String], realm: RealmID) async throws -> [DeviceID?]
}

extension DeviceRegistry {
    public func device(_ id: DeviceID) async throws -> DeviceRecord? { try await devices([id])[id] }

    public func standings(_ ids: [DeviceID]) async throws -> [DeviceID: DeviceStanding] {
        try await devices(ids).mapValues {
            DeviceStanding(realmUUID: $0.realmUUID, userID: $0.userID, isActive: $0.status.isActive)
        }
    }
}

/// A device's owner and status, read without its secrets.
public struct DeviceStanding: Sendable, Equatable {
    public var realmUUID: RealmID
    public var userID: Int64?
    public var isActive: Bool

    public init(realmUUID: RealmID, userID: Int64?, isActive: Bool) {
        self.realmUUID = realmUUID
        self.userID = userID
        self.isActive = isActive
    }

    /// True when the device is `userID`'s in `realm` and active.
    public func isDeliverable(realm: RealmID, userID: Int64) -> Bool {
        isActive && realmUUID == realm && self.userID == userID
    }
}

/// Devices of Zulip's legacy (non-E2EE) API, per (server, user, token) (`ZulipLegacyDevices`).
public protocol LegacyDeviceRegistry: Sendable {
    /// Every index field a token may be filed under.
    func fields(_ token: DeviceToken) -> [String]
    /// Registers or renews the user's device; its id and how the server's device count changed.
    func register(
        server: ServerID, user: ZulipLegacyUser, token: DeviceToken, appID: String?, realm: RealmID?, nowMs: Int64
    )
        async throws -> (id: DeviceID, countDelta: Int64)
    func isRegistered(server: ServerID, user: ZulipLegacyUser, token: DeviceToken) async throws -> Bool
    /// Removes the user's registrations of `token`; how many.
    func unregister(server: ServerID, user: ZulipLegacyUser, token: DeviceToken) async throws -> Int
    /// Removes every registration of the user; how many.
    func unregisterAll(server: ServerID, user: ZulipLegacyUser) async throws -> Int
    /// The user's devices by id, every index field the user has, and duplicates folded.
    func devices(server: ServerID, user: ZulipLegacyUser) async throws -> (
        entries: [ZulipLegacyEntry], fields: Set<String>, folded: Int
    )
}

extension LegacyDeviceRegistry {
    /// True when one of the token's forms is among a user's fields.
    public func knows(_ token: DeviceToken, in userFields: Set<String>) -> Bool {
        fields(token).contains { userFields.contains($0) }
    }
}

extension ServerStore: ServerRegistry {}
extension RealmDirectory: RealmRegistry {}
extension DeviceStore: DeviceRegistry {}
extension ZulipLegacyDevices: LegacyDeviceRegistry {}
