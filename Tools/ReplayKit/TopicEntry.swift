import Foundation
import Kafka
import PushModels

/// One record of any pipeline topic, read generically: the JSON value plus the fields
/// filters, summaries and traces need. Reading the JSON rather than a fixed struct
/// means every schema version decodes: a field an old version lacks is just nil.
public struct TopicEntry: Sendable {
    public enum Kind: String, Sendable, Codable {
        case request, outbound, retry, deadLetter = "dead_letter", delivery, feedback, hook, unknown
    }

    public var topic: String
    public var partition: Int32
    public var offset: Int64
    public var timestampMs: Int64
    public var key: String?
    public var headers: [(name: String, value: [UInt8])]
    public var value: JSONValue
    /// The value exactly as it was on the topic.
    public var raw: [UInt8]
    public var kind: Kind

    public init(record: KafkaRecord, topics: TopicNames = TopicNames()) throws {
        topic = record.topic
        partition = record.partition
        offset = record.offset
        timestampMs = record.timestampMs
        key = record.key.map { String(decoding: $0, as: UTF8.self) }
        headers = record.headers
        value = try Wire.decode(JSONValue.self, from: record.value)
        raw = record.value
        kind = Self.kind(of: record.topic, value: value, topics: topics)
    }

    public init(
        topic: String, partition: Int32 = 0, offset: Int64 = 0, timestampMs: Int64, value: JSONValue,
        topics: TopicNames = TopicNames()
    ) {
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.timestampMs = timestampMs
        self.key = nil
        self.headers = []
        self.value = value
        self.raw = Wire.canonical(value)
        self.kind = Self.kind(of: topic, value: value, topics: topics)
    }

    /// By topic name first (names are configurable, so by shape when the name is unknown).
    static func kind(of topic: String, value: JSONValue, topics: TopicNames) -> Kind {
        switch topic {
        case topics.requests: return .request
        case topics.outbound: return .outbound
        case topics.deadLetter: return .deadLetter
        case topics.deliveries: return .delivery
        case topics.feedback: return .feedback
        case topics.hooks: return .hook
        case _ where topic.hasPrefix(topics.retryPrefix): return .retry
        default: break
        }
        if value["cause"] != nil, value["record"] != nil { return .deadLetter }
        if value["server_uuid"] != nil, value["delivery"]?["outcome"] != nil { return .hook }
        if value["outcome"] != nil { return .delivery }
        if value["token_fingerprint"] != nil { return .feedback }
        if value["kind"] != nil, value["server_uuid"] != nil { return .request }
        if value["token"] != nil || value["sealed_token"] != nil,
            value["body"] != nil || value["body_json"] != nil || value["sealed_body"] != nil
        {
            return value["not_before_ms"] != nil ? .retry : .outbound
        }
        return .unknown
    }

    /// The push itself for outbound, retry and dead-letter records.
    public var push: JSONValue? {
        switch kind {
        case .outbound, .retry: value
        case .deadLetter: value["record"]
        default: nil
        }
    }

    /// A `push.hooks` record's failed push, as it was on `push.deliveries`.
    public var hookedDelivery: JSONValue? { kind == .hook ? value["delivery"] : nil }

    private func field(_ name: String) -> JSONValue? { value[name] ?? push?[name] ?? hookedDelivery?[name] }

    public var notificationID: String? {
        field("notification_id")?.stringValue
            ?? headers.first { $0.name == "notification_id" }.map { String(decoding: $0.value, as: UTF8.self) }
    }
    public var realmUUID: String? { field("realm_uuid")?.stringValue }
    public var userID: Int64? { field("user_id")?.intValue }
    public var deviceID: Int64? { field("device_id")?.intValue }
    public var provider: String? { field("provider")?.stringValue }
    /// Deliveries: their outcome. Other topics: what the record means for the push.
    public var outcome: String? {
        switch kind {
        case .delivery: value["outcome"]?.stringValue
        case .deadLetter: "dead_letter"
        case .retry: "retry"
        case .feedback: "invalidated"
        case .hook: "hook"
        default: nil
        }
    }
    public var reason: String? {
        value["reason"]?.stringValue ?? value["last_error"]?.stringValue ?? push?["last_error"]?.stringValue
            ?? hookedDelivery?["reason"]?.stringValue
    }
    /// Device ids a record concerns: its own, or a request's listed devices and items.
    public var deviceIDs: [Int64] {
        if let id = deviceID { return [id] }
        var ids = value["device_ids"]?.arrayValue?.compactMap(\.intValue) ?? []
        ids += value["items"]?.arrayValue?.compactMap { $0["device_id"]?.intValue } ?? []
        return ids
    }
}

