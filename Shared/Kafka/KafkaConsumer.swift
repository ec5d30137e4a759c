import CRdKafka
import Foundation
import Logging
import ServiceLifecycle
import Synchronization

/// A consumed record, copied out of librdkafka's message before it is freed.
public struct KafkaRecord: Sendable {
    public var topic: String
    public var partition: Int32
    public var offset: Int64
    public var key: [UInt8]?
    public var value: [UInt8]
    public var headers: [(name: String, value: [UInt8])]
    /// Broker or producer timestamp, ms since the epoch.
    public var timestampMs: Int64

    public var topicPartition: TopicPartition { TopicPartition(topic: topic, partition: partition) }

    public func header(_ name: String) -> [UInt8]? {
        headers.first { $0.name == name }?.value
    }
}

/// What a handler reports for a record.
public enum RecordDisposition: Sendable {
    /// Everything the record produced is acknowledged: its offset may be committed.
    case done
    /// Not finished (shutdown came first): the offset stays uncommitted and the record is redelivered.
    case abandoned
}

/// Group-consumer settings.
public struct KafkaConsumerConfiguration: Sendable {
    public var connection: KafkaConfiguration
    public var groupID: String
    public var topics: [String]
    /// Records processed at once; the poll thread waits while this many are in flight.
    public var maxInFlight: Int
    /// How often finished offsets are committed.
    public var commitInterval: Duration
    /// How long shutdown waits for in-flight records before leaving them uncommitted.
    public var drainTimeout: Duration
    /// For delay topics: a header holding the time (ms since the epoch, decimal) before
    /// which a record must not be handled. A partition whose next record is not due is
    /// paused and resumed when it is, so waiting holds no handler and no memory.
    public var dueHeader: String?

    public init(
        connection: KafkaConfiguration, groupID: String, topics: [String], maxInFlight: Int = 256,
        commitInterval: Duration = .milliseconds(200), drainTimeout: Duration = .seconds(10), dueHeader: String? = nil
    ) {
        self.connection = connection
        self.groupID = groupID
        self.topics = topics
        self.maxInFlight = max(1, maxInFlight)
        self.commitInterval = commitInterval
        self.drainTimeout = drainTimeout
        self.dueHeader = dueHeader
    }
}

/// State shared by the poll thread, the rebalance callback and the handler tasks.
final class ConsumerShared: Sendable {
    let tracker = Mutex(OffsetTracker())
    let capacity: DispatchSemaphore
    let stopping = Mutex(false)
    let drained = DispatchSemaphore(value: 0)
    let logger: Logger

    init(maxInFlight: Int, logger: Logger) {
        self.capacity = DispatchSemaphore(value: maxInFlight)
        self.logger = logger
    }
}

/// Rebalances: commit what is finished for revoked partitions and forget them, so a
/// late completion never commits over the new owner's position.
private let rebalanceCallback:
    @convention(c) (
        OpaquePointer?, rd_kafka_resp_err_t, UnsafeMutablePointer<rd_kafka_topic_partition_list_t>?,
        UnsafeMutableRawPointer?
    ) -> Void = { handle, err, partitions, opaque in
        guard let handle, let opaque else { return }
        let shared = Unmanaged<ConsumerShared>.fromOpaque(opaque).takeUnretainedValue()
        switch err {
        case RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS:
            rd_kafka_assign(handle, partitions)
            shared.logger.info("partitions assigned", metadata: ["partitions": "\(describe(partitions))"])
        case RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS:
            let revoked = topicPartitions(partitions)
            commitFinished(handle, shared: shared, only: Set(revoked))
            shared.tracker.withLock { $0.revoke(revoked) }
            rd_kafka_assign(handle, nil)
            shared.logger.info("partitions revoked", metadata: ["partitions": "\(describe(partitions))"])
        default:
            rd_kafka_assign(handle, nil)
        }
    }

private func topicPartitions(_ list: UnsafeMutablePointer<rd_kafka_topic_partition_list_t>?) -> [TopicPartition] {
    guard let list else { return [] }
    return (0..<Int(list.pointee.cnt)).map { i in
        let e = list.pointee.elems[i]
        return TopicPartition(topic: String(cString: e.topic), partition: e.partition)
    }
}

