import Configuration
import Foundation
import Kafka
import Logging
import PushModels
import DeviceState
import RedisClient

/// Settings every stage shares, read once at startup from the environment.
/// Keys are dotted (`pushrelay.redis.port`) and read as `PUSHRELAY_REDIS_PORT`;
/// docs/configuration.md lists them with their defaults.
public struct CommonSettings: Sendable {
    public var serviceName: String
    /// `bootstrap.servers`. When empty, read from `kafkaBrokersFile` (written by the dev broker).
    public var kafkaBrokers: String
    public var kafkaBrokersFile: String
    /// More librdkafka settings (`PUSHRELAY_KAFKA_PROPERTIES`, and the producer's and
    /// consumer's own): TLS and SASL to a managed cluster, batching. See `kafkaProperties(_:key:)`.
    public var kafkaProperties: [String: String]
    public var kafkaProducerProperties: [String: String]
    public var kafkaConsumerProperties: [String: String]
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

    /// How long a graceful stop may take (`PUSHRELAY_SHUTDOWN_TIMEOUT_MS`): consumers drain
    /// and commit, producers flush; past it the remaining work is cancelled and the process
    /// exits (unfinished records stay uncommitted and are redelivered).
    public var shutdownTimeout: Duration
    /// The reader every other setting of the executable comes through.
    public var reader: SettingsReader

    /// Reads the shared settings; a value that makes no sense throws, naming the variable.
    public init(service: String, defaultPort: Int, reader: SettingsReader) throws {
        self.reader = reader
        serviceName = service
        kafkaBrokers = try reader.string("pushrelay.kafka.brokers", default: "")
        kafkaBrokersFile = try reader.string("pushrelay.kafka.brokers.file", default: "")
        let rawKafkaProperties = try Self.kafkaProperties(reader, key: "pushrelay.kafka.properties")
        kafkaProperties = rawKafkaProperties.merging(
            try SecuredDependencies.kafkaProperties(reader, raw: rawKafkaProperties)
        ) { _, named in named }
        kafkaProducerProperties = try Self.kafkaProperties(reader, key: "pushrelay.kafka.producer.properties")
        kafkaConsumerProperties = try Self.kafkaProperties(reader, key: "pushrelay.kafka.consumer.properties")
        redis = RedisConfiguration(
            host: try reader.string("pushrelay.redis.host", default: "127.0.0.1"),
            port: try reader.int("pushrelay.redis.port", default: 6379),
            // One connection per event loop: the commands of a loop turn share one write and
            // one read (a pool of 4 on one loop split them four ways;
            // benchmarks/history/20-issue-27-part-4-fakes-and-system-calls.md).
            connections: try reader.int("pushrelay.redis.connections", default: ServiceRuntime.eventLoops),
            timeout: try reader.milliseconds("pushrelay.redis.timeout.ms", default: 2000),
            cluster: try reader.bool("pushrelay.redis.cluster", default: false),
            seeds: try Self.redisSeeds(try reader.string("pushrelay.redis.cluster.seeds", default: "")),
            credentials: try SecuredDependencies.redisCredentials(reader),
            tls: try SecuredDependencies.redisTLS(reader))
        redisPrefix = try reader.string("pushrelay.redis.prefix", default: "pr:")
        var topics = TopicNames()
        topics.requests = try reader.string("pushrelay.topic.requests", default: topics.requests)
        topics.outbound = try reader.string("pushrelay.topic.outbound", default: topics.outbound)
        topics.feedback = try reader.string("pushrelay.topic.feedback", default: topics.feedback)
        topics.deliveries = try reader.string("pushrelay.topic.deliveries", default: topics.deliveries)
        topics.deadLetter = try reader.string("pushrelay.topic.deadletter", default: topics.deadLetter)
        topics.hooks = try reader.string("pushrelay.topic.hooks", default: topics.hooks)
        topics.retryPrefix = try reader.string("pushrelay.topic.retry.prefix", default: topics.retryPrefix)
        self.topics = topics
        retry = RetrySchedule(
            delays: try RetrySchedule.parseDelays(try reader.string("pushrelay.retry.delays", default: "5s,1m,10m")),
            maxAttempts: try reader.int("pushrelay.retry.max.attempts", default: RetrySchedule.standard.maxAttempts),
            jitter: try reader.double("pushrelay.retry.jitter", default: 0.2))
        httpHost = try reader.string("pushrelay.http.host", default: "127.0.0.1")
        httpPort = try reader.int("pushrelay.http.port", default: defaultPort)
        http = HTTPHygiene(
            maxConnections: try reader.int("pushrelay.http.max.connections", default: 10_000),
            headerTimeout: try reader.milliseconds("pushrelay.http.header.timeout.ms", default: 10_000),
            bodyTimeout: try reader.milliseconds("pushrelay.http.body.timeout.ms", default: 30_000),
            idleTimeout: try reader.milliseconds("pushrelay.http.idle.timeout.ms", default: 60_000))
        // Checked against the catalog's list, so the level always parses.
        logLevel = Logger.Level(rawValue: try reader.string("pushrelay.log.level", default: "info")) ?? .info
        shutdownTimeout = try Self.shutdownTimeout(reader)
        // Applied by `ServiceRuntime.install()` before this runs; read here so a bad value stops the start.
        _ = try reader.string("pushrelay.executor", default: "loops")
        _ = try reader.int("pushrelay.event.loops", default: 1)
        _ = try reader.int("pushrelay.malloc.arenas", default: 2)
    }