/// What to keep. Every set criterion must match.
public struct EntryFilter: Sendable {
    public var realm: String?
    public var user: Int64?
    public var device: Int64?
    public var notification: String?
    public var provider: String?
    public var outcome: String?
    public var reason: String?

    public init(
        realm: String? = nil, user: Int64? = nil, device: Int64? = nil, notification: String? = nil,
        provider: String? = nil, outcome: String? = nil, reason: String? = nil
    ) {
        self.realm = realm
        self.user = user
        self.device = device
        self.notification = notification
        self.provider = provider
        self.outcome = outcome
        self.reason = reason
    }

    public func matches(_ e: TopicEntry) -> Bool {
        if let realm, e.realmUUID != realm { return false }
        if let user, e.userID != user { return false }
        if let device, !e.deviceIDs.contains(device) { return false }
        if let notification, e.notificationID != notification { return false }
        if let provider, e.provider != provider { return false }
        if let outcome, e.outcome != outcome { return false }
        if let reason, e.reason != reason { return false }
        return true
    }

    /// A cheap pre-check on the `notification_id` header, before decoding JSON.
    public func mayMatch(_ record: KafkaRecord) -> Bool {
        guard let notification, let header = record.header(RecordHeader.notificationID) else { return true }
        return String(decoding: header, as: UTF8.self) == notification
    }
}

/// Removes what operators must not see by default: tokens (kept as `abcd…wxyz`),
/// ciphertext and sealed payloads (kept as their length).
public enum Redaction {
    public static func redact(_ value: JSONValue) -> JSONValue {
        switch value {
        case .object(let fields):
            var out: [String: JSONValue] = [:]
            for (key, field) in fields {
                switch (key, field) {
                case ("token", .string(let token)): out[key] = .string(DeviceToken.redact(token))
                case ("encrypted_data", .string(let s)), ("box", .string(let s)):
                    out[key] = .string("[redacted \(s.count) chars]")
                default: out[key] = redact(field)
                }
            }
            return .object(out)
        case .array(let items): return .array(items.map(redact))
        default: return value
        }
    }
}

extension TopicEntry {
    /// One JSON line: where the record sits, when, and its value (redacted unless asked).
    public func jsonLine(showSecrets: Bool) -> String {
        let line: JSONValue = .object([
            "topic": .string(topic), "partition": .int(Int64(partition)), "offset": .int(offset),
            "timestamp": .string(ISOTime.format(timestampMs)), "kind": .string(kind.rawValue),
            "value": showSecrets ? value : Redaction.redact(value),
        ])
        return String(decoding: Wire.canonical(line), as: UTF8.self)
    }
}

/// ISO 8601 times in UTC with milliseconds.
public enum ISOTime {
    public static func format(_ ms: Int64) -> String {
        let f = ISO8601DateFormatter()
        f.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        return f.string(from: Date(timeIntervalSince1970: Double(ms) / 1000))
    }

    /// Parses `2026-11-22T10:00:00Z`, with or without fractional seconds or an offset.
    public static func parse(_ text: String) -> Int64? {
        let f = ISO8601DateFormatter()
        for options: ISO8601DateFormatter.Options in [
            [.withInternetDateTime, .withFractionalSeconds], [.withInternetDateTime],
        ] {
            f.formatOptions = options
            if let date = f.date(from: text) { return Int64((date.timeIntervalSince1970 * 1000).rounded()) }
        }
        return nil
    }
}
