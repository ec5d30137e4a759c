import PushCrypto
import PushModels
import RedisClient

/// Key shapes of the guards below (listed with the others in `RedisKeys`' table).
extension RedisKeys {
    /// Failed authentications of one client address in one window (string counter, expires).
    public func authFailures(client: String, window: Int64) -> String { "\(prefix)af:\(client):\(window)" }
    /// Server registrations from one client address in one window (string counter, expires).
    public func serverRegistrations(client: String, window: Int64) -> String { "\(prefix)sr:\(client):\(window)" }
    /// The realms a server registered (set of realm uuids), for the per-server realm quota.
    public func serverRealms(_ server: String) -> String { "\(prefix)server:\(server):realms" }
    /// Devices registered by a server (string counter), for the per-server device quota.
    public func serverDevices(_ server: String) -> String { "\(prefix)server:\(server):devices" }
    /// A notify request's first answer under its `Idempotency-Key` (hash, expires).
    public func idempotency(server: String, key: String) -> String {
        "\(prefix)idem:\(server):\(Fingerprint.sha256Hex(key))"
    }
}

/// Fixed-window counters shared by every ingest instance through Redis.
public struct WindowCounter: Sendable {
    public let redis: RedisClient

    public init(redis: RedisClient) {
        self.redis = redis
    }

    /// The window a moment falls in, for a window length in seconds (at least 1).
    public static func window(nowMs: Int64, seconds: Int) -> Int64 {
        max(0, nowMs) / 1000 / Int64(max(1, seconds))
    }

    /// Seconds until the window that holds `nowMs` ends (at least 1).
    public static func secondsLeft(nowMs: Int64, seconds: Int) -> Int {
        let length = Int64(max(1, seconds))
        let end = (window(nowMs: nowMs, seconds: seconds).saturatingAdd(1)).saturatingMultiply(length * 1000)
        return Int(max(1, min(length, (end.saturatingSubtract(nowMs) + 999) / 1000)))
    }

    /// Adds one to `key` (expiring after two windows) and returns the new count.
    @discardableResult
    public func increment(_ key: String, windowSeconds: Int) async throws -> Int64 {
        let replies = try await redis.pipeline([
            ["INCR", RedisArgument(key)],
            ["EXPIRE", RedisArgument(key), RedisArgument(max(1, windowSeconds).saturatingMultiply(2))],
        ])
        return replies.first?.int ?? 0
    }

    /// Takes one back (an attempt that turned out fine).
    public func decrement(_ key: String) async throws {
        try await redis.command("DECR", RedisArgument(key))
    }
}

/// What registering a realm to a server came to.
public enum RealmRegistration: Sendable, Equatable {
    /// The realm is new and now belongs to the server.
    case registered
    /// The realm already belonged to this server.
    case alreadyYours
    /// Another server holds the realm.
    case taken
    /// The server holds as many realms as it may.
    case quotaExceeded
}

/// Realm ownership by explicit registration, and the per-server quotas.
public struct RealmDirectory: Sendable {
    public let redis: RedisClient
    public let keys: RedisKeys

    public init(redis: RedisClient, keys: RedisKeys) {
        self.redis = redis
        self.keys = keys
    }

    /// Registers `realm` to `server`, atomically: a realm has one owner, for good.
    public func register(
        _ realm: String, to server: String, maxRealms: Int, nowMs: Int64 = Wire.nowMillis()
    ) async throws -> RealmRegistration {
        try await register([realm], to: server, maxRealms: maxRealms, nowMs: nowMs)[0]
    }

    /// Registers several realms in one pipelined round trip (one script per realm, each
    /// atomic); the outcomes in the order given.
    public func register(
        _ realms: [String], to server: String, maxRealms: Int, nowMs: Int64 = Wire.nowMillis()
    ) async throws -> [RealmRegistration] {
        guard !realms.isEmpty else { return [] }
        let replies = try await redis.pipeline(
            realms.map { realm in
                [
                    "EVAL", RedisArgument(Self.registerScript), "2", RedisArgument(keys.realm(realm)),
                    RedisArgument(keys.serverRealms(server)), RedisArgument(server), RedisArgument(nowMs),
                    RedisArgument(maxRealms), RedisArgument(realm),
                ]
            })
        guard replies.count == realms.count else {
            throw RedisError(code: .protocolError, message: "expected \(realms.count) replies, got \(replies.count)")
        }
        return try replies.map { reply in
            if case .error(let message) = reply { throw RedisError(code: .replyError, message: message) }
            switch reply.int {
            case 0: return .registered
            case 1: return .alreadyYours
            case -2: return .quotaExceeded
            default: return .taken
            }
        }
    }

    /// KEYS[1] realm hash, KEYS[2] the server's realm set; ARGV server, now, max realms, realm uuid.
    static let registerScript = """
        local owner = redis.call('HGET', KEYS[1], 'server_uuid')
        if owner then
          if owner == ARGV[1] then redis.call('SADD', KEYS[2], ARGV[4]) return 1 end
          return -1
        end
        if redis.call('SCARD', KEYS[2]) >= tonumber(ARGV[3]) then return -2 end
        redis.call('HSET', KEYS[1], 'server_uuid', ARGV[1], 'created_ms', ARGV[2])
        redis.call('SADD', KEYS[2], ARGV[4])
        return 0
        """

    /// Devices the server has registered (as counted at registration and deletion).
    public func deviceCount(server: String) async throws -> Int64 {
        try await redis.command("GET", RedisArgument(keys.serverDevices(server))).int ?? 0
    }

    /// Counts a device in or out of the server's quota. Never below zero: devices
    /// registered before the quota existed were never counted in.
    public func countDevice(server: String, by delta: Int64) async throws {
        try await redis.command(
            "EVAL", RedisArgument(Self.countScript), "1", RedisArgument(keys.serverDevices(server)),
            RedisArgument(delta))
    }

    static let countScript = """
        local n = tonumber(redis.call('GET', KEYS[1]) or '0') + tonumber(ARGV[1])
        if n < 0 then n = 0 end
        redis.call('SET', KEYS[1], n)
        return n
        """
}
