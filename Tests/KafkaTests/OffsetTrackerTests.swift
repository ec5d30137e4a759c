import Synchronization
import Testing

@testable import Kafka

@Suite struct OffsetTrackerTests {
    let tp = TopicPartition(topic: "t", partition: 0)

    @Test func commitsOnlyUpToTheLowestUnfinishedOffset() {
        var tracker = OffsetTracker()
        for offset in 10...14 { tracker.started(tp, offset: Int64(offset)) }
        tracker.finished(tp, offset: 11)
        tracker.finished(tp, offset: 13)
        tracker.finished(tp, offset: 14)
        // 10 and 12 are unfinished: a crash now must redeliver from 10.
        #expect(tracker.pendingCommits()[tp] == 10)
        tracker.finished(tp, offset: 10)
        #expect(tracker.pendingCommits()[tp] == 12)
        tracker.didCommit([tp: 12])
        tracker.finished(tp, offset: 12)
        // Everything done: commit one past the highest offset seen.
        #expect(tracker.pendingCommits()[tp] == 15)
    }

    @Test func nothingToCommitWhenPositionDidNotMove() {
        var tracker = OffsetTracker()
        tracker.started(tp, offset: 5)
        tracker.finished(tp, offset: 5)
        tracker.didCommit(tracker.pendingCommits())
        #expect(tracker.pendingCommits().isEmpty)
    }

    @Test func revokedPartitionsIgnoreLateCompletions() {
        var tracker = OffsetTracker()
        tracker.started(tp, offset: 1)
        tracker.revoke([tp])
        tracker.finished(tp, offset: 1)
        #expect(tracker.pendingCommits().isEmpty)
        #expect(tracker.inFlightCount == 0)
    }

    @Test func partitionsAreIndependent() {
        var tracker = OffsetTracker()
        let other = TopicPartition(topic: "t", partition: 1)
        tracker.started(tp, offset: 3)
        tracker.started(other, offset: 7)
        tracker.finished(other, offset: 7)
        #expect(tracker.pendingCommits() == [tp: 3, other: 8])
    }
}

@Suite struct KeyOrderTests {
    @Test func sameKeyWaitsForItsPredecessorOtherKeysDoNot() async throws {
        let order = KeyOrder()
        let a = Array("user-1".utf8)
        let first = try #require(order.reserve(a))
        let second = try #require(order.reserve(a))
        let other = try #require(order.reserve(Array("user-2".utf8)))
        let log = EventLog()
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                await second.wait()
                log.append("second")
                order.leave(a)
            }
            group.addTask {
                await other.wait()
                log.append("other")
            }
            await first.wait()
            // While the first record of user-1 runs, user-2 is not held up…
            let deadline = ContinuousClock.now + .seconds(10)
            while !log.events.contains("other") && ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(10))
            }
            // …but the second record of user-1 is.
            #expect(log.events == ["other"])
            order.leave(a)
            try await group.waitForAll()
        }
        #expect(log.events == ["other", "second"])
    }

    @Test func pastTheWaitingLimitAKeyBusyForLongIsRefusedAndOthersWait() throws {
        let order = KeyOrder(maxWaiting: 2, minimumBusy: .milliseconds(500))
        let start = ContinuousClock.now
        let slow = Array("slow-device".utf8)
        #expect(order.reserve(slow, now: start)?.isOpen == true)
        #expect(order.reserve(slow, now: start)?.isOpen == false)
        #expect(order.reserve(slow, now: start)?.isOpen == false)
        #expect(
            order.reserve(slow, now: start + .milliseconds(100))?.isOpen == false,
            "busy for a moment only: it waits, past the limit too")
        #expect(order.reserve(slow, now: start + .seconds(1)) == nil, "busy for a second with three waiting: refused")
        #expect(order.reserve(Array("other".utf8), now: start + .seconds(1))?.isOpen == true, "a free key still runs")
        // The next record takes the key: it is busy from then on, not from the first.
        order.leave(slow, now: start + .seconds(2))
        #expect(order.reserve(slow, now: start + .milliseconds(2100))?.isOpen == false)
        #expect(order.reserve(slow, now: start + .seconds(3)) == nil)
    }
}

final class EventLog: Sendable {
    private let entries = Mutex<[String]>([])
    func append(_ event: String) { entries.withLock { $0.append(event) } }
    var events: [String] { entries.withLock { $0 } }
}
