/// Why a push ended as it did, as `push.deliveries` and the delivery metrics name it: the
/// relay's own reason, a device's preference that filtered it, or a provider's answer.
/// One type for every stage; on the wire it is its `name`, byte for byte as before, and
/// a name this build does not know reads as `.provider`.
///
/// Not `ExpressibleByStringLiteral`: a reason is written by its case, so a misspelt one
/// does not compile.
public enum OutcomeReason: Sendable, Hashable, CustomStringConvertible {
    /// Given by the relay itself (a stage, or the dispatcher about a send).
    case stage(StageReason)
    /// The device's own preferences (Status push server) say not to notify.
    case preference(PreferenceReason)
    /// A provider's answer by its name (`ProviderReason.name`: APNs `reason`, FCM error
    /// code, `webpush_410`, …). A record does not say which provider's vocabulary a name
    /// is from, so it is kept as given.
    case provider(String)

    /// Reads a reason from its name.
    public init(name: String) {
        if let stage = StageReason(rawValue: name) {
            self = .stage(stage)
        } else if let preference = PreferenceReason(rawValue: name) {
            self = .preference(preference)
        } else {
            self = .provider(name)
        }
    }

    /// The name records and metric labels carry.
    public var name: String {
        switch self {
        case .stage(let reason): reason.rawValue
        case .preference(let reason): reason.rawValue
        case .provider(let name): name
        }
    }

    public var description: String { name }
}

/// The relay's own reasons, whichever stage gives them: for a push a stage did not send,
/// and for a send the dispatcher gave up on or deferred before or without a provider's
/// answer. One vocabulary, so each name is declared once (`DeliveryOutcome` takes
/// `unknown_device` and `expired` from here). The spellings differ by when each was
/// added; they are wire names and stay as they are.
public enum StageReason: String, Sendable, Hashable, CaseIterable {
    /// The target device is not registered (or not in the request's realm, or not of its API).
    case unknownDevice = "unknown_device"
    /// A native request named a device of another user or realm.
    case notUsersDevice = "not_users_device"
    /// The device is registered for another provider than the request's item names.
    case providerMismatch = "provider_mismatch"
    /// The request's sealed content does not open with any pipeline key this stage holds.
    case pipelineKeyUnavailable = "pipeline_key_unavailable"
    /// A `push.outbound` (or retry) record that does not decode.
    case malformedRecord = "malformed_record"
    /// A `push.requests` record that does not decode.
    case malformedRequest = "malformed_request"
    /// A native device with no push key to encrypt with.
    case noPushKey = "no_push_key"
    /// The request fails to encrypt the same way on every attempt (a damaged device
    /// record, for example): accounted for as failed rather than retried for ever.
    case encryptionFailed = "encryption_failed"
    /// The content or body is larger than the device's provider takes (once encrypted).
    case payloadTooLarge = "payload_too_large"
    /// An invalid device whose invalidation gave no reason.
    case deviceInvalid = "device_invalid"
    /// Sent again after a send whose answer never came: the device may get it twice.
    case resentAfterInterruptedSend = "resent_after_interrupted_send"
    /// A pipeline dry run's push to a provider without a check-only mode: built, and not sent.
    case checkedLocally = "checked_locally"

    // The dispatcher's, about a send.

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
    /// The record's body is not what its provider needs (for example not a Web Push body).
    case invalidBody = "invalid_body"
}

/// Why a Status device's preferences filtered a push (docs/api/status.md §4).
public enum PreferenceReason: String, Sendable, Hashable, CaseIterable {
    case disabled
    case contactsOnly = "contacts_only"
    case blockedAuthor = "blocked_author"
    case blockedChat = "blocked_chat"
    case mutedChat = "muted_chat"
    case mentionsBlocked = "mentions_blocked"
    case mentionNotAllowed = "mention_not_allowed"
}
