import PushCrypto
import PushModels
import RedisClient

/// Where a server's failed gorush pushes are reported (`PUT /api/feedback-hook`).
public struct GorushHook: Sendable, Equatable {
    public var url: String
    /// The signing secret, sealed with the storage keyring (`StorageSlot.hookSecret`).
    public var sealedSecret: String

    public init(url: String, sealedSecret: String) {
        self.url = url
        self.sealedSecret = sealedSecret
    }
}

/// What gorush's `/api/stat/app` reads: the server's submitted counters, and the
/// outcome counters of its gorush realm (`{provider}:{outcome}` fields).
public struct GorushCounters: Sendable, Equatable {
    public var submitted: [String: Int64]
    public var outcomes: [String: Int64]

    public init(submitted: [String: Int64], outcomes: [String: Int64]) {
        self.submitted = submitted
        self.outcomes = outcomes
    }
}

/// One outcome record of `push.deliveries` to count: its realm, its counter field
/// (`{provider}:{outcome}`), and where it is on the topic, which makes it count once.
public struct CountedOutcome: Sendable, Equatable {
    public var realm: RealmID
    public var field: String
    public var topic: String
    public var partition: Int32
    public var offset: Int64

    public init(realm: RealmID, field: String, topic: String, partition: Int32, offset: Int64) {
        self.realm = realm
        self.field = field
        self.topic = topic
        self.partition = partition
        self.offset = offset
    }
}

/// The state gorush's API keeps beside the devices: each server's feedback hook, the
/// callers' `notif_id`s, and the counters of `/api/stat/app`.
public protocol GorushStore: Sendable {
    /// The server's hook (url and sealed secret), when both are set.
    func hook(server: ServerID) async throws -> GorushHook?
    /// The server's hook URL, when set.
    func hookURL(server: ServerID) async throws -> String?
    func setHook(server: ServerID, _ hook: GorushHook) async throws
    func deleteHook(server: ServerID) async throws
    /// Keeps the caller's `notif_id` of each accepted notification for `ttlSeconds`, all or none.
    func rememberCallerIDs(_ ids: [(NotificationID, String)], ttlSeconds: Int) async throws
    /// The caller's `notif_id` of an accepted notification, if it gave one.
    func callerID(of notification: NotificationID) async throws -> String?
    /// Adds one call's tokens and notifications to the server's counters.
    func countSubmitted(server: ServerID, tokens: Int, notifications: Int) async throws
    func counters(server: ServerID, realm: RealmID) async throws -> GorushCounters
    /// Adds outcomes to their realms' counters (`{provider}:{outcome}` fields), each
    /// topic record once: a record counted before (a re-run after a Redis fault, a
    /// batch read again after a crash) is not counted again.
    func countOutcomes(_ outcomes: [CountedOutcome]) async throws
}

/// gorush's state in Redis (`RedisKeys`: `gh:`, `gn:`, `gs:`, and the realm's `rs:`).
public struct RedisGorushStore: GorushStore {
    let redis: RedisClient
    let keys: RedisKeys

    public init(redis: RedisClient, keys: RedisKeys) {
        self.redis = redis
        self.keys = keys
    }

    public func hook(server: ServerID) async throws -> GorushHook? {
        let fields = try await redis.command("HMGET", RedisArgument(keys.gorushHook(server: server)), "url", "secret")
            .array
        guard fields.count == 2, let url = fields[0].string, let secret = fields[1].string else { return nil }
        return GorushHook(url: url, sealedSecret: secret)
    }

    public func hookURL(server: ServerID) async throws -> String? {
        try await redis.command("HGET", RedisArgument(keys.gorushHook(server: server)), "url").string
    }

    public func setHook(server: ServerID, _ hook: GorushHook) async throws {
        try await redis.command(
            "HSET", RedisArgument(keys.gorushHook(server: server)), "url", RedisArgument(hook.url), "secret",
            RedisArgument(hook.sealedSecret))
    }

    public func deleteHook(server: ServerID) async throws {
        try await redis.command("DEL", RedisArgument(keys.gorushHook(server: server)))
    }

    public func rememberCallerIDs(_ ids: [(NotificationID, String)], ttlSeconds: Int) async throws {
        guard !ids.isEmpty else { return }
        _ = try await redis.checkedPipeline(
            ids.map { id, callerID in
                [
                    "SET", RedisArgument(keys.gorushNotificationID(id)), RedisArgument(callerID), "EX",
                    RedisArgument(ttlSeconds),
                ]
            })
    }

    public func callerID(of notification: NotificationID) async throws -> String? {
        try await redis.command("GET", RedisArgument(keys.gorushNotificationID(notification))).string
    }

    public func countSubmitted(server: ServerID, tokens: Int, notifications: Int) async throws {
        let key = RedisArgument(keys.gorushStats(server: server))
        _ = try await redis.checkedPipeline([
            ["HINCRBY", key, "total_count", RedisArgument(Int64(tokens))],
            ["HINCRBY", key, "submitted_tasks", RedisArgument(Int64(notifications))],
        ])
    }

