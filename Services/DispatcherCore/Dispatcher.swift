import DeviceState
import Foundation
import Kafka
import Logging
import Metrics
import Providers
import PushCrypto
import PushModels
import RedisClient
import ServiceKit
import ServiceLifecycle
import Tracing

/// dispatcher: sends each `push.outbound` record to its provider, once, and records
/// the outcome. A record's offset is committed only after everything it caused is
/// acknowledged on its topics: the outcome on `push.deliveries` (and `push.feedback`
/// for dead tokens), or the push itself on a retry topic or the dead-letter topic.
///
/// Two consumers: the main one on `push.outbound` never waits for a retry; the retry
/// consumer reads `push.retry.<n>` with each partition paused until its next record is due.
public struct DispatcherConfiguration: Sendable {
    public var common: CommonSettings
    public var main: KafkaConsumerConfiguration
    public var retries: KafkaConsumerConfiguration
    public var pipelineKeys: PipelineKeyring
    public var providers: ProviderSettings
    /// Life of the delivery-ledger markers: at least the retry horizon plus an hour,
    /// so the marker outlives every redelivery and replay that may still come.
    public var dedupeTTL: Duration
    public var perProviderConcurrency: Int
    public var rate: AdaptiveRateLimiter.Settings
    /// Longest wait for the rate limit on the main topic before the push is parked.
    public var mainRateWait: Duration

    public init(reader: SettingsReader) throws {
        common = try CommonSettings(service: "dispatcher", defaultPort: 8082, reader: reader)
        main = try common.consumer(stage: "dispatcher", topic: common.topics.outbound, defaultConcurrency: 256)
        retries = try common.consumer(
            stage: "dispatcher.retry", topic: common.topics.retry(1), defaultConcurrency: 64)
        retries.topics = (1...common.retry.delays.count).map(common.topics.retry)
        retries.dueHeader = RecordHeader.due
        // A device's pushes are sent one at a time. Past this many pushes waiting for
        // busy devices, the next one is parked on the first retry topic instead, so a
        // slow provider's devices cannot fill the records in flight and hold up the others.
        main.maxWaitingBehindKeys = try reader.int(
            "pushrelay.dispatcher.busy.device.queue", default: max(1, main.maxInFlight / 4))
        retries.maxWaitingBehindKeys = try reader.int(
            "pushrelay.dispatcher.retry.busy.device.queue", default: max(1, retries.maxInFlight / 4))
        // …but only behind a device busy for this long: under load, many devices are busy
        // for a few milliseconds, and their pushes wait rather than go round a retry topic.
        main.minimumBusyForCongestion = try reader.milliseconds(
            "pushrelay.dispatcher.busy.device.park.after.ms", default: 500)
        retries.minimumBusyForCongestion = main.minimumBusyForCongestion
        pipelineKeys = try reader.pipelineKeyring()
        providers = try ProviderSettings(reader: reader)
        dedupeTTL = max(
            try reader.seconds("pushrelay.dispatcher.dedupe.ttl.seconds", default: 172_800),
            common.retry.horizon + .seconds(3600))
        perProviderConcurrency = try reader.int("pushrelay.dispatcher.provider.concurrency", default: 128)
        rate = .init(
            ceiling: try reader.double("pushrelay.dispatcher.rate.ceiling", default: 5000),
            floor: try reader.double("pushrelay.dispatcher.rate.floor", default: 1))
        guard rate.floor <= rate.ceiling else {
            throw SettingsError("PUSHRELAY_DISPATCHER_RATE_FLOOR must not exceed PUSHRELAY_DISPATCHER_RATE_CEILING")
        }
        mainRateWait = try reader.milliseconds("pushrelay.dispatcher.rate.max.wait.ms", default: 200)
    }
}

public enum Dispatcher {
    /// Builds the stage on Kafka, Redis and the provider clients, and runs it until SIGTERM.
    public static func run(_ configuration: DispatcherConfiguration) async throws {
        let settings = configuration.common
        let observability = try Observability.bootstrap(service: "dispatcher", level: settings.logLevel)
        let clients = try configuration.providers.makeClients(logger: observability.logger)
        if clients.isEmpty {
            observability.logger.warning("no provider is configured: every push will be dead-lettered")
        }
        RelayMetrics.prepare(dispatcherProviders: clients.keys.map(\.rawValue).sorted())
        let host = try await StageHost.start(observability, settings: settings)
        let main = try host.consumer(configuration.main)
        let retries = try host.consumer(configuration.retries)
        let transition = LedgerTransition()
        let stage = DispatchStage(
            pipelineKeys: configuration.pipelineKeys, clients: clients,
            limiters: clients.mapValues { _ in ConcurrencyLimiter(limit: configuration.perProviderConcurrency) },
            rates: AdaptiveRateLimiter(settings: configuration.rate),
            ledger: RedisDeliveryLedger(
                redis: host.redis, keys: settings.redisKeys, ttl: configuration.dedupeTTL, transition: transition),
            publisher: host.producer, topics: settings.topics, schedule: settings.retry, clock: SystemClock(),
            logger: host.logger)
        let mainWait = configuration.mainRateWait
        try await host.run(
            consumers: [main, retries], kafkaReady: { main.isConnected() && retries.isConnected() },
            [
                ShutdownHook {
                    for client in clients.values { await client.shutdown() }
                },
                ProviderAnnouncer(
                    announcements: ProviderAnnouncements(redis: host.redis, keys: settings.redisKeys),
                    providers: Set(clients.keys), ledger: transition, logger: host.logger),
                KafkaConsumerService(consumer: main) { await stage.handle($0, maxRateWait: mainWait) },
                KafkaConsumerService(consumer: retries) { await stage.handle($0, maxRateWait: .seconds(2)) },
            ])
    }
}
