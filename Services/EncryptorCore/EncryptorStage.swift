import DeviceState
import Foundation
import Kafka
import LogKeys
import Logging
import Metrics
import PushCrypto
import PushModels
import RedisClient
import ServiceKit
import Tracing

/// encryptor: resolves each request's devices, encrypts native notifications with each
/// device's key, and emits one `push.outbound` record per device (or its outcome on
/// `push.deliveries` when there is nothing to send).
public struct EncryptorConfiguration: Sendable {
    public var common: CommonSettings
    public var consumer: KafkaConsumerConfiguration
    public var pipelineKeys: PipelineKeyring
    public var storageKeys: StorageKeyring
    /// APNs expiration / FCM ttl from acceptance (`PUSHRELAY_NOTIFICATION_TTL_SECONDS`).
    public var ttlSeconds: Int64
    /// Requests handled together at most (`PUSHRELAY_ENCRYPTOR_BATCH`): what one fetch
    /// returned, up to this many, costs one Redis round trip and one produce wait.
    public var maxBatch: Int

    public init(reader: SettingsReader) throws {
        common = try CommonSettings(service: "encryptor", defaultPort: 8081, reader: reader)
        consumer = try common.consumer(stage: "encryptor", topic: common.topics.requests, defaultConcurrency: 256)
        maxBatch = try reader.int("pushrelay.encryptor.batch", default: 64)
        pipelineKeys = try reader.pipelineKeyring()
        storageKeys = try reader.storageKeyring()
        ttlSeconds = Int64(try reader.int("pushrelay.notification.ttl.seconds", default: 86400))
    }
}

public enum Encryptor {
    /// Builds the stage on Kafka and Redis and runs it until SIGTERM.
    public static func run(_ configuration: EncryptorConfiguration) async throws {
        let settings = configuration.common
        let host = try await StageHost.start("encryptor", settings: settings)
        let consumer = try host.consumer(configuration.consumer)
        let stage = EncryptorStage(
            devices: DeviceStore(redis: host.redis, keys: settings.redisKeys, storage: configuration.storageKeys),
            pipelineKeys: configuration.pipelineKeys, publisher: host.producer, topics: settings.topics,
            ttlSeconds: configuration.ttlSeconds, clock: SystemClock(), logger: host.logger)
        try await host.run(
            consumers: [consumer], kafkaReady: { consumer.isConnected() },
            [
                KafkaConsumerService(
                    consumer: consumer, maxBatch: configuration.maxBatch, batchHandler: stage.handleBatch)
            ])
    }
}

/// The encryptor's logic, on its seams: a device directory, a record publisher, a clock.
public struct EncryptorStage: Sendable {
    let devices: any DeviceDirectory
    let pipelineKeys: PipelineKeyring
    let publisher: any RecordPublisher
    let topics: TopicNames
    let ttlSeconds: Int64
    let clock: any WallClock
    let logger: Logger

    public init(
        devices: any DeviceDirectory, pipelineKeys: PipelineKeyring, publisher: any RecordPublisher, topics: TopicNames,
        ttlSeconds: Int64, clock: any WallClock, logger: Logger
    ) {
        self.devices = devices
        self.pipelineKeys = pipelineKeys
        self.publisher = publisher
        self.topics = topics
        self.ttlSeconds = ttlSeconds
        self.clock = clock
        self.logger = logger
    }

    public func handle(_ record: KafkaRecord) async -> RecordDisposition {
        guard let request = decodeRecord(PushRequestRecord.self, from: record, logger: logger) else {
            return await accountForMalformed(record)
        }
        return await handle(request, from: record)
    }

    /// Handles one wave of a fetch (no two records share a key). The devices of every
    /// request are read in two pipelined Redis round trips, and every output is
    /// published at once, in record order, and awaited together. A batch that fails
    /// twice, whatever the error, is handled again request by request, concurrently:
    /// one request that cannot be encrypted or published, or whose device waits for a
    /// storage key, then holds up only itself. An output published before the failure
    /// may go out twice; the dispatcher's ledger sends it once.
    public func handleBatch(_ records: [KafkaRecord]) async -> [RecordDisposition] {
        var dispositions = [RecordDisposition](repeating: .done, count: records.count)
        var requests: [(index: Int, request: PushRequestRecord)] = []
        for (index, record) in records.enumerated() {
            if let request = decodeRecord(PushRequestRecord.self, from: record, logger: logger) {
                requests.append((index, request))
            } else {
                dispositions[index] = await accountForMalformed(record)
            }
        }
        guard requests.count > 1 else {
            for (index, request) in requests { dispositions[index] = await handle(request, from: records[index]) }
            return dispositions
        }
        let decoded = requests
        let start = ContinuousClock.now
        // One span per request, each under the span its record carries.
        let spans = decoded.map { index, request in
            Self.span(for: request, of: records[index])
        }
        let outcome = await retrying(
            "encrypt a batch of requests", logger: logger, permanentAttempts: 2, isTransient: { _ in false }
        ) {
            let directory = try await PrefetchedDevices.read(for: decoded.map(\.request), from: self.devices)
            var messages: [KafkaOutgoing] = []
            for ((index, request), span) in zip(decoded, spans) {
                var built = try await RelayTracing.within(span) {
                    try await self.messages(for: request, from: directory)
                }
                if let span { RelayTracing.stamp(&built, with: span.context) }
                messages += Self.marked(built, replay: records[index])
            }
            try await publisher.publish(messages)
            return true
        }
        for span in spans {
            if case .failed(let error) = outcome { span?.recordError(error) }
            span?.end()
        }
        switch outcome {
        case .succeeded:
            let elapsed = ContinuousClock.now - start
            for _ in requests { RelayMetrics.stageDuration("encryptor").record(duration: elapsed) }
        case .interrupted:
            for (index, _) in requests { dispositions[index] = .abandoned }
        case .failed:
            await withTaskGroup(of: (Int, RecordDisposition).self) { group in
                for (index, request) in decoded {
                    group.addTask { (index, await handle(request, from: records[index])) }
                }
                for await (index, disposition) in group { dispositions[index] = disposition }
            }
        }
        return dispositions
    }

