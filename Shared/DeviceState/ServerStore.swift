import Foundation
import PushCrypto
import PushModels
import RedisClient

/// Why a server registration was refused.
public enum ServerRegistrationError: Error, Sendable {
    /// The server exists and the key given is not its key.
    case keyMismatch
    /// The server does not exist and the operator closed open registration.
    case registrationClosed
    /// The server deactivated itself (Zulip's `remotes/server/deactivate`).
    case deactivated
}

/// What a server's credentials come to.
public enum ServerCredentialCheck: Sendable, Equatable {
    case valid
    /// Unknown server or wrong key (not told apart).
    case invalid
    /// The right key of a server that deactivated itself.
    case deactivated
}

/// The last row ids a Zulip server uploaded with its analytics (0 when none).
public struct ZulipAnalyticsIDs: Sendable, Equatable {
    public var realmCount: Int64
    public var installationCount: Int64
    public var realmAuditLog: Int64

    public init(realmCount: Int64, installationCount: Int64, realmAuditLog: Int64) {
        self.realmCount = realmCount
        self.installationCount = installationCount
        self.realmAuditLog = realmAuditLog
    }
}

/// Realm-hosting servers and their realms. API keys are stored only as
/// HMAC-SHA-256 under a server-side pepper (`api_key_hmac`). Servers registered before
/// the pepper have an unsalted `api_key_sha256`; it still authenticates, and is replaced
/// by the HMAC form on the first success.
public struct ServerStore: Sendable {
    public let redis: RedisClient
    public let keys: RedisKeys
    public let pepper: APIKeyPepper

    public init(redis: RedisClient, keys: RedisKeys, pepper: APIKeyPepper) {
        self.redis = redis
        self.keys = keys
        self.pepper = pepper
    }

    /// Registers a server, or updates it when `apiKey` matches; `newAPIKey` rotates the key.
    /// Returns true when the server was created. With `allowCreate` false (registration
    /// closed by the operator) only existing servers may update themselves.
    public func register(
        uuid: ServerID, apiKey: String, hostname: String, contactEmail: String, newAPIKey: String?,
        allowCreate: Bool = true, nowMs: Int64 = Wire.nowMillis()
    ) async throws -> Bool {
        let key = keys.server(uuid)
        let previous = try await redis.command("HMGET", RedisArgument(key), "hostname", "api_key_sha256").array
        if !allowCreate, !previous.contains(where: { $0.string != nil }) {
            throw ServerRegistrationError.registrationClosed
        }
        // Created only when no record exists: a server with just the old hash field is not new.
        let created =
            try await redis.command(
                "EVAL", RedisArgument(Self.createScript), "1", RedisArgument(key),
                RedisArgument(pepper.hmacHex(apiKey)),
                RedisArgument(nowMs)
            ).int == 1
        if !created {
            switch try await check(uuid: uuid, apiKey: apiKey) {
            case .valid: break
            case .invalid: throw ServerRegistrationError.keyMismatch
            case .deactivated: throw ServerRegistrationError.deactivated
            }
        }
        var fields: [RedisArgument] = [
            "HSET", RedisArgument(key), "hostname", RedisArgument(hostname), "contact_email",
            RedisArgument(contactEmail), "updated_ms", RedisArgument(nowMs),
        ]
        if let newAPIKey { fields += ["api_key_hmac", RedisArgument(pepper.hmacHex(newAPIKey))] }
        var commands = [fields]
        if newAPIKey != nil { commands.append(["HDEL", RedisArgument(key), "api_key_sha256"]) }
        try await redis.checkedPipeline(commands)
        try await claim(hostname: hostname, uuid: uuid)
        if let old = previous.first?.string, old != hostname {
            try await redis.command(
                "EVAL", RedisArgument(Self.releaseHostnameScript), "1", RedisArgument(keys.serverHostname(old)),
                RedisArgument(uuid))
        }
        return created
    }

