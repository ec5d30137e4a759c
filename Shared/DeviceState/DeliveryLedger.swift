import PushCrypto
import PushModels
import RedisClient
import Synchronization

/// One push as the send ledger knows it: the (notification, device) pair, and when the
/// notification was accepted (it picks the pair's bucket, and every copy of the push, on
/// every topic and in every replay, carries the same value).
public struct SendPair: Sendable, Hashable, CustomStringConvertible {
    public let notificationID: NotificationID
    public let deviceID: DeviceID
    public let acceptedAtMs: Int64
    /// The first 8 bytes of SHA-256(`notification:device`), as a signed integer: what the
    /// ledger stores for the pair. Two pairs of one bucket share it with odds of about
    /// n²/2⁶⁵ for n pairs (10⁻¹⁴ at 500).
    public let fingerprint: Int64

    public init(notificationID: NotificationID, deviceID: DeviceID, acceptedAtMs: Int64) {
        self.notificationID = notificationID
        self.deviceID = deviceID
        self.acceptedAtMs = acceptedAtMs
        fingerprint = Fingerprint.sha256Prefix64("\(notificationID):\(deviceID)")
    }

    /// `notification:device`, as `pushrelay` names pairs.
    public var description: String { "\(notificationID):\(deviceID)" }
}

/// Which (notification, device) pairs a provider has already accepted, so a push
/// redelivered after a crash, a rebalance or a replay of any topic is not sent twice.
///
/// Before sending, the dispatcher claims the pair (its claim time, set only if the pair
/// is neither sent nor claimed); right after the provider accepts, it marks the pair
/// sent; when the provider refuses, it releases the claim. So on redelivery a pair is
/// - unknown: never tried, or refused: send it;
/// - sent: delivered: do not send again;
/// - claimed: a send was interrupted between the request and the provider's answer
///   (the process died), or is still under way: see `DispatchMachine`.
///
/// The layout keeps about 10 bytes per push, where a key per pair took ~300
/// (docs/design.md, "The send ledger"):
/// - pairs are bucketed by the second their notification was accepted and by their
///   fingerprint (`shards` buckets a second);
/// - a bucket's sent pairs are a set of 64-bit fingerprints (`{p}sl:{second:shard}`),
///   which Redis keeps as a packed array of integers (an intset) up to
///   `set-max-intset-entries` (512) members: 8 bytes a pair, plus ~100 bytes a bucket;
/// - its claims are a hash beside it (`{p}sl:{second:shard}:c`, fingerprint → claim
///   ms): a pair is there only between its claim and its mark or release, or for good
///   once a send was interrupted;
/// - each key lives `ttl` after its last write, which must cover the retry horizon.
/// Both keys of a bucket share a hash tag, so every script touches one slot of a Cluster.
///
/// Release 0.1 kept a key per pair (`{p}sent:{notification}:{device}`, `claimed
/// {ms}` or `sent {ms} {id}`). Those keys are still read, beside the bucket, so a push
/// sent by an older dispatcher is not sent again in a rolling upgrade or a replay within
/// the horizon; and while an older dispatcher still runs (`LedgerTransition`), claims and
/// marks are written there too, so it sees this one's. The reads go in the release after
/// this one, once every such key has expired.
public struct RedisDeliveryLedger: Sendable {
    /// Buckets per second of acceptance. At 16, a bucket stays an intset up to ~8,000
    /// pushes a second; changing it moves every pair to another bucket (the ledger then
    /// forgets what it knew), so it is fixed.
    public static let shards: Int64 = 16

    let redis: RedisClient
    let keys: RedisKeys
    let ttl: Duration
    let transition: LedgerTransition

    public init(redis: RedisClient, keys: RedisKeys, ttl: Duration, transition: LedgerTransition = .init()) {
        self.redis = redis
        self.keys = keys
        self.ttl = ttl
        self.transition = transition
    }

    private var ttlMs: RedisArgument { .init(RetrySchedule.milliseconds(ttl)) }

    /// The bucket's two keys and the pair's member in them.
    private func place(_ pair: SendPair) -> (sent: RedisArgument, claims: RedisArgument, member: RedisArgument) {
        let fingerprint = pair.fingerprint
        let shard = Int64(UInt64(bitPattern: fingerprint) % UInt64(Self.shards))
        let second = pair.acceptedAtMs >= 0 ? pair.acceptedAtMs / 1000 : 0
        let key = keys.sendLedger(second: second, shard: shard)
        return (.init(key), .init(key + ":c"), .init(fingerprint))
    }

    /// Sent: `sent`; claimed: the claim's ms; otherwise the claim is made and nil returned.
    static let claimScript = """
        if redis.call('SISMEMBER', KEYS[1], ARGV[1]) == 1 then return 'sent' end
        local at = redis.call('HGET', KEYS[2], ARGV[1])
        if at then return at end
        redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
        redis.call('PEXPIRE', KEYS[2], ARGV[3])
        return false
        """

    static let markScript = """
        redis.call('SADD', KEYS[1], ARGV[1])
        redis.call('PEXPIRE', KEYS[1], ARGV[2])
        redis.call('HDEL', KEYS[2], ARGV[1])
        return 1
        """

    /// The scripts by name (`EVALSHA`): a few bytes a call instead of the script's text.
    static let claimScriptName = RedisArgument(Fingerprint.sha1Hex(claimScript))
    static let markScriptName = RedisArgument(Fingerprint.sha1Hex(markScript))

