import AsyncHTTPClient
import Crypto
import Foundation
import JWTKit
import LogKeys
import Logging
import NIOCore
import NIOHPACK
import NIOHTTP1
import PushCrypto
import PushModels

/// Web Push settings: the application server's VAPID identity (RFC 8292).
public struct WebPushConfiguration: Sendable {
    /// The VAPID key: a PEM EC P-256 private key, or its 32 bytes in base64url (the form
    /// the web-push libraries print). Its public half is the `applicationServerKey`
    /// browsers subscribed with.
    public var privateKey: String
    /// The JWT `sub`: a `mailto:` or `https:` contact for the push service's operators.
    public var subject: String
    /// The deadline of one send.
    public var requestTimeout: Duration
    /// `TTL` when the notification has no expiry: four weeks, what push services keep at most.
    public var defaultTTLSeconds: Int64

    public init(
        privateKey: String, subject: String, requestTimeout: Duration = .seconds(15),
        defaultTTLSeconds: Int64 = 2_419_200
    ) throws {
        let lower = subject.lowercased()
        guard lower.hasPrefix("mailto:") || lower.hasPrefix("https://"), Syntax.isVisibleASCII(subject, maxBytes: 256)
        else {
            throw ProviderSetupError("Web Push VAPID subject must be a mailto: or https: URI")
        }
        _ = try VAPIDSigner.signingKey(privateKey)
        self.privateKey = privateKey
        self.subject = subject
        self.requestTimeout = requestTimeout
        self.defaultTTLSeconds = min(max(defaultTTLSeconds, 0), 2_419_200)
    }
}

/// The claims of a VAPID token (RFC 8292 §2).
struct VAPIDClaims: JWTPayload {
    var aud: AudienceClaim
    var exp: ExpirationClaim
    var sub: SubjectClaim

    func verify(using algorithm: some JWTAlgorithm) throws {}
}

/// Signs VAPID tokens, one per push-service origin, valid 12 hours (RFC 8292 allows 24)
/// and reused for half of that, so a busy origin costs one signature per 6 hours.
public actor VAPIDSigner {
    /// The `k=` parameter: the uncompressed public key, base64url.
    public nonisolated let publicKey: String
    private let keys = JWTKeyCollection()
    private let subject: String
    private var cache: [String: (token: String, expires: Date)] = [:]
    private var loaded = false
    private let key: ES256PrivateKey
    static let lifetime: TimeInterval = 12 * 3600
    static let maxCached = 4096

    public init(privateKey: String, subject: String) throws {
        let signing = try Self.signingKey(privateKey)
        self.publicKey = Base64URL.encode(Array(signing.publicKey.x963Representation))
        self.key = try ES256PrivateKey(backing: signing)
        self.subject = subject
    }

    /// PEM, or 32 raw bytes in base64url.
    static func signingKey(_ text: String) throws -> P256.Signing.PrivateKey {
        let trimmed = text.trimmingCharacters(in: .whitespacesAndNewlines)
        if trimmed.hasPrefix("-----BEGIN") {
            do { return try P256.Signing.PrivateKey(pemRepresentation: trimmed) } catch {
                throw ProviderSetupError("Web Push VAPID key: not a P-256 private key PEM")
            }
        }
        guard let raw = Base64URL.decode(trimmed), raw.count == 32,
            let key = try? P256.Signing.PrivateKey(rawRepresentation: raw)
        else {
            throw ProviderSetupError("Web Push VAPID key: neither a PEM nor 32 bytes of base64url")
        }
        return key
    }

    /// The `Authorization` header value for a push service origin.
    public func authorization(origin: String, now: Date = Date()) async throws -> String {
        if let cached = cache[origin], cached.expires.timeIntervalSince(now) > Self.lifetime / 2 {
            return "vapid t=\(cached.token), k=\(publicKey)"
        }
        if !loaded {
            await keys.add(ecdsa: key)
            loaded = true
        }
        // Whole seconds: a NumericDate push services read as an integer.
        let expires = Date(timeIntervalSince1970: (now.timeIntervalSince1970 + Self.lifetime).rounded(.down))
        let claims = VAPIDClaims(
            aud: AudienceClaim(value: origin), exp: ExpirationClaim(value: expires), sub: SubjectClaim(value: subject))
        let token = try await keys.sign(claims)
        if cache.count >= Self.maxCached { cache.removeAll() }
        cache[origin] = (token, expires)
        return "vapid t=\(token), k=\(publicKey)"
    }
}

