import Foundation
import Kafka
import Logging
import Metrics
import PushModels
import ServiceKit

/// Hands accepted work to `push.requests`. A request is answered only after the
/// broker acknowledged its record, so an accepted notification is never lost.
struct Acceptor: Sendable {
    let producer: KafkaProducer
    let topic: String
    let logger: Logger

    func publish(_ record: PushRequestRecord) async throws {
        let value = try Wire.encode(record)
        do {
            try await producer.publish([
                KafkaOutgoing(
                    topic: topic, key: record.partitionKey, value: value,
                    headers: [("notification_id", Array(record.notificationID.utf8))])
            ])
        } catch {
            logger.error(
                "could not publish accepted notification",
                metadata: ["notification_id": "\(record.notificationID)", "error": "\(error)"])
            Counter(label: "pushrelay_ingest_publish_failures_total").increment()
            throw APIError.unavailable
        }
    }
}
