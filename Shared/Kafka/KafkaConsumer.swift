import CRdKafka
import Foundation
import LogKeys
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
    /// Its key had been busy for a while (`minimumBusyForCongestion`) and
    /// `KafkaConsumerConfiguration.maxWaitingBehindKeys` records already waited behind
    /// busy keys: it was handed over at once, out of its key's order, for the handler to
    /// set aside (a dispatcher parks it on a delay topic).
    public var keyCongested = false

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
    /// Records processed at once; no record is polled while this many are in flight.
    public var maxInFlight: Int
    /// How often finished offsets are committed.
    public var commitInterval: Duration
    /// How long shutdown waits for in-flight records before leaving them uncommitted.
    public var drainTimeout: Duration
    /// For delay topics: a header holding the time (ms since the epoch, decimal) before
    /// which a record must not be handled. A partition whose next record is not due is
    /// paused and resumed when it is, so waiting holds no handler and no memory.
    public var dueHeader: String?
    /// At most this many records wait behind a busy key (records with the same key
    /// run one at a time); past it a record behind a busy key goes to the handler at
    /// once, marked `keyCongested`. Nil: records always wait, and a few slow keys can
    /// fill `maxInFlight` and hold up every other key.
    public var maxWaitingBehindKeys: Int?
    /// Only a key busy this long or longer is refused past `maxWaitingBehindKeys`: under
    /// ordinary load many keys are busy for a moment, and their records should wait.
    public var minimumBusyForCongestion: Duration = .milliseconds(500)

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

/// State shared by the poll thread, the rebalance callback and the handler tasks:
/// the lifecycle state machine behind a lock, and the poll thread's wake-up.
final class ConsumerShared: Sendable {
    let machine: Mutex<ConsumerStateMachine>
    let wakeup = Wakeup()
    let logger: Logger

    init(configuration: KafkaConsumerConfiguration, logger: Logger) {
        self.machine = Mutex(ConsumerStateMachine(configuration: configuration))
        self.logger = logger
    }

    /// Feeds an event; the lock is not held while the caller performs the action.
    func handle(_ event: ConsumerStateMachine.Event) -> ConsumerStateMachine.Action {
        machine.withLock { $0.handle(event) }
    }

    var failure: KafkaError? { machine.withLock { $0.failure } }
}

/// Rebalances: commit what is finished for revoked partitions and forget them, so a
/// late completion never commits over the new owner's position. Runs on the poll
/// thread, inside `rd_kafka_consumer_poll` or `rd_kafka_consumer_close`.
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
            shared.logger.info("partitions assigned", metadata: [LogKey.partitions: "\(describe(partitions))"])
        case RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS:
            if case .commit(let offsets) = shared.handle(.partitionsRevoked(topicPartitions(partitions))) {
                // The partitions are forgotten already: the result needs no bookkeeping.
                _ = commit(handle, offsets, logger: shared.logger)
            }
            rd_kafka_assign(handle, nil)
            shared.logger.info("partitions revoked", metadata: [LogKey.partitions: "\(describe(partitions))"])
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

/// Commits positions synchronously on the calling thread; the response code.
private func commit(_ handle: OpaquePointer, _ offsets: [TopicPartition: Int64], logger: Logger) -> rd_kafka_resp_err_t
{
    guard !offsets.isEmpty else { return RD_KAFKA_RESP_ERR_NO_ERROR }
    guard let list = rd_kafka_topic_partition_list_new(Int32(offsets.count)) else { return RD_KAFKA_RESP_ERR__FAIL }
    defer { rd_kafka_topic_partition_list_destroy(list) }
    for (tp, offset) in offsets {
        let element = rd_kafka_topic_partition_list_add(list, tp.topic, tp.partition)
        element?.pointee.offset = offset
    }
    let rc = rd_kafka_commit(handle, list, 0)
    if rc != RD_KAFKA_RESP_ERR_NO_ERROR && rc != RD_KAFKA_RESP_ERR__NO_OFFSET {
        logger.warning("offset commit failed", metadata: [LogKey.error: "\(KafkaError.from(rc))"])
    }
    return rc
}

/// The error that made the handle unusable, as librdkafka reports it.
private func librdkafkaFatalError(_ handle: OpaquePointer) -> KafkaError {
    var errstr = [CChar](repeating: 0, count: 512)
    let rc = rd_kafka_fatal_error(handle, &errstr, errstr.count)
    var error = KafkaError.from(rc == RD_KAFKA_RESP_ERR_NO_ERROR ? RD_KAFKA_RESP_ERR__FATAL : rc)
    let text = cString(errstr)
    if !text.isEmpty { error.message = text }
    return error
}

