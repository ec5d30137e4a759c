import PushModels
import RedisClient

// The device-state seams the consumer stages are written against, each with its Redis
// implementation beside it: the encryptor reads devices (`DeviceDirectory`), the
// dispatcher keeps its send ledger (`DeliveryLedger`), feedback invalidates
// (`DeviceInvalidations`). The stage unit tests wire in-memory ones.

/// The device records the encryptor fans a request out to.
public protocol DeviceDirectory: Sendable {
    /// A user's devices (active or not), by id.
    func deviceIDs(realm: RealmID, userID: Int64) async throws -> [DeviceID]
    /// The records of `ids` that exist, decrypted.
    func devices(_ ids: [DeviceID]) async throws -> [DeviceID: DeviceRecord]
    /// Several users' devices, in the order asked (`DeviceStore`: one round trip).
    func deviceIDs(users: [(realm: RealmID, userID: Int64)]) async throws -> [[DeviceID]]
}

extension DeviceDirectory {
    public func deviceIDs(users: [(realm: RealmID, userID: Int64)]) async throws -> [[DeviceID]] {
        var lists: [[DeviceID]] = []
        for user in users { lists.append(try await deviceIDs(realm: user.realm, userID: user.userID)) }
        return lists
    }
}

/// Which (notification, device) pairs a provider already accepted (`RedisDeliveryLedger`).
public protocol DeliveryLedger: Sendable {
    /// Claims the pair for sending; returns what was there before (`.unknown`: the claim is ours).
    func claim(_ pair: SendPair, nowMs: Int64) async throws -> LedgerState
    /// Records that the provider accepted the pair.
    func recordSent(_ pair: SendPair) async throws
    /// The provider refused the pair: not sent, free to be sent later.
    func release(_ pair: SendPair) async throws
}

/// What feedback changes when a provider calls a token dead.
public protocol DeviceInvalidations: Sendable {
    func device(_ id: DeviceID) async throws -> DeviceRecord?
    /// Marks a device invalid if the report still applies to it (same token, not
    /// re-registered since the provider's timestamp); true if it changed.
    func invalidate(deviceID: DeviceID, tokenFingerprint: String, reason: OutcomeReason, providerTimestampMs: Int64?)
        async throws -> Bool
    /// Deletes a device of Zulip's legacy API; true if it was there.
    func removeLegacy(_ device: DeviceRecord) async throws -> Bool
    /// Counts a device in or out of a server's device quota.
    func countDevice(server: ServerID, by delta: Int64) async throws
}

extension DeviceStore: DeviceDirectory {}
extension RedisDeliveryLedger: DeliveryLedger {}

/// Feedback's changes on the Redis device store.
public struct RedisDeviceInvalidations: DeviceInvalidations {
    let devices: DeviceStore

    public init(devices: DeviceStore) {
        self.devices = devices
    }

    public func device(_ id: DeviceID) async throws -> DeviceRecord? {
        try await devices.device(id)
    }

    public func invalidate(
        deviceID: DeviceID, tokenFingerprint: String, reason: OutcomeReason, providerTimestampMs: Int64?
    ) async throws -> Bool {
        try await devices.invalidate(
            deviceID: deviceID, tokenFingerprint: tokenFingerprint, reason: reason,
            providerTimestampMs: providerTimestampMs)
    }

    public func removeLegacy(_ device: DeviceRecord) async throws -> Bool {
        try await ZulipLegacyDevices(devices: devices).remove(device)
    }

    public func countDevice(server: ServerID, by delta: Int64) async throws {
        try await RealmDirectory(redis: devices.redis, keys: devices.keys).countDevice(server: server, by: delta)
    }
}
