import Foundation
import JWTKit
import LogKeys
import Logging
import NIOCore
import NIOHPACK
import PushModels

/// APNs token-auth settings. The same binary talks to Apple or to a fake: only the
/// base URL, trust roots and key differ.
public struct APNsConfiguration: Sendable {
    /// `https://api.push.apple.com` or `https://api.sandbox.push.apple.com`.
    public var baseURL: String
    public var teamID: String
    public var keyID: String
    /// The .p8 (PKCS#8 PEM) signing key's contents.
    public var privateKeyPEM: String
    /// A CA file to trust instead of the system roots.
    public var caFile: String?
    /// HTTP/2 connections at most; a second opens only when the first has no free stream.
    public var connections: Int
    /// Refresh the provider token after this long (Apple: not more than every 20 min, before 60).
    public var tokenRefreshInterval: Duration
    public var requestTimeout: Duration

    public init(
        baseURL: String, teamID: String, keyID: String, privateKeyPEM: String, caFile: String? = nil,
        connections: Int = 2, tokenRefreshInterval: Duration = .seconds(50 * 60),
        requestTimeout: Duration = .seconds(15)
    ) {
        self.baseURL = baseURL
        self.teamID = teamID
        self.keyID = keyID
        self.privateKeyPEM = privateKeyPEM
        self.caFile = caFile
        self.connections = max(1, connections)
        self.tokenRefreshInterval = min(max(tokenRefreshInterval, .seconds(20 * 60)), .seconds(59 * 60))
        self.requestTimeout = requestTimeout
    }
}

/// The claims of an APNs provider token: issuer (team) and issue time.
struct APNsTokenClaims: JWTPayload {
    var iss: IssuerClaim
    var iat: IssuedAtClaim

    func verify(using algorithm: some JWTAlgorithm) throws {}
}

/// Signs and caches the APNs provider token. One token is reused until it is
/// `refreshInterval` old, so Apple never sees more than one new token per 20 minutes.
/// Signs and caches the APNs provider token (ES256 JWT); public for the micro benchmarks.
public actor APNsTokenSigner {
    private let keys = JWTKeyCollection()
    private let configuration: APNsConfiguration
    private var current: (token: String, issued: ContinuousClock.Instant)?
    private var loaded = false

    public init(configuration: APNsConfiguration) {
        self.configuration = configuration
    }

    public func token() async throws -> String {
        if let current, ContinuousClock.now - current.issued < configuration.tokenRefreshInterval {
            return current.token
        }
        if !loaded {
            let key = try ES256PrivateKey(pem: configuration.privateKeyPEM)
            await keys.add(ecdsa: key, kid: JWKIdentifier(string: configuration.keyID))
            loaded = true
        }
        let claims = APNsTokenClaims(iss: IssuerClaim(value: configuration.teamID), iat: IssuedAtClaim(value: Date()))
        let token = try await keys.sign(claims, kid: JWKIdentifier(string: configuration.keyID))
        current = (token, .now)
        return token
    }

    /// Called when APNs rejects the token: sign a new one on next use, unless the
    /// current one is younger than a minute (a fresh token being refused means the
    /// key is wrong, and re-signing would only earn TooManyProviderTokenUpdates).
    func invalidate() {
        if let current, ContinuousClock.now - current.issued > .seconds(60) { self.current = nil }
    }
}

/// Sends to APNs over HTTP/2 with token auth: streams multiplexed on as few connections
/// as the server's stream limit allows (`connections` at most).
///
/// One client serves `apns`; `voip()` gives the `apns_voip` client on the same
/// connections and provider token (VoIP pushes differ only in their headers).
public final class APNsClient: PushProviderClient {
    public let provider: Provider
    private let configuration: APNsConfiguration
    private let http: PushHTTP2Client
    private let signer: APNsTokenSigner
    private let logger: Logger
    /// The VoIP client shares the connections; only their owner shuts them down.
    private let ownsConnections: Bool
    /// Apple's limit for VoIP payloads; 4096 for the others.
    static let maxVoIPPayloadBytes = 5120

    public init(configuration: APNsConfiguration, logger: Logger) throws {
        // Fail at startup, not on the first push, if the key is unusable.
        _ = try ES256PrivateKey(pem: configuration.privateKeyPEM)
        self.configuration = configuration
        self.http = try PushHTTP2Client(
            configuration: .init(
                baseURL: configuration.baseURL, caFile: configuration.caFile,
                maxConnections: configuration.connections),
            logger: logger)
        self.signer = APNsTokenSigner(configuration: configuration)
        self.logger = logger
        self.provider = .apns
        self.ownsConnections = true
    }

    private init(sharing client: APNsClient, provider: Provider) {
        self.configuration = client.configuration
        self.http = client.http
        self.signer = client.signer
        self.logger = client.logger
        self.provider = provider
        self.ownsConnections = false
    }

    /// The `apns_voip` client: PushKit pushes on this client's connections.
    public func voip() -> APNsClient {
        APNsClient(sharing: self, provider: .apnsVoIP)
    }

