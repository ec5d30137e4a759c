import CoreMetrics
import DeviceState
import Kafka
import LogKeys
import Logging
import PushCrypto
import PushModels
import RedisClient
import ServiceKit
import Tracing

/// feedback: applies providers' dead-token reports. The device is marked invalid
/// (dropping it from fan-out), and the invalidation is recorded for the realm's
/// `GET /v1/feedback` and for `delete_device_ids` / `delete_token_ids`. A device of
/// Zulip's legacy API is deleted instead, as Zulip's bouncer does: the server learns it
/// from `deleted_devices`. Replays are harmless.
public struct FeedbackConfiguration: Sendable {
    public var common: CommonSettings
    public var consumer: KafkaConsumerConfiguration
    public var storageKeys: StorageKeyring
    /// `push.deliveries`, for realms' outcome counters and servers' feedback hooks.
    public var reports: KafkaConsumerConfiguration
    /// `push.hooks`: deliveries to servers' feedback hooks.
    public var hooks: KafkaConsumerConfiguration
    public var hook: FeedbackHookSettings
    /// `push.requests`, the retry topics, `push.deliveries` and `push.deadletter`: each
    /// notification's delivery status (`StatusRecorder`).
    public var status: KafkaConsumerConfiguration
    public var statusLimits: DeliveryStatusLimits
    /// `PUSHRELAY_DELIVERY_STATUS_ENABLED`: false runs no status consumer (every id answers 404).
    public var statusEnabled: Bool
    /// CA for hook TLS in tests and private networks (`PUSHRELAY_PUSH_ENDPOINT_CA_FILE`).
    public var caFile: String?

    public init(reader: SettingsReader) throws {
        common = try CommonSettings(service: "feedback", defaultPort: 8083, reader: reader)
        consumer = try common.consumer(stage: "feedback", topic: common.topics.feedback, defaultConcurrency: 16)
        reports = try common.consumer(
            stage: "feedback.reports", topic: common.topics.deliveries, defaultConcurrency: 64)
        hooks = try common.consumer(stage: "feedback.hooks", topic: common.topics.hooks, defaultConcurrency: 256)
        status = try common.consumer(
            stage: "feedback.status", topic: common.topics.requests, defaultConcurrency: 64)
        statusLimits = try DeliveryStatusLimits(reader: reader)
        statusEnabled = try reader.bool("pushrelay.delivery.status.enabled", default: true)
        storageKeys = try reader.storageKeyring()
        hook = try FeedbackHookSettings(reader: reader)
        let ca = try reader.string("pushrelay.push.endpoint.ca.file", default: "")
        caFile = ca.isEmpty ? nil : ca
    }
}

public enum Feedback {
    /// Builds the stage on Kafka and Redis and runs it until SIGTERM.
    public static func run(_ configuration: FeedbackConfiguration) async throws {
        let settings = configuration.common
        let observability = try Observability.bootstrap(service: "feedback", level: settings.logLevel)
        RelayMetrics.prepare(feedbackProviders: Provider.allCases.map(\.rawValue))
        let host = try await StageHost.start(observability, settings: settings)
        let devices = DeviceStore(redis: host.redis, keys: settings.redisKeys, storage: configuration.storageKeys)
        let consumer = try host.consumer(configuration.consumer)
        let stage = FeedbackStage(devices: RedisDeviceInvalidations(devices: devices), logger: host.logger)
        let reportsConsumer = try host.consumer(configuration.reports)
        let hooksConsumer = try host.consumer(configuration.hooks)
        let recorder = StatusRecorder(
            store: RedisDeliveryStatusStore(
                redis: host.redis, keys: settings.redisKeys, limits: configuration.statusLimits),
            topics: settings.topics, retryStages: settings.retry.delays.count,
            maxAgeSeconds: configuration.statusLimits.ttlSeconds, logger: host.logger)
        var statusConsumerConfiguration = configuration.status
        statusConsumerConfiguration.topics = recorder.subscribed
        let statusConsumer = configuration.statusEnabled ? try host.consumer(statusConsumerConfiguration) : nil
        let reports = DeliveryReports(
            redis: host.redis, keys: settings.redisKeys, devices: devices, settings: configuration.hook,
            caFile: configuration.caFile, publisher: host.producer, hooksTopic: settings.topics.hooks,
            logger: host.logger)
        try await host.run(
            consumers: [consumer, reportsConsumer, hooksConsumer] + [statusConsumer].compactMap { $0 },
            kafkaReady: { consumer.isConnected() },
            [
                KafkaConsumerService(consumer: consumer, handler: stage.handle),
                KafkaConsumerService(consumer: reportsConsumer, maxBatch: 512, batchHandler: reports.handleBatch),
                KafkaConsumerService(consumer: hooksConsumer, handler: reports.deliverHook),
            ]
                + [statusConsumer].compactMap { $0 }.map {
                    KafkaConsumerService(consumer: $0, maxBatch: 512, batchHandler: recorder.handleBatch)
                })
        await reports.shutdown()
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
        await RelayTracing.withRecordSpan("invalidate token", of: record) { span in
            span?.describe(record)
            return await handleInSpan(record, span: span)
        }
    }

