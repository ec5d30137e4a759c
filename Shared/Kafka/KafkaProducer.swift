import CRdKafka
import Foundation
import LogKeys
import NIOPosix
import Logging
import ServiceLifecycle
import Synchronization

/// A record to produce: key and headers are optional; the value is raw bytes.
public struct KafkaOutgoing: Sendable {
    public var topic: String
    public var key: [UInt8]?
    public var value: [UInt8]
    public var headers: [(name: String, value: [UInt8])]
    /// What to count once the broker acknowledged this record (a metric's name and
    /// dimensions). Carried, never produced: the publisher counts it after the ack.
    public var tally: Tally?

    public init(
        topic: String, key: String? = nil, value: [UInt8], headers: [(name: String, value: [UInt8])] = [],
        tally: Tally? = nil
    ) {
        self.topic = topic
        self.key = key.map { Array($0.utf8) }
        self.value = value
        self.headers = headers
        self.tally = tally
    }

    /// A counter increment that waits for the acknowledgement.
    public struct Tally: Sendable {
        public var label: String
        public var dimensions: [(String, String)]

        public init(label: String, dimensions: [(String, String)]) {
            self.label = label
            self.dimensions = dimensions
        }
    }
}

/// Where the broker stored a produced record.
public struct KafkaDeliveryReport: Sendable, Equatable {
    public var topic: String
    public var partition: Int32
    public var offset: Int64
}

/// Who waits for a record's delivery report: one sender, or a batch sent in order.
enum DeliveryWaiter: Sendable {
    case one(CheckedContinuation<KafkaDeliveryReport, any Error>)
    case batch(BatchAcknowledgement)

    func resume(with result: Result<KafkaDeliveryReport, any Error>) {
        switch self {
        case .one(let continuation): continuation.resume(with: result)
        case .batch(let batch):
            if case .failure(let error) = result { batch.finished(error) } else { batch.finished(nil) }
        }
    }
}

/// The acknowledgements of records sent together: `wait` returns once every one is
/// in, or throws the first failure (after every one is in, so nothing is left behind).
final class BatchAcknowledgement: Sendable {
    private enum Outcome {
        case pending(remaining: Int, failure: (any Error)?, waiter: CheckedContinuation<Void, any Error>?)
        case finished((any Error)?)
    }

    private let state: Mutex<Outcome>

    init(count: Int) {
        state = Mutex(count > 0 ? .pending(remaining: count, failure: nil, waiter: nil) : .finished(nil))
    }

    /// One record's report (or its failure to be enqueued).
    func finished(_ error: (any Error)?) {
        let resume: (CheckedContinuation<Void, any Error>, (any Error)?)? = state.withLock { outcome in
            guard case .pending(let remaining, let failure, let waiter) = outcome else { return nil }
            let first = failure ?? error
            guard remaining <= 1 else {
                outcome = .pending(remaining: remaining - 1, failure: first, waiter: waiter)
                return nil
            }
            outcome = .finished(first)
            return waiter.map { ($0, first) }
        }
        if let (waiter, failure) = resume {
            if let failure { waiter.resume(throwing: failure) } else { waiter.resume() }
        }
    }

    func wait() async throws {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            let done: (any Error)?? = state.withLock { outcome in
                switch outcome {
                case .finished(let failure):
                    return .some(failure)
                case .pending(let remaining, let failure, _):
                    outcome = .pending(remaining: remaining, failure: failure, waiter: continuation)
                    return .none
                }
            }
            if case .some(let failure) = done {
                if let failure { continuation.resume(throwing: failure) } else { continuation.resume() }
            }
        }
    }
}

/// Pending sends, keyed by the id passed to librdkafka as the message opaque.
/// The delivery-report callback runs on the producer's poll thread and resumes them.
final class DeliveryRegistry: Sendable {
    private struct State {
        var nextID: UInt = 1
        var waiting: [UInt: DeliveryWaiter] = [:]
        var closed = false
    }

    private let state = Mutex(State())

    /// The id to pass as the message opaque; nil once `failAll` ran (the producer is
    /// shut down, so no delivery report would ever resume the continuation).
    func register(_ continuation: DeliveryWaiter) -> UInt? {
        state.withLock { s in
            guard !s.closed else { return nil }
            let id = s.nextID
            s.nextID &+= 1
            if s.nextID == 0 { s.nextID = 1 }
            s.waiting[id] = continuation
            return id
        }
    }

    func take(_ id: UInt) -> DeliveryWaiter? {
        state.withLock { $0.waiting.removeValue(forKey: id) }
    }

