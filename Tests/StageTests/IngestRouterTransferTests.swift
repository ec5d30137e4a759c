import DeviceState
import Foundation
import HTTPTypes
import IngestCore
import PushCrypto
import PushModels
import Synchronization
import Testing

/// Zulip's registration transfer (`manage.py register_server --registration-transfer`),
/// replayed as Zulip's server code sends it: form posts without credentials, the
/// bouncer's fetch of the server's verification URL (a stand-in here, which answers as
/// the Zulip server would), and Zulip's answers and messages.
@Suite struct IngestRouterTransferTests {
    /// Answers the relay's fetch as a Zulip server does: the secret it was given, kept for
    /// one access token, or whatever a test sets.
    final class ZulipServerStandIn: TransferChallengeFetcher {
        struct State {
            var secret: String?
            var token: String?
            var answer: TransferChallengeAnswer?
            var fetched: [(hostname: String, token: String)] = []
        }
        let state = Mutex(State())

        func prepare(secret: String, token: String) {
            state.withLock {
                $0.secret = secret; $0.token = token
            }
        }
        func answer(_ answer: TransferChallengeAnswer?) { state.withLock { $0.answer = answer } }
        var fetched: [(hostname: String, token: String)] { state.withLock { $0.fetched } }

        func fetch(hostname: String, accessToken: String) async -> TransferChallengeAnswer {
            state.withLock { state in
                state.fetched.append((hostname, accessToken))
                if let answer = state.answer { return answer }
                // zerver/views/push_notifications.py: the secret only for the token it was prepared with.
                guard let secret = state.secret, state.token == accessToken else { return .notPrepared }
                return .secret(secret)
            }
        }

        func shutdown() async {}
    }

    static let accessToken = "pE3tBQ3P8Gx0Zk4mYw-_7dV2sUuJqKc1aH9nR5oLfXi"

    func transfer(_ client: RouterClient, hostname: String) async throws -> RouterReply {
        try await client.send(.post, "/api/v1/remotes/server/register/transfer", .form([("hostname", hostname)]))
    }

    func verify(_ client: RouterClient, hostname: String, token: String = accessToken) async throws -> RouterReply {
        try await client.send(
            .post, "/api/v1/remotes/server/register/verify_challenge",
            .form([("hostname", hostname), ("access_token", token)]))
    }