    public func counters(server: ServerID, realm: RealmID) async throws -> GorushCounters {
        // Counters read best effort: an error reply reads as no counts.
        let shards = try await redis.command("SMEMBERS", RedisArgument(keys.realmStatsShards(realm))).array
            .compactMap(\.string)
        var commands: [[RedisArgument]] = [
            ["HGETALL", RedisArgument(keys.gorushStats(server: server))],
            // Counted before the counters were kept per topic partition.
            ["HGETALL", RedisArgument(keys.realmStats(realm))],
        ]
        for shard in shards { commands.append(["HGETALL", RedisArgument(keys.realmStats(realm, shard: shard))]) }
        let replies = try await redis.pipeline(commands)
        var outcomes: [String: Int64] = [:]
        for reply in replies.dropFirst() {
            outcomes.merge(Self.counts(reply)) { $0.saturatingAdd($1) }
        }
        return GorushCounters(submitted: Self.counts(replies.first ?? .null), outcomes: outcomes)
    }

    /// Records per counted-bitmap key: 8 KiB of bits each.
    static let bitsPerMarkKey: Int64 = 65_536
    /// How long a record's counted mark is kept: longer than any record stays uncommitted.
    static let markTTLSeconds = 172_800

    /// Per topic partition, one script: for each record, `SETBIT` its mark in the
    /// partition's bitmap and, when the bit was clear, `HINCRBY` its realm's counter
    /// there. Marks and counters of a partition share one hash tag (one Redis Cluster
    /// slot), so a record's mark and its count are written together or not at all; a
    /// record counted before is skipped. Each realm lists the partitions it has counters
    /// in (`SADD`, in the same pipeline: a listed partition without counts reads as none,
    /// and a listing that failed is made again with the counts when the batch is re-run).
    public func countOutcomes(_ outcomes: [CountedOutcome]) async throws {
        var byShard: [String: [CountedOutcome]] = [:]
        var shardsOfRealm: [RealmID: Set<String>] = [:]
        for outcome in outcomes where outcome.offset >= 0 {
            let shard = "\(outcome.topic):\(outcome.partition)"
            byShard[shard, default: []].append(outcome)
            shardsOfRealm[outcome.realm, default: []].insert(shard)
        }
        guard !byShard.isEmpty else { return }
        // The listings and the counts in one pipelined round trip: both are idempotent, so
        // a pipeline re-run after an error is harmless.
        var commands: [[RedisArgument]] = shardsOfRealm.map { realm, shards in
            [["SADD", RedisArgument(keys.realmStatsShards(realm))], shards.sorted().map { RedisArgument($0) }]
                .flatMap { $0 }
        }
        commands += byShard.map { shard, records in countScript(shard: shard, records: records) }
        _ = try await redis.checkedPipeline(commands)
    }

    /// The `EVAL` counting one partition's records: KEYS are the bitmaps, then the
    /// counters; ARGV the mark TTL, then per record (bitmap index, bit, counter index, field).
    func countScript(shard: String, records: [CountedOutcome]) -> [RedisArgument] {
        var keyIndex: [String: Int] = [:]
        var keyNames: [String] = []
        func index(of key: String) -> Int {
            if let found = keyIndex[key] { return found }
            keyNames.append(key)
            keyIndex[key] = keyNames.count
            return keyNames.count
        }
        var arguments: [RedisArgument] = [RedisArgument(Self.markTTLSeconds)]
        for record in records {
            let marks = index(of: keys.countedMarks(shard: shard, chunk: record.offset / Self.bitsPerMarkKey))
            let counter = index(of: keys.realmStats(record.realm, shard: shard))
            arguments.append(RedisArgument(marks))
            arguments.append(RedisArgument(record.offset % Self.bitsPerMarkKey))
            arguments.append(RedisArgument(counter))
            arguments.append(RedisArgument(record.field))
        }
        return ["EVAL", RedisArgument(Self.countScript), RedisArgument(keyNames.count)]
            + keyNames.map { RedisArgument($0) } + arguments
    }

    static let countScript = """
        local ttl = tonumber(ARGV[1])
        local counted = 0
        local seen, marked = {}, {}
        for i = 2, #ARGV, 4 do
          local marks = KEYS[tonumber(ARGV[i])]
          if redis.call('SETBIT', marks, tonumber(ARGV[i + 1]), 1) == 0 then
            redis.call('HINCRBY', KEYS[tonumber(ARGV[i + 2])], ARGV[i + 3], 1)
            counted = counted + 1
          end
          if not seen[marks] then
            seen[marks] = true
            marked[#marked + 1] = marks
          end
        end
        -- Each bitmap's expiry once per batch, not once per record.
        for _, marks in ipairs(marked) do
          if redis.call('TTL', marks) < ttl / 2 then redis.call('EXPIRE', marks, ttl) end
        end
        return counted
        """

    /// An `HGETALL` reply's integer fields.
    static func counts(_ reply: RedisValue) -> [String: Int64] {
        var result: [String: Int64] = [:]
        let items = reply.array
        var index = 0
        while index + 1 < items.count {
            if let key = items[index].string, let value = items[index + 1].int { result[key] = value }
            index += 2
        }
        return result
    }
}