    /// A re-driven request's outputs stay marked, so the dispatcher's dedupe knows them.
    static func marked(_ messages: [KafkaOutgoing], replay record: KafkaRecord) -> [KafkaOutgoing] {
        guard let replay = record.header(RecordHeader.replay) else { return messages }
        var messages = messages
        for i in messages.indices { messages[i].headers.append((RecordHeader.replay, replay)) }
        return messages
    }

    private func handle(_ request: PushRequestRecord, from record: KafkaRecord) async -> RecordDisposition {
        let span = Self.span(for: request, of: record)
        defer { span?.end() }
        return await RelayTracing.within(span) { await handleInSpan(request, from: record) }
    }

    /// A request's span: its ids and how many devices it names; child of its record's.
    static func span(for request: PushRequestRecord, of record: KafkaRecord) -> (any Span)? {
        guard let span = RelayTracing.startSpan("encrypt notification", of: record)
        else { return nil }
        span.describe(record)
        span.attributes[SpanKey.notificationID] = request.notificationID.rawValue
        span.attributes[SpanKey.realm] = request.realmUUID.rawValue
        if let ids = request.deviceIDs { span.attributes[SpanKey.devices] = ids.count }
        return span
    }

    private func handleInSpan(_ request: PushRequestRecord, from record: KafkaRecord) async -> RecordDisposition {
        let start = ContinuousClock.now
        let outcome = await retrying("encrypt request", logger: logger, isTransient: Self.isTransient) {
            var messages = try await self.messages(for: request)
            RelayTracing.stamp(&messages)
            try await publisher.publish(Self.marked(messages, replay: record))
            return true
        }
        RelayMetrics.stageDuration("encryptor").record(duration: ContinuousClock.now - start)
        switch outcome {
        case .succeeded: return .done
        case .interrupted: return .abandoned
        case .failed(let error):
            // The same error every time: the request is accounted for as failed rather
            // than retried for ever behind the rest of its partition.
            logger.error(
                "request cannot be encrypted; recorded as failed",
                metadata: [LogKey.notificationID: "\(request.notificationID)", LogKey.error: "\(error)"])
            let ids: [DeviceID?] = (request.deviceIDs ?? []).map { Optional($0) }
            return await publishOutcomes(
                try (ids.isEmpty ? [nil] : ids).map {
                    try unsent(request, device: $0, provider: nil, .failed, .stage(.encryptionFailed))
                })
        }
    }

    /// Errors that say Redis or Kafka is away, a storage key is missing (an operator's
    /// fix) or libsodium is unusable in this process: retried for as long as it takes. Anything else (a payload that cannot be
    /// encrypted or encoded, a record too large for the topic) fails the same way every
    /// time.
    static func isTransient(_ error: any Error) -> Bool {
        switch error {
        case let error as CryptoError: error.code == .invalidKey || error.code == .libraryUnavailable
        case let error as KafkaError: error.code.name != "MSG_SIZE_TOO_LARGE"
        case is EncodingError, is DecodingError, is PayloadValidationError: false
        default: true
        }
    }

    /// A record on `push.requests` that does not decode as a request: when its
    /// notification and realm can still be read, the realm's outcome stream says it
    /// failed (`malformed_request`); either way it is counted and skipped.
    func accountForMalformed(_ record: KafkaRecord) async -> RecordDisposition {
        let outcome = DeliveryRecord.malformed(record.value, reason: .malformedRequest, nowMs: clock.nowMillis())
        return await publishOutcomes(
            [outcome.flatMap { try? KafkaOutgoing.delivery($0, topic: topics.deliveries) }].compactMap { $0 })
    }

    /// Publishes outcomes, retrying until Kafka takes them.
    private func publishOutcomes(_ messages: @autoclosure () throws -> [KafkaOutgoing]) async -> RecordDisposition {
        guard let messages = try? messages() else { return .done }
        return await publishUntilAcknowledged(messages, to: publisher, logger: logger)
    }
}

extension EncodingError {
    /// A sealed payload that opened but is not the form its kind says.
    static var unreadable: EncodingError {
        .invalidValue((), .init(codingPath: [], debugDescription: "sealed payload is not in its kind's form"))
    }
}
