import AsyncHTTPClient
import FakeProviders
import Foundation
import HTTPTypes
import Hummingbird
import Logging
import PushModels
import Synchronization
import Testing

@testable import Providers

/// Hands out one client that trusts the fakes' CA, and notes every endpoint asked for.
final class TrustingEndpoints: EndpointClientSource {
    let http: HTTPClient
    let refusal: EndpointRefusal?
    private let asked = Mutex<[String]>([])

    init(caFile: String, refusal: EndpointRefusal? = nil) throws {
        self.http = try makeHTTPClient(caFile: caFile, connectTimeout: .seconds(5))
        self.refusal = refusal
    }

    var endpointsAsked: [String] { asked.withLock { $0 } }

    func client(for endpoint: PushEndpoint) async -> Result<HTTPClient, EndpointRefusal> {
        asked.withLock { $0.append(endpoint.url) }
        if let refusal { return .failure(refusal) }
        return .success(http)
    }

    func shutdown() async { try? await http.shutdown() }
}

/// The WNS client against the fake WNS (docs: WNSClient.swift).
@Suite struct WNSClientTests {
    static let clientID = "ms-app://s-1-15-2-2972962901-2322836549-3722629029-1345238579"
    /// A secret with characters form encoding must escape.
    static let secret = "Vex8L9WOFZuj95euaLrvSH7X+o/D=hLJc7&"
    let logger = Logger(label: "test")

    func withWNS(
        secret: String = WNSClientTests.secret, refusal: EndpointRefusal? = nil,
        _ body: (WNSClient, FakeState, FakeProviderServer, TrustingEndpoints) async throws -> Void
    ) async throws {
        let state = FakeState()
        let fake = FakeWNS(state: state, clientID: Self.clientID, clientSecret: Self.secret)
        try await withFakeServer(routes: fake.addRoutes) { server in
            try await withClient(server, secret: secret, refusal: refusal) { client, endpoints in
                try await body(client, state, server, endpoints)
            }
        }
    }

    func withClient(
        _ server: FakeProviderServer, secret: String = WNSClientTests.secret, refusal: EndpointRefusal? = nil,
        allowed: [String] = ["localhost"], _ body: (WNSClient, TrustingEndpoints) async throws -> Void
    ) async throws {
        let endpoints = try TrustingEndpoints(caFile: server.caFile, refusal: refusal)
        let client = try WNSClient(
            configuration: try WNSConfiguration(
                tokenURL: "\(server.baseURL)/accesstoken.srf", clientID: Self.clientID, clientSecret: secret,
                allowedHostSuffixes: allowed, caFile: server.caFile, requestTimeout: .seconds(10)),
            endpoints: endpoints, logger: logger)
        do {
            try await body(client, endpoints)
        } catch {
            await client.shutdown()
            await endpoints.shutdown()
            throw error
        }
        await client.shutdown()
        await endpoints.shutdown()
    }

    func channel(_ server: FakeProviderServer, _ name: String = "AwYAAADl3") -> String {
        "\(server.baseURL)/w/?token=\(name)"
    }

    @Test func aRawNotificationReachesTheChannel() async throws {
        try await withWNS { client, state, server, _ in
            let uri = channel(server)
            let push = providerPush(.wns, token: uri, expiresAt: nowSeconds() + 600)
            let result = await client.send(push)
            guard case .sent(200, let messageID?) = result else {
                Issue.record("expected sent with X-WNS-Msg-ID, got \(result)")
                return
            }
            #expect(messageID.count == 16)
            let received = state.received(provider: "wns")
            #expect(received.count == 1)
            #expect(received.first?.token == uri, "the channel URI the request went to")
            #expect(received.first?.headers["x-wns-type"] == "wns/raw")
            #expect(received.first?.headers["content-type"] == "application/octet-stream")
            #expect(received.first?.headers["x-wns-cache-policy"] == "cache")
            #expect((590...600).contains(Int(received.first?.headers["x-wns-ttl"] ?? "") ?? 0))
            let sentBody = try Wire.decode(JSONValue.self, from: push.body)
            #expect(received.first?.body == sentBody)
        }
    }

    @Test func oneAccessTokenServesManySends() async throws {
        try await withWNS { client, state, server, _ in
            let uri = channel(server)
            let results = await withTaskGroup(of: SendResult.self) { group in
                for _ in 0..<6 { group.addTask { await client.send(providerPush(.wns, token: uri)) } }
                return await group.reduce(into: []) { $0.append($1) }
            }
            for _ in 0..<3 { _ = await client.send(providerPush(.wns, token: uri)) }
            #expect(results.allSatisfy { if case .sent = $0 { true } else { false } }, "\(results)")
            #expect(server.requests.count("/accesstoken.srf") == 1)
            #expect(state.received(provider: "wns").count == 9)
        }
    }

