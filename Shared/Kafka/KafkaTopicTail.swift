import CRdKafka
import Foundation
import LogKeys
import Logging
import Synchronization

/// Follows a topic from its end while someone needs its records, and fetches nothing
/// otherwise. It assigns every partition directly (no consumer group: nothing to join,
/// nothing committed) at the partition's end as `follow()` finds it, so every record
/// appended after `follow()` returns is delivered, in order per partition. When nobody
/// asked for `idleAfter` and `needed` says no, it unassigns: an unused tail costs one
/// wake-up a second. While it follows it looks for new partitions every
/// `partitionCheck` and reads those from their start.
public final class KafkaTopicTail: Sendable {
    private let handle: HandleBox
    private let topic: String
    private let idleAfter: Duration
    private let logger: Logger
    private let deliver: @Sendable ([KafkaRecord]) -> Void
    private let needed: @Sendable () -> Bool
    private let state = Mutex(State())
    private let wakeup = Wakeup()
    /// How often a following tail asks the brokers for partitions added since it started.
    static let partitionCheck: Duration = .seconds(30)

    private struct State {
        var following = false
        var threadRunning = false
        var closed = false
        var lastAsked = ContinuousClock.now
        var waiters: [CheckedContinuation<Void, any Error>] = []
        /// Per partition, the offset of the next record to deliver (while following).
        var positions: [Int32: Int64] = [:]
    }

    /// - Parameters:
    ///   - deliver: called on the tail's thread with the records of one poll; keep it short.
    ///   - needed: whether someone still waits for records (checked before stopping).
    public init(
        configuration: KafkaConfiguration, topic: String, idleAfter: Duration = .seconds(60), logger: Logger,
        needed: @escaping @Sendable () -> Bool, deliver: @escaping @Sendable ([KafkaRecord]) -> Void
    ) throws {
        let settings = configuration.settings(
            [
                "bootstrap.servers": configuration.bootstrapServers,
                "client.id": configuration.clientID,
                // Required by librdkafka's consumer; never joined (assign, not subscribe) and never committed.
                "group.id": "pushrelay-tail-\(UUID().uuidString.lowercased())",
                "enable.auto.commit": "false",
                "enable.auto.offset.store": "false",
                // Past the end of a truncated partition: its end again, never its start.
                "auto.offset.reset": "latest",
                "fetch.wait.max.ms": "20",
                "queued.min.messages": "2000",
            ], producer: false)
        let handle = try makeHandle(type: RD_KAFKA_CONSUMER, conf: try makeConf(settings))
        rd_kafka_poll_set_consumer(handle)
        self.handle = HandleBox(handle)
        self.topic = topic
        self.idleAfter = idleAfter
        self.logger = logger
        self.needed = needed
        self.deliver = deliver
    }

    deinit {
        rd_kafka_consumer_close(handle.pointer)
        rd_kafka_destroy(handle.pointer)
    }

    /// True while partitions are assigned and fetched.
    public var isFollowing: Bool { state.withLock { $0.following } }

    /// Per partition, the offset of the next record it delivers; empty when not following.
    public var positions: [Int32: Int64] { state.withLock { $0.following ? $0.positions : [:] } }

