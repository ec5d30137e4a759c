import AsyncHTTPClient
import Foundation
import LogKeys
import Logging
import NIOCore
import NIOHPACK
import NIOHTTP1
import PushModels

/// Huawei Push Kit (HMS Core) server API settings.
///
/// Huawei's references: "Sending Downlink Messages",
/// https://developer.huawei.com/consumer/en/doc/HMSCore-References-V5/https-send-api-0000001050986197-V5
/// (`POST /v1/{appid}/messages:send`, a message body of at most 4096 bytes without the
/// tokens), and "OAuth 2.0-based Authentication" (client credentials at
/// `oauth-login.cloud.huawei.com/oauth2/v3/token`, error codes at
/// https://developer.huawei.com/consumer/en/doc/doccenter-references/api/account-server-error-code/).
public struct HMSConfiguration: Sendable {
    public static let defaultBaseURL = "https://push-api.cloud.huawei.com"
    public static let defaultTokenURL = "https://oauth-login.cloud.huawei.com/oauth2/v3/token"

    /// Push Kit's origin; the send path is appended (`/v1/{appID}/messages:send`).
    public var baseURL: String
    /// Huawei's OAuth 2.0 token endpoint.
    public var tokenURL: String
    /// The app id in the send path (AppGallery Connect's App ID).
    public var appID: String
    /// The OAuth client id (for Push Kit, the App ID again) and its secret (the App secret).
    public var clientID: String
    public var clientSecret: String
    /// Trust roots instead of the system's (the fakes' CA).
    public var caFile: String?
    /// The deadline of one send, and of one token request.
    public var requestTimeout: Duration

    /// Both URLs must be https: the client secret and the access token travel on them.
    public init(
        baseURL: String = HMSConfiguration.defaultBaseURL, tokenURL: String = HMSConfiguration.defaultTokenURL,
        appID: String, clientID: String? = nil, clientSecret: String, caFile: String? = nil,
        requestTimeout: Duration = .seconds(15)
    ) throws {
        var base = baseURL
        while base.hasSuffix("/") { base.removeLast() }
        guard isHTTPSURL(base), isHTTPSURL(tokenURL) else {
            throw ProviderSetupError("HMS base and token URLs must be https URLs with a host")
        }
        // The app id goes into the request path as it is.
        guard Syntax.isZulipAppID(appID) else {
            throw ProviderSetupError("HMS app id must be ASCII letters, digits, '.' and '-'")
        }
        let client = clientID ?? appID
        guard Syntax.isVisibleASCII(client, maxBytes: 256), !clientSecret.isEmpty else {
            throw ProviderSetupError("HMS client id and client secret must be set")
        }
        self.baseURL = base
        self.tokenURL = tokenURL
        self.appID = appID
        self.clientID = client
        self.clientSecret = clientSecret
        self.caFile = caFile
        self.requestTimeout = requestTimeout
    }
}

/// Sends data messages through Push Kit's v1 server API: the push's body bytes are the
/// message's `data` string, as the app's `onMessageReceived` reads it.
public final class HMSClient: PushProviderClient {
    public let provider = Provider.hms
    /// Huawei's limit on the message body (without the tokens); the data string is held
    /// to it before anything is sent.
    static let maxDataBytes = 4096
    /// Push Kit keeps a message for an offline device at most 15 days.
    static let maxTTLSeconds: Int64 = 1_296_000

    private let configuration: HMSConfiguration
    /// One client for the token endpoint and the sends; redirects are not followed.
    private let http: HTTPClient
    private let tokens: ClientCredentialsTokens
    private let logger: Logger

    public init(configuration: HMSConfiguration, logger: Logger) throws {
        self.configuration = configuration
        self.http = try makeHTTPClient(caFile: configuration.caFile, connectTimeout: .seconds(10))
        self.tokens = ClientCredentialsTokens(
            tokenURL: configuration.tokenURL,
            form: [
                ("grant_type", "client_credentials"), ("client_id", configuration.clientID),
                ("client_secret", configuration.clientSecret),
            ],
            http: http, timeout: configuration.requestTimeout)
        self.logger = logger
    }

