import Configuration
import Foundation
import Kafka
import Logging
import PushModels
import RedisClient

/// Settings every stage shares, read once at startup from the environment.
/// Keys are dotted (`pushrelay.redis.port`) and read as `PUSHRELAY_REDIS_PORT`;
/// the README's configuration table lists them with their defaults.
public struct CommonSettings: Sendable {
    public var serviceName: String
    /// `bootstrap.servers`. When empty, read from `kafkaBrokersFile` (written by the dev broker).
    public var kafkaBrokers: String
    public var kafkaBrokersFile: String
    public var redis: RedisConfiguration
    public var redisPrefix: String
    public var topics: TopicNames
    /// Retry stages (`PUSHRELAY_RETRY_DELAYS`, e.g. `5s,1m,10m`) and attempts before dead-lettering.
    public var retry: RetrySchedule
    /// Address of the service's HTTP endpoint: ingest's API; the ops endpoint of the others.
    public var httpHost: String
    public var httpPort: Int
    /// Connection limits and timeouts of every HTTP listener.
    public var http: HTTPHygiene
    public var logLevel: Logger.Level

    /// Reads the settings after checking every `PUSHRELAY_` variable against
    /// `SettingsCatalog`: a value that makes no sense throws, naming the variable.
    public init(service: String, defaultPort: Int, config: ConfigReader = .environment) throws {
        try SettingsCatalog.validateEnvironment()
        serviceName = service
        kafkaBrokers = config.string(forKey: "pushrelay.kafka.brokers", default: "")
        kafkaBrokersFile = config.string(forKey: "pushrelay.kafka.brokers.file", default: ".run/kafka-bootstrap")
        redis = RedisConfiguration(
            host: config.string(forKey: "pushrelay.redis.host", default: "127.0.0.1"),
            port: config.int(forKey: "pushrelay.redis.port", default: 6379),
            connections: config.int(forKey: "pushrelay.redis.connections", default: 4),
            timeout: .milliseconds(config.int(forKey: "pushrelay.redis.timeout.ms", default: 2000)))
        redisPrefix = config.string(forKey: "pushrelay.redis.prefix", default: "pr:")
        var topics = TopicNames()
        topics.requests = config.string(forKey: "pushrelay.topic.requests", default: topics.requests)
        topics.outbound = config.string(forKey: "pushrelay.topic.outbound", default: topics.outbound)
        topics.feedback = config.string(forKey: "pushrelay.topic.feedback", default: topics.feedback)
        topics.deliveries = config.string(forKey: "pushrelay.topic.deliveries", default: topics.deliveries)
        topics.deadLetter = config.string(forKey: "pushrelay.topic.deadletter", default: topics.deadLetter)
        topics.retryPrefix = config.string(forKey: "pushrelay.topic.retry.prefix", default: topics.retryPrefix)
        self.topics = topics
        let delays = config.string(forKey: "pushrelay.retry.delays", default: "5s,1m,10m")
        retry = RetrySchedule(
            delays: try RetrySchedule.parseDelays(delays),
            maxAttempts: config.int(forKey: "pushrelay.retry.max.attempts", default: RetrySchedule.standard.maxAttempts),
            jitter: config.double(forKey: "pushrelay.retry.jitter", default: 0.2))
        httpHost = config.string(forKey: "pushrelay.http.host", default: "127.0.0.1")
        httpPort = config.int(forKey: "pushrelay.http.port", default: defaultPort)
        http = HTTPHygiene(
            maxConnections: config.int(forKey: "pushrelay.http.max.connections", default: 10_000),
            headerTimeout: .milliseconds(config.int(forKey: "pushrelay.http.header.timeout.ms", default: 10_000)),
            bodyTimeout: .milliseconds(config.int(forKey: "pushrelay.http.body.timeout.ms", default: 30_000)),
            idleTimeout: .milliseconds(config.int(forKey: "pushrelay.http.idle.timeout.ms", default: 60_000)))
        logLevel = Logger.Level(rawValue: config.string(forKey: "pushrelay.log.level", default: "info")) ?? .info
    }

    /// The Kafka connection, resolving the bootstrap address from the file if needed.
    public func kafka() throws -> KafkaConfiguration {
        var brokers = kafkaBrokers
        if brokers.isEmpty {
            do {
                brokers = try String(contentsOfFile: kafkaBrokersFile, encoding: .utf8)
                    .trimmingCharacters(in: .whitespacesAndNewlines)
            } catch {
                throw SettingsError(
                    "PUSHRELAY_KAFKA_BROKERS is not set and \(kafkaBrokersFile) cannot be read: \(error)")
            }
        }
        return KafkaConfiguration(bootstrapServers: brokers, clientID: "pushrelay-\(serviceName)")
    }
}

public struct SettingsError: Error, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}

extension ConfigReader {
    /// The process environment, the one configuration source of the services.
    public static var environment: ConfigReader { ConfigReader(provider: EnvironmentVariablesProvider()) }

    /// Reads a secret from the file a setting names.
    public func secretFile(forKey key: String, default path: String) throws -> String {
        let path = string(forKey: ConfigKey(key), default: path)
        do {
            return try String(contentsOfFile: path, encoding: .utf8)
        } catch {
            throw SettingsError("cannot read \(path) (\(key)): \(error)")
        }
    }
}
