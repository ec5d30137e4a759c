import Foundation
import PushCrypto
import PushModels
import RedisClient

/// Whether a device can be pushed to.
public enum DeviceStatus: Sendable, Equatable {
    case active
    /// A provider called the token dead: its reason (as `push.feedback` carried it; nil
    /// when none was stored) and when (ms).
    case invalid(reason: OutcomeReason?, atMs: Int64)

    /// The status as the device hash and the device listing name it.
    public var name: String {
        switch self {
        case .active: "active"
        case .invalid: "invalid"
        }
    }

    public var isActive: Bool { self == .active }

    /// The provider's reason, when invalid and one was given.
    public var invalidReason: OutcomeReason? {
        if case .invalid(let reason, _) = self { return reason }
        return nil
    }
}

/// A device as stored in Redis.
public struct DeviceRecord: Sendable, Equatable {

    public var id: DeviceID
    public var realmUUID: RealmID
    public var userID: Int64?
    public var provider: Provider
    public var token: String
    public var appID: String?
    public var pushAccountID: Int64?
    /// The key new notifications are encrypted with (native devices only).
    public var currentKeyID: UInt32?
    public var keys: [UInt32: PushKey]
    public var status: DeviceStatus
    public var registeredAtMs: Int64
    public var createdAtMs: Int64
    /// For a device of Zulip's legacy (non-E2EE) API: the server and user it belongs to.
    public var zulipLegacyOwner: ZulipLegacyOwner? = nil
    /// The API that registered it (the device hash's `api`; absent on devices registered
    /// before it was recorded, and on legacy devices, which have `zulipLegacyOwner`).
    public var api: DeviceAPI? = nil

    public var currentKey: PushKey? { currentKeyID.flatMap { keys[$0] } }

    /// Who the device belongs to, as the API that registered it names them.
    public var owner: DeviceOwner {
        if let zulipLegacyOwner { return .zulipLegacy(zulipLegacyOwner) }
        switch api {
        case .zulipE2EE?: return .zulipE2EE
        case .gorush?: return .gorush
        case .status?: return .status
        case .native?, nil: return userID.map { .native(userID: $0) } ?? .unrecorded
        }
    }
}

/// The API a device was registered through, stored with it as `api`.
public enum DeviceAPI: String, Sendable, Equatable, CaseIterable {
    case native
    case zulipE2EE = "zulip_e2ee"
    case gorush
    case status
}

/// Who a device belongs to.
public enum DeviceOwner: Sendable, Equatable {
    /// A realm's user, through the native API.
    case native(userID: Int64)
    /// A Zulip server's E2EE registration (bouncer API), named by push account or token id.
    case zulipE2EE
    /// A user of a Zulip server, through Zulip's legacy (non-E2EE) API.
    case zulipLegacy(ZulipLegacyOwner)
    /// A token a server sent through gorush's API.
    case gorush
    /// A Status installation (the Status push server).
    case status
    /// Registered with no user before devices recorded their API: Zulip E2EE, gorush or
    /// Status, not told apart.
    case unrecorded
}

/// What a registration supplies. A device is identified by (realm, provider, token,
/// push_account_id): registering the same again returns the same device id.
public struct DeviceRegistration: Sendable {
    public var realmUUID: RealmID
    public var userID: Int64?
    public var token: DeviceToken
    public var appID: String?
    public var pushAccountID: Int64?
    public var pushKey: (id: UInt32, key: PushKey)?
    /// The API registering it, stored with the device (nil: not recorded).
    public var api: DeviceAPI?

    public init(
        realmUUID: RealmID, userID: Int64?, token: DeviceToken, appID: String?, pushAccountID: Int64?,
        pushKey: (id: UInt32, key: PushKey)?, api: DeviceAPI? = nil
    ) {
        self.realmUUID = realmUUID
        self.userID = userID
        self.token = token
        self.appID = appID
        self.pushAccountID = pushAccountID
        self.pushKey = pushKey
        self.api = api
    }
}

/// One invalidation as reported to realms by `GET /v1/feedback`.
public struct FeedbackEntry: Sendable, Equatable, Codable {
    public var cursor: String
    public var deviceID: DeviceID
    public var reason: String
    public var atMs: Int64

    enum CodingKeys: String, CodingKey {
        case cursor, reason
        case deviceID = "device_id"
        case atMs = "at_ms"
    }
}

