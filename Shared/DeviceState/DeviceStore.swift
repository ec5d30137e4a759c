import Foundation
import PushCrypto
import PushModels
import RedisClient

/// A device as stored in Redis.
public struct DeviceRecord: Sendable, Equatable {
    public enum Status: String, Sendable {
        case active
        case invalid
    }

    public var id: Int64
    public var realmUUID: String
    public var userID: Int64?
    public var provider: Provider
    public var token: String
    public var appID: String?
    public var pushAccountID: Int64?
    /// The key new notifications are encrypted with (native devices only).
    public var currentKeyID: UInt32?
    public var keys: [UInt32: PushKey]
    public var status: Status
    public var invalidReason: String?
    public var invalidAtMs: Int64?
    public var registeredAtMs: Int64
    public var createdAtMs: Int64

    public var currentKey: PushKey? { currentKeyID.flatMap { keys[$0] } }
}

/// What a registration supplies. A device is identified by (realm, provider, token,
/// push_account_id): registering the same again returns the same device id.
public struct DeviceRegistration: Sendable {
    public var realmUUID: String
    public var userID: Int64?
    public var token: DeviceToken
    public var appID: String?
    public var pushAccountID: Int64?
    public var pushKey: (id: UInt32, key: PushKey)?

    public init(
        realmUUID: String, userID: Int64?, token: DeviceToken, appID: String?, pushAccountID: Int64?,
        pushKey: (id: UInt32, key: PushKey)?
    ) {
        self.realmUUID = realmUUID
        self.userID = userID
        self.token = token
        self.appID = appID
        self.pushAccountID = pushAccountID
        self.pushKey = pushKey
    }
}

/// One invalidation as reported to realms by `GET /v1/feedback`.
public struct FeedbackEntry: Sendable, Equatable, Codable {
    public var cursor: String
    public var deviceID: Int64
    public var reason: String
    public var atMs: Int64

    enum CodingKeys: String, CodingKey {
        case cursor, reason
        case deviceID = "device_id"
        case atMs = "at_ms"
    }
}

/// Devices, their keys and their invalidations in Redis. Batches go out as one
/// pipeline; invalidation is one atomic script, so it is idempotent.
public struct DeviceStore: Sendable {
    public let redis: RedisClient
    public let keys: RedisKeys
    /// How long a replaced push key stays stored after a newer one arrives.
    public var keyGracePeriodMs: Int64 = 7 * 24 * 3600 * 1000

    public init(redis: RedisClient, keys: RedisKeys) {
        self.redis = redis
        self.keys = keys
    }

    /// Registers or renews a device; returns its id and whether it is new.
    public func register(_ r: DeviceRegistration, nowMs: Int64 = Wire.nowMillis()) async throws -> (
        id: Int64, created: Bool
    ) {
        let index = keys.tokenIndex(
            realm: r.realmUUID, provider: r.token.provider, token: r.token.value, pushAccountID: r.pushAccountID)
        var created = false
        let id: Int64
        if let existing = try await redis.command("GET", RedisArgument(index)).int {
            id = existing
            // The same phone now signed in as another user: it leaves the old user's fan-out.
            if let userID = r.userID,
                let previous = try await redis.command("HGET", RedisArgument(keys.device(id)), "user_id").int,
                previous != userID
            {
                try await redis.command(
                    "SREM", RedisArgument(keys.userDevices(realm: r.realmUUID, userID: previous)), RedisArgument(id))
            }
        } else {
            let candidate = try await redis.command("INCR", RedisArgument(keys.deviceSequence)).int ?? 0
            // Two concurrent registrations of one token: the first SET NX wins, the other adopts its id.
            let won = try await redis.command("SET", RedisArgument(index), RedisArgument(candidate), "NX")
            if won == .null {
                id = try await redis.command("GET", RedisArgument(index)).int ?? candidate
            } else {
                id = candidate
                created = true
            }
        }
        var fields: [RedisArgument] = [
            "HSET", RedisArgument(keys.device(id)),
            "realm", RedisArgument(r.realmUUID),
            "provider", RedisArgument(r.token.provider.rawValue),
            "token", RedisArgument(r.token.value),
            "status", "active", "reason", "", "invalid_ms", "",
            "registered_ms", RedisArgument(nowMs),
        ]
        if let userID = r.userID { fields += ["user_id", RedisArgument(userID)] }
        if let appID = r.appID { fields += ["app_id", RedisArgument(appID)] }
        if let account = r.pushAccountID { fields += ["push_account_id", RedisArgument(account)] }
        if let (keyID, key) = r.pushKey {
            fields += ["key_id", RedisArgument(keyID), "scheme", RedisArgument(key.scheme.rawValue)]
        }
        var commands: [[RedisArgument]] = [
            fields,
            ["HSETNX", RedisArgument(keys.device(id)), "created_ms", RedisArgument(nowMs)],
        ]
        if let userID = r.userID {
            commands.append([
                "SADD", RedisArgument(keys.userDevices(realm: r.realmUUID, userID: userID)), RedisArgument(id),
            ])
        }
        if let (keyID, key) = r.pushKey {
            commands.append([
                "HSET", RedisArgument(keys.deviceKeys(id)), RedisArgument(keyID), RedisArgument("\(key.base64)|\(nowMs)"),
            ])
        }
        try check(try await redis.pipeline(commands))
        if r.pushKey != nil { try await pruneKeys(id, nowMs: nowMs) }
        return (id, created)
    }

