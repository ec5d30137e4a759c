import Foundation
import Kafka
import KafkaDev
import Logging
@_spi(Dev) import ServiceKit
import ServiceLifecycle

/// devbroker: librdkafka's mock cluster as a standalone Kafka-protocol broker for the
/// dev stack and tests. Creates the pipeline topics, writes its bootstrap address to a
/// file, and runs until SIGTERM/SIGINT. Memory only: a restart loses every record.
@main
struct DevBroker {
    static func main() async {
        await runMain { try await run(SettingsReader.environment(extraEntries: settings)) }
    }

    /// The dev broker's own settings (not the services': they stay out of `SettingsCatalog`).
    static let settings: [String: SettingsCatalog.Kind] = [
        "pushrelay.devbroker.brokers": .int(1...9),
        "pushrelay.devbroker.partitions": .int(1...1000),
        "pushrelay.devbroker.topics": .text,
    ]

    static func run(_ reader: SettingsReader) async throws {
        let brokers = try reader.int("pushrelay.devbroker.brokers", default: 1)
        let partitions = try reader.int("pushrelay.devbroker.partitions", default: 6)
        let file = try reader.string("pushrelay.kafka.brokers.file", default: ".run/kafka-bootstrap")
        let topics = try reader.string(
            "pushrelay.devbroker.topics",
            default: "push.requests,push.outbound,push.feedback,push.deliveries,push.deadletter,push.hooks,"
                + "push.retry.1,push.retry.2,push.retry.3"
        ).split(separator: ",").map { String($0).trimmingCharacters(in: .whitespaces) }
        let logger = try Observability.bootstrap(service: "devbroker", level: .info, tracing: false).logger

        let cluster = try MockCluster(brokers: brokers)
        for topic in topics where !topic.isEmpty {
            try cluster.createTopic(topic, partitions: partitions)
        }
        let directory = (file as NSString).deletingLastPathComponent
        if !directory.isEmpty {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        }
        // Write then rename, so readers never see a half-written address.
        try Data(cluster.bootstrapServers.utf8).write(to: URL(fileURLWithPath: file + ".tmp"))
        guard rename(file + ".tmp", file) == 0 else { throw SettingsError("cannot write \(file)") }
        logger.info(
            "dev broker ready",
            metadata: [
                "bootstrap": "\(cluster.bootstrapServers)", "topics": "\(topics.joined(separator: ","))",
                "partitions": "\(partitions)", "file": "\(file)",
            ])
        print(cluster.bootstrapServers)
        // Drills: SIGUSR1 takes every broker down, SIGUSR2 brings them back.
        signal(SIGUSR1, SIG_IGN)
        signal(SIGUSR2, SIG_IGN)
        let outage = DispatchSource.makeSignalSource(signal: SIGUSR1)
        outage.setEventHandler {
            cluster.setBrokers(up: false)
            logger.warning("dev broker: every broker is down (SIGUSR1)")
        }
        let recovery = DispatchSource.makeSignalSource(signal: SIGUSR2)
        recovery.setEventHandler {
            cluster.setBrokers(up: true)
            logger.warning("dev broker: every broker is up (SIGUSR2)")
        }
        outage.resume()
        recovery.resume()
        try await runServices(
            [StageService { try? await gracefulShutdown() }], shutdownTimeout: .seconds(10), logger: logger)
        withExtendedLifetime((cluster, outage, recovery)) {}
    }
}
