import PushModels
import RedisClient

/// Which (notification, device) pairs a provider has already accepted, so a push
/// redelivered after a crash, a rebalance or a replay is not sent twice.
///
/// The dispatcher checks before sending and records right after the provider
/// accepts. A marker lives for `ttl`, which must cover the retry horizon.
public struct DeliveryLedger: Sendable {
    let redis: RedisClient
    let keys: RedisKeys
    let ttl: Duration

    public init(redis: RedisClient, keys: RedisKeys, ttl: Duration) {
        self.redis = redis
        self.keys = keys
        self.ttl = ttl
    }

    /// The marker of a pair already sent: when (ms) and the provider's message id.
    public struct Marker: Sendable, Equatable {
        public var sentAtMs: Int64
        public var providerMessageID: String?
    }

    public func marker(notificationID: String, deviceID: Int64) async throws -> Marker? {
        let value = try await redis.command("GET", .init(keys.sent(notificationID: notificationID, deviceID: deviceID)))
        guard let text = value.string else { return nil }
        let parts = text.split(separator: " ", maxSplits: 1).map(String.init)
        return Marker(sentAtMs: Int64(parts.first ?? "") ?? 0, providerMessageID: parts.count > 1 ? parts[1] : nil)
    }

    /// Which of `pairs` are already sent, in one round trip.
    public func sentPairs(_ pairs: [(notificationID: String, deviceID: Int64)]) async throws -> Set<String> {
        guard !pairs.isEmpty else { return [] }
        let names = pairs.map { keys.sent(notificationID: $0.notificationID, deviceID: $0.deviceID) }
        let reply = try await redis.command(["MGET"] + names.map { RedisArgument($0) })
        guard case .array(let values) = reply else { return [] }
        var sent: Set<String> = []
        for (pair, value) in zip(pairs, values) where value != .null {
            sent.insert("\(pair.notificationID):\(pair.deviceID)")
        }
        return sent
    }

    /// Records that the provider accepted the pair. False when it was already recorded.
    @discardableResult
    public func recordSent(notificationID: String, deviceID: Int64, providerMessageID: String?, nowMs: Int64)
        async throws -> Bool
    {
        let value = providerMessageID.map { "\(nowMs) \($0)" } ?? "\(nowMs)"
        let reply = try await redis.command(
            "SET", .init(keys.sent(notificationID: notificationID, deviceID: deviceID)), .init(value), "NX", "PX",
            .init(RetrySchedule.milliseconds(ttl)))
        return reply != .null
    }
}