    /// Drops push keys replaced longer than the grace period ago.
    private func pruneKeys(_ id: Int64, nowMs: Int64) async throws {
        let replies = try await redis.pipeline([
            ["HGET", RedisArgument(keys.device(id)), "key_id"],
            ["HGETALL", RedisArgument(keys.deviceKeys(id))],
        ])
        let current = replies[0].string
        var stale: [RedisArgument] = []
        let entries = replies[1].hash.map { ($0.key, Int64($0.value.split(separator: "|").last ?? "") ?? 0) }
            .sorted { $0.1 < $1.1 }
        // A key is replaced at the moment the next newer key was added.
        for (i, entry) in entries.enumerated() where entry.0 != current && i + 1 < entries.count {
            if nowMs - entries[i + 1].1 > keyGracePeriodMs { stale.append(RedisArgument(entry.0)) }
        }
        if !stale.isEmpty {
            try await redis.command(["HDEL", RedisArgument(keys.deviceKeys(id))] + stale)
        }
    }

    /// Loads devices in one pipelined round trip; ids that do not exist are absent.
    public func devices(_ ids: [Int64]) async throws -> [Int64: DeviceRecord] {
        guard !ids.isEmpty else { return [:] }
        var commands: [[RedisArgument]] = []
        for id in ids {
            commands.append(["HGETALL", RedisArgument(keys.device(id))])
            commands.append(["HGETALL", RedisArgument(keys.deviceKeys(id))])
        }
        let replies = try await redis.pipeline(commands)
        try check(replies)
        var result: [Int64: DeviceRecord] = [:]
        for (i, id) in ids.enumerated() {
            if let record = Self.decode(id: id, fields: replies[2 * i].hash, keyFields: replies[2 * i + 1].hash) {
                result[id] = record
            }
        }
        return result
    }

    public func device(_ id: Int64) async throws -> DeviceRecord? {
        try await devices([id])[id]
    }

    static func decode(id: Int64, fields: [String: String], keyFields: [String: String]) -> DeviceRecord? {
        guard let realm = fields["realm"], let providerName = fields["provider"],
            let provider = Provider(rawValue: providerName), let token = fields["token"]
        else { return nil }
        var keys: [UInt32: PushKey] = [:]
        for (keyID, value) in keyFields {
            guard let id = UInt32(keyID), let encoded = value.split(separator: "|").first,
                let key = try? PushKey(base64: String(encoded))
            else { continue }
            keys[id] = key
        }
        return DeviceRecord(
            id: id, realmUUID: realm, userID: fields["user_id"].flatMap { Int64($0) }, provider: provider,
            token: token, appID: fields["app_id"].flatMap { $0.isEmpty ? nil : $0 },
            pushAccountID: fields["push_account_id"].flatMap { Int64($0) },
            currentKeyID: fields["key_id"].flatMap { UInt32($0) }, keys: keys,
            status: fields["status"] == "invalid" ? .invalid : .active,
            invalidReason: fields["reason"].flatMap { $0.isEmpty ? nil : $0 },
            invalidAtMs: fields["invalid_ms"].flatMap { Int64($0) },
            registeredAtMs: fields["registered_ms"].flatMap { Int64($0) } ?? 0,
            createdAtMs: fields["created_ms"].flatMap { Int64($0) } ?? 0)
    }

