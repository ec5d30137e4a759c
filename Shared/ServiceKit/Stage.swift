import Configuration
import Hummingbird
import Kafka
import LogKeys
import Logging
import Metrics
import PushModels
import ServiceLifecycle

extension CommonSettings {
    /// The consumer of one stage: group `pushrelay-<stage>` and `<stage>.concurrency`
    /// records in flight, both overridable (`PUSHRELAY_<STAGE>_GROUP`, `…_CONCURRENCY`).
    public func consumer(stage: String, topic: String, defaultConcurrency: Int) throws -> KafkaConsumerConfiguration {
        KafkaConsumerConfiguration(
            connection: try kafka(),
            groupID: try reader.string("pushrelay.\(stage).group", default: "pushrelay-\(stage)"),
            topics: [topic],
            maxInFlight: try reader.int("pushrelay.\(stage).concurrency", default: defaultConcurrency))
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
    settings: CommonSettings, readiness: Readiness, observability: Observability, separateFromAPI: Bool
) throws -> OpsListener {
    let host = try settings.reader.string("pushrelay.ops.host", default: "127.0.0.1")
    let port = try settings.reader.int("pushrelay.ops.port", default: 9080)
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
    RelayMetrics.recordsIn(topic: record.topic).increment()
    do {
        return try Wire.decode(type, from: record.value)
    } catch {
        RelayMetrics.recordsRejected(topic: record.topic).increment()
        logger.error(
            "undecodable record skipped",
            metadata: [
                LogKey.topic: "\(record.topic)", LogKey.partition: "\(record.partition)",
                LogKey.offset: "\(record.offset)",
                LogKey.error: "\(error)",
            ])
        return nil
    }
}

/// Publishes a record's outcomes, retrying until Kafka acknowledges them. `.abandoned`
/// only when shutdown interrupts the wait: the record stays uncommitted and is redelivered.
public func publishUntilAcknowledged(
    _ messages: [KafkaOutgoing], to publisher: any RecordPublisher, logger: Logger
) async -> RecordDisposition {
    guard !messages.isEmpty else { return .done }
    let published: Bool? = await untilSuccess("record outcome", logger: logger) {
        try await publisher.publish(messages)
        return true
    }
    return published == nil ? .abandoned : .done
}
