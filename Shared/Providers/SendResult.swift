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
        case .sent: DeliveryOutcome.sent.rawValue
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

/// Why a push was refused or deferred: the provider's own reason, or the relay's. Each
/// provider's names are a typed vocabulary; a name a provider adds later is kept as
/// `unknown` within it, never dropped.
public enum ProviderReason: Sendable, Hashable, CustomStringConvertible {
    /// APNs' `reason` (docs/protocols.md §2).
    case apns(Named<APNsReason>)
    /// FCM's `FcmError.errorCode` or `google.rpc` status (docs/protocols.md §3).
    case fcm(Named<FCMErrorCode>)
    /// A Web Push or simple push service's answer. RFC 8030 names none but the HTTP
    /// status, so the status is the reason (`webpush_410`).
    case webPush(status: Int)
    /// Huawei Push Kit's answer (docs/protocols.md §10).
    case hms(HMSReason)
    /// WNS's answer (docs/protocols.md §10).
    case wns(WNSReason)
    /// The relay's own reason: nothing reached the provider, or it did not answer.
    case relay(StageReason)
    /// A reason this build does not know (for example a record's `last_error`).
    case unknown(String)

    /// A reason read back from a record's `last_error`: the relay's own by its name, any
    /// other kept as it was (a provider's name alone does not say which provider).
    public init(recorded name: String) {
        self = StageReason(rawValue: name).map(ProviderReason.relay) ?? .unknown(name)
    }

    /// The name records and metrics carry.
    public var name: String {
        switch self {
        case .apns(let reason): reason.name
        case .fcm(let code): code.name
        case .webPush(let status): "webpush_\(status)"
        case .hms(let reason): reason.name
        case .wns(let reason): reason.name
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

/// Huawei Push Kit's answer to a send (docs/protocols.md §10).
public enum HMSReason: Sendable, Hashable {
    /// The answer's result code (`80300007`, …).
    case code(Named<HMSResultCode>)
    /// An answer without a code, by its HTTP status (`hms_502`).
    case httpStatus(Int)

    public var name: String {
        switch self {
        case .code(let code): code.name
        case .httpStatus(let status): "hms_\(status)"
        }
    }
}

/// Push Kit result codes (the `code` string of every answer) that the relay acts on;
/// Huawei documents more, which read as `Named.unknown` and fail the push.
public enum HMSResultCode: String, Sendable, Hashable, CaseIterable {
    case success = "80000000"
    /// Some tokens failed; `msg` is JSON naming them (`illegal_tokens`, or the newer
    /// `illegalTokens` grouped by cause).
    case partialSuccess = "80100000"
    /// OAuth authentication error: no, or someone else's, access token.
    case oauthAuthenticationError = "80200001"
    /// OAuth token expired.
    case oauthTokenExpired = "80200003"
    /// All tokens are invalid.
    case invalidToken = "80300007"
    /// Huawei's own OAuth service failed.
    case oauthServiceFailed = "80600003"
    /// System internal error.
    case internalError = "81000001"
}

/// WNS's answer to a send (docs/protocols.md §10).
public enum WNSReason: Sendable, Hashable {
    /// A 200 that WNS did not deliver, by its `X-WNS-Status` (`dropped`, `channelthrottled`).
    case notificationStatus(WNSNotificationStatus)
    /// `X-WNS-Error-Description` as WNS wrote it: free text, not a set of names.
    case errorDescription(String)
    /// An answer without a description, by its HTTP status (`wns_404`).
    case httpStatus(Int)

    public var name: String {
        switch self {
        case .notificationStatus(let status): status.rawValue
        case .errorDescription(let text): text
        case .httpStatus(let status): "wns_\(status)"
        }
    }
}

/// WNS's `X-WNS-Status` (docs/protocols.md §10).
public enum WNSNotificationStatus: String, Sendable, Hashable, CaseIterable {
    case received, dropped, channelthrottled
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
