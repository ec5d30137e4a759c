import Foundation
import Hummingbird
import HummingbirdCore
import Logging
import NIOCore
import NIOSSL
import PushModels
import ServiceLifecycle

/// The fakes as runnable applications: APNs and FCM over HTTP/2 + TLS with the fake
/// CA's certificate; Web Push (`/wp/…`), simple push (`/sp/…`), Huawei Push Kit
/// (`/v1/…`, `/oauth2/v3/token`) and WNS (`/w/…`, `/accesstoken.srf`) on one more TLS
/// port; and a plain-HTTP control API on loopback for tests and the demo, which also
/// receives the services' OTLP trace export (`FakeOTLP`).
public struct FakeServers: Sendable {
    public struct Ports: Sendable {
        public var apns: Int
        public var fcm: Int
        public var control: Int
        /// Web Push, simple push, Huawei Push Kit and WNS, told apart by path.
        public var push: Int
        /// A Waku node's REST API, plain HTTP (0: none).
        public var waku: Int

        public init(apns: Int, fcm: Int, control: Int, push: Int, waku: Int = 0) {
            self.apns = apns
            self.fcm = fcm
            self.control = control
            self.push = push
            self.waku = waku
        }
    }

    public let credentials: FakeCredentials
    public let state: FakeState
    public let ports: Ports
    public let host: String
    public let publicHost: String
    /// Requests per connection before a GOAWAY retires it (0: never).
    public let goAwayEvery: Int
    /// Milliseconds between a GOAWAY and the close of its connection, the streams up to its
    /// last-stream-id answered meanwhile, some late (0: closed once the last is answered).
    public let goAwayGraceMilliseconds: Int
    /// The OTLP trace receiver on the control port (`POST /v1/traces`, `GET /traces`).
    public let otlp = FakeOTLP()
    /// The Waku node (on `ports.waku`), with nwaku's cache bounded at `wakuCacheCapacity`.
    public let waku: FakeWaku

    public var apnsURL: String { "https://\(publicHost):\(ports.apns)" }
    public var fcmURL: String { "https://\(publicHost):\(ports.fcm)" }
    public var pushURL: String { "https://\(publicHost):\(ports.push)" }
    /// A Web Push endpoint on the fake, as a browser's subscription would hold it.
    public func webPushEndpoint(_ id: String) -> String { "\(pushURL)/wp/\(id)" }

    /// `publicHost` is the name clients use (it goes into the URLs written for the dispatcher).
    public init(
        directory: String, host: String = "127.0.0.1", publicHost: String = "localhost", ports: Ports,
        apnsTeamID: String? = nil, apnsKeyID: String? = nil, maxRecorded: Int = 0, goAwayEvery: Int = 0,
        goAwayGraceMilliseconds: Int = 0, wakuCacheCapacity: Int = 50
    ) throws {
        self.waku = FakeWaku(capacity: wakuCacheCapacity)
        self.goAwayEvery = max(0, goAwayEvery)
        self.goAwayGraceMilliseconds = max(0, goAwayGraceMilliseconds)
        self.credentials = try FakeCredentials.loadOrCreate(
            directory: directory, hostnames: publicHost == "localhost" ? [] : [publicHost], teamID: apnsTeamID,
            keyID: apnsKeyID)
        self.publicHost = publicHost
        self.state = FakeState(maxRecorded: maxRecorded)
        self.ports = ports
        self.host = host
        try credentials.writeClientFiles(
            apnsURL: apnsURL, fcmURL: fcmURL, pushURL: pushURL,
            endpointHosts: Array(Set(["localhost", "127.0.0.1", publicHost])).sorted())
    }

