import Testing

@testable import Kafka

/// The consumer lifecycle without a broker: each test feeds events and checks the
/// exact action and state that come back.
@Suite struct ConsumerStateMachineTests {
    typealias Machine = ConsumerStateMachine
    let t0 = ContinuousClock.now
    let tp = TopicPartition(topic: "t", partition: 0)
    let other = TopicPartition(topic: "t", partition: 1)

    func record(_ offset: Int64, partition: Int32 = 0, headers: [(name: String, value: [UInt8])] = []) -> KafkaRecord {
        KafkaRecord(
            topic: "t", partition: partition, offset: offset, key: nil, value: [], headers: headers, timestampMs: 0)
    }

    func machine(maxInFlight: Int = 3, dueHeader: String? = nil) -> Machine {
        var m = Machine(
            maxInFlight: maxInFlight, commitInterval: .milliseconds(200), drainTimeout: .seconds(10),
            dueHeader: dueHeader)
        #expect(m.handle(.start(now: t0)) == .poll)
        return m
    }

    /// A tick soon after start: no commit is due yet.
    func tick(_ m: inout Machine, after: Duration = .milliseconds(1), nowMs: Int64 = 1_000) -> Machine.Action {
        m.handle(.tick(now: t0 + after, nowMs: nowMs))
    }

    func dispatch(_ m: inout Machine, _ offset: Int64, partition: Int32 = 0) {
        let r = record(offset, partition: partition)
        #expect(m.handle(.recordPolled(r, nowMs: 1_000)) == .dispatch(r))
    }

    func finish(
        _ m: inout Machine, _ offset: Int64, partition: Int32 = 0, _ disposition: RecordDisposition = .done
    ) -> Machine.Action {
        m.handle(.handlerFinished(TopicPartition(topic: "t", partition: partition), offset: offset, disposition))
    }

    // MARK: start and polling

    @Test func startsIdleAndStartPolls() {
        var m = Machine(maxInFlight: 2, commitInterval: .seconds(1), drainTimeout: .seconds(1))
        #expect(m.state == .idle)
        #expect(m.handle(.start(now: t0)) == .poll)
        #expect(m.state == .polling)
        #expect(tick(&m) == .poll)
    }

    @Test func startTwiceIsIgnored() {
        var m = machine()
        #expect(m.handle(.start(now: t0)) == .none)
        #expect(m.state == .polling)
    }

    @Test func polledRecordIsDispatchedAndTracked() {
        var m = machine()
        dispatch(&m, 7)
        #expect(m.inFlight == 1)
        #expect(m.tracker.inFlightCount == 1)
        #expect(m.state == .polling)
        #expect(tick(&m) == .poll)
    }

    @Test func handlerRunsWhileRunning() {
        var m = machine()
        dispatch(&m, 1)
        #expect(m.handle(.handlerReady(tp, offset: 1)) == .runHandler)
    }

    // MARK: capacity

    @Test func capacityFullStopsPollingUntilASlotFrees() {
        var m = machine(maxInFlight: 2)
        dispatch(&m, 0)
        #expect(m.state == .polling)
        dispatch(&m, 1)
        #expect(m.state == .pausedForCapacity)
        #expect(m.inFlight == 2)
        // Full: every tick waits instead of polling.
        #expect(tick(&m) == .wait)
        #expect(tick(&m, after: .milliseconds(50)) == .wait)
        // A slot frees: the waiting poll thread is woken and polls again.
        #expect(finish(&m, 0) == .wakePoller)
        #expect(m.state == .polling)
        #expect(m.inFlight == 1)
        #expect(tick(&m, after: .milliseconds(60)) == .poll)
    }

    @Test func abandonedRecordAlsoFreesItsSlot() {
        var m = machine(maxInFlight: 1)
        dispatch(&m, 0)
        #expect(m.state == .pausedForCapacity)
        #expect(finish(&m, 0, .abandoned) == .wakePoller)
        #expect(m.state == .polling)
        // …but its offset stays uncommitted.
        #expect(m.tracker.pendingCommits()[tp] == 0)
    }

