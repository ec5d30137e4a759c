import DeviceState
import Foundation
import HTTPTypes
@testable import IngestCore
import PushCrypto
import PushModels
import RedisClient
import Synchronization
import Testing

@testable import StageTestSupport

/// Two ingest instances on one Redis, the test stack's: the lease script never grants
/// more than the limit, and a key rotated or a server deactivated through one stops working
/// on the other. The lease book on its own is in `StageTests` (`QuotaLeaseTests`).
@Suite struct QuotaLeaseRedisTests {
    /// The lease script on Redis: grants add up to the limit at most, leftovers come back.
    @Test
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

    @Test
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

    @Test
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

    @Test
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
