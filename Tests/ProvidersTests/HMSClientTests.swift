import AsyncHTTPClient
import FakeProviders
import Foundation
import Hummingbird
import HummingbirdHTTP2
import Logging
import NIOHTTP1
import NIOSSL
import PushModels
import ServiceLifecycle
import Synchronization
import Testing

@testable import Providers

/// Requests a fake served, by path.
final class RequestCounter: Sendable {
    private let counts = Mutex<[String: Int]>([:])

    func add(_ path: String) { counts.withLock { $0[path, default: 0] += 1 } }
    func count(_ path: String) -> Int { counts.withLock { $0[path] ?? 0 } }
}

struct CountingMiddleware: RouterMiddleware {
    typealias Context = BasicRequestContext
    let counter: RequestCounter

    func handle(
        _ request: Request, context: Context, next: (Request, Context) async throws -> Response
    ) async throws -> Response {
        counter.add(request.uri.path)
        return try await next(request, context)
    }
}

/// One router served as the provider fakes are: HTTP/2 over TLS with the fake CA's
/// server certificate (for localhost and 127.0.0.1), on an ephemeral loopback port.
final class FakeProviderServer: Sendable {
    /// Generated once: an RSA key takes a while.
    static let credentials = Result {
        let credentials = try FakeCredentials.loadOrCreate(
            directory: NSTemporaryDirectory() + "provider-fakes-\(UUID().uuidString)")
        try credentials.writeClientFiles(apnsURL: "https://localhost", fcmURL: "https://localhost")
        return credentials
    }

    let port: Int
    let caFile: String
    let requests: RequestCounter
    private let group: ServiceGroup
    private let task: Task<Void, Never>

    var baseURL: String { "https://localhost:\(port)" }

    private init(port: Int, caFile: String, requests: RequestCounter, group: ServiceGroup, task: Task<Void, Never>) {
        self.port = port
        self.caFile = caFile
        self.requests = requests
        self.group = group
        self.task = task
    }

    static func start(routes: (Router<BasicRequestContext>) -> Void) async throws -> FakeProviderServer {
        let credentials = try Self.credentials.get()
        let tls = TLSConfiguration.makeServerConfiguration(
            certificateChain: try NIOSSLCertificate.fromPEMBytes(Array(credentials.serverCertificatePEM.utf8)).map {
                .certificate($0)
            },
            privateKey: .privateKey(try NIOSSLPrivateKey(bytes: Array(credentials.serverKeyPEM.utf8), format: .pem)))
        let requests = RequestCounter()
        let router = Router(context: BasicRequestContext.self)
        router.add(middleware: CountingMiddleware(counter: requests))
        routes(router)
        var logger = Logger(label: "provider-fake")
        logger.logLevel = .warning
        let (ports, continuation) = AsyncStream<Int>.makeStream()
        let app = Application(
            router: router, server: try .http2Upgrade(tlsConfiguration: tls),
            configuration: .init(address: .hostname("127.0.0.1", port: 0), serverName: nil),
            onServerRunning: { channel in continuation.yield(channel.localAddress?.port ?? 0) }, logger: logger)
        let group = ServiceGroup(configuration: .init(services: [app], logger: logger))
        let task = Task {
            try? await group.run()
            continuation.finish()
        }
        var iterator = ports.makeAsyncIterator()
        guard let port = await iterator.next(), port > 0 else {
            task.cancel()
            throw ProviderSetupError("the fake did not start")
        }
        return FakeProviderServer(port: port, caFile: credentials.caFile, requests: requests, group: group, task: task)
    }

    func stop() async {
        await group.triggerGracefulShutdown()
        await task.value
    }
}

/// Runs `body` against a server, and stops the server whatever happens.
func withFakeServer(
    routes: (Router<BasicRequestContext>) -> Void, _ body: (FakeProviderServer) async throws -> Void
) async throws {
    let server = try await FakeProviderServer.start(routes: routes)
    do {
        try await body(server)
    } catch {
        await server.stop()
        throw error
    }
    await server.stop()
}