/// Devices, their keys and their invalidations in Redis. Batches go out as one
/// pipeline; invalidation is one atomic script, so it is idempotent.
///
/// Tokens and push keys are stored encrypted with the storage keyring, bound to their
/// device and field; the token index is a keyed digest of the token. Devices written
/// before that (cleartext token and keys, SHA-256 index) still read, and are rewritten
/// in the new form when they register again.
public struct DeviceStore: Sendable {
    public let redis: RedisClient
    public let keys: RedisKeys
    public let storage: StorageKeyring
    /// How long a replaced push key stays stored after a newer one arrives.
    public var keyGracePeriodMs: Int64 = 7 * 24 * 3600 * 1000

    public init(redis: RedisClient, keys: RedisKeys, storage: StorageKeyring) {
        self.redis = redis
        self.keys = keys
        self.storage = storage
    }

    /// Every index key a token may be found under: the current key's digest first, then
    /// older storage keys' digests, then the first (unkeyed SHA-256) form.
    func tokenIndexes(realm: RealmID, provider: Provider, token: String, pushAccountID: Int64?) -> [String] {
        storage.tokenDigests(token).map {
            keys.tokenIndex(realm: realm, provider: provider, tokenDigest: $0, pushAccountID: pushAccountID)
        } + [keys.legacyTokenIndex(realm: realm, provider: provider, token: token, pushAccountID: pushAccountID)]
    }

    /// Whether this registration would renew a device rather than create one.
    public func isRegistered(_ r: DeviceRegistration) async throws -> Bool {
        let indexes = tokenIndexes(
            realm: r.realmUUID, provider: r.token.provider, token: r.token.value, pushAccountID: r.pushAccountID)
        return try await redis.command(["MGET"] + indexes.map { RedisArgument($0) }).array.contains { $0.int != nil }
    }

    /// Registers or renews a device; returns its id and whether it is new.
    public func register(_ r: DeviceRegistration, nowMs: Int64 = Wire.nowMillis()) async throws -> (
        id: DeviceID, created: Bool
    ) {
        let indexes = tokenIndexes(
            realm: r.realmUUID, provider: r.token.provider, token: r.token.value, pushAccountID: r.pushAccountID)
        let index = indexes[0]
        var created = false
        let id: DeviceID
        let found = try await redis.command(["MGET"] + indexes.map { RedisArgument($0) }).array
        if let position = found.firstIndex(where: { $0.int != nil }), let existing = found[position].int {
            id = DeviceID(existing)
            if position != 0 {
                // Found under an older index form: move it to the current one.
                try await redis.checkedPipeline([
                    ["SET", RedisArgument(index), RedisArgument(id), "NX"],
                    ["DEL", RedisArgument(indexes[position])],
                ])
            }
            // The same phone now signed in as another user: it leaves the old user's fan-out.
            if let userID = r.userID,
                let previous = try await redis.command("HGET", RedisArgument(keys.device(id)), "user_id").int,
                previous != userID
            {
                try await redis.command(
                    "SREM", RedisArgument(keys.userDevices(realm: r.realmUUID, userID: previous)), RedisArgument(id))
            }
        } else {
            let candidate = try await redis.command("INCR", RedisArgument(keys.deviceSequence)).int ?? 0
            // Two concurrent registrations of one token: the first SET NX wins, the other adopts its id.
            let won = try await redis.command("SET", RedisArgument(index), RedisArgument(candidate), "NX")
            if won == .null {
                id = DeviceID(try await redis.command("GET", RedisArgument(index)).int ?? candidate)
            } else {
                id = DeviceID(candidate)
                created = true
            }
        }
        var fields: [RedisArgument] = [
            "HSET", RedisArgument(keys.device(id)),
            "realm", RedisArgument(r.realmUUID),
            "provider", RedisArgument(r.token.provider.rawValue),
            "token", RedisArgument(try storage.sealString(r.token.value, slot: .deviceToken(id))),
            "status", "active", "reason", "", "invalid_ms", "",
            "registered_ms", RedisArgument(nowMs),
        ]
        if let userID = r.userID { fields += ["user_id", RedisArgument(userID)] }
        if let api = r.api { fields += ["api", RedisArgument(api.rawValue)] }
        if let appID = r.appID { fields += ["app_id", RedisArgument(appID)] }
        if let account = r.pushAccountID { fields += ["push_account_id", RedisArgument(account)] }
        if let (keyID, key) = r.pushKey {
            fields += ["key_id", RedisArgument(keyID), "scheme", RedisArgument(key.scheme.rawValue)]
        }
        var commands: [[RedisArgument]] = [
            fields,
            ["HSETNX", RedisArgument(keys.device(id)), "created_ms", RedisArgument(nowMs)],
            // Registered again: an earlier invalidation's unwritten feedback no longer matters.
            ["HDEL", RedisArgument(keys.device(id)), "feedback_pending"],
        ]
        if let userID = r.userID {
            commands.append([
                "SADD", RedisArgument(keys.userDevices(realm: r.realmUUID, userID: userID)), RedisArgument(id),
            ])
        }
        if let (keyID, key) = r.pushKey {
            let sealed = try storage.seal(key.tagged, slot: .devicePushKey(id, keyID: keyID))
            commands.append([
                "HSET", RedisArgument(keys.deviceKeys(id)), RedisArgument(keyID), RedisArgument("\(sealed)|\(nowMs)"),
            ])
        }
        try await redis.checkedPipeline(commands)
        if r.pushKey != nil { try await pruneKeys(id, nowMs: nowMs) }
        return (id, created)
    }