    @Test(arguments: RouterFixture.Backend.available)
    func aServerThatProvesItsHostnameGetsANewKey(backend: RouterFixture.Backend) async throws {
        let zulip = ZulipServerStandIn()
        let fixture = try await RouterFixture.make(on: backend, transferFetcher: zulip)
        try await fixture.run { client in
            let server = try await client.registeredServer()
            let begun = try await transfer(client, hostname: server.hostname)
            #expect(begun.status == 200 && begun.json["result"] == "success", "\(begun.text)")
            let secret = try #require(begun.json["verification_secret"]?.stringValue)
            zulip.prepare(secret: secret, token: Self.accessToken)

            let verified = try await verify(client, hostname: server.hostname)
            #expect(verified.status == 200, "\(verified.text)")
            #expect(verified.json["zulip_org_id"] == .string(server.uuid), "the uuid stays")
            let newKey = try #require(verified.json["zulip_org_key"]?.stringValue)
            #expect(newKey.count == 64 && newKey != server.key && Syntax.isAPIKey(newKey))
            #expect(
                zulip.fetched.map(\.hostname) == [server.hostname] && zulip.fetched.map(\.token) == [Self.accessToken])

            // The old key stops working; the new one works, and register_server's next calls pass.
            let old = try await client.send(.get, "/api/v1/remotes/server/analytics/status", auth: server.auth)
            #expect(old.status == 401, "\(old.text)")
            let status = try await client.send(
                .get, "/api/v1/remotes/server/analytics/status", auth: (server.uuid, newKey))
            #expect(status.status == 200, "\(status.text)")
            let again = try await client.send(
                .post, "/api/v1/remotes/server/register",
                .form([
                    ("zulip_org_id", server.uuid), ("zulip_org_key", newKey), ("hostname", server.hostname),
                    ("contact_email", "admin@\(server.hostname)"),
                ]))
            #expect(again.status == 200 && again.json["created"] == false, "\(again.text)")
        }
    }

    @Test func zulipsAnswersWhenATransferCannotBe() async throws {
        let zulip = ZulipServerStandIn()
        let fixture = try await RouterFixture.make(transferFetcher: zulip)
        try await fixture.run { client in
            let server = try await client.registeredServer()
            func expectError(_ reply: RouterReply, _ status: Int, _ message: String, code: String = "BAD_REQUEST") {
                #expect(reply.status == status, "\(message): \(reply.status) \(reply.text)")
                #expect(reply.json["result"] == "error" && reply.json["msg"] == .string(message), "\(reply.text)")
                #expect(reply.json["code"] == .string(code), "\(reply.text)")
            }
            expectError(
                try await transfer(client, hostname: "unregistered.example.com"), 400,
                "unregistered.example.com not yet registered")
            expectError(
                try await transfer(client, hostname: "example.com/path"), 400,
                "example.com/path contains invalid components (e.g., path, query, fragment).")
            expectError(try await transfer(client, hostname: "bad host"), 400, "bad host is not a valid hostname")
            let missing = try await client.send(.post, "/api/v1/remotes/server/register/transfer", .form([]))
            #expect(missing.status == 400 && missing.json["field"] == "hostname", "\(missing.text)")

            expectError(
                try await verify(client, hostname: "unregistered.example.com"), 400,
                "Registration not found for this hostname")
            // Nothing prepared on the server (or another token): Zulip's own code for it.
            expectError(
                try await verify(client, hostname: server.hostname), 400,
                "The host reported it has no verification secret.")
            zulip.answer(.status(403))
            expectError(
                try await verify(client, hostname: server.hostname), 400, "Error response received from the host: 403")
            zulip.answer(.tls)
            expectError(
                try await verify(client, hostname: server.hostname), 400,
                "SSL error occurred while communicating with the host.")
            zulip.answer(.timeout)
            expectError(
                try await verify(client, hostname: server.hostname), 400,
                "The request timed out while communicating with the host.")
            // Secrets that are not this relay's, not fresh, or not for this hostname.
            zulip.answer(.secret("not hex"))
            expectError(
                try await verify(client, hostname: server.hostname), 400, "The verification secret is malformed")
            let now = Int64(Date().timeIntervalSince1970)
            func signed(_ host: String, _ at: Int64, pepper: APIKeyPepper) -> String {
                let text = "\(host):\(at):\(pepper.hmacHex("zulip-registration-transfer:\(host):\(at)"))"
                return text.utf8.map { String(format: "%02X", $0) }.joined()
            }
            let otherPepper = try APIKeyPepper(fileContents: APIKeyPepper.generateLine())
            zulip.answer(.secret(signed(server.hostname, now, pepper: otherPepper)))
            expectError(try await verify(client, hostname: server.hostname), 400, "The verification secret is invalid")
            zulip.answer(.secret(signed(server.hostname, now - 11, pepper: fixture.configuration.pepper)))
            expectError(try await verify(client, hostname: server.hostname), 400, "The verification secret has expired")
            let other = try await client.registeredServer()
            zulip.answer(.secret(signed(other.hostname, now, pepper: fixture.configuration.pepper)))
            expectError(
                try await verify(client, hostname: server.hostname), 400,
                "The verification secret is for a different hostname")
            expectError(
                try await verify(client, hostname: server.hostname, token: "../../admin"), 400,
                "access_token: must be URL-safe base64")
            // Every failure left the key as it was.
            let status = try await client.send(.get, "/api/v1/remotes/server/analytics/status", auth: server.auth)
            #expect(status.status == 200, "\(status.text)")
        }
    }

    @Test func verificationsAreLimitedPerDayForEveryone() async throws {
        let zulip = ZulipServerStandIn()
        let fixture = try await RouterFixture.make(
            ["pushrelay.zulip.transfer.verifications.per.day": "2"], transferFetcher: zulip)
        try await fixture.run { client in
            let server = try await client.registeredServer()
            for _ in 0..<2 { #expect(try await verify(client, hostname: server.hostname).status == 400) }
            let limited = try await verify(client, hostname: "anyone.example.com")
            #expect(limited.status == 429 && limited.json["code"] == "RATE_LIMIT_HIT", "\(limited.text)")
            #expect(zulip.fetched.count == 2, "no fetch once the limit is reached")
        }
    }

    @Test(arguments: RouterFixture.Backend.available)
    func aTransferMovesTheRegistrationThatClaimedTheHostnameFirst(backend: RouterFixture.Backend) async throws {
        let zulip = ZulipServerStandIn()
        let fixture = try await RouterFixture.make(on: backend, transferFetcher: zulip)
        try await fixture.run { client in
            let first = try await client.registeredServer()
            // A second server with the same hostname is taken (the relay never refused it),
            // but it does not take the hostname: a transfer moves the first one.
            let second = RouterServer()
            let reply = try await client.send(
                .post, "/api/v1/remotes/server/register",
                .form([
                    ("zulip_org_id", second.uuid), ("zulip_org_key", second.key), ("hostname", first.hostname),
                    ("contact_email", "admin@\(first.hostname)"),
                ]))
            #expect(reply.status == 200, "\(reply.text)")
            let begun = try await transfer(client, hostname: first.hostname)
            zulip.prepare(secret: try #require(begun.json["verification_secret"]?.stringValue), token: Self.accessToken)
            let verified = try await verify(client, hostname: first.hostname)
            #expect(verified.json["zulip_org_id"] == .string(first.uuid), "\(verified.text)")
        }
    }
}
