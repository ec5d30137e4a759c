import PushModels
import Testing

@testable import Providers

/// Adaptive rate limiting: throttling halves a target's rate, success recovers it, and
/// one target's trouble never slows another.
@Suite struct AdaptiveRateTests {
    @Test func throttlingHalvesOncePerCooldownAndNotBelowTheFloor() {
        var rate = AIMDRate(ceiling: 1000, floor: 10, cooldown: 1, now: 0)
        rate.throttled(now: 0)
        #expect(rate.rate == 500)
        // A burst of 429s answering requests already in flight is one signal.
        rate.throttled(now: 0.2)
        rate.throttled(now: 0.9)
        #expect(rate.rate == 500)
        for second in 1...10 { rate.throttled(now: Double(second)) }
        #expect(rate.rate == 10)
    }

    @Test func successesRecoverGraduallyUpToTheCeiling() {
        var rate = AIMDRate(ceiling: 1000, floor: 1, increase: 1, cooldown: 1, now: 0)
        for second in 0..<10 { rate.throttled(now: Double(second)) }
        #expect(rate.rate == 1)
        rate.succeeded()
        #expect(rate.rate > 1 && rate.rate < 3, "one success is a small step")
        var steps = 1
        while rate.rate < 1000 && steps < 10_000 {
            rate.succeeded()
            steps += 1
        }
        #expect(rate.rate == 1000)
        #expect(steps > 100, "recovery is gradual, not a jump back")
    }

    @Test func reservationsPaceAtTheRateAndRefuseLongWaits() {
        var rate = AIMDRate(ceiling: 10, floor: 1, now: 0)
        // The bucket holds one permit; then one every 0.1 s.
        #expect(rate.reserve(now: 0, maxWait: 0) == 0)
        #expect(rate.reserve(now: 0, maxWait: 0) == nil, "no permit and no wait allowed")
        let wait = rate.reserve(now: 0, maxWait: 1)
        #expect(wait.map { abs($0 - 0.1) < 1e-9 } == true)
        let next = rate.reserve(now: 0, maxWait: 1)
        #expect(next.map { abs($0 - 0.2) < 1e-9 } == true, "waits queue up behind each other")
        #expect(rate.reserve(now: 0, maxWait: 0.25) == nil)
        #expect(rate.reserve(now: 1, maxWait: 0) == 0, "a second later there are permits again")
    }

    @Test func oneTargetsThrottlingLeavesOthersAlone() async {
        let limiter = AdaptiveRateLimiter(settings: .init(ceiling: 100, floor: 1))
        for _ in 0..<3 {
            limiter.observe(
                "apns:org.zulip.Zulip",
                result: .retry(reason: .apns(.known(.tooManyRequests)), status: 429, retryAfter: nil))
        }
        limiter.observe("fcm", result: .sent(status: 200, providerMessageID: nil))
        // A 500 or a dead token is not a request to slow down.
        limiter.observe(
            "apns:other", result: .retry(reason: .apns(.known(.internalServerError)), status: 500, retryAfter: nil))
        limiter.observe(
            "apns:other", result: .invalidToken(reason: .apns(.known(.unregistered)), status: 410, timestampMs: nil))
        let rates = limiter.currentRates()
        #expect(rates["apns:org.zulip.Zulip"] == 50)
        #expect(rates["fcm"] == 100)
        #expect(rates["apns:other"] == 100)
        #expect(await limiter.acquire("fcm", maxWait: .zero))
    }

    @Test func targetsAreTheAPNsTopicOrTheProvider() {
        let apns = ProviderPush(
            provider: .apns, token: "t", appID: "org.zulip.Zulip", delivery: DeliveryClass(.message),
            body: Array("{}".utf8), notificationID: "n", deviceID: 1)
        var fcm = apns
        fcm.provider = .fcm
        fcm.appID = nil
        #expect(AdaptiveRateLimiter.target(of: apns) == "apns:org.zulip.Zulip")
        #expect(AdaptiveRateLimiter.target(of: fcm) == "fcm")
    }
}
