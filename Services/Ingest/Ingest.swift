import Configuration
import DeviceState
import Hummingbird
import Kafka
import Logging
import PushCrypto
import RedisClient
import ServiceKit

/// Request size limits.
struct Limits: Sendable {
    var maxBodyBytes: Int
    /// Largest plaintext notification: encrypted and base64'd it must fit the providers' 4096 bytes.
    var maxPlaintextBytes: Int
}

/// Everything the HTTP handlers need.
struct IngestAPI: Sendable {
    let servers: ServerStore
    let devices: DeviceStore
    let authenticator: ServerAuthenticator
    let bouncerKeys: BouncerKeyring
    let pipelineKeys: PipelineKeyring
    let acceptor: Acceptor
    let limits: Limits
}

/// ingest: the HTTP API realms call. Accepted notifications go to `push.requests`.
@main
struct Ingest {
    static func main() async throws {
        let config = ConfigReader.environment
        let settings = CommonSettings(service: "ingest", defaultPort: 8080, config: config)
        let observability = Observability.bootstrap(service: "ingest", level: settings.logLevel)
        let logger = observability.logger

        let redis = RedisClient(configuration: settings.redis)
        let keys = RedisKeys(prefix: settings.redisPrefix)
        let producer = try KafkaProducer(configuration: try settings.kafka(), logger: logger)
        let servers = ServerStore(redis: redis, keys: keys)
        let api = IngestAPI(
            servers: servers,
            devices: DeviceStore(redis: redis, keys: keys),
            authenticator: ServerAuthenticator(
                servers: servers,
                rateLimit: config.int(forKey: "pushrelay.ratelimit.requests", default: 1000),
                rateWindowSeconds: config.int(forKey: "pushrelay.ratelimit.window.seconds", default: 60)),
            bouncerKeys: try BouncerKeyring(
                fileContents: try config.secretFile(forKey: "pushrelay.bouncer.keys.file", default: ".run/bouncer-keys")),
            pipelineKeys: try PipelineKeyring(
                fileContents: try config.secretFile(forKey: "pushrelay.pipeline.keys.file", default: ".run/pipeline-keys")),
            acceptor: Acceptor(producer: producer, topic: settings.topics.requests, logger: logger),
            limits: Limits(
                maxBodyBytes: config.int(forKey: "pushrelay.http.max.body.bytes", default: 256 * 1024),
                maxPlaintextBytes: config.int(forKey: "pushrelay.max.plaintext.bytes", default: 2900)))

        let router = Router(context: BasicRequestContext.self)
        router.add(middleware: ErrorMiddleware())
        router.add(middleware: MetricsMiddleware())
        router.addOpsRoutes(
            readiness: Readiness(kafka: { producer.isConnected() }, redis: redis), registry: observability.registry)
        api.addBouncerRoutes(to: router)
        api.addNativeRoutes(to: router)
        let app = Application(
            router: router,
            configuration: .init(address: .hostname(settings.httpHost, port: settings.httpPort), serverName: "pushrelay"),
            logger: logger)
        logger.info("ingest listening", metadata: ["address": "\(settings.httpHost):\(settings.httpPort)"])
        try await runServices([ShutdownHook.flushing(producer), app], logger: logger)
    }
}