private func describe(_ list: UnsafeMutablePointer<rd_kafka_topic_partition_list_t>?) -> String {
    topicPartitions(list).map(\.description).joined(separator: ",")
}

/// Commits the tracker's pending positions (synchronously, on the calling thread).
private func commitFinished(_ handle: OpaquePointer, shared: ConsumerShared, only: Set<TopicPartition>? = nil) {
    var commits = shared.tracker.withLock { $0.pendingCommits() }
    if let only { commits = commits.filter { only.contains($0.key) } }
    guard !commits.isEmpty else { return }
    guard let list = rd_kafka_topic_partition_list_new(Int32(commits.count)) else { return }
    defer { rd_kafka_topic_partition_list_destroy(list) }
    for (tp, offset) in commits {
        let element = rd_kafka_topic_partition_list_add(list, tp.topic, tp.partition)
        element?.pointee.offset = offset
    }
    let rc = rd_kafka_commit(handle, list, 0)
    if rc == RD_KAFKA_RESP_ERR_NO_ERROR {
        shared.tracker.withLock { $0.didCommit(commits) }
    } else if rc != RD_KAFKA_RESP_ERR__NO_OFFSET {
        shared.logger.warning("offset commit failed", metadata: ["error": "\(KafkaError.from(rc))"])
    }
}

/// A group consumer with manual, at-least-once offset commits.
///
/// `run` hands records to a handler with bounded concurrency; records with the same
/// key are handled in order, one at a time. A record's offset is
/// committed only after its handler returns `.done`, and each partition commits only
/// up to its lowest unfinished offset. Polling, commits and close run on a dedicated
/// thread. On graceful shutdown it stops polling, waits for in-flight records
/// (bounded), commits, and leaves the group.
public final class KafkaConsumer: Sendable {
    private let configuration: KafkaConsumerConfiguration
    private let handle: HandleBox
    private let shared: ConsumerShared
    private let logger: Logger
    private let started = Mutex(false)

    public init(configuration: KafkaConsumerConfiguration, logger: Logger) throws {
        var settings: [String: String] = [
            "bootstrap.servers": configuration.connection.bootstrapServers,
            "client.id": configuration.connection.clientID,
            "group.id": configuration.groupID,
            "enable.auto.commit": "false",
            "enable.auto.offset.store": "false",
            "auto.offset.reset": "earliest",
            // The dev broker needs 4–6 s; production brokers accept it too.
            "session.timeout.ms": "6000",
            "heartbeat.interval.ms": "1500",
            // How long a fetch may wait for data. librdkafka's 500 ms default shows up
            // directly as per-stage latency on the dev broker; 20 ms costs a few more
            // fetch requests when idle.
            "fetch.wait.max.ms": "20",
        ]
        settings.merge(configuration.connection.properties) { _, new in new }
        let conf = try makeConf(settings)
        let shared = ConsumerShared(maxInFlight: configuration.maxInFlight, logger: logger)
        rd_kafka_conf_set_rebalance_cb(conf, rebalanceCallback)
        rd_kafka_conf_set_opaque(conf, Unmanaged.passUnretained(shared).toOpaque())
        let handle = try makeHandle(type: RD_KAFKA_CONSUMER, conf: conf)
        rd_kafka_poll_set_consumer(handle)
        self.configuration = configuration
        self.handle = HandleBox(handle)
        self.shared = shared
        self.logger = logger
    }

    deinit {
        rd_kafka_destroy(handle.pointer)
    }

    /// True when the broker answers a metadata request.
    public func isConnected(timeout: Duration = .seconds(1)) -> Bool {
        brokerAnswers(handle.pointer, timeout: timeout)
    }