    /// Drops push keys replaced longer than the grace period ago, and encrypts the ones
    /// still stored in the first, cleartext form.
    /// Push keys kept per device (the current one included); ingest sets it from
    /// `PUSHRELAY_DEVICE_MAX_PUSH_KEYS`.
    public var maxStoredKeys = 3

    private func pruneKeys(_ id: DeviceID, nowMs: Int64) async throws {
        let replies = try await redis.pipeline([
            ["HGET", RedisArgument(keys.device(id)), "key_id"],
            ["HGETALL", RedisArgument(keys.deviceKeys(id))],
        ])
        let current = replies[0].string
        var stale: [RedisArgument] = []
        var staleFields: Set<String> = []
        let entries = replies[1].hash.map { ($0.key, Int64($0.value.split(separator: "|").last ?? "") ?? 0) }
            .sorted { $0.1 < $1.1 }
        // A key is replaced at the moment the next newer key was added.
        for (i, entry) in entries.enumerated() where entry.0 != current && i + 1 < entries.count {
            let age = nowMs.subtractingReportingOverflow(entries[i + 1].1)
            if !age.overflow && age.partialValue > keyGracePeriodMs {
                stale.append(RedisArgument(entry.0))
                staleFields.insert(entry.0)
            }
        }
        // However fast new key ids arrive, a device keeps at most `maxStoredKeys`: the
        // current one and the newest before it. Every look-up loads them all.
        var kept = entries.filter { !staleFields.contains($0.0) }
        while kept.count > max(1, maxStoredKeys), let oldest = kept.firstIndex(where: { $0.0 != current }) {
            stale.append(RedisArgument(kept[oldest].0))
            staleFields.insert(kept[oldest].0)
            kept.remove(at: oldest)
        }
        if !stale.isEmpty {
            try await redis.command(["HDEL", RedisArgument(keys.deviceKeys(id))] + stale)
        }
        var upgraded: [RedisArgument] = []
        for (field, value) in replies[1].hash where !staleFields.contains(field) {
            let parts = value.split(separator: "|", omittingEmptySubsequences: false)
            guard parts.count == 2, !StorageKeyring.isSealed(String(parts[0])), let keyID = UInt32(field),
                let key = try? PushKey(base64: String(parts[0]))
            else { continue }
            let sealed = try storage.seal(key.tagged, slot: .devicePushKey(id, keyID: keyID))
            upgraded += [RedisArgument(field), RedisArgument("\(sealed)|\(parts[1])")]
        }
        if !upgraded.isEmpty {
            try await redis.command(["HSET", RedisArgument(keys.deviceKeys(id))] + upgraded)
        }
    }

    /// Loads devices in one pipelined round trip; ids that do not exist are absent, and
    /// so are devices whose token does not decrypt for its slot (a moved or damaged
    /// value). A value under a storage key id the keyring lacks throws: that is a
    /// configuration error, not a missing device.
    public func devices(_ ids: [DeviceID]) async throws -> [DeviceID: DeviceRecord] {
        try await stored(ids).mapValues(\.record)
    }