    @Test func neverMoreThanMaxInFlightDispatched() {
        var m = machine(maxInFlight: 3)
        var dispatched = 0
        var offset: Int64 = 0
        for _ in 0..<20 {
            switch tick(&m) {
            case .poll:
                #expect(m.handle(.recordPolled(record(offset), nowMs: 1_000)) == .dispatch(record(offset)))
                offset += 1
                dispatched += 1
            case .wait:
                break
            default:
                Issue.record("unexpected action")
            }
            #expect(m.inFlight <= 3)
        }
        #expect(dispatched == 3)
        #expect(m.state == .pausedForCapacity)
    }

    @Test func handlerFinishedBelowCapacityNeedsNoWakeUp() {
        var m = machine(maxInFlight: 3)
        dispatch(&m, 0)
        #expect(finish(&m, 0) == .none)
        #expect(m.inFlight == 0)
    }

    // MARK: commits

    @Test func commitTickCommitsUpToTheLowestUnfinishedOffset() {
        var m = machine(maxInFlight: 10)
        for offset in 10...13 { dispatch(&m, Int64(offset)) }
        _ = finish(&m, 11)
        _ = finish(&m, 13)
        // Before the interval: no commit.
        #expect(tick(&m, after: .milliseconds(100)) == .poll)
        // 10 is unfinished: the partition commits 10, not past it.
        #expect(tick(&m, after: .milliseconds(200)) == .commit([tp: 10]))
        #expect(m.handle(.committed([tp: 10], succeeded: true)) == .none)
        // Nothing new to commit: the next tick polls, and so does the next interval.
        #expect(tick(&m, after: .milliseconds(250)) == .poll)
        #expect(tick(&m, after: .milliseconds(400)) == .poll)
        _ = finish(&m, 10)
        _ = finish(&m, 12)
        #expect(tick(&m, after: .milliseconds(600)) == .commit([tp: 14]))
    }

    @Test func commitTickCoversEveryPartition() {
        var m = machine(maxInFlight: 10)
        dispatch(&m, 3)
        dispatch(&m, 7, partition: 1)
        _ = finish(&m, 7, partition: 1)
        #expect(tick(&m, after: .milliseconds(200)) == .commit([tp: 3, other: 8]))
    }

    @Test func failedCommitIsRetriedAtTheNextTick() {
        var m = machine()
        dispatch(&m, 0)
        _ = finish(&m, 0)
        #expect(tick(&m, after: .milliseconds(200)) == .commit([tp: 1]))
        #expect(m.handle(.committed([tp: 1], succeeded: false)) == .none)
        #expect(tick(&m, after: .milliseconds(300)) == .poll)
        #expect(tick(&m, after: .milliseconds(400)) == .commit([tp: 1]))
        #expect(m.handle(.committed([tp: 1], succeeded: true)) == .none)
        #expect(tick(&m, after: .milliseconds(600)) == .poll)
    }

    @Test func commitTickAlsoFiresWhileCapacityIsFull() {
        var m = machine(maxInFlight: 2)
        dispatch(&m, 4)
        dispatch(&m, 5)
        #expect(m.state == .pausedForCapacity)
        // Nothing finished: the position is the lowest unfinished offset itself.
        #expect(tick(&m, after: .milliseconds(200)) == .commit([tp: 4]))
        #expect(m.handle(.committed([tp: 4], succeeded: true)) == .none)
        #expect(m.state == .pausedForCapacity)
        #expect(tick(&m, after: .milliseconds(210)) == .wait)
    }

    @Test func pausedPartitionsResumeWhileCapacityIsFull() {
        var m = machine(maxInFlight: 1, dueHeader: "due")
        let later = record(3, partition: 1, headers: [("due", Array("2000".utf8))])
        #expect(m.handle(.recordPolled(later, nowMs: 1_000)) == .pause(later, dueMs: 2_000))
        dispatch(&m, 0)
        #expect(m.state == .pausedForCapacity)
        #expect(tick(&m, nowMs: 2_000) == .resume([other]))
        #expect(tick(&m, nowMs: 2_001) == .wait)
    }