    public func send(_ push: ProviderPush) async -> SendResult {
        guard push.body.count <= Self.maxDataBytes else {
            return .failed(reason: .relay(.payloadTooLarge), status: nil)
        }
        let message: [UInt8]
        if push.bodyForm == .message {
            guard let fields = (try? Wire.decode(JSONValue.self, from: push.body))?.objectValue else {
                return .failed(reason: .relay(.invalidBody), status: nil)
            }
            message = Self.message(push, fields: fields, now: Date())
        } else {
            guard let data = String(validating: push.body, as: UTF8.self) else {
                return .failed(reason: .relay(.invalidBody), status: nil)
            }
            message = Self.message(push, fields: ["data": .string(data)], now: Date())
        }
        let bearer: String
        do {
            bearer = try await tokens.token()
        } catch {
            logger.error("cannot obtain an HMS access token", metadata: [LogKey.error: "\(error)"])
            return .retry(reason: .relay(.oauthUnavailable), status: nil, retryAfter: .seconds(5))
        }
        var request = HTTPClientRequest(url: "\(configuration.baseURL)/v1/\(configuration.appID)/messages:send")
        request.method = .POST
        request.headers.add(name: HTTPHeaderName.authorization, value: "Bearer \(bearer)")
        request.headers.add(name: HTTPHeaderName.contentType, value: "application/json; charset=utf-8")
        request.body = .bytes(ByteBuffer(bytes: message))
        do {
            let response = try await http.execute(
                request, timeout: .milliseconds(configuration.requestTimeout.saturatingMilliseconds))
            let status = Int(response.status.code)
            let body = await collectBounded(response.body, limit: 64 * 1024)
            let answer = HMSAnswer(status: status, body: body)
            if answer.invalidatesAccessToken { await tokens.invalidate(bearer) }
            return answer.result(
                token: push.token, retryAfter: retryAfter(HPACKHeaders(httpHeaders: response.headers)))
        } catch {
            return transportFailure(error, token: push.token, logger: logger)
        }
    }

    public func shutdown() async {
        try? await http.shutdown()
    }

    /// `{"message":{"android":{…},"data":"<body>","token":["<token>"]},"validate_only":false}`:
    /// the message's fields (the data string alone, or gorush's whole form) with the
    /// token, and the android block's urgency, ttl and collapse key where the fields leave
    /// them out. `collapse_key` is Huawei's integer (-1 to 100); a collapse id that is not
    /// one is left out rather than guessed.
    static func message(_ push: ProviderPush, fields: [String: JSONValue], now: Date) -> [UInt8] {
        var android = fields["android"]?.objectValue ?? [:]
        if android["urgency"] == nil, let priority = push.delivery.fcmPriority {
            android["urgency"] = priority == .known(.high) ? "HIGH" : "NORMAL"
        }
        if let expiresAt = push.expiresAt, android["ttl"] == nil {
            let left = expiresAt.saturatingSubtract(Int64(now.timeIntervalSince1970))
            android["ttl"] = .string("\(min(max(left, 1), maxTTLSeconds))s")
        }
        if let key = push.collapseID.flatMap(collapseKey), android["collapse_key"] == nil {
            android["collapse_key"] = .int(key)
        }
        var message = fields
        if !android.isEmpty { message["android"] = .object(android) }
        message["token"] = [.string(push.token)]
        return Wire.canonical(["validate_only": .bool(push.validateOnly), "message": .object(message)])
    }

    static func collapseKey(_ text: String) -> Int64? {
        if text == "-1" { return -1 }
        guard let value = Syntax.parseUInt64(Substring(text)), value <= 100 else { return nil }
        return Int64(value)
    }
}