/// A push as the dispatcher hands it to a client: the body is the canonical bytes of
/// `body`, as the encryptor builds it.
func providerPush(
    _ provider: Provider, token: String, body: JSONValue = ["push_key_id": "7", "encrypted_data": "c2VhbGVk"],
    type: NotificationType = .message, expiresAt: Int64? = nil, collapseID: String? = nil
) -> ProviderPush {
    ProviderPush(
        provider: provider, token: token, delivery: DeliveryClass(type), body: Wire.canonical(body),
        expiresAt: expiresAt, collapseID: collapseID, notificationID: "n-1", deviceID: 1)
}

func nowSeconds() -> Int64 { Int64(Date().timeIntervalSince1970) }

/// The HMS client against the fake Push Kit (docs: HMSClient.swift).
@Suite struct HMSClientTests {
    static let appID = "104567891"
    /// A secret with characters form encoding must escape.
    static let secret = "a1b2+c3/d4=e5&f6"
    let logger = Logger(label: "test")

    func withHMS(
        secret: String = HMSClientTests.secret, _ body: (HMSClient, FakeState, FakeProviderServer) async throws -> Void
    ) async throws {
        let state = FakeState()
        let fake = FakeHMS(state: state, appID: Self.appID, clientID: Self.appID, clientSecret: Self.secret)
        try await withFakeServer(routes: fake.addRoutes) { server in
            try await withClient(server, secret: secret) { client in try await body(client, state, server) }
        }
    }

    func withClient(
        _ server: FakeProviderServer, secret: String = HMSClientTests.secret, _ body: (HMSClient) async throws -> Void
    ) async throws {
        let client = try HMSClient(
            configuration: try HMSConfiguration(
                baseURL: server.baseURL, tokenURL: "\(server.baseURL)/oauth2/v3/token", appID: Self.appID,
                clientSecret: secret, caFile: server.caFile, requestTimeout: .seconds(10)),
            logger: logger)
        do {
            try await body(client)
        } catch {
            await client.shutdown()
            throw error
        }
        await client.shutdown()
    }

    @Test func aDataMessageReachesPushKitWithItsOptions() async throws {
        try await withHMS { client, state, _ in
            let push = providerPush(.hms, token: "IQAAAACy0kYhAAB", expiresAt: nowSeconds() + 600, collapseID: "3")
            let result = await client.send(push)
            guard case .sent(200, let requestID?) = result else {
                Issue.record("expected sent with a request id, got \(result)")
                return
            }
            #expect(requestID.allSatisfy { $0.isNumber })
            let received = state.received(provider: "hms")
            #expect(received.count == 1)
            #expect(received.first?.token == "IQAAAACy0kYhAAB")
            #expect(received.first?.headers["android.urgency"] == "HIGH")
            #expect(received.first?.headers["android.collapse_key"] == "3")
            let ttl = received.first?.headers["android.ttl"] ?? ""
            #expect(ttl.hasSuffix("s") && (590...600).contains(Int(ttl.dropLast()) ?? 0), "ttl \(ttl)")
            let sentBody = try Wire.decode(JSONValue.self, from: push.body)
            #expect(received.first?.body == sentBody)
            #expect(received.first?.httpVersion == "2")
        }
    }

    @Test func oneAccessTokenServesManySends() async throws {
        try await withHMS { client, state, server in
            let results = await withTaskGroup(of: SendResult.self) { group in
                for n in 0..<6 { group.addTask { await client.send(providerPush(.hms, token: "token\(n)")) } }
                return await group.reduce(into: []) { $0.append($1) }
            }
            for _ in 0..<3 { _ = await client.send(providerPush(.hms, token: "later", type: .remove)) }
            #expect(results.allSatisfy { if case .sent = $0 { true } else { false } }, "\(results)")
            #expect(server.requests.count("/oauth2/v3/token") == 1)
            #expect(state.received(provider: "hms").count == 9)
            #expect(state.received(provider: "hms").last?.headers["android.urgency"] == "NORMAL")
        }
    }

