import Foundation
import Hummingbird
import IngestCore
import Logging
import NIOCore
import Testing

/// The registration transfer's fetch of a Zulip server's verification URL, over real
/// HTTPS against a server answering as Zulip's `zulip-services/verify` view does.
@Suite struct TransferChallengeFetchTests {
    static let token = "pE3tBQ3P8Gx0Zk4mYw-_7dV2sUuJqKc1aH9nR5oLfXi"

    /// zerver/views/push_notifications.py: the secret for the prepared token, else 400.
    static func zulipServer(_ router: Router<BasicRequestContext>) {
        router.get("/api/v1/zulip-services/verify/:token/") { _, context in
            guard context.parameters.get("token") == token else {
                return Response(
                    status: .badRequest, headers: [.contentType: "application/json"],
                    body: .init(
                        byteBuffer: ByteBuffer(
                            string:
                                #"{"result":"error","msg":"Verification secret not prepared","code":"REMOTE_SERVER_VERIFICATION_SECRET_NOT_PREPARED"}"#
                        )))
            }
            return Response(
                status: .ok, headers: [.contentType: "application/json"],
                body: .init(
                    byteBuffer: ByteBuffer(string: #"{"result":"success","msg":"","verification_secret":"AB12"}"#)))
        }
        router.get("/api/v1/zulip-services/verify/broken/") { _, _ in Response(status: .forbidden) }
    }

    @Test func fetchesTheSecretOverHTTPSAndTellsFailuresApart() async throws {
        try await withFakeServer(routes: Self.zulipServer) { server in
            let host = "localhost:\(server.port)"
            // Generous: a machine busy with the other suites must not time the answers out.
            var settings = RegistrationTransferSettings(allowedHosts: ["localhost"], caFile: server.caFile)
            settings.timeout = .seconds(30)
            let trusted = HTTPTransferChallengeFetcher(settings: settings, logger: Logger(label: "transfer-test"))
            #expect(await trusted.fetch(hostname: host, accessToken: Self.token) == .secret("AB12"))
            #expect(await trusted.fetch(hostname: host, accessToken: "other") == .notPrepared)
            #expect(await trusted.fetch(hostname: host, accessToken: "broken") == .status(403))
            await trusted.shutdown()

            // Not trusted: the fake CA is not a system root.
            let untrusted = HTTPTransferChallengeFetcher(
                settings: RegistrationTransferSettings(allowedHosts: ["localhost"]),
                logger: Logger(label: "transfer-test"))
            #expect(await untrusted.fetch(hostname: host, accessToken: Self.token) == .tls)
            await untrusted.shutdown()

            // A hostname that resolves to loopback is refused unless allowed (as device endpoints are).
            let guarded = HTTPTransferChallengeFetcher(
                settings: RegistrationTransferSettings(caFile: server.caFile),
                logger: Logger(label: "transfer-test"))
            #expect(await guarded.fetch(hostname: host, accessToken: Self.token) == .connection)
            await guarded.shutdown()
        }
    }
}