    /// Fails every pending send, and refuses new ones.
    func failAll(_ error: KafkaError) {
        let all = state.withLock { s in
            let all = s.waiting
            s.waiting = [:]
            s.closed = true
            return all
        }
        for waiter in all.values { waiter.resume(with: .failure(error)) }
    }
}

/// Delivery reports arrive here from `rd_kafka_poll`; the message opaque is the registry id.
private let deliveryReportCallback:
    @convention(c) (OpaquePointer?, UnsafePointer<rd_kafka_message_t>?, UnsafeMutableRawPointer?) -> Void = {
        _, message, opaque in
        guard let message, let opaque else { return }
        let registry = Unmanaged<DeliveryRegistry>.fromOpaque(opaque).takeUnretainedValue()
        let id = UInt(bitPattern: message.pointee._private)
        guard let waiter = registry.take(id) else { return }
        let m = message.pointee
        if m.err != RD_KAFKA_RESP_ERR_NO_ERROR {
            waiter.resume(with: .failure(KafkaError.from(m.err)))
        } else if case .batch(let batch) = waiter {
            batch.finished(nil)
        } else {
            let topic = m.rkt.map { String(cString: rd_kafka_topic_name($0)) } ?? ""
            waiter.resume(with: .success(KafkaDeliveryReport(topic: topic, partition: m.partition, offset: m.offset)))
        }
    }

/// The producer handle and what its callbacks use. The producer and its delivery-report
/// poller both hold it; whichever lets go last destroys the handle.
final class ProducerCore: Sendable {
    let handle: HandleBox
    let registry: DeliveryRegistry
    /// Set while delivery reports should be served.
    let running = RunFlag()
    /// The main queue's handle, kept while librdkafka announces work on `announceFD`.
    private let mainQueue: HandleBox
    private let announceFD: Int32

    init(handle: HandleBox, registry: DeliveryRegistry, announceFD: Int32) {
        self.handle = handle
        self.registry = registry
        self.announceFD = announceFD
        mainQueue = HandleBox(rd_kafka_queue_get_main(handle.pointer))
        rd_kafka_queue_io_event_enable(mainQueue.pointer, announceFD, "1", 1)
    }

    deinit {
        rd_kafka_queue_destroy(mainQueue.pointer)
        rd_kafka_destroy(handle.pointer)
        // Only now: librdkafka no longer writes to it, so the number cannot be reused under it.
        Glibc.close(announceFD)
        registry.failAll(KafkaError(code: .closed, message: "producer destroyed"))
    }
}

/// An idempotent producer (`enable.idempotence=true`, `acks=all`) whose `send`
/// returns only once the broker has acknowledged the record. Delivery reports are
/// served on an event loop (`DeliveryReportPoller`). As a ServiceGroup
/// member, use `KafkaProducerService`, which flushes and closes it on shutdown.
public final class KafkaProducer: Sendable {
    private let core: ProducerCore
    private var handle: HandleBox { core.handle }
    private var registry: DeliveryRegistry { core.registry }
    private var running: RunFlag { core.running }
    private let logger: Logger
    private let poller: DeliveryReportPoller

    public init(configuration: KafkaConfiguration, logger: Logger) throws {
        let settings = configuration.settings(
            [
                "bootstrap.servers": configuration.bootstrapServers,
                "client.id": configuration.clientID,
                "enable.idempotence": "true",
                "acks": "all",
                // Records of 5 ms share a produce request (librdkafka sends one a partition):
                // at 1,000 notifications/s the broker spent 7–9 % less than at 2 ms and the
                // stages 3–4 % less, for a few ms more per hop
                // (benchmarks/history/19-issue-27-part-3-threads-and-requests.md).
                "linger.ms": "5",
                "message.timeout.ms": "30000",
                // A broker that went away is tried again within a second (librdkafka's 10 s
                // default): records are sent as soon as it is back, and a record that cannot
                // be delivered is reported at `message.timeout.ms`, not up to 10 s later (the
                // broker outage drill measured 13.5 s against ingest's 5 s bound).
                "reconnect.backoff.max.ms": "1000",
            ], producer: true)
        let conf = try makeConf(settings)
        let registry = DeliveryRegistry()
        rd_kafka_conf_set_dr_msg_cb(conf, deliveryReportCallback)
        // The registry outlives the handle: it is a stored property released after deinit's destroy.
        rd_kafka_conf_set_opaque(conf, Unmanaged.passUnretained(registry).toOpaque())
        let announce = try DeliveryReportPoller.makePipe()
        let handle: OpaquePointer
        do {
            handle = try makeHandle(type: RD_KAFKA_PRODUCER, conf: conf)
        } catch {
            Glibc.close(announce.read)
            Glibc.close(announce.write)
            throw error
        }
        let core = ProducerCore(handle: HandleBox(handle), registry: registry, announceFD: announce.write)
        self.core = core
        self.logger = logger
        poller = DeliveryReportPoller(
            core: core, readFD: announce.read, loop: MultiThreadedEventLoopGroup.singleton.next())
    }