    /// The servers; run them in one ServiceGroup.
    public func applications(logger: Logger) async throws -> [any Service] {
        let tls = TLSConfiguration.makeServerConfiguration(
            certificateChain: [
                .certificate(try NIOSSLCertificate(bytes: Array(credentials.serverCertificatePEM.utf8), format: .pem))
            ],
            privateKey: .privateKey(try NIOSSLPrivateKey(bytes: Array(credentials.serverKeyPEM.utf8), format: .pem)))

        let goAwayGrace: TimeAmount? =
            goAwayGraceMilliseconds > 0 ? .milliseconds(Int64(goAwayGraceMilliseconds)) : nil
        let apnsRouter = Router(context: BasicRequestContext.self)
        try await FakeAPNs(state: state, credentials: credentials).addRoutes(to: apnsRouter)
        let apns = try FakeHTTPServer(
            host: host, port: ports.apns, tls: tls, router: apnsRouter, goAwayEvery: goAwayEvery,
            goAwayGrace: goAwayGrace, state: state, logger: logger)

        let fcmRouter = Router(context: BasicRequestContext.self)
        try await FakeFCM(state: state, credentials: credentials, baseURL: fcmURL).addRoutes(to: fcmRouter)
        let fcm = try FakeHTTPServer(
            host: host, port: ports.fcm, tls: tls, router: fcmRouter, goAwayEvery: goAwayEvery,
            goAwayGrace: goAwayGrace, state: state, logger: logger)

        let pushRouter = Router(context: BasicRequestContext.self)
        FakeWebPush(state: state, applicationServerKey: credentials.vapidPublicKey).addRoutes(to: pushRouter)
        FakeHMS(
            state: state, appID: credentials.hmsAppID, clientID: credentials.hmsAppID,
            clientSecret: credentials.hmsClientSecret
        ).addRoutes(to: pushRouter)
        FakeWNS(state: state, clientID: credentials.wnsClientID, clientSecret: credentials.wnsClientSecret)
            .addRoutes(to: pushRouter)
        let push = try FakeHTTPServer(
            host: host, port: ports.push, tls: tls, router: pushRouter, goAwayEvery: 0, state: state, logger: logger)

        let controlRouter = Router(context: BasicRequestContext.self)
        addControlRoutes(to: controlRouter)
        let control = Application(
            router: controlRouter, configuration: .init(address: .hostname(host, port: ports.control)), logger: logger)
        guard ports.waku > 0 else { return [apns, fcm, push, control] }
        let wakuRouter = Router(context: BasicRequestContext.self)
        waku.addRoutes(to: wakuRouter)
        let node = Application(
            router: wakuRouter, configuration: .init(address: .hostname(host, port: ports.waku)), logger: logger)
        return [apns, fcm, push, control, node]
    }

    @Sendable static func json(_ value: some Encodable) throws -> Response {
        Response(
            status: .ok, headers: [.contentType: "application/json"],
            body: .init(byteBuffer: ByteBuffer(bytes: try Wire.encode(value))))
    }

    func addControlRoutes(to router: Router<BasicRequestContext>) {
        let state = self.state
        router.get("/health") { _, _ in try FakeServers.json(["status": "ok"]) }
        router.get("/config") { _, _ in
            try FakeServers.json([
                "apns_url": apnsURL, "fcm_url": fcmURL, "ca_file": credentials.caFile,
                "apns_team_id": credentials.apnsTeamID, "apns_key_id": credentials.apnsKeyID,
                "apns_key_file": credentials.apnsKeyFile, "fcm_service_account_file": credentials.fcmServiceAccountFile,
                "fcm_project_id": credentials.fcmProjectID, "push_url": pushURL,
                "webpush_endpoint_prefix": "\(pushURL)/wp/", "simplepush_endpoint_prefix": "\(pushURL)/sp/",
                "wns_channel_prefix": "\(pushURL)/w/?token=",
                "vapid_public_key": Base64URL.encode(credentials.vapidPublicKey),
                "hms_app_id": credentials.hmsAppID,
            ])
        }
        router.get("/stats") { _, _ in try FakeServers.json(state.counts()) }
        otlp.addRoutes(to: router)
        router.get("/:provider/received") { request, context in
            let provider = context.parameters.get("provider") ?? ""
            var pushes = state.received(provider: provider)
            if let token = request.uri.queryParameters.get("token") {
                pushes = pushes.filter { $0.token == String(token) }
            }
            return try FakeServers.json(pushes)
        }
        router.post("/:provider/unregistered") { request, context in
            var request = request
            let body = try await request.collectBody(upTo: 64 * 1024)
            let fields = try JSONDecoder().decode(JSONValue.self, from: Data(body.readableBytesView))
            guard let token = fields["token"]?.stringValue else {
                throw HTTPError(.badRequest, message: "token required")
            }
            let timestamp = fields["timestamp_ms"]?.intValue ?? Wire.nowMillis()
            state.markUnregistered(
                provider: context.parameters.get("provider") ?? "", token: token, timestampMs: timestamp)
            return try FakeServers.json(["status": "ok"])
        }
        router.post("/:provider/inject") { request, context in
            var request = request
            let body = try await request.collectBody(upTo: 64 * 1024)
            let failure = try JSONDecoder().decode(InjectedFailure.self, from: Data(body.readableBytesView))
            state.inject(provider: context.parameters.get("provider") ?? "", failure)
            return try FakeServers.json(["status": "ok"])
        }
        router.post("/reset") { _, _ in
            state.reset()
            return try FakeServers.json(["status": "ok"])
        }
    }
}
