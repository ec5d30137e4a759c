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
/// A busy server costs no Redis round trip per request: a verified key is cached here,
/// and the rate limit is taken from a lease of the server's window (`QuotaLeases`).
/// Each lease renewal reads the server's stored key and deactivation again, so a key
/// rotated or a server deactivated through any instance stops working on every
/// instance within a second.
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

    /// A key that passed the check: the stored HMAC it passed against, and when.
    struct Verified: Sendable {
        var credential: String
        var verifiedAt: ContinuousClock.Instant
        var expires: ContinuousClock.Instant
    }

    let servers: any ServerRegistry
    let clients: any ClientCounters
    let settings: Settings
    /// Recently verified credentials, by a hash of uuid:key.
    private let verified = Mutex<[String: Verified]>([:])
    private let leases: Mutex<QuotaLeases>
    /// The `tenant` label of `pushrelay_tenant_requests_total`.
    let tenants = TenantLabels()
    /// Lease renewals under way, by server: concurrent requests wait for the same one.
    private let renewals = Mutex<[ServerID: Task<Void, any Error>]>([:])

    init(servers: any ServerRegistry, clients: any ClientCounters, settings: Settings) {
        self.servers = servers
        self.clients = clients
        self.settings = settings
        self.leases = Mutex(QuotaLeases(limit: settings.rateLimit))
    }

    /// The address limits are keyed on: the proxy's header when configured, else the
    /// peer. IPv6 addresses count per /64, the block one subscriber usually holds.
    func clientAddress(_ request: Request, context: IngestContext) -> String {
        if !settings.clientIPHeader.isEmpty, let name = HTTPField.Name(settings.clientIPHeader),
            let value = request.headers.values(name).last,
            let last = value.split(separator: ",").last?.trimmingCharacters(in: .whitespaces),
            Syntax.isHostname(last)
        {
            return Syntax.clientLimitKey(last)
        }
        return Syntax.clientLimitKey(context.remoteAddress?.ipAddress ?? "unknown")
    }

    /// Which API is asking: errors are answered in its words.
    /// The raw value is the `api` label of `pushrelay_tenant_requests_total`.
    enum API: String {
        /// `/v1/…`: one 401 for every credential failure.
        case native
        /// `/api/v1/remotes/…`: Zulip's bouncer answers (docs/api/zulip.md §2).
        case zulip
    }

    /// The authenticated server's uuid.
    ///
    /// An attempt that is not already verified is counted against the client address
    /// before anything is checked (and taken back when it succeeds), so guesses sent in
    /// parallel cannot pass the limit between a read and a write. An unknown server and
    /// a wrong key get the same answer.
    func authenticate(_ request: Request, context: IngestContext, api: API) async throws -> ServerID {
        let credentials = Self.credentials(request)
        let failure = Self.failure(request, api: api, uuid: credentials?.uuid)
        guard let credentials else {
            _ = try await verify(nil, request: request, context: context, failure: failure)
            throw failure
        }
        let cacheKey = Fingerprint.sha256Hex("\(credentials.uuid):\(credentials.key)")
        var key = cachedKey(cacheKey)
        // At most twice: a key cached before a rotation is checked once more, and a key
        // that changes again between its check and the lease is refused.
        for _ in 0..<2 {
            if key == nil {
                key = try await verify(credentials, request: request, context: context, failure: failure)
                verified.withLock { cache in
                    if cache.count > 10_000 { cache.removeAll() }
                    cache[cacheKey] = key
                }
            }
            guard let current = key else { break }
            if try await admit(server: credentials.uuid, key: current) {
                tenants.requests(credentials.uuid, api: api).increment()
                return credentials.uuid
            }
            verified.withLock { _ = $0.removeValue(forKey: cacheKey) }
            key = nil
        }
        RelayMetrics.authFailures.increment()
        throw failure
    }

    /// Takes `units` more requests of the authenticated server's rate limit, for a call
    /// that asks for the work of many (a large gorush send). Throws the limited answer.
    func charge(_ request: Request, server: ServerID, units: Int) async throws {
        guard units > 0, let credentials = Self.credentials(request), credentials.uuid == server,
            let key = cachedKey(Fingerprint.sha256Hex("\(credentials.uuid):\(credentials.key)"))
        else { return }
        for _ in 0..<units {
            guard try await admit(server: server, key: key) else { return }
        }
    }

    /// A cached verification of a key, kept while the key is in use.
    private func cachedKey(_ cacheKey: String) -> Verified? {
        let now = ContinuousClock.now
        return verified.withLock { cache in
            guard var entry = cache[cacheKey], entry.expires > now else { return nil }
            // A server in use stays verified: its entry slides with each request.
            entry.expires = now + .seconds(30)
            cache[cacheKey] = entry
            return entry
        }
    }

    /// Checks credentials against Redis, counting the attempt against the client address.
    private func verify(
        _ credentials: (uuid: ServerID, key: String)?, request: Request, context: IngestContext, failure: APIError
    ) async throws -> Verified {
        let client = clientAddress(request, context: context)
        let nowMs = Wire.nowMillis()
        let window = WindowCounter.window(nowMs: nowMs, seconds: settings.failureWindowSeconds)
        let attempts = try await clients.countAuthAttempt(
            client: client, window: window, windowSeconds: settings.failureWindowSeconds)
        if attempts > Int64(settings.maxFailures) {
            throw Self.lockedOut(nowMs: nowMs, windowSeconds: settings.failureWindowSeconds)
        }
        let verifiedAt = ContinuousClock.now
        guard let credentials else {
            RelayMetrics.authFailures.increment()
            throw failure
        }
        let (check, credential) = try await servers.verify(uuid: credentials.uuid, apiKey: credentials.key)
        switch check {
        case .valid:
            try await clients.forgiveAuthAttempt(client: client, window: window)
            return Verified(credential: credential, verifiedAt: verifiedAt, expires: verifiedAt + .seconds(30))
        case .deactivated:
            // The right key: not a guess.
            try await clients.forgiveAuthAttempt(client: client, window: window)
            throw Self.deactivated
        case .invalid:
            RelayMetrics.authFailures.increment()
            throw failure
        }
    }

    /// Takes one request of the server's rate limit for a verified key: true when
    /// admitted, false when the key changed since it was verified. Throws the answers
    /// to a limited or deactivated server.
    private func admit(server: ServerID, key: Verified) async throws -> Bool {
        // Each renewal admits at least one request of the window (or says it is used up),
        // so waiting requests get through one by one; bounded all the same.
        for _ in 0..<64 {
            let nowMs = Wire.nowMillis()
            let window = WindowCounter.window(nowMs: nowMs, seconds: settings.rateWindowSeconds)
            let now = ContinuousClock.now
            switch leases.withLock({
                $0.take(
                    server: server, credential: key.credential, verifiedAt: key.verifiedAt, window: window, now: now)
            }) {
            case .admitted: return true
            case .credentialChanged: return false
            case .deactivated:
                throw Self.deactivated
            case .limited: throw rateLimited(nowMs: nowMs)
            case .renew: try await renewLease(server: server, window: window, nowMs: nowMs)
            }
        }
        // Other requests of the same server took every renewal: answered as limited.
        throw rateLimited(nowMs: Wire.nowMillis())
    }

    private func rateLimited(nowMs: Int64) -> APIError {
        let retryAfter = WindowCounter.secondsLeft(nowMs: nowMs, seconds: settings.rateWindowSeconds)
        return APIError(
            status: .tooManyRequests, code: "RATE_LIMIT_HIT",
            message: "API usage exceeded rate limit; retry in \(retryAfter) s",
            headers: [.retryAfter: "\(retryAfter)"], data: ["retry-after": .double(Double(retryAfter))])
    }

    /// Renews `server`'s lease, or waits for the renewal already under way.
    /// `nowMs` is the moment `window` was taken from: the lease is asked for that window,
    /// so requests given back always go to the window they were granted in.
    private func renewLease(server: ServerID, window: Int64, nowMs: Int64) async throws {
        let task = renewals.withLock { pending in
            if let task = pending[server] { return task }
            let (want, returning) = leases.withLock { $0.renewal(server: server, window: window) }
            let task = Task { [self] in
                // Removed once done; the lock is held until the task is in the table.
                defer { _ = renewals.withLock { $0.removeValue(forKey: server) } }
                let takenAt = ContinuousClock.now
                let lease = try await servers.leaseQuota(
                    server: server, want: want, returning: returning, limit: settings.rateLimit,
                    windowSeconds: settings.rateWindowSeconds, nowMs: nowMs)
                leases.withLock { $0.install(server: server, lease, takenAt: takenAt, now: .now) }
            }
            pending[server] = task
            return task
        }
        try await task.value
    }

    /// A deactivated server's answer (Zulip's words, on both APIs).
    static let deactivated = APIError(
        status: .unauthorized, code: "UNAUTHORIZED",
        message: "The mobile push notification service registration for your server has been deactivated",
        headers: [.wwwAuthenticate: #"Basic realm="zulip""#])

    /// The answer to credentials that are not a server's. For Zulip's API it is Zulip's
    /// bouncer's: 401 `UNAUTHORIZED` with its messages, and 400 for a header that is not
    /// Basic or carries a user's email.
    static func failure(_ request: Request, api: API, uuid: ServerID?) -> APIError {
        guard api == .zulip else { return .unauthorized }
        func unauthorized(_ message: String) -> APIError {
            APIError(
                status: .unauthorized, code: "UNAUTHORIZED", message: message,
                headers: [.wwwAuthenticate: #"Basic realm="zulip""#])
        }
        guard let header = request.headers.value(.authorization) else {
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
    static func credentials(_ request: Request) -> (uuid: ServerID, key: String)? {
        guard var header = request.headers.value(.authorization) else { return nil }
        return header.withUTF8 { credentials(basic: $0) }
    }

    /// `credentials` from the header's bytes, in one pass over them (through `Substring`
    /// views it cost ~20,000 instructions a request).
    static func credentials(basic header: UnsafeBufferPointer<UInt8>) -> (uuid: ServerID, key: String)? {
        let space = UInt8(ascii: " ")
        let tab = UInt8(ascii: "\t")
        guard header.count <= 1024, header.count > 6, header[5] == space else { return nil }
        for (index, letter) in "basic".utf8.enumerated() where header[index] | 0x20 != letter { return nil }
        var start = 6
        var end = header.count
        while start < end, header[start] == space || header[start] == tab { start += 1 }
        while end > start, header[end - 1] == space || header[end - 1] == tab { end -= 1 }
        guard let decoded = Data(base64Encoded: Data(UnsafeBufferPointer(rebasing: header[start..<end]))) else {
            return nil
        }
        return decoded.withUnsafeBytes { raw -> (uuid: ServerID, key: String)? in
            guard let colon = raw.firstIndex(of: UInt8(ascii: ":")),
                let uuid = Syntax.canonicalUUID(Array(raw[..<colon]))
            else { return nil }
            let key = raw[(colon + 1)...]
            guard !key.isEmpty, key.count <= 256, key.allSatisfy({ (0x21...0x7e).contains($0) }) else { return nil }
            return (ServerID(uuid), String(decoding: key, as: UTF8.self))
        }
    }

    /// Counts one server registration from the client address; throws 429 past the limit.
    func countRegistration(_ request: Request, context: IngestContext) async throws {
        let client = clientAddress(request, context: context)
        let nowMs = Wire.nowMillis()
        let window = WindowCounter.window(nowMs: nowMs, seconds: settings.registrationWindowSeconds)
        let count = try await clients.countServerRegistration(
            client: client, window: window, windowSeconds: settings.registrationWindowSeconds)
        if count > Int64(settings.maxRegistrations) {
            let retryAfter = WindowCounter.secondsLeft(nowMs: nowMs, seconds: settings.registrationWindowSeconds)
            throw APIError(
                status: .tooManyRequests, code: "TOO_MANY_REGISTRATIONS",
                message: "Too many server registrations from this address; retry in \(retryAfter) s",
                headers: [.retryAfter: "\(retryAfter)"])
        }
    }

    /// Forgets every cached credential (the cache is keyed by a hash of uuid and key,
    /// so one server's entries cannot be picked out) and every lease; called when a key
    /// changes or a server is deactivated on this instance.
    func forgetAll() {
        verified.withLock { $0.removeAll() }
        leases.withLock { $0.removeAll() }
    }
}

/// The `tenant` label values of one process: the first `capacity` servers that
/// authenticate get their own (their uuid), every later one `other`, so the series stay
/// bounded however many servers there are.
final class TenantLabels: Sendable {
    static let other = "other"
    private let named = Mutex<Set<ServerID>>([])
    /// `pushrelay_tenant_requests_total` by label and API, made once each (making a
    /// counter looks it up in the registry: ~6,500 instructions a request).
    private let counters = Mutex<[String: [ServerAuthenticator.API: Counter]]>([:])
    let capacity: Int

    init(capacity: Int = 100) {
        self.capacity = max(0, capacity)
    }

    func label(_ server: ServerID) -> String {
        named.withLock { named in
            if named.contains(server) { return server.rawValue }
            guard named.count < capacity else { return Self.other }
            named.insert(server)
            return server.rawValue
        }
    }

    /// The request counter of `server`'s label and `api`.
    func requests(_ server: ServerID, api: ServerAuthenticator.API) -> Counter {
        let label = label(server)
        if let counter = counters.withLock({ $0[label]?[api] }) { return counter }
        let counter = RelayMetrics.tenantRequests(tenant: label, api: api.rawValue)
        counters.withLock { $0[label, default: [:]][api] = counter }
        return counter
    }
}
