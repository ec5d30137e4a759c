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
    public func serverRealms(_ server: ServerID) -> String { "\(prefix)server:\(tag(server)):realms" }
    /// Devices registered by a server (string counter), for the per-server device quota.
    public func serverDevices(_ server: ServerID) -> String { "\(prefix)server:\(tag(server)):devices" }
    /// A notify request's first answer under its `Idempotency-Key` (hash, expires).
    public func idempotency(server: ServerID, key: String) -> String {
        "\(prefix)idem:\(tag(server)):\(Fingerprint.sha256Hex(key))"
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

    /// Registers several realms, the outcomes in the order given. The realm hash and the
    /// server's realm set are different keys (different slots on a cluster), so this is
    /// one-key steps, each pipelined for all realms: a place in the server's quota is
    /// taken first, then the realm is claimed (a place taken for a realm that turns out to
    /// be another server's is given back). With no place left, the realm is only looked at.
    public func register(
        _ realms: [RealmID], to server: ServerID, maxRealms: Int, nowMs: Int64 = Wire.nowMillis()
    ) async throws -> [RealmRegistration] {
        guard !realms.isEmpty else { return [] }
        let set = RedisArgument(keys.serverRealms(server))
        let places = try await redis.checkedPipeline(
            realms.map {
                ["EVAL", RedisArgument(Self.reserveScript), "1", set, RedisArgument(maxRealms), RedisArgument($0)]
            })
        let full = places.map { $0.int == -2 }
        let owners = try await redis.checkedPipeline(
            zip(realms, full).map { realm, full in
                full
                    ? ["HGET", RedisArgument(keys.realm(realm)), "server_uuid"]
                    : [
                        "EVAL", RedisArgument(Self.claimScript), "1", RedisArgument(keys.realm(realm)),
                        RedisArgument(server), RedisArgument(nowMs),
                    ]
            })
        var outcomes: [RealmRegistration] = []
        var setChanges: [[RedisArgument]] = []
        var givenBack = 0
        for (index, realm) in realms.enumerated() {
            if full[index] {
                switch owners[index].string.map(ServerID.init) {
                case nil:
                    outcomes.append(.quotaExceeded)
                case server?:
                    // Already the server's (from before the quota): it stays, as before.
                    outcomes.append(.alreadyYours)
                    setChanges.append(["SADD", set, RedisArgument(realm)])
                default:
                    outcomes.append(.taken)
                }
                continue
            }
            switch owners[index].int {
            case 0: outcomes.append(.registered)
            case 1: outcomes.append(.alreadyYours)
            default:
                // Another server's: not in this one's quota (also a place left by an earlier
                // call that stopped between its two steps).
                outcomes.append(.taken)
                setChanges.append(["SREM", set, RedisArgument(realm)])
                givenBack += 1
            }
        }
        try await redis.checkedPipeline(setChanges)
        // Places given back may fit realms refused for want of one in this very call.
        let refused = outcomes.indices.filter { outcomes[$0] == .quotaExceeded }
        if givenBack > 0 && !refused.isEmpty {
            let again = try await register(refused.map { realms[$0] }, to: server, maxRealms: maxRealms, nowMs: nowMs)
            for (index, outcome) in zip(refused, again) { outcomes[index] = outcome }
        }
        return outcomes
    }

    /// KEYS[1] the server's realm set; ARGV max realms, realm uuid. 0: already a member,
    /// 1: added, -2: the set is full.
    static let reserveScript = """
        if redis.call('SISMEMBER', KEYS[1], ARGV[2]) == 1 then return 0 end
        if redis.call('SCARD', KEYS[1]) >= tonumber(ARGV[1]) then return -2 end
        redis.call('SADD', KEYS[1], ARGV[2])
        return 1
        """

    /// KEYS[1] realm hash; ARGV server, now. 0: claimed now, 1: already the server's, -1: another's.
    static let claimScript = """
        local owner = redis.call('HGET', KEYS[1], 'server_uuid')
        if owner then
          if owner == ARGV[1] then return 1 end
          return -1
        end
        redis.call('HSET', KEYS[1], 'server_uuid', ARGV[1], 'created_ms', ARGV[2])
        return 0
        """

    /// Devices the server has registered (as counted at registration and deletion).
    public func deviceCount(server: ServerID) async throws -> Int64 {
        try await redis.command("GET", RedisArgument(keys.serverDevices(server))).int ?? 0
    }

    /// Counts a device in or out of the server's quota. Never below zero: devices
    /// registered before the quota existed were never counted in.
    public func countDevice(server: ServerID, by delta: Int64) async throws {
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

/// The per-client-address counters ingest's guards keep: failed authentications and
/// server registrations, each in fixed windows shared by every instance.
public protocol ClientCounters: Sendable {
    /// Counts one authentication attempt from `client` in `window`; the count so far.
    func countAuthAttempt(client: String, window: Int64, windowSeconds: Int) async throws -> Int64
    /// Takes back an attempt that turned out to hold the right key.
    func forgiveAuthAttempt(client: String, window: Int64) async throws
    /// Counts one server registration from `client` in `window`; the count so far.
    func countServerRegistration(client: String, window: Int64, windowSeconds: Int) async throws -> Int64
    /// Counts one registration-transfer verification (from anyone) in `window`; the count so far.
    func countTransferVerification(window: Int64, windowSeconds: Int) async throws -> Int64
}

/// The client counters in Redis (`af:` and `sr:` keys).
public struct RedisClientCounters: ClientCounters {
    let counter: WindowCounter
    let keys: RedisKeys

    public init(redis: RedisClient, keys: RedisKeys) {
        self.counter = WindowCounter(redis: redis)
        self.keys = keys
    }

    public func countAuthAttempt(client: String, window: Int64, windowSeconds: Int) async throws -> Int64 {
        try await counter.increment(keys.authFailures(client: client, window: window), windowSeconds: windowSeconds)
    }

    public func forgiveAuthAttempt(client: String, window: Int64) async throws {
        try await counter.decrement(keys.authFailures(client: client, window: window))
    }

    public func countServerRegistration(client: String, window: Int64, windowSeconds: Int) async throws -> Int64 {
        try await counter.increment(
            keys.serverRegistrations(client: client, window: window), windowSeconds: windowSeconds)
    }

    public func countTransferVerification(window: Int64, windowSeconds: Int) async throws -> Int64 {
        try await counter.increment(keys.transferVerifications(window: window), windowSeconds: windowSeconds)
    }
}
