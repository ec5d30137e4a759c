import DeviceState
import Foundation
import HTTPTypes
import Hummingbird
import Logging
import Metrics
import PushCrypto
import PushModels
import ServiceKit
import Synchronization

/// HTTP Basic `server_uuid:api_key`, checked in constant time against the stored
/// HMAC, then the per-server rate limit (shared by all ingest instances via Redis).
///
/// Failed authentications are counted per client address: past `maxFailures` in a
/// window, that address gets 429 until the window ends, whatever it sends. Every
/// failure is answered alike (malformed header, unknown server, wrong key).
public final class ServerAuthenticator: Sendable {
    public struct Settings: Sendable {
        var rateLimit: Int
        var rateWindowSeconds: Int
        var maxFailures: Int
        var failureWindowSeconds: Int
        var maxRegistrations: Int
        var registrationWindowSeconds: Int
        /// A header set by a trusted reverse proxy that carries the client address
        /// (its last entry is used); empty: the connection's peer address.
        var clientIPHeader: String
    }

    let servers: ServerStore
    let counter: WindowCounter
    let keys: RedisKeys
    let settings: Settings
    /// Recently verified credentials (hash of uuid:key → expiry), so a busy server
    /// does not cost a Redis round trip per request for its key.
    private let verified = Mutex<[String: ContinuousClock.Instant]>([:])

    init(servers: ServerStore, counter: WindowCounter, keys: RedisKeys, settings: Settings) {
        self.servers = servers
        self.counter = counter
        self.keys = keys
        self.settings = settings
    }

    /// The address limits are keyed on: the proxy's header when configured, else the
    /// peer. IPv6 addresses count per /64, the block one subscriber usually holds.
    func clientAddress(_ request: Request, context: IngestContext) -> String {
        if !settings.clientIPHeader.isEmpty, let name = HTTPField.Name(settings.clientIPHeader),
            let value = request.headers[values: name].last,
            let last = value.split(separator: ",").last?.trimmingCharacters(in: .whitespaces),
            Syntax.isHostname(last)
        {
            return Syntax.clientLimitKey(last)
        }
        return Syntax.clientLimitKey(context.remoteAddress?.ipAddress ?? "unknown")
    }

    /// Which API is asking: errors are answered in its words.
    enum API {
        /// `/v1/…`: one 401 for every credential failure.
        case native
        /// `/api/v1/remotes/…`: Zulip's bouncer answers (docs/zulip-bouncer-wire.md §2).
        case zulip
    }

    /// The authenticated server's uuid.
    ///
    /// An attempt that is not already verified is counted against the client address
    /// before anything is checked (and taken back when it succeeds), so guesses sent in
    /// parallel cannot pass the limit between a read and a write. An unknown server and
    /// a wrong key get the same answer.
    func authenticate(_ request: Request, context: IngestContext, api: API) async throws -> String {
        let credentials = Self.credentials(request)
        let failure = Self.failure(request, api: api, uuid: credentials?.uuid)
        let cacheKey = credentials.map { Fingerprint.sha256Hex("\($0.uuid):\($0.key)") }
        let now = ContinuousClock.now
        let cached =
            cacheKey.map { key in
                verified.withLock { cache in
                    guard let expiry = cache[key], expiry > now else { return false }
                    // A server in use stays verified: its entry slides with each request.
                    cache[key] = now + .seconds(30)
                    return true
                }
            } ?? false
        if !cached {
            let client = clientAddress(request, context: context)
            let nowMs = Wire.nowMillis()
            let counterKey = keys.authFailures(
                client: client, window: WindowCounter.window(nowMs: nowMs, seconds: settings.failureWindowSeconds))
            let attempts = try await counter.increment(counterKey, windowSeconds: settings.failureWindowSeconds)
            if attempts > Int64(settings.maxFailures) {
                throw Self.lockedOut(nowMs: nowMs, windowSeconds: settings.failureWindowSeconds)
            }
            let check: ServerCredentialCheck
            if let credentials {
                check = try await servers.check(uuid: credentials.uuid, apiKey: credentials.key)
            } else {
                check = .invalid
            }
            guard let cacheKey, check == .valid else {
                if check == .deactivated {
                    // The right key: not a guess.
                    try await counter.decrement(counterKey)
                    throw Self.deactivated
                }
                RelayMetrics.authFailures.increment()
                throw failure
            }
            try await counter.decrement(counterKey)
            verified.withLock { cache in
                if cache.count > 10_000 { cache.removeAll() }
                cache[cacheKey] = now + .seconds(30)
            }
        }
        guard let credentials else { throw failure }
        switch try await servers.rateLimit(
            server: credentials.uuid, limit: settings.rateLimit, windowSeconds: settings.rateWindowSeconds)
        {
        case .admitted: break
        case .deactivated: throw Self.deactivated
        case .limited(let retryAfter):
            throw APIError(
                status: .tooManyRequests, code: "RATE_LIMIT_HIT",
                message: "API usage exceeded rate limit; retry in \(retryAfter) s",
                headers: [.retryAfter: "\(retryAfter)"], data: ["retry-after": .double(Double(retryAfter))])
        }
        return credentials.uuid
    }