    @Test func revokedPartitionsCommitWhatIsFinishedAndForgetTheRest() {
        var m = machine(maxInFlight: 10)
        dispatch(&m, 4)
        dispatch(&m, 5)
        dispatch(&m, 9, partition: 1)
        _ = finish(&m, 4)
        #expect(m.handle(.partitionsRevoked([tp])) == .commit([tp: 5]))
        // A late completion of the revoked partition frees its slot but commits nothing.
        _ = finish(&m, 5)
        #expect(m.inFlight == 1)
        #expect(m.tracker.pendingCommits() == [other: 9])
        // Nothing finished on partition 1: its position is its unfinished record, 9.
        #expect(m.handle(.partitionsRevoked([other])) == .commit([other: 9]))
        // Revoked again, or never seen: nothing to commit.
        #expect(m.handle(.partitionsRevoked([other, TopicPartition(topic: "u", partition: 0)])) == .none)
        #expect(m.tracker.pendingCommits().isEmpty)
    }

    // MARK: due header (delay topics)

    @Test func recordNotYetDuePausesItsPartitionUntilDue() {
        var m = machine(dueHeader: "due")
        let early = record(5, headers: [("due", Array("5000".utf8))])
        #expect(m.handle(.recordPolled(early, nowMs: 1_000)) == .pause(early, dueMs: 5_000))
        // Not dispatched, not started: it holds no slot and nothing is committed past it.
        #expect(m.inFlight == 0)
        #expect(m.tracker.pendingCommits().isEmpty)
        #expect(m.pausedUntil == [tp: 5_000])
        #expect(tick(&m, nowMs: 4_999) == .poll)
        #expect(tick(&m, nowMs: 5_000) == .resume([tp]))
        #expect(m.pausedUntil.isEmpty)
        #expect(tick(&m, nowMs: 5_001) == .poll)
        // Once due it is dispatched like any other record.
        #expect(m.handle(.recordPolled(early, nowMs: 5_001)) == .dispatch(early))
    }

    @Test func dueRecordAndRecordsWithoutTheHeaderAreDispatched() {
        var m = machine(dueHeader: "due")
        let due = record(1, headers: [("due", Array("900".utf8))])
        #expect(m.handle(.recordPolled(due, nowMs: 1_000)) == .dispatch(due))
        #expect(m.handle(.recordPolled(record(2), nowMs: 1_000)) == .dispatch(record(2)))
    }

    @Test func withoutDueHeaderConfiguredTheHeaderIsIgnored() {
        var m = machine()
        let r = record(1, headers: [("due", Array("999999".utf8))])
        #expect(m.handle(.recordPolled(r, nowMs: 1_000)) == .dispatch(r))
    }

    // MARK: shutdown

    @Test func shutdownWithNothingInFlightCommitsAndCloses() {
        var m = machine()
        dispatch(&m, 0)
        _ = finish(&m, 0)
        #expect(m.handle(.shutdownRequested(now: t0)) == .stopDispatching)
        #expect(m.state == .draining(deadline: t0 + .seconds(10)))
        #expect(tick(&m) == .finalCommit([tp: 1], abandoned: 0))
        #expect(m.state == .committingFinal)
        #expect(m.handle(.committed([tp: 1], succeeded: true)) == .close)
        #expect(m.state == .closing)
        #expect(m.handle(.closed) == .stop)
        #expect(m.state == .closed)
        #expect(m.failure == nil)
        #expect(tick(&m) == .stop)
    }

