import Configuration
import Hummingbird
import Kafka
import Logging
import Metrics
import PushModels
import ServiceLifecycle

extension CommonSettings {
    /// The consumer of one stage: group `pushrelay-<stage>` and `<stage>.concurrency`
    /// records in flight, both overridable (`PUSHRELAY_<STAGE>_GROUP`, `…_CONCURRENCY`).
    public func consumer(
        stage: String, topic: String, defaultConcurrency: Int, config: ConfigReader
    ) throws -> KafkaConsumerConfiguration {
        KafkaConsumerConfiguration(
            connection: try kafka(),
            groupID: config.string(forKey: ConfigKey("pushrelay.\(stage).group"), default: "pushrelay-\(stage)"),
            topics: [topic],
            maxInFlight: config.int(forKey: ConfigKey("pushrelay.\(stage).concurrency"), default: defaultConcurrency))
    }
}

/// The HTTP endpoint of a consumer stage: health and metrics only, on `PUSHRELAY_HTTP_*`.
public func opsApplication(
    settings: CommonSettings, readiness: Readiness, observability: Observability
) -> some Service {
    makeOpsApplication(
        host: settings.httpHost, port: settings.httpPort, settings: settings, readiness: readiness,
        observability: observability)
}

/// Health and metrics on their own listener, apart from a public API:
/// `PUSHRELAY_OPS_HOST` (default 127.0.0.1) and `PUSHRELAY_OPS_PORT` (default 9080).
public struct OpsListener {
    public let service: any Service
    public let host: String
    public let port: Int
}

public func opsApplication(
    settings: CommonSettings, readiness: Readiness, observability: Observability, config: ConfigReader,
    separateFromAPI: Bool
) throws -> OpsListener {
    let host = config.string(forKey: "pushrelay.ops.host", default: "127.0.0.1")
    let port = config.int(forKey: "pushrelay.ops.port", default: 9080)
    if separateFromAPI && port == settings.httpPort && port != 0 {
        throw SettingsError("PUSHRELAY_OPS_PORT (\(port)) must differ from PUSHRELAY_HTTP_PORT")
    }
    let app = makeOpsApplication(
        host: host, port: port, settings: settings, readiness: readiness, observability: observability)
    return OpsListener(service: app, host: host, port: port)
}

private func makeOpsApplication(
    host: String, port: Int, settings: CommonSettings, readiness: Readiness, observability: Observability
) -> some Service {
    let router = Router(context: BasicRequestContext.self)
    router.addOpsRoutes(readiness: readiness, registry: observability.registry)
    return Application(
        router: router, server: settings.http.server(listener: "ops"),
        configuration: settings.http.configuration(host: host, port: port, logger: observability.logger),
        logger: observability.logger)
}

/// Decodes a consumed record. A record no stage can ever read is counted, logged
/// with its position (never its content) and skipped: retrying cannot fix it.
public func decodeRecord<T: Decodable>(_ type: T.Type, from record: KafkaRecord, logger: Logger) -> T? {
    countRecordIn(topic: record.topic)
    do {
        return try Wire.decode(type, from: record.value)
    } catch {
        Counter(label: "pushrelay_records_rejected_total", dimensions: [("topic", record.topic)]).increment()
        logger.error(
            "undecodable record skipped",
            metadata: [
                LogKey.topic: "\(record.topic)", "partition": "\(record.partition)", LogKey.offset: "\(record.offset)",
                LogKey.error: "\(error)",
            ])
        return nil
    }
}