/// A group consumer with manual, at-least-once offset commits.
///
/// `run` hands records to a handler with bounded concurrency; records with the same
/// key are handled in order, one at a time. A record's offset is
/// committed only after its handler returns `.done`, and each partition commits only
/// up to its lowest unfinished offset. Polling, commits and close run on a dedicated
/// thread, driven by `ConsumerStateMachine`. On graceful shutdown (or cancellation)
/// it stops dispatching, waits for in-flight records (at most `drainTimeout`),
/// commits what finished, and leaves the group; the caller awaits that without
/// blocking any thread. As a ServiceGroup member, use `KafkaConsumerService`.
public final class KafkaConsumer: Sendable {
    private let configuration: KafkaConsumerConfiguration
    private let handle: HandleBox
    private let shared: ConsumerShared
    private let logger: Logger
    private let started = Mutex(false)

    public init(configuration: KafkaConsumerConfiguration, logger: Logger) throws {
        let settings = configuration.connection.settings(
            [
                "bootstrap.servers": configuration.connection.bootstrapServers,
                "client.id": configuration.connection.clientID,
                "group.id": configuration.groupID,
                "enable.auto.commit": "false",
                "enable.auto.offset.store": "false",
                "auto.offset.reset": "earliest",
                // The dev broker needs 4–6 s; production brokers accept it too.
                "session.timeout.ms": "6000",
                "heartbeat.interval.ms": "1500",
                // Back to a returning broker within a second (librdkafka's default: 10 s).
                "reconnect.backoff.max.ms": "1000",
                // How long a fetch may wait for data. librdkafka's 500 ms default shows up
                // directly as per-stage latency on the dev broker; 20 ms costs a few more
                // fetch requests when idle.
                "fetch.wait.max.ms": "20",
                // How much librdkafka prefetches ahead of the handlers. Its defaults (100,000
                // records, 64 MiB) turn a consumer's lag into resident memory; a few thousand
                // records keep the handlers fed at full speed on a local broker.
                "queued.min.messages": "2000",
                "queued.max.messages.kbytes": "8192",
                "fetch.max.bytes": "8388608",
            ], producer: false)
        let conf = try makeConf(settings)
        let shared = ConsumerShared(configuration: configuration, logger: logger)
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

    /// The consumer group it belongs to.
    public var groupID: String { configuration.groupID }

    /// Records of the partitions this consumer holds that its group has not committed,
    /// per topic: each partition's high watermark less the group's committed offset (its
    /// low watermark when none is). Asks the broker, on a thread of its own; empty when
    /// nothing is assigned, nil when the broker does not answer within `timeout`.
    public func lag(timeout: Duration = .seconds(2)) async -> [String: Int64]? {
        let ms = max(100, Int32(clamping: timeout.components.seconds * 1000))
        return await onDedicatedThread(name: "kafka-lag") { [handle] in groupLag(handle.pointer, timeoutMs: ms) }
    }

    /// Consumes until graceful shutdown or cancellation, running `handler` for each
    /// record with at most `maxInFlight` at once; then drains, commits and closes.
    /// Throws if the consumer cannot subscribe or hits a fatal error. Call once.
    public func run(handler: @escaping @Sendable (KafkaRecord) async -> RecordDisposition) async throws {
        // A batch of one, handled as soon as it is polled.
        try await runBatches(maxBatch: 1, handler: Self.oneByOne(handler))
    }

    /// A batch handler that runs `handler` on each record in turn.
    static func oneByOne(
        _ handler: @escaping @Sendable (KafkaRecord) async -> RecordDisposition
    ) -> @Sendable ([KafkaRecord]) async -> [RecordDisposition] {
        { records in
            var dispositions: [RecordDisposition] = []
            for record in records { dispositions.append(await handler(record)) }
            return dispositions
        }
    }

    /// Consumes like `run`, handing the handler what one fetch returned, as one batch of
    /// at most `maxBatch` records in poll order. The handler returns one disposition per
    /// record, in the same order, and keeps records with the same key in their order
    /// (for example by publishing its outputs in record order). Records with a key that
    /// an earlier batch still holds wait for it, as in `run`. Offsets are committed as in
    /// `run`: each record's once it is `.done`, up to the lowest unfinished offset.
    public func runBatches(
        maxBatch: Int, handler: @escaping @Sendable ([KafkaRecord]) async -> [RecordDisposition]
    ) async throws {
        let maxBatch = max(1, maxBatch)
        guard
            started.withLock({ s in
                defer { s = true }; return !s
            })
        else {
            throw KafkaError(code: .configuration, message: "a consumer runs only once")
        }
        do {
            try subscribe()
        } catch {
            _ = shared.handle(.clientFailed(error))
            throw error
        }
        let (stream, output) = AsyncStream.makeStream(of: Polled.self)
        let first = shared.handle(.start(now: .now))
        let shared = self.shared
        // Actions for events fed from outside the poll thread: none of them blocks.
        @Sendable func perform(_ action: ConsumerStateMachine.Action) {
            switch action {
            case .stopDispatching:
                output.finish()
                shared.wakeup.signal()
            case .wakePoller:
                shared.wakeup.signal()
            default:
                break
            }
        }
        // The poll thread ends after close; awaiting it suspends, it does not block.
        async let pollThreadExited: Void = onDedicatedThread(name: "kafka-consumer-poll") { [handle] in
            pollLoop(handle: handle.pointer, shared: shared, first: first, output: output)
        }
        let keyOrder = KeyOrder(
            maxWaiting: configuration.maxWaitingBehindKeys, minimumBusy: configuration.minimumBusyForCongestion)
        await withGracefulShutdownHandler {
            await withTaskCancellationHandler {
                await withDiscardingTaskGroup { group in
                    var batch = PendingBatch()
                    func launch() {
                        guard !batch.records.isEmpty else { return }
                        var waiting = batch
                        batch = PendingBatch()
                        group.addTask {
                            // In waves: the records whose earlier same-key records have finished
                            // go together; a record behind a busy key waits without holding up the rest.
                            while let wave = await waiting.nextWave() {
                                // Once shutdown is requested no handler starts: those records stay uncommitted.
                                let runnable = wave.indices.filter {
                                    let record = wave[$0]
                                    return shared.handle(
                                        .handlerReady(record.topicPartition, offset: record.offset))
                                        == .runHandler
                                }
                                let answers = runnable.isEmpty ? [] : await handler(runnable.map { wave[$0] })
                                for record in wave where !record.keyCongested {
                                    if let key = record.key { keyOrder.leave(key) }
                                }
                                // A handler that answers too few records leaves the rest uncommitted.
                                var dispositions = [RecordDisposition](repeating: .abandoned, count: wave.count)
                                for (index, answer) in zip(runnable, answers) { dispositions[index] = answer }
                                for (record, disposition) in zip(wave, dispositions) {
                                    perform(
                                        shared.handle(
                                            .handlerFinished(
                                                record.topicPartition, offset: record.offset, disposition)))
                                }
                            }
                        }
                    }
                    for await polled in stream {
                        switch polled {
                        case .record(let record):
                            batch.add(record, keyOrder: keyOrder)
                            if batch.records.count >= maxBatch { launch() }
                        case .endOfFetch:
                            launch()
                        }
                    }
                    // Dispatched but not yet launched: they start, see the shutdown and stay uncommitted.
                    launch()
                    // After a fatal error nothing more can be committed: stop the handlers.
                    if shared.failure != nil { group.cancelAll() }
                }
            } onCancel: {
                perform(shared.handle(.shutdownRequested(now: .now)))
            }
        } onGracefulShutdown: {
            perform(shared.handle(.shutdownRequested(now: .now)))
        }
        // Every handler has returned: the poll thread may finish the drain now.
        perform(shared.handle(.handlersReturned))
        await pollThreadExited
        if let failure = shared.failure { throw failure }
    }

    private func subscribe() throws(KafkaError) {
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

/// Runs a consumer as a member of a ServiceGroup: consumes until graceful shutdown,
/// then drains, commits and closes (see `KafkaConsumer.run`). List it after the
/// services its handler uses (a `KafkaProducerService`, Redis, HTTP): ServiceGroup
/// stops services in reverse order, so the consumer drains while they still run.
public struct KafkaConsumerService: Service {
    public let consumer: KafkaConsumer
    private let maxBatch: Int
    private let handler: @Sendable ([KafkaRecord]) async -> [RecordDisposition]

    public init(consumer: KafkaConsumer, handler: @escaping @Sendable (KafkaRecord) async -> RecordDisposition) {
        self.consumer = consumer
        self.maxBatch = 1
        self.handler = KafkaConsumer.oneByOne(handler)
    }

    public init(
        consumer: KafkaConsumer, maxBatch: Int,
        batchHandler: @escaping @Sendable ([KafkaRecord]) async -> [RecordDisposition]
    ) {
        self.consumer = consumer
        self.maxBatch = maxBatch
        self.handler = batchHandler
    }

    public func run() async throws {
        try await consumer.runBatches(maxBatch: maxBatch, handler: handler)
    }
}

/// See `KafkaConsumer.lag`.
private func groupLag(_ handle: OpaquePointer, timeoutMs: Int32) -> [String: Int64]? {
    var assignment: UnsafeMutablePointer<rd_kafka_topic_partition_list_t>?
    guard rd_kafka_assignment(handle, &assignment) == RD_KAFKA_RESP_ERR_NO_ERROR, let list = assignment else {
        return nil
    }
    defer { rd_kafka_topic_partition_list_destroy(list) }
    // Nothing assigned: no lag here (the gauges of topics held before go to 0).
    guard list.pointee.cnt > 0 else { return [:] }
    guard rd_kafka_committed(handle, list, timeoutMs) == RD_KAFKA_RESP_ERR_NO_ERROR else { return nil }
    var lag: [String: Int64] = [:]
    for index in 0..<Int(list.pointee.cnt) {
        let entry = list.pointee.elems[index]
        guard let name = entry.topic else { continue }
        var low: Int64 = 0
        var high: Int64 = 0
        guard
            rd_kafka_query_watermark_offsets(handle, name, entry.partition, &low, &high, timeoutMs)
                == RD_KAFKA_RESP_ERR_NO_ERROR
        else { return nil }
        let committed = entry.offset >= 0 ? entry.offset : low
        let behind = max(0, high.saturatingSubtractingZero(committed))
        let topic = String(cString: name)
        let (sum, overflow) = lag[topic, default: 0].addingReportingOverflow(behind)
        lag[topic] = overflow ? Int64.max : sum
    }
    return lag
}

extension Int64 {
    /// `self - other`, or 0 when that overflows (offsets from the broker are outside data).
    fileprivate func saturatingSubtractingZero(_ other: Int64) -> Int64 {
        let (difference, overflow) = subtractingReportingOverflow(other)
        return overflow ? 0 : difference
    }
}

/// What the poll thread hands the dispatching task.
enum Polled: Sendable {
    case record(KafkaRecord)
    /// librdkafka had nothing more fetched at hand: the records since the last mark are one fetch.
    case endOfFetch
}

/// Records gathered for one batch, each with its place in its key's line.
struct PendingBatch: Sendable {
    private(set) var records: [KafkaRecord] = []
    private var gates: [KeyOrder.Gate?] = []

    mutating func add(_ record: KafkaRecord, keyOrder: KeyOrder) {
        var record = record
        var gate: KeyOrder.Gate?
        if let key = record.key {
            gate = keyOrder.reserve(key)
            record.keyCongested = gate == nil
        }
        records.append(record)
        gates.append(gate)
    }

    /// The records that may run now, in poll order: those whose key is free. When none
    /// is, waits for the oldest one's key. Nil once every record was taken.
    mutating func nextWave() async -> [KafkaRecord]? {
        guard let first = gates.first else { return nil }
        if !gates.contains(where: { $0?.isOpen ?? true }), let gate = first { await gate.wait() }
        var wave: [KafkaRecord] = []
        var rest = PendingBatch()
        for (record, gate) in zip(records, gates) {
            if gate?.isOpen ?? true {
                wave.append(record)
            } else {
                rest.records.append(record)
                rest.gates.append(gate)
            }
        }
        self = rest
        return wave
    }
}

/// How long one poll or wait on the poll thread lasts at most: the bound on how late
/// a commit tick or the drain deadline is noticed.
private let pollStep: Duration = .milliseconds(100)
private let pollStepMs: Int32 = 100

/// The poll thread: performs what the state machine asks and feeds back what happened,
/// until it says stop (after close).
private func pollLoop(
    handle: OpaquePointer, shared: ConsumerShared, first: ConsumerStateMachine.Action,
    output: AsyncStream<Polled>.Continuation
) {
    let logger = shared.logger
    var action = first
    // Records were handed over since the last end-of-fetch mark.
    var unmarked = false
    while true {
        var event: ConsumerStateMachine.Event?
        switch action {
        case .poll, .dispatch: break
        default:
            // Not polling on: what was handed over is one batch (capacity, a pause, shutdown).
            if unmarked {
                output.yield(.endOfFetch)
                unmarked = false
            }
        }
        switch action {
        case .poll:
            // (Heartbeats continue on librdkafka's own threads. rd_kafka_poll must not be
            // called here: the main queue is redirected to the consumer queue.)
            // After a record, look without waiting first: nothing at hand ends the fetch's batch.
            var message = rd_kafka_consumer_poll(handle, unmarked ? 0 : pollStepMs)
            if message == nil && unmarked {
                output.yield(.endOfFetch)
                unmarked = false
                message = rd_kafka_consumer_poll(handle, pollStepMs)
            }
            guard let message else { break }
            let record = copyRecord(message)
            rd_kafka_message_destroy(message)
            switch record {
            case .success(let record):
                event = .recordPolled(record, nowMs: currentMillis())
            case .failure(let error) where error.code.name == "_FATAL":
                event = .clientFailed(librdkafkaFatalError(handle))
            case .failure(let error):
                if error.code.name != "_PARTITION_EOF" {
                    logger.warning("consumer error", metadata: [LogKey.error: "\(error)"])
                }
            }
        case .dispatch(let record):
            output.yield(.record(record))
            unmarked = true
        case .pause(let record, let dueMs):
            pausePartition(handle, record: record, logger: logger)
            logger.debug(
                "partition paused until due",
                metadata: [LogKey.partition: "\(record.topicPartition)", LogKey.dueMs: "\(dueMs)"])
        case .resume(let partitions):
            resumePartitions(handle, partitions)
        case .commit(let offsets):
            event = commitResult(handle, offsets, logger: logger)
        case .finalCommit(let offsets, let abandoned):
            if abandoned > 0 {
                logger.warning(
                    "shutdown: records still in flight stay uncommitted", metadata: [LogKey.inFlight: "\(abandoned)"])
            }
            event = commitResult(handle, offsets, logger: logger)
        case .wait:
            shared.wakeup.wait(timeout: pollStep)
        case .stopDispatching:
            output.finish()
        case .close:
            output.finish()
            let rc = rd_kafka_consumer_close(handle)
            if rc != RD_KAFKA_RESP_ERR_NO_ERROR {
                logger.warning("consumer close failed", metadata: [LogKey.error: "\(KafkaError.from(rc))"])
            }
            event = .closed
        case .stop:
            output.finish()
            return
        case .none, .wakePoller, .runHandler, .skipHandler:
            break
        }
        action = shared.handle(event ?? .tick(now: .now, nowMs: currentMillis()))
    }
}

private func commitResult(
    _ handle: OpaquePointer, _ offsets: [TopicPartition: Int64], logger: Logger
) -> ConsumerStateMachine.Event {
    let rc = commit(handle, offsets, logger: logger)
    if rc == RD_KAFKA_RESP_ERR__FATAL { return .clientFailed(librdkafkaFatalError(handle)) }
    return .committed(offsets, succeeded: rc == RD_KAFKA_RESP_ERR_NO_ERROR)
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

/// Pauses a delay topic's partition at a record not yet due. The state machine keeps
/// when it is due and asks for `resumePartitions` then.
private func pausePartition(_ handle: OpaquePointer, record: KafkaRecord, logger: Logger) {
    guard let list = rd_kafka_topic_partition_list_new(1) else { return }
    defer { rd_kafka_topic_partition_list_destroy(list) }
    let element = rd_kafka_topic_partition_list_add(list, record.topic, record.partition)
    element?.pointee.offset = record.offset
    rd_kafka_pause_partitions(handle, list)
    // The seek discards what was fetched past this record; fetching restarts here on resume.
    if let error = rd_kafka_seek_partitions(handle, list, 5000) {
        logger.warning("seek failed", metadata: [LogKey.error: "\(String(cString: rd_kafka_error_string(error)))"])
        rd_kafka_error_destroy(error)
    }
}

private func resumePartitions(_ handle: OpaquePointer, _ partitions: [TopicPartition]) {
    guard !partitions.isEmpty, let list = rd_kafka_topic_partition_list_new(Int32(partitions.count)) else { return }
    defer { rd_kafka_topic_partition_list_destroy(list) }
    for tp in partitions {
        rd_kafka_topic_partition_list_add(list, tp.topic, tp.partition)
    }
    rd_kafka_resume_partitions(handle, list)
}
