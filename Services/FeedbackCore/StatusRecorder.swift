import DeviceState
import Kafka
import Logging
import PushModels
import ServiceKit

/// Reads `push.requests`, the retry topics, `push.deliveries` and `push.deadletter`
/// (group `pushrelay-feedback.status`) into each notification's delivery status, which
/// ingest answers `GET /v1/notifications/{id}` from. The other stages write nothing more
/// for it: every fact is already on a topic. Records of different topics arrive in any
/// order; the store keeps, per device, the state furthest along (`DeviceDeliveryStatus.rank`).
public struct StatusRecorder: Sendable {
    let store: any DeliveryStatusStore
    let topics: TopicNames
    let retryTopics: Set<String>
    let logger: Logger

    /// Facts older than this are not recorded: their status would have expired already.
    let maxAgeMs: Int64
    let now: @Sendable () -> Int64

    public init(
        store: any DeliveryStatusStore, topics: TopicNames, retryStages: Int, maxAgeSeconds: Int, logger: Logger,
        now: @escaping @Sendable () -> Int64 = { Wire.nowMillis() }
    ) {
        self.store = store
        self.topics = topics
        self.retryTopics = Set((1...max(1, retryStages)).map(topics.retry))
        self.maxAgeMs = Int64(max(0, maxAgeSeconds)).saturatingMultiply(1000)
        self.now = now
        self.logger = logger
    }

    /// The topics it reads.
    public var subscribed: [String] {
        [topics.requests, topics.deliveries, topics.deadLetter] + retryTopics.sorted()
    }

    /// One fetch: every record's facts in one write per notification. A batch whose write
    /// fails is read again; writing the same facts twice changes nothing.
    public func handleBatch(_ records: [KafkaRecord]) async -> [RecordDisposition] {
        // A new group starts at the topics' earliest records, and operators replay old ones:
        // what is past the status's lifetime is not written back into Redis for another one.
        let oldest = now().saturatingSubtract(maxAgeMs)
        let updates = records.flatMap(updates(from:)).filter {
            ($0.acceptedAtMs ?? $0.status?.atMs ?? oldest) >= oldest
        }
        if !updates.isEmpty {
            let written: Bool? = await untilSuccess("record delivery status", logger: logger) {
                try await store.record(updates)
                return true
            }
            guard written != nil else { return records.map { _ in .abandoned } }
        }
        return records.map { _ in .done }
    }

    func updates(from record: KafkaRecord) -> [DeliveryStatusUpdate] {
        switch record.topic {
        case topics.requests:
            guard let request = decodeRecord(PushRequestRecord.self, from: record, logger: logger) else { return [] }
            return Self.accepted(request)
        case topics.deliveries:
            guard let delivery = decodeRecord(DeliveryRecord.self, from: record, logger: logger),
                let status = Self.status(of: delivery)
            else { return [] }
            return [
                DeliveryStatusUpdate(
                    notification: delivery.notificationID, realm: delivery.realmUUID, device: delivery.deviceID,
                    status: status)
            ]
        case topics.deadLetter:
            guard let dead = decodeRecord(DeadLetterRecord.self, from: record, logger: logger),
                let status = Self.status(of: dead)
            else { return [] }
            return [
                DeliveryStatusUpdate(
                    notification: dead.record.notificationID, realm: dead.record.realmUUID,
                    device: dead.record.deviceID, status: status)
            ]
        case let topic where retryTopics.contains(topic):
            guard let push = decodeRecord(OutboundRecord.self, from: record, logger: logger) else { return [] }
            let status = DeviceDeliveryStatus(
                .retrying, atMs: record.timestampMs, provider: push.provider, reason: push.lastError,
                attempts: push.attempts, nextAttemptAtMs: push.notBeforeMs)
            return [
                DeliveryStatusUpdate(
                    notification: push.notificationID, realm: push.realmUUID, device: push.deviceID, status: status)
            ]
        default:
            return []
        }
    }

    /// What ingest accepted: the notification's realm, server and time, and the target
    /// devices the request names (each `accepted` until a stage reports on it).
    static func accepted(_ request: PushRequestRecord) -> [DeliveryStatusUpdate] {
        let devices: [DeviceID]
        switch request.request {
        case .native(_, let ids, _, _): devices = ids ?? []
        case .passThrough(let items): devices = items.map(\.deviceID)
        case .legacy(_, let ids, _): devices = ids
        case .gorush(let ids, _): devices = ids
        }
        return [
            DeliveryStatusUpdate(
                notification: request.notificationID, realm: request.realmUUID, server: request.serverUUID,
                acceptedAtMs: request.acceptedAtMs, status: nil, targets: devices)
        ]
    }

    /// A final outcome as a status; nil for a pair already sent (its first outcome stands).
    static func status(of delivery: DeliveryRecord) -> DeviceDeliveryStatus? {
        let attempts = delivery.attempts > 0 ? delivery.attempts : nil
        func status(_ state: DeviceDeliveryStatus.State, reason: String?) -> DeviceDeliveryStatus {
            DeviceDeliveryStatus(
                state, atMs: delivery.completedAtMs, provider: delivery.provider, reason: reason,
                providerMessageID: delivery.providerMessageID, httpStatus: delivery.httpStatus, attempts: attempts)
        }
        switch delivery.outcome {
        case .sent where delivery.sendMode == .validateOnly:
            let local = delivery.reason?.name == StageReason.checkedLocally.rawValue
            return status(local ? .checked : .validated, reason: nil)
        case .sent: return status(.sent, reason: delivery.reason?.name)
        case .alreadySent: return nil
        case .invalidToken where delivery.attempts == 0:
            // The encryptor skipped a device already known dead.
            return status(.skipped, reason: StageReason.deviceInvalid.rawValue)
        case .invalidToken: return status(.invalidToken, reason: delivery.reason?.name)
        case .unknownDevice, .filtered: return status(.skipped, reason: delivery.reason?.name)
        case .expired: return status(.expired, reason: delivery.reason?.name)
        case .failed: return status(.failed, reason: delivery.reason?.name)
        }
    }

    /// A push given up and kept for re-driving; nil for one that expired (it stays expired).
    static func status(of dead: DeadLetterRecord) -> DeviceDeliveryStatus? {
        guard dead.cause != .expired else { return nil }
        return DeviceDeliveryStatus(
            .deadLettered, atMs: dead.deadAtMs, provider: dead.record.provider, reason: dead.lastError,
            httpStatus: dead.httpStatus, attempts: dead.attempts)
    }
}

extension DeliveryStatusLimits {
    /// `PUSHRELAY_DELIVERY_STATUS_*`.
    public init(reader: SettingsReader) throws {
        self.init(
            ttlSeconds: try reader.int("pushrelay.delivery.status.ttl.seconds", default: 86_400),
            maxDevices: try reader.int("pushrelay.delivery.status.max.devices", default: 1000),
            maxPerRealm: try reader.int("pushrelay.delivery.status.max.per.realm", default: 100_000))
    }
}
