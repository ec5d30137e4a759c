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