    /// `commands`, the first of which runs `script` by name; when Redis does not know it
    /// yet (`NOSCRIPT`: a new or restarted server, another master), that one is sent again
    /// with the script's text (the others ran once). An error reply is thrown.
    private func run(_ script: String, _ commands: [[RedisArgument]]) async throws -> [RedisValue] {
        var replies = try await redis.pipeline(commands)
        if case .error(let message) = replies.first, message.hasPrefix("NOSCRIPT") {
            var first = commands[0]
            first[0] = "EVAL"
            first[1] = .init(script)
            replies[0] = try await redis.command(first)
        }
        for reply in replies {
            if case .error(let message) = reply { throw RedisError(code: .replyError, message: message) }
        }
        return replies
    }

    private func legacyKey(_ pair: SendPair) -> RedisArgument {
        .init(keys.legacySent(notificationID: pair.notificationID, deviceID: pair.deviceID))
    }

    /// Claims the pair for sending, in one round trip; returns what was there before
    /// (`.unknown` means the claim is ours). A pair an older dispatcher claimed or sent
    /// answers as it left it.
    public func claim(_ pair: SendPair, nowMs: Int64) async throws -> LedgerState {
        let (sent, claims, member) = place(pair)
        let legacy: [RedisArgument] =
            transition.writesLegacyKeys
            ? ["SET", legacyKey(pair), .init("claimed \(nowMs)"), "NX", "PX", ttlMs, "GET"] : ["GET", legacyKey(pair)]
        let replies = try await run(
            Self.claimScript,
            [["EVALSHA", Self.claimScriptName, "2", sent, claims, member, .init(nowMs), ttlMs], legacy])
        let current: LedgerState
        switch replies[0].string {
        case nil: current = .unknown
        case "sent": current = .sent
        case let at?: current = .claimed(atMs: Int64(at) ?? 0)
        }
        switch (LedgerState(legacy: replies[1]), current) {
        case (_, .sent): return .sent
        case (.sent, _):
            // Sent by an older dispatcher: marked here too, so the claim just made is not
            // read later as an interrupted send.
            try await recordSent(pair)
            return .sent
        case (.claimed(let at), _): return .claimed(atMs: at)
        case (_, let state): return state
        }
    }

    /// Records that the provider accepted the pair (its claim goes).
    public func recordSent(_ pair: SendPair) async throws {
        let (sent, claims, member) = place(pair)
        var commands: [[RedisArgument]] = [["EVALSHA", Self.markScriptName, "2", sent, claims, member, ttlMs]]
        if transition.writesLegacyKeys { commands.append(["SET", legacyKey(pair), "sent 0", "PX", ttlMs]) }
        _ = try await run(Self.markScript, commands)
    }

    /// The provider refused the pair (it will be retried, dead-lettered or dropped): not sent.
    public func release(_ pair: SendPair) async throws {
        let (_, claims, member) = place(pair)
        var commands: [[RedisArgument]] = [["HDEL", claims, member]]
        if transition.writesLegacyKeys { commands.append(["DEL", legacyKey(pair)]) }
        try await redis.checkedPipeline(commands)
    }

    /// Which of `pairs` are recorded as sent, in one round trip per server.
    public func sentPairs(_ pairs: [SendPair]) async throws -> Set<SendPair> {
        guard !pairs.isEmpty else { return [] }
        let replies = try await redis.checkedPipeline(
            pairs.flatMap { pair in
                let (sent, _, member) = place(pair)
                return [["SISMEMBER", sent, member], ["GET", legacyKey(pair)]]
            })
        var delivered: Set<SendPair> = []
        for (index, pair) in pairs.enumerated()
        where replies[2 * index].int == 1 || LedgerState(legacy: replies[2 * index + 1]) == .sent {
            delivered.insert(pair)
        }
        return delivered
    }
}

/// Whether an older dispatcher (one that does not announce
/// `DispatcherCapability.bucketedLedger`) may still be running, so claims and marks are
/// also written in the per-pair keys it reads. Yes until the announcements say otherwise
/// (`ProviderAnnouncer` checks them every 10 s).
public final class LedgerTransition: Sendable {
    private let legacyWrites = Atomic<Bool>(true)

    public init() {}

    public var writesLegacyKeys: Bool {
        get { legacyWrites.load(ordering: .relaxed) }
        set { legacyWrites.store(newValue, ordering: .relaxed) }
    }
}

/// What the delivery ledger holds for one (notification, device) pair.
public enum LedgerState: Sendable, Equatable {
    case unknown
    /// A send began at this time and has not finished (or never will: it was interrupted).
    case claimed(atMs: Int64)
    case sent

    /// A per-pair key of the first layout: `claimed {ms}`, or `sent {ms}[ {id}]`.
    init(legacy value: RedisValue) {
        let parts = value.string?.split(separator: " ", maxSplits: 2) ?? []
        switch parts.first {
        case "sent": self = .sent
        case "claimed": self = .claimed(atMs: parts.count > 1 ? Int64(parts[1]) ?? 0 : 0)
        default: self = .unknown
        }
    }
}

extension OutboundRecord {
    /// The pair this push is in the send ledger.
    public var sendPair: SendPair {
        SendPair(notificationID: notificationID, deviceID: deviceID, acceptedAtMs: acceptedAtMs)
    }
}
