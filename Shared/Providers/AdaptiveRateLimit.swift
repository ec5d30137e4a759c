import Foundation
import PushModels
import Synchronization

/// Additive-increase/multiplicative-decrease send rate for one provider target, as a
/// token bucket. Pure state: times are seconds on any monotonic clock, so tests drive it.
///
/// - A throttling answer (429, 503) halves the rate, at most once per `cooldown`, so a
///   burst of answers to requests already in flight counts as one signal.
/// - Each success raises the rate by `increase` (permits/s) plus 1 %, back up to `ceiling`.
public struct AIMDRate: Sendable, Equatable {
    public var ceiling: Double
    public var floor: Double
    public var increase: Double
    public var cooldown: Double
    public private(set) var rate: Double
    private var tokens: Double
    private var refilledAt: Double
    private var lastDecrease: Double = -.infinity

    public init(ceiling: Double, floor: Double = 1, increase: Double = 1, cooldown: Double = 1, now: Double) {
        self.ceiling = max(ceiling, floor)
        self.floor = max(floor, 0.01)
        self.increase = increase
        self.cooldown = cooldown
        self.rate = self.ceiling
        self.tokens = 1
        self.refilledAt = now
    }

    /// Reserves one permit. Returns how long to wait before using it (0: now), or nil
    /// (nothing reserved) when that wait would exceed `maxWait`.
    public mutating func reserve(now: Double, maxWait: Double) -> Double? {
        // A bucket of a tenth of a second's worth absorbs jitter without allowing bursts.
        let burst = max(1, rate / 10)
        tokens = min(burst, tokens + (now - refilledAt) * rate)
        refilledAt = now
        let wait = tokens >= 1 ? 0 : (1 - tokens) / rate
        guard wait <= maxWait else { return nil }
        tokens -= 1
        return wait
    }

    public mutating func throttled(now: Double) {
        guard now - lastDecrease >= cooldown else { return }
        lastDecrease = now
        rate = max(floor, rate / 2)
        tokens = min(tokens, 0)
    }

    public mutating func succeeded() {
        rate = min(ceiling, rate * 1.01 + increase)
    }
}

/// One adaptive rate per provider target (APNs topic, FCM project), so a provider that
/// pushes back slows only its own traffic.
public final class AdaptiveRateLimiter: Sendable {
    public struct Settings: Sendable {
        /// Highest rate per target (permits/s); where a target starts.
        public var ceiling: Double
        public var floor: Double
        public init(ceiling: Double = 5000, floor: Double = 1) {
            self.ceiling = ceiling
            self.floor = floor
        }
    }

    private let settings: Settings
    private let rates = Mutex<[String: AIMDRate]>([:])
    private let epoch = ContinuousClock.now

    public init(settings: Settings) {
        self.settings = settings
    }

    private var now: Double {
        let d = ContinuousClock.now - epoch
        return Double(d.components.seconds) + Double(d.components.attoseconds) / 1e18
    }

    /// The target a push counts against: an APNs topic, a provider project, or for
    /// endpoints devices chose (Web Push, simple push, WNS), the endpoint's origin, so
    /// one push service that pushes back slows only the pushes to it.
    public static func target(of push: ProviderPush) -> String {
        switch push.provider {
        case .apns, .apnsVoIP: "\(push.provider.rawValue):\(push.appID ?? "")"
        case .webpush, .simplepush, .wns:
            "\(push.provider.rawValue):\(DeviceToken.endpoint(provider: push.provider, token: push.token)?.origin ?? "")"
        case .fcm, .hms: push.provider.rawValue
        }
    }

    /// Waits for a permit. False, without waiting, when the wait would exceed `maxWait`:
    /// the caller defers the push instead of holding its stream.
    public func acquire(_ target: String, maxWait: Duration) async -> Bool {
        let limit = Double(RetrySchedule.milliseconds(maxWait)) / 1000
        let now = self.now
        let wait = rates.withLock { rates in
            Self.evictIfFull(&rates)
            var rate = rates[target] ?? AIMDRate(ceiling: settings.ceiling, floor: settings.floor, now: now)
            defer { rates[target] = rate }
            return rate.reserve(now: now, maxWait: limit)
        }
        guard let wait else { return false }
        if wait > 0 { try? await Task.sleep(for: .milliseconds(Int64(wait * 1000))) }
        return true
    }

    /// Feeds a provider answer back into the target's rate.
    public func observe(_ target: String, result: SendResult) {
        let now = self.now
        rates.withLock { rates in
            var rate = rates[target] ?? AIMDRate(ceiling: settings.ceiling, floor: settings.floor, now: now)
            switch result {
            case .retry(_, let status, _) where status == 429 || status == 503: rate.throttled(now: now)
            case .sent: rate.succeeded()
            default: break
            }
            rates[target] = rate
        }
    }

    /// Targets come from records (an app id is a target), so the table is bounded: when
    /// it is full, targets running at their ceiling (nothing to remember) are dropped,
    /// and if all are throttled the whole table starts again.
    static let maxTargets = 10_000

    private static func evictIfFull(_ rates: inout [String: AIMDRate]) {
        guard rates.count >= maxTargets else { return }
        rates = rates.filter { $0.value.rate < $0.value.ceiling }
        if rates.count >= maxTargets { rates.removeAll() }
    }

    /// Current rate per target, for metrics and logs.
    func currentRates() -> [String: Double] {
        rates.withLock { $0.mapValues(\.rate) }
    }
}
