import Foundation
import Kafka
import LogKeys
import Logging
import Metrics
import PushModels
import ServiceKit

/// Hands accepted work to `push.requests`. A request is answered only after the
/// broker acknowledged its record, so an accepted notification is never lost.
struct Acceptor: Sendable {
    let publisher: any RecordPublisher
    let topic: String
    /// Where outcomes decided at ingest go (Status notifications the device's preferences filter).
    /// The notify bound. Ingest's producer runs with `message.timeout.ms` set to it, so
    /// librdkafka reports a record it could not deliver by then; that report is the 503.
    let timeout: Duration
    let logger: Logger
    var deliveriesTopic = TopicNames().deliveries

    func publish(_ record: PushRequestRecord, outcomes: [DeliveryRecord] = []) async throws {
        let value = try Wire.encode(record)
        let outgoing = KafkaOutgoing(
            topic: topic, key: record.partitionKey, value: value,
            headers: [("notification_id", Array(record.notificationID.rawValue.utf8))])
        try await publish(
            [outgoing] + outcomes.map { try .delivery($0, topic: deliveriesTopic) }, id: record.notificationID)
    }

    /// Several records at once: all are acknowledged, or the call fails (503).
    func publish(_ records: [PushRequestRecord], outcomes: [DeliveryRecord] = []) async throws {
        guard let first = records.first?.notificationID ?? outcomes.first?.notificationID else { return }
        var messages: [KafkaOutgoing] = []
        for record in records {
            messages.append(
                KafkaOutgoing(
                    topic: topic, key: record.partitionKey, value: try Wire.encode(record),
                    headers: [("notification_id", Array(record.notificationID.rawValue.utf8))]))
        }
        for outcome in outcomes { messages.append(try .delivery(outcome, topic: deliveriesTopic)) }
        try await publish(messages, id: first)
    }

    /// Outcomes alone (nothing to send).
    func publish(outcomes: [DeliveryRecord]) async throws {
        guard let first = outcomes.first else { return }
        try await publish(try outcomes.map { try .delivery($0, topic: deliveriesTopic) }, id: first.notificationID)
    }

    private func publish(_ messages: [KafkaOutgoing], id: NotificationID) async throws {
        var messages = messages
        // The request's span: the stages after ingest continue its trace.
        RelayTracing.stamp(&messages)
        do {
            try await publisher.publish(messages)
        } catch {
            logger.error(
                "could not publish accepted notification",
                metadata: [LogKey.notificationID: "\(id)", LogKey.error: "\(error)"])
            RelayMetrics.publishFailures.increment()
            throw APIError.unavailable
        }
    }
}
