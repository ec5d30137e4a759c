import PushModels
import RedisClient

/// Where one device's push stands, as `GET /v1/notifications/{id}` reports it.
public struct DeviceDeliveryStatus: Sendable, Equatable {
    public enum State: String, Sendable, CaseIterable {
        /// Accepted by ingest; no stage has reported on it yet.
        case accepted
        /// A provider answer (or its absence) deferred it: `attempts` so far, the next at `nextAttemptAtMs`.
        case retrying
        /// Not sent: the device is unknown, invalid, or its preferences said no (`reason`).
        case skipped
        /// Accepted by the provider (`providerMessageID`: APNs `apns-id`, FCM `name`).
        case sent
        /// The provider called the token dead (`reason`: its answer).
        case invalidToken = "invalid_token"
        /// Its time to live ran out before a provider took it.
        case expired
        /// Given up without a dead-letter record (refused by the provider, or by a stage).
        case failed
        /// Given up and kept on the dead-letter topic for an operator to re-drive.
        case deadLettered = "dead_lettered"
        /// A pipeline dry run: the provider checked the message without delivering it
        /// (FCM's and Huawei's `validate_only`) and would take it.
        case validated
        /// A pipeline dry run to a provider that has no check-only mode: built and
        /// encrypted, not sent.
        case checked
    }

    public var state: State
    /// When the state was reached (ms since the epoch).
    public var atMs: Int64
    public var provider: Provider?
    public var reason: String?
    public var providerMessageID: String?
    public var httpStatus: Int?
    public var attempts: Int?
    public var nextAttemptAtMs: Int64?

    public init(
        _ state: State, atMs: Int64, provider: Provider? = nil, reason: String? = nil,
        providerMessageID: String? = nil, httpStatus: Int? = nil, attempts: Int? = nil, nextAttemptAtMs: Int64? = nil
    ) {
        self.state = state
        self.atMs = atMs
        self.provider = provider
        self.reason = reason
        self.providerMessageID = providerMessageID
        self.httpStatus = httpStatus
        self.attempts = attempts
        self.nextAttemptAtMs = nextAttemptAtMs
    }

    /// How far along it is: a report never replaces one further along (records of
    /// several topics arrive in any order), and between final states the later one wins,
    /// a dead letter over the failure reported with it.
    public var rank: Int {
        switch state {
        case .accepted: 0
        case .retrying: 1
        case .skipped, .sent, .invalidToken, .expired, .failed, .validated, .checked: 2
        case .deadLettered: 3
        }
    }

    /// Whether `self` replaces `current`: a further rank, or a later time among final states.
    public func replaces(_ current: DeviceDeliveryStatus) -> Bool {
        Self.replaces(rank: rank, atMs: atMs, currentRank: current.rank, currentAtMs: current.atMs)
    }

    static func replaces(rank: Int, atMs: Int64, currentRank: Int, currentAtMs: Int64) -> Bool {
        if rank >= 2 {
            return currentRank < 2 || atMs > currentAtMs || (atMs == currentAtMs && rank > currentRank)
        }
        return currentRank < 2 && (rank > currentRank || (rank == currentRank && atMs >= currentAtMs))
    }

    /// The fields as stored and answered (`device_id` is the caller's to add).
    public var json: JSONValue {
        var fields: [String: JSONValue] = ["state": .string(state.rawValue), "at_ms": .int(atMs)]
        if let provider { fields["provider"] = .string(provider.rawValue) }
        if let reason { fields["reason"] = .string(reason) }
        if let providerMessageID { fields["provider_message_id"] = .string(providerMessageID) }
        if let httpStatus { fields["http_status"] = .int(Int64(httpStatus)) }
        if let attempts { fields["attempts"] = .int(Int64(attempts)) }
        if let nextAttemptAtMs { fields["next_attempt_at_ms"] = .int(nextAttemptAtMs) }
        return .object(fields)
    }

