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
        case .skipped, .sent, .invalidToken, .expired, .failed: 2
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

    public init(
        notification: NotificationID, realm: RealmID, server: ServerID? = nil, acceptedAtMs: Int64? = nil,
        device: DeviceID? = nil, status: DeviceDeliveryStatus?
    ) {
        self.notification = notification
        self.realm = realm
        self.server = server
        self.acceptedAtMs = acceptedAtMs
        self.device = device
        self.status = status
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

/// Delivery status in Redis: one hash per notification (`RedisKeys.deliveryStatus`),
/// each batch's changes to it one script, expiring `ttlSeconds` after it was made; and
/// per realm a sorted set of its notifications by acceptance, trimmed to `maxPerRealm`.
public struct RedisDeliveryStatusStore: DeliveryStatusStore {
    let redis: RedisClient
    let keys: RedisKeys
    let limits: DeliveryStatusLimits

    public init(redis: RedisClient, keys: RedisKeys, limits: DeliveryStatusLimits) {
        self.redis = redis
        self.keys = keys
        self.limits = limits
    }

    public func record(_ updates: [DeliveryStatusUpdate]) async throws {
        var byNotification: [NotificationID: [DeliveryStatusUpdate]] = [:]
        var order: [NotificationID] = []
        for update in updates {
            if byNotification[update.notification] == nil { order.append(update.notification) }
            byNotification[update.notification, default: []].append(update)
        }
        guard !order.isEmpty else { return }
        var commands: [[RedisArgument]] = []
        var accepted: [RealmID: [(NotificationID, Int64)]] = [:]
        for notification in order {
            let group = byNotification[notification] ?? []
            commands.append(script(notification, group))
            if let first = group.first(where: { $0.acceptedAtMs != nil }), let at = first.acceptedAtMs {
                accepted[first.realm, default: []].append((notification, at))
            }
        }
        let oldest = Wire.nowMillis().saturatingSubtract(Int64(limits.ttlSeconds).saturatingMultiply(1000))
        for (realm, notifications) in accepted {
            var trim: [RedisArgument] = [
                "EVAL", RedisArgument(Self.trimScript), "1", RedisArgument(keys.deliveryStatusIndex(realm: realm)),
                RedisArgument(limits.maxPerRealm), RedisArgument(oldest), RedisArgument(limits.ttlSeconds),
            ]
            for (notification, at) in notifications {
                trim.append(RedisArgument(at))
                trim.append(RedisArgument(notification.rawValue))
            }
            commands.append(trim)
        }
        let replies = try await redis.checkedPipeline(commands)
        // The oldest notifications past a realm's bound: their status goes.
        let evicted = replies.dropFirst(order.count).flatMap { $0.array.compactMap(\.string) }
        if !evicted.isEmpty {
            _ = try await redis.checkedPipeline(
                evicted.map { ["DEL", RedisArgument(keys.deliveryStatus(NotificationID($0)))] })
        }
    }

    /// One notification's updates as one `EVAL` on its hash.
    func script(_ notification: NotificationID, _ updates: [DeliveryStatusUpdate]) -> [RedisArgument] {
        let realm = updates.first?.realm.rawValue ?? ""
        let server = updates.lazy.compactMap(\.server).first?.rawValue ?? ""
        let accepted = updates.lazy.compactMap(\.acceptedAtMs).first.map { "\($0)" } ?? ""
        var arguments: [RedisArgument] = [
            "EVAL", RedisArgument(Self.recordScript), "1", RedisArgument(keys.deliveryStatus(notification)),
            RedisArgument(limits.ttlSeconds), RedisArgument(limits.maxDevices), RedisArgument(realm),
            RedisArgument(server), RedisArgument(accepted),
        ]
        for update in updates {
            guard let status = update.status else { continue }
            arguments.append(RedisArgument(update.device.map { "d:\($0.rawValue)" } ?? "all"))
            arguments.append(RedisArgument(status.rank))
            arguments.append(RedisArgument(status.atMs))
            arguments.append(RedisArgument(bytes: Wire.canonical(status.json)))
        }
        return arguments
    }

    /// KEYS[1] the hash; ARGV ttl, max devices, realm, server, accepted ms, then per
    /// update (field, rank, at ms, JSON). Values are `rank|at|JSON`; `more` marks a
    /// notification with devices past the bound.
    static let recordScript = """
        local key = KEYS[1]
        local ttl, max = tonumber(ARGV[1]), tonumber(ARGV[2])
        local fresh = redis.call('EXISTS', key) == 0
        if ARGV[3] ~= '' then redis.call('HSETNX', key, 'realm', ARGV[3]) end
        if ARGV[4] ~= '' then redis.call('HSETNX', key, 'server', ARGV[4]) end
        if ARGV[5] ~= '' then redis.call('HSETNX', key, 'accepted', ARGV[5]) end
        local devices = nil
        for i = 6, #ARGV, 4 do
          local field, rank, at = ARGV[i], tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2])
          local current = redis.call('HGET', key, field)
          local write = false
          if current then
            local crank, cat = string.match(current, '^(%d+)|(%-?%d+)|')
            crank, cat = tonumber(crank), tonumber(cat)
            if rank >= 2 then
              write = crank < 2 or at > cat or (at == cat and rank > crank)
            else
              write = crank < 2 and (rank > crank or (rank == crank and at >= cat))
            end
          else
            if not devices then
              devices = 0
              for _, name in ipairs(redis.call('HKEYS', key)) do
                if string.sub(name, 1, 2) == 'd:' then devices = devices + 1 end
              end
            end
            if string.sub(field, 1, 2) ~= 'd:' then
              write = true
            elseif devices < max then
              write = true
              devices = devices + 1
            else
              redis.call('HSET', key, 'more', '1')
            end
          end
          if write then redis.call('HSET', key, field, rank .. '|' .. at .. '|' .. ARGV[i + 3]) end
        end
        if fresh then redis.call('EXPIRE', key, ttl) end
        return 1
        """

    /// KEYS[1] a realm's index; ARGV max, oldest kept ms, ttl, then (accepted ms, id)
    /// pairs. Returns the ids dropped past the bound.
    static let trimScript = """
        local key = KEYS[1]
        for i = 4, #ARGV, 2 do redis.call('ZADD', key, 'NX', ARGV[i], ARGV[i + 1]) end
        redis.call('ZREMRANGEBYSCORE', key, '-inf', '(' .. ARGV[2])
        local over = redis.call('ZCARD', key) - tonumber(ARGV[1])
        local dropped = {}
        if over > 0 then
          local popped = redis.call('ZPOPMIN', key, over)
          for i = 1, #popped, 2 do dropped[#dropped + 1] = popped[i] end
        end
        redis.call('EXPIRE', key, ARGV[3])
        return dropped
        """

    public func status(of notification: NotificationID) async throws -> NotificationStatus? {
        let reply = try await redis.command("HGETALL", RedisArgument(keys.deliveryStatus(notification)))
        let items = reply.array.map { $0.string ?? "" }
        guard items.count >= 2 else { return nil }
        var fields: [String: String] = [:]
        for index in stride(from: 0, to: items.count - 1, by: 2) { fields[items[index]] = items[index + 1] }
        guard let realm = fields["realm"] else { return nil }
        var devices: [DeviceID: DeviceDeliveryStatus] = [:]
        var overall: DeviceDeliveryStatus?
        for (field, value) in fields {
            guard let status = Self.decode(value) else { continue }
            if field == "all" {
                overall = status
            } else if field.hasPrefix("d:"), let id = Int64(field.dropFirst(2)) {
                devices[DeviceID(id)] = status
            }
        }
        return NotificationStatus(
            realm: RealmID(realm), server: fields["server"].map(ServerID.init),
            acceptedAtMs: fields["accepted"].flatMap {
                Int64($0)
            }, devices: devices, overall: overall, truncated: fields["more"] != nil)
    }

    /// `rank|at|JSON` back into a status; nil for anything else.
    static func decode(_ value: String) -> DeviceDeliveryStatus? {
        let parts = value.split(separator: "|", maxSplits: 2, omittingEmptySubsequences: false)
        guard parts.count == 3, let json = try? Wire.decode(JSONValue.self, from: Array(parts[2].utf8)) else {
            return nil
        }
        return DeviceDeliveryStatus(json: json)
    }
}

/// No delivery status at all: every notification is unknown (tests of other concerns).
public struct NoDeliveryStatus: DeliveryStatusStore {
    public init() {}
    public func record(_ updates: [DeliveryStatusUpdate]) async throws {}
    public func status(of notification: NotificationID) async throws -> NotificationStatus? { nil }
}
