import PushCrypto
import PushModels
import RedisClient

/// Who a Zulip legacy-API registration belongs to: Zulip servers name a user by
/// `user_id`, `user_uuid`, or both (newer servers send both).
public struct ZulipLegacyUser: Sendable, Hashable {
    public var userID: Int64?
    public var userUUID: String?

    public init(userID: Int64?, userUUID: String?) {
        self.userID = userID
        self.userUUID = userUUID
    }

    /// The user's key (`uuid:{user_uuid}`, else `id:{user_id}`), empty when neither is given.
    public var key: ZulipUserKey { primary ?? "" }

    /// The user's key under the uuid when there is one, else under the id.
    var primary: ZulipUserKey? {
        userUUID.map { ZulipUserKey("uuid:\($0)") } ?? userID.map { ZulipUserKey("id:\($0)") }
    }
    /// The id key, when both are given: registrations under it are folded into the uuid.
    var secondary: ZulipUserKey? { userUUID == nil ? nil : userID.map { ZulipUserKey("id:\($0)") } }
    var all: [ZulipUserKey] { [primary, secondary].compactMap { $0 } }
}

/// The server and user a legacy-API device belongs to, stored as `{server}|{user}`.
public struct ZulipLegacyOwner: Sendable, Equatable {
    public var server: ServerID
    /// The user's key: `uuid:{user_uuid}` or `id:{user_id}`.
    public var user: ZulipUserKey

    public init(server: ServerID, user: ZulipUserKey) {
        self.server = server
        self.user = user
    }

    /// Reads the stored form; nil when empty. Any other value marks a legacy device, as it
    /// always has: one without `|` reads as a server with no user (`isComplete` false),
    /// which no server's request and no removal matches.
    public init?(stored: String) {
        guard !stored.isEmpty else { return nil }
        guard let bar = stored.firstIndex(of: "|") else {
            server = ServerID(stored)
            user = ZulipUserKey("")
            isComplete = false
            return
        }
        server = ServerID(String(stored[..<bar]))
        user = ZulipUserKey(String(stored[stored.index(after: bar)...]))
        isComplete = true
    }

    /// Whether the stored form had both parts (`{server}|{user}`).
    public private(set) var isComplete = true

    /// Whether the device is one of `server`'s.
    public func belongs(to server: ServerID) -> Bool { isComplete && self.server == server }

    /// The stored form.
    public var stored: String { "\(server)|\(user)" }
}

/// One legacy device of a user as its index holds it.
public struct ZulipLegacyEntry: Sendable, Equatable {
    public var provider: Provider
    public var deviceID: DeviceID
    /// The index field: `{provider}:{digest of the token}`.
    public var field: String

    public init(provider: Provider, deviceID: DeviceID, field: String) {
        self.provider = provider
        self.deviceID = deviceID
        self.field = field
    }
}

/// Devices of Zulip's legacy (non-E2EE) bouncer API, kept as Zulip's bouncer keeps
/// them: per (server, user, token kind, token), APNs tokens matched without case.
/// Each is a device record like any other (`DeviceStore` reads it, the token encrypted
/// at rest), marked `zulip_legacy` with its owner, and indexed per user in
/// `{p}zl:{server}:{user}` under a keyed digest of the token. A dead token is deleted,
/// not kept invalid: the Zulip server learns it from `deleted_devices`.
public struct ZulipLegacyDevices: Sendable {
    public let devices: DeviceStore

    public init(devices: DeviceStore) {
        self.devices = devices
    }

    var redis: RedisClient { devices.redis }
    var keys: RedisKeys { devices.keys }

    /// Every index field a token may be under, the current storage key's digest first.
    /// `token` is already normalized (`DeviceToken` lowercases APNs tokens).
    public func fields(_ token: DeviceToken) -> [String] {
        devices.storage.tokenDigests(token.value).map { "\(token.provider.rawValue):\($0)" }
    }