    @Test func shutdownWithRecordsInFlightWaitsForThem() {
        var m = machine()
        dispatch(&m, 0)
        dispatch(&m, 1)
        #expect(m.handle(.shutdownRequested(now: t0)) == .stopDispatching)
        // Draining: no poll, only waits while records are in flight.
        #expect(tick(&m, after: .milliseconds(10)) == .wait)
        #expect(finish(&m, 1) == .none)
        #expect(tick(&m, after: .milliseconds(20)) == .wait)
        // The last one finishing wakes the poll thread, which commits and closes.
        #expect(finish(&m, 0) == .wakePoller)
        #expect(tick(&m, after: .milliseconds(30)) == .finalCommit([tp: 2], abandoned: 0))
        #expect(m.handle(.committed([tp: 2], succeeded: true)) == .close)
        #expect(m.handle(.closed) == .stop)
        #expect(m.state == .closed)
    }

    @Test func noRecordIsDispatchedOrStartedAfterShutdown() {
        var m = machine()
        dispatch(&m, 0)
        #expect(m.handle(.shutdownRequested(now: t0)) == .stopDispatching)
        // A poll that was under way when shutdown came: its record is dropped unstarted.
        #expect(m.handle(.recordPolled(record(1), nowMs: 1_000)) == .none)
        #expect(m.inFlight == 1)
        // A record dispatched before shutdown whose handler had not started yet is skipped.
        #expect(m.handle(.handlerReady(tp, offset: 0)) == .skipHandler)
        #expect(finish(&m, 0, .abandoned) == .wakePoller)
        // Neither 0 (skipped) nor 1 (dropped) is committed: both are redelivered.
        #expect(tick(&m) == .finalCommit([tp: 0], abandoned: 0))
    }

    @Test func drainTimeoutLeavesUnfinishedRecordsUncommitted() {
        var m = machine(maxInFlight: 10)
        for offset in 0...3 { dispatch(&m, Int64(offset)) }
        _ = finish(&m, 0)
        _ = finish(&m, 2)
        _ = finish(&m, 3)
        #expect(m.handle(.shutdownRequested(now: t0 + .seconds(1))) == .stopDispatching)
        // While draining, the periodic commit goes up to 1, the lowest unfinished offset.
        #expect(m.handle(.tick(now: t0 + .milliseconds(10_900), nowMs: 0)) == .commit([tp: 1]))
        #expect(m.handle(.committed([tp: 1], succeeded: true)) == .none)
        // Before the deadline (shutdown at 1 s + 10 s drain): wait.
        #expect(m.handle(.tick(now: t0 + .milliseconds(10_999), nowMs: 0)) == .wait)
        #expect(m.state == .draining(deadline: t0 + .seconds(11)))
        // Deadline: nothing more to commit, 1 record abandoned and left uncommitted.
        #expect(m.handle(.tick(now: t0 + .seconds(11), nowMs: 0)) == .finalCommit([:], abandoned: 1))
        #expect(m.state == .committingFinal)
        #expect(m.handle(.committed([:], succeeded: true)) == .close)
        // A late completion after the drain changes nothing any more.
        #expect(finish(&m, 1) == .none)
        #expect(m.handle(.closed) == .stop)
        #expect(m.state == .closed)
    }

    @Test func drainCommitsPeriodicallyWhileWaiting() {
        var m = machine()
        dispatch(&m, 0)
        dispatch(&m, 1)
        #expect(m.handle(.shutdownRequested(now: t0)) == .stopDispatching)
        _ = finish(&m, 0)
        #expect(tick(&m, after: .milliseconds(200)) == .commit([tp: 1]))
        #expect(m.handle(.committed([tp: 1], succeeded: true)) == .none)
        #expect(m.state == .draining(deadline: t0 + .seconds(10)))
        #expect(tick(&m, after: .milliseconds(210)) == .wait)
    }

    @Test func finalCommitWithNothingPendingStillReportsAndCloses() {
        var m = machine()
        #expect(m.handle(.shutdownRequested(now: t0)) == .stopDispatching)
        #expect(tick(&m) == .finalCommit([:], abandoned: 0))
        #expect(m.handle(.committed([:], succeeded: true)) == .close)
    }

