import CRdKafka
import Kafka

/// librdkafka's in-process mock Kafka cluster (rdkafka_mock.h): real Kafka protocol on
/// loopback ports, memory only. Used by the dev broker and the Kafka tests; see
/// docs/protocols.md §7 for its limits. Development only: no service links this module.
public final class MockCluster: Sendable {
    // Owned here, destroyed in deinit; librdkafka's handles are thread-safe.
    private nonisolated(unsafe) let handle: OpaquePointer
    private nonisolated(unsafe) let cluster: OpaquePointer

    /// The `bootstrap.servers` string clients connect to.
    public let bootstrapServers: String
    public let brokers: Int

    public init(brokers: Int) throws {
        guard (1...9).contains(brokers) else {
            throw KafkaError(code: .configuration, message: "a mock cluster has 1 to 9 brokers, not \(brokers)")
        }
        guard let conf = rd_kafka_conf_new() else {
            throw KafkaError(code: .configuration, message: "rd_kafka_conf_new failed")
        }
        var errstr = [CChar](repeating: 0, count: 512)
        guard rd_kafka_conf_set(conf, "log_level", "4", &errstr, errstr.count) == RD_KAFKA_CONF_OK else {
            rd_kafka_conf_destroy(conf)
            throw KafkaError(code: .configuration, message: Self.text(errstr))
        }
        // rd_kafka_new takes the configuration over on success only.
        guard let handle = rd_kafka_new(RD_KAFKA_PRODUCER, conf, &errstr, errstr.count) else {
            rd_kafka_conf_destroy(conf)
            throw KafkaError(code: .configuration, message: Self.text(errstr))
        }
        guard let cluster = rd_kafka_mock_cluster_new(handle, Int32(brokers)) else {
            rd_kafka_destroy(handle)
            throw KafkaError(code: .configuration, message: "rd_kafka_mock_cluster_new failed")
        }
        self.handle = handle
        self.cluster = cluster
        self.bootstrapServers = String(cString: rd_kafka_mock_cluster_bootstraps(cluster))
        self.brokers = brokers
    }

    private static func text(_ buffer: [CChar]) -> String {
        String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    deinit {
        rd_kafka_mock_cluster_destroy(cluster)
        rd_kafka_destroy(handle)
    }

    /// Takes every broker down (connections closed, new ones refused) or brings them back
    /// up: a broker outage, for the drills.
    public func setBrokers(up: Bool) {
        for id in 1...brokers {
            if up {
                rd_kafka_mock_broker_set_up(cluster, Int32(id))
            } else {
                rd_kafka_mock_broker_set_down(cluster, Int32(id))
            }
        }
    }

    /// Creates a topic (CreateTopics requests do not work against the mock cluster).
    public func createTopic(_ name: String, partitions: Int, replicationFactor: Int = 1) throws {
        guard (1...10_000).contains(partitions), (1...9).contains(replicationFactor) else {
            throw KafkaError(code: .configuration, message: "bad partition count or replication factor")
        }
        let rc = rd_kafka_mock_topic_create(cluster, name, Int32(partitions), Int32(replicationFactor))
        guard rc == RD_KAFKA_RESP_ERR_NO_ERROR else {
            throw KafkaError(code: .configuration, message: String(cString: rd_kafka_err2str(rc)))
        }
    }
}
