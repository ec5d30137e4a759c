/// The group consumer's lifecycle as a plain value: events in, actions out, no I/O.
///
/// `KafkaConsumer` keeps one behind a lock. Its poll thread feeds the results of what
/// it did (a record polled, a commit done, the handle closed) or, with nothing to
/// report, a `tick`, and performs the action it gets back. Handler tasks, the
/// graceful-shutdown handler and the rebalance callback feed their events the same
/// way and perform the (non-blocking) actions they get back.
///
///     idle ──start──▶ polling ◀──handler finished──▶ pausedForCapacity
///                        │   (maxInFlight reached / a slot freed)   │
///                        └──────────shutdown requested──────────────┘
///                                        ▼
///     draining (no new records; in-flight ones get up to drainTimeout)
///                                        │  all finished, or drain timed out
///                                        ▼
///     committingFinal (finished offsets; unfinished ones stay uncommitted)
///                                        │  committed
///                                        ▼
///     closing (leave the group) ──closed──▶ closed
///
/// A fatal error in any running state skips the drain and the final commit (the
/// handle cannot commit any more) and goes through `closing` to `failed`.
///
/// Guarantees kept here:
/// - at most `maxInFlight` records are dispatched and not yet finished;
/// - each partition commits only up to its lowest unfinished offset (`OffsetTracker`);
/// - once shutdown is requested no record is dispatched and no handler starts;
///   unfinished records stay uncommitted and are redelivered to the next owner;
/// - with a due header (delay topics), a record not yet due pauses its partition,
///   which is resumed once it is due.
struct ConsumerStateMachine: Sendable {
    enum State: Equatable, Sendable {
        /// Created, not subscribed to the poll loop yet.
        case idle
        /// Fetching records: fewer than `maxInFlight` are in flight.
        case polling
        /// `maxInFlight` records in flight: no poll until a handler finishes.
        case pausedForCapacity
        /// Shutdown requested: nothing new is dispatched; waiting for the records in
        /// flight until `deadline`.
        case draining(deadline: ContinuousClock.Instant)
        /// The last commit of finished offsets is under way.
        case committingFinal
        /// Leaving the group (`rd_kafka_consumer_close`).
        case closing
        /// Closed after a graceful shutdown.
        case closed
        /// Closed after a fatal error (see `failure`).
        case failed
    }

    enum Event: Sendable {
        /// The consumer is subscribed and its poll thread is about to start.
        case start(now: ContinuousClock.Instant)
        /// The poll thread has nothing to report: what should it do next?
        /// `nowMs` is wall-clock time (ms since the epoch) for due headers.
        case tick(now: ContinuousClock.Instant, nowMs: Int64)
        /// `rd_kafka_consumer_poll` returned a record.
        case recordPolled(KafkaRecord, nowMs: Int64)
        /// A dispatched record's key gate opened: may its handler run?
        case handlerReady(TopicPartition, offset: Int64)
        /// A dispatched record is done with (handled, abandoned or skipped).
        case handlerFinished(TopicPartition, offset: Int64, RecordDisposition)
        /// Every handler task has returned and the record stream is no longer read:
        /// records dispatched but never handled are abandoned.
        case handlersReturned
        /// A commit requested by `.commit` or `.finalCommit` finished.
        case committed([TopicPartition: Int64], succeeded: Bool)
        /// A rebalance took these partitions away.
        case partitionsRevoked([TopicPartition])
        /// Graceful shutdown or cancellation.
        case shutdownRequested(now: ContinuousClock.Instant)
        /// The handle cannot be used any more.
        case clientFailed(KafkaError)
        /// `rd_kafka_consumer_close` returned.
        case closed
    }

