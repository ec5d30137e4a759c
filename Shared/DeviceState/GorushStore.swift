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

/// The state gorush's API keeps beside the devices: each server's feedback hook, the
/// callers' `notif_id`s, and the counters of `/api/stat/app`.
public protocol GorushStore: Sendable {
    /// The server's hook (url and sealed secret), when both are set.
    func hook(server: String) async throws -> GorushHook?
    /// The server's hook URL, when set.
    func hookURL(server: String) async throws -> String?
    func setHook(server: String, _ hook: GorushHook) async throws
    func deleteHook(server: String) async throws
    /// Keeps the caller's `notif_id` of each accepted notification for `ttlSeconds`, all or none.
    func rememberCallerIDs(_ ids: [(NotificationID, String)], ttlSeconds: Int) async throws
    /// The caller's `notif_id` of an accepted notification, if it gave one.
    func callerID(of notification: NotificationID) async throws -> String?
    /// Adds one call's tokens and notifications to the server's counters.
    func countSubmitted(server: String, tokens: Int, notifications: Int) async throws
    func counters(server: String, realm: RealmID) async throws -> GorushCounters
    /// Adds outcomes to their realms' counters (`{provider}:{outcome}` fields).
    func countOutcomes(_ counts: [RealmID: [String: Int64]]) async throws
}

/// gorush's state in Redis (`RedisKeys`: `gh:`, `gn:`, `gs:`, and the realm's `rs:`).
public struct RedisGorushStore: GorushStore {
    let redis: RedisClient
    let keys: RedisKeys

    public init(redis: RedisClient, keys: RedisKeys) {
        self.redis = redis
        self.keys = keys
    }

    public func hook(server: String) async throws -> GorushHook? {
        let fields = try await redis.command("HMGET", RedisArgument(keys.gorushHook(server: server)), "url", "secret")
            .array
        guard fields.count == 2, let url = fields[0].string, let secret = fields[1].string else { return nil }
        return GorushHook(url: url, sealedSecret: secret)
    }

    public func hookURL(server: String) async throws -> String? {
        try await redis.command("HGET", RedisArgument(keys.gorushHook(server: server)), "url").string
    }

    public func setHook(server: String, _ hook: GorushHook) async throws {
        try await redis.command(
            "HSET", RedisArgument(keys.gorushHook(server: server)), "url", RedisArgument(hook.url), "secret",
            RedisArgument(hook.sealedSecret))
    }

    public func deleteHook(server: String) async throws {
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

    public func countSubmitted(server: String, tokens: Int, notifications: Int) async throws {
        let key = RedisArgument(keys.gorushStats(server: server))
        _ = try await redis.checkedPipeline([
            ["HINCRBY", key, "total_count", RedisArgument(Int64(tokens))],
            ["HINCRBY", key, "submitted_tasks", RedisArgument(Int64(notifications))],
        ])
    }

    public func counters(server: String, realm: RealmID) async throws -> GorushCounters {
        // Counters read best effort: an error reply reads as no counts.
        let replies = try await redis.pipeline([
            ["HGETALL", RedisArgument(keys.gorushStats(server: server))],
            ["HGETALL", RedisArgument(keys.realmStats(realm))],
        ])
        return GorushCounters(
            submitted: Self.counts(replies.first ?? .null),
            outcomes: Self.counts(replies.count > 1 ? replies[1] : .null))
    }

    /// One `HINCRBY` per realm and field, in one pipelined round trip. A batch counted
    /// again (its pipeline re-run after a Redis fault, or re-read after a crash before its
    /// offsets were committed) is counted twice: see README "Drills" for why a watermark
    /// per partition could not make it exact.
    public func countOutcomes(_ counts: [RealmID: [String: Int64]]) async throws {
        var commands: [[RedisArgument]] = []
        for (realm, fields) in counts {
            for (field, count) in fields {
                commands.append([
                    "HINCRBY", RedisArgument(keys.realmStats(realm)), RedisArgument(field), RedisArgument(count),
                ])
            }
        }
        guard !commands.isEmpty else { return }
        _ = try await redis.checkedPipeline(commands)
    }

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