    /// The headers that differ between kinds: (topic, push type, priority, expiration);
    /// a nil priority or expiration is a header not sent (APNs' defaults apply).
    /// VoIP (Apple's "Sending notification requests to APNs"): topic `<bundle id>.voip`,
    /// push type `voip`, priority 10, and expiration 0: a call rings now or never.
    static func kindHeaders(_ push: ProviderPush, topic: String)
        -> (topic: String, pushType: String, priority: Int?, expiration: Int64?)
    {
        if push.provider == .apnsVoIP {
            let voipTopic = topic.hasSuffix(".voip") ? topic : topic + ".voip"
            return (voipTopic, APNsPushType.voip.rawValue, 10, 0)
        }
        return (topic, push.delivery.apnsPushType.name, push.delivery.apnsPriority?.value, push.expiresAt)
    }

    public func send(_ push: ProviderPush) async -> SendResult {
        guard let topic = push.appID, !topic.isEmpty else {
            return .failed(reason: .apns(.known(.missingTopic)), status: nil)
        }
        let body = push.body
        let limit = push.provider == .apnsVoIP ? Self.maxVoIPPayloadBytes : 4096
        guard body.count <= limit else { return .failed(reason: .apns(.known(.payloadTooLarge)), status: nil) }
        let bearer: String
        do {
            bearer = try await signer.token()
        } catch {
            logger.error("cannot sign APNs provider token", metadata: [LogKey.error: "\(error)"])
            return .failed(reason: .relay(.providerTokenSigning), status: nil)
        }
        var request = http.request(path: "/3/device/\(push.token)", body: ByteBuffer(bytes: body))
        request.headers.add(name: HTTPHeaderName.authorization, value: "bearer \(bearer)")
        let kind = Self.kindHeaders(push, topic: topic)
        request.headers.add(name: HTTPHeaderName.apnsTopic, value: kind.topic)
        request.headers.add(name: HTTPHeaderName.apnsPushType, value: kind.pushType)
        if let priority = kind.priority {
            request.headers.add(name: HTTPHeaderName.apnsPriority, value: String(priority))
        }
        // Values that differ from push to push are sent as literals, not added to HPACK's
        // table: indexed, each evicted the connection's reusable entries and lengthened
        // every later lookup (the path, which names the device, likewise).
        let apnsID = Self.apnsID(push)
        request.headers.add(name: HTTPHeaderName.apnsID, value: apnsID, indexing: .nonIndexable)
        if let expiration = kind.expiration {
            request.headers.add(name: HTTPHeaderName.apnsExpiration, value: String(expiration), indexing: .nonIndexable)
        }
        // Without a realm-chosen collapse id, the per-(notification, device) id: it collapses
        // nothing but a re-send of this very push, which the phone then shows once.
        if let collapse = push.collapseID, collapse.utf8.count <= 64 {
            request.headers.add(name: HTTPHeaderName.apnsCollapseID, value: collapse, indexing: .nonIndexable)
        } else {
            request.headers.add(name: HTTPHeaderName.apnsCollapseID, value: apnsID, indexing: .nonIndexable)
        }
        request.headers.add(name: HTTPHeaderName.contentType, value: "application/json")
        do {
            let response = try await http.execute(request, timeout: configuration.requestTimeout)
            let status = response.status
            if status == 200 {
                return .sent(status: status, providerMessageID: response.headers.first(name: HTTPHeaderName.apnsID))
            }
            let error = APNsErrorBody(Array(response.body.readableBytesView))
            let reason = Named<APNsReason>(error?.reason ?? "HTTP\(status)")
            if reason == .known(.expiredProviderToken) || reason == .known(.invalidProviderToken) {
                await signer.invalidate()
            }
            return reason.result(
                status: status, timestampMs: error?.timestamp, retryAfter: retryAfter(response.headers))
        } catch {
            return transportFailure(error, token: push.token, logger: logger)
        }
    }

    /// A stable apns-id per (notification, device), so a resend is recognisable.
    static func apnsID(_ push: ProviderPush) -> String {
        guard var bytes = UUID.bytes(parsing: push.notificationID.rawValue) else {
            return NotificationID.random().rawValue
        }
        // Mix the device id into the last 8 bytes so each device's push has its own id.
        let id = UInt64(bitPattern: push.deviceID.rawValue).bigEndian
        withUnsafeBytes(of: id) { raw in
            for i in 0..<8 { bytes[8 + i] ^= raw[i] }
        }
        return bytes.withUnsafeBytes(UUID.lowercaseText)
    }

    public func shutdown() async {
        if ownsConnections { await http.shutdown() }
    }
}

struct APNsErrorBody {
    var reason: String
    var timestamp: Int64?

    /// APNs' error body (`{"reason": …, "timestamp": …}`); nil when it is not one.
    init?(_ bytes: [UInt8]) {
        guard let json = try? Wire.decode(JSONValue.self, from: bytes), let reason = json["reason"]?.stringValue
        else { return nil }
        self.reason = reason
        // A timestamp that is not a whole number made the body unreadable before; it still does.
        switch json["timestamp"] {
        case nil, .null?: timestamp = nil
        case .int(let value)?: timestamp = value
        default: return nil
        }
    }
}
