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
/// Zulip's registration transfer as the router tests replay it, on either backend: the
/// stand-in for the Zulip server the relay fetches from, the two calls, and the scenarios
/// `StageTests` runs in memory and `StageIntegrationTests` on Redis.
struct TransferScenarios {
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

    func aServerThatProvesItsHostnameGetsANewKey(on backend: RouterFixture.Backend) async throws {
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

    func aTransferMovesTheRegistrationThatClaimedTheHostnameFirst(on backend: RouterFixture.Backend) async throws {
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
