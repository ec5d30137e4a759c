import Foundation
import KafkaDev
import Logging
import ServiceLifecycle
import Synchronization
import Testing

@testable import Kafka

/// The producer and consumer as ServiceGroup members, against librdkafka's mock cluster.
@Suite(.serialized, .timeLimit(.minutes(3)))
struct KafkaServiceTests {
    let logger = Logger(label: "test")

    func consumer(_ cluster: MockCluster, group: String, topic: String) throws -> KafkaConsumer {
        try KafkaConsumer(
            configuration: KafkaConsumerConfiguration(
                connection: KafkaConfiguration(bootstrapServers: cluster.bootstrapServers),
                groupID: group, topics: [topic], maxInFlight: 4, commitInterval: .milliseconds(50),
                drainTimeout: .seconds(2)),
            logger: logger)
    }

    func waitUntil(_ condition: @Sendable () -> Bool) async throws {
        let deadline = ContinuousClock.now + .seconds(60)
        while !condition() && ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(20)) }
    }

    /// Graceful shutdown: the consumer drains and commits, then the producer flushes and closes.
    @Test func gracefulShutdownCommitsConsumedRecordsAndClosesTheProducer() async throws {
        let cluster = try MockCluster(brokers: 1)
        try cluster.createTopic("svc", partitions: 2)
        try cluster.createTopic("svc.out", partitions: 1)
        let producer = try KafkaProducer(
            configuration: KafkaConfiguration(bootstrapServers: cluster.bootstrapServers), logger: logger)
        for i in 0..<12 {
            try await producer.send(KafkaOutgoing(topic: "svc", key: "k\(i % 3)", value: Array("\(i)".utf8)))
        }
        let handled = Mutex(0)
        let service = KafkaConsumerService(consumer: try consumer(cluster, group: "gs", topic: "svc")) { record in
            // The handler produces through the producer service's producer, as the stages do.
            _ = try? await producer.send(KafkaOutgoing(topic: "svc.out", value: record.value))
            handled.withLock { $0 += 1 }
            return .done
        }
        let group = ServiceGroup(
            services: [KafkaProducerService(producer: producer, flushTimeout: .seconds(5)), service], logger: logger)
        try await withThrowingTaskGroup(of: Void.self) { tasks in
            tasks.addTask { try await group.run() }
            try await waitUntil { handled.withLock { $0 } == 12 }
            await group.triggerGracefulShutdown()
            try await tasks.waitForAll()
        }
        #expect(handled.withLock { $0 } == 12)

        // The producer was flushed and closed by its service.
        await #expect(throws: KafkaError.self) {
            try await producer.send(KafkaOutgoing(topic: "svc", value: []))
        }

        // Everything handled was committed: the next member of the group sees only new records.
        let later = try KafkaProducer(
            configuration: KafkaConfiguration(bootstrapServers: cluster.bootstrapServers), logger: logger)
        for p in 0..<2 {
            try await later.send(KafkaOutgoing(topic: "svc", key: "marker-\(p)", value: Array("marker".utf8)))
        }
        let seen = Mutex<[String]>([])
        let next = KafkaConsumerService(consumer: try consumer(cluster, group: "gs", topic: "svc")) { record in
            seen.withLock { $0.append(String(decoding: record.value, as: UTF8.self)) }
            return .done
        }
        try await withThrowingTaskGroup(of: Void.self) { tasks in
            tasks.addTask { try await next.run() }
            try await waitUntil { seen.withLock { $0.count } >= 2 }
            try await Task.sleep(for: .milliseconds(300))
            tasks.cancelAll()
            try await tasks.waitForAll()
        }
        #expect(seen.withLock { $0 } == ["marker", "marker"])
        await later.close()
    }

    /// Records dispatched but not yet started when shutdown comes are not handled,
    /// and a consumer shuts down promptly although its capacity was full.
    @Test func shutdownWithFullCapacityStartsNoFurtherHandlers() async throws {
        let cluster = try MockCluster(brokers: 1)
        try cluster.createTopic("cap", partitions: 1)
        let producer = try KafkaProducer(
            configuration: KafkaConfiguration(bootstrapServers: cluster.bootstrapServers), logger: logger)
        // One key: the records are handled one at a time, in order.
        for i in 0..<20 { try await producer.send(KafkaOutgoing(topic: "cap", key: "same", value: Array("\(i)".utf8))) }
        await producer.close()

        let started = Mutex<[Int64]>([])
        let release = Mutex(false)
        let service = KafkaConsumerService(consumer: try consumer(cluster, group: "gc", topic: "cap")) { record in
            started.withLock { $0.append(record.offset) }
            // The first record holds its slot until shutdown has been requested.
            while !release.withLock({ $0 }) { try? await Task.sleep(for: .milliseconds(10)) }
            return .done
        }
        let group = ServiceGroup(services: [service], logger: logger)
        let begin = ContinuousClock.now
        try await withThrowingTaskGroup(of: Void.self) { tasks in
            tasks.addTask { try await group.run() }
            try await waitUntil { !started.withLock { $0 }.isEmpty }
            // maxInFlight (4) records dispatched; three wait behind the first one's key.
            try await Task.sleep(for: .milliseconds(200))
            await group.triggerGracefulShutdown()
            try await Task.sleep(for: .milliseconds(100))
            release.withLock { $0 = true }
            try await tasks.waitForAll()
        }
        #expect(started.withLock { $0 } == [0])
        #expect(ContinuousClock.now - begin < .seconds(30))
    }
}
