import PushModels
import RedisClient

/// Which (notification, device) pairs a provider has already accepted, so a push
/// redelivered after a crash, a rebalance or a replay is not sent twice.
///
/// Before sending, the dispatcher claims the pair (`claimed {ms}`, set only if absent);
/// right after the provider accepts, it records `sent {ms} {provider message id}`; when
/// the provider refuses, it releases the claim. So on redelivery a pair is either
/// - unknown: never tried, or refused: send it;
/// - `sent`: delivered: do not send again;
/// - `claimed`: a send was interrupted between the request and the provider's answer
///   (the process died): the provider may or may not have it. Such a pair is re-sent
///   (losing a notification is worse than showing it twice) and reported as ambiguous.
/// Markers live for `ttl`, which must cover the retry horizon.
public struct RedisDeliveryLedger: Sendable {
    let redis: RedisClient
    let keys: RedisKeys
    let ttl: Duration

    public init(redis: RedisClient, keys: RedisKeys, ttl: Duration) {
        self.redis = redis
        self.keys = keys
        self.ttl = ttl
    }

    private var ttlMs: RedisArgument { .init(RetrySchedule.milliseconds(ttl)) }

    private func key(_ notificationID: NotificationID, _ deviceID: DeviceID) -> RedisArgument {
        .init(keys.sent(notificationID: notificationID, deviceID: deviceID))
    }

    /// Claims the pair for sending, in one round trip; returns what was there before
    /// (`.unknown` means the claim is ours).
    public func claim(notificationID: NotificationID, deviceID: DeviceID, nowMs: Int64) async throws -> LedgerState {
        LedgerState(
            try await redis.command(
                "SET", key(notificationID, deviceID), .init("claimed \(nowMs)"), "NX", "PX", ttlMs, "GET"))
    }

    /// Records that the provider accepted the pair.
    public func recordSent(notificationID: NotificationID, deviceID: DeviceID, providerMessageID: String?, nowMs: Int64)
        async throws
    {
        let value = "sent \(nowMs)" + (providerMessageID.map { " \($0)" } ?? "")
        try await redis.command("SET", key(notificationID, deviceID), .init(value), "PX", ttlMs)
    }

    /// The provider refused the pair (it will be retried, dead-lettered or dropped): not sent.
    public func release(notificationID: NotificationID, deviceID: DeviceID) async throws {
        try await redis.command("DEL", key(notificationID, deviceID))
    }

    /// Which of `pairs` are recorded as sent (`notification:device`), in one round trip.
    public func sentPairs(_ pairs: [(notificationID: NotificationID, deviceID: DeviceID)]) async throws -> Set<String> {
        guard !pairs.isEmpty else { return [] }
        let reply = try await redis.command(["MGET"] + pairs.map { key($0.notificationID, $0.deviceID) })
        var sent: Set<String> = []
        for (pair, value) in zip(pairs, reply.array) {
            if case .sent = LedgerState(value) { sent.insert("\(pair.notificationID):\(pair.deviceID)") }
        }
        return sent
    }
}

/// What the delivery ledger holds for one (notification, device) pair.
public enum LedgerState: Sendable, Equatable {
    case unknown
    /// A send began at this time and never finished.
    case claimed(atMs: Int64)
    case sent(atMs: Int64, providerMessageID: String?)

    init(_ value: RedisValue) {
        guard let text = value.string else {
            self = .unknown
            return
        }
        let parts = text.split(separator: " ", maxSplits: 2).map(String.init)
        let ms = parts.count > 1 ? Int64(parts[1]) ?? 0 : 0
        switch parts.first {
        case "sent": self = .sent(atMs: ms, providerMessageID: parts.count > 2 ? parts[2] : nil)
        case "claimed": self = .claimed(atMs: ms)
        default: self = .unknown
        }
    }
}
