import Foundation
import PushCrypto
import PushModels
import RedisClient

/// Why a server registration was refused.
public enum ServerRegistrationError: Error, Sendable {
    /// The server exists and the key given is not its key.
    case keyMismatch
}

/// Realm-hosting servers and their realms. API keys are stored only as SHA-256.
public struct ServerStore: Sendable {
    public let redis: RedisClient
    public let keys: RedisKeys

    public init(redis: RedisClient, keys: RedisKeys) {
        self.redis = redis
        self.keys = keys
    }

    /// Registers a server, or updates it when `apiKey` matches; `newAPIKey` rotates the key.
    /// Returns true when the server was created.
    public func register(
        uuid: String, apiKey: String, hostname: String, contactEmail: String, newAPIKey: String?,
        nowMs: Int64 = Wire.nowMillis()
    ) async throws -> Bool {
        let key = keys.server(uuid)
        let hash = Fingerprint.sha256Hex(apiKey)
        let created = try await redis.command("HSETNX", RedisArgument(key), "api_key_sha256", RedisArgument(hash))
        if created.int != 1 {
            guard try await authenticate(uuid: uuid, apiKey: apiKey) else { throw ServerRegistrationError.keyMismatch }
        }
        var fields: [RedisArgument] = [
            "HSET", RedisArgument(key), "hostname", RedisArgument(hostname), "contact_email",
            RedisArgument(contactEmail), "updated_ms", RedisArgument(nowMs),
        ]
        if let newAPIKey { fields += ["api_key_sha256", RedisArgument(Fingerprint.sha256Hex(newAPIKey))] }
        try await redis.command(fields)
        if created.int == 1 { try await redis.command("HSET", RedisArgument(key), "created_ms", RedisArgument(nowMs)) }
        return created.int == 1
    }

    /// Constant-time check of a server's API key against its stored hash.
    public func authenticate(uuid: String, apiKey: String) async throws -> Bool {
        guard let stored = try await redis.command("HGET", RedisArgument(keys.server(uuid)), "api_key_sha256").string,
            let storedBytes = hexBytes(stored)
        else { return false }
        return constantTimeEquals(Fingerprint.sha256(Array(apiKey.utf8)), storedBytes)
    }

    /// The server that owns a realm, claiming it for `server` on first use.
    public func claimRealm(_ realm: String, for server: String, nowMs: Int64 = Wire.nowMillis()) async throws -> String {
        let replies = try await redis.pipeline([
            ["HSETNX", RedisArgument(keys.realm(realm)), "server_uuid", RedisArgument(server)],
            ["HSETNX", RedisArgument(keys.realm(realm)), "created_ms", RedisArgument(nowMs)],
            ["HGET", RedisArgument(keys.realm(realm)), "server_uuid"],
        ])
        return replies[2].string ?? server
    }

    /// The owning server of a realm, or nil if the realm is unknown.
    public func realmOwner(_ realm: String) async throws -> String? {
        try await redis.command("HGET", RedisArgument(keys.realm(realm)), "server_uuid").string
    }

    /// Fixed-window rate limit shared by every ingest instance. Returns the seconds to
    /// wait when the server is over its limit, nil when the request may go ahead.
    public func rateLimit(server: String, limit: Int, windowSeconds: Int, nowMs: Int64 = Wire.nowMillis()) async throws
        -> Int?
    {
        let window = nowMs / 1000 / Int64(windowSeconds)
        let key = keys.rateLimit(server: server, window: window)
        let replies = try await redis.pipeline([
            ["INCR", RedisArgument(key)],
            ["EXPIRE", RedisArgument(key), RedisArgument(windowSeconds * 2)],
        ])
        let count = replies[0].int ?? 0
        guard count > limit else { return nil }
        let windowEnd = (window + 1) * Int64(windowSeconds) * 1000
        return max(1, Int((windowEnd - nowMs + 999) / 1000))
    }
}

func hexBytes(_ text: String) -> [UInt8]? {
    let utf8 = Array(text.utf8)
    guard utf8.count % 2 == 0 else { return nil }
    var bytes: [UInt8] = []
    bytes.reserveCapacity(utf8.count / 2)
    var i = 0
    while i < utf8.count {
        guard let byte = UInt8(String(decoding: utf8[i..<i + 2], as: UTF8.self), radix: 16) else { return nil }
        bytes.append(byte)
        i += 2
    }
    return bytes
}