    /// Reads the stored form back; nil for anything else.
    public init?(json: JSONValue) {
        guard let fields = json.objectValue, let state = fields["state"]?.stringValue.flatMap(State.init(rawValue:)),
            let atMs = fields["at_ms"]?.intValue
        else { return nil }
        self.init(
            state, atMs: atMs, provider: fields["provider"]?.stringValue.flatMap(Provider.init(rawValue:)),
            reason: fields["reason"]?.stringValue, providerMessageID: fields["provider_message_id"]?.stringValue,
            httpStatus: fields["http_status"]?.intValue.flatMap { Int(exactly: $0) },
            attempts: fields["attempts"]?.intValue.flatMap { Int(exactly: $0) },
            nextAttemptAtMs: fields["next_attempt_at_ms"]?.intValue)
    }
}

/// One fact about a notification, from one record of the pipeline's topics.
public struct DeliveryStatusUpdate: Sendable, Equatable {
    public var notification: NotificationID
    public var realm: RealmID
    /// The server that sent it: known from `push.requests` only.
    public var server: ServerID?
    /// When ingest accepted it: known from `push.requests` only.
    public var acceptedAtMs: Int64?
    /// The device it is about; nil for the notification as a whole (a request no stage
    /// could open, for example).
    public var device: DeviceID?
    public var status: DeviceDeliveryStatus?
    /// The devices the request targets, each `accepted` until a stage reports on it:
    /// known from `push.requests` only.
    public var targets: [DeviceID]?

    public init(
        notification: NotificationID, realm: RealmID, server: ServerID? = nil, acceptedAtMs: Int64? = nil,
        device: DeviceID? = nil, status: DeviceDeliveryStatus?, targets: [DeviceID]? = nil
    ) {
        self.notification = notification
        self.realm = realm
        self.server = server
        self.acceptedAtMs = acceptedAtMs
        self.device = device
        self.status = status
        self.targets = targets
    }
}

/// What the relay knows of one notification.
public struct NotificationStatus: Sendable, Equatable {
    public var realm: RealmID
    public var server: ServerID?
    public var acceptedAtMs: Int64?
    public var devices: [DeviceID: DeviceDeliveryStatus]
    /// The notification as a whole, when a stage reported on it without a device.
    public var overall: DeviceDeliveryStatus?
    /// More devices were reported than a notification keeps (`maxDevices`).
    public var truncated: Bool

    public init(
        realm: RealmID, server: ServerID?, acceptedAtMs: Int64?, devices: [DeviceID: DeviceDeliveryStatus],
        overall: DeviceDeliveryStatus?, truncated: Bool
    ) {
        self.realm = realm
        self.server = server
        self.acceptedAtMs = acceptedAtMs
        self.devices = devices
        self.overall = overall
        self.truncated = truncated
    }
}

/// How long and how much delivery status is kept.
public struct DeliveryStatusLimits: Sendable, Equatable {
    public var ttlSeconds: Int
    /// Devices kept per notification; more are counted as `truncated`.
    public var maxDevices: Int
    /// Notifications kept per realm; the oldest are dropped first.
    public var maxPerRealm: Int

    public init(ttlSeconds: Int = 86_400, maxDevices: Int = 1000, maxPerRealm: Int = 100_000) {
        self.ttlSeconds = ttlSeconds
        self.maxDevices = maxDevices
        self.maxPerRealm = maxPerRealm
    }
}

/// Delivery status per notification, written by feedback from the pipeline's topics and
/// read by ingest for the realm that sent it.
public protocol DeliveryStatusStore: Sendable {
    /// Applies a batch of facts; each at most once in effect, whatever their order.
    func record(_ updates: [DeliveryStatusUpdate]) async throws
    func status(of notification: NotificationID) async throws -> NotificationStatus?
}

/// No delivery status at all: every notification is unknown (tests of other concerns).
public struct NoDeliveryStatus: DeliveryStatusStore {
    public init() {}
    public func record(_ updates: [DeliveryStatusUpdate]) async throws {}
    public func status(of notification: NotificationID) async throws -> NotificationStatus? { nil }
}