    /// A deactivated server's answer (Zulip's words, on both APIs).
    static let deactivated = APIError(
        status: .unauthorized, code: "UNAUTHORIZED",
        message: "The mobile push notification service registration for your server has been deactivated",
        headers: [.wwwAuthenticate: #"Basic realm="zulip""#])

    /// The answer to credentials that are not a server's. For Zulip's API it is Zulip's
    /// bouncer's: 401 `UNAUTHORIZED` with its messages, and 400 for a header that is not
    /// Basic or carries a user's email.
    static func failure(_ request: Request, api: API, uuid: String?) -> APIError {
        guard api == .zulip else { return .unauthorized }
        func unauthorized(_ message: String) -> APIError {
            APIError(
                status: .unauthorized, code: "UNAUTHORIZED", message: message,
                headers: [.wwwAuthenticate: #"Basic realm="zulip""#])
        }
        guard let header = request.headers[.authorization] else {
            return unauthorized("Missing authorization header for basic auth")
        }
        let parts = header.split(separator: " ", maxSplits: 1)
        guard parts.count == 2 else { return unauthorized("Invalid authorization header for basic auth") }
        guard parts[0].lowercased() == "basic" else {
            return .badRequest("This endpoint requires HTTP basic authentication.")
        }
        if let decoded = Data(base64Encoded: String(parts[1]).trimmingCharacters(in: .whitespaces)),
            let text = String(data: decoded, encoding: .utf8), text.split(separator: ":").first?.contains("@") == true
        {
            return .badRequest("Must validate with valid Zulip server API key")
        }
        guard let uuid else { return unauthorized("Invalid authorization header for basic auth") }
        return unauthorized("Zulip server auth failure: key does not match role \(uuid)")
    }

    static func lockedOut(nowMs: Int64, windowSeconds: Int) -> APIError {
        let retryAfter = WindowCounter.secondsLeft(nowMs: nowMs, seconds: windowSeconds)
        RelayMetrics.authLockouts.increment()
        return APIError(
            status: .tooManyRequests, code: "TOO_MANY_FAILED_AUTHENTICATIONS",
            message: "Too many failed authentications from this address; retry in \(retryAfter) s",
            headers: [.retryAfter: "\(retryAfter)"])
    }

    /// `uuid:key` from an HTTP Basic header, or nil when it is not one. The uuid must
    /// be a UUID and the key visible ASCII: anything else cannot be a credential.
    static func credentials(_ request: Request) -> (uuid: String, key: String)? {
        guard let header = request.headers[.authorization], header.utf8.count <= 1024,
            header.lowercased().hasPrefix("basic "),
            let decoded = Data(base64Encoded: String(header.dropFirst(6)).trimmingCharacters(in: .whitespaces)),
            let text = String(data: decoded, encoding: .utf8),
            let colon = text.firstIndex(of: ":"),
            let uuid = UUID(uuidString: String(text[..<colon]))
        else { return nil }
        let key = String(text[text.index(after: colon)...])
        guard Syntax.isVisibleASCII(key, maxBytes: 256) else { return nil }
        return (uuid.uuidString.lowercased(), key)
    }

    /// Counts one server registration from the client address; throws 429 past the limit.
    func countRegistration(_ request: Request, context: IngestContext) async throws {
        let client = clientAddress(request, context: context)
        let nowMs = Wire.nowMillis()
        let window = WindowCounter.window(nowMs: nowMs, seconds: settings.registrationWindowSeconds)
        let count = try await counter.increment(
            keys.serverRegistrations(client: client, window: window), windowSeconds: settings.registrationWindowSeconds)
        if count > Int64(settings.maxRegistrations) {
            let retryAfter = WindowCounter.secondsLeft(nowMs: nowMs, seconds: settings.registrationWindowSeconds)
            throw APIError(
                status: .tooManyRequests, code: "TOO_MANY_REGISTRATIONS",
                message: "Too many server registrations from this address; retry in \(retryAfter) s",
                headers: [.retryAfter: "\(retryAfter)"])
        }
    }

    /// Forgets every cached credential (the cache is keyed by a hash of uuid and key,
    /// so one server's entries cannot be picked out); called when a key changes.
    func forgetAll() {
        verified.withLock { $0.removeAll() }
    }
}
