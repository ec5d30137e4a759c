import Configuration
import DeviceState
import Hummingbird
import Kafka
import Logging
import NIOCore
import PushCrypto
import RedisClient
import ServiceKit

/// Request limits, each a setting (README, "Security").
struct Limits: Sendable {
    var maxBodyBytes: Int
    /// Zulip's analytics upload: up to 10,000 rows of each of three tables per call.
    var maxAnalyticsBodyBytes: Int
    /// Largest plaintext notification: encrypted and base64'd it must fit the providers' 4096 bytes.
    var maxPlaintextBytes: Int
    /// Device ids (native) or push requests (bouncer) in one notify.
    var maxDeviceIDs: Int
    var maxRealmsPerServer: Int
    var maxDevicesPerServer: Int
    /// How long a notify waits for Kafka's acknowledgement before answering 503.
    var publishTimeout: Duration
    /// How long a notify's answer is kept under its `Idempotency-Key`.
    var idempotencyTTLSeconds: Int
}

/// Everything the HTTP handlers need.
struct IngestAPI: Sendable {
    let servers: ServerStore
    let devices: DeviceStore
    let realms: RealmDirectory
    let authenticator: ServerAuthenticator
    let bouncerKeys: BouncerKeyring
    let pipelineKeys: PipelineKeyring
    let acceptor: Acceptor
    let limits: Limits
    /// Whether servers may register themselves (`open`) or only by `pushrelay-admin` (`closed`).
    let openServerRegistration: Bool
}

/// ingest: the HTTP API realms call. Accepted notifications go to `push.requests`.
/// The API listens on `PUSHRELAY_HTTP_*`; health and metrics on a separate ops
/// listener (`PUSHRELAY_OPS_*`, loopback by default).
@main
struct Ingest {
    static func main() async throws {
        let config = ConfigReader.environment
        let settings = try CommonSettings(service: "ingest", defaultPort: 8080, config: config)
        let observability = Observability.bootstrap(service: "ingest", level: settings.logLevel)
        let logger = observability.logger

        let publishTimeoutMs = config.int(forKey: "pushrelay.notify.publish.timeout.ms", default: 5000)
        var kafka = try settings.kafka()
        // A record librdkafka cannot deliver fails within the bound, so a 503 is final:
        // the notification is not produced later behind the realm's back.
        kafka.properties["message.timeout.ms"] = "\(publishTimeoutMs)"
        let redis = RedisClient(configuration: settings.redis)
        let keys = RedisKeys(prefix: settings.redisPrefix)
        let producer = try KafkaProducer(configuration: kafka, logger: logger)
        let servers = ServerStore(redis: redis, keys: keys, pepper: try config.apiKeyPepper())
        var devices = DeviceStore(redis: redis, keys: keys, storage: try config.storageKeyring())
        devices.maxStoredKeys = config.int(forKey: "pushrelay.device.max.push.keys", default: 3)
        let api = IngestAPI(
            servers: servers,
            devices: devices,
            realms: RealmDirectory(redis: redis, keys: keys),
            authenticator: ServerAuthenticator(
                servers: servers, counter: WindowCounter(redis: redis), keys: keys,
                settings: .init(
                    rateLimit: config.int(forKey: "pushrelay.ratelimit.requests", default: 1000),
                    rateWindowSeconds: config.int(forKey: "pushrelay.ratelimit.window.seconds", default: 60),
                    maxFailures: config.int(forKey: "pushrelay.auth.failures.max", default: 20),
                    failureWindowSeconds: config.int(forKey: "pushrelay.auth.failures.window.seconds", default: 300),
                    maxRegistrations: config.int(forKey: "pushrelay.server.registrations.max", default: 10),
                    registrationWindowSeconds: config.int(
                        forKey: "pushrelay.server.registrations.window.seconds", default: 3600),
                    clientIPHeader: config.string(forKey: "pushrelay.http.client.ip.header", default: ""))),
            bouncerKeys: try BouncerKeyring(
                fileContents: try config.secretFile(forKey: "pushrelay.bouncer.keys.file", default: ".run/bouncer-keys")),
            pipelineKeys: try config.pipelineKeyring(),
            acceptor: Acceptor(
                producer: producer, topic: settings.topics.requests, timeout: .milliseconds(publishTimeoutMs),
                logger: logger),
            limits: Limits(
                maxBodyBytes: config.int(forKey: "pushrelay.http.max.body.bytes", default: 256 * 1024),
                maxAnalyticsBodyBytes: config.int(
                    forKey: "pushrelay.http.max.analytics.body.bytes", default: 32 << 20),
                maxPlaintextBytes: config.int(forKey: "pushrelay.max.plaintext.bytes", default: 2900),
                maxDeviceIDs: config.int(forKey: "pushrelay.notify.max.device.ids", default: 100),
                maxRealmsPerServer: config.int(forKey: "pushrelay.server.max.realms", default: 10_000),
                maxDevicesPerServer: config.int(forKey: "pushrelay.server.max.devices", default: 10_000_000),
                publishTimeout: .milliseconds(publishTimeoutMs),
                idempotencyTTLSeconds: config.int(forKey: "pushrelay.idempotency.ttl.seconds", default: 86_400)),
            openServerRegistration: config.string(forKey: "pushrelay.server.registration", default: "open") == "open")

        let router = Router(context: IngestContext.self)
        router.add(middleware: ErrorMiddleware())
        router.add(middleware: MetricsMiddleware())
        api.addBouncerRoutes(to: router)
        api.addNativeRoutes(to: router)
        let app = Application(
            router: router, server: settings.http.server(listener: "api"),
            configuration: settings.http.configuration(
                host: settings.httpHost, port: settings.httpPort, serverName: "pushrelay", logger: logger),
            logger: logger)
        let ops = try opsApplication(
            settings: settings, readiness: Readiness(kafka: { producer.isConnected() }, redis: redis),
            observability: observability, config: config, separateFromAPI: true)
        logger.info(
            "ingest listening",
            metadata: [
                "address": "\(settings.httpHost):\(settings.httpPort)",
                "ops": "\(ops.host):\(ops.port)",
            ])
        try await runServices([ShutdownHook.flushing(producer), ops.service, app], logger: logger)
    }
}

/// Ingest's request context: Hummingbird's basics plus the peer address, which the
/// per-client limits on failed authentication and server registration key on.
struct IngestContext: RequestContext, RemoteAddressRequestContext {
    var coreContext: CoreRequestContextStorage
    let remoteAddress: SocketAddress?

    init(source: ApplicationRequestContextSource) {
        coreContext = .init(source: source)
        remoteAddress = source.channel.remoteAddress
    }
}
