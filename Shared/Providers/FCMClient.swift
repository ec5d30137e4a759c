import AsyncHTTPClient
import Foundation
import JWTKit
import LogKeys
import Logging
import NIOCore
import NIOHPACK
import NIOHTTP1
import PushModels

/// A Google service-account key file, the fields FCM's OAuth flow needs.
public struct ServiceAccount: Decodable, Sendable {
    public var clientEmail: String
    public var privateKey: String
    public var privateKeyID: String
    public var tokenURI: String
    public var projectID: String?

    enum CodingKeys: String, CodingKey {
        case clientEmail = "client_email"
        case privateKey = "private_key"
        case privateKeyID = "private_key_id"
        case tokenURI = "token_uri"
        case projectID = "project_id"
    }
}

public struct FCMConfiguration: Sendable {
    /// `https://fcm.googleapis.com`.
    public var baseURL: String
    public var serviceAccount: ServiceAccount
    public var projectID: String
    public var caFile: String?
    /// HTTP/2 connections at most; a second opens only when the first has no free stream.
    public var connections: Int
    public var requestTimeout: Duration

    public init(
        baseURL: String, serviceAccount: ServiceAccount, projectID: String? = nil, caFile: String? = nil,
        connections: Int = 2, requestTimeout: Duration = .seconds(15)
    ) throws {
        self.baseURL = baseURL
        self.serviceAccount = serviceAccount
        guard let project = projectID ?? serviceAccount.projectID, !project.isEmpty else {
            throw ProviderSetupError("FCM project id: not configured and not in the service account file")
        }
        self.projectID = project
        self.caFile = caFile
        self.connections = max(1, connections)
        self.requestTimeout = requestTimeout
    }
}

/// The claims of the RS256 assertion exchanged for an OAuth2 access token.
struct GoogleAssertionClaims: JWTPayload {
    var iss: IssuerClaim
    var scope: String
    var aud: AudienceClaim
    var iat: IssuedAtClaim
    var exp: ExpirationClaim

    func verify(using algorithm: some JWTAlgorithm) throws {}
}

/// Exchanges a signed assertion for an access token and caches it until shortly before expiry.
actor FCMAccessTokens {
    static let scope = "https://www.googleapis.com/auth/firebase.messaging"

    private let configuration: FCMConfiguration
    private let http: HTTPClient
    private let keys = JWTKeyCollection()
    private var loaded = false
    private var current: (token: String, expires: ContinuousClock.Instant)?
    private var refreshing: Task<(String, ContinuousClock.Instant), any Error>?

    init(configuration: FCMConfiguration, http: HTTPClient) {
        self.configuration = configuration
        self.http = http
    }

    func token() async throws -> String {
        if let current, current.expires - .seconds(120) > .now { return current.token }
        if let refreshing { return try await refreshing.value.0 }
        let task = Task { try await self.fetch() }
        refreshing = task
        defer { refreshing = nil }
        let fresh = try await task.value
        current = fresh
        return fresh.0
    }

    func invalidate() { current = nil }

    private func fetch() async throws -> (String, ContinuousClock.Instant) {
        let account = configuration.serviceAccount
        if !loaded {
            let key = try Insecure.RSA.PrivateKey(pem: account.privateKey)
            await keys.add(rsa: key, digestAlgorithm: .sha256, kid: JWKIdentifier(string: account.privateKeyID))
            loaded = true
        }
        let now = Date()
        let claims = GoogleAssertionClaims(
            iss: IssuerClaim(value: account.clientEmail), scope: Self.scope,
            aud: AudienceClaim(value: account.tokenURI),
            iat: IssuedAtClaim(value: now), exp: ExpirationClaim(value: now.addingTimeInterval(3600)))
        let assertion = try await keys.sign(claims, kid: JWKIdentifier(string: account.privateKeyID))
        var request = HTTPClientRequest(url: account.tokenURI)
        request.method = .POST
        request.headers.add(name: HTTPHeaderName.contentType, value: "application/x-www-form-urlencoded")
        request.body = .bytes(
            ByteBuffer(
                string: "grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer&assertion=\(assertion)"))
        let response = try await http.execute(request, timeout: .seconds(15))
        let body = try await response.body.collect(upTo: 64 * 1024)
        guard response.status == .ok else {
            throw ProviderSetupError("OAuth token endpoint answered \(response.status.code)")
        }
        let token = try JSONDecoder().decode(AccessToken.self, from: Data(body.readableBytesView))
        return (token.accessToken, .now + .seconds(token.expiresIn))
    }

    struct AccessToken: Decodable {
        var accessToken: String
        var expiresIn: Int

        enum CodingKeys: String, CodingKey {
            case accessToken = "access_token"
            case expiresIn = "expires_in"
        }
    }
}

