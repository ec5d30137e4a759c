import Kafka
import Metrics
import PushModels

/// How each record type goes onto its topic: JSON value, partition key, and the
/// `notification_id` header that lets tools trace a notification across topics.
extension KafkaOutgoing {
    public static func outbound(_ record: OutboundRecord, topic: String) throws -> KafkaOutgoing {
        KafkaOutgoing(
            topic: topic, key: record.partitionKey, value: try Wire.encode(record),
            headers: [(RecordHeader.notificationID, Array(record.notificationID.utf8))])
    }

    public static func delivery(_ record: DeliveryRecord, topic: String) throws -> KafkaOutgoing {
        Counter(
            label: "pushrelay_deliveries_total",
            dimensions: [
                ("outcome", record.outcome.rawValue), ("provider", record.provider?.rawValue ?? "none"),
                ("reason", record.reason ?? ""),
            ]
        ).increment()
        return KafkaOutgoing(
            topic: topic, key: record.deviceID.map { "\($0)" } ?? record.realmUUID, value: try Wire.encode(record),
            headers: [(RecordHeader.notificationID, Array(record.notificationID.utf8))])
    }

    public static func deadLetter(_ record: DeadLetterRecord, topic: String) throws -> KafkaOutgoing {
        Counter(label: "pushrelay_dead_letters_total", dimensions: [("cause", record.cause.rawValue)]).increment()
        return KafkaOutgoing(
            topic: topic, key: record.record.partitionKey, value: try Wire.encode(record),
            headers: [(RecordHeader.notificationID, Array(record.record.notificationID.utf8))])
    }

    public static func feedback(_ record: FeedbackRecord, topic: String) throws -> KafkaOutgoing {
        KafkaOutgoing(
            topic: topic, key: "\(record.deviceID)", value: try Wire.encode(record),
            headers: [(RecordHeader.notificationID, Array(record.notificationID.utf8))])
    }
}

/// Counts a consumed record per topic and stage.
public func countRecordIn(topic: String) {
    Counter(label: "pushrelay_records_in_total", dimensions: [("topic", topic)]).increment()
}

extension KafkaProducer {
    /// Sends records and waits for every acknowledgement, then counts them per topic.
    public func publish(_ records: [KafkaOutgoing]) async throws {
        try await sendAll(records)
        var perTopic: [String: Int] = [:]
        for record in records { perTopic[record.topic, default: 0] += 1 }
        for (topic, count) in perTopic {
            Counter(label: "pushrelay_records_out_total", dimensions: [("topic", topic)]).increment(by: count)
        }
    }
}
