import Foundation
import Logging
import Synchronization
import Testing

@testable import Kafka
import KafkaDev

/// Producer and group consumer against librdkafka's mock cluster (real Kafka protocol
/// on loopback, started in-process).
@Suite(.serialized, .timeLimit(.minutes(3)))
struct KafkaRoundTripTests {
    let logger = Logger(label: "test")

    func consumer(_ cluster: MockCluster, group: String, topic: String) throws -> KafkaConsumer {
        try KafkaConsumer(
            configuration: KafkaConsumerConfiguration(
                connection: KafkaConfiguration(bootstrapServers: cluster.bootstrapServers),
                groupID: group, topics: [topic], maxInFlight: 8, commitInterval: .milliseconds(50),
                drainTimeout: .seconds(2)),
            logger: logger)
    }

    /// Consumes until `stop` says so, then shuts the consumer down (commit and leave).
    func consume(
        _ consumer: KafkaConsumer, handler: @escaping @Sendable (KafkaRecord) async -> RecordDisposition,
        until stop: @escaping @Sendable () -> Bool
    ) async throws {
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await consumer.run(handler: handler) }
            let deadline = ContinuousClock.now + .seconds(60)
            while !stop() && ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(50)) }
            group.cancelAll()
            try await group.waitForAll()
        }
    }

    @Test func producedRecordsArriveWithKeysAndHeaders() async throws {
        let cluster = try MockCluster(brokers: 1)
        try cluster.createTopic("rt", partitions: 3)
        let producer = try KafkaProducer(
            configuration: KafkaConfiguration(bootstrapServers: cluster.bootstrapServers), logger: logger)
        for i in 0..<30 {
            let report = try await producer.send(
                KafkaOutgoing(
                    topic: "rt", key: "user-\(i % 5)", value: Array("v\(i)".utf8), headers: [("h", [UInt8(i)])]))
            #expect(report.offset >= 0)
        }
        let seen = Mutex<[String: (key: String, header: UInt8, partition: Int32)]>([:])
        let c = try consumer(cluster, group: "g1", topic: "rt")
        try await consume(
            c,
            handler: { record in
                seen.withLock {
                    $0[String(decoding: record.value, as: UTF8.self)] = (
                        String(decoding: record.key ?? [], as: UTF8.self), record.header("h")?.first ?? 255,
                        record.partition
                    )
                }
                return .done
            }, until: { seen.withLock { $0.count } == 30 })
        let all = seen.withLock { $0 }
        #expect(all.count == 30)
        #expect(all["v7"]?.key == "user-2")
        #expect(all["v7"]?.header == 7)
        // One key always lands on one partition: one user's notifications stay in order.
        #expect(all["v2"]?.partition == all["v7"]?.partition)
        producer.shutdown()
    }

    @Test func abandonedRecordIsRedeliveredToTheNextConsumer() async throws {
        let cluster = try MockCluster(brokers: 1)
        try cluster.createTopic("al", partitions: 1)
        let producer = try KafkaProducer(
            configuration: KafkaConfiguration(bootstrapServers: cluster.bootstrapServers), logger: logger)
        for i in 0..<20 { try await producer.send(KafkaOutgoing(topic: "al", value: Array("\(i)".utf8))) }

        // First consumer finishes everything except offset 5 (as if it crashed mid-send).
        let handled = Mutex(0)
        let first = try consumer(cluster, group: "g2", topic: "al")
        try await consume(
            first,
            handler: { record in
                handled.withLock { $0 += 1 }
                return record.offset == 5 ? .abandoned : .done
            }, until: { handled.withLock { $0 } == 20 })

        // The group's committed position stopped at 5, so 5…19 come again, 0…4 do not.
        let redelivered = Mutex<Set<Int64>>([])
        let second = try consumer(cluster, group: "g2", topic: "al")
        try await consume(
            second,
            handler: { record in
                redelivered.withLock { _ = $0.insert(record.offset) }
                return .done
            }, until: { redelivered.withLock { $0.count } >= 15 })
        let offsets = redelivered.withLock { $0 }
        #expect(offsets.min() == 5)
        #expect(offsets.contains(19))
        #expect(!offsets.contains(4))
        producer.shutdown()
    }
}