    /// One `HMGET` per device of the fields that say whose it is and whether it is active;
    /// a device without its realm, provider or token reads as absent, as in `devices`.
    public func standings(_ ids: [DeviceID]) async throws -> [DeviceID: DeviceStanding] {
        guard !ids.isEmpty else { return [:] }
        let replies = try await redis.checkedPipeline(
            ids.map { ["HMGET", RedisArgument(keys.device($0)), "realm", "user_id", "status", "provider", "token"] })
        var result: [DeviceID: DeviceStanding] = [:]
        for (id, reply) in zip(ids, replies) {
            let fields = reply.array
            guard fields.count == 5, let realm = fields[0].string,
                fields[3].string.flatMap(Provider.init(rawValue:)) != nil,
                fields[4].string != nil
            else { continue }
            result[id] = DeviceStanding(
                realmUUID: RealmID(realm), userID: fields[1].string.flatMap { Int64($0) },
                isActive: fields[2].string != "invalid")
        }
        return result
    }

    /// The devices, each with its token field as stored (what the invalidation script compares).
    private func stored(_ ids: [DeviceID]) async throws -> [DeviceID: (record: DeviceRecord, storedToken: String)] {
        guard !ids.isEmpty else { return [:] }
        var commands: [[RedisArgument]] = []
        for id in ids {
            commands.append(["HGETALL", RedisArgument(keys.device(id))])
            commands.append(["HGETALL", RedisArgument(keys.deviceKeys(id))])
        }
        let replies = try await redis.checkedPipeline(commands)
        var result: [DeviceID: (record: DeviceRecord, storedToken: String)] = [:]
        for (i, id) in ids.enumerated() {
            let fields = DeviceHashFields(replies[2 * i])
            if let record = try decode(id: id, fields: fields, keyFields: replies[2 * i + 1].hash),
                let storedToken = fields.token
            {
                result[id] = (record, storedToken)
            }
        }
        return result
    }

    /// `keyFields`: the device's push keys, by key id (a hash of one or two fields).
    func decode(id: DeviceID, fields: DeviceHashFields, keyFields: [String: String]) throws(CryptoError)
        -> DeviceRecord?
    {
        guard let realm = fields.realm, let providerName = fields.provider,
            let provider = Provider(rawValue: providerName), let storedToken = fields.token,
            let token = try readable(storage.openString(storedToken, slot: .deviceToken(id)))
        else { return nil }
        var keys: [UInt32: PushKey] = [:]
        for (keyID, value) in keyFields {
            // `key|registered_ms`: the part before the bar, found in the bytes (splitting by
            // Character walked every grapheme of the sealed key: ~4 % of the encryptor;
            // `utf8.firstIndex` is generic code: ~6,000 instructions a notification).
            var value = value
            let stored = value.withUTF8 { bytes in
                let end = bytes.firstIndex(of: UInt8(ascii: "|")) ?? bytes.count
                return String(decoding: UnsafeBufferPointer(rebasing: bytes[..<end]), as: UTF8.self)
            }
            guard let pushKeyID = UInt32(keyID), !stored.isEmpty else { continue }
            let key: PushKey?
            if StorageKeyring.isSealed(stored) {
                key = try readable(storage.open(stored, slot: .devicePushKey(id, keyID: pushKeyID)))
                    .flatMap { try? PushKey(tagged: $0) }
            } else {
                key = try? PushKey(base64: stored)
            }
            if let key { keys[pushKeyID] = key }
        }
        return DeviceRecord(
            id: id, realmUUID: realm, userID: fields.userID, provider: provider,
            token: token, appID: fields.appID.flatMap { $0.isEmpty ? nil : $0 },
            pushAccountID: fields.pushAccountID.flatMap { Int64($0) },
            currentKeyID: fields.keyID.flatMap { UInt32($0) }, keys: keys,
            status: fields.status == "invalid"
                ? .invalid(
                    reason: fields.reason.flatMap { $0.isEmpty ? nil : OutcomeReason(name: $0) },
                    atMs: fields.invalidMs.flatMap { Int64($0) } ?? 0)
                : .active,
            registeredAtMs: fields.registeredMs.flatMap { Int64($0) } ?? 0,
            createdAtMs: fields.createdMs.flatMap { Int64($0) } ?? 0,
            zulipLegacyOwner: fields.zulipLegacy.flatMap(ZulipLegacyOwner.init(stored:)),
            api: fields.api.flatMap(DeviceAPI.init(rawValue:)))
    }

    /// A secret that does not open for its slot reads as absent; an unknown storage key id throws.
    private func readable<T>(_ open: @autoclosure () throws(CryptoError) -> T) throws(CryptoError) -> T? {
        do {
            return try open()
        } catch  where error.code == .invalidKey {
            throw error
        } catch {
            return nil
        }
    }

