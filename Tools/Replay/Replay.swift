import ArgumentParser
import DeviceState
import Foundation
import Kafka
import Logging
import PushModels
import RedisClient
import ReplayKit
import ServiceKit

/// `pushrelay-replay`: reads pipeline topics for incident analysis and re-drives records.
/// It assigns partitions directly (no consumer group, no commits), so it never
/// disturbs the services.
@main
struct Replay: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "pushrelay-replay",
        abstract: "Read, filter, summarise, trace and re-drive PushRelay topic records.",
        discussion: """
            Prints one JSON line per matching record (tokens and ciphertext redacted unless
            --show-secrets). Examples:
              pushrelay-replay --topic push.deliveries --from 2026-11-22T10:00:00Z --to 2026-11-22T10:20:00Z --realm R --summary
              pushrelay-replay --trace 5f0c…
              pushrelay-replay --topic push.deadletter --reason TooManyRequests --into push.outbound
            """,
        version: BuildInfo.line("pushrelay-replay"))

    @Option(help: "Topic to read (default push.deliveries; --trace reads every pipeline topic).")
    var topic: String?
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
    @Option(help: "Print at most this many records.") var limit: Int?

    @Flag(help: "Print tokens and ciphertext instead of redacting them.") var showSecrets = false
    @Flag(help: "Print counts by outcome, provider and reason, and per minute, instead of records.") var summary = false
    @Flag(help: "With --summary: print the summary as JSON.") var json = false
    @Option(help: "Show this notification's path through every topic.") var trace: String?
    @Option(help: "Re-drive the selected records onto this topic (marked with a replay header).") var into: String?
    @Flag(help: "With --into: re-send pairs the dispatcher already delivered.") var force = false
    @Flag(help: "With --into: show what would be re-driven without producing.") var dryRun = false

    @Option(help: "Kafka bootstrap servers (default $PUSHRELAY_KAFKA_BROKERS or .run/kafka-bootstrap).")
    var brokers: String?
    @Option(help: "Redis host for the --into dedupe guard.") var redisHost: String?
    @Option(help: "Redis port.") var redisPort: Int?
    @Option(help: "Redis key prefix.") var redisPrefix: String?
    @Flag(help: "No progress lines on stderr.") var quiet = false

    func validate() throws {
        if force && into == nil { throw ValidationError("--force only applies to --into") }
        if trace != nil && (into != nil || summary) {
            throw ValidationError("--trace cannot be combined with --into or --summary")
        }
        if let from, ISOTime.parse(from) == nil { throw ValidationError("--from: not an ISO 8601 time: \(from)") }
        if let to, ISOTime.parse(to) == nil { throw ValidationError("--to: not an ISO 8601 time: \(to)") }
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

    func run() async throws {
        // The services' own settings (topics, retry stages, brokers, Redis), each checked
        // as it is read: a bad value stops the tool with the variable's name. Variables the
        // tool does not read are not judged, so a misconfigured service does not keep the
        // incident tool from running.
        let settings: CommonSettings
        do {
            settings = try CommonSettings(service: "replay", defaultPort: 0, reader: SettingsReader(.environment))
        } catch {
            throw ValidationError("\(error)")
        }
        let topics = settings.topics
        let reader = try KafkaTopicReader(
            configuration: KafkaConfiguration(
                bootstrapServers: try resolveBrokers(settings), clientID: "pushrelay-replay"),
            logger: Logger(label: "pushrelay-replay"))
        var filter = EntryFilter(
            realm: realm, user: user, device: device, notification: notification,
            provider: provider.flatMap(Self.providerKind)?.rawValue,
            outcome: outcome, reason: reason)

        if let trace {
            filter.notification = trace
            let stages = settings.retry.delays.count
            var entries: [TopicEntry] = []
            for name in topics.all(retryStages: stages) {
                guard (try? reader.partitions(of: name)) != nil else { continue }
                try read(reader, topic: name, topics: topics, filter: filter) { entries.append($0) }
            }
            print(Trace.render(notificationID: trace, entries: entries))
            return
        }

        let topicName = topic ?? topics.deliveries
        if summary {
            var counts = Summary()
            try read(reader, topic: topicName, topics: topics, filter: filter) { counts.add($0) }
            print(json ? String(decoding: Wire.canonical(counts.json), as: UTF8.self) : counts.text)
            return
        }
        if let into {
            try await redrive(reader, topic: topicName, into: into, topics: topics, filter: filter, settings: settings)
            return
        }
        try read(reader, topic: topicName, topics: topics, filter: filter) {
            print($0.jsonLine(showSecrets: showSecrets))
        }
    }

    /// Reads the range, calling `each` for every matching record up to `--limit`.
    func read(
        _ reader: KafkaTopicReader, topic: String, topics: TopicNames, filter: EntryFilter,
        each: (TopicEntry) throws -> Void
    ) throws {
        var matched = 0
        var undecodable = 0
        try reader.read(
            TopicRange(
                topic: topic, partitions: partition.map { [$0] }, fromOffset: fromOffset, toOffset: toOffset,
                fromTimeMs: from.flatMap(ISOTime.parse), toTimeMs: to.flatMap(ISOTime.parse)),
            progress: { p in
                if !quiet { FileHandle.standardError.write(Data("\(topic): read \(p.read) of \(p.total)\n".utf8)) }
            }
        ) { record in
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
        if undecodable > 0 && !quiet {
            FileHandle.standardError.write(
                Data("\(topic): \(undecodable) records were not JSON and were skipped\n".utf8))
        }
    }

    func redrive(
        _ reader: KafkaTopicReader, topic: String, into: String, topics: TopicNames, filter: EntryFilter,
        settings: CommonSettings
    ) async throws {
        var selected: [TopicEntry] = []
        try read(reader, topic: topic, topics: topics, filter: filter) { selected.append($0) }
        // The dedupe guard: pairs the dispatcher already delivered are skipped unless --force.
        var skip: Set<String> = []
        let pairs = selected.compactMap(Redrive.pair)
        if !force && !pairs.isEmpty {
            var configuration = settings.redis
            configuration.host = redisHost ?? configuration.host
            configuration.port = redisPort ?? configuration.port
            configuration.connections = 1
            let ledger = RedisDeliveryLedger(
                redis: RedisClient(configuration: configuration),
                keys: RedisKeys(prefix: redisPrefix ?? settings.redisPrefix, hashTags: configuration.cluster),
                ttl: .seconds(1))
            for chunk in stride(from: 0, to: pairs.count, by: 500) {
                skip.formUnion(try await ledger.sentPairs(Array(pairs[chunk..<min(chunk + 500, pairs.count)])))
            }
        }
        let now = Wire.nowMillis()
        var messages: [KafkaOutgoing] = []
        var skipped = 0
        for entry in selected {
            if let pair = Redrive.pair(of: entry), skip.contains("\(pair.notificationID):\(pair.deviceID)") {
                skipped += 1
                continue
            }
            messages.append(Redrive.message(for: entry, into: into, force: force, nowMs: now))
        }
        if !dryRun && !messages.isEmpty {
            let producer = try KafkaProducer(
                configuration: KafkaConfiguration(
                    bootstrapServers: try resolveBrokers(settings), clientID: "pushrelay-replay"),
                logger: Logger(label: "pushrelay-replay"))
            for chunk in stride(from: 0, to: messages.count, by: 1000) {
                try await producer.sendAll(Array(messages[chunk..<min(chunk + 1000, messages.count)]))
                if !quiet {
                    FileHandle.standardError.write(
                        Data("re-driven \(min(chunk + 1000, messages.count)) of \(messages.count)\n".utf8))
                }
            }
            producer.shutdown()
        }
        let verb = dryRun ? "would re-drive" : "re-drove"
        print(
            "selected \(selected.count), \(verb) \(messages.count) into \(into), skipped \(skipped) already delivered\(force ? " (forced)" : "")"
        )
    }

    /// `--brokers`, else the services' settings (`PUSHRELAY_KAFKA_BROKERS` or
    /// `PUSHRELAY_KAFKA_BROKERS_FILE`), else, in a checkout after `make up`, the dev
    /// broker's `.run/kafka-bootstrap`.
    func resolveBrokers(_ settings: CommonSettings) throws -> String {
        if let brokers { return brokers }
        if !settings.kafkaBrokers.isEmpty || !settings.kafkaBrokersFile.isEmpty {
            return try settings.kafka().bootstrapServers
        }
        guard let text = try? String(contentsOfFile: ".run/kafka-bootstrap", encoding: .utf8) else {
            throw ValidationError(
                "no brokers: pass --brokers, set PUSHRELAY_KAFKA_BROKERS, or run from the repo after `make up`")
        }
        return text.trimmingCharacters(in: .whitespacesAndNewlines)
    }
}