/// One answer of `messages:send`, read as far as it can be: a body that is not JSON, or
/// has no `code`, is judged by its HTTP status alone.
struct HMSAnswer: Equatable {
    var status: Int
    var code: Named<HMSResultCode>?
    var msg: String?
    var requestID: String?

    init(status: Int, code: Named<HMSResultCode>? = nil, msg: String? = nil, requestID: String? = nil) {
        self.status = status
        self.code = code
        self.msg = msg
        self.requestID = requestID
    }

    init(status: Int, body: [UInt8]) {
        self.status = status
        let json = try? Wire.decode(JSONValue.self, from: body)
        // Huawei writes the code as a string; a number is read the same way.
        switch json?["code"] {
        case .string(let text)? where Syntax.isVisibleASCII(text, maxBytes: 32): code = Named(text)
        case .int(let number)?: code = Named(String(number))
        default: code = nil
        }
        msg = json?["msg"]?.stringValue
        requestID = json?["requestId"]?.stringValue.flatMap { Syntax.isVisibleASCII($0, maxBytes: 128) ? $0 : nil }
    }

    /// The access token was refused: the next send fetches a new one.
    var invalidatesAccessToken: Bool {
        code == .known(.oauthAuthenticationError) || code == .known(.oauthTokenExpired)
            || (code == nil && status == 401)
    }

    func result(token: String, retryAfter: Duration?) -> SendResult {
        let reason = ProviderReason.hms(code.map(HMSReason.code) ?? .httpStatus(status))
        switch code {
        case .known(.success)?:
            return .sent(status: status, providerMessageID: requestID)
        case .known(.partialSuccess)?:
            return partialResult(token: token, reason: reason)
        case .known(.invalidToken)?:
            return .invalidToken(reason: reason, status: status, timestampMs: nil)
        case .known(.oauthAuthenticationError)?, .known(.oauthTokenExpired)?:
            return .retry(reason: reason, status: status, retryAfter: nil)
        case .known(.internalError)?, .known(.oauthServiceFailed)?:
            return .retry(reason: reason, status: status, retryAfter: retryAfter)
        case nil where status == 200:
            // Accepted, by the status; the body says nothing more.
            return .sent(status: status, providerMessageID: nil)
        case nil where status == 401:
            return .retry(reason: reason, status: status, retryAfter: nil)
        default:
            // Flow control is HTTP 503, whatever the code.
            if status >= 500 || status == 429 { return .retry(reason: reason, status: status, retryAfter: retryAfter) }
            return .failed(reason: reason, status: status)
        }
    }

    /// Sent to one token, a partial success is that token's fate: named among the illegal
    /// tokens, it is dead; counted as a failure without a name, the push failed.
    private func partialResult(token: String, reason: ProviderReason) -> SendResult {
        let detail = msg.flatMap { try? Wire.decode(JSONValue.self, from: Array($0.utf8)) }
        var illegal: [String] = detail?["illegal_tokens"]?.arrayValue?.compactMap(\.stringValue) ?? []
        for (_, group) in detail?["illegalTokens"]?.objectValue ?? [:] {
            illegal += group.arrayValue?.compactMap(\.stringValue) ?? []
        }
        if illegal.contains(token) || (detail == nil && msg?.contains(token) == true) {
            return .invalidToken(reason: reason, status: status, timestampMs: nil)
        }
        if let failures = detail?["failure"]?.intValue, failures == 0 {
            return .sent(status: status, providerMessageID: requestID)
        }
        return .failed(reason: reason, status: status)
    }
}

// MARK: - OAuth 2.0 client credentials (Huawei and WNS)

