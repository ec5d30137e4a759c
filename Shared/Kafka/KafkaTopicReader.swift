import CRdKafka
import Foundation
import Logging

/// Which records of a topic to read. Offsets are per partition; times are ms since the epoch
/// (record timestamps). Both ends are inclusive of `from`, exclusive of `to`.
public struct TopicRange: Sendable {
    public var topic: String
    public var partitions: [Int32]?
    public var fromOffset: Int64?
    public var toOffset: Int64?
    public var fromTimeMs: Int64?
    public var toTimeMs: Int64?
    /// Per-partition start offsets (for following a topic); overrides `fromOffset`.
    public var startOffsets: [Int32: Int64]?

    public init(
        topic: String, partitions: [Int32]? = nil, fromOffset: Int64? = nil, toOffset: Int64? = nil,
        fromTimeMs: Int64? = nil, toTimeMs: Int64? = nil, startOffsets: [Int32: Int64]? = nil
    ) {
        self.startOffsets = startOffsets
        self.topic = topic
        self.partitions = partitions
        self.fromOffset = fromOffset
        self.toOffset = toOffset
        self.fromTimeMs = fromTimeMs
        self.toTimeMs = toTimeMs
    }
}

/// Progress of a long read: records read so far out of the range's size.
public struct ReadProgress: Sendable {
    public var read: Int64
    public var total: Int64
}

/// Reads a topic range as it stands now (up to each partition's end when the read
/// starts), by assigning partitions directly: it joins no consumer group and commits
/// nothing, so it never disturbs the services. For tools and tests.
public final class KafkaTopicReader {
    private let handle: OpaquePointer
    private let logger: Logger

    public init(configuration: KafkaConfiguration, logger: Logger) throws {
        let settings = configuration.settings(
            [
                "bootstrap.servers": configuration.bootstrapServers,
                "client.id": configuration.clientID,
                // Required by librdkafka's consumer; never joined (assign, not subscribe) and never committed.
                "group.id": "pushrelay-reader-\(UUID().uuidString.lowercased())",
                "enable.auto.commit": "false",
                "enable.auto.offset.store": "false",
                "enable.partition.eof": "true",
            ], producer: false)
        handle = try makeHandle(type: RD_KAFKA_CONSUMER, conf: try makeConf(settings))
        rd_kafka_poll_set_consumer(handle)
        self.logger = logger
    }

    deinit {
        rd_kafka_consumer_close(handle)
        rd_kafka_destroy(handle)
    }

    /// The partitions of `topic`.
    public func partitions(of topic: String, timeout: Duration = .seconds(5)) throws -> [Int32] {
        try partitionIDs(handle, topic: topic, timeout: timeout)
    }

    /// Each partition's end (high watermark) now.
    @_spi(Dev) public func endOffsets(of topic: String) throws -> [Int32: Int64] {
        try partitionEnds(handle, topic: topic)
    }