    /// The ids of a user's devices (active or not).
    public func deviceIDs(realm: RealmID, userID: Int64) async throws -> [DeviceID] {
        try await deviceIDs(users: [(realm, userID)])[0]
    }

    /// Several users' devices in one round trip, in the order asked.
    public func deviceIDs(users: [(realm: RealmID, userID: Int64)]) async throws -> [[DeviceID]] {
        guard !users.isEmpty else { return [] }
        let replies = try await redis.checkedPipeline(
            users.map { ["SMEMBERS", RedisArgument(keys.userDevices(realm: $0.realm, userID: $0.userID))] })
        return replies.map { $0.array.compactMap { $0.int.map { DeviceID($0) } }.sorted() }
    }

    /// Forgets a device entirely: its record, keys, user membership and token index.
    /// Returns true when this call removed the device (false when it was already gone).
    @discardableResult
    public func delete(_ device: DeviceRecord) async throws -> Bool {
        let indexes = tokenIndexes(
            realm: device.realmUUID, provider: device.provider, token: device.token, pushAccountID: device.pushAccountID
        )
        var commands: [[RedisArgument]] = [
            ["DEL", RedisArgument(keys.device(device.id)), RedisArgument(keys.deviceKeys(device.id))]
        ]
        // A legacy-API device has no token index: the one of its realm and token is
        // another device's (E2EE or native), and stays.
        if device.zulipLegacyOwner == nil { commands.append(["DEL"] + indexes.map { RedisArgument($0) }) }
        if let userID = device.userID {
            commands.append([
                "SREM", RedisArgument(keys.userDevices(realm: device.realmUUID, userID: userID)),
                RedisArgument(device.id),
            ])
        }
        let replies = try await redis.checkedPipeline(commands)
        return (replies.first?.int ?? 0) > 0
    }

    /// Marks a device invalid, atomically and idempotently. Ignored when the device is
    /// gone or already invalid, when its token changed since the report, or when it
    /// re-registered after the provider's timestamp. Returns true if it changed.
    public func invalidate(
        deviceID: DeviceID, tokenFingerprint: String, reason: OutcomeReason, providerTimestampMs: Int64?,
        nowMs: Int64 = Wire.nowMillis()
    ) async throws -> Bool {
        guard let (device, storedToken) = try await stored([deviceID])[deviceID] else { return false }
        guard Fingerprint.token(device.token) == tokenFingerprint else { return false }
        // The script compares the token field as stored (ciphertext): a registration in
        // between rewrites it, and the report is then about an older registration.
        let deviceKey = keys.device(deviceID)
        // The writer of the feedback entry holds the device's `feedback_pending` mark,
        // `{ms} {random}`: one writer at a time, and a mark left by a writer that stopped
        // is taken over once it is older than `feedbackLeaseMs`.
        let lease = "\(nowMs) \(UInt64.random(in: 0...UInt64.max))"
        let reply = try await redis.command(
            "EVAL", RedisArgument(Self.invalidateScript), "1", RedisArgument(deviceKey), RedisArgument(storedToken),
            RedisArgument(reason.name), RedisArgument(providerTimestampMs ?? -1), RedisArgument(nowMs),
            RedisArgument(lease),
            RedisArgument(Self.feedbackLeaseMs))
        let parts = reply.array
        guard let outcome = parts.first?.int, outcome != 0 else { return false }
        if outcome == 3 {
            // Another writer holds the mark: whether its entry gets written is not known
            // yet. Tried again (the caller retries) until it is released or runs out.
            throw RedisError(code: .io, message: "the device's feedback entry is being written elsewhere")
        }
        guard parts.count == 3, let reportedReason = parts[1].string, let atMs = parts[2].string else {
            throw RedisError(code: .protocolError, message: "unexpected reply to the invalidate script")
        }
        // The realm's feedback stream is another key (another slot on a cluster): written
        // after the device is marked, then the mark is taken off. Should this stop in
        // between, a later report of the device takes the mark over and writes the entry
        // (at least once: a stop after the entry and before the mark's removal writes it twice).
        try await redis.command(
            "XADD", RedisArgument(keys.feedback(realm: device.realmUUID)), "MAXLEN", "~", "100000", "*", "device_id",
            RedisArgument(deviceID), "reason", RedisArgument(reportedReason), "at_ms", RedisArgument(atMs))
        try await redis.command(
            "EVAL", RedisArgument(Self.releaseFeedbackScript), "1", RedisArgument(deviceKey), RedisArgument(lease))
        return true
    }

