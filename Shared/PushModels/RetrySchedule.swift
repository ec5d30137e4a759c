import Foundation

/// Where a retryable push goes next: which retry topic, and not before when.
///
/// Stage `n` (1-based) waits `delays[n-1]`; a push that already waited in the last
/// stage keeps using it. The provider's `Retry-After` is a floor: the push goes to the
/// first stage whose delay covers it, and is due no earlier than it asks. Jitter
/// (±`jitter` of the delay) spreads a burst of failures so they do not return together.
public struct RetrySchedule: Sendable, Equatable {
    public var delays: [Duration]
    /// Retryable attempts before the push is dead-lettered.
    public var maxAttempts: Int
    /// Fraction of the delay used as ± jitter.
    public var jitter: Double

    public init(delays: [Duration], maxAttempts: Int, jitter: Double = 0.2) {
        self.delays = delays.isEmpty ? [.seconds(5)] : delays
        self.maxAttempts = max(1, maxAttempts)
        self.jitter = min(max(jitter, 0), 0.9)
    }

    public static let standard = RetrySchedule(delays: [.seconds(5), .seconds(60), .seconds(600)], maxAttempts: 6)

    public struct Plan: Sendable, Equatable {
        /// 1-based retry stage (topic `push.retry.<stage>`).
        public var stage: Int
        public var dueAtMs: Int64
    }

    /// The plan after attempt number `attempt` (1-based) failed at `nowMs`. `random` is in 0...1.
    public func plan(afterAttempt attempt: Int, retryAfter: Duration?, nowMs: Int64, random: Double) -> Plan {
        var stage = min(max(attempt, 1), delays.count)
        // A provider's Retry-After is outside input: past a day it is read as a day.
        let retryAfter = retryAfter.map { min(max($0, .zero), Self.longestRetryAfter) }
        if let retryAfter {
            while stage < delays.count && delays[stage - 1] < retryAfter { stage += 1 }
        }
        let base = Self.milliseconds(delays[stage - 1])
        let spread = Double(base) * jitter * (random * 2 - 1)
        var wait = max(0, Int64(exactly: (Double(base) + spread).rounded()) ?? base)
        if let retryAfter { wait = max(wait, Self.milliseconds(retryAfter)) }
        return Plan(stage: stage, dueAtMs: nowMs.saturatingAdd(wait))
    }

    /// The longest a push can spend in retries: every stage's delay, plus jitter.
    public var horizon: Duration {
        var total = Duration.zero
        for attempt in 1...maxAttempts { total += delays[min(attempt, delays.count) - 1] }
        return total * (1 + jitter)
    }

    /// The longest `Retry-After` honoured; a provider asking for more gets a day.
    public static let longestRetryAfter = Duration.seconds(86_400)

    public static func milliseconds(_ d: Duration) -> Int64 { d.saturatingMilliseconds }

    /// Parses a delay list such as `5s,1m,10m` (units ms, s, m, h).
    public static func parseDelays(_ text: String) throws -> [Duration] {
        let parts = text.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
        guard !parts.isEmpty else { throw RetryScheduleError(text: text) }
        return try parts.map { part in
            let units: [(String, Int64)] = [("ms", 1), ("s", 1000), ("m", 60_000), ("h", 3_600_000)]
            for (suffix, factor) in units where part.hasSuffix(suffix) {
                // At most 7 days per stage; longer waits outlive the send ledger's markers.
                if let n = Int64(part.dropLast(suffix.count)), n > 0, n <= 7 * 86_400_000 / factor {
                    return .milliseconds(n * factor)
                }
            }
            throw RetryScheduleError(text: text)
        }
    }
}

public struct RetryScheduleError: Error, CustomStringConvertible {
    public var text: String
    public var description: String {
        "cannot read retry delays \"\(text)\": expected a list like 5s,1m,10m (each 1 ms to 7 days)"
    }
}