/// Sends data-only messages through FCM HTTP v1.
public final class FCMClient: PushProviderClient {
    public let provider = Provider.fcm
    private let configuration: FCMConfiguration
    private let http: PushHTTP2Client
    /// For the OAuth token endpoint only.
    private let oauthHTTP: HTTPClient
    private let tokens: FCMAccessTokens
    private let logger: Logger

    public init(configuration: FCMConfiguration, logger: Logger) throws {
        _ = try Insecure.RSA.PrivateKey(pem: configuration.serviceAccount.privateKey)
        self.configuration = configuration
        self.http = try PushHTTP2Client(
            configuration: .init(
                baseURL: configuration.baseURL, caFile: configuration.caFile,
                maxConnections: configuration.connections),
            logger: logger)
        self.oauthHTTP = try makeHTTPClient(caFile: configuration.caFile, connectTimeout: .seconds(10))
        self.tokens = FCMAccessTokens(configuration: configuration, http: oauthHTTP)
        self.logger = logger
    }

    public func send(_ push: ProviderPush) async -> SendResult {
        let message: [UInt8]
        if push.bodyForm == .message {
            guard let built = Self.message(fields: push.body, push: push) else {
                return .failed(reason: .relay(.invalidData), status: nil)
            }
            message = built
        } else {
            guard let built = dataMessage(push) else { return .failed(reason: .relay(.invalidData), status: nil) }
            if built.isEmpty { return .failed(reason: .relay(.messageTooBig), status: nil) }
            message = built
        }
        return await post(message, push: push)
    }

    /// The android block every message gets: the priority, the time left, the collapse key
    /// (each only when the push has one).
    static func androidDefaults(_ push: ProviderPush) -> [String: JSONValue] {
        var android: [String: JSONValue] = [:]
        if let priority = push.delivery.fcmPriority { android["priority"] = .string(priority.name.uppercased()) }
        if let expiresAt = push.expiresAt {
            let ttl = max(0, expiresAt - Int64(Date().timeIntervalSince1970))
            android["ttl"] = .string("\(ttl)s")
        }
        if let collapse = push.collapseID { android["collapse_key"] = .string(collapse) }
        return android
    }

    /// A message from its own fields (gorush's form): the token added, and the android
    /// block's priority, ttl and collapse key filled in where the fields leave them out.
    static func message(fields body: [UInt8], push: ProviderPush) -> [UInt8]? {
        guard var fields = (try? Wire.decode(JSONValue.self, from: body))?.objectValue else { return nil }
        // Only what the push sets: a message without them keeps FCM's defaults (normal
        // priority, four weeks), as gorush sends it.
        let defaults = androidDefaults(push)
        if !defaults.isEmpty {
            var android = fields["android"]?.objectValue ?? [:]
            for (key, value) in defaults where android[key] == nil { android[key] = value }
            fields["android"] = .object(android)
        }
        fields["token"] = .string(push.token)
        return Wire.canonical(.object(["message": .object(fields), "validate_only": .bool(push.validateOnly)]))
    }

