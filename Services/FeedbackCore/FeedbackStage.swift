import DeviceState
import Kafka
import Logging
import PushCrypto
import PushModels
import RedisClient
import ServiceKit

/// feedback: applies providers' dead-token reports. The device is marked invalid
/// (dropping it from fan-out), and the invalidation is recorded for the realm's
/// `GET /v1/feedback` and for `delete_device_ids` / `delete_token_ids`. A device of
/// Zulip's legacy API is deleted instead, as Zulip's bouncer does: the server learns it
/// from `deleted_devices`. Replays are harmless.
public struct FeedbackConfiguration: Sendable {
    public var common: CommonSettings
    public var consumer: KafkaConsumerConfiguration
    public var storageKeys: StorageKeyring

    public init(reader: SettingsReader) throws {
        common = try CommonSettings(service: "feedback", defaultPort: 8083, reader: reader)
        consumer = try common.consumer(stage: "feedback", topic: common.topics.feedback, defaultConcurrency: 16)
        storageKeys = try reader.storageKeyring()
    }
}

public enum Feedback {
    /// Builds the stage on Kafka and Redis and runs it until SIGTERM.
    public static func run(_ configuration: FeedbackConfiguration) async throws {
        let settings = configuration.common
        let observability = Observability.bootstrap(service: "feedback", level: settings.logLevel)
        let logger = observability.logger
        let redis = RedisClient(configuration: settings.redis)
        let devices = DeviceStore(
            redis: redis, keys: RedisKeys(prefix: settings.redisPrefix), storage: configuration.storageKeys)
        let consumer = try KafkaConsumer(configuration: configuration.consumer, logger: logger)
        let stage = FeedbackStage(devices: RedisDeviceInvalidations(devices: devices), logger: logger)
        let app = opsApplication(
            settings: settings, readiness: Readiness(kafka: { consumer.isConnected() }, redis: redis),
            observability: observability)
        try await runServices(
            [app, KafkaConsumerService(consumer: consumer, handler: stage.handle)],
            shutdownTimeout: settings.shutdownTimeout, logger: logger)
    }
}

/// The feedback stage's logic, on its seam: the device changes a dead token leads to.
public struct FeedbackStage: Sendable {
    let devices: any DeviceInvalidations
    let logger: Logger

    public init(devices: any DeviceInvalidations, logger: Logger) {
        self.devices = devices
        self.logger = logger
    }

    public func handle(_ record: KafkaRecord) async -> RecordDisposition {
        guard let report = decodeRecord(FeedbackRecord.self, from: record, logger: logger) else { return .done }
        guard let changed = await untilSuccess("invalidate device", logger: logger, { try await apply(report) }) else {
            return .abandoned
        }
        RelayMetrics.invalidations(provider: report.provider.rawValue, applied: changed).increment()
        logger.info(
            changed ? "device invalidated" : "invalidation ignored (stale, repeated or re-registered)",
            metadata: [
                LogKey.deviceID: "\(report.deviceID)", LogKey.provider: "\(report.provider.rawValue)",
                LogKey.reason: "\(report.reason)",
            ])
        return .done
    }

    /// Applies one report; true when it changed a device.
    public func apply(_ report: FeedbackRecord) async throws -> Bool {
        if let device = try await devices.device(report.deviceID), let owner = device.zulipLegacyOwner {
            // Only the registration the report is about: not a token registered again since.
            guard Fingerprint.token(device.token) == report.tokenFingerprint,
                report.providerTimestampMs.map({ device.registeredAtMs <= $0 }) ?? true
            else { return false }
            guard try await devices.removeLegacy(device) else { return false }
            try await devices.countDevice(server: ServerID(String(owner.prefix { $0 != "|" })), by: -1)
            return true
        }
        return try await devices.invalidate(
            deviceID: report.deviceID, tokenFingerprint: report.tokenFingerprint, reason: report.reason,
            providerTimestampMs: report.providerTimestampMs)
    }
}