    /// Consumes until graceful shutdown or cancellation, running `handler` for each
    /// record with at most `maxInFlight` at once. Call once.
    public func run(handler: @escaping @Sendable (KafkaRecord) async -> RecordDisposition) async throws {
        guard started.withLock({ s in defer { s = true }; return !s }) else {
            throw KafkaError(code: .configuration, message: "a consumer runs only once")
        }
        try subscribe()
        let (stream, continuation) = AsyncStream.makeStream(of: KafkaRecord.self)
        let keyOrder = KeyOrder()
        let closed = DispatchSemaphore(value: 0)
        let thread = Thread { [handle, shared, configuration] in
            pollLoop(handle: handle.pointer, shared: shared, configuration: configuration, output: continuation)
            closed.signal()
        }
        thread.name = "kafka-consumer-poll"
        thread.start()

        await withGracefulShutdownHandler {
            await withTaskCancellationHandler {
                await withDiscardingTaskGroup { group in
                    for await record in stream {
                        // Records with one key (one user, one device) are handled one after another.
                        let gate = record.key.map { keyOrder.reserve($0) }
                        group.addTask { [shared] in
                            await gate?.wait()
                            let disposition = await handler(record)
                            if let key = record.key { keyOrder.leave(key) }
                            if case .done = disposition {
                                shared.tracker.withLock { $0.finished(record.topicPartition, offset: record.offset) }
                            }
                            shared.capacity.signal()
                        }
                    }
                }
            } onCancel: { [shared] in
                shared.stopping.withLock { $0 = true }
            }
        } onGracefulShutdown: { [shared] in
            shared.stopping.withLock { $0 = true }
        }
        // Every handler has returned: let the poll thread commit and leave the group.
        shared.drained.signal()
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
            DispatchQueue.global().async {
                closed.wait()
                c.resume()
            }
        }
    }

    private func subscribe() throws {
        guard let list = rd_kafka_topic_partition_list_new(Int32(configuration.topics.count)) else {
            throw KafkaError(code: .configuration, message: "cannot allocate topic list")
        }
        defer { rd_kafka_topic_partition_list_destroy(list) }
        for topic in configuration.topics {
            rd_kafka_topic_partition_list_add(list, topic, RD_KAFKA_PARTITION_UA)
        }
        let rc = rd_kafka_subscribe(handle.pointer, list)
        guard rc == RD_KAFKA_RESP_ERR_NO_ERROR else { throw KafkaError.from(rc) }
    }
}

/// The poll thread: fetch records while there is capacity, commit finished offsets
/// periodically, and after shutdown drain, commit and close.
private func pollLoop(
    handle: OpaquePointer, shared: ConsumerShared, configuration: KafkaConsumerConfiguration,
    output: AsyncStream<KafkaRecord>.Continuation
) {
    let commitEvery = configuration.commitInterval
    var lastCommit = ContinuousClock.now
    var paused = PausedPartitions()
    while !shared.stopping.withLock({ $0 }) {
        if ContinuousClock.now - lastCommit >= commitEvery {
            commitFinished(handle, shared: shared)
            lastCommit = .now
        }
        paused.resumeDue(handle, nowMs: currentMillis(), logger: shared.logger)
        // Wait for a free slot; time out regularly so commits and shutdown are not starved.
        // (Heartbeats continue on librdkafka's own threads meanwhile. rd_kafka_poll must
        // not be called here: the main queue is redirected to the consumer queue.)
        guard shared.capacity.wait(timeout: .now() + .milliseconds(100)) == .success else { continue }
        guard let message = rd_kafka_consumer_poll(handle, 100) else {
            shared.capacity.signal()
            continue
        }
        let record = copyRecord(message)
        rd_kafka_message_destroy(message)
        switch record {
        case .success(let record):
            if let header = configuration.dueHeader, let due = dueTime(record, header: header), due > currentMillis() {
                // Not due: rewind to this record and stop fetching the partition until it is.
                shared.capacity.signal()
                paused.pause(handle, record: record, dueMs: due, logger: shared.logger)
                continue
            }
            shared.tracker.withLock { $0.started(record.topicPartition, offset: record.offset) }
            output.yield(record)
        case .failure(let error):
            shared.capacity.signal()
            if error.code.name != "_PARTITION_EOF" {
                shared.logger.warning("consumer error", metadata: ["error": "\(error)"])
            }
        }
    }
    output.finish()
    // Wait (bounded) for handlers to finish, keep the session alive meanwhile.
    let deadline = ContinuousClock.now + configuration.drainTimeout
    while shared.drained.wait(timeout: .now() + .milliseconds(100)) != .success {
        commitFinished(handle, shared: shared)
        if ContinuousClock.now > deadline {
            shared.logger.warning(
                "shutdown: records still in flight stay uncommitted",
                metadata: ["in_flight": "\(shared.tracker.withLock { $0.inFlightCount })"])
            break
        }
    }
    commitFinished(handle, shared: shared)
    rd_kafka_consumer_close(handle)
}