    @Test func expiredAndUnknownChannelsAreReportedDead() async throws {
        try await withWNS { client, state, server, _ in
            let uri = channel(server, "expired")
            state.markUnregistered(provider: "wns", token: uri, timestampMs: 0)
            #expect(
                await client.send(providerPush(.wns, token: uri))
                    == .invalidToken(
                        reason: .wns(.errorDescription("The channel expired")), status: 410, timestampMs: nil))
            #expect(
                await client.send(providerPush(.wns, token: "\(server.baseURL)/w/no-token"))
                    == .invalidToken(
                        reason: .wns(.errorDescription("The channel URI is not valid")), status: 404, timestampMs: nil))
        }
    }

    @Test func throttlingIsRetriedNoSoonerThanWNSSays() async throws {
        try await withWNS { client, state, server, _ in
            state.inject(provider: "wns", try injected(status: 503, reason: "Service Unavailable", retryAfter: 9))
            #expect(
                await client.send(providerPush(.wns, token: channel(server)))
                    == .retry(
                        reason: .wns(.errorDescription("Service Unavailable")), status: 503, retryAfter: .seconds(9)))
            guard case .sent = await client.send(providerPush(.wns, token: channel(server))) else {
                Issue.record("the next send goes through")
                return
            }
        }
    }

    @Test func payloadsOverWNSsLimitAreRefusedBeforeSending() async throws {
        try await withWNS { client, state, server, endpoints in
            let big = providerPush(.wns, token: channel(server), body: .string(String(repeating: "x", count: 4999)))
            #expect(big.body.count == 5001)
            #expect(await client.send(big) == .failed(reason: .relay(.payloadTooLarge), status: nil))
            #expect(state.received(provider: "wns").isEmpty)
            #expect(endpoints.endpointsAsked.isEmpty)
        }
    }

    @Test func wrongCredentialsAreRetriedWithoutSending() async throws {
        try await withWNS(secret: "wrong") { client, state, server, endpoints in
            #expect(
                await client.send(providerPush(.wns, token: channel(server)))
                    == .retry(reason: .relay(.oauthUnavailable), status: nil, retryAfter: .seconds(5)))
            #expect(state.received(provider: "wns").isEmpty)
            #expect(endpoints.endpointsAsked.isEmpty)
        }
    }

    @Test func onlyWNSHostsSeeTheAccessToken() async throws {
        let configuration = try WNSConfiguration(clientID: "id", clientSecret: "secret")
        for host in ["notify.windows.com", "db5p.notify.windows.com", "wns2-by3p.notify.windows.com"] {
            #expect(configuration.allows(host: host), "\(host)")
        }
        for host in ["evil.com", "notify.windows.com.evil.com", "evilnotify.windows.com", "windows.com", "com"] {
            #expect(!configuration.allows(host: host), "\(host)")
        }
        try await withWNS { _, state, server, endpoints in
            try await withClient(server, allowed: ["notify.windows.com"]) { client, endpoints in
                for uri in [
                    "https://evil.com/w/?token=x", "https://notify.windows.com.evil.com/w/?token=x",
                    "http://db5p.notify.windows.com/w/?token=x", "not a url",
                ] {
                    #expect(
                        await client.send(providerPush(.wns, token: uri))
                            == .failed(reason: .relay(.endpointRefused), status: nil), "\(uri)")
                }
                #expect(endpoints.endpointsAsked.isEmpty)
            }
            #expect(server.requests.count("/accesstoken.srf") == 0, "no token was fetched for them")
            #expect(state.received(provider: "wns").isEmpty)
            #expect(endpoints.endpointsAsked.isEmpty)
        }
    }

    @Test func anEndpointTheSourceRefusesIsNotCalled() async throws {
        try await withWNS(refusal: EndpointRefusal(.endpointUnresolvable, "no such host")) {
            client, state, server, _ in
            #expect(
                await client.send(providerPush(.wns, token: channel(server)))
                    == .retry(reason: .relay(.endpointUnresolvable), status: nil, retryAfter: .seconds(60)))
            #expect(state.received(provider: "wns").isEmpty)
        }
    }

    @Test func theFakeRefusesWhatWNSRefuses() async throws {
        let fake = FakeWNS(state: FakeState(), clientID: Self.clientID, clientSecret: Self.secret)
        try await withFakeServer(routes: fake.addRoutes) { server in
            try await withRawClient(server) { http in
                func grant(scope: String) async throws -> RawAnswer {
                    try await post(
                        http, "\(server.baseURL)/accesstoken.srf",
                        headers: ["content-type": "application/x-www-form-urlencoded"],
                        body: formURLEncoded([
                            ("grant_type", "client_credentials"), ("client_id", Self.clientID),
                            ("client_secret", Self.secret), ("scope", scope),
                        ]))
                }
                #expect(try await grant(scope: "s.notify.live.net").json?["error"] == "invalid_scope")
                let granted = try await grant(scope: "notify.windows.com")
                #expect(granted.json?["token_type"] == "bearer" && granted.json?["expires_in"] == 86400)
                let token = granted.json?["access_token"]?.stringValue ?? ""

                func notify(
                    _ headers: [String: String], bytes: Int = 10, get: Bool = false, bearer: String? = token
                ) async throws -> String {
                    var headers = headers
                    if let bearer { headers["authorization"] = "Bearer \(bearer)" }
                    let answer = try await post(
                        http, channel(server), get: get, headers: headers,
                        body: Array(repeating: UInt8(ascii: "x"), count: bytes))
                    return
                        "\(answer.status) \(answer.headers["x-wns-error-description"] ?? answer.headers["x-wns-status"] ?? "-")"
                }
                let raw = ["x-wns-type": "wns/raw", "content-type": "application/octet-stream"]
                #expect(try await notify(raw, bearer: nil) == "401 Invalid authentication token")
                #expect(try await notify([:]) == "400 Invalid X-WNS-Type header")
                #expect(try await notify(["x-wns-type": "wns/raw", "content-type": "text/xml"]).hasPrefix("400 "))
                #expect(try await notify(raw.merging(["x-wns-ttl": "soon"]) { $1 }) == "400 Invalid X-WNS-TTL header")
                #expect(try await notify(raw, bytes: 5001).hasPrefix("413 "))
                #expect(try await notify(raw, get: true).hasPrefix("405 "))
                #expect(try await notify(["x-wns-type": "wns/toast", "content-type": "text/xml"]) == "200 received")
                #expect(try await notify(raw) == "200 received")
            }
        }
    }

    @Test func answersThatAreNotWNSsNeverCrashTheClient() async throws {
        let huge = String(repeating: "x", count: 200_000)
        let longDescription = String(repeating: "d", count: 300)
        try await withFakeServer(routes: { router in
            router.post("/accesstoken.srf") { _, _ in
                Response(
                    status: .ok, headers: [.contentType: "application/json"],
                    body: .init(byteBuffer: ByteBuffer(string: #"{"access_token":"tok","expires_in":"soon"}"#)))
            }
            router.post("/w/:case") { _, context in
                var headers: HTTPFields = [:]
                let (status, text): (Int, String)
                switch context.parameters.get("case") ?? "" {
                case "redirect":
                    headers[.location] = "https://evil.example/w/?token=x"
                    (status, text) = (302, "")
                case "throttled":
                    headers[.retryAfter] = "30"
                    (status, text) = (406, "")
                case "dropped":
                    headers[HTTPField.Name("X-WNS-Status")!] = "dropped"
                    (status, text) = (200, "")
                case "huge": (status, text) = (200, huge)
                case "described":
                    headers[HTTPField.Name("X-WNS-Error-Description")!] = longDescription
                    (status, text) = (400, "{not json")
                default: (status, text) = (401, "")
                }
                return Response(
                    status: .init(code: status), headers: headers, body: .init(byteBuffer: ByteBuffer(string: text)))
            }
        }) { server in
            try await withClient(server) { client, _ in
                func send(_ name: String) async -> SendResult {
                    await client.send(providerPush(.wns, token: "\(server.baseURL)/w/\(name)"))
                }
                #expect(await send("redirect") == .failed(reason: .relay(.endpointRedirected), status: 302))
                #expect(
                    await send("throttled")
                        == .retry(reason: .wns(.httpStatus(406)), status: 406, retryAfter: .seconds(30)))
                #expect(await send("dropped") == .failed(reason: .wns(.notificationStatus(.dropped)), status: 200))
                #expect(await send("huge") == .sent(status: 200, providerMessageID: nil))
                #expect(await send("described") == .failed(reason: .wns(.httpStatus(400)), status: 400))
                #expect(
                    await send("unauthorized") == .retry(reason: .wns(.httpStatus(401)), status: 401, retryAfter: nil))
                _ = await send("huge")
                #expect(server.requests.count("/accesstoken.srf") == 2, "a 401 drops the access token")
            }
        }
    }
}