/// Sends Web Push messages (RFC 8030) and simple push wake-ups to the endpoints devices
/// registered. The endpoint is the device's choice, so every request goes through the
/// endpoint source: https only, public addresses only (unless allowed), no redirects.
///
/// - `webpush`, and `simplepush` registered with Web Push keys: a POST of the `aes128gcm`
///   body the encryptor built, with VAPID, `TTL`, `Urgency` and `Topic`.
/// - `simplepush` with a bare URL: a PUT of `version=<n>`, no content (the device fetches).
public final class WebPushClient: PushProviderClient {
    public let provider: Provider
    private let configuration: WebPushConfiguration?
    private let signer: VAPIDSigner?
    private let endpoints: any EndpointClientSource
    private let requestTimeout: Duration
    private let logger: Logger
    static let maxResponseBytes = 64 * 1024

    /// `provider` is `.webpush` or `.simplepush`. Without a VAPID configuration only
    /// wake-ups can be sent (Web Push services refuse unauthenticated messages).
    public init(
        provider: Provider, configuration: WebPushConfiguration?, endpoints: any EndpointClientSource, logger: Logger
    ) throws {
        guard provider == .webpush || provider == .simplepush else {
            throw ProviderSetupError("WebPushClient serves webpush and simplepush, not \(provider.rawValue)")
        }
        if provider == .webpush && configuration == nil {
            throw ProviderSetupError("Web Push needs a VAPID key and subject")
        }
        self.provider = provider
        self.configuration = configuration
        self.signer = try configuration.map { try VAPIDSigner(privateKey: $0.privateKey, subject: $0.subject) }
        self.endpoints = endpoints
        self.requestTimeout = configuration?.requestTimeout ?? .seconds(15)
        self.logger = logger
    }

    /// The request a push becomes: a Web Push POST, or a wake-up PUT.
    enum Message: Equatable {
        case webPush([UInt8])
        case wakeUp(version: Int64)
    }

    static func message(_ body: [UInt8]) -> Message? {
        guard let json = try? Wire.decode(JSONValue.self, from: body) else { return nil }
        if let bytes = ProviderBody.webPushBytes(json) { return .webPush(bytes) }
        if let version = json["version"]?.intValue, version >= 0 { return .wakeUp(version: version) }
        return nil
    }