    @Test func anInvalidTokenIsReportedDead() async throws {
        try await withHMS { client, state, _ in
            state.markUnregistered(provider: "hms", token: "gone", timestampMs: 0)
            #expect(
                await client.send(providerPush(.hms, token: "gone"))
                    == .invalidToken(reason: .hms(.code(.known(.invalidToken))), status: 400, timestampMs: nil))
        }
    }

    @Test func flowControlIsRetriedNoSoonerThanHuaweiSays() async throws {
        try await withHMS { client, state, _ in
            state.inject(provider: "hms", try injected(status: 503, reason: "81000001", retryAfter: 7))
            #expect(
                await client.send(providerPush(.hms, token: "t"))
                    == .retry(reason: .hms(.code(.known(.internalError))), status: 503, retryAfter: .seconds(7)))
            guard case .sent = await client.send(providerPush(.hms, token: "t")) else {
                Issue.record("the next send goes through")
                return
            }
        }
    }

    @Test func anExpiredAccessTokenIsReplaced() async throws {
        try await withHMS { client, state, server in
            state.inject(provider: "hms", try injected(status: 401, reason: "80200003"))
            #expect(
                await client.send(providerPush(.hms, token: "t"))
                    == .retry(reason: .hms(.code(.known(.oauthTokenExpired))), status: 401, retryAfter: nil))
            guard case .sent = await client.send(providerPush(.hms, token: "t")) else {
                Issue.record("the next send goes through with a new token")
                return
            }
            #expect(server.requests.count("/oauth2/v3/token") == 2)
        }
    }

    @Test func wrongCredentialsAreRetriedWithoutSending() async throws {
        try await withHMS(secret: "wrong") { client, state, _ in
            #expect(
                await client.send(providerPush(.hms, token: "t"))
                    == .retry(reason: .relay(.oauthUnavailable), status: nil, retryAfter: .seconds(5)))
            #expect(state.received(provider: "hms").isEmpty)
        }
    }

    @Test func dataOverHuaweisLimitIsRefusedBeforeSending() async throws {
        try await withHMS { client, state, server in
            let big = providerPush(
                .hms, token: "t", body: ["encrypted_data": .string(String(repeating: "x", count: 4096))])
            #expect(await client.send(big) == .failed(reason: .relay(.payloadTooLarge), status: nil))
            #expect(state.received(provider: "hms").isEmpty)
            #expect(server.requests.count("/oauth2/v3/token") == 0)
        }
    }

    @Test func answersThatAreNotHuaweisNeverCrashTheClient() async throws {
        let huge = String(repeating: "x", count: 200_000)
        try await withFakeServer(routes: { router in
            router.post("/oauth2/v3/token") { _, _ in
                Response(
                    status: .ok, headers: [.contentType: "application/json"],
                    body: .init(byteBuffer: ByteBuffer(string: #"{"access_token":"tok","expires_in":-5}"#)))
            }
            router.post("/v1/:appId/messages:send") { request, _ in
                var request = request
                let body = try await request.collectBody(upTo: 1 << 20)
                let token = (try? Wire.decode(JSONValue.self, from: Array(body.readableBytesView)))?["message"]?[
                    "token"]?.arrayValue?.first?.stringValue
                let (status, text): (Int, String) =
                    switch token {
                    case "html": (502, "<html><body>Bad Gateway</body></html>")
                    case "empty": (200, "")
                    case "number": (400, #"{"code":80100003,"msg":7}"#)
                    case "huge": (200, huge)
                    case "array": (503, "[1,2,3]")
                    default: (401, "Unauthorized")
                    }
                return Response(status: .init(code: status), body: .init(byteBuffer: ByteBuffer(string: text)))
            }
        }) { server in
            try await withClient(server) { client in
                #expect(
                    await client.send(providerPush(.hms, token: "html"))
                        == .retry(reason: .hms(.httpStatus(502)), status: 502, retryAfter: nil))
                #expect(
                    await client.send(providerPush(.hms, token: "empty")) == .sent(status: 200, providerMessageID: nil))
                #expect(
                    await client.send(providerPush(.hms, token: "number"))
                        == .failed(reason: .hms(.code(.unknown("80100003"))), status: 400))
                #expect(
                    await client.send(providerPush(.hms, token: "huge")) == .sent(status: 200, providerMessageID: nil))
                #expect(
                    await client.send(providerPush(.hms, token: "array"))
                        == .retry(reason: .hms(.httpStatus(503)), status: 503, retryAfter: nil))
                #expect(
                    await client.send(providerPush(.hms, token: "other"))
                        == .retry(reason: .hms(.httpStatus(401)), status: 401, retryAfter: nil))
            }
        }
    }

    @Test func aPartialSuccessIsTheOneTokensFate() {
        let named = HMSAnswer(
            status: 200, code: .known(.partialSuccess), msg: #"{"success":0,"failure":1,"illegal_tokens":["tok"]}"#)
        #expect(named.result(token: "tok", retryAfter: nil).isInvalidToken)
        let grouped = HMSAnswer(
            status: 200, code: .known(.partialSuccess), msg: #"{"illegalTokens":{"noRight":["tok"]},"failure":1}"#)
        #expect(grouped.result(token: "tok", retryAfter: nil).isInvalidToken)
        let other = HMSAnswer(
            status: 200, code: .known(.partialSuccess), msg: #"{"success":1,"failure":0,"illegal_tokens":[]}"#)
        #expect(other.result(token: "tok", retryAfter: nil) == .sent(status: 200, providerMessageID: nil))
        let unnamed = HMSAnswer(status: 200, code: .known(.partialSuccess), msg: "partly")
        #expect(
            unnamed.result(token: "tok", retryAfter: nil)
                == .failed(reason: .hms(.code(.known(.partialSuccess))), status: 200))
    }

    @Test func theMessageIsHuaweisV1DataMessage() throws {
        let push = providerPush(.hms, token: "tok", type: .remove, expiresAt: 10_000_000, collapseID: "-1")
        let now = Date(timeIntervalSince1970: 100)
        let bytes = HMSClient.message(
            push, fields: ["data": .string(String(decoding: push.body, as: UTF8.self))], now: now)
        let json = try Wire.decode(JSONValue.self, from: bytes)
        #expect(json["validate_only"] == false)
        #expect(json["message"]?["data"] == .string(String(decoding: push.body, as: UTF8.self)))
        #expect(json["message"]?["token"] == ["tok"])
        #expect(json["message"]?["android"] == ["urgency": "NORMAL", "ttl": "1296000s", "collapse_key": -1])
        for (text, key) in [("abc", nil), ("101", nil), ("+5", nil), ("100", 100), ("0", 0)] as [(String, Int64?)] {
            #expect(HMSClient.collapseKey(text) == key, "\(text)")
        }
    }

    /// A pipeline dry run's push: Huawei and FCM are asked to validate it only.
    @Test func aDryRunsPushAsksForValidationOnly() throws {
        var push = providerPush(.hms, token: "tok")
        push.validateOnly = true
        let hms = try Wire.decode(
            JSONValue.self,
            from: HMSClient.message(
                push, fields: ["data": .string(String(decoding: push.body, as: UTF8.self))], now: Date()))
        #expect(hms["validate_only"] == true)
        var fcm = providerPush(.fcm, token: "tok")
        fcm.validateOnly = true
        let message = try #require(FCMClient.message(fields: Wire.canonical(["data": ["k": "v"]]), push: fcm))
        #expect(try Wire.decode(JSONValue.self, from: message)["validate_only"] == true)
        fcm.validateOnly = false
        let real = try #require(FCMClient.message(fields: Wire.canonical(["data": ["k": "v"]]), push: fcm))
        #expect(try Wire.decode(JSONValue.self, from: real)["validate_only"] == false)
    }

    @Test func theFakeRefusesWhatPushKitRefuses() async throws {
        let fake = FakeHMS(state: FakeState(), appID: Self.appID, clientID: Self.appID, clientSecret: Self.secret)
        try await withFakeServer(routes: fake.addRoutes) { server in
            try await withRawClient(server) { http in
                let form = ["content-type": "application/x-www-form-urlencoded"]
                let refused = try await post(
                    http, "\(server.baseURL)/oauth2/v3/token", headers: form,
                    body: Array("grant_type=client_credentials&client_id=\(Self.appID)&client_secret=nope".utf8))
                #expect(refused.status == 400)
                #expect(refused.json?["error"] == 1101 && refused.json?["sub_error"] == 12304)
                let granted = try await post(
                    http, "\(server.baseURL)/oauth2/v3/token", headers: form,
                    body: formURLEncoded([
                        ("grant_type", "client_credentials"), ("client_id", Self.appID),
                        ("client_secret", Self.secret),
                    ]))
                #expect(granted.json?["expires_in"] == 3600 && granted.json?["token_type"] == "Bearer")
                let token = granted.json?["access_token"]?.stringValue ?? ""

                func send(_ message: [String: JSONValue], app: String = Self.appID, bearer: String? = token)
                    async throws -> String
                {
                    var headers = ["content-type": "application/json"]
                    if let bearer { headers["authorization"] = "Bearer \(bearer)" }
                    let answer = try await post(
                        http, "\(server.baseURL)/v1/\(app)/messages:send", headers: headers,
                        body: Wire.canonical(["validate_only": false, "message": .object(message)]))
                    return "\(answer.status) \(answer.json?["code"]?.stringValue ?? "-")"
                }
                let good: [String: JSONValue] = ["data": "{}", "token": ["t"], "android": ["urgency": "HIGH"]]
                #expect(try await send(good, bearer: nil) == "401 80200001")
                #expect(try await send(good, bearer: "someone-elses") == "401 80200001")
                #expect(try await send(good, app: "999") == "401 80200001")
                #expect(try await send(good.merging(["data": ["k": "v"]]) { $1 }) == "400 80100003")
                #expect(try await send(good.merging(["token": []]) { $1 }) == "400 80300010")
                #expect(try await send(good.merging(["android": ["urgency": "LOW"]]) { $1 }) == "400 80100001")
                #expect(try await send(good.merging(["android": ["ttl": "a day"]]) { $1 }) == "400 80100001")
                #expect(try await send(good.merging(["android": ["collapse_key": 101]]) { $1 }) == "400 80100013")
                let big = JSONValue.string(String(repeating: "x", count: 4097))
                #expect(try await send(good.merging(["data": big]) { $1 }) == "413 80300008")
                #expect(try await send(good) == "200 80000000")
            }
        }
    }

    @Test func unsafeSettingsAreRefused() {
        #expect(throws: ProviderSetupError.self) {
            try HMSConfiguration(baseURL: "http://push-api.cloud.huawei.com", appID: "1", clientSecret: "s")
        }
        #expect(throws: ProviderSetupError.self) { try HMSConfiguration(appID: "../1", clientSecret: "s") }
        #expect(throws: ProviderSetupError.self) { try HMSConfiguration(appID: "1", clientSecret: "") }
    }
}