    /// Returns once the tail follows the topic: records appended from now on are delivered.
    /// Throws when the broker cannot say where the partitions end, or after `close()`.
    public func follow() async throws {
        if state.withLock({ s in
            s.lastAsked = .now
            return s.following && !s.closed
        }) {
            return
        }
        enum Step { case ready, closed, signal, startThread }
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            let step = state.withLock { s -> Step in
                if s.closed { return .closed }
                if s.following { return .ready }
                s.waiters.append(continuation)
                s.lastAsked = .now
                if s.threadRunning { return .signal }
                s.threadRunning = true
                return .startThread
            }
            switch step {
            case .ready: continuation.resume()
            case .closed: continuation.resume(throwing: KafkaError(code: .closed, message: "the tail is closed"))
            case .signal: wakeup.signal()
            case .startThread:
                // The thread keeps the tail alive until `close()`.
                let thread = Thread { self.run() }
                thread.name = "kafka-tail"
                thread.start()
            }
        }
    }

    /// Stops following for good; pending `follow()` calls throw.
    public func close() {
        state.withLock {
            $0.closed = true
            $0.following = false
        }
        wakeup.signal()
    }

    private func run() {
        var assigned = false
        var lastPartitionCheck = ContinuousClock.now
        while true {
            let (closed, asked) = state.withLock { ($0.closed, !$0.waiters.isEmpty) }
            if closed {
                if assigned { rd_kafka_assign(handle.pointer, nil) }
                let waiters = state.withLock { s in
                    s.following = false
                    s.threadRunning = false
                    defer { s.waiters = [] }
                    return s.waiters
                }
                for waiter in waiters {
                    waiter.resume(throwing: KafkaError(code: .closed, message: "the tail is closed"))
                }
                return
            }
            if asked && !assigned {
                let result = Result {
                    let ends = try partitionEnds(handle.pointer, topic: topic)
                    try assign(at: ends)
                    return ends
                }
                assigned = (try? result.get()) != nil
                let waiters = state.withLock { s in
                    s.following = assigned && !s.closed
                    if let positions = try? result.get() { s.positions = positions }
                    defer { s.waiters = [] }
                    return s.waiters
                }
                for waiter in waiters { waiter.resume(with: result.map { _ in }) }
                lastPartitionCheck = .now
                continue
            }
            guard assigned else {
                wakeup.wait(timeout: .seconds(1))
                continue
            }
            poll()
            if ContinuousClock.now - lastPartitionCheck > Self.partitionCheck {
                lastPartitionCheck = .now
                addNewPartitions()
            }
            // Asked again after `needed` was read: `lastAsked` is recent, so it keeps following.
            let busy = needed()
            let stop = state.withLock { s -> Bool in
                guard !busy, ContinuousClock.now - s.lastAsked > idleAfter, s.waiters.isEmpty else { return false }
                s.following = false
                return true
            }
            if stop {
                rd_kafka_assign(handle.pointer, nil)
                assigned = false
                logger.debug("stopped following \(topic): idle")
            }
        }
    }

    /// What one fetch brought: waits up to 100 ms for the first record, then takes what is at hand.
    private func poll() {
        var records: [KafkaRecord] = []
        var message = rd_kafka_consumer_poll(handle.pointer, 100)
        while let current = message {
            switch copyRecord(current) {
            case .success(let record): records.append(record)
            case .failure(let error) where error.code.name == "_PARTITION_EOF": break
            case .failure(let error): logger.warning("tail: consumer error", metadata: [LogKey.error: "\(error)"])
            }
            rd_kafka_message_destroy(current)
            message = records.count < 512 ? rd_kafka_consumer_poll(handle.pointer, 0) : nil
        }
        guard !records.isEmpty else { return }
        state.withLock { s in
            for record in records { s.positions[record.partition] = record.offset.nextOffset }
        }
        deliver(records)
    }

    /// Partitions added to the topic since the tail started are read from their start;
    /// the others go on where they are.
    private func addNewPartitions() {
        guard let partitions = try? partitionIDs(handle.pointer, topic: topic, timeout: .seconds(5)) else { return }
        var positions = state.withLock { $0.positions }
        let added = partitions.filter { positions[$0] == nil }
        guard !added.isEmpty else { return }
        for partition in added { positions[partition] = Int64(RD_KAFKA_OFFSET_BEGINNING) }
        do {
            try assign(at: positions)
            state.withLock { s in
                for partition in added where s.positions[partition] == nil {
                    s.positions[partition] = Int64(RD_KAFKA_OFFSET_BEGINNING)
                }
            }
            logger.info("following new partitions of \(topic)", metadata: [LogKey.partitions: "\(added)"])
        } catch {
            logger.warning("cannot follow new partitions of \(topic)", metadata: [LogKey.error: "\(error)"])
        }
    }

    /// Assigns these partitions at these offsets, replacing the assignment.
    private func assign(at offsets: [Int32: Int64]) throws {
        guard let list = rd_kafka_topic_partition_list_new(Int32(clamping: offsets.count)) else {
            throw KafkaError(code: .configuration, message: "cannot allocate a partition list")
        }
        defer { rd_kafka_topic_partition_list_destroy(list) }
        for (partition, offset) in offsets.sorted(by: { $0.key < $1.key }) {
            rd_kafka_topic_partition_list_add(list, topic, partition)?.pointee.offset = offset
        }
        let rc = rd_kafka_assign(handle.pointer, list)
        guard rc == RD_KAFKA_RESP_ERR_NO_ERROR else { throw KafkaError.from(rc) }
    }
}

/// The partitions of `topic`, from the brokers' metadata.
func partitionIDs(_ handle: OpaquePointer, topic: String, timeout: Duration) throws -> [Int32] {
    var metadata: UnsafePointer<rd_kafka_metadata>?
    let rkt = rd_kafka_topic_new(handle, topic, nil)
    defer { if let rkt { rd_kafka_topic_destroy(rkt) } }
    let rc = rd_kafka_metadata(handle, 0, rkt, &metadata, milliseconds(timeout))
    defer { if let metadata { rd_kafka_metadata_destroy(metadata) } }
    guard rc == RD_KAFKA_RESP_ERR_NO_ERROR, let metadata, metadata.pointee.topic_cnt > 0 else {
        throw KafkaError.from(rc)
    }
    let t = metadata.pointee.topics[0]
    guard t.err == RD_KAFKA_RESP_ERR_NO_ERROR else { throw KafkaError.from(t.err) }
    return (0..<Int(t.partition_cnt)).map { t.partitions[$0].id }.sorted()
}

/// Each partition's end now: the offset its next record will have. One ListOffsets
/// request for all of them (`RD_KAFKA_OFFSET_END` as the time asks for the end).
func partitionEnds(_ handle: OpaquePointer, topic: String) throws -> [Int32: Int64] {
    let partitions = try partitionIDs(handle, topic: topic, timeout: .seconds(5))
    guard !partitions.isEmpty else {
        throw KafkaError(code: .configuration, message: "\(topic) has no partitions")
    }
    guard let list = rd_kafka_topic_partition_list_new(Int32(clamping: partitions.count)) else {
        throw KafkaError(code: .configuration, message: "cannot allocate a partition list")
    }
    defer { rd_kafka_topic_partition_list_destroy(list) }
    for partition in partitions {
        rd_kafka_topic_partition_list_add(list, topic, partition)?.pointee.offset = Int64(RD_KAFKA_OFFSET_END)
    }
    let rc = rd_kafka_offsets_for_times(handle, list, 5000)
    guard rc == RD_KAFKA_RESP_ERR_NO_ERROR else { throw KafkaError.from(rc) }
    var ends: [Int32: Int64] = [:]
    for index in 0..<Int(list.pointee.cnt) {
        let element = list.pointee.elems[index]
        guard element.err == RD_KAFKA_RESP_ERR_NO_ERROR else { throw KafkaError.from(element.err) }
        guard element.offset >= 0 else {
            throw KafkaError(code: .configuration, message: "no end offset for \(topic) [\(element.partition)]")
        }
        ends[element.partition] = element.offset
    }
    return ends
}