    enum Action: Sendable, Equatable {
        /// Nothing to do.
        case none
        /// Poll once (bounded wait).
        case poll
        /// Hand the record to the handlers (yield it to the record stream).
        case dispatch(KafkaRecord)
        /// Pause the record's partition and seek back to it: not due before `dueMs`.
        case pause(KafkaRecord, dueMs: Int64)
        /// Resume these paused partitions: their record is due.
        case resume([TopicPartition])
        /// Commit these positions, then report `.committed` (except after a revoke).
        case commit([TopicPartition: Int64])
        /// The last commit before close; `abandoned` records were still in flight when
        /// the drain ended and stay uncommitted. Report `.committed` (also when empty).
        case finalCommit([TopicPartition: Int64], abandoned: Int)
        /// Sleep until woken or briefly (capacity full, or draining).
        case wait
        /// Wake the poll thread if it waits.
        case wakePoller
        /// Stop handing out records (finish the record stream) and wake the poll thread.
        case stopDispatching
        /// Run the record's handler.
        case runHandler
        /// Do not run the handler: report the record `.abandoned` (uncommitted).
        case skipHandler
        /// Stop dispatching, leave the group and close; then report `.closed`.
        case close
        /// The poll thread ends.
        case stop

        static func == (lhs: Action, rhs: Action) -> Bool {
            switch (lhs, rhs) {
            case (.none, .none), (.poll, .poll), (.wait, .wait), (.wakePoller, .wakePoller),
                (.stopDispatching, .stopDispatching), (.runHandler, .runHandler), (.skipHandler, .skipHandler),
                (.close, .close), (.stop, .stop):
                true
            case (.dispatch(let a), .dispatch(let b)):
                a.topicPartition == b.topicPartition && a.offset == b.offset
            case (.pause(let a, let dueA), .pause(let b, let dueB)):
                a.topicPartition == b.topicPartition && a.offset == b.offset && dueA == dueB
            case (.resume(let a), .resume(let b)):
                Set(a) == Set(b)
            case (.commit(let a), .commit(let b)):
                a == b
            case (.finalCommit(let a, let abandonedA), .finalCommit(let b, let abandonedB)):
                a == b && abandonedA == abandonedB
            default:
                false
            }
        }
    }

    let maxInFlight: Int
    let commitInterval: Duration
    let drainTimeout: Duration
    let dueHeader: String?

    private(set) var state: State = .idle
    /// Records dispatched and not yet finished (including records of revoked partitions).
    private(set) var inFlight = 0
    /// What stopped the consumer, in `closing` and `failed`.
    private(set) var failure: KafkaError?
    private(set) var tracker = OffsetTracker()
    /// Paused partitions of a delay topic and when their next record is due (ms since the epoch).
    private(set) var pausedUntil: [TopicPartition: Int64] = [:]
    private var lastCommit: ContinuousClock.Instant?

    init(maxInFlight: Int, commitInterval: Duration, drainTimeout: Duration, dueHeader: String? = nil) {
        self.maxInFlight = max(1, maxInFlight)
        self.commitInterval = commitInterval
        self.drainTimeout = drainTimeout
        self.dueHeader = dueHeader
    }

    init(configuration: KafkaConsumerConfiguration) {
        self.init(
            maxInFlight: configuration.maxInFlight, commitInterval: configuration.commitInterval,
            drainTimeout: configuration.drainTimeout, dueHeader: configuration.dueHeader)
    }

    /// True while records may be polled and dispatched.
    var isRunning: Bool { state == .polling || state == .pausedForCapacity }