    /// The data message the encryptor's data object goes in; nil when the body is not an
    /// object of strings, empty when it is over FCM's 4096 bytes.
    func dataMessage(_ push: ProviderPush) -> [UInt8]? {
        // The encryptor built the data object (string values only); its exact size (keys
        // and values, as FCM counts it) needs a parse only when the bytes come near the limit.
        guard push.body.first == UInt8(ascii: "{"), push.body.last == UInt8(ascii: "}") else { return nil }
        if push.body.count > 4096 {
            guard let data = (try? Wire.decode(JSONValue.self, from: push.body))?.objectValue,
                data.values.allSatisfy({ $0.stringValue != nil })
            else { return nil }
            let dataSize = data.reduce(0) { $0 + $1.key.utf8.count + ($1.value.stringValue?.utf8.count ?? 0) }
            guard dataSize <= 4096 else { return [] }
        }
        // `{"message":{"android":…,"data":…,"token":…},"validate_only":false}`, keys sorted,
        // with the body's bytes spliced in as the encryptor built them.
        var message = Array(#"{"message":{"android":"#.utf8)
        message += Wire.canonical(.object(Self.androidDefaults(push)))
        message += Array(#","data":"#.utf8)
        message += push.body
        message += Array(#","token":"#.utf8)
        message += Wire.canonical(.string(push.token))
        message += Array((push.validateOnly ? #"},"validate_only":true}"# : #"},"validate_only":false}"#).utf8)
        return message
    }

    private func post(_ message: [UInt8], push: ProviderPush) async -> SendResult {
        let bearer: String
        do {
            bearer = try await tokens.token()
        } catch {
            logger.error("cannot obtain FCM access token", metadata: [LogKey.error: "\(error)"])
            return .retry(reason: .relay(.oauthUnavailable), status: nil, retryAfter: .seconds(5))
        }
        var request = http.request(
            path: "/v1/projects/\(configuration.projectID)/messages:send", body: ByteBuffer(bytes: message))
        request.headers.add(name: HTTPHeaderName.authorization, value: "Bearer \(bearer)")
        request.headers.add(name: HTTPHeaderName.contentType, value: "application/json")
        do {
            let response = try await http.execute(request, timeout: configuration.requestTimeout)
            let status = response.status
            // The relay's JSON reader, not Foundation's: every success answer is read here.
            let body = try? Wire.decode(JSONValue.self, from: Array(response.body.readableBytesView))
            if status == 200 {
                return .sent(status: status, providerMessageID: body?["name"]?.stringValue)
            }
            let error = FCMError(json: body)
            if status == 401 && error.code != .known(.thirdPartyAuthError) { await tokens.invalidate() }
            return error.result(status: status, retryAfter: retryAfter(response.headers))
        } catch {
            return transportFailure(error, token: push.token, logger: logger)
        }
    }

    public func shutdown() async {
        await http.shutdown()
        try? await oauthHTTP.shutdown()
    }
}

/// An FCM v1 error body: `error.status`, `error.message`, and the FcmError `errorCode`.
struct FCMError: Equatable {
    var code: Named<FCMErrorCode>
    var message: String

    init(json: JSONValue?) {
        let error = json?["error"]
        message = error?["message"]?.stringValue ?? ""
        var code = error?["status"]?.stringValue ?? FCMErrorCode.unspecifiedError.rawValue
        for detail in error?["details"]?.arrayValue ?? [] {
            if detail["@type"]?.stringValue == "type.googleapis.com/google.firebase.fcm.v1.FcmError",
                let errorCode = detail["errorCode"]?.stringValue
            {
                code = errorCode
            }
        }
        self.code = Named(code)
    }

    /// docs/protocols.md §3: what each FCM error means for the token and for retrying.
    func result(status: Int, retryAfter: Duration?) -> SendResult {
        let reason = ProviderReason.fcm(code)
        switch code {
        case .known(.unregistered), .known(.senderIDMismatch):
            return .invalidToken(reason: reason, status: status, timestampMs: nil)
        case .known(.invalidArgument):
            // Only a bad registration token kills the device; other invalid arguments are payload bugs.
            if message.lowercased().contains("registration token") {
                return .invalidToken(reason: reason, status: status, timestampMs: nil)
            }
            return .failed(reason: reason, status: status)
        case .known(.quotaExceeded):
            return .retry(reason: reason, status: status, retryAfter: max(retryAfter ?? .seconds(60), .seconds(60)))
        case .known(.unavailable), .known(.internal):
            return .retry(reason: reason, status: status, retryAfter: retryAfter)
        case .known(.unauthenticated):
            return .retry(reason: reason, status: status, retryAfter: nil)
        default:
            if status >= 500 || status == 429 { return .retry(reason: reason, status: status, retryAfter: retryAfter) }
            return .failed(reason: reason, status: status)
        }
    }
}