    /// Registers a device for the user, or renews it. With both ids the registration is
    /// kept under the uuid, and one of the same token under the id alone is removed.
    /// Returns the device id and how the server's device count changed.
    public func register(
        server: ServerID, user: ZulipLegacyUser, token: DeviceToken, appID: String?, realm: RealmID?,
        nowMs: Int64 = Wire.nowMillis()
    ) async throws -> (id: DeviceID, countDelta: Int64) {
        guard let primary = user.primary else { throw RedisError(code: .protocolError, message: "no user") }
        let forms = fields(token)
        let userKey = keys.zulipLegacyUser(server: server, user: primary)
        // The id comes from the device sequence, another key (another slot on a cluster):
        // taken only when the token is new to the user, then offered to the script, which
        // still answers with the existing id if a concurrent registration won.
        var found = try await registerIndex(userKey, newID: nil, forms: forms)
        if found == nil {
            let candidate = try await redis.command("INCR", RedisArgument(keys.deviceSequence)).int ?? 0
            found = try await registerIndex(userKey, newID: DeviceID(candidate), forms: forms)
        }
        guard let (id, created) = found else {
            throw RedisError(code: .protocolError, message: "the legacy register script kept no id")
        }
        var fields: [RedisArgument] = [
            "HSET", RedisArgument(keys.device(id)),
            "realm", RedisArgument(realm ?? ""),
            "provider", RedisArgument(token.provider.rawValue),
            "token", RedisArgument(try devices.storage.sealString(token.value, slot: .deviceToken(id))),
            "status", "active", "reason", "", "invalid_ms", "",
            "registered_ms", RedisArgument(nowMs),
            "zulip_legacy", RedisArgument(ZulipLegacyOwner(server: server, user: primary).stored),
        ]
        if let appID { fields += ["app_id", RedisArgument(appID)] }
        try await redis.checkedPipeline([
            fields, ["HSETNX", RedisArgument(keys.device(id)), "created_ms", RedisArgument(nowMs)],
        ])
        var delta: Int64 = created ? 1 : 0
        if let secondary = user.secondary {
            delta -= Int64(try await remove(server: server, userKeys: [secondary], forms: forms))
        }
        return (id, delta)
    }

    /// Whether the user already has `token` registered (a registration would renew it).
    public func isRegistered(server: ServerID, user: ZulipLegacyUser, token: DeviceToken) async throws -> Bool {
        guard let primary = user.primary else { return false }
        return try await redis.command(
            ["HMGET", RedisArgument(keys.zulipLegacyUser(server: server, user: primary))]
                + fields(token).map { RedisArgument($0) }
        ).array.contains { $0.int != nil }
    }

    /// Removes the user's registrations of `token` (under either id); returns how many.
    public func unregister(server: ServerID, user: ZulipLegacyUser, token: DeviceToken) async throws -> Int {
        try await remove(server: server, userKeys: user.all, forms: fields(token))
    }

    /// Removes every legacy registration of the user; returns how many.
    public func unregisterAll(server: ServerID, user: ZulipLegacyUser) async throws -> Int {
        var removed = 0
        for userKey in user.all {
            // Read and emptied in one step: a registration in between is not lost.
            let ids = try await redis.command(
                "EVAL", RedisArgument(Self.takeAllScript), "1",
                RedisArgument(keys.zulipLegacyUser(server: server, user: userKey))
            ).array.compactMap { $0.int.map { DeviceID($0) } }
            removed += try await deleteDevices(ids)
        }
        return removed
    }

    /// The user's devices, FCM and APNs, ordered by id. A token registered under both
    /// the uuid and the id counts once: the id's registration is removed (as Zulip does).
    /// Also returns every index field the user has, to tell which tokens are known.
    /// `folded` counts the duplicates removed (the server's device count goes down by it).
    public func devices(server: ServerID, user: ZulipLegacyUser) async throws -> (
        entries: [ZulipLegacyEntry], fields: Set<String>, folded: Int
    ) {
        let userKeys = user.all
        guard !userKeys.isEmpty else { return ([], [], 0) }
        let replies = try await redis.checkedPipeline(
            userKeys.map { ["HGETALL", RedisArgument(keys.zulipLegacyUser(server: server, user: $0))] })
        var seen: Set<String> = []
        var entries: [ZulipLegacyEntry] = []
        var duplicates: [(userKey: ZulipUserKey, field: String, id: DeviceID)] = []
        for (userKey, reply) in zip(userKeys, replies) {
            for (field, value) in reply.hash.sorted(by: { $0.key < $1.key }) {
                guard let id = Int64(value).map({ DeviceID($0) }),
                    let provider = Provider(rawValue: String(field.prefix { $0 != ":" }))
                else { continue }
                if !seen.insert(field).inserted {
                    duplicates.append((userKey, field, id))
                    continue
                }
                entries.append(ZulipLegacyEntry(provider: provider, deviceID: id, field: field))
            }
        }
        var folded = 0
        for duplicate in duplicates {
            folded += try await remove(server: server, userKeys: [duplicate.userKey], forms: [duplicate.field])
        }
        return (entries.sorted { $0.deviceID < $1.deviceID }, seen, folded)
    }

