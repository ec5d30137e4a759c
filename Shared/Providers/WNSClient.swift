import AsyncHTTPClient
import Foundation
import LogKeys
import Logging
import NIOCore
import NIOHPACK
import NIOHTTP1
import PushModels

/// Windows Push Notification Services settings.
///
/// Microsoft's reference: "Push notification service request and response headers",
/// https://learn.microsoft.com/en-us/windows/apps/design/shell/tiles-and-notifications/push-request-response-headers
/// (the access token from `login.live.com/accesstoken.srf` with `grant_type=client_credentials`
/// and `scope=notify.windows.com`; a POST to the channel URI with `X-WNS-Type`; raw
/// payloads of at most 5000 bytes), and the response codes in
/// https://learn.microsoft.com/en-us/windows/apps/windows-app-sdk/notifications/push-notifications/troubleshooting
public struct WNSConfiguration: Sendable {
    public static let defaultTokenURL = "https://login.live.com/accesstoken.srf"

    /// Microsoft's OAuth 2.0 token endpoint.
    public var tokenURL: String
    /// The package SID (`ms-app://s-1-15-2-…`) and the client secret of the app's registration.
    public var clientID: String
    public var clientSecret: String
    /// Host names a channel URI may have: each one itself, or any name under it (a
    /// dot-separated suffix). Only these ever see the access token.
    public var allowedHostSuffixes: [String]
    /// Trust roots for the token endpoint instead of the system's (the fakes' CA). Channel
    /// connections are the endpoint source's.
    public var caFile: String?
    /// The deadline of one send, and of one token request.
    public var requestTimeout: Duration

    public init(
        tokenURL: String = WNSConfiguration.defaultTokenURL, clientID: String, clientSecret: String,
        allowedHostSuffixes: [String] = ["notify.windows.com"], caFile: String? = nil,
        requestTimeout: Duration = .seconds(15)
    ) throws {
        guard isHTTPSURL(tokenURL) else { throw ProviderSetupError("WNS token URL must be an https URL with a host") }
        guard !clientID.isEmpty, !clientSecret.isEmpty else {
            throw ProviderSetupError("WNS client id (package SID) and client secret must be set")
        }
        let suffixes = allowedHostSuffixes.map { suffix in
            var host = suffix.lowercased()
            while host.hasPrefix(".") { host.removeFirst() }
            return host
        }
        guard !suffixes.isEmpty, suffixes.allSatisfy({ !$0.isEmpty && Syntax.isHostname($0) }) else {
            throw ProviderSetupError("WNS allowed host suffixes must be host names")
        }
        self.tokenURL = tokenURL
        self.clientID = clientID
        self.clientSecret = clientSecret
        self.allowedHostSuffixes = suffixes
        self.caFile = caFile
        self.requestTimeout = requestTimeout
    }

    /// Whether a channel URI's (lower-case) host may be called: equal to an allowed
    /// suffix, or ending in "." and the suffix, so `notify.windows.com.evil.com` and
    /// `evilnotify.windows.com` are not.
    public func allows(host: String) -> Bool {
        allowedHostSuffixes.contains { host == $0 || host.hasSuffix("." + $0) }
    }
}

/// Sends raw notifications (`wns/raw`) to WNS channel URIs. The token is the channel URI,
/// which the device chose: it is called only when its host is one of WNS's, and through
/// the endpoint source, which checks where it resolves and pins the address.
public final class WNSClient: PushProviderClient {
    public let provider = Provider.wns
    /// WNS refuses larger payloads with 413.
    static let maxPayloadBytes = 5000

    private let configuration: WNSConfiguration
    private let endpoints: any EndpointClientSource
    /// For the token endpoint only.
    private let oauthHTTP: HTTPClient
    private let tokens: ClientCredentialsTokens
    private let logger: Logger

    public init(configuration: WNSConfiguration, endpoints: any EndpointClientSource, logger: Logger) throws {
        self.configuration = configuration
        self.endpoints = endpoints
        self.oauthHTTP = try makeHTTPClient(caFile: configuration.caFile, connectTimeout: .seconds(10))
        self.tokens = ClientCredentialsTokens(
            tokenURL: configuration.tokenURL,
            form: [
                ("grant_type", "client_credentials"), ("client_id", configuration.clientID),
                ("client_secret", configuration.clientSecret), ("scope", "notify.windows.com"),
            ],
            http: oauthHTTP, timeout: configuration.requestTimeout)
        self.logger = logger
    }