/// A provider's answer to a raw request, for checking what the fakes refuse.
struct RawAnswer {
    var status: Int
    var headers: [String: String]
    var json: JSONValue?
}

/// POSTs (or GETs) `body` as it is; `http` trusts the fakes' CA.
func post(_ http: HTTPClient, _ url: String, get: Bool = false, headers: [String: String], body: [UInt8])
    async throws -> RawAnswer
{
    var request = HTTPClientRequest(url: url)
    request.method = get ? .GET : .POST
    for (name, value) in headers { request.headers.add(name: name, value: value) }
    request.body = .bytes(ByteBuffer(bytes: body))
    let response = try await http.execute(request, timeout: .seconds(10))
    let bytes = try await response.body.collect(upTo: 1 << 20)
    return RawAnswer(
        status: Int(response.status.code),
        headers: Dictionary(response.headers.map { ($0.name.lowercased(), $0.value) }, uniquingKeysWith: { a, _ in a }),
        json: try? Wire.decode(JSONValue.self, from: Array(bytes.readableBytesView)))
}

/// Runs `body` with a plain HTTP client that trusts the fakes' CA.
func withRawClient(_ server: FakeProviderServer, _ body: (HTTPClient) async throws -> Void) async throws {
    let http = try makeHTTPClient(caFile: server.caFile, connectTimeout: .seconds(5))
    do {
        try await body(http)
    } catch {
        try? await http.shutdown()
        throw error
    }
    try await http.shutdown()
}

/// An injected failure as the fakes' control API takes it.
func injected(status: Int, reason: String, retryAfter: Int? = nil, count: Int = 1) throws -> InjectedFailure {
    var fields: [String: JSONValue] = [
        "status": .int(Int64(status)), "reason": .string(reason), "count": .int(Int64(count)),
    ]
    if let retryAfter { fields["retry_after"] = .int(Int64(retryAfter)) }
    return try JSONDecoder().decode(InjectedFailure.self, from: Data(Wire.canonical(.object(fields))))
}
