import ArgumentParser
import DeviceState
import Foundation
import Kafka
import Logging
import PushModels
import RedisClient
import ReplayKit
import ServiceKit

// Reading the pipeline's topics: `trace`, `replay`, `deadletter` and the last outcomes
// of `devices inspect`. Partitions are assigned directly (no consumer group, no
// commits), so reading never disturbs the services.

/// Where to read, and which records: a range of a topic and filters on their fields.
struct Selection: ParsableArguments {
    @Option(help: "Only this partition.") var partition: Int32?
    @Option(help: "First offset to read (per partition).") var fromOffset: Int64?
    @Option(help: "Stop before this offset (per partition).") var toOffset: Int64?
    @Option(help: "Records at or after this time (ISO 8601, e.g. 2026-11-22T10:00:00Z).") var from: String?
    @Option(help: "Records before this time (ISO 8601).") var to: String?
    @Option(help: "Filter: realm uuid.") var realm: String?
    @Option(help: "Filter: user id.") var user: Int64?
    @Option(help: "Filter: device id.") var device: Int64?
    @Option(help: "Filter: notification id.") var notification: String?
    @Option(
        help: "Filter: provider kind (apns, fcm, simplepush, wns, apns_voip, webpush, hms) or Telegram's number."
    ) var provider: String?
    @Option(help: "Filter: outcome (sent, invalid_token, failed, expired, already_sent, retry, dead_letter, …).")
    var outcome: String?
    @Option(help: "Filter: provider or relay reason.") var reason: String?
    @Option(help: "Take at most this many records.") var limit: Int?

    func validate() throws {
        if let from, ISOTime.parse(from) == nil { throw ValidationError("--from: not an ISO 8601 time: \(from)") }
        if let to, ISOTime.parse(to) == nil { throw ValidationError("--to: not an ISO 8601 time: \(to)") }
        if let limit, limit < 1 { throw ValidationError("--limit: at least 1") }
        if let partition, partition < 0 { throw ValidationError("--partition: not negative") }
        if let provider, Self.providerKind(provider) == nil {
            throw ValidationError(
                "--provider: unknown kind '\(provider)'; one of \(Provider.allCases.map(\.rawValue).joined(separator: ", ")) or a Telegram token type number"
            )
        }
    }

    /// A kind by name, or by Telegram's number (`10` is `webpush`).
    static func providerKind(_ text: String) -> Provider? {
        Provider(rawValue: text) ?? Int(text).flatMap { Provider.telegramTokenTypes[$0] }
    }

    var filter: EntryFilter {
        EntryFilter(
            realm: realm, user: user, device: device, notification: notification,
            provider: provider.flatMap(Self.providerKind)?.rawValue, outcome: outcome, reason: reason)
    }

    func range(_ topic: String) -> TopicRange {
        TopicRange(
            topic: topic, partitions: partition.map { [$0] }, fromOffset: fromOffset, toOffset: toOffset,
            fromTimeMs: from.flatMap(ISOTime.parse), toTimeMs: to.flatMap(ISOTime.parse))
    }
}

/// `--brokers` and `--quiet`, on every command that reads topics.
struct KafkaOptions: ParsableArguments {
    @Option(help: "Kafka bootstrap servers (default $PUSHRELAY_KAFKA_BROKERS or .run/kafka-bootstrap).")
    var brokers: String?
    @Flag(help: "No progress on stderr.") var quiet = false
}

/// Reads topic ranges with the services' settings (topic names, retry stages, brokers).
struct TopicScanner {
    let relay: Operator
    let reader: KafkaTopicReader
    let brokers: String
    let quiet: Bool

    init(_ options: KafkaOptions) throws {
        relay = try Operator.fromEnvironment()
        brokers = try relay.brokers(options.brokers)
        quiet = options.quiet
        reader = try KafkaTopicReader(
            configuration: KafkaConfiguration(bootstrapServers: brokers, clientID: "pushrelay"),
            logger: Logger(label: "pushrelay"))
    }

    var topics: TopicNames { relay.settings.topics }

    /// Every topic of the pipeline that exists.
    var pipelineTopics: [String] {
        topics.all(retryStages: relay.settings.retry.delays.count).filter { (try? reader.partitions(of: $0)) != nil }
    }

    /// Calls `each` for every record of the range that matches, up to `limit`.
    func read(
        _ range: TopicRange, filter: EntryFilter, limit: Int? = nil, each: (TopicEntry) throws -> Void
    ) throws {
        var matched = 0
        var undecodable = 0
        var bar = ProgressBar(range.topic, quiet: quiet)
        _ = try reader.read(range, progress: { bar.update(done: Int($0.read), of: Int($0.total)) }) { record in
            guard filter.mayMatch(record) else { return true }
            guard let entry = try? TopicEntry(record: record, topics: topics) else {
                undecodable += 1
                return true
            }
            guard filter.matches(entry) else { return true }
            matched += 1
            try each(entry)
            return limit.map { matched < $0 } ?? true
        }
        if undecodable > 0 { bar.note("\(range.topic): \(undecodable) records were not JSON and were skipped") }
    }