    public func send(_ push: ProviderPush) async -> SendResult {
        guard let endpoint = try? PushEndpoint(push.token, field: "token"), configuration.allows(host: endpoint.host)
        else {
            return .failed(reason: .relay(.endpointRefused), status: nil)
        }
        guard push.body.count <= Self.maxPayloadBytes else {
            return .failed(reason: .relay(.payloadTooLarge), status: nil)
        }
        let bearer: String
        do {
            bearer = try await tokens.token()
        } catch {
            logger.error("cannot obtain a WNS access token", metadata: [LogKey.error: "\(error)"])
            return .retry(reason: .relay(.oauthUnavailable), status: nil, retryAfter: .seconds(5))
        }
        let http: HTTPClient
        switch await endpoints.client(for: endpoint) {
        case .success(let client): http = client
        case .failure(let refusal): return refusal.result
        }
        var request = HTTPClientRequest(url: endpoint.url)
        request.method = .POST
        request.headers.add(name: HTTPHeaderName.authorization, value: "Bearer \(bearer)")
        request.headers.add(name: HTTPHeaderName.wnsType, value: "wns/raw")
        request.headers.add(name: HTTPHeaderName.contentType, value: "application/octet-stream")
        // Kept for a device that is offline, until the TTL ends.
        request.headers.add(name: HTTPHeaderName.wnsCachePolicy, value: "cache")
        if let expiresAt = push.expiresAt {
            let left = expiresAt.saturatingSubtract(Int64(Date().timeIntervalSince1970))
            request.headers.add(name: HTTPHeaderName.wnsTTL, value: String(max(left, 1)))
        }
        request.body = .bytes(ByteBuffer(bytes: push.body))
        do {
            let response = try await http.execute(
                request, timeout: .milliseconds(configuration.requestTimeout.saturatingMilliseconds))
            // The body says nothing WNS's headers do not; it is read (bounded) and dropped.
            _ = await collectBounded(response.body, limit: 64 * 1024)
            let headers = HPACKHeaders(httpHeaders: response.headers)
            let answer = WNSAnswer(status: Int(response.status.code), headers: headers)
            if answer.status == 401 { await tokens.invalidate(bearer) }
            return answer.result(retryAfter: retryAfter(headers))
        } catch {
            return transportFailure(error, token: push.token, logger: logger)
        }
    }

    public func shutdown() async {
        try? await oauthHTTP.shutdown()
        await endpoints.shutdown()
    }
}

/// One WNS answer: the HTTP status and the `X-WNS-*` headers that qualify it.
struct WNSAnswer: Equatable {
    var status: Int
    /// `X-WNS-Status`: `received`, `dropped` or `channelthrottled`.
    var notificationStatus: Named<WNSNotificationStatus>?
    var messageID: String?
    /// `X-WNS-Error-Description`, when it is short printable text.
    var errorDescription: String?

    init(
        status: Int, notificationStatus: Named<WNSNotificationStatus>? = nil, messageID: String? = nil,
        errorDescription: String? = nil
    ) {
        self.status = status
        self.notificationStatus = notificationStatus
        self.messageID = messageID
        self.errorDescription = errorDescription
    }

    init(status: Int, headers: HPACKHeaders) {
        func printable(_ name: String, maxBytes: Int) -> String? {
            guard let value = headers.first(name: name)?.trimmingCharacters(in: .whitespaces), !value.isEmpty,
                value.utf8.count <= maxBytes, value.utf8.allSatisfy({ (0x20...0x7e).contains($0) })
            else { return nil }
            return value
        }
        self.init(
            status: status,
            notificationStatus: printable(HTTPHeaderName.wnsStatus, maxBytes: 32).map { Named($0.lowercased()) },
            messageID: printable(HTTPHeaderName.wnsMessageID, maxBytes: 128),
            errorDescription: printable(HTTPHeaderName.wnsErrorDescription, maxBytes: 128))
    }

    /// The provider's reason: its error description, else the status (`wns_404`).
    var reason: ProviderReason { .wns(errorDescription.map(WNSReason.errorDescription) ?? .httpStatus(status)) }

    func result(retryAfter: Duration?) -> SendResult {
        switch status {
        case 200:
            switch notificationStatus {
            // The app server exceeded this channel's rate: not delivered, try later.
            case .known(.channelthrottled)?:
                return .retry(
                    reason: .wns(.notificationStatus(.channelthrottled)), status: status, retryAfter: retryAfter)
            // Accepted and then dropped (an error, or the client refused it).
            case .known(.dropped)?:
                return .failed(reason: .wns(.notificationStatus(.dropped)), status: status)
            default:
                return .sent(status: status, providerMessageID: messageID)
            }
        case 300...399:
            return .failed(reason: .relay(.endpointRedirected), status: status)
        case 401:
            // The access token is invalid or expired: a new one is fetched for the retry.
            return .retry(reason: reason, status: status, retryAfter: nil)
        case 404, 410:
            // Not a channel WNS knows (404), or one that expired (410).
            return .invalidToken(reason: reason, status: status, timestampMs: nil)
        case 413:
            return .failed(reason: .relay(.payloadTooLarge), status: status)
        case 406, 429, 500...599:
            // 406: the cloud service exceeded its throttle limit.
            return .retry(reason: reason, status: status, retryAfter: retryAfter)
        default:
            return .failed(reason: reason, status: status)
        }
    }
}
