import Configuration
import Foundation
import Kafka
import Logging
import Metrics
import Providers
import PushCrypto
import PushModels
import ServiceKit
import ServiceLifecycle

/// dispatcher: sends each `push.outbound` record to its provider and records the
/// outcome. A record's offset is committed only after its outcome is on
/// `push.deliveries` (and, for dead tokens, on `push.feedback`).
@main
struct DispatcherMain {
    static func main() async throws {
        let config = ConfigReader.environment
        let settings = CommonSettings(service: "dispatcher", defaultPort: 8082, config: config)
        let observability = Observability.bootstrap(service: "dispatcher", level: settings.logLevel)
        let logger = observability.logger
        let kafka = try settings.kafka()
        let clients = try ProviderSettings(config: config).makeClients(logger: logger)
        if clients.isEmpty { logger.warning("no provider is configured: every push will be recorded as failed") }
        let producer = try KafkaProducer(configuration: kafka, logger: logger)
        let consumer = try KafkaConsumer(
            configuration: try settings.consumer(
                stage: "dispatcher", topic: settings.topics.outbound, defaultConcurrency: 256, config: config),
            logger: logger)
        let perProvider = config.int(forKey: "pushrelay.dispatcher.provider.concurrency", default: 128)
        let stage = DispatchStage(
            clients: clients, limiters: clients.mapValues { _ in ConcurrencyLimiter(limit: perProvider) },
            producer: producer, topics: settings.topics,
            retry: RetryPolicy(
                maxAttempts: config.int(forKey: "pushrelay.dispatcher.max.attempts", default: 5),
                baseDelay: .milliseconds(config.int(forKey: "pushrelay.dispatcher.retry.base.ms", default: 250)),
                maxDelay: .seconds(config.int(forKey: "pushrelay.dispatcher.retry.max.seconds", default: 30))),
            logger: logger)

        let app = opsApplication(
            settings: settings, readiness: Readiness(kafka: { consumer.isConnected() }, redis: nil),
            observability: observability)
        try await runServices(
            [
                ShutdownHook.flushing(producer), ShutdownHook {
                    for client in clients.values { await client.shutdown() }
                }, app,
                StageService { try await consumer.run(handler: stage.handle) },
            ], logger: logger)
    }
}

/// Bounded retries with exponential backoff and full jitter; `Retry-After` is a floor.
struct RetryPolicy: Sendable {
    var maxAttempts: Int
    var baseDelay: Duration
    var maxDelay: Duration

    func delay(afterAttempt attempt: Int, retryAfter: Duration?) -> Duration {
        let exponential = baseDelay * (1 << min(attempt - 1, 16))
        let jittered = min(exponential, maxDelay) * Double.random(in: 0.5...1.0)
        return max(jittered, retryAfter ?? .zero)
    }
}

struct DispatchStage: Sendable {
    let clients: [Provider: any PushProviderClient]
    let limiters: [Provider: ConcurrencyLimiter]
    let producer: KafkaProducer
    let topics: TopicNames
    let retry: RetryPolicy
    let logger: Logger

    func handle(_ record: KafkaRecord) async -> RecordDisposition {
        guard let outbound = decodeRecord(OutboundRecord.self, from: record, logger: logger) else { return .done }
        guard let (result, attempts) = await deliver(outbound) else { return .abandoned }
        let messages: [KafkaOutgoing]
        do {
            messages = try outcomeMessages(outbound, result: result, attempts: attempts)
        } catch {
            logger.error("cannot encode outcome", metadata: [LogKey.error: "\(error)"])
            return .abandoned
        }
        let recorded: Bool? = await untilSuccess("record outcome", logger: logger) {
            try await producer.publish(messages)
            return true
        }
        return recorded == nil ? .abandoned : .done
    }