    /// Deletes a legacy device a provider called dead (feedback); true if it was there.
    public func remove(_ device: DeviceRecord) async throws -> Bool {
        guard let owner = device.zulipLegacyOwner, owner.isComplete else { return false }
        let server = owner.server
        let userKey = owner.user
        // Only the index fields that still name this device, compared and removed in one step.
        if let token = try? DeviceToken(provider: device.provider, value: device.token, rules: .zulip) {
            try await redis.command(
                [
                    "EVAL", RedisArgument(Self.takeScript), "1",
                    RedisArgument(keys.zulipLegacyUser(server: server, user: userKey)), RedisArgument(device.id),
                ]
                    + fields(token).map { RedisArgument($0) })
        }
        return try await devices.delete(device)
    }

    /// Removes the devices under `forms` in the given user indexes; returns how many.
    private func remove(server: ServerID, userKeys: [ZulipUserKey], forms: [String]) async throws -> Int {
        var ids: [DeviceID] = []
        for userKey in userKeys {
            // Read and removed in one step: a registration in between is not lost.
            ids += try await redis.command(
                [
                    "EVAL", RedisArgument(Self.takeScript), "1",
                    RedisArgument(keys.zulipLegacyUser(server: server, user: userKey)), "-",
                ]
                    + forms.map { RedisArgument($0) }
            ).array.compactMap { $0.int.map { DeviceID($0) } }
        }
        return try await deleteDevices(Array(Set(ids)))
    }

    private func deleteDevices(_ ids: [DeviceID]) async throws -> Int {
        guard !ids.isEmpty else { return 0 }
        var removed = 0
        for device in try await devices.devices(ids).values where try await devices.delete(device) {
            removed += 1
        }
        return removed
    }

    /// Finds the token in the user's index, or files it under `newID` (nil: only look).
    private func registerIndex(_ userKey: String, newID: DeviceID?, forms: [String]) async throws -> (DeviceID, Bool)? {
        let reply = try await redis.command(
            [
                "EVAL", RedisArgument(Self.registerScript), "1", RedisArgument(userKey),
                RedisArgument(newID.map(\.description) ?? "-"),
            ]
                + forms.map { RedisArgument($0) })
        let parts = reply.array
        guard parts.count == 2, let id = parts[0].int, let created = parts[1].int else {
            throw RedisError(code: .protocolError, message: "unexpected reply to the legacy register script")
        }
        return created < 0 ? nil : (DeviceID(id), created == 1)
    }

    /// KEYS[1] the user's index; ARGV[1] the id for a new registration ('-': none), then the
    /// token's index fields, current form first. Returns {device id, 1 if new, 0 if found}
    /// or {0, -1} (not found, no id offered). A device found under an older form moves to
    /// the current one.
    static let registerScript = """
        for i = 2, #ARGV do
          local id = redis.call('HGET', KEYS[1], ARGV[i])
          if id then
            if i > 2 then
              redis.call('HDEL', KEYS[1], ARGV[i])
              redis.call('HSET', KEYS[1], ARGV[2], id)
            end
            return {tonumber(id), 0}
          end
        end
        if ARGV[1] == '-' then return {0, -1} end
        redis.call('HSET', KEYS[1], ARGV[2], ARGV[1])
        return {tonumber(ARGV[1]), 1}
        """

    /// KEYS[1] a user's index; ARGV[1] the device id the fields must hold ('-': any), then
    /// the fields. Removes the matching fields and returns their device ids.
    static let takeScript = """
        local taken = {}
        for i = 2, #ARGV do
          local id = redis.call('HGET', KEYS[1], ARGV[i])
          if id and (ARGV[1] == '-' or id == ARGV[1]) then
            redis.call('HDEL', KEYS[1], ARGV[i])
            taken[#taken + 1] = tonumber(id)
          end
        end
        return taken
        """

    /// KEYS[1] a user's index: empties it and returns every device id it held.
    static let takeAllScript = """
        local ids = redis.call('HVALS', KEYS[1])
        redis.call('DEL', KEYS[1])
        local taken = {}
        for i = 1, #ids do taken[i] = tonumber(ids[i]) end
        return taken
        """
}