    private func handleInSpan(_ record: KafkaRecord, span: (any Span)?) async -> RecordDisposition {
        guard let report = decodeRecord(FeedbackRecord.self, from: record, logger: logger) else { return .done }
        span?.attributes[SpanKey.notificationID] = report.notificationID.rawValue
        span?.attributes[SpanKey.deviceID] = report.deviceID.rawValue
        span?.attributes[SpanKey.provider] = report.provider.rawValue
        span?.attributes[SpanKey.reason] = report.reason.name
        guard let change = await untilSuccess("invalidate device", logger: logger, { try await apply(report) }) else {
            return .abandoned
        }
        if case .removedLegacy(let server) = change {
            // The removal happened: only the quota count is left, retried on its own, since
            // a retry of the whole report would find the device gone and never count it out.
            let counted: Bool? = await untilSuccess("count the removed device out", logger: logger) {
                try await devices.countDevice(server: server, by: -1)
                return true
            }
            if counted == nil { return .abandoned }
        }
        let changed = change != .none
        span?.attributes["pushrelay.invalidated"] = changed
        RelayMetrics.invalidations(provider: report.provider.rawValue, applied: changed).increment()
        logger.info(
            changed ? "device invalidated" : "invalidation ignored (stale, repeated or re-registered)",
            metadata: [
                LogKey.deviceID: "\(report.deviceID)", LogKey.provider: "\(report.provider.rawValue)",
                LogKey.reason: "\(report.reason)",
            ])
        return .done
    }

    /// What one report changed.
    public enum Change: Sendable, Equatable {
        /// Stale, repeated or re-registered: nothing.
        case none
        /// A device marked invalid.
        case invalidated
        /// A device of Zulip's legacy API deleted; it is still to be counted out of the
        /// server's device quota.
        case removedLegacy(server: ServerID)
    }

    /// Applies one report, all but the quota count of a removed legacy device (`handle` does that).
    public func apply(_ report: FeedbackRecord) async throws -> Change {
        if let device = try await devices.device(report.deviceID), let owner = device.zulipLegacyOwner {
            // Only the registration the report is about: not a token registered again since.
            guard Fingerprint.token(device.token) == report.tokenFingerprint,
                report.providerTimestampMs.map({ device.registeredAtMs <= $0 }) ?? true
            else { return .none }
            guard try await devices.removeLegacy(device) else { return .none }
            return .removedLegacy(server: owner.server)
        }
        let changed = try await devices.invalidate(
            deviceID: report.deviceID, tokenFingerprint: report.tokenFingerprint, reason: report.reason,
            providerTimestampMs: report.providerTimestampMs)
        return changed ? .invalidated : .none
    }
}