    /// The hostname index: a hostname stays with the server that registered it first (the
    /// one a registration transfer moves); a second server with it is still taken, as the
    /// relay always has. Taken over only from a holder whose record no longer has it.
    /// Each step touches one key, so it holds on a Redis Cluster.
    func claim(hostname: String, uuid: ServerID) async throws {
        let key = RedisArgument(keys.serverHostname(hostname))
        guard try await redis.command("SET", key, RedisArgument(uuid), "NX") == .null,
            let holder = try await redis.command("GET", key).string.map(ServerID.init), holder != uuid,
            try await redis.command("HGET", RedisArgument(keys.server(holder)), "hostname").string != hostname
        else { return }
        try await redis.command(
            "EVAL", RedisArgument(Self.takeOverScript), "1", key, RedisArgument(holder), RedisArgument(uuid))
    }

    /// Sets the index entry to ARGV[2] only while it still names ARGV[1].
    static let takeOverScript = """
        if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('SET', KEYS[1], ARGV[2]) end
        return 0
        """

    /// Builds the hostname index from the server records (`pushrelay servers
    /// index-hostnames`, once after upgrading from a relay without it): each hostname goes
    /// to the server that registered it first (`created_ms`); the servers are found on
    /// every master.
    /// Returns how many hostnames are indexed; `progress` hears (servers read, servers).
    public func indexHostnames(progress: (Int, Int) -> Void = { _, _ in }) async throws -> Int {
        var first: [String: (uuid: ServerID, createdMs: Int64)] = [:]
        let servers = try await serverIDs()
        for (index, uuid) in servers.enumerated() {
            defer { progress(index + 1, servers.count) }
            let fields = try await redis.command("HMGET", RedisArgument(keys.server(uuid)), "hostname", "created_ms")
                .array
            guard fields.count == 2, let hostname = fields[0].string else { continue }
            let created = fields[1].string.flatMap { Int64($0) } ?? .max
            if let known = first[hostname], known.createdMs <= created { continue }
            first[hostname] = (uuid, created)
        }
        for (hostname, holder) in first {
            try await redis.command("SET", RedisArgument(keys.serverHostname(hostname)), RedisArgument(holder.uuid))
        }
        return first.count
    }

    /// Deletes a hostname's index entry only while it still names this server.
    static let releaseHostnameScript = """
        if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
        return 0
        """

    /// The server registered with `hostname`: the index's, while that server's record
    /// still says so. Servers registered before the index are found once they register again.
    public func server(hostname: String) async throws -> ServerID? {
        guard
            let uuid = try await redis.command("GET", RedisArgument(keys.serverHostname(hostname))).string.map(
                ServerID.init),
            try await redis.command("HGET", RedisArgument(keys.server(uuid)), "hostname").string == hostname
        else { return nil }
        return uuid
    }

    /// Gives the server a new API key (Zulip's registration transfer); the old one, and
    /// an unsalted hash from before the pepper, stop working.
    public func replaceKey(uuid: ServerID, newAPIKey: String, nowMs: Int64 = Wire.nowMillis()) async throws {
        let key = keys.server(uuid)
        try await redis.checkedPipeline([
            [
                "HSET", RedisArgument(key), "api_key_hmac", RedisArgument(pepper.hmacHex(newAPIKey)), "updated_ms",
                RedisArgument(nowMs),
            ],
            ["HDEL", RedisArgument(key), "api_key_sha256"],
        ])
    }

    /// Constant-time check of a server's API key against its stored HMAC, or against the
    /// old unsalted SHA-256 of a server registered before the pepper, which is then
    /// upgraded to the HMAC form.
    public func authenticate(uuid: ServerID, apiKey: String) async throws -> Bool {
        try await check(uuid: uuid, apiKey: apiKey) != .invalid
    }

    /// The key check of `authenticate`, telling a deactivated server apart (only to the
    /// holder of its key).
    public func check(uuid: ServerID, apiKey: String) async throws -> ServerCredentialCheck {
        try await verify(uuid: uuid, apiKey: apiKey).check
    }