    /// How long a feedback writer holds a device's mark before another may take it over.
    static let feedbackLeaseMs: Int64 = 10_000

    /// KEYS[1] device hash; ARGV stored token field, reason, provider ts (-1 none), now,
    /// lease, lease ms. Returns {0} (nothing to do), {1, reason, at} (invalidated now),
    /// {2, reason, at} (invalidated earlier; its feedback entry's writer stopped: this one
    /// writes it) or {3} (a writer holds the mark now).
    static let invalidateScript = """
        local status = redis.call('HGET', KEYS[1], 'status')
        local pending = redis.call('HGET', KEYS[1], 'feedback_pending')
        if status == 'invalid' and pending then
          local since = tonumber(string.match(pending, '^(%d+)') or '0')
          if tonumber(ARGV[4]) - since < tonumber(ARGV[6]) then return {3} end
          redis.call('HSET', KEYS[1], 'feedback_pending', ARGV[5])
          return {2, redis.call('HGET', KEYS[1], 'reason') or '', redis.call('HGET', KEYS[1], 'invalid_ms') or '0'}
        end
        if status ~= 'active' then return {0} end
        if redis.call('HGET', KEYS[1], 'token') ~= ARGV[1] then return {0} end
        local ts = tonumber(ARGV[3])
        local registered = tonumber(redis.call('HGET', KEYS[1], 'registered_ms') or '0')
        if ts >= 0 and registered > ts then return {0} end
        redis.call('HSET', KEYS[1], 'status', 'invalid', 'reason', ARGV[2], 'invalid_ms', ARGV[4], 'feedback_pending', ARGV[5])
        return {1, ARGV[2], ARGV[4]}
        """

    /// KEYS[1] device hash; ARGV the lease: takes the mark off if this writer still holds it.
    static let releaseFeedbackScript = """
        if redis.call('HGET', KEYS[1], 'feedback_pending') == ARGV[1] then
          redis.call('HDEL', KEYS[1], 'feedback_pending')
        end
        return 0
        """

    /// Invalidations of a realm after `cursor` (exclusive), oldest first.
    public func feedback(realm: RealmID, after cursor: String?, limit: Int) async throws -> [FeedbackEntry] {
        let start = cursor.map { "(\($0)" } ?? "-"
        let reply = try await redis.command(
            "XRANGE", RedisArgument(keys.feedback(realm: realm)), RedisArgument(start), "+", "COUNT",
            RedisArgument(limit))
        return reply.array.compactMap { entry in
            let parts = entry.array
            guard parts.count == 2, let id = parts[0].string else { return nil }
            let fields = parts[1].hash
            guard let device = fields["device_id"].flatMap({ Int64($0) }).map({ DeviceID($0) }) else { return nil }
            return FeedbackEntry(
                cursor: id, deviceID: device, reason: fields["reason"] ?? "",
                atMs: fields["at_ms"].flatMap { Int64($0) } ?? 0)
        }
    }
}

/// The fields of a device's hash that `decode` reads, from its HGETALL reply in one pass:
/// no dictionary of every field's name and value (building one, then looking the names up
/// again, cost the encryptor ~15,000 instructions a notification, of 798k). Other fields
/// are skipped.
struct DeviceHashFields {
    var realm: RealmID?
    var provider: String?
    var token: String?
    var userID: Int64?
    var appID: String?
    var pushAccountID: String?
    var keyID: String?
    var status: String?
    var reason: String?
    var invalidMs: String?
    var registeredMs: String?
    var createdMs: String?
    var zulipLegacy: String?
    var api: String?

    init(_ reply: RedisValue) {
        guard case .array(let items) = reply else { return }
        var index = 0
        while index + 1 < items.count {
            defer { index += 2 }
            guard case .bytes(let name) = items[index], let value = items[index + 1].string else { continue }
            // Names are short ASCII: a small string, compared without an allocation.
            switch String(decoding: name, as: UTF8.self) {
            case "realm": realm = RealmID(value)
            case "provider": provider = value
            case "token": token = value
            case "user_id": userID = Int64(value)
            case "app_id": appID = value
            case "push_account_id": pushAccountID = value
            case "key_id": keyID = value
            case "status": status = value
            case "reason": reason = value
            case "invalid_ms": invalidMs = value
            case "registered_ms": registeredMs = value
            case "created_ms": createdMs = value
            case "zulip_legacy": zulipLegacy = value
            case "api": api = value
            default: break
            }
        }
    }
}
