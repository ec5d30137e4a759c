import DeviceState
import Foundation
import HTTPTypes
@testable import IngestCore
import PushCrypto
import PushModels
import RedisClient
import Synchronization
import Testing

/// Ingest's leased rate limit and cached keys: the lease book on its own, then two ingest
/// instances on one Redis (a key rotated or a server deactivated through one stops
/// working on the other; the two together never admit more than the limit).
@Suite struct QuotaLeaseTests {
    static let start = ContinuousClock.now

    static func granted(_ count: Int, window: Int64 = 7, credential: String = "k1", deactivated: Bool = false)
        -> ServerStore.QuotaLease
    {
        ServerStore.QuotaLease(granted: count, window: window, credential: credential, deactivated: deactivated)
    }

    @Test func leasesGrowWithUseUpToTheCapAndShrinkWhenIdle() {
        var book = QuotaLeases(limit: 3200)
        #expect(book.maxLease == 100)
        let now = Self.start
        #expect(book.take(server: "s", credential: "k1", verifiedAt: now, window: 7, now: now) == .renew)
        var wants: [Int] = []
        var granted = 0
        for _ in 0..<10 {
            let (want, returning) = book.renewal(server: "s", window: 7)
            #expect(returning == 0, "a lease used up has nothing to give back")
            wants.append(want)
            book.install(server: "s", Self.granted(want), takenAt: now, now: now)
            granted += want
            while book.take(server: "s", credential: "k1", verifiedAt: now, window: 7, now: now) == .admitted {
                granted -= 1
            }
        }
        #expect(wants == [1, 2, 4, 8, 16, 32, 64, 100, 100, 100])
        #expect(granted == 0, "every request granted was taken once")

        // A lease that served 3 of its 100 before it lapsed: the 97 go back, the next asks for 6.
        book.install(server: "s", Self.granted(100), takenAt: now, now: now)
        for _ in 0..<3 {
            #expect(book.take(server: "s", credential: "k1", verifiedAt: now, window: 7, now: now) == .admitted)
        }
        let later = now + .seconds(2)
        #expect(book.take(server: "s", credential: "k1", verifiedAt: now, window: 7, now: later) == .renew)
        let (want, returning) = book.renewal(server: "s", window: 7)
        #expect(want == 6)
        #expect(returning == 97)
        // Emptied: a second renewal gives nothing back twice.
        #expect(book.renewal(server: "s", window: 7).returning == 0)
    }