    /// The key check, and the stored `api_key_hmac` it passed against, which
    /// `leaseQuota` reads back so a key cached as verified stops working once it changes.
    public func verify(uuid: ServerID, apiKey: String) async throws -> (
        check: ServerCredentialCheck, credential: String
    ) {
        let key = keys.server(uuid)
        let stored = try await redis.command(
            "HMGET", RedisArgument(key), "api_key_hmac", "api_key_sha256", "deactivated_ms"
        ).array
        let deactivated = stored.count == 3 && !(stored[2].string ?? "").isEmpty
        // Computed whatever is stored, so an unknown server costs the same as a wrong key.
        let hmac = pepper.hmacHex(apiKey)
        if let current = stored.first?.string {
            guard pepper.verify(apiKey, hmacHex: current) else { return (.invalid, "") }
            return (deactivated ? .deactivated : .valid, current)
        }
        guard stored.count >= 2, let legacy = stored[1].string, let legacyBytes = Fingerprint.bytes(fromHex: legacy),
            constantTimeEquals(Fingerprint.sha256(Array(apiKey.utf8)), legacyBytes)
        else { return (.invalid, "") }
        // Only if the old hash is still the one checked: a concurrent rotation wins (and
        // the credential returned then differs from the stored one).
        try await redis.command(
            "EVAL", RedisArgument(Self.upgradeScript), "1", RedisArgument(key), RedisArgument(legacy),
            RedisArgument(hmac))
        return (deactivated ? .deactivated : .valid, hmac)
    }

    /// Deactivates a server (Zulip's `remotes/server/deactivate`): its requests are
    /// refused from now on; nothing it owns is deleted.
    public func deactivate(uuid: ServerID, nowMs: Int64 = Wire.nowMillis()) async throws {
        try await redis.command("HSET", RedisArgument(keys.server(uuid)), "deactivated_ms", RedisArgument(nowMs))
    }

    /// Records a Zulip analytics upload: the server's version facts, and the largest row
    /// ids uploaded so far (never lowered), which `analytics/status` answers.
    public func recordAnalytics(
        uuid: ServerID, version: String?, mergeBase: String?, apiFeatureLevel: Int64?, lastIDs: ZulipAnalyticsIDs,
        nowMs: Int64 = Wire.nowMillis()
    ) async throws {
        try await redis.command(
            "EVAL", RedisArgument(Self.analyticsScript), "1", RedisArgument(keys.server(uuid)),
            RedisArgument(lastIDs.realmCount), RedisArgument(lastIDs.installationCount),
            RedisArgument(lastIDs.realmAuditLog), RedisArgument(version ?? ""), RedisArgument(mergeBase ?? ""),
            RedisArgument(apiFeatureLevel.map(String.init) ?? ""), RedisArgument(nowMs))
    }

    /// The largest row ids the server uploaded (0 when none).
    public func analyticsIDs(uuid: ServerID) async throws -> ZulipAnalyticsIDs {
        let values = try await redis.command(
            "HMGET", RedisArgument(keys.server(uuid)), "last_realm_count_id", "last_installation_count_id",
            "last_realmauditlog_id"
        ).array.map { $0.int ?? 0 }
        guard values.count == 3 else { return ZulipAnalyticsIDs(realmCount: 0, installationCount: 0, realmAuditLog: 0) }
        return ZulipAnalyticsIDs(realmCount: values[0], installationCount: values[1], realmAuditLog: values[2])
    }

    /// KEYS[1] server hash; ARGV last realm count id, last installation count id, last
    /// audit log id, version, merge base, feature level ('' = not sent), now.
    static let analyticsScript = """
        local fields = {'last_realm_count_id', 'last_installation_count_id', 'last_realmauditlog_id'}
        for i = 1, 3 do
          local current = tonumber(redis.call('HGET', KEYS[1], fields[i]) or '0') or 0
          local given = tonumber(ARGV[i]) or 0
          if given > current then redis.call('HSET', KEYS[1], fields[i], ARGV[i]) end
        end
        if ARGV[4] ~= '' then redis.call('HSET', KEYS[1], 'zulip_version', ARGV[4]) end
        if ARGV[5] ~= '' then redis.call('HSET', KEYS[1], 'merge_base', ARGV[5]) end
        if ARGV[6] ~= '' then redis.call('HSET', KEYS[1], 'api_feature_level', ARGV[6]) end
        redis.call('HSET', KEYS[1], 'analytics_ms', ARGV[7])
        return 1
        """