    deinit {
        _ = core.running.clear()
        poller.stop()
    }

    /// Produces one record and waits for the broker's acknowledgement.
    @discardableResult
    public func send(_ record: KafkaOutgoing) async throws -> KafkaDeliveryReport {
        var backoff: UInt64 = 1_000_000
        while true {
            do {
                return try await enqueue(record)
            } catch let error as KafkaError where error.code == .queueFull {
                // The local queue is full: let delivery reports drain it, then try again.
                try await Task.sleep(nanoseconds: backoff)
                backoff = min(backoff * 2, 100_000_000)
            }
        }
    }

    /// Produces several records, enqueued in their order (so records with one key keep
    /// it), and waits for every acknowledgement together. After a record that cannot be
    /// enqueued, the later ones are not produced. Throws the first failure once every
    /// enqueued record is acknowledged or failed.
    public func sendAll(_ records: [KafkaOutgoing]) async throws {
        guard running.isSet else {
            throw KafkaError(code: .closed, message: "producer is shut down")
        }
        let acknowledgement = BatchAcknowledgement(count: records.count)
        var failure: (any Error)?
        for record in records {
            // After a failure nothing more is produced, so no later record overtakes it.
            if let failure {
                acknowledgement.finished(failure)
                continue
            }
            var backoff: UInt64 = 1_000_000
            while true {
                guard let id = registry.register(.batch(acknowledgement)) else {
                    failure = KafkaError(code: .closed, message: "producer is shut down")
                    acknowledgement.finished(failure)
                    break
                }
                guard let error = produce(record, opaque: UnsafeMutableRawPointer(bitPattern: id)) else { break }
                // Not enqueued: no delivery report will come for this id. (Nil when a
                // shutdown's `failAll` took it and answered for it already.)
                guard registry.take(id) != nil else {
                    failure = error
                    break
                }
                guard error.code == .queueFull else {
                    failure = error
                    acknowledgement.finished(error)
                    break
                }
                // The local queue is full: let delivery reports drain it, then try again,
                // before any later record, so the order holds.
                do {
                    try await Task.sleep(nanoseconds: backoff)
                } catch {
                    failure = error
                    acknowledgement.finished(error)
                    break
                }
                backoff = min(backoff * 2, 100_000_000)
            }
        }
        try await acknowledgement.wait()
    }

    private func enqueue(_ record: KafkaOutgoing) async throws -> KafkaDeliveryReport {
        guard running.isSet else {
            throw KafkaError(code: .closed, message: "producer is shut down")
        }
        return try await withCheckedThrowingContinuation { continuation in
            guard let id = registry.register(.one(continuation)) else {
                continuation.resume(throwing: KafkaError(code: .closed, message: "producer is shut down"))
                return
            }
            if let error = produce(record, opaque: UnsafeMutableRawPointer(bitPattern: id)) {
                // Not enqueued: no delivery report will come, so resume here.
                registry.take(id)?.resume(with: .failure(error))
            }
        }
    }

    private func produce(_ record: KafkaOutgoing, opaque: UnsafeMutableRawPointer?) -> KafkaError? {
        let headers: OpaquePointer? = record.headers.isEmpty ? nil : rd_kafka_headers_new(record.headers.count)
        for header in record.headers {
            header.value.withUnsafeBytes { raw in
                _ = rd_kafka_header_add(headers, header.name, -1, raw.baseAddress, raw.count)
            }
        }
        let key = record.key ?? []
        let error: OpaquePointer? = record.topic.withCString { topic in
            record.value.withUnsafeBytes { value in
                key.withUnsafeBytes { keyBytes in
                    var vus = [rd_kafka_vu_t](repeating: rd_kafka_vu_t(), count: 6)
                    vus[0].vtype = RD_KAFKA_VTYPE_TOPIC
                    vus[0].u.cstr = topic
                    vus[1].vtype = RD_KAFKA_VTYPE_VALUE
                    vus[1].u.mem.ptr = UnsafeMutableRawPointer(mutating: value.baseAddress)
                    vus[1].u.mem.size = value.count
                    vus[2].vtype = RD_KAFKA_VTYPE_MSGFLAGS
                    vus[2].u.i = RD_KAFKA_MSG_F_COPY
                    vus[3].vtype = RD_KAFKA_VTYPE_OPAQUE
                    vus[3].u.ptr = opaque
                    var count = 4
                    if record.key != nil {
                        vus[count].vtype = RD_KAFKA_VTYPE_KEY
                        vus[count].u.mem.ptr = UnsafeMutableRawPointer(mutating: keyBytes.baseAddress)
                        vus[count].u.mem.size = keyBytes.count
                        count += 1
                    }
                    if let headers {
                        vus[count].vtype = RD_KAFKA_VTYPE_HEADERS
                        vus[count].u.headers = headers
                        count += 1
                    }
                    return rd_kafka_produceva(handle.pointer, vus, count)
                }
            }
        }
        guard let error else { return nil }
        // On failure the headers were not taken over by librdkafka.
        if let headers { rd_kafka_headers_destroy(headers) }
        let code = rd_kafka_error_code(error)
        rd_kafka_error_destroy(error)
        return KafkaError.from(code)
    }

