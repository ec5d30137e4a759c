import Kafka
import Metrics
import RedisClient
import ServiceLifecycle

/// Gauges sampled every `interval` while the process runs: whether Kafka and Redis
/// answer (`pushrelay_dependency_up{dependency}`, 1 or 0), and each consumer group's
/// lag on the partitions this process holds (`pushrelay_consumer_lag_records{group,topic}`).
/// The alert rules in `deploy/observability/alerts.yml` read both.
public struct HealthGauges: Service {
    let consumers: [KafkaConsumer]
    let kafka: @Sendable () -> Bool
    let redis: RedisClient?
    let interval: Duration

    public init(
        consumers: [KafkaConsumer], kafka: @escaping @Sendable () -> Bool, redis: RedisClient?,
        interval: Duration = .seconds(15)
    ) {
        self.consumers = consumers
        self.kafka = kafka
        self.redis = redis
        self.interval = interval
    }

    public func run() async throws {
        // Ends quietly at shutdown: a sampler is no reason for the process to fail.
        await cancelWhenGracefulShutdown {
            var reported: [String: Set<String>] = [:]
            while !Task.isCancelled {
                await sample(reported: &reported)
                try? await Task.sleep(for: interval)
            }
        }
    }

    /// `reported`: per group, the topics given a lag before; one no longer held reads 0.
    func sample(reported: inout [String: Set<String>]) async {
        let kafkaUp = await offThePool(kafka)
        RelayMetrics.dependencyUp("kafka").record(kafkaUp ? 1 : 0)
        if let redis { RelayMetrics.dependencyUp("redis").record(await redis.ping() ? 1 : 0) }
        for consumer in consumers {
            guard let lag = await consumer.lag() else { continue }
            let group = consumer.groupID
            for (topic, records) in lag { RelayMetrics.consumerLag(group: group, topic: topic).record(records) }
            for topic in reported[group, default: []] where lag[topic] == nil {
                RelayMetrics.consumerLag(group: group, topic: topic).record(0)
            }
            // A topic no longer held is zeroed once; its gauge then stays at 0.
            reported[group] = Set(lag.keys)
        }
    }
}