    /// Sends with bounded retries. Nil when shutdown interrupted the retries: the record
    /// is left uncommitted and will be delivered by the next consumer.
    func deliver(_ record: OutboundRecord) async -> (SendResult, Int)? {
        guard let client = clients[record.provider], let limiter = limiters[record.provider] else {
            return (.failed(reason: "provider_not_configured", status: nil), 0)
        }
        var attempt = 0
        while true {
            if let expiresAt = record.expiresAt, Int64(Date().timeIntervalSince1970) > expiresAt {
                return (.failed(reason: "expired", status: nil), attempt)
            }
            attempt += 1
            let start = ContinuousClock.now
            let result = await limiter.withSlot { await client.send(record) }
            Timer(label: "pushrelay_send_duration_seconds", dimensions: [("provider", record.provider.rawValue)])
                .record(duration: ContinuousClock.now - start)
            Counter(
                label: "pushrelay_send_attempts_total",
                dimensions: [("provider", record.provider.rawValue), ("result", Self.label(result))]
            ).increment()
            guard case .retry(let reason, _, let retryAfter) = result else { return (result, attempt) }
            if attempt >= retry.maxAttempts { return (result, attempt) }
            let delay = retry.delay(afterAttempt: attempt, retryAfter: retryAfter)
            logger.info(
                "provider asked to retry",
                metadata: [
                    LogKey.notificationID: "\(record.notificationID)", LogKey.deviceID: "\(record.deviceID)",
                    LogKey.provider: "\(record.provider.rawValue)", LogKey.reason: "\(reason)",
                    "delay_ms": "\(delay.components.seconds * 1000 + delay.components.attoseconds / 1_000_000_000_000_000)",
                ])
            try? await cancelWhenGracefulShutdown { try await Task.sleep(for: delay) }
            if Task.isCancelled || Task.isShuttingDownGracefully { return nil }
        }
    }

    static func label(_ result: SendResult) -> String {
        switch result {
        case .sent: "sent"
        case .invalidToken: "invalid_token"
        case .retry: "retry"
        case .failed: "failed"
        }
    }

    func outcomeMessages(_ record: OutboundRecord, result: SendResult, attempts: Int) throws -> [KafkaOutgoing] {
        let now = Wire.nowMillis()
        func delivery(_ outcome: DeliveryOutcome, reason: String?, status: Int?, id: String? = nil) -> DeliveryRecord {
            DeliveryRecord(
                notificationID: record.notificationID, realmUUID: record.realmUUID, deviceID: record.deviceID,
                provider: record.provider, outcome: outcome, reason: reason, httpStatus: status, attempts: attempts,
                acceptedAtMs: record.acceptedAtMs, completedAtMs: now, providerMessageID: id)
        }
        var metadata: Logger.Metadata = [
            LogKey.notificationID: "\(record.notificationID)", LogKey.deviceID: "\(record.deviceID)",
            LogKey.provider: "\(record.provider.rawValue)", LogKey.token: "\(DeviceToken.redact(record.token))",
        ]
        switch result {
        case .sent(let status, let id):
            Timer(label: "pushrelay_end_to_end_seconds", dimensions: [("provider", record.provider.rawValue)])
                .recordMilliseconds(max(0, now - record.acceptedAtMs))
            return [try .delivery(delivery(.sent, reason: nil, status: status, id: id), topic: topics.deliveries)]
        case .invalidToken(let reason, let status, let timestamp):
            metadata[LogKey.reason] = "\(reason)"
            logger.info("provider reports a dead token", metadata: metadata)
            let feedback = FeedbackRecord(
                deviceID: record.deviceID, realmUUID: record.realmUUID, provider: record.provider,
                tokenFingerprint: Fingerprint.token(record.token), reason: reason, providerTimestampMs: timestamp,
                notificationID: record.notificationID, observedAtMs: now)
            return [
                try .feedback(feedback, topic: topics.feedback),
                try .delivery(delivery(.invalidToken, reason: reason, status: status), topic: topics.deliveries),
            ]
        case .retry(let reason, let status, _):
            metadata[LogKey.reason] = "\(reason)"
            logger.warning("giving up after retries", metadata: metadata)
            return [try .delivery(delivery(.failed, reason: reason, status: status), topic: topics.deliveries)]
        case .failed(let reason, let status):
            metadata[LogKey.reason] = "\(reason)"
            logger.warning("push failed permanently", metadata: metadata)
            let outcome: DeliveryOutcome = reason == "expired" ? .expired : .failed
            return [try .delivery(delivery(outcome, reason: reason, status: status), topic: topics.deliveries)]
        }
    }
}
