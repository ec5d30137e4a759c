import Kafka
import Metrics
import PushModels

/// How each record type goes onto its topic: JSON value, partition key, and the
/// `notification_id` header that lets tools trace a notification across topics.
extension KafkaOutgoing {
    public static func outbound(_ record: OutboundRecord, topic: String) throws -> KafkaOutgoing {
        KafkaOutgoing(
            topic: topic, key: record.partitionKey, value: try Wire.encode(record),
            headers: [(RecordHeader.notificationID, Array(record.notificationID.rawValue.utf8))])
    }

    /// An outcome, counted in `pushrelay_deliveries_total` once acknowledged.
    public static func delivery(_ record: DeliveryRecord, topic: String) throws -> KafkaOutgoing {
        KafkaOutgoing(
            topic: topic, key: record.deviceID.map { "\($0)" } ?? record.realmUUID.rawValue,
            value: try Wire.encode(record),
            headers: [(RecordHeader.notificationID, Array(record.notificationID.rawValue.utf8))],
            tally: RelayMetrics.deliveryTally(record))
    }

    /// A failed push for a server's feedback hook, keyed by the device: one device's
    /// reports stay in order.
    public static func hook(_ record: HookDeliveryRecord, topic: String) throws -> KafkaOutgoing {
        KafkaOutgoing(
            topic: topic, key: record.delivery.deviceID.map { "\($0)" } ?? record.delivery.realmUUID.rawValue,
            value: try Wire.encode(record),
            headers: [(RecordHeader.notificationID, Array(record.delivery.notificationID.rawValue.utf8))])
    }

    /// A dead letter, counted in `pushrelay_dead_letters_total` once acknowledged.
    public static func deadLetter(_ record: DeadLetterRecord, topic: String) throws -> KafkaOutgoing {
        KafkaOutgoing(
            topic: topic, key: record.record.partitionKey, value: try Wire.encode(record),
            headers: [(RecordHeader.notificationID, Array(record.record.notificationID.rawValue.utf8))],
            tally: .init(
                label: RelayMetrics.Name.deadLetters, dimensions: [(RelayMetrics.Label.cause, record.cause.rawValue)]))
    }

    public static func feedback(_ record: FeedbackRecord, topic: String) throws -> KafkaOutgoing {
        KafkaOutgoing(
            topic: topic, key: "\(record.deviceID)", value: try Wire.encode(record),
            headers: [(RecordHeader.notificationID, Array(record.notificationID.rawValue.utf8))])
    }
}

extension KafkaProducer {
    /// Sends records and waits for every acknowledgement; then, and only then, counts
    /// them: per topic, and each record's own tally (outcomes, dead letters). A publish
    /// that fails counts nothing, so the retry that follows never counts twice.
    public func publish(_ records: [KafkaOutgoing]) async throws {
        try await sendAll(records)
        RelayMetrics.acknowledged(records)
    }
}
