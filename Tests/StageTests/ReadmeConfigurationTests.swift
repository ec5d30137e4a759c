import Configuration
import Foundation
import Testing

@testable import Kafka
@testable import ServiceKit
@testable import StageTestSupport

/// docs/configuration.md is `SettingsCatalog` rendered, and every executable reads only
/// catalogued settings.
@Suite struct ReadmeConfigurationTests {
    /// docs/configuration.md of the package this file belongs to: the directory holding
    /// Package.swift, found by walking up from this file.
    static func configurationDoc() throws -> String {
        var directory = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        while directory.path != "/" {
            if FileManager.default.fileExists(atPath: directory.appendingPathComponent("Package.swift").path) {
                let candidate = directory.appendingPathComponent("docs/configuration.md")
                return try String(contentsOf: candidate, encoding: .utf8)
            }
            directory.deleteLastPathComponent()
        }
        throw CocoaError(.fileNoSuchFile)
    }

    @Test func theDocumentIsTheCatalogRendered() throws {
        let document = try Self.configurationDoc()
        let rendered = SettingsCatalog.markdown()
        let differing = zip(
            document.split(separator: "\n", omittingEmptySubsequences: false),
            rendered.split(separator: "\n", omittingEmptySubsequences: false)
        ).first { $0 != $1 }
        #expect(
            document == rendered,
            "docs/configuration.md differs from the catalog (run `make docs`): \(String(describing: differing))")
    }

    @Test func everySettingIsListedOnceWithItsMeaning() {
        let settings = SettingsCatalog.sections.flatMap(\.settings)
        #expect(settings.count > 100)
        #expect(Set(settings.map(\.key)).count == settings.count, "a key listed twice")
        #expect(settings.allSatisfy { !$0.defaultValue.isEmpty && !$0.defaultValue.contains("|") })
        #expect(settings.allSatisfy { !$0.about.contains("|") && !$0.about.contains("\n") })
        #expect(SettingsCatalog.entries.count == settings.count)
        // Variables that are not settings do not collide with one.
        #expect(
            settings.allSatisfy { !SettingsCatalog.toolVariables.contains(SettingsCatalog.environmentName($0.key)) })
    }

    @Test func aBadValueStopsTheReadNamingTheVariable() throws {
        let reader = SettingsReader(
            .init(provider: InMemoryProvider(values: ["pushrelay.redis.port": "70000", "pushrelay.retry.jitter": "x"])))
        #expect(throws: SettingsError.self) { try reader.int("pushrelay.redis.port", default: 1) }
        #expect(throws: SettingsError.self) { try reader.double("pushrelay.retry.jitter", default: 0.1) }
        #expect(try reader.int("pushrelay.redis.connections", default: 4) == 4)
        do {
            _ = try reader.int("pushrelay.redis.port", default: 1)
        } catch {
            #expect("\(error)".contains("PUSHRELAY_REDIS_PORT"))
        }
        // A key nobody catalogued is a programming error, not a silent default.
        #expect(throws: SettingsError.self) { try reader.string("pushrelay.not.a.setting", default: "") }
        // Required settings have no default.
        #expect(throws: SettingsError.self) { try reader.pipelineKeyring() }
    }
}

/// `PUSHRELAY_KAFKA_PROPERTIES` and its producer and consumer variants.
@Suite struct KafkaPropertiesSettingTests {
    static func settings(_ values: [AbsoluteConfigKey: ConfigValue]) throws -> CommonSettings {
        var values = values
        values["pushrelay.kafka.brokers"] = "127.0.0.1:9092"
        return try CommonSettings(
            service: "test", defaultPort: 0, reader: SettingsReader(.init(provider: InMemoryProvider(values: values))))
    }

    @Test func pairsReachTheirClients() throws {
        let settings = try Self.settings([
            "pushrelay.kafka.properties": " security.protocol = SASL_SSL ;sasl.mechanism=PLAIN;; sasl.password=a=b; ",
            "pushrelay.kafka.producer.properties": "linger.ms=10",
            "pushrelay.kafka.consumer.properties": "fetch.wait.max.ms=50;linger.ms=1",
        ])
        let kafka = try settings.kafka()
        #expect(
            kafka.properties == ["security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "sasl.password": "a=b"])
        #expect(kafka.producerProperties == ["linger.ms": "10"])
        let producer = kafka.settings(["linger.ms": "2", "acks": "all"], producer: true)
        #expect(producer["linger.ms"] == "10" && producer["acks"] == "all" && producer["sasl.mechanism"] == "PLAIN")
        let consumer = kafka.settings(["linger.ms": "2"], producer: false)
        #expect(consumer["linger.ms"] == "1" && consumer["fetch.wait.max.ms"] == "50")
        #expect(try Self.settings([:]).kafka().properties.isEmpty)
    }

    @Test func secretsComeFromAFile() throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent(
            "kafka-\(UUID().uuidString).properties"
        ).path
        try "# the cluster's account\nsasl.username = relay\nsasl.password=se;cret=\n\n".write(
            toFile: path, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(atPath: path) }
        let kafka = try Self.settings([
            "pushrelay.kafka.properties": "security.protocol=SASL_SSL",
            "pushrelay.kafka.properties.file": .init(stringLiteral: path),
        ]).kafka()
        #expect(
            kafka.properties == [
                "security.protocol": "SASL_SSL", "sasl.username": "relay", "sasl.password": "se;cret=",
            ])
        // A name in both places is a mistake, not an override.
        #expect(throws: SettingsError.self) {
            try Self.settings([
                "pushrelay.kafka.properties": "sasl.username=other",
                "pushrelay.kafka.properties.file": .init(stringLiteral: path),
            ])
        }
        #expect(throws: SettingsError.self) {
            try Self.settings(["pushrelay.kafka.properties.file": "/nonexistent/kafka.properties"])
        }
        // Lines ended CR LF (written on Windows) read the same.
        try "# comment\r\nsasl.username=relay\r\nsasl.password=pw\r\n".write(
            toFile: path, atomically: true, encoding: .utf8)
        #expect(
            try Self.settings(["pushrelay.kafka.properties.file": .init(stringLiteral: path)]).kafka().properties
                == ["sasl.username": "relay", "sasl.password": "pw"])
    }

    @Test func whatTheGuaranteesRestOnCannotBeChanged() throws {
        for name in [
            "enable.idempotence", "acks", "enable.auto.commit", "group.id", "bootstrap.servers", "auto.offset.reset",
            "partition.assignment.strategy", "group.instance.id",
        ] {
            #expect(throws: SettingsError.self) {
                try Self.settings(["pushrelay.kafka.producer.properties": .init(stringLiteral: "\(name)=x")])
            }
        }
    }

    @Test func malformedPairsAreRefusedWithoutEchoingValues() throws {
        for text in ["sasl.password", "=secret", "bad name=1", "linger.ms=1;linger.ms=2"] {
            do {
                _ = try Self.settings(["pushrelay.kafka.properties": .init(stringLiteral: text)])
                Issue.record("\(text) was taken")
            } catch {
                #expect("\(error)".contains("PUSHRELAY_KAFKA_PROPERTIES"))
                #expect(!"\(error)".contains("secret"))
            }
        }
    }
}