    /// The relay's Redis keys: hash-tagged on a Redis Cluster (`PUSHRELAY_REDIS_CLUSTER`).
    public var redisKeys: RedisKeys { RedisKeys(prefix: redisPrefix, hashTags: redis.cluster) }

    /// `PUSHRELAY_REDIS_CLUSTER_SEEDS`: more cluster nodes to learn the slot map from,
    /// `host:port` separated by commas.
    static func redisSeeds(_ text: String) throws -> [RedisNodeAddress] {
        try SettingsReader.list(text).map {
            guard let address = RedisNodeAddress($0), !address.host.isEmpty else {
                throw SettingsError("PUSHRELAY_REDIS_CLUSTER_SEEDS: \"\($0)\" is not host:port")
            }
            return address
        }
    }

    /// The Kafka connection. There is no default broker: `PUSHRELAY_KAFKA_BROKERS`, or a
    /// file holding the address (`PUSHRELAY_KAFKA_BROKERS_FILE`, which the dev broker writes).
    public func kafka() throws -> KafkaConfiguration {
        var brokers = kafkaBrokers
        if brokers.isEmpty {
            guard !kafkaBrokersFile.isEmpty else {
                throw SettingsError("PUSHRELAY_KAFKA_BROKERS is not set (nor PUSHRELAY_KAFKA_BROKERS_FILE)")
            }
            do {
                brokers = try String(contentsOfFile: kafkaBrokersFile, encoding: .utf8)
                    .trimmingCharacters(in: .whitespacesAndNewlines)
            } catch {
                throw SettingsError(
                    "PUSHRELAY_KAFKA_BROKERS is not set and \(kafkaBrokersFile) cannot be read: \(error)")
            }
            guard !brokers.isEmpty else { throw SettingsError("\(kafkaBrokersFile) is empty") }
        }
        var configuration = KafkaConfiguration(
            bootstrapServers: brokers, clientID: "pushrelay-\(serviceName)", properties: kafkaProperties)
        configuration.producerProperties = kafkaProducerProperties
        configuration.consumerProperties = kafkaConsumerProperties
        return configuration
    }

    /// librdkafka settings as `name=value` pairs separated by `;`, for example
    /// `security.protocol=SASL_SSL;sasl.mechanism=PLAIN`; for the shared ones also a file
    /// (`PUSHRELAY_KAFKA_PROPERTIES_FILE`: a pair a line, `#` starts a comment), where
    /// secrets such as `sasl.password` belong. librdkafka checks names and values when the
    /// clients start; the ones the relay's guarantees rest on
    /// (`KafkaConfiguration.reservedProperties`) are refused here.
    static func kafkaProperties(_ reader: SettingsReader, key: String) throws -> [String: String] {
        var properties = try parseKafkaProperties(
            try reader.string(key, default: "").split(separator: ";"), source: SettingsCatalog.environmentName(key))
        let fileKey = key + ".file"
        guard SettingsCatalog.entries[fileKey] != nil else { return properties }
        let path = try reader.string(fileKey, default: "")
        guard !path.isEmpty else { return properties }
        let source = SettingsCatalog.environmentName(fileKey)
        let text: String
        do {
            text = try String(contentsOfFile: path, encoding: .utf8)
        } catch {
            throw SettingsError("\(source): \(path) cannot be read: \(error)")
        }
        // Any line end (a file written on Windows ends its lines with CR LF).
        let lines = text.split(whereSeparator: \.isNewline).filter {
            !$0.trimmingCharacters(in: .whitespaces).hasPrefix("#")
        }
        for (name, value) in try parseKafkaProperties(lines, source: source) {
            guard properties.updateValue(value, forKey: name) == nil else {
                throw SettingsError("\(source): \(name) is also in \(SettingsCatalog.environmentName(key))")
            }
        }
        return properties
    }

    static func parseKafkaProperties(_ pairs: [Substring], source: String) throws -> [String: String] {
        var properties: [String: String] = [:]
        for (number, pair) in pairs.enumerated() where !pair.allSatisfy(\.isWhitespace) {
            // Values may be secrets (`sasl.password`): errors name the setting, never a value.
            guard let equals = pair.firstIndex(of: "=") else {
                throw SettingsError("\(source): pair \(number + 1) is not name=value")
            }
            let name = pair[..<equals].trimmingCharacters(in: .whitespaces)
            let value = pair[pair.index(after: equals)...].trimmingCharacters(in: .whitespacesAndNewlines)
            guard !name.isEmpty,
                name.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "." || $0 == "_") })
            else { throw SettingsError("\(source): pair \(number + 1) does not start with a librdkafka setting name") }
            guard !KafkaConfiguration.reservedProperties.contains(name) else {
                throw SettingsError("\(source): \(name) is set by the relay and cannot be changed")
            }
            guard properties.updateValue(value, forKey: name) == nil else {
                throw SettingsError("\(source): \(name) is given twice")
            }
        }
        return properties
    }
}

public struct SettingsError: Error, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}

extension ConfigReader {
    /// The process environment, the one configuration source of the services.
    public static var environment: ConfigReader { ConfigReader(provider: EnvironmentVariablesProvider()) }
}