    /// Reads every record of `range`, in order per partition, calling `each` until it
    /// returns false. `progress` is called every few thousand records.
    /// Returns, per partition, the offset after the last record considered (where a
    /// follow-up read should start).
    @discardableResult
    public func read(
        _ range: TopicRange, timeout: Duration = .seconds(30), progress: ((ReadProgress) -> Void)? = nil,
        each: (KafkaRecord) throws -> Bool
    ) throws -> [Int32: Int64] {
        let partitions = try range.partitions ?? partitions(of: range.topic)
        var start: [Int32: Int64] = [:]
        var end: [Int32: Int64] = [:]
        for p in partitions {
            var low: Int64 = 0
            var high: Int64 = 0
            let rc = rd_kafka_query_watermark_offsets(handle, range.topic, p, &low, &high, 5000)
            guard rc == RD_KAFKA_RESP_ERR_NO_ERROR else { throw KafkaError.from(rc) }
            start[p] = max(low, range.startOffsets?[p] ?? range.fromOffset ?? low)
            end[p] = min(high, range.toOffset ?? high)
        }
        if let from = range.fromTimeMs { try seekToTime(range.topic, from, start: &start) }
        var remaining = Set(partitions.filter { (start[$0] ?? 0) < (end[$0] ?? 0) })
        let total = partitions.reduce(Int64(0)) { $0 + max(0, (end[$1] ?? 0) - (start[$1] ?? 0)) }
        var position = start.merging(end) { s, e in max(s, e) }
        guard !remaining.isEmpty else { return position }

        guard let list = rd_kafka_topic_partition_list_new(Int32(remaining.count)) else { return position }
        for p in remaining {
            rd_kafka_topic_partition_list_add(list, range.topic, p)?.pointee.offset = start[p] ?? 0
        }
        let rc = rd_kafka_assign(handle, list)
        rd_kafka_topic_partition_list_destroy(list)
        guard rc == RD_KAFKA_RESP_ERR_NO_ERROR else { throw KafkaError.from(rc) }
        defer { rd_kafka_assign(handle, nil) }

        var read: Int64 = 0
        var idleSince = ContinuousClock.now
        while !remaining.isEmpty {
            guard let message = rd_kafka_consumer_poll(handle, 200) else {
                if ContinuousClock.now - idleSince > timeout {
                    throw KafkaError(code: .timedOut, message: "no records for \(timeout) reading \(range.topic)")
                }
                continue
            }
            idleSince = .now
            let m = message.pointee
            let partition = m.partition
            if m.err == RD_KAFKA_RESP_ERR__PARTITION_EOF {
                rd_kafka_message_destroy(message)
                remaining.remove(partition)
                continue
            }
            let copied = copyRecord(message)
            rd_kafka_message_destroy(message)
            let record: KafkaRecord
            switch copied {
            case .success(let r): record = r
            case .failure(let error): throw error
            }
            guard remaining.contains(partition) else { continue }
            if record.offset >= (end[partition] ?? 0) {
                remaining.remove(partition)
                continue
            }
            read += 1
            if read % 5000 == 0 { progress?(ReadProgress(read: read, total: total)) }
            if record.offset.nextOffset >= (end[partition] ?? 0) { remaining.remove(partition) }
            if let from = range.fromTimeMs, record.timestampMs < from { continue }
            if let to = range.toTimeMs, record.timestampMs >= to { continue }
            if try !each(record) {
                position[partition] = record.offset.nextOffset
                return position
            }
        }
        if read >= 5000 { progress?(ReadProgress(read: read, total: total)) }
        return position
    }

    /// Moves each start to the first offset at or after `timeMs`, where the broker can say.
    private func seekToTime(_ topic: String, _ timeMs: Int64, start: inout [Int32: Int64]) throws {
        guard let list = rd_kafka_topic_partition_list_new(Int32(start.count)) else { return }
        defer { rd_kafka_topic_partition_list_destroy(list) }
        for p in start.keys { rd_kafka_topic_partition_list_add(list, topic, p)?.pointee.offset = timeMs }
        guard rd_kafka_offsets_for_times(handle, list, 5000) == RD_KAFKA_RESP_ERR_NO_ERROR else {
            // Not every broker answers time lookups; the records' timestamps still filter.
            return
        }
        for i in 0..<Int(list.pointee.cnt) {
            let e = list.pointee.elems[i]
            if e.err == RD_KAFKA_RESP_ERR_NO_ERROR, e.offset >= 0, let current = start[e.partition] {
                start[e.partition] = max(current, e.offset)
            }
        }
    }
}

/// Consumer lag of a group: how far its committed offsets are behind each partition's
/// end. Asks the group coordinator for the committed offsets without joining the group.
@_spi(Dev) public final class KafkaGroupLag {
    private let handle: OpaquePointer

    public init(configuration: KafkaConfiguration, group: String) throws {
        let settings = [
            "bootstrap.servers": configuration.bootstrapServers, "client.id": configuration.clientID,
            "group.id": group, "enable.auto.commit": "false",
        ]
        handle = try makeHandle(type: RD_KAFKA_CONSUMER, conf: try makeConf(settings))
    }

    deinit {
        rd_kafka_destroy(handle)
    }

    /// Records on `topic` the group has not committed yet (partitions never committed count from their start).
    public func lag(topic: String, partitions: [Int32]) throws -> Int64 {
        guard let list = rd_kafka_topic_partition_list_new(Int32(partitions.count)) else { return 0 }
        defer { rd_kafka_topic_partition_list_destroy(list) }
        for p in partitions { rd_kafka_topic_partition_list_add(list, topic, p) }
        let rc = rd_kafka_committed(handle, list, 5000)
        guard rc == RD_KAFKA_RESP_ERR_NO_ERROR else { throw KafkaError.from(rc) }
        var total: Int64 = 0
        for i in 0..<Int(list.pointee.cnt) {
            let e = list.pointee.elems[i]
            var low: Int64 = 0
            var high: Int64 = 0
            guard
                rd_kafka_query_watermark_offsets(handle, topic, e.partition, &low, &high, 5000)
                    == RD_KAFKA_RESP_ERR_NO_ERROR
            else { continue }
            total += max(0, high - (e.offset >= 0 ? e.offset : low))
        }
        return total
    }
}