    public func send(_ push: ProviderPush) async -> SendResult {
        guard let endpoint = DeviceToken.endpoint(provider: push.provider, token: push.token) else {
            return .failed(reason: .relay(.endpointRefused), status: nil)
        }
        guard let message = Self.message(push.body) else {
            return .failed(reason: .relay(.invalidBody), status: nil)
        }
        var request = HTTPClientRequest(url: endpoint.url)
        switch message {
        case .webPush(let bytes):
            guard bytes.count <= Int(WebPushEncryption.recordSize) else {
                return .failed(reason: .relay(.payloadTooLarge), status: nil)
            }
            guard let signer else { return .failed(reason: .relay(.providerNotConfigured), status: nil) }
            do {
                request.headers.add(
                    name: HTTPHeaderName.authorization, value: try await signer.authorization(origin: endpoint.origin))
            } catch {
                logger.error("cannot sign a VAPID token", metadata: [LogKey.error: "\(error)"])
                return .failed(reason: .relay(.providerTokenSigning), status: nil)
            }
            request.method = .POST
            request.headers.add(name: HTTPHeaderName.contentEncoding, value: "aes128gcm")
            request.headers.add(name: HTTPHeaderName.contentType, value: "application/octet-stream")
            request.headers.add(name: HTTPHeaderName.ttl, value: String(ttl(push)))
            request.headers.add(name: HTTPHeaderName.urgency, value: Self.urgency(push))
            if let topic = Self.topic(push.collapseID) { request.headers.add(name: HTTPHeaderName.topic, value: topic) }
            request.body = .bytes(ByteBuffer(bytes: bytes))
        case .wakeUp(let version):
            request.method = .PUT
            request.headers.add(name: HTTPHeaderName.contentType, value: "application/x-www-form-urlencoded")
            request.body = .bytes(ByteBuffer(string: "version=\(version)"))
        }
        let http: HTTPClient
        switch await endpoints.client(for: endpoint) {
        case .success(let client): http = client
        case .failure(let refusal): return refusal.result
        }
        do {
            let response = try await http.execute(
                request, timeout: .milliseconds(requestTimeout.saturatingMilliseconds))
            // Push services explain errors in JSON (autopush's errno) or text; the status
            // says what the relay acts on. The body is read, bounded, and dropped.
            _ = await collectBounded(response.body, limit: Self.maxResponseBytes)
            let headers = HPACKHeaders(httpHeaders: response.headers)
            return Self.result(
                status: Int(response.status.code), location: headers.first(name: HTTPHeaderName.location),
                retryAfter: retryAfter(headers))
        } catch {
            return transportFailure(error, token: endpoint.url, logger: logger)
        }
    }

    /// Seconds the push service should keep the message for an offline device.
    func ttl(_ push: ProviderPush) -> Int64 {
        let fallback = configuration?.defaultTTLSeconds ?? 2_419_200
        guard let expiresAt = push.expiresAt else { return fallback }
        return min(max(expiresAt.saturatingSubtract(Int64(Date().timeIntervalSince1970)), 0), fallback)
    }

    /// RFC 8030 §5.3: `high` for what the user should see now, `normal` for the rest
    /// (removals, read markers), so a phone on battery is not woken for them.
    static func urgency(_ push: ProviderPush) -> String {
        push.delivery.fcmPriority == .known(.high) ? "high" : "normal"
    }

    /// RFC 8030 §5.4: a topic is at most 32 characters of the base64url alphabet; a
    /// collapse id that is not one is left out rather than sent and refused.
    static func topic(_ collapseID: String?) -> String? {
        guard let collapseID, !collapseID.isEmpty, collapseID.utf8.count <= 32,
            collapseID.utf8.allSatisfy({ Base64URL.isAlphabet($0) })
        else { return nil }
        return collapseID
    }

    /// RFC 8030 §5 and §6, and what autopush, FCM's and Apple's Web Push services answer.
    static func result(status: Int, location: String?, retryAfter: Duration?) -> SendResult {
        let reason = ProviderReason.webPush(status: status)
        switch status {
        case 200...299:
            let id = location.flatMap { $0.utf8.count <= 512 ? $0 : nil }
            return .sent(status: status, providerMessageID: id)
        case 300...399:
            return .failed(reason: .relay(.endpointRedirected), status: status)
        case 404, 410:
            // The subscription expired or was removed.
            return .invalidToken(reason: reason, status: status, timestampMs: nil)
        case 413:
            return .failed(reason: .relay(.payloadTooLarge), status: status)
        case 429, 500...599:
            return .retry(reason: reason, status: status, retryAfter: retryAfter)
        default:
            // 400 (bad headers), 401/403 (VAPID refused: the key or the subscription's
            // applicationServerKey differ): resending the same request changes nothing.
            return .failed(reason: reason, status: status)
        }
    }

    public func shutdown() async {
        await endpoints.shutdown()
    }
}
