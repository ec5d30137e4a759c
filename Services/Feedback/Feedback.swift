import Configuration
import DeviceState
import Kafka
import Logging
import Metrics
import PushCrypto
import PushModels
import RedisClient
import ServiceKit

/// feedback: applies providers' dead-token reports. The device is marked invalid
/// (dropping it from fan-out), and the invalidation is recorded for the realm's
/// `GET /v1/feedback` and for `delete_device_ids` / `delete_token_ids`. A device of
/// Zulip's legacy API is deleted instead, as Zulip's bouncer does: the server learns it
/// from `deleted_devices`. Replays are harmless.
@main
struct FeedbackMain {
    static func main() async throws {
        let config = ConfigReader.environment
        let settings = try CommonSettings(service: "feedback", defaultPort: 8083, config: config)
        let observability = Observability.bootstrap(service: "feedback", level: settings.logLevel)
        let logger = observability.logger
        let redis = RedisClient(configuration: settings.redis)
        let devices = DeviceStore(
            redis: redis, keys: RedisKeys(prefix: settings.redisPrefix), storage: try config.storageKeyring())
        let consumer = try KafkaConsumer(
            configuration: try settings.consumer(
                stage: "feedback", topic: settings.topics.feedback, defaultConcurrency: 16, config: config),
            logger: logger)
        let app = opsApplication(
            settings: settings, readiness: Readiness(kafka: { consumer.isConnected() }, redis: redis),
            observability: observability)
        try await runServices(
            [
                app,
                StageService {
                    try await consumer.run { record in await apply(record, devices: devices, logger: logger) }
                },
            ], logger: logger)
    }

    static func apply(_ record: KafkaRecord, devices: DeviceStore, logger: Logger) async -> RecordDisposition {
        guard let report = decodeRecord(FeedbackRecord.self, from: record, logger: logger) else { return .done }
        let changed = await untilSuccess("invalidate device", logger: logger) {
            if let device = try await devices.device(report.deviceID), let owner = device.zulipLegacyOwner {
                // Only the registration the report is about: not a token registered again since.
                guard Fingerprint.token(device.token) == report.tokenFingerprint,
                    report.providerTimestampMs.map({ device.registeredAtMs <= $0 }) ?? true
                else { return false }
                guard try await ZulipLegacyDevices(devices: devices).remove(device) else { return false }
                try await RealmDirectory(redis: devices.redis, keys: devices.keys)
                    .countDevice(server: String(owner.prefix { $0 != "|" }), by: -1)
                return true
            }
            return try await devices.invalidate(
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
