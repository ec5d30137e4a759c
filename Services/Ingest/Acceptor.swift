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
    /// The producer's `message.timeout.ms` is set to this bound, so librdkafka gives up
    /// on the record by then and a 503 is final; the wait here is a little longer, a
    /// safety net should the delivery report itself be late.
    let timeout: Duration
    let logger: Logger

    func publish(_ record: PushRequestRecord) async throws {
        let value = try Wire.encode(record)
        let outgoing = KafkaOutgoing(
            topic: topic, key: record.partitionKey, value: value,
            headers: [("notification_id", Array(record.notificationID.utf8))])
        let producer = self.producer
        let limit = timeout + .seconds(1)
        do {
            try await withThrowingTaskGroup(of: Bool.self) { group in
                group.addTask {
                    try await producer.publish([outgoing])
                    return true
                }
                group.addTask {
                    try await Task.sleep(for: limit)
                    return false
                }
                let acknowledged = try await group.next() ?? false
                group.cancelAll()
                if !acknowledged { throw PublishTimeout() }
            }
        } catch {
            logger.error(
                "could not publish accepted notification",
                metadata: ["notification_id": "\(record.notificationID)", "error": "\(error)"])
            Counter(label: "pushrelay_ingest_publish_failures_total").increment()
            throw APIError.unavailable
        }
    }
}

struct PublishTimeout: Error, CustomStringConvertible {
    var description: String { "no acknowledgement from Kafka in time" }
}