    /// One notification's records on every pipeline topic.
    func trace(_ notificationID: String) throws -> [TopicEntry] {
        var filter = EntryFilter()
        filter.notification = notificationID
        var entries: [TopicEntry] = []
        for name in pipelineTopics {
            try read(TopicRange(topic: name), filter: filter) { entries.append($0) }
        }
        return entries
    }
}

extension TopicEntry {
    /// The record as `--output json` prints it: where it is, and its value with tokens
    /// and ciphertext redacted unless asked.
    func json(showSecrets: Bool) -> JSONValue {
        [
            "topic": .string(topic), "partition": .int(Int64(partition)), "offset": .int(offset),
            "timestamp_ms": .int(timestampMs), "kind": .string(kind.rawValue),
            "value": showSecrets ? value : Redaction.redact(value),
        ]
    }
}

/// `pushrelay trace <id>`: one notification's path through every topic, stage by stage.
struct Trace: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Show one notification's path through every pipeline topic, and each device's last outcome.",
        discussion: "Exit status 2 when no topic holds a record of it.")

    @Argument(help: "The notification id (the notify answer's notification_id).") var notificationID: String
    @OptionGroup var kafka: KafkaOptions
    @OptionGroup var output: OutputOptions

    func run() async throws {
        let entries = try TopicScanner(kafka).trace(notificationID)
        if output.json {
            let sorted = entries.sorted {
                ($0.timestampMs, $0.topic, $0.offset) < ($1.timestampMs, $1.topic, $1.offset)
            }
            output.print([
                "notification_id": .string(notificationID),
                "records": .array(sorted.map { $0.json(showSecrets: false) }),
            ])
        } else {
            print(ReplayKit.Trace.render(notificationID: notificationID, entries: entries))
        }
        if entries.isEmpty { throw Exit.notFound }
    }
}

/// `pushrelay replay`: read, filter, summarise and re-drive any topic's records.
struct Replay: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Read, filter, summarise and re-drive a topic's records (incident analysis).",
        discussion: """
            Prints one JSON line per matching record (tokens and ciphertext redacted unless
            --show-secrets). Examples:
              pushrelay replay --topic push.deliveries --from 2026-11-22T10:00:00Z --realm R --summary
              pushrelay replay --topic push.deadletter --reason TooManyRequests --into push.outbound
            """)

    @Option(help: "Topic to read (default push.deliveries).") var topic: String?
    @OptionGroup var selection: Selection
    @Flag(help: "Print tokens and ciphertext instead of redacting them.") var showSecrets = false
    @Flag(help: "Print counts by outcome, provider and reason, and per minute, instead of records.") var summary = false
    @OptionGroup var redrive: RedriveOptions
    @OptionGroup var kafka: KafkaOptions
    @OptionGroup var output: OutputOptions

    func validate() throws {
        if redrive.into == nil && (redrive.force || redrive.dryRun) {
            throw ValidationError("--force and --dry-run only apply to --into")
        }
        if redrive.into != nil && summary { throw ValidationError("--summary cannot be combined with --into") }
    }

    func run() async throws {
        let scanner = try TopicScanner(kafka)
        let range = selection.range(topic ?? scanner.topics.deliveries)
        if summary {
            var counts = Summary()
            try scanner.read(range, filter: selection.filter, limit: selection.limit) { counts.add($0) }
            if output.json { output.print(counts.json) } else { print(counts.text) }
        } else if let into = redrive.into {
            try await redrive.redriver.run(
                scanner, range: range, filter: selection.filter, limit: selection.limit, into: into)
        } else {
            try scanner.read(range, filter: selection.filter, limit: selection.limit) {
                print(
                    output.json
                        ? String(decoding: Wire.canonical($0.json(showSecrets: showSecrets)), as: UTF8.self)
                        : $0.jsonLine(showSecrets: showSecrets))
            }
        }
    }
}

/// Re-driving selected records onto a topic, behind the dispatcher's dedupe guard.
struct RedriveOptions: ParsableArguments {
    @Option(help: "Re-drive the selected records onto this topic (marked with a replay header).") var into: String?
    @Flag(help: "Re-send pairs the dispatcher already delivered.") var force = false
    @Flag(help: "Show what would be re-driven without producing.") var dryRun = false

    var redriver: Redriver { Redriver(force: force, dryRun: dryRun) }
}

/// Produces selected records again, marked as re-driven; pairs the send ledger says were
/// delivered are skipped unless forced.
struct Redriver {
    let force: Bool
    let dryRun: Bool