func copyRecord(_ message: UnsafeMutablePointer<rd_kafka_message_t>) -> Result<KafkaRecord, KafkaError> {
    let m = message.pointee
    guard m.err == RD_KAFKA_RESP_ERR_NO_ERROR else { return .failure(KafkaError.from(m.err)) }
    let topic = m.rkt.map { String(cString: rd_kafka_topic_name($0)) } ?? ""
    let value = m.payload.map { Array(UnsafeRawBufferPointer(start: $0, count: m.len)) } ?? []
    let key = m.key.map { Array(UnsafeRawBufferPointer(start: $0, count: m.key_len)) }
    var headers: [(name: String, value: [UInt8])] = []
    var hdrs: OpaquePointer?
    if rd_kafka_message_headers(message, &hdrs) == RD_KAFKA_RESP_ERR_NO_ERROR, let hdrs {
        var index = 0
        while true {
            var name: UnsafePointer<CChar>?
            var valuePointer: UnsafeRawPointer?
            var size = 0
            guard rd_kafka_header_get_all(hdrs, index, &name, &valuePointer, &size) == RD_KAFKA_RESP_ERR_NO_ERROR
            else { break }
            let bytes = valuePointer.map { Array(UnsafeRawBufferPointer(start: $0, count: size)) } ?? []
            headers.append((name.map { String(cString: $0) } ?? "", bytes))
            index += 1
        }
    }
    var timestampType = RD_KAFKA_TIMESTAMP_NOT_AVAILABLE
    let timestamp = rd_kafka_message_timestamp(message, &timestampType)
    return .success(
        KafkaRecord(
            topic: topic, partition: m.partition, offset: m.offset, key: key, value: value, headers: headers,
            timestampMs: timestamp))
}

private func currentMillis() -> Int64 { Int64(Date().timeIntervalSince1970 * 1000) }

private func dueTime(_ record: KafkaRecord, header: String) -> Int64? {
    record.header(header).flatMap { Int64(String(decoding: $0, as: UTF8.self)) }
}

/// Partitions of a delay topic waiting for their next record to come due.
private struct PausedPartitions {
    var due: [TopicPartition: Int64] = [:]

    mutating func pause(_ handle: OpaquePointer, record: KafkaRecord, dueMs: Int64, logger: Logger) {
        guard let list = rd_kafka_topic_partition_list_new(1) else { return }
        defer { rd_kafka_topic_partition_list_destroy(list) }
        let element = rd_kafka_topic_partition_list_add(list, record.topic, record.partition)
        element?.pointee.offset = record.offset
        rd_kafka_pause_partitions(handle, list)
        // The seek discards what was fetched past this record; fetching restarts here on resume.
        if let error = rd_kafka_seek_partitions(handle, list, 5000) {
            logger.warning("seek failed", metadata: ["error": "\(String(cString: rd_kafka_error_string(error)))"])
            rd_kafka_error_destroy(error)
        }
        due[record.topicPartition] = dueMs
    }

    mutating func resumeDue(_ handle: OpaquePointer, nowMs: Int64, logger: Logger) {
        let ready = due.filter { $0.value <= nowMs }.map(\.key)
        guard !ready.isEmpty, let list = rd_kafka_topic_partition_list_new(Int32(ready.count)) else { return }
        defer { rd_kafka_topic_partition_list_destroy(list) }
        for tp in ready {
            rd_kafka_topic_partition_list_add(list, tp.topic, tp.partition)
            due[tp] = nil
        }
        rd_kafka_resume_partitions(handle, list)
    }
}
