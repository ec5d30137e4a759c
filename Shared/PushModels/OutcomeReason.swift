/// Why a push ended as it did, as `push.deliveries` and the delivery metrics name it: a
/// stage's own reason (no provider was asked), a device's preference that filtered it,
/// or a provider's answer. One type for every stage; on the wire it is its `name`,
/// byte for byte as before, and a name this build does not know reads as `.provider`.
public enum OutcomeReason: Sendable, Hashable, CustomStringConvertible, ExpressibleByStringLiteral {
    /// Decided by a stage of the relay.
    case stage(StageReason)
    /// The device's own preferences (Status push server) say not to notify.
    case preference(PreferenceReason)
    /// A provider's answer, or the dispatcher's reason for one (`ProviderReason.name`:
    /// APNs `reason`, FCM error code, `TransportError`, …).
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

    /// A reason by its name, as records carry it (tests and tools compare against names).
    public init(stringLiteral name: String) { self.init(name: name) }

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

/// Reasons the stages give for a push they did not send.
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
    /// The content is larger than the device's provider takes once encrypted.
    case payloadTooLarge = "payload_too_large"
    /// An invalid device whose invalidation gave no reason.
    case deviceInvalid = "device_invalid"
    /// Sent again after a send whose answer never came: the device may get it twice.
    case resentAfterInterruptedSend = "resent_after_interrupted_send"
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