    @Test func failedFinalCommitStillCloses() {
        var m = machine()
        dispatch(&m, 0)
        _ = finish(&m, 0)
        _ = m.handle(.shutdownRequested(now: t0))
        #expect(tick(&m) == .finalCommit([tp: 1], abandoned: 0))
        #expect(m.handle(.committed([tp: 1], succeeded: false)) == .close)
        #expect(m.handle(.closed) == .stop)
        #expect(m.state == .closed)
    }

    @Test func shutdownWhileCapacityIsFull() {
        var m = machine(maxInFlight: 1)
        dispatch(&m, 0)
        #expect(m.state == .pausedForCapacity)
        #expect(m.handle(.shutdownRequested(now: t0)) == .stopDispatching)
        // Freeing the slot does not resume polling: it ends the drain.
        #expect(finish(&m, 0) == .wakePoller)
        #expect(tick(&m) == .finalCommit([tp: 1], abandoned: 0))
    }

    @Test func handlersReturningEndsTheDrainAndAbandonsUnhandledRecords() {
        var m = machine()
        dispatch(&m, 0)
        dispatch(&m, 1)
        _ = m.handle(.shutdownRequested(now: t0))
        _ = finish(&m, 0)
        // Record 1 was dispatched but the stream ended before a handler took it.
        #expect(m.handle(.handlersReturned) == .wakePoller)
        #expect(m.inFlight == 0)
        #expect(tick(&m) == .finalCommit([tp: 1], abandoned: 0))
    }

    @Test func handlersReturningWithoutShutdownRequestShutsDown() {
        var m = machine()
        dispatch(&m, 0)
        #expect(m.handle(.handlersReturned) == .stopDispatching)
        #expect(m.inFlight == 0)
        #expect(tick(&m, after: .seconds(1)) == .finalCommit([tp: 0], abandoned: 0))
    }

    @Test func secondShutdownRequestIsIgnored() {
        var m = machine()
        _ = m.handle(.shutdownRequested(now: t0))
        #expect(m.handle(.shutdownRequested(now: t0 + .seconds(5))) == .none)
        // The first deadline holds.
        #expect(m.state == .draining(deadline: t0 + .seconds(10)))
    }

    @Test func revokeDuringCloseCommitsLateCompletions() {
        var m = machine()
        dispatch(&m, 0)
        _ = m.handle(.shutdownRequested(now: t0))
        #expect(m.handle(.tick(now: t0 + .seconds(10), nowMs: 0)) == .finalCommit([tp: 0], abandoned: 1))
        #expect(m.handle(.committed([tp: 0], succeeded: true)) == .close)
        // The handler finishes during close, before the group revokes the partition.
        #expect(finish(&m, 0) == .none)
        #expect(m.handle(.partitionsRevoked([tp])) == .commit([tp: 1]))
    }

    // MARK: fatal errors

    @Test func fatalErrorWhilePollingClosesWithoutDrainingAndFails() {
        var m = machine()
        dispatch(&m, 0)
        _ = finish(&m, 0)
        dispatch(&m, 1)
        let error = KafkaError(code: .init(name: "_FATAL"), message: "fenced")
        #expect(m.handle(.clientFailed(error)) == .close)
        #expect(m.state == .closing)
        #expect(m.failure?.message == "fenced")
        // No handler starts and nothing is dispatched any more.
        #expect(m.handle(.handlerReady(tp, offset: 1)) == .skipHandler)
        #expect(m.handle(.recordPolled(record(2), nowMs: 0)) == .none)
        #expect(m.handle(.closed) == .stop)
        #expect(m.state == .failed)
        #expect(m.failure?.message == "fenced")
        #expect(tick(&m) == .stop)
    }

