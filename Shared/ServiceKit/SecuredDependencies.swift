import Foundation
import Kafka
import LogKeys
import Logging
import RedisClient

/// How the services reach a secured Redis and Kafka: credentials read from files (or,
/// for Redis, the environment), TLS with a CA, an optional client certificate and
/// verification on by default. Every mistake that can be seen without connecting stops
/// the start here, naming the variable and never quoting a secret.
enum SecuredDependencies {
    /// `PUSHRELAY_REDIS_USERNAME`, `PUSHRELAY_REDIS_PASSWORD(_FILE)`: nil when no password is set.
    static func redisCredentials(_ reader: SettingsReader) throws -> RedisCredentials? {
        let username = try reader.string("pushrelay.redis.username", default: "")
        let inline = try reader.raw("pushrelay.redis.password")
        let file = try reader.string("pushrelay.redis.password.file", default: "")
        let password: String
        switch (inline, file.isEmpty) {
        case (.some, false):
            throw SettingsError("PUSHRELAY_REDIS_PASSWORD and PUSHRELAY_REDIS_PASSWORD_FILE are both set: set one")
        case (let inline?, true):
            password = inline
        case (nil, false):
            password = try secretLine(file, "PUSHRELAY_REDIS_PASSWORD_FILE")
        case (nil, true):
            guard username.isEmpty else {
                throw SettingsError(
                    "PUSHRELAY_REDIS_USERNAME is set without a password (PUSHRELAY_REDIS_PASSWORD_FILE)")
            }
            return nil
        }
        guard !password.isEmpty else { throw SettingsError("the Redis password is empty") }
        return RedisCredentials(username: username.isEmpty ? nil : username, password: password)
    }

    /// `PUSHRELAY_REDIS_TLS` and its files: nil for plaintext.
    static func redisTLS(_ reader: SettingsReader) throws -> RedisTLS? {
        let keys = ["ca.file", "cert.file", "key.file", "server.name"].map { "pushrelay.redis.tls.\($0)" }
        guard try reader.bool("pushrelay.redis.tls", default: false) else {
            for key in keys + ["pushrelay.redis.tls.verify"] where try reader.raw(key).map({ !$0.isEmpty }) ?? false {
                throw SettingsError(
                    "\(SettingsCatalog.environmentName(key)) is set but PUSHRELAY_REDIS_TLS is not true")
            }
            return nil
        }
        let values = try keys.map { try reader.string($0, default: "") }
        for (key, path) in zip(keys.prefix(3), values.prefix(3)) where !path.isEmpty {
            guard FileManager.default.isReadableFile(atPath: path) else {
                throw SettingsError("cannot read \(path) (\(SettingsCatalog.environmentName(key)))")
            }
        }
        do {
            return try RedisTLS(
                caFile: values[0], certificateFile: values[1], keyFile: values[2], serverName: values[3],
                verify: try reader.bool("pushrelay.redis.tls.verify", default: true))
        } catch let error as RedisError {
            throw SettingsError("PUSHRELAY_REDIS_TLS_*: \(error.message)")
        }
    }

    /// librdkafka properties for `PUSHRELAY_KAFKA_SECURITY_PROTOCOL` and the SASL and TLS
    /// settings beside it. Refused when `PUSHRELAY_KAFKA_PROPERTIES` sets the same property.
    static func kafkaProperties(_ reader: SettingsReader, raw: [String: String]) throws -> [String: String] {
        let protocolName = try reader.raw("pushrelay.kafka.security.protocol")
        let mechanism = try reader.string("pushrelay.kafka.sasl.mechanism", default: "")
        let username = try reader.string("pushrelay.kafka.sasl.username", default: "")
        let passwordFile = try reader.string("pushrelay.kafka.sasl.password.file", default: "")
        let ca = try reader.string("pushrelay.kafka.tls.ca.file", default: "")
        let certificate = try reader.string("pushrelay.kafka.tls.cert.file", default: "")
        let key = try reader.string("pushrelay.kafka.tls.key.file", default: "")
        let verify = try reader.raw("pushrelay.kafka.tls.verify")
        let sasl = protocolName?.hasPrefix("sasl_") ?? false
        let tls = protocolName == "ssl" || protocolName == "sasl_ssl"
        var properties: [String: String] = [:]
        if let protocolName { properties["security.protocol"] = protocolName }
        if sasl {
            guard !mechanism.isEmpty, !username.isEmpty, !passwordFile.isEmpty else {
                throw SettingsError(
                    "PUSHRELAY_KAFKA_SECURITY_PROTOCOL=\(protocolName ?? ""): set PUSHRELAY_KAFKA_SASL_MECHANISM, "
                        + "PUSHRELAY_KAFKA_SASL_USERNAME and PUSHRELAY_KAFKA_SASL_PASSWORD_FILE")
            }
            properties["sasl.mechanisms"] = mechanism
            properties["sasl.username"] = username
            properties["sasl.password"] = try secretLine(passwordFile, "PUSHRELAY_KAFKA_SASL_PASSWORD_FILE")
        } else if !mechanism.isEmpty || !username.isEmpty || !passwordFile.isEmpty {
            throw SettingsError(
                "PUSHRELAY_KAFKA_SASL_* are set but PUSHRELAY_KAFKA_SECURITY_PROTOCOL is not sasl_ssl or sasl_plaintext"
            )
        }
        if tls {
            guard certificate.isEmpty == key.isEmpty else {
                throw SettingsError("PUSHRELAY_KAFKA_TLS_CERT_FILE and PUSHRELAY_KAFKA_TLS_KEY_FILE go together")
            }
            for (name, path) in [("CA", ca), ("CERT", certificate), ("KEY", key)] where !path.isEmpty {
                guard FileManager.default.isReadableFile(atPath: path) else {
                    throw SettingsError("cannot read \(path) (PUSHRELAY_KAFKA_TLS_\(name)_FILE)")
                }
            }
            if !ca.isEmpty { properties["ssl.ca.location"] = ca }
            if !certificate.isEmpty {
                properties["ssl.certificate.location"] = certificate
                properties["ssl.key.location"] = key
            }
            if verify.map({ ["false", "0"].contains($0.lowercased()) }) ?? false {
                properties["enable.ssl.certificate.verification"] = "false"
                properties["ssl.endpoint.identification.algorithm"] = "none"
            } else {
                properties["ssl.endpoint.identification.algorithm"] = "https"
            }
        } else if !ca.isEmpty || !certificate.isEmpty || !key.isEmpty || verify != nil {
            throw SettingsError(
                "PUSHRELAY_KAFKA_TLS_* are set but PUSHRELAY_KAFKA_SECURITY_PROTOCOL is not ssl or sasl_ssl")
        }
        for name in properties.keys.sorted() where raw[name] != nil {
            throw SettingsError(
                "\(name) is set both by PUSHRELAY_KAFKA_PROPERTIES and by the named Kafka settings: set one")
        }
        return properties
    }