    func run(_ scanner: TopicScanner, range: TopicRange, filter: EntryFilter, limit: Int?, into: String) async throws {
        var selected: [TopicEntry] = []
        try scanner.read(range, filter: filter, limit: limit) { selected.append($0) }
        let skip = force ? [] : try await delivered(selected, settings: scanner.relay.settings)
        let now = Wire.nowMillis()
        var messages: [KafkaOutgoing] = []
        for entry in selected {
            if let pair = Self.ledgerPair(entry), skip.contains(pair) { continue }
            messages.append(Redrive.message(for: entry, into: into, force: force, nowMs: now))
        }
        let skipped = selected.count - messages.count
        if !dryRun && !messages.isEmpty {
            let producer = try KafkaProducer(
                configuration: KafkaConfiguration(bootstrapServers: scanner.brokers, clientID: "pushrelay"),
                logger: Logger(label: "pushrelay"))
            var bar = ProgressBar("re-driving into \(into)", quiet: scanner.quiet)
            for chunk in stride(from: 0, to: messages.count, by: 1000) {
                let end = min(chunk + 1000, messages.count)
                try await producer.sendAll(Array(messages[chunk..<end]))
                bar.update(done: end, of: messages.count)
            }
            producer.shutdown()
        }
        let verb = dryRun ? "would re-drive" : "re-drove"
        print(
            "selected \(selected.count), \(verb) \(messages.count) into \(into), skipped \(skipped) already delivered\(force ? " (forced)" : "")"
        )
    }

    static func ledgerPair(_ entry: TopicEntry) -> SendPair? {
        Redrive.pair(of: entry).map { SendPair(notificationID: $0, deviceID: $1, acceptedAtMs: $2) }
    }

    /// The pairs among `entries` that the dispatcher's send ledger says were delivered.
    func delivered(_ entries: [TopicEntry], settings: CommonSettings) async throws -> Set<SendPair> {
        let pairs = entries.compactMap(Self.ledgerPair)
        guard !pairs.isEmpty else { return [] }
        var configuration = settings.redis
        configuration.connections = 1
        let ledger = RedisDeliveryLedger(
            redis: RedisClient(configuration: configuration), keys: settings.redisKeys, ttl: .seconds(1))
        var sent: Set<SendPair> = []
        for chunk in stride(from: 0, to: pairs.count, by: 500) {
            sent.formUnion(try await ledger.sentPairs(Array(pairs[chunk..<min(chunk + 500, pairs.count)])))
        }
        return sent
    }
}

/// `pushrelay deadletter list|redrive`: what the pipeline gave up on, and sending it again.
struct DeadLetter: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "deadletter", abstract: "List dead letters, or re-drive them once the cause is fixed.",
        subcommands: [ListDeadLetters.self, RedriveDeadLetters.self])
}

struct ListDeadLetters: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "list", abstract: "One line per dead letter: when, notification, device, provider, cause.")

    @OptionGroup var selection: Selection
    @OptionGroup var kafka: KafkaOptions
    @OptionGroup var output: OutputOptions

    func run() async throws {
        let scanner = try TopicScanner(kafka)
        var entries: [TopicEntry] = []
        try scanner.read(
            selection.range(scanner.topics.deadLetter), filter: selection.filter, limit: selection.limit
        ) { entries.append($0) }
        if output.json {
            output.print(["dead_letters": .array(entries.map { $0.json(showSecrets: false) })])
            return
        }
        for e in entries {
            let fields: [String] = [
                ISOTime.format(e.timestampMs), e.notificationID ?? "-", e.deviceID.map { "device \($0)" } ?? "-",
                e.provider ?? "-", e.value["cause"]?.stringValue ?? "-", e.reason ?? "-",
                "attempts \(e.value["attempts"]?.intValue ?? 0)", "\(e.partition)@\(e.offset)",
            ]
            print(fields.joined(separator: "\t"))
        }
        print("\(entries.count) dead letters")
    }
}

struct RedriveDeadLetters: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "redrive",
        abstract: "Send the selected dead letters again (onto push.outbound), skipping pairs already delivered.")

    @OptionGroup var selection: Selection
    @Option(help: "The topic to re-drive onto (default the outbound topic).") var into: String?
    @Flag(help: "Re-send pairs the dispatcher already delivered.") var force = false
    @Flag(help: "Show what would be re-driven without producing.") var dryRun = false
    @OptionGroup var kafka: KafkaOptions

    func run() async throws {
        let scanner = try TopicScanner(kafka)
        try await Redriver(force: force, dryRun: dryRun).run(
            scanner, range: selection.range(scanner.topics.deadLetter), filter: selection.filter,
            limit: selection.limit, into: into ?? scanner.topics.outbound)
    }
}