    /// KEYS[1] server hash; ARGV hmac, now. 1 when the server was created.
    static let createScript = """
        if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
        redis.call('HSET', KEYS[1], 'api_key_hmac', ARGV[1], 'created_ms', ARGV[2])
        return 1
        """

    /// KEYS[1] server hash; ARGV old sha256 hex, new hmac hex.
    static let upgradeScript = """
        if redis.call('HGET', KEYS[1], 'api_key_sha256') ~= ARGV[1] then return 0 end
        redis.call('HSET', KEYS[1], 'api_key_hmac', ARGV[2])
        redis.call('HDEL', KEYS[1], 'api_key_sha256')
        return 1
        """

    /// A share of one rate-limit window of a server, taken by one ingest instance, and
    /// the server's record as it is now, read in the same round trip.
    public struct QuotaLease: Sendable, Equatable {
        /// Requests granted to the caller in `window` (0: the window's quota is used up).
        public var granted: Int
        public var window: Int64
        /// The stored `api_key_hmac` (empty when there is none).
        public var credential: String
        /// The server deactivated itself.
        public var deactivated: Bool

        public init(granted: Int, window: Int64, credential: String, deactivated: Bool) {
            self.granted = granted
            self.window = window
            self.credential = credential
            self.deactivated = deactivated
        }
    }

    /// Takes up to `want` requests of the server's fixed-window rate limit (shared by
    /// every ingest instance), after giving back `returning` requests leased earlier in
    /// the same window and not used. The grants of a window never add up to more than
    /// `limit`. The same round trip reads the server's key and `deactivated_ms`, so a key
    /// cached as verified on one instance stops working once it is rotated or the server
    /// deactivated through another.
    public func leaseQuota(
        server: ServerID, want: Int, returning: Int, limit: Int, windowSeconds: Int, nowMs: Int64 = Wire.nowMillis()
    ) async throws -> QuotaLease {
        let window = WindowCounter.window(nowMs: nowMs, seconds: windowSeconds)
        let reply = try await redis.command(
            "EVAL", RedisArgument(Self.leaseScript), "2", RedisArgument(keys.rateLimit(server: server, window: window)),
            RedisArgument(keys.server(server)), RedisArgument(max(0, want)), RedisArgument(max(0, returning)),
            RedisArgument(max(0, limit)), RedisArgument(max(1, windowSeconds).saturatingMultiply(2))
        ).array
        guard reply.count == 3, let granted = reply[0].int else {
            throw RedisError(code: .protocolError, message: "unexpected quota lease reply")
        }
        return QuotaLease(
            granted: Int(clamping: max(0, granted)), window: window, credential: reply[1].string ?? "",
            deactivated: !(reply[2].string ?? "").isEmpty)
    }

    /// KEYS[1] the window's counter, KEYS[2] the server hash (one slot: both carry the
    /// server's hash tag); ARGV want, returned, limit, expiry seconds.
    /// Returns {granted, api_key_hmac or '', deactivated_ms or ''}.
    static let leaseScript = """
        local used = tonumber(redis.call('GET', KEYS[1]) or '0') or 0
        used = math.max(0, used - tonumber(ARGV[2]))
        local granted = math.max(0, math.min(tonumber(ARGV[1]), tonumber(ARGV[3]) - used))
        redis.call('SET', KEYS[1], used + granted, 'EX', ARGV[4])
        local server = redis.call('HMGET', KEYS[2], 'api_key_hmac', 'deactivated_ms')
        return {granted, server[1] or '', server[2] or ''}
        """
}
