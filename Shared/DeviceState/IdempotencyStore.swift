import PushModels
import RedisClient

/// What claiming an idempotency key found.
public enum IdempotencyClaim: Sendable, Equatable {
    /// The key was free: it is now this request's.
    case claimed
    /// The key is held: by a request with `fingerprint`, still under way (`answer` nil) or
    /// answered with `answer` (its HTTP status and the answer's fields as JSON bytes).
    case held(fingerprint: String, answer: IdempotentAnswer?)
}

/// A notify's first answer, kept under its idempotency key.
public struct IdempotentAnswer: Sendable, Equatable {
    public var status: Int
    public var body: [UInt8]

    public init(status: Int, body: [UInt8]) {
        self.status = status
        self.body = body
    }
}

/// The native notify's `Idempotency-Key` records: one claim per (server, key), taken
/// before the request is handled and completed with its answer, or released after a
/// failure so a retry is handled afresh.
public protocol IdempotencyStore: Sendable {
    /// Claims `key` for the request `claimID`; a claim expires after `pendingSeconds`
    /// so a request whose ingest died frees its key.
    func claim(server: ServerID, key: String, fingerprint: String, claimID: String, pendingSeconds: Int64)
        async throws -> IdempotencyClaim
    /// Keeps `answer` for `ttlSeconds`, while `claimID` still holds the key.
    func complete(server: ServerID, key: String, claimID: String, answer: IdempotentAnswer, ttlSeconds: Int)
        async throws
    /// Releases `claimID`'s claim (nothing when another request holds the key).
    func abandon(server: ServerID, key: String, claimID: String) async throws
}

/// Idempotency records in Redis: one hash per key (`RedisKeys.idempotency`), each change
/// one script.
public struct RedisIdempotencyStore: IdempotencyStore {
    let redis: RedisClient
    let keys: RedisKeys

    public init(redis: RedisClient, keys: RedisKeys) {
        self.redis = redis
        self.keys = keys
    }

    public func claim(server: ServerID, key: String, fingerprint: String, claimID: String, pendingSeconds: Int64)
        async throws -> IdempotencyClaim
    {
        let reply = try await redis.command(
            "EVAL", RedisArgument(Self.claimScript), "1", RedisArgument(keys.idempotency(server: server, key: key)),
            RedisArgument(fingerprint), RedisArgument(pendingSeconds), RedisArgument(claimID))
        if case .error(let message) = reply { throw RedisError(code: .replyError, message: message) }
        let parts = reply.array.map { $0.string ?? "" }
        guard parts.first != "new" else { return .claimed }
        guard parts.count == 4 else { return .held(fingerprint: "", answer: nil) }
        let answer =
            parts[0] == "done" ? Int(parts[2]).map { IdempotentAnswer(status: $0, body: Array(parts[3].utf8)) } : nil
        return .held(fingerprint: parts[1], answer: answer)
    }

    public func complete(server: ServerID, key: String, claimID: String, answer: IdempotentAnswer, ttlSeconds: Int)
        async throws
    {
        let reply = try await redis.command(
            "EVAL", RedisArgument(Self.completeScript), "1", RedisArgument(keys.idempotency(server: server, key: key)),
            RedisArgument(claimID), RedisArgument(answer.status),
            RedisArgument(String(decoding: answer.body, as: UTF8.self)),
            RedisArgument(ttlSeconds))
        if case .error(let message) = reply { throw RedisError(code: .replyError, message: message) }
    }

    public func abandon(server: ServerID, key: String, claimID: String) async throws {
        _ = try await redis.command(
            "EVAL", RedisArgument(Self.abandonScript), "1", RedisArgument(keys.idempotency(server: server, key: key)),
            RedisArgument(claimID))
    }

    /// KEYS[1] the key's hash; ARGV fingerprint, pending TTL, claim id. Returns {'new'}
    /// or {state, fingerprint, status, body}.
    static let claimScript = """
        if redis.call('EXISTS', KEYS[1]) == 0 then
          redis.call('HSET', KEYS[1], 'state', 'pending', 'fp', ARGV[1], 'claim', ARGV[3])
          redis.call('EXPIRE', KEYS[1], tonumber(ARGV[2]))
          return {'new'}
        end
        local v = redis.call('HMGET', KEYS[1], 'state', 'fp', 'status', 'body')
        return {v[1] or '', v[2] or '', v[3] or '', v[4] or ''}
        """

    /// KEYS[1] the key's hash; ARGV claim id.
    static let abandonScript = """
        if redis.call('HGET', KEYS[1], 'state') == 'pending' and redis.call('HGET', KEYS[1], 'claim') == ARGV[1] then
          redis.call('DEL', KEYS[1])
        end
        return 0
        """

    /// KEYS[1] the key's hash; ARGV claim id, status, body, TTL. A claim that expired and
    /// was taken by another request is left to it.
    static let completeScript = """
        local claim = redis.call('HGET', KEYS[1], 'claim')
        if claim and claim ~= ARGV[1] then return 0 end
        redis.call('HSET', KEYS[1], 'state', 'done', 'claim', ARGV[1], 'status', ARGV[2], 'body', ARGV[3])
        redis.call('EXPIRE', KEYS[1], tonumber(ARGV[4]))
        return 1
        """
}