    @Test func aLeaseThatArrivesLateStillHoldsForItsValidity() {
        var book = QuotaLeases(limit: 3200)
        let now = Self.start
        // Sent 2 s ago (a slow Redis): valid for a second from its arrival all the same.
        book.install(server: "s", Self.granted(1), takenAt: now - .seconds(2), now: now)
        #expect(
            book.take(server: "s", credential: "k1", verifiedAt: now - .seconds(3), window: 7, now: now) == .admitted)
    }

    @Test func leftoversOfAnEarlierWindowAreNotGivenBack() {
        var book = QuotaLeases(limit: 3200)
        book.install(server: "s", Self.granted(50, window: 7), takenAt: Self.start, now: Self.start)
        #expect(book.take(server: "s", credential: "k1", verifiedAt: Self.start, window: 8, now: Self.start) == .renew)
        #expect(book.renewal(server: "s", window: 8).returning == 0)
    }

    @Test func aUsedUpWindowIsLimitedAndAChangedKeyIsToldApartFromAnOlderLease() {
        var book = QuotaLeases(limit: 3)
        #expect(book.maxLease == 1, "small limits stay exact")
        let now = Self.start
        book.install(server: "s", Self.granted(0), takenAt: now, now: now)
        #expect(book.take(server: "s", credential: "k1", verifiedAt: now, window: 7, now: now) == .limited)

        book.install(server: "s", Self.granted(1, credential: "k2"), takenAt: now, now: now)
        // Verified before the lease was taken: the key changed since.
        #expect(
            book.take(server: "s", credential: "k1", verifiedAt: now - .seconds(1), window: 7, now: now)
                == .credentialChanged)
        // Verified after the lease was taken: the lease is the older one; renew it.
        #expect(
            book.take(server: "s", credential: "k1", verifiedAt: now + .milliseconds(1), window: 7, now: now)
                == .renew)
        #expect(book.take(server: "s", credential: "k2", verifiedAt: now, window: 7, now: now) == .admitted)

        book.install(server: "s", Self.granted(1, deactivated: true), takenAt: now, now: now)
        #expect(book.take(server: "s", credential: "k1", verifiedAt: now, window: 7, now: now) == .deactivated)
        book.removeAll()
        #expect(book.take(server: "s", credential: "k1", verifiedAt: now, window: 7, now: now) == .renew)
    }

    /// The lease script on Redis: grants add up to the limit at most, leftovers come back.
    @Test(.disabled(if: TestTier.unitOnly, "on the test stack's Redis"))
    func theSharedCounterNeverGrantsMoreThanTheLimit() async throws {
        let fixture = try await RouterFixture.make(on: .redis)
        let servers = ServerStore(
            redis: try #require(fixture.redis), keys: RedisKeys(prefix: fixture.prefix),
            pepper: try APIKeyPepper(bytes: Array(repeating: 7, count: 32)))
        let server = ServerID(UUID().uuidString.lowercased())
        let nowMs = Wire.nowMillis()
        func lease(_ want: Int, returning: Int = 0) async throws -> Int {
            try await servers.leaseQuota(
                server: server, want: want, returning: returning, limit: 10, windowSeconds: 3600, nowMs: nowMs
            ).granted
        }
        #expect(try await lease(4) == 4)
        #expect(try await lease(4) == 4)
        #expect(try await lease(4) == 2)
        #expect(try await lease(4) == 0)
        #expect(try await lease(4, returning: 3) == 3)
        let unknown = try await servers.leaseQuota(
            server: server, want: 1, returning: 0, limit: 10, windowSeconds: 3600, nowMs: nowMs)
        #expect(unknown.credential == "", "no server record: no stored key")
        #expect(!unknown.deactivated)
    }

    /// Two ingest instances on one Redis, and a server registered through the first that
    /// has used its key on the second.
    func withTwins(_ test: @Sendable (RouterClient, RouterClient, RouterServer) async throws -> Void) async throws {
        let first = try await RouterFixture.make(on: .redis)
        let second = try first.twin()
        try await first.run { one in
            try await second.run { two in
                let server = try await one.registeredServer()
                expectRouterSuccess(
                    try await two.send(.get, Self.statusPath, auth: server.auth), "the key works on the twin")
                try await test(one, two, server)
            }
        }
    }

    static let statusPath = "/api/v1/remotes/server/analytics/status"

    @Test(.disabled(if: TestTier.unitOnly, "on the test stack's Redis"))
    func aKeyRotatedThroughOneInstanceStopsWorkingOnAnother() async throws {
        try await withTwins { one, two, server in
            let path = Self.statusPath
            let newKey = RouterServer().key
            let rotated = try await one.send(
                .post, "/api/v1/remotes/server/register",
                .form([
                    ("zulip_org_id", server.uuid), ("zulip_org_key", server.key), ("hostname", server.hostname),
                    ("contact_email", "admin@\(server.hostname)"), ("new_org_key", newKey),
                ]))
            expectRouterSuccess(rotated, "rotation")
            expectRouterError(
                try await one.send(.get, path, auth: server.auth), 401, "UNAUTHORIZED",
                "the old key where it was rotated")
            try await Task.sleep(for: .milliseconds(1100))
            expectRouterError(
                try await two.send(.get, path, auth: server.auth), 401, "UNAUTHORIZED",
                "the old key on the twin, a lease later")
            expectRouterSuccess(try await two.send(.get, path, auth: (server.uuid, newKey)), "the new key")
        }
    }

    @Test(.disabled(if: TestTier.unitOnly, "on the test stack's Redis"))
    func aServerDeactivatedThroughOneInstanceIsRefusedByAnother() async throws {
        try await withTwins { one, two, server in
            expectRouterSuccess(
                try await one.send(.post, "/api/v1/remotes/server/deactivate", auth: server.auth), "deactivate")
            try await Task.sleep(for: .milliseconds(1100))
            let refused = try await two.send(.get, Self.statusPath, auth: server.auth)
            #expect(refused.status == 401, "\(refused.text)")
            #expect(refused.json["msg"]?.stringValue?.contains("deactivated") == true, "\(refused.text)")
        }
    }

    @Test(.disabled(if: TestTier.unitOnly, "on the test stack's Redis"))
    func twoInstancesTogetherAdmitTheLimitAndNoMore() async throws {
        let first = try await RouterFixture.make(
            ["pushrelay.ratelimit.requests": "96", "pushrelay.ratelimit.window.seconds": "86400"], on: .redis)
        let second = try first.twin()
        let windowBefore = WindowCounter.window(nowMs: Wire.nowMillis(), seconds: 86400)
        let counts = Mutex((admitted: 0, limited: 0))
        try await first.run { one in
            try await second.run { two in
                let server = try await one.registeredServer()
                for index in 0..<160 {
                    let reply = try await (index.isMultiple(of: 2) ? one : two).send(
                        .get, "/api/v1/remotes/server/analytics/status", auth: server.auth)
                    counts.withLock {
                        if reply.status == 200 {
                            $0.admitted += 1
                        } else if reply.code == "RATE_LIMIT_HIT" {
                            $0.limited += 1
                        }
                    }
                }
            }
        }
        let (admitted, limited) = counts.withLock { $0 }
        #expect(admitted + limited == 160)
        #expect(admitted <= 96)
        if WindowCounter.window(nowMs: Wire.nowMillis(), seconds: 86400) == windowBefore {
            // Leases of up to 3 (96 / 32): what one instance holds unused it serves on its next
            // request, or gives back when it renews.
            #expect(admitted == 96)
        }
    }
}
