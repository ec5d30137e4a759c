import DeviceState
import Foundation
import Hummingbird
import Kafka
import LogKeys
import Logging
import NIOCore
import PushCrypto
import PushModels
import RedisClient
import ServiceKit

/// Request limits, each a setting (docs/security.md).
public struct Limits: Sendable {
    public var maxBodyBytes: Int
    /// Zulip's analytics upload: up to 10,000 rows of each of three tables per call.
    public var maxAnalyticsBodyBytes: Int
    /// Largest plaintext notification: encrypted and base64'd it must fit the providers' 4096 bytes.
    public var maxPlaintextBytes: Int
    /// Device ids (native) or push requests (bouncer) in one notify.
    public var maxDeviceIDs: Int
    public var maxRealmsPerServer: Int
    public var maxDevicesPerServer: Int
    /// How long a notify waits for Kafka's acknowledgement before answering 503.
    public var publishTimeout: Duration
    /// How long a notify's answer is kept under its `Idempotency-Key`.
    public var idempotencyTTLSeconds: Int
    /// Push keys kept per device.
    public var maxStoredKeys: Int
    /// A notification's time to live, as the encryptor sets it (a dry run reports the expiry).
    public var notificationTTLSeconds: Int64

    public init(reader: SettingsReader) throws {
        maxBodyBytes = try reader.int("pushrelay.http.max.body.bytes", default: 256 * 1024)
        maxAnalyticsBodyBytes = try reader.int("pushrelay.http.max.analytics.body.bytes", default: 32 << 20)
        maxPlaintextBytes = try reader.int("pushrelay.max.plaintext.bytes", default: 2900)
        maxDeviceIDs = try reader.int("pushrelay.notify.max.device.ids", default: 100)
        maxRealmsPerServer = try reader.int("pushrelay.server.max.realms", default: 10_000)
        maxDevicesPerServer = try reader.int("pushrelay.server.max.devices", default: 10_000_000)
        publishTimeout = try reader.milliseconds("pushrelay.notify.publish.timeout.ms", default: 5000)
        idempotencyTTLSeconds = try reader.int("pushrelay.idempotency.ttl.seconds", default: 86_400)
        maxStoredKeys = try reader.int("pushrelay.device.max.push.keys", default: 3)
        notificationTTLSeconds = Int64(try reader.int("pushrelay.notification.ttl.seconds", default: 86400))
    }
}

/// Everything ingest reads at start.
public struct IngestConfiguration: Sendable {
    public var common: CommonSettings
    public var limits: Limits
    public var auth: ServerAuthenticator.Settings
    /// Whether servers may register themselves (`open`) or only by `pushrelay` (`closed`).
    public var openServerRegistration: Bool
    public var pipelineKeys: PipelineKeyring
    public var storageKeys: StorageKeyring
    public var bouncerKeys: BouncerKeyring
    public var pepper: APIKeyPepper
    public var gorush: GorushSettings
    public var status: StatusSettings
    public var transfer: RegistrationTransferSettings

    public init(reader: SettingsReader) throws {
        common = try CommonSettings(service: "ingest", defaultPort: 8080, reader: reader)
        limits = try Limits(reader: reader)
        auth = .init(
            rateLimit: try reader.int("pushrelay.ratelimit.requests", default: 1000),
            rateWindowSeconds: try reader.int("pushrelay.ratelimit.window.seconds", default: 60),
            maxFailures: try reader.int("pushrelay.auth.failures.max", default: 20),
            failureWindowSeconds: try reader.int("pushrelay.auth.failures.window.seconds", default: 300),
            maxRegistrations: try reader.int("pushrelay.server.registrations.max", default: 10),
            registrationWindowSeconds: try reader.int("pushrelay.server.registrations.window.seconds", default: 3600),
            clientIPHeader: try reader.string("pushrelay.http.client.ip.header", default: ""))
        openServerRegistration = try reader.string("pushrelay.server.registration", default: "open") == "open"
        pipelineKeys = try reader.pipelineKeyring()
        storageKeys = try reader.storageKeyring()
        bouncerKeys = try reader.bouncerKeyring()
        pepper = try reader.apiKeyPepper()
        gorush = try GorushSettings(reader: reader)
        status = try StatusSettings(reader: reader)
        transfer = try RegistrationTransferSettings(reader: reader)
    }
}

/// ingest: the HTTP API realms call. Accepted notifications go to `push.requests`.
/// The API listens on `PUSHRELAY_HTTP_*`; health and metrics on a separate ops
/// listener (`PUSHRELAY_OPS_*`, loopback by default).
public enum Ingest {
    /// Builds the API on Kafka and Redis and serves it until SIGTERM.
    public static func run(_ configuration: IngestConfiguration) async throws {
        let settings = configuration.common
        // A record librdkafka cannot deliver fails within the bound, so a 503 is final:
        // the notification is not produced later behind the realm's back.
        let host = try await StageHost.start("ingest", settings: settings) { kafka in
            kafka.producerProperties["message.timeout.ms"] =
                "\(RetrySchedule.milliseconds(configuration.limits.publishTimeout))"
        }
        let (logger, producer) = (host.logger, host.producer)
        // gorush's sync mode: an ingest follows push.deliveries from its end while sync calls come.
        let watch = DeliveryWatch()
        let tail = try KafkaTopicTail(
            configuration: host.kafka, topic: settings.topics.deliveries, logger: logger,
            needed: { [weak watch] in watch?.isWaiting ?? false }, deliver: { [weak watch] in watch?.take($0) })
        watch.attach(follow: { try await tail.follow() })
        let api = try IngestAPI(
            configuration: configuration, redis: host.redis, publisher: producer, logger: logger, deliveryWatch: watch)
        let app = Application(
            router: api.router(), server: settings.http.server(listener: "api"),
            configuration: settings.http.configuration(
                host: settings.httpHost, port: settings.httpPort, serverName: "pushrelay", logger: logger),
            logger: logger)
        let ops = try opsApplication(
            settings: settings, readiness: Readiness(kafka: { producer.isConnected() }, redis: host.redis),
            observability: host.observability, separateFromAPI: true)
        logger.info(
            "ingest listening",
            metadata: [
                LogKey.address: "\(settings.httpHost):\(settings.httpPort)",
                LogKey.ops: "\(ops.host):\(ops.port)",
            ])
        // Stopped in reverse order: the tail closes once the API has drained its sync calls.
        try await host.run(
            consumers: [], kafkaReady: { producer.isConnected() }, ops: ops.service,
            [
                ShutdownHook { tail.close() }, app, ShutdownHook { await api.shutdown() },
            ] + (api.statusTransport(configuration.status, logger: logger).map { [$0] } ?? []))
    }
}

/// Ingest's request context: Hummingbird's basics plus the peer address, which the
/// per-client limits on failed authentication and server registration key on.
public struct IngestContext: RequestContext, RemoteAddressRequestContext {
    public var coreContext: CoreRequestContextStorage
    public let remoteAddress: SocketAddress?

    public init(source: ApplicationRequestContextSource) {
        coreContext = .init(source: source)
        remoteAddress = source.channel.remoteAddress
    }
}