    /// The first line of a secret file, without its line end. The message names the
    /// setting and path, never the content.
    static func secretLine(_ path: String, _ setting: String) throws -> String {
        let text: String
        do {
            text = try String(contentsOfFile: path, encoding: .utf8)
        } catch {
            throw SettingsError("cannot read \(path) (\(setting))")
        }
        let line = text.split(whereSeparator: \.isNewline).first.map(String.init) ?? ""
        guard !line.isEmpty else { throw SettingsError("\(path) (\(setting)) is empty") }
        return line
    }
}

extension CommonSettings {
    /// The Redis client of a service, checked before anything else starts: connected,
    /// authenticated and answering PING. A refused or missing password, a TLS failure
    /// (an untrusted or misnamed certificate, TLS to a plaintext port) or a server that
    /// closes the connection unanswered (plaintext to a TLS port) stops the start with a
    /// message that says which, and which setting to look at. A server that is not
    /// listening yet does not: the service starts not ready, as it would after an outage.
    public func connectRedis(logger: Logger) async throws -> RedisClient {
        let client = RedisClient(configuration: redis)
        let address = "\(redis.host):\(redis.port)"
        do {
            try await client.verify()
            logger.info(
                "redis reached",
                metadata: [
                    LogKey.address: "\(address)", LogKey.tls: "\(redis.tls != nil)",
                    LogKey.user: "\(redis.credentials.map { $0.username ?? "default" } ?? "none")",
                ])
        } catch let error where error.code == .connect {
            logger.warning(
                "redis not reachable yet: starting not ready",
                metadata: [LogKey.address: "\(address)", LogKey.error: "\(error)"])
        } catch {
            throw SettingsError(
                "Redis at \(address): \(error.startupHint(tls: redis.tls != nil)) (\(error.description))")
        }
        return client
    }

    /// The Kafka brokers asked once, before the stage starts: a refused login, a failed
    /// TLS handshake or a listener of another protocol stops the start, naming the
    /// settings to look at; brokers that do not answer (yet) do not.
    public func checkKafka(logger: Logger) async throws {
        let configuration = try kafka()
        switch try await KafkaAdmin(configuration: configuration).reachability(timeout: .seconds(10)) {
        case .reachable:
            return
        case .unreachable(let reason):
            logger.warning(
                "kafka not reachable yet: starting not ready",
                metadata: [LogKey.brokers: "\(configuration.bootstrapServers)", LogKey.error: "\(reason)"])
        case .refused(let reason):
            throw SettingsError(
                "Kafka at \(configuration.bootstrapServers) refused the connection: \(reason) "
                    + "(check PUSHRELAY_KAFKA_SECURITY_PROTOCOL, PUSHRELAY_KAFKA_SASL_* and PUSHRELAY_KAFKA_TLS_*)")
        }
    }

    /// `PUSHRELAY_SHUTDOWN_TIMEOUT_MS`, or derived from the platform's grace period
    /// (`PUSHRELAY_SHUTDOWN_GRACE_SECONDS`, Kubernetes' terminationGracePeriodSeconds):
    /// grace − preStop pause − 5 s of cancellation − 3 s of margin, so the process is
    /// never killed mid-flush.
    static func shutdownTimeout(_ reader: SettingsReader) throws -> Duration {
        let explicit = try reader.raw("pushrelay.shutdown.timeout.ms")
        guard let grace = try reader.raw("pushrelay.shutdown.grace.seconds").flatMap({ Int($0) }) else {
            return try reader.milliseconds("pushrelay.shutdown.timeout.ms", default: 30_000)
        }
        guard explicit == nil else {
            throw SettingsError(
                "PUSHRELAY_SHUTDOWN_TIMEOUT_MS and PUSHRELAY_SHUTDOWN_GRACE_SECONDS are both set: set one")
        }
        let preStop = try reader.int("pushrelay.shutdown.prestop.seconds", default: 0)
        let left = grace - preStop - cancellationSeconds - marginSeconds
        guard left >= 1 else {
            throw SettingsError(
                "PUSHRELAY_SHUTDOWN_GRACE_SECONDS=\(grace) leaves no time to stop after a \(preStop) s preStop pause, "
                    + "\(cancellationSeconds) s of cancellation and \(marginSeconds) s of margin")
        }
        return .seconds(left)
    }

    /// What a stop may take past its graceful part (`runServices`' cancellation bound).
    public static let cancellationSeconds = 5
    static let marginSeconds = 3
}