    /// Waits for queued records to be delivered (bounded), then stops the poll thread
    /// and fails the sends still waiting. Blocks the calling thread for up to `timeout`:
    /// from async code use `close(flushTimeout:)`.
    public func shutdown(timeout: Duration = .seconds(10)) {
        guard running.isSet else { return }
        let rc = rd_kafka_flush(handle.pointer, milliseconds(timeout))
        if rc != RD_KAFKA_RESP_ERR_NO_ERROR {
            logger.warning("producer flush did not finish", metadata: [LogKey.error: "\(KafkaError.from(rc))"])
        }
        _ = running.clear()
        poller.stop()
        registry.failAll(KafkaError(code: .closed, message: "producer shut down before delivery"))
    }

    /// `shutdown(timeout:)` on a dedicated thread: suspends the caller while librdkafka
    /// flushes, without holding a Swift-concurrency or GCD thread.
    public func close(flushTimeout: Duration = .seconds(10)) async {
        await onDedicatedThread(name: "kafka-producer-flush") { [self] in
            shutdown(timeout: flushTimeout)
        }
    }

    /// True when the broker answers a metadata request within the timeout.
    public func isConnected(timeout: Duration = .seconds(1)) -> Bool {
        brokerAnswers(handle.pointer, timeout: timeout)
    }
}

/// Runs a producer as a member of a ServiceGroup: idle until graceful shutdown, then
/// flushes queued records (at most `flushTimeout`) and closes the producer, on a
/// dedicated thread.
///
/// ServiceGroup stops services in reverse order, so list the producer service first
/// and the services that send through it (HTTP, `KafkaConsumerService`) after it:
///
///     ServiceGroup(services: [KafkaProducerService(producer: producer), http,
///                             KafkaConsumerService(consumer: consumer, handler: handle)], …)
///
/// The consumer then drains (its handlers still producing) before the producer flushes.
public struct KafkaProducerService: Service {
    public let producer: KafkaProducer
    public let flushTimeout: Duration

    public init(producer: KafkaProducer, flushTimeout: Duration = .seconds(10)) {
        self.producer = producer
        self.flushTimeout = flushTimeout
    }

    public func run() async throws {
        // Cancellation ends the wait too; the flush is bounded either way.
        try? await gracefulShutdown()
        await producer.close(flushTimeout: flushTimeout)
    }
}

/// A librdkafka handle (rd_kafka_t, mock cluster), immutable after creation.
/// librdkafka handles are thread-safe, so sharing the pointer is sound; its owner
/// destroys it once.
final class HandleBox: @unchecked Sendable {
    let pointer: OpaquePointer
    init(_ pointer: OpaquePointer) { self.pointer = pointer }
}

/// Whole milliseconds, for librdkafka timeouts.
func milliseconds(_ duration: Duration) -> Int32 {
    let ms = duration.components.seconds * 1000 + duration.components.attoseconds / 1_000_000_000_000_000
    return Int32(clamping: ms)
}

func brokerAnswers(_ handle: OpaquePointer, timeout: Duration) -> Bool {
    var metadata: UnsafePointer<rd_kafka_metadata>?
    let ms = milliseconds(timeout)
    let rc = rd_kafka_metadata(handle, 0, nil, &metadata, max(ms, 100))
    if let metadata { rd_kafka_metadata_destroy(metadata) }
    return rc == RD_KAFKA_RESP_ERR_NO_ERROR
}

/// A flag shared with a poll thread: set while the thread should keep running.
final class RunFlag: Sendable {
    private let value = Mutex(true)

    var isSet: Bool { value.withLock { $0 } }

    /// Clears the flag; true if this call cleared it.
    func clear() -> Bool {
        value.withLock { v in
            defer { v = false }
            return v
        }
    }
}
