import Kafka
import Logging
import RedisClient
import ServiceLifecycle

/// What every stage runs on, started the same way by all four: observability first,
/// then Redis reached and Kafka checked (a refused password or certificate stops the
/// start), then a producer. A stage is its configuration and its handlers: it builds
/// them on the host and hands them to `run`.
public struct StageHost: Sendable {
    public let settings: CommonSettings
    public let observability: Observability
    public let redis: RedisClient
    /// The Kafka settings the producer (and, by default, the consumers) use.
    public let kafka: KafkaConfiguration
    public let producer: KafkaProducer
    public var logger: Logger { observability.logger }

    /// `service` names the logger, metrics and traces; `adjust` changes the producer's
    /// Kafka settings before it is made (ingest bounds how long a record may wait).
    public static func start(
        _ service: String, settings: CommonSettings, adjust: (inout KafkaConfiguration) -> Void = { _ in }
    ) async throws -> StageHost {
        try await start(
            Observability.bootstrap(service: service, level: settings.logLevel), settings: settings, adjust: adjust)
    }

    /// The same, on observability bootstrapped already (a stage that logs while it builds
    /// what it needs before Redis and Kafka, such as the dispatcher's provider clients).
    public static func start(
        _ observability: Observability, settings: CommonSettings, adjust: (inout KafkaConfiguration) -> Void = { _ in }
    ) async throws -> StageHost {
        let logger = observability.logger
        var kafka = try settings.kafka()
        adjust(&kafka)
        let redis = try await settings.connectRedis(logger: logger)
        try await settings.checkKafka(logger: logger)
        let producer = try KafkaProducer(configuration: kafka, logger: logger)
        return StageHost(
            settings: settings, observability: observability, redis: redis, kafka: kafka, producer: producer)
    }

    /// A consumer of one of the stage's topics.
    public func consumer(_ configuration: KafkaConsumerConfiguration) throws -> KafkaConsumer {
        try KafkaConsumer(configuration: configuration, logger: logger)
    }

    /// Runs the stage until SIGTERM: its observability's services, the producer, the ops
    /// listener (`ops`, or one on the stage's HTTP port, ready while `kafkaReady` and
    /// Redis answer), the health gauges of `consumers`, then `services`. Services stop in
    /// reverse order: list the stage's consumers last, so they drain first.
    public func run(
        consumers: [KafkaConsumer], kafkaReady: @escaping @Sendable () -> Bool, ops: (any Service)? = nil,
        _ services: [any Service]
    ) async throws {
        let ops =
            ops
            ?? opsApplication(
                settings: settings, readiness: Readiness(kafka: kafkaReady, redis: redis), observability: observability)
        try await runServices(
            observability.services + [
                KafkaProducerService(producer: producer), ops,
                HealthGauges(consumers: consumers, kafka: kafkaReady, redis: redis),
            ] + services, shutdownTimeout: settings.shutdownTimeout, logger: logger)
    }
}
