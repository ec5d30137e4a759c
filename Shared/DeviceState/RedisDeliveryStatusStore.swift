import Foundation
import PushModels
import RedisClient

/// Delivery status in Redis: one hash per notification (`RedisKeys.deliveryStatus`),
/// each batch's changes to it one script, expiring `ttlSeconds` after it was made; and
/// per realm a sorted set of its notifications by acceptance, trimmed to `maxPerRealm`.
///
/// Fields are short and values positional (`StoredStatus`) so that a notification's hash
/// stays in Redis's compact listpack encoding (values up to 64 bytes): ~420 bytes for a
/// notification to two devices, against ~900 for the same facts as JSON in a hashtable.
/// `r` realm, `s` server, `a` accepted ms, `t` target device ids (comma-separated), `fp`
/// the FCM message-name prefix (`projects/{project}/messages/`), `m` devices past the
/// bound, `all` the notification as a whole, `d:{id}` one device.
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
        let allTargets = updates.lazy.compactMap(\.targets).first ?? []
        let targets = allTargets.prefix(max(0, limits.maxDevices))
        let fcmPrefix = updates.lazy.compactMap { $0.status?.providerMessageID.flatMap(StoredStatus.fcmPrefix) }.first
        var arguments: [RedisArgument] = [
            "EVAL", RedisArgument(Self.recordScript), "1", RedisArgument(keys.deliveryStatus(notification)),
            RedisArgument(limits.ttlSeconds), RedisArgument(limits.maxDevices), RedisArgument(realm),
            RedisArgument(server), RedisArgument(accepted),
            RedisArgument(targets.map { "\($0.rawValue)" }.joined(separator: ",")), RedisArgument(fcmPrefix ?? ""),
            RedisArgument(targets.count < allTargets.count ? "1" : ""),
        ]
        for update in updates {
            guard let status = update.status else { continue }
            arguments.append(RedisArgument(update.device.map { "d:\($0.rawValue)" } ?? "all"))
            arguments.append(RedisArgument(status.rank))
            arguments.append(RedisArgument(status.atMs))
            arguments.append(RedisArgument(StoredStatus.encode(status, fcmPrefix: fcmPrefix)))
        }
        return arguments
    }

    /// KEYS[1] the hash; ARGV ttl, max devices, realm, server, accepted ms, targets, FCM
    /// prefix, truncated flag, then per update (field, rank, at ms, value). A value starts
    /// `rank|at|`: a report replaces a device's only when it is further along, or a final
    /// state that is later (`DeviceDeliveryStatus.replaces`).
    static let recordScript = """
        local key = KEYS[1]
        local ttl, max = tonumber(ARGV[1]), tonumber(ARGV[2])
        local fresh = redis.call('EXISTS', key) == 0
        if ARGV[3] ~= '' then redis.call('HSETNX', key, 'r', ARGV[3]) end
        if ARGV[4] ~= '' then redis.call('HSETNX', key, 's', ARGV[4]) end
        if ARGV[5] ~= '' then redis.call('HSETNX', key, 'a', ARGV[5]) end
        if ARGV[6] ~= '' then redis.call('HSETNX', key, 't', ARGV[6]) end
        if ARGV[7] ~= '' then redis.call('HSETNX', key, 'fp', ARGV[7]) end
        if ARGV[8] ~= '' then redis.call('HSET', key, 'm', '1') end
        local devices = nil
        for i = 9, #ARGV, 4 do
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
          elseif string.sub(field, 1, 2) ~= 'd:' then
            write = true
          else
            if not devices then
              devices = 0
              for _, name in ipairs(redis.call('HKEYS', key)) do
                if string.sub(name, 1, 2) == 'd:' then devices = devices + 1 end
              end
            end
            if devices < max then
              write = true
              devices = devices + 1
            else
              redis.call('HSET', key, 'm', '1')
            end
          end
          if write then redis.call('HSET', key, field, ARGV[i + 3]) end
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
        guard let realm = fields["r"] else { return nil }
        let fcmPrefix = fields["fp"]
        let acceptedAtMs = fields["a"].flatMap { Int64($0) }
        var devices: [DeviceID: DeviceDeliveryStatus] = [:]
        var overall: DeviceDeliveryStatus?
        for (field, value) in fields {
            guard let status = StoredStatus.decode(value, fcmPrefix: fcmPrefix) else { continue }
            if field == "all" {
                overall = status
            } else if field.hasPrefix("d:"), let id = Int64(field.dropFirst(2)) {
                devices[DeviceID(id)] = status
            }
        }
        // Targets no stage has reported on yet: accepted.
        if let acceptedAtMs, let targets = fields["t"] {
            for id in targets.split(separator: ",").compactMap({ Int64($0) }).map({ DeviceID(rawValue: $0) })
            where devices[id] == nil {
                devices[id] = DeviceDeliveryStatus(.accepted, atMs: acceptedAtMs)
            }
        }
        return NotificationStatus(
            realm: RealmID(realm), server: fields["s"].map(ServerID.init), acceptedAtMs: acceptedAtMs,
            devices: devices, overall: overall, truncated: fields["m"] != nil)
    }
}

/// One device's status as a hash value: `rank|at|state|provider|http|attempts|next|reason|id`,
/// empty where absent. The reason never holds `|` (replaced by `/`); the provider's message
/// id comes last and may; an FCM name under the notification's `fp` prefix keeps only
/// what follows it, after `=`, and a UUID (APNs) is kept in 16 bytes of base64url.
enum StoredStatus {
    static let codes: [DeviceDeliveryStatus.State: String] = [
        .accepted: "A", .retrying: "R", .skipped: "K", .sent: "S", .invalidToken: "I", .expired: "E", .failed: "F",
        .deadLettered: "D", .validated: "V", .checked: "C",
    ]
    static let states = Dictionary(uniqueKeysWithValues: codes.map { ($1, $0) })

    /// `projects/{project}/messages/` of an FCM message name.
    static func fcmPrefix(of id: String) -> String? {
        guard id.hasPrefix("projects/"), let range = id.range(of: "/messages/") else { return nil }
        return String(id[..<range.upperBound])
    }

    /// An APNs `apns-id` (a UUID) in 23 bytes instead of 36: `~` (lower case) or `^`
    /// (upper case) and the 16 bytes in unpadded base64url. nil for anything else.
    static func compactUUID(_ id: String) -> String? {
        guard id.utf8.count == 36, let uuid = UUID(uuidString: id) else { return nil }
        let mark: String
        if id == uuid.uuidString.lowercased() {
            mark = "~"
        } else if id == uuid.uuidString {
            mark = "^"
        } else {
            return nil
        }
        let bytes = withUnsafeBytes(of: uuid.uuid) { Data($0) }
        return mark
            + bytes.base64EncodedString().replacingOccurrences(of: "+", with: "-")
            .replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
    }

    static func expandUUID(_ stored: String) -> String? {
        guard stored.utf8.count == 23, let mark = stored.first, mark == "~" || mark == "^" else { return nil }
        let base64 =
            stored.dropFirst().replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/") + "=="
        guard let data = Data(base64Encoded: base64), data.count == 16 else { return nil }
        let uuid = data.withUnsafeBytes { raw in UUID(uuid: raw.loadUnaligned(as: uuid_t.self)) }
        return mark == "~" ? uuid.uuidString.lowercased() : uuid.uuidString
    }

    static func encode(_ status: DeviceDeliveryStatus, fcmPrefix: String?) -> String {
        var id = status.providerMessageID ?? ""
        if status.provider == .fcm, let fcmPrefix, id.hasPrefix(fcmPrefix) {
            id = "=" + id.dropFirst(fcmPrefix.count)
        } else if let compact = compactUUID(id) {
            id = compact
        }
        let parts: [String] = [
            "\(status.rank)", "\(status.atMs)", codes[status.state] ?? "F", status.provider?.rawValue ?? "",
            status.httpStatus.map { "\($0)" } ?? "", status.attempts.map { "\($0)" } ?? "",
            status.nextAttemptAtMs.map { "\($0)" } ?? "",
            (status.reason ?? "").replacingOccurrences(of: "|", with: "/"),
            id,
        ]
        return parts.joined(separator: "|")
    }

    static func decode(_ value: String, fcmPrefix: String?) -> DeviceDeliveryStatus? {
        let parts = value.split(separator: "|", maxSplits: 8, omittingEmptySubsequences: false).map(String.init)
        guard parts.count == 9, let atMs = Int64(parts[1]), let state = states[parts[2]] else { return nil }
        func optional(_ text: String) -> String? { text.isEmpty ? nil : text }
        let provider = optional(parts[3]).flatMap(Provider.init(rawValue:))
        var id = optional(parts[8])
        if provider == .fcm, let stored = id, stored.hasPrefix("="), let fcmPrefix {
            id = fcmPrefix + stored.dropFirst()
        } else if let stored = id, let uuid = expandUUID(stored) {
            id = uuid
        }
        return DeviceDeliveryStatus(
            state, atMs: atMs, provider: provider,
            reason: optional(parts[7]), providerMessageID: id, httpStatus: Int(parts[4]), attempts: Int(parts[5]),
            nextAttemptAtMs: Int64(parts[6]))
    }
}
