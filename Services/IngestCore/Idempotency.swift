import DeviceState
import Foundation
import HTTPTypes
import Hummingbird
import PushModels
import RedisClient

/// An answer to keep: a notify's status and fields, stored under its idempotency key
/// so a retried request gets the very same answer back.
struct StoredAnswer: Sendable {
    var status: Int
    var fields: [String: JSONValue]

    var http: Response { success(fields, status: HTTPResponse.Status(code: status)) }
}

/// The native notify's `Idempotency-Key` header. A request retried with the same key
/// (per server) within the TTL gets the first answer back and produces no second
/// notification. A retry while the first is still being handled answers 409; a key
/// reused with another body answers 422. A request that failed (4xx, 503) leaves no
/// answer behind, so its retry is handled afresh.
struct IdempotencyKey: Sendable {
    static let header = HTTPField.Name("Idempotency-Key")!
    static let maxBytes = 255
    let key: String
    /// This request's claim, so only it can complete or release the key.
    let claimID = UUID().uuidString

    /// Nil when the request carries no key; 400 when the key is not 1 to 255 visible ASCII characters.
    init?(_ request: Request) throws {
        let values = request.headers[values: Self.header]
        guard let value = values.first else { return nil }
        guard values.count == 1, Syntax.isVisibleASCII(value, maxBytes: Self.maxBytes) else {
            throw APIError.badRequest(
                "Idempotency-Key: must be one header of 1 to \(Self.maxBytes) visible ASCII characters",
                code: "INVALID_IDEMPOTENCY_KEY", field: "Idempotency-Key")
        }
        key = value
    }

    /// Claims the key for this request. Returns the earlier answer when the key was
    /// used before with the same body; nil when this request is the first.
    func claim(server: String, fingerprint: String, api: IngestAPI) async throws -> Response? {
        let redisKey = api.servers.keys.idempotency(server: server, key: key)
        // A claim outlives the longest the request can take (the publish bound plus
        // margin), and expires if its ingest dies mid-request.
        let pendingSeconds = api.limits.publishTimeout.components.seconds.saturatingAdd(60)
        let reply = try await api.servers.redis.command(
            "EVAL", RedisArgument(Self.claimScript), "1", RedisArgument(redisKey), RedisArgument(fingerprint),
            RedisArgument(pendingSeconds), RedisArgument(claimID))
        if case .error(let message) = reply { throw RedisError(code: .replyError, message: message) }
        let parts = reply.array.map { $0.string ?? "" }
        guard parts.first != "new" else { return nil }
        guard parts.count == 4, parts[1] == fingerprint else {
            throw APIError(
                status: .unprocessableContent, code: "IDEMPOTENCY_KEY_REUSED",
                message: "Idempotency-Key was used before with a different request", field: "Idempotency-Key")
        }
        guard parts[0] == "done", let status = Int(parts[2]), (200...599).contains(status),
            let body = try? Wire.decode(JSONValue.self, from: Array(parts[3].utf8)), let fields = body.objectValue
        else {
            throw APIError(
                status: .conflict, code: "IDEMPOTENCY_KEY_IN_USE",
                message: "A request with this Idempotency-Key is still being handled; retry shortly",
                headers: [.retryAfter: "1"])
        }
        return StoredAnswer(status: status, fields: fields).http
    }

    /// Keeps the answer for the TTL (only while this request still holds the claim).
    func complete(server: String, response: StoredAnswer, api: IngestAPI) async throws {
        let redisKey = api.servers.keys.idempotency(server: server, key: key)
        var fields = response.fields
        fields["result"] = nil
        fields["msg"] = nil
        let reply = try await api.servers.redis.command(
            "EVAL", RedisArgument(Self.completeScript), "1", RedisArgument(redisKey), RedisArgument(claimID),
            RedisArgument(response.status),
            RedisArgument(String(decoding: Wire.canonical(.object(fields)), as: UTF8.self)),
            RedisArgument(api.limits.idempotencyTTLSeconds))
        if case .error(let message) = reply { throw RedisError(code: .replyError, message: message) }
    }

    /// Releases this request's claim after it failed, so a retry is handled afresh.
    func abandon(server: String, api: IngestAPI) async throws {
        let redisKey = api.servers.keys.idempotency(server: server, key: key)
        _ = try await api.servers.redis.command(
            "EVAL", RedisArgument(Self.abandonScript), "1", RedisArgument(redisKey), RedisArgument(claimID))
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
