import Foundation
import Kafka
import Logging
import Metrics
import PushModels
import ServiceKit

/// Hands accepted work to `push.requests`. A request is answered only after the
/// broker acknowledged its record, so an accepted notification is never lost.
struct Acceptor: Sendable {
    let publisher: any RecordPublisher
    let topic: String
    /// The notify bound. Ingest's producer runs with `message.timeout.ms` set to it, so
    /// librdkafka reports a record it could not deliver by then; that report is the 503.
    let timeout: Duration
    let logger: Logger

    func publish(_ record: PushRequestRecord) async throws {
        let value = try Wire.encode(record)
        let outgoing = KafkaOutgoing(
            topic: topic, key: record.partitionKey, value: value,
            headers: [("notification_id", Array(record.notificationID.rawValue.utf8))])
        do {
            try await publisher.publish([outgoing])
        } catch {
            logger.error(
                "could not publish accepted notification",
                metadata: ["notification_id": "\(record.notificationID)", "error": "\(error)"])
            RelayMetrics.publishFailures.increment()
            throw APIError.unavailable
        }
    }
}
