import Configuration
import DevStack
import Foundation
import KafkaDev
import Logging
import Testing

@testable import Kafka
@testable import RedisClient
@testable import ServiceKit

/// The named settings for a secured Kafka and Redis, and the stop's grace period: what
/// they become, what they refuse, and that no message quotes a secret.
@Suite struct SecuredSettingsTests {
    static func settings(_ values: [String: String]) throws -> CommonSettings {
        var keyed: [AbsoluteConfigKey: ConfigValue] = ["pushrelay.kafka.brokers": "127.0.0.1:9092"]
        for (key, value) in values {
            keyed[AbsoluteConfigKey(stringLiteral: key)] = .init(.string(value), isSecret: false)
        }
        return try CommonSettings(
            service: "test", defaultPort: 0,
            reader: SettingsReader(ConfigReader(provider: InMemoryProvider(values: keyed))))
    }

    static func file(_ contents: String) throws -> String {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("secured-\(UUID().uuidString)").path
        try contents.write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }

    /// The error a settings read throws, as a service would print it.
    static func failure(_ values: [String: String]) -> String? {
        do {
            _ = try settings(values)
            return nil
        } catch {
            return "\(error)"
        }
    }

    @Test func saslOverTLSBecomesLibrdkafkasProperties() throws {
        let password = "scram-\(UUID().uuidString)"
        let passwordFile = try Self.file("\(password)\n")
        let ca = try Self.file("ca"), certificate = try Self.file("cert"), key = try Self.file("key")
        let kafka = try Self.settings([
            "pushrelay.kafka.security.protocol": "sasl_ssl", "pushrelay.kafka.sasl.mechanism": "SCRAM-SHA-512",
            "pushrelay.kafka.sasl.username": "pushrelay", "pushrelay.kafka.sasl.password.file": passwordFile,
            "pushrelay.kafka.tls.ca.file": ca, "pushrelay.kafka.tls.cert.file": certificate,
            "pushrelay.kafka.tls.key.file": key,
        ]).kafka()
        #expect(
            kafka.properties == [
                "security.protocol": "sasl_ssl", "sasl.mechanisms": "SCRAM-SHA-512", "sasl.username": "pushrelay",
                "sasl.password": password, "ssl.ca.location": ca, "ssl.certificate.location": certificate,
                "ssl.key.location": key, "ssl.endpoint.identification.algorithm": "https",
            ])
        // librdkafka knows every name and value (it refuses unknown ones when a client is made).
        var plain = kafka
        plain.properties["ssl.ca.location"] = nil
        plain.properties["ssl.certificate.location"] = nil
        plain.properties["ssl.key.location"] = nil
        #expect(throws: Never.self) { _ = try KafkaAdmin(configuration: plain) }
    }

    @Test func plainSASLAndMutualTLSMapToo() throws {
        let passwordFile = try Self.file("pw")
        let plain = try Self.settings([
            "pushrelay.kafka.security.protocol": "sasl_plaintext", "pushrelay.kafka.sasl.mechanism": "PLAIN",
            "pushrelay.kafka.sasl.username": "u", "pushrelay.kafka.sasl.password.file": passwordFile,
        ]).kafka()
        #expect(plain.properties["sasl.mechanisms"] == "PLAIN" && plain.properties["ssl.ca.location"] == nil)
        let ca = try Self.file("ca"), certificate = try Self.file("cert"), key = try Self.file("key")
        let mtls = try Self.settings([
            "pushrelay.kafka.security.protocol": "ssl", "pushrelay.kafka.tls.ca.file": ca,
            "pushrelay.kafka.tls.cert.file": certificate, "pushrelay.kafka.tls.key.file": key,
            "pushrelay.kafka.tls.verify": "false",
        ]).kafka()
        #expect(mtls.properties["sasl.mechanisms"] == nil && mtls.properties["ssl.key.location"] == key)
        #expect(mtls.properties["enable.ssl.certificate.verification"] == "false")
    }

    @Test func inconsistentKafkaSettingsStopTheStart() throws {
        let passwordFile = try Self.file("hunter2-kafka")
        let cases: [([String: String], String)] = [
            (["pushrelay.kafka.security.protocol": "sasl_ssl"], "PUSHRELAY_KAFKA_SASL_MECHANISM"),
            (["pushrelay.kafka.sasl.username": "u"], "PUSHRELAY_KAFKA_SECURITY_PROTOCOL is not sasl"),
            (["pushrelay.kafka.tls.ca.file": passwordFile], "PUSHRELAY_KAFKA_SECURITY_PROTOCOL is not ssl"),
            (
                [
                    "pushrelay.kafka.security.protocol": "ssl", "pushrelay.kafka.tls.cert.file": passwordFile,
                ], "go together"
            ),
            (
                [
                    "pushrelay.kafka.security.protocol": "sasl_plaintext", "pushrelay.kafka.sasl.mechanism": "PLAIN",
                    "pushrelay.kafka.sasl.username": "u", "pushrelay.kafka.sasl.password.file": passwordFile,
                    "pushrelay.kafka.properties": "sasl.username=v",
                ], "set both by PUSHRELAY_KAFKA_PROPERTIES"
            ),
            (["pushrelay.kafka.security.protocol": "tls"], "must be one of"),
            (
                [
                    "pushrelay.kafka.security.protocol": "sasl_plaintext", "pushrelay.kafka.sasl.mechanism": "PLAIN",
                    "pushrelay.kafka.sasl.username": "u", "pushrelay.kafka.sasl.password.file": "/nonexistent/pw",
                ], "cannot read /nonexistent/pw (PUSHRELAY_KAFKA_SASL_PASSWORD_FILE)"
            ),
        ]
        for (values, expected) in cases {
            let message = try #require(Self.failure(values), "\(values) was accepted")
            #expect(message.contains(expected), "\(values): \(message)")
            #expect(!message.contains("hunter2"))
        }
    }

    @Test func redisCredentialsComeFromAFileOrTheEnvironmentNeverBoth() throws {
        let file = try Self.file("from-the-file\nsecond line ignored\n")
        let fromFile = try Self.settings([
            "pushrelay.redis.username": "relay", "pushrelay.redis.password.file": file,
        ]).redis.credentials
        #expect(fromFile?.command.map { String(decoding: $0, as: UTF8.self) } == ["AUTH", "relay", "from-the-file"])
        #expect(!"\(try #require(fromFile))".contains("from-the-file"))
        let inline = try Self.settings(["pushrelay.redis.password": "inline-secret"]).redis.credentials
        #expect(inline?.command.map { String(decoding: $0, as: UTF8.self) } == ["AUTH", "inline-secret"])
        #expect(try Self.settings([:]).redis.credentials == nil)
        #expect(
            Self.failure(["pushrelay.redis.password": "a", "pushrelay.redis.password.file": file])?.contains(
                "both set") == true)
        #expect(Self.failure(["pushrelay.redis.username": "relay"])?.contains("without a password") == true)
        #expect(
            Self.failure(["pushrelay.redis.tls.ca.file": file])?.contains("PUSHRELAY_REDIS_TLS is not true") == true)
        #expect(
            Self.failure(["pushrelay.redis.tls": "true", "pushrelay.redis.tls.ca.file": "/nonexistent/ca.pem"])?
                .contains("cannot read /nonexistent/ca.pem (PUSHRELAY_REDIS_TLS_CA_FILE)") == true)
        // A CA file that holds no certificate stops the start too.
        #expect(
            Self.failure(["pushrelay.redis.tls": "true", "pushrelay.redis.tls.ca.file": file])?.contains(
                "PUSHRELAY_REDIS_TLS_") == true)
    }

    @Test func aSecretIsNeverQuotedInAnError() throws {
        let secret = "p\u{7}ssword-\(UUID().uuidString)"
        let message = try #require(Self.failure(["pushrelay.redis.password": secret]))
        #expect(message.contains("PUSHRELAY_REDIS_PASSWORD") && message.contains("<redacted>"))
        #expect(!message.contains(secret) && !message.contains("ssword-"))
        let (errors, _) = SettingsCatalog.check([
            "PUSHRELAY_REDIS_PASSWORD": secret, "PUSHRELAY_KAFKA_PROPERTIES": "sasl.password=\u{1}\(secret)",
        ])
        #expect(errors.count == 2)
        #expect(errors.allSatisfy { !$0.contains("ssword-") })
    }

    @Test func theStopsTimeoutIsDerivedFromTheGracePeriod() throws {
        #expect(try Self.settings([:]).shutdownTimeout == .seconds(30))
        #expect(try Self.settings(["pushrelay.shutdown.grace.seconds": "45"]).shutdownTimeout == .seconds(37))
        #expect(
            try Self.settings([
                "pushrelay.shutdown.grace.seconds": "50", "pushrelay.shutdown.prestop.seconds": "10",
            ]).shutdownTimeout == .seconds(32))
        #expect(
            Self.failure(["pushrelay.shutdown.grace.seconds": "45", "pushrelay.shutdown.timeout.ms": "30000"])?
                .contains("both set") == true)
        #expect(
            Self.failure(["pushrelay.shutdown.grace.seconds": "12", "pushrelay.shutdown.prestop.seconds": "5"])?
                .contains("leaves no time") == true)
    }

    /// librdkafka's mock broker has no SASL or TLS listener (its handlers have no
    /// SaslHandshake; it reads a TLS ClientHello as a request): a client with them is
    /// refused at once, and the stage's start check says so. A plaintext client is let in.
    @Test func kafkaThatRefusesTheLoginStopsTheStart() async throws {
        let cluster = try MockCluster(brokers: 1)
        try cluster.createTopic("reach", partitions: 1)
        let logger = Logger(label: "test")
        func check(_ values: [String: String]) async throws -> String? {
            var values = values
            values["pushrelay.kafka.brokers"] = cluster.bootstrapServers
            do {
                try await Self.settings(values).checkKafka(logger: logger)
                return nil
            } catch {
                return "\(error)"
            }
        }
        #expect(try await check([:]) == nil)
        let tls = try #require(try await check(["pushrelay.kafka.security.protocol": "ssl"]))
        #expect(tls.contains("refused the connection") && tls.contains("PUSHRELAY_KAFKA_SECURITY_PROTOCOL"), "\(tls)")
        let passwordFile = try Self.file("wrong-password")
        let sasl = try #require(
            try await check([
                "pushrelay.kafka.security.protocol": "sasl_plaintext", "pushrelay.kafka.sasl.mechanism": "PLAIN",
                "pushrelay.kafka.sasl.username": "u", "pushrelay.kafka.sasl.password.file": passwordFile,
            ]))
        #expect(sasl.contains("_AUTHENTICATION"), "\(sasl)")
        #expect(!sasl.contains("wrong-password"))
        // Nothing listening: not a refusal (the brokers may come later).
        #expect(try await check(["pushrelay.kafka.brokers": "127.0.0.1:\(try Stack.freePort())"]) == nil)
    }
}
