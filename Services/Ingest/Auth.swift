import DeviceState
import Foundation
import Hummingbird
import Logging
import PushCrypto
import Synchronization

/// HTTP Basic `server_uuid:api_key`, checked in constant time against the stored
/// hash, then the per-server rate limit (shared by all ingest instances via Redis).
final class ServerAuthenticator: Sendable {
    let servers: ServerStore
    let rateLimit: Int
    let rateWindowSeconds: Int
    /// Recently verified credentials (hash of uuid:key → expiry), so a busy server
    /// does not cost a Redis round trip per request for its key.
    private let verified = Mutex<[String: ContinuousClock.Instant]>([:])

    init(servers: ServerStore, rateLimit: Int, rateWindowSeconds: Int) {
        self.servers = servers
        self.rateLimit = rateLimit
        self.rateWindowSeconds = rateWindowSeconds
    }

    /// The authenticated server's uuid. `failure` is the error for bad credentials
    /// (the bouncer API answers Zulip's INVALID_ZULIP_SERVER).
    func authenticate(_ request: Request, failure: APIError) async throws -> String {
        guard let header = request.headers[.authorization], header.lowercased().hasPrefix("basic "),
            let decoded = Data(base64Encoded: String(header.dropFirst(6)).trimmingCharacters(in: .whitespaces)),
            let text = String(data: decoded, encoding: .utf8),
            let colon = text.firstIndex(of: ":")
        else { throw failure }
        let uuid = String(text[..<colon]).lowercased()
        let key = String(text[text.index(after: colon)...])
        let cacheKey = Fingerprint.sha256Hex("\(uuid):\(key)")
        let now = ContinuousClock.now
        let cached = verified.withLock { cache in cache[cacheKey].map { $0 > now } ?? false }
        if !cached {
            guard try await servers.authenticate(uuid: uuid, apiKey: key) else { throw failure }
            verified.withLock { cache in
                if cache.count > 10_000 { cache.removeAll() }
                cache[cacheKey] = now + .seconds(30)
            }
        }
        if let retryAfter = try await servers.rateLimit(
            server: uuid, limit: rateLimit, windowSeconds: rateWindowSeconds)
        {
            throw APIError(
                status: .tooManyRequests, code: "RATE_LIMIT_HIT",
                message: "API usage exceeded rate limit; retry in \(retryAfter) s",
                headers: [.retryAfter: "\(retryAfter)"])
        }
        return uuid
    }

    /// Forgets every cached credential (the cache is keyed by a hash of uuid and key,
    /// so one server's entries cannot be picked out); called when a key changes.
    func forgetAll() {
        verified.withLock { $0.removeAll() }
    }
}
