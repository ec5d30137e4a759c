import Foundation
import Logging
import Synchronization
import Testing

@_spi(Dev) @testable import Kafka
import KafkaDev

/// `KafkaTopicTail` against librdkafka's mock cluster: what it delivers, and that it
/// stops fetching when idle and starts again at the end.
@Suite(.serialized, .timeLimit(.minutes(3)))
struct KafkaTopicTailTests {
    let logger = Logger(label: "test")

    func produce(_ producer: KafkaProducer, _ values: some Sequence<Int>) async throws {
        for i in values {
            try await producer.send(KafkaOutgoing(topic: "tail", key: "k\(i % 7)", value: Array("\(i)".utf8)))
        }
    }

    func waitUntil(_ condition: () -> Bool) async throws {
        let deadline = ContinuousClock.now + .seconds(20)
        while !condition() && ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(20)) }
    }

    @Test func deliversWhatIsAppendedAfterFollowAndNothingBefore() async throws {
        let cluster = try MockCluster(brokers: 1)
        try cluster.createTopic("tail", partitions: 4)
        let configuration = KafkaConfiguration(bootstrapServers: cluster.bootstrapServers)
        let producer = try KafkaProducer(configuration: configuration, logger: logger)
        let seen = Mutex<[Int]>([])
        let needed = Mutex(true)
        let tail = try KafkaTopicTail(
            configuration: configuration, topic: "tail", idleAfter: .milliseconds(300), logger: logger,
            needed: { needed.withLock { $0 } },
            deliver: { records in
                seen.withLock { $0 += records.map { Int(String(decoding: $0.value, as: UTF8.self)) ?? -1 } }
            })
        defer { tail.close() }
        #expect(!tail.isFollowing)
        try await produce(producer, 0..<20)
        try await tail.follow()
        #expect(tail.isFollowing)
        // It starts exactly at each partition's end as it was when `follow()` returned.
        let reader = try KafkaTopicReader(configuration: configuration, logger: logger)
        let ends = try reader.endOffsets(of: "tail")
        #expect(ends.values.reduce(0, +) == 20)
        #expect(tail.positions == ends)
        try await produce(producer, 20..<60)
        try await waitUntil { seen.withLock { $0.count } >= 40 }
        try await Task.sleep(for: .milliseconds(200))
        #expect(seen.withLock { $0 }.sorted() == Array(20..<60))

        // Still needed: it keeps following past `idleAfter`.
        try await Task.sleep(for: .milliseconds(600))
        #expect(tail.isFollowing)
        // Nobody waits and nobody asked: it stops, and what is appended meanwhile is not read.
        needed.withLock { $0 = false }
        try await waitUntil { !tail.isFollowing }
        #expect(!tail.isFollowing)
        try await produce(producer, 60..<80)
        try await Task.sleep(for: .milliseconds(300))
        #expect(seen.withLock { $0 }.count == 40)

        // Asked again, and needed while it reads (else it may stop again after `idleAfter`,
        // before a slow run delivers): it starts at the end as it stands then.
        needed.withLock { $0 = true }
        try await tail.follow()
        #expect(tail.isFollowing)
        try await produce(producer, 80..<100)
        try await waitUntil { seen.withLock { $0.count } >= 60 }
        try await Task.sleep(for: .milliseconds(200))
        #expect(seen.withLock { $0 }.sorted() == Array(20..<60) + Array(80..<100))
        producer.shutdown()
    }

    @Test func followThrowsWhenNoBrokerAnswers() async throws {
        let tail = try KafkaTopicTail(
            configuration: KafkaConfiguration(bootstrapServers: "127.0.0.1:1"), topic: "tail", logger: logger,
            needed: { false }, deliver: { _ in })
        defer { tail.close() }
        // Nothing listens on port 1: where the partitions end cannot be learnt.
        await #expect(throws: KafkaError.self) { try await tail.follow() }
        #expect(!tail.isFollowing)
    }

    @Test func afterCloseFollowThrowsClosed() async throws {
        let cluster = try MockCluster(brokers: 1)
        try cluster.createTopic("tail", partitions: 2)
        let tail = try KafkaTopicTail(
            configuration: KafkaConfiguration(bootstrapServers: cluster.bootstrapServers), topic: "tail",
            logger: logger, needed: { true }, deliver: { _ in })
        try await tail.follow()
        #expect(tail.isFollowing)
        tail.close()
        #expect(!tail.isFollowing)
        do {
            try await tail.follow()
            Issue.record("follow() after close() returned")
        } catch let error as KafkaError {
            #expect(error.code == .closed)
        }
    }
}
