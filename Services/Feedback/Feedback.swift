import Configuration
import DeviceState
import Hummingbird
import Kafka
import Logging
import Metrics
import PushModels
import RedisClient
import ServiceKit

/// feedback: applies providers' dead-token reports. The device is marked invalid
/// (dropping it from fan-out), and the invalidation is recorded for the realm's
/// `GET /v1/feedback` and for `delete_device_ids`. Replays are harmless.
@main
struct FeedbackMain {
    static func main() async throws {
        let config = ConfigReader.environment
        let settings = CommonSettings(service: "feedback", defaultPort: 8083, config: config)
        let observability = Observability.bootstrap(service: "feedback", level: settings.logLevel)
        let logger = observability.logger
        let redis = RedisClient(configuration: settings.redis)
        let devices = DeviceStore(redis: redis, keys: RedisKeys(prefix: settings.redisPrefix))
        let consumer = try KafkaConsumer(
            configuration: KafkaConsumerConfiguration(
                connection: try settings.kafka(),
                groupID: config.string(forKey: "pushrelay.feedback.group", default: "pushrelay-feedback"),
                topics: [settings.topics.feedback],
                maxInFlight: config.int(forKey: "pushrelay.feedback.concurrency", default: 16)),
            logger: logger)

        let router = Router(context: BasicRequestContext.self)
        router.addOpsRoutes(
            readiness: Readiness(kafka: { consumer.isConnected() }, redis: redis), registry: observability.registry)
        let app = Application(
            router: router,
            configuration: .init(address: .hostname(settings.httpHost, port: settings.httpPort)), logger: logger)
        try await runServices(
            [
                app,
                StageService {
                    try await consumer.run { record in await apply(record, devices: devices, logger: logger) }
                },
            ], logger: logger)
    }

    static func apply(_ record: KafkaRecord, devices: DeviceStore, logger: Logger) async -> RecordDisposition {
        countRecordIn(topic: record.topic)
        guard let report = try? Wire.decode(FeedbackRecord.self, from: record.value) else {
            Counter(label: "pushrelay_records_rejected_total", dimensions: [("topic", record.topic)]).increment()
            logger.error(
                "undecodable feedback record skipped",
                metadata: [LogKey.topic: "\(record.topic)", LogKey.offset: "\(record.offset)"])
            return .done
        }
        let changed = await untilSuccess("invalidate device", logger: logger) {
            try await devices.invalidate(
                deviceID: report.deviceID, tokenFingerprint: report.tokenFingerprint, reason: report.reason,
                providerTimestampMs: report.providerTimestampMs)
        }
        guard let changed else { return .abandoned }
        Counter(
            label: "pushrelay_invalidations_total",
            dimensions: [("provider", report.provider.rawValue), ("applied", changed ? "yes" : "no")]
        ).increment()
        logger.info(
            changed ? "device invalidated" : "invalidation ignored (stale, repeated or re-registered)",
            metadata: [
                LogKey.deviceID: "\(report.deviceID)", LogKey.provider: "\(report.provider.rawValue)",
                LogKey.reason: "\(report.reason)",
            ])
        return .done
    }
}
