/// A topic and partition.
public struct TopicPartition: Hashable, Sendable, CustomStringConvertible {
    public var topic: String
    public var partition: Int32

    public init(topic: String, partition: Int32) {
        self.topic = topic
        self.partition = partition
    }

    public var description: String { "\(topic)[\(partition)]" }
}

/// Which offsets may be committed when records are processed concurrently.
///
/// A partition commits only up to its lowest offset not yet finished, so a crash
/// never skips unfinished work: everything at or after that offset is redelivered.
/// A plain value type: the consumer keeps it behind a lock.
public struct OffsetTracker: Sendable {
    private struct PartitionState: Sendable {
        var inFlight: Set<Int64> = []
        var highestSeen: Int64 = -1
        var committed: Int64 = -1
    }

    private var partitions: [TopicPartition: PartitionState] = [:]

    public init() {}

    /// A record was handed to a handler.
    public mutating func started(_ tp: TopicPartition, offset: Int64) {
        var state = partitions[tp] ?? PartitionState()
        state.inFlight.insert(offset)
        state.highestSeen = max(state.highestSeen, offset)
        partitions[tp] = state
    }

    /// A record's work is finished (everything it produced is acknowledged).
    /// Records of partitions no longer assigned are ignored.
    public mutating func finished(_ tp: TopicPartition, offset: Int64) {
        partitions[tp]?.inFlight.remove(offset)
    }

    /// The offset to commit for each partition whose committable position moved:
    /// the lowest unfinished offset, or one past the highest seen when all are done.
    public func pendingCommits() -> [TopicPartition: Int64] {
        var result: [TopicPartition: Int64] = [:]
        for (tp, state) in partitions where state.highestSeen >= 0 {
            let position = state.inFlight.min() ?? state.highestSeen.nextOffset
            if position > state.committed { result[tp] = position }
        }
        return result
    }

    public mutating func didCommit(_ commits: [TopicPartition: Int64]) {
        for (tp, offset) in commits {
            if var state = partitions[tp] {
                state.committed = max(state.committed, offset)
                partitions[tp] = state
            }
        }
    }

    /// Forgets partitions taken away by a rebalance: their late completions no longer commit.
    public mutating func revoke(_ tps: [TopicPartition]) {
        for tp in tps { partitions.removeValue(forKey: tp) }
    }

    var inFlightCount: Int { partitions.values.reduce(0) { $0 + $1.inFlight.count } }
}

extension Int64 {
    /// The offset after this one. Offsets come from the broker: the last possible one
    /// has no successor, and stays where it is rather than trap.
    var nextOffset: Int64 { self < .max ? self + 1 : .max }
}