    /// Applies one event and returns what to do next. An event that is not valid in
    /// the current state changes nothing and returns `.none` (or, for a record polled
    /// too late, drops it: it was never started, so it is neither handled nor committed).
    mutating func handle(_ event: Event) -> Action {
        switch event {
        case .start(let now):
            guard state == .idle else { return .none }
            state = .polling
            lastCommit = now
            return .poll

        case .tick(let now, let nowMs):
            return tick(now: now, nowMs: nowMs)

        case .recordPolled(let record, let nowMs):
            // Only `polling` asks for a poll. Shutdown or a fatal error may have come
            // meanwhile: the record is dropped unstarted and redelivered to the next owner.
            guard state == .polling else { return .none }
            if let header = dueHeader, let due = Self.dueTime(record, header: header), due > nowMs {
                pausedUntil[record.topicPartition] = due
                return .pause(record, dueMs: due)
            }
            tracker.started(record.topicPartition, offset: record.offset)
            inFlight += 1
            if inFlight >= maxInFlight { state = .pausedForCapacity }
            return .dispatch(record)

        case .handlerReady:
            return isRunning ? .runHandler : .skipHandler

        case .handlerFinished(let tp, let offset, let disposition):
            guard state != .idle, inFlight > 0 else { return .none }
            inFlight -= 1
            if case .done = disposition { tracker.finished(tp, offset: offset) }
            switch state {
            case .pausedForCapacity:
                state = .polling
                return .wakePoller
            case .draining:
                return inFlight == 0 ? .wakePoller : .none
            default:
                return .none
            }

        case .handlersReturned:
            guard state != .idle else { return .none }
            // Whatever is still counted was dispatched but never handled (the stream
            // ended first): it stays unfinished in the tracker, hence uncommitted.
            inFlight = 0
            switch state {
            case .polling, .pausedForCapacity:
                // No one reads the records any more: shut down with nothing to drain.
                state = .draining(deadline: lastCommit ?? .now)
                return .stopDispatching
            case .draining:
                return .wakePoller
            default:
                return .none
            }

        case .committed(let offsets, let succeeded):
            switch state {
            case .polling, .pausedForCapacity, .draining:
                if succeeded { tracker.didCommit(offsets) }
                return .none
            case .committingFinal:
                if succeeded { tracker.didCommit(offsets) }
                state = .closing
                return .close
            default:
                return .none
            }

        case .partitionsRevoked(let tps):
            switch state {
            case .idle, .closed, .failed:
                return .none
            default:
                // Commit what is finished for them, then forget them, so a late
                // completion never commits over the new owner's position.
                let revoked = Set(tps)
                let commits = tracker.pendingCommits().filter { revoked.contains($0.key) }
                tracker.revoke(tps)
                return commits.isEmpty ? .none : .commit(commits)
            }

        case .shutdownRequested(let now):
            guard isRunning else { return .none }
            state = .draining(deadline: now + drainTimeout)
            return .stopDispatching

        case .clientFailed(let error):
            switch state {
            case .idle:
                failure = error
                state = .failed
                return .stop
            case .polling, .pausedForCapacity, .draining, .committingFinal:
                // Commits cannot succeed any more: close without draining.
                failure = error
                state = .closing
                return .close
            case .closing:
                if failure == nil { failure = error }
                return .none
            case .closed, .failed:
                return .none
            }

        case .closed:
            guard state == .closing else { return .none }
            state = failure == nil ? .closed : .failed
            return .stop
        }
    }

    private mutating func tick(now: ContinuousClock.Instant, nowMs: Int64) -> Action {
        switch state {
        case .idle, .closed, .failed:
            return .stop
        case .closing:
            return .close
        case .committingFinal:
            // The final commit is under way; its result (`.committed`) moves on.
            return .wait
        case .draining(let deadline):
            if inFlight == 0 { return beginFinalCommit(abandoned: 0) }
            if now >= deadline { return beginFinalCommit(abandoned: inFlight) }
            if let commit = commitIfDue(now: now) { return commit }
            return .wait
        case .polling, .pausedForCapacity:
            if let commit = commitIfDue(now: now) { return commit }
            let due = pausedUntil.filter { $0.value <= nowMs }.map(\.key)
            if !due.isEmpty {
                for tp in due { pausedUntil[tp] = nil }
                return .resume(due.sorted { ($0.topic, $0.partition) < ($1.topic, $1.partition) })
            }
            return state == .polling ? .poll : .wait
        }
    }

    private mutating func beginFinalCommit(abandoned: Int) -> Action {
        state = .committingFinal
        return .finalCommit(tracker.pendingCommits(), abandoned: abandoned)
    }

    private mutating func commitIfDue(now: ContinuousClock.Instant) -> Action? {
        guard let last = lastCommit, now - last >= commitInterval else { return nil }
        lastCommit = now
        let pending = tracker.pendingCommits()
        return pending.isEmpty ? nil : .commit(pending)
    }

    static func dueTime(_ record: KafkaRecord, header: String) -> Int64? {
        record.header(header).flatMap { Int64(String(decoding: $0, as: UTF8.self)) }
    }
}
