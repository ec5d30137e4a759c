import DeviceState
import Foundation
import HTTPTypes
import IngestCore
import PushCrypto
import PushModels
import Synchronization
import Testing
@testable import StageTestSupport

/// Zulip's registration transfer (`manage.py register_server --registration-transfer`),
/// replayed as Zulip's server code sends it: form posts without credentials, the
/// bouncer's fetch of the server's verification URL (a stand-in here, which answers as
/// the Zulip server would), and Zulip's answers and messages.
@Suite struct IngestRouterTransferTests {
    typealias ZulipServerStandIn = TransferScenarios.ZulipServerStandIn
    static let accessToken = TransferScenarios.accessToken
    let scenarios = TransferScenarios()

    func transfer(_ client: RouterClient, hostname: String) async throws -> RouterReply {
        try await scenarios.transfer(client, hostname: hostname)
    }

    func verify(_ client: RouterClient, hostname: String, token: String = accessToken) async throws -> RouterReply {
        try await scenarios.verify(client, hostname: hostname, token: token)
    }

    @Test func aServerThatProvesItsHostnameGetsANewKey() async throws {
        try await scenarios.aServerThatProvesItsHostnameGetsANewKey(on: .memory)
    }

    @Test func aTransferMovesTheRegistrationThatClaimedTheHostnameFirst() async throws {
        try await scenarios.aTransferMovesTheRegistrationThatClaimedTheHostnameFirst(on: .memory)
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
}