    /// The ids of a user's devices (active or not).
    public func deviceIDs(realm: String, userID: Int64) async throws -> [Int64] {
        try await redis.command("SMEMBERS", RedisArgument(keys.userDevices(realm: realm, userID: userID)))
            .array.compactMap(\.int).sorted()
    }

    /// Forgets a device entirely: its record, keys, user membership and token index.
    public func delete(_ device: DeviceRecord) async throws {
        var commands: [[RedisArgument]] = [
            ["DEL", RedisArgument(keys.device(device.id)), RedisArgument(keys.deviceKeys(device.id))],
            [
                "DEL",
                RedisArgument(
                    keys.tokenIndex(
                        realm: device.realmUUID, provider: device.provider, token: device.token,
                        pushAccountID: device.pushAccountID)),
            ],
        ]
        if let userID = device.userID {
            commands.append([
                "SREM", RedisArgument(keys.userDevices(realm: device.realmUUID, userID: userID)),
                RedisArgument(device.id),
            ])
        }
        try check(try await redis.pipeline(commands))
    }

    /// Marks a device invalid, atomically and idempotently. Ignored when the device is
    /// gone or already invalid, when its token changed since the report, or when it
    /// re-registered after the provider's timestamp. Returns true if it changed.
    public func invalidate(
        deviceID: Int64, tokenFingerprint: String, reason: String, providerTimestampMs: Int64?,
        nowMs: Int64 = Wire.nowMillis()
    ) async throws -> Bool {
        guard let device = try await device(deviceID) else { return false }
        guard Fingerprint.token(device.token) == tokenFingerprint else { return false }
        let reply = try await redis.command(
            "EVAL", RedisArgument(Self.invalidateScript), "2", RedisArgument(keys.device(deviceID)),
            RedisArgument(keys.feedback(realm: device.realmUUID)), RedisArgument(device.token), RedisArgument(reason),
            RedisArgument(providerTimestampMs ?? -1), RedisArgument(nowMs), RedisArgument(deviceID))
        return reply.int == 1
    }

    /// KEYS[1] device hash, KEYS[2] feedback stream; ARGV token, reason, provider ts (-1 none), now, id.
    static let invalidateScript = """
        local status = redis.call('HGET', KEYS[1], 'status')
        if status ~= 'active' then return 0 end
        if redis.call('HGET', KEYS[1], 'token') ~= ARGV[1] then return 0 end
        local ts = tonumber(ARGV[3])
        local registered = tonumber(redis.call('HGET', KEYS[1], 'registered_ms') or '0')
        if ts >= 0 and registered > ts then return 0 end
        redis.call('HSET', KEYS[1], 'status', 'invalid', 'reason', ARGV[2], 'invalid_ms', ARGV[4])
        redis.call('XADD', KEYS[2], 'MAXLEN', '~', '100000', '*', 'device_id', ARGV[5], 'reason', ARGV[2], 'at_ms', ARGV[4])
        return 1
        """

    /// Invalidations of a realm after `cursor` (exclusive), oldest first.
    public func feedback(realm: String, after cursor: String?, limit: Int) async throws -> [FeedbackEntry] {
        let start = cursor.map { "(\($0)" } ?? "-"
        let reply = try await redis.command(
            "XRANGE", RedisArgument(keys.feedback(realm: realm)), RedisArgument(start), "+", "COUNT",
            RedisArgument(limit))
        return reply.array.compactMap { entry in
            let parts = entry.array
            guard parts.count == 2, let id = parts[0].string else { return nil }
            let fields = parts[1].hash
            guard let device = fields["device_id"].flatMap({ Int64($0) }) else { return nil }
            return FeedbackEntry(
                cursor: id, deviceID: device, reason: fields["reason"] ?? "",
                atMs: fields["at_ms"].flatMap { Int64($0) } ?? 0)
        }
    }

    private func check(_ replies: [RedisValue]) throws {
        for reply in replies {
            if case .error(let message) = reply { throw RedisError(code: .replyError, message: message) }
        }
    }
}