    @Test func fatalErrorWhileDrainingOrCommitting() {
        var m = machine()
        dispatch(&m, 0)
        _ = m.handle(.shutdownRequested(now: t0))
        #expect(m.handle(.clientFailed(KafkaError(code: .closed, message: "a"))) == .close)
        // A second fatal error while closing keeps the first.
        #expect(m.handle(.clientFailed(KafkaError(code: .closed, message: "b"))) == .none)
        #expect(m.failure?.message == "a")

        var n = machine()
        _ = n.handle(.shutdownRequested(now: t0))
        #expect(tick(&n) == .finalCommit([:], abandoned: 0))
        #expect(n.handle(.clientFailed(KafkaError(code: .closed, message: "c"))) == .close)
        #expect(n.handle(.closed) == .stop)
        #expect(n.state == .failed)
    }

    @Test func fatalErrorBeforeStartFails() {
        var m = Machine(maxInFlight: 1, commitInterval: .seconds(1), drainTimeout: .seconds(1))
        #expect(m.handle(.clientFailed(KafkaError(code: .configuration, message: "no topic"))) == .stop)
        #expect(m.state == .failed)
        #expect(m.handle(.start(now: t0)) == .none)
        #expect(m.state == .failed)
    }

    // MARK: events in states where they are not valid

    @Test func eventsBeforeStartChangeNothing() {
        var m = Machine(maxInFlight: 1, commitInterval: .seconds(1), drainTimeout: .seconds(1))
        #expect(m.handle(.recordPolled(record(0), nowMs: 0)) == .none)
        #expect(m.handle(.handlerFinished(tp, offset: 0, .done)) == .none)
        #expect(m.handle(.handlersReturned) == .none)
        #expect(m.handle(.committed([tp: 1], succeeded: true)) == .none)
        #expect(m.handle(.partitionsRevoked([tp])) == .none)
        #expect(m.handle(.shutdownRequested(now: t0)) == .none)
        #expect(m.handle(.closed) == .none)
        #expect(m.handle(.handlerReady(tp, offset: 0)) == .skipHandler)
        #expect(m.handle(.tick(now: t0, nowMs: 0)) == .stop)
        #expect(m.state == .idle)
        #expect(m.inFlight == 0)
    }

    @Test func closedWhileRunningIsIgnored() {
        var m = machine()
        #expect(m.handle(.closed) == .none)
        #expect(m.state == .polling)
    }

    @Test func recordPolledWhileCapacityIsFullIsNotDispatched() {
        var m = machine(maxInFlight: 1)
        dispatch(&m, 0)
        #expect(m.handle(.recordPolled(record(1), nowMs: 0)) == .none)
        #expect(m.inFlight == 1)
    }

    @Test func handlerFinishedWithNothingInFlightIsIgnored() {
        var m = machine()
        #expect(finish(&m, 0) == .none)
        #expect(m.inFlight == 0)
        #expect(m.tracker.pendingCommits().isEmpty)
    }

    @Test func eventsAfterCloseChangeNothing() {
        var m = machine()
        _ = m.handle(.shutdownRequested(now: t0))
        _ = tick(&m)
        _ = m.handle(.committed([:], succeeded: true))
        _ = m.handle(.closed)
        #expect(m.state == .closed)
        #expect(m.handle(.start(now: t0)) == .none)
        #expect(m.handle(.recordPolled(record(0), nowMs: 0)) == .none)
        #expect(m.handle(.shutdownRequested(now: t0)) == .none)
        #expect(m.handle(.handlersReturned) == .none)
        #expect(m.handle(.partitionsRevoked([tp])) == .none)
        #expect(m.handle(.closed) == .none)
        #expect(m.handle(.clientFailed(KafkaError(code: .closed, message: "late"))) == .none)
        #expect(m.handle(.committed([tp: 1], succeeded: true)) == .none)
        #expect(m.state == .closed)
        #expect(m.failure == nil)
    }

    @Test func tickWhileTheFinalCommitIsUnderWayWaits() {
        var m = machine()
        _ = m.handle(.shutdownRequested(now: t0))
        _ = tick(&m)
        #expect(m.state == .committingFinal)
        #expect(tick(&m) == .wait)
        #expect(m.state == .committingFinal)
    }
}
