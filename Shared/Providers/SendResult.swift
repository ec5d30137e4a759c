import PushModels

/// What a provider said about one push, reduced to what the dispatcher must do next.
public enum SendResult: Sendable, Equatable {
    /// Accepted by the provider.
    case sent(status: Int, providerMessageID: String?)
    /// The token is dead: invalidate the device. `timestampMs` is APNs' 410 timestamp.
    case invalidToken(reason: ProviderReason, status: Int, timestampMs: Int64?)
    /// Try again later, not before `retryAfter` when the provider said so.
    case retry(reason: ProviderReason, status: Int?, retryAfter: Duration?)
    /// Will never succeed as sent (bad payload, bad topic, credentials): record it failed.
    case failed(reason: ProviderReason, status: Int?)

    /// The reason's name as records carry it (`sent` for a push that went out).
    public var reasonName: String {
        switch self {
        case .sent: "sent"
        case .invalidToken(let reason, _, _), .retry(let reason, _, _), .failed(let reason, _): reason.name
        }
    }

    /// The reason, for every answer but `sent`.
    public var reason: ProviderReason? {
        switch self {
        case .sent: nil
        case .invalidToken(let reason, _, _), .retry(let reason, _, _), .failed(let reason, _): reason
        }
    }

    /// The provider's HTTP status, when there was an answer.
    public var status: Int? {
        switch self {
        case .sent(let status, _), .invalidToken(_, let status, _): status
        case .retry(_, let status, _), .failed(_, let status): status
        }
    }
}

/// Why a push was refused or deferred: the provider's own reason, or the relay's.
/// Names a build has no case for are kept as `unknown`, never dropped.
public enum ProviderReason: Sendable, Hashable, CustomStringConvertible {
    /// APNs' `reason` (docs/protocols.md §2).
    case apns(APNsReason)
    /// FCM's `FcmError.errorCode` or `google.rpc` status (docs/protocols.md §3).
    case fcm(Named<FCMErrorCode>)
    /// A Web Push or simple push service's answer, by HTTP status (`webpush_410`, …).
    case webPush(String)
    /// Huawei Push Kit's result code (`80300007`, …).
    case hms(String)
    /// WNS's answer (`X-WNS-Error-Description` or the HTTP status).
    case wns(String)
    /// The relay's own reason: nothing reached the provider, or it did not answer.
    case relay(RelayReason)
    /// A reason this build does not know (for example a record's `last_error`).
    case unknown(String)

    /// A reason read back from a record's `last_error`: the relay's own by its name, any
    /// other kept as it was (a provider's name alone does not say which provider).
    public init(recorded name: String) {
        self = RelayReason(rawValue: name).map(ProviderReason.relay) ?? .unknown(name)
    }

    /// The name records and metrics carry.
    public var name: String {
        switch self {
        case .apns(let reason): reason.name
        case .fcm(let code): code.name
        case .webPush(let name), .hms(let name), .wns(let name): name
        case .relay(let reason): reason.rawValue
        case .unknown(let name): name
        }
    }

    public var description: String { name }
}

/// FCM HTTP v1 error codes (docs/protocols.md §3): the `FcmError` codes and the
/// `google.rpc` statuses FCM answers with.
public enum FCMErrorCode: String, Sendable, Hashable, CaseIterable {
    case unspecifiedError = "UNSPECIFIED_ERROR"
    case invalidArgument = "INVALID_ARGUMENT"
    case unregistered = "UNREGISTERED"
    case senderIDMismatch = "SENDER_ID_MISMATCH"
    case quotaExceeded = "QUOTA_EXCEEDED"
    case unavailable = "UNAVAILABLE"
    case `internal` = "INTERNAL"
    case thirdPartyAuthError = "THIRD_PARTY_AUTH_ERROR"
    case unauthenticated = "UNAUTHENTICATED"
    case permissionDenied = "PERMISSION_DENIED"
    case notFound = "NOT_FOUND"
    case resourceExhausted = "RESOURCE_EXHAUSTED"
}

/// Reasons the relay gives itself, with the names records have always carried (the
/// spellings differ by when each was added; they are wire names and stay as they are).
public enum RelayReason: String, Sendable, Hashable, CaseIterable {
    /// The request was written and no answer came (timeout, connection lost, stream
    /// reset): the provider may have the push.
    case transportError = "TransportError"
    /// Nothing reached the provider: no connection (connect, TLS, ALPN), or the request
    /// was never written whole.
    case connectionFailed = "ConnectionFailed"
    /// The provider asked us to slow down; the push was parked.
    case rateLimited = "rate_limited"
    /// No client for the record's provider is configured in this dispatcher.
    case providerNotConfigured = "provider_not_configured"
    /// The APNs provider token could not be signed (bad key).
    case providerTokenSigning = "ProviderTokenSigning"
    /// No FCM OAuth access token could be had.
    case oauthUnavailable = "OAUTH_UNAVAILABLE"
    /// The FCM data object is not a JSON object of strings.
    case invalidData = "INVALID_DATA"
    /// The FCM data object is over 4096 bytes.
    case messageTooBig = "MESSAGE_TOO_BIG"
    /// The record's expiry passed before it could be sent.
    case expired = "expired"
    /// The sealed token does not open for this record.
    case tokenUnreadable = "token_unreadable"
    /// The sealed body does not open for this record.
    case bodyUnreadable = "body_unreadable"
    /// A device-chosen endpoint is not one the relay may call (not https, or it resolves
    /// to a private, loopback, link-local or multicast address that is not allowed).
    case endpointRefused = "endpoint_refused"
    /// A device-chosen endpoint's host does not resolve (retried: DNS may recover).
    case endpointUnresolvable = "endpoint_unresolvable"
    /// The endpoint redirected: push services never do, and redirects are not followed.
    case endpointRedirected = "endpoint_redirected"
    /// The body is larger than the provider takes.
    case payloadTooLarge = "payload_too_large"
    /// The record's body is not what its provider needs (for example not a Web Push body).
    case invalidBody = "invalid_body"
}

/// A push provider: one client per platform, all behind this small protocol, so new
/// platforms (Web Push, HMS, WNS) plug in without touching the dispatcher. A client is
/// given the push opened (`ProviderPush`), never the topic record.
public protocol PushProviderClient: Sendable {
    var provider: Provider { get }
    /// Sends one push. Never throws: transport errors come back as `.retry`.
    func send(_ push: ProviderPush) async -> SendResult
    func shutdown() async
}

/// Errors setting up a provider client (bad key files, bad configuration).
public struct ProviderSetupError: Error, CustomStringConvertible, Sendable {
    public var description: String
    public init(_ description: String) { self.description = description }
}