/// An OAuth 2.0 client-credentials grant (RFC 6749 §4.4) as Huawei's and Microsoft's
/// token endpoints take it: the fields form-encoded in a POST, the access token cached
/// until shortly before `expires_in` ends, one refresh in flight however many sends wait.
actor ClientCredentialsTokens {
    struct Failure: Error, CustomStringConvertible {
        var description: String
    }

    /// Lifetimes outside this range are clamped: a provider's number, not trusted as is.
    static let lifetimes: ClosedRange<Int64> = 1...2_592_000
    /// Assumed when the endpoint gives no `expires_in`.
    static let defaultLifetime: Int64 = 300

    private let tokenURL: String
    private let form: [(String, String)]
    private let http: HTTPClient
    private let timeout: Duration
    private var current: (token: String, refreshAt: ContinuousClock.Instant)?
    private var refreshing: Task<(token: String, refreshAt: ContinuousClock.Instant), any Error>?

    init(tokenURL: String, form: [(String, String)], http: HTTPClient, timeout: Duration) {
        self.tokenURL = tokenURL
        self.form = form
        self.http = http
        self.timeout = timeout
    }

    func token() async throws -> String {
        if let current, current.refreshAt > .now { return current.token }
        if let refreshing { return try await refreshing.value.token }
        let task = Task { try await self.fetch() }
        refreshing = task
        defer { refreshing = nil }
        let fresh = try await task.value
        current = fresh
        return fresh.token
    }

    /// Forgets `token` after the provider refused it (and only that one: an answer to an
    /// older request must not discard a newer token).
    func invalidate(_ token: String) {
        if current?.token == token { current = nil }
    }

    private func fetch() async throws -> (token: String, refreshAt: ContinuousClock.Instant) {
        var request = HTTPClientRequest(url: tokenURL)
        request.method = .POST
        request.headers.add(name: HTTPHeaderName.contentType, value: "application/x-www-form-urlencoded")
        request.body = .bytes(ByteBuffer(bytes: formURLEncoded(form)))
        let response = try await http.execute(request, timeout: .milliseconds(timeout.saturatingMilliseconds))
        let body = await collectBounded(response.body, limit: 64 * 1024)
        let json = try? Wire.decode(JSONValue.self, from: body)
        guard response.status.code == 200 else {
            // `error` is an OAuth code (Microsoft) or a number (Huawei); never the secret.
            let error: String
            switch json?["error"] {
            case .string(let code)? where Syntax.isVisibleASCII(code, maxBytes: 64): error = code
            case .int(let code)?: error = String(code)
            default: error = "none"
            }
            throw Failure(description: "token endpoint answered \(response.status.code), error \(error)")
        }
        guard let token = json?["access_token"]?.stringValue, Syntax.isVisibleASCII(token, maxBytes: 8192) else {
            throw Failure(description: "token endpoint answered without a usable access_token")
        }
        let lifetime = min(
            max(json?["expires_in"]?.intValue ?? Self.defaultLifetime, Self.lifetimes.lowerBound),
            Self.lifetimes.upperBound)
        // Refreshed two minutes early, or half-way through a short lifetime.
        let early = min(120, lifetime / 2)
        return (token, ContinuousClock.now + Duration.seconds(lifetime - early))
    }
}

/// Reads at most `limit` bytes of an answer and leaves the rest unread (the connection is
/// then closed): no provider answer holds more memory than that. A body that breaks off
/// is kept as far as it came; the status has already been given.
func collectBounded(_ body: HTTPClientResponse.Body, limit: Int) async -> [UInt8] {
    var bytes: [UInt8] = []
    do {
        for try await chunk in body {
            let room = limit - bytes.count
            if chunk.readableBytes >= room {
                bytes += chunk.readableBytesView.prefix(room)
                break
            }
            bytes += chunk.readableBytesView
        }
    } catch {
        return bytes
    }
    return bytes
}

/// `https://` with a host.
func isHTTPSURL(_ text: String) -> Bool {
    guard text.lowercased().hasPrefix("https://"), let components = URLComponents(string: text),
        let host = components.host, !host.isEmpty
    else { return false }
    return true
}
