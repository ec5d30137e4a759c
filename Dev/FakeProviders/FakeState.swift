import Foundation
import PushModels
import Synchronization

/// One request a fake provider accepted or refused, as tests and the demo read it.
public struct ReceivedPush: Sendable, Codable, Equatable {
    public var provider: String
    public var token: String
    /// The request headers that matter (APNs `apns-*`, or FCM's `android` options).
    public var headers: [String: String]
    public var body: JSONValue
    public var status: Int
    public var reason: String?
    /// "2" for HTTP/2 (`:scheme` pseudo-header present), "1.1" otherwise.
    public var httpVersion: String
    public var receivedAtMs: Int64

    enum CodingKeys: String, CodingKey {
        case provider, token, headers, body, status, reason
        case httpVersion = "http_version"
        case receivedAtMs = "received_at_ms"
    }
}

/// A failure the fake answers instead of success, `count` times.
public struct InjectedFailure: Sendable, Codable, Equatable {
    public var status: Int
    /// APNs reason or FCM error code.
    public var reason: String
    public var retryAfterSeconds: Int?
    public var count: Int
    /// A window instead of a count: every request fails (or, with `delay_ms`, waits) for
    /// this many seconds from the injection (a brownout, a slow provider).
    public var seconds: Int?
    /// With status 200: answered as usual, after this long.
    public var delayMs: Int?
    /// When the window closes (set at injection).
    var until: Date?

    enum CodingKeys: String, CodingKey {
        case status, reason, count, seconds
        case retryAfterSeconds = "retry_after"
        case delayMs = "delay_ms"
    }

    public init(
        status: Int, reason: String, retryAfterSeconds: Int? = nil, count: Int = 1, seconds: Int? = nil,
        delayMs: Int? = nil
    ) {
        self.status = status
        self.reason = reason
        self.retryAfterSeconds = retryAfterSeconds
        self.count = count
        self.seconds = seconds
        self.delayMs = delayMs
    }
}

/// What the fakes know: recorded pushes, dead tokens, injected failures, issued
/// OAuth tokens. Shared by the provider endpoints and the control API.
public final class FakeState: Sendable {
    struct State {
        var received: [ReceivedPush] = []
        /// Answers per provider and status, never trimmed.
        var counts: [String: [Int: Int]] = [:]
        var unregisteredAPNs: [String: Int64] = [:]
        var unregisteredFCM: Set<String> = []
        var injected: [String: [InjectedFailure]] = [:]
        var delays: [String: InjectedFailure] = [:]
        var accessTokens: [String: Date] = [:]
        var verifiedAPNsTokens: [String: Date] = [:]
        var goAways = 0
        var dropped = 0
    }

    private let state = Mutex(State())
    /// How many recent pushes to keep for the control API (0: all). Load runs keep few,
    /// so the fake's memory stays flat; counts are kept regardless.
    let maxRecorded: Int

    public init(maxRecorded: Int = 0) {
        self.maxRecorded = max(0, maxRecorded)
    }

    func record(_ push: ReceivedPush) {
        state.withLock { s in
            s.counts[push.provider, default: [:]][push.status, default: 0] += 1
            s.received.append(push)
            if maxRecorded > 0 && s.received.count > maxRecorded * 2 {
                s.received.removeFirst(s.received.count - maxRecorded)
            }
        }
    }

    /// Answers so far: provider → HTTP status → count.
    /// Answers per provider and status, and `"connections": ["goaway": n]`: the GOAWAYs
    /// sent to retire connections (`PUSHRELAY_FAKES_GOAWAY_EVERY`) and the streams above
    /// their last-stream-id that were dropped unprocessed.
    public func counts() -> [String: [String: Int]] {
        state.withLock { s in
            var counts = s.counts.mapValues { byStatus in
                Dictionary(uniqueKeysWithValues: byStatus.map { ("\($0.key)", $0.value) })
            }
            counts["connections"] = ["goaway": s.goAways, "dropped_after_goaway": s.dropped]
            return counts
        }
    }

    func countGoAway() {
        state.withLock { $0.goAways += 1 }
    }

    func countRefused() {
        state.withLock { $0.dropped += 1 }
    }

    public func received(provider: String? = nil) -> [ReceivedPush] {
        state.withLock { s in provider.map { p in s.received.filter { $0.provider == p } } ?? s.received }
    }

    public func markUnregistered(provider: String, token: String, timestampMs: Int64) {
        state.withLock { s in
            if provider == "apns" {
                s.unregisteredAPNs[token.lowercased()] = timestampMs
            } else {
                s.unregisteredFCM.insert(token)
            }
        }
    }

    func apnsUnregistered(_ token: String) -> Int64? { state.withLock { $0.unregisteredAPNs[token] } }
    func fcmUnregistered(_ token: String) -> Bool { state.withLock { $0.unregisteredFCM.contains(token) } }

    public func inject(provider: String, _ failure: InjectedFailure) {
        var failure = failure
        if let seconds = failure.seconds { failure.until = Date().addingTimeInterval(TimeInterval(max(0, seconds))) }
        state.withLock { state in
            if failure.delayMs != nil, failure.status == 200 {
                state.delays[provider] = failure
            } else {
                state.injected[provider, default: []].append(failure)
            }
        }
    }

    /// Takes one injected failure for `provider`, if any is queued: a window's until it
    /// closes, a count's once per request.
    func nextInjected(provider: String) -> InjectedFailure? {
        state.withLock { s in
            let now = Date()
            while var queue = s.injected[provider], let first = queue.first {
                if let until = first.until {
                    if until > now { return first }
                    queue.removeFirst()
                    s.injected[provider] = queue
                    continue
                }
                var taken = first
                taken.count -= 1
                if taken.count <= 0 { queue.removeFirst() } else { queue[0] = taken }
                s.injected[provider] = queue
                return first
            }
            return nil
        }
    }

    /// How long to hold an answer, while a slow window is open.
    func delay(provider: String) -> Duration? {
        state.withLock { s in
            guard let slow = s.delays[provider], let until = slow.until, until > Date(), let ms = slow.delayMs else {
                return nil
            }
            return .milliseconds(ms)
        }
    }

    func issueAccessToken(validFor seconds: TimeInterval) -> String {
        let token = "ya29.fake-" + UUID().uuidString.lowercased()
        state.withLock { $0.accessTokens[token] = Date().addingTimeInterval(seconds) }
        return token
    }

    func accessTokenValid(_ token: String) -> Bool {
        state.withLock { s in (s.accessTokens[token].map { $0 > Date() }) ?? false }
    }

    /// Caches a verified APNs provider token with its issue time, as APNs does.
    func verifiedAPNsToken(_ token: String) -> Date? { state.withLock { $0.verifiedAPNsTokens[token] } }
    func rememberAPNsToken(_ token: String, issuedAt: Date) {
        state.withLock { $0.verifiedAPNsTokens[token] = issuedAt }
    }

    public func reset() {
        state.withLock { s in
            s.received = []
            s.counts = [:]
            s.unregisteredAPNs = [:]
            s.unregisteredFCM = []
            s.injected = [:]
            s.delays = [:]
        }
    }
}
