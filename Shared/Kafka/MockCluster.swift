import CRdKafka

/// librdkafka's in-process mock Kafka cluster (rdkafka_mock.h): real Kafka protocol on
/// loopback ports, memory only. Used by the dev broker; see docs/wire.md §7 for its limits.
public final class MockCluster: Sendable {
    private let handle: HandleBox
    private let cluster: HandleBox

    /// The `bootstrap.servers` string clients connect to.
    public let bootstrapServers: String

    public init(brokers: Int) throws {
        let conf = try makeConf(["log_level": "4"])
        let handle = try makeHandle(type: RD_KAFKA_PRODUCER, conf: conf)
        guard let cluster = rd_kafka_mock_cluster_new(handle, Int32(brokers)) else {
            rd_kafka_destroy(handle)
            throw KafkaError(code: .configuration, message: "rd_kafka_mock_cluster_new failed")
        }
        self.handle = HandleBox(handle)
        self.cluster = HandleBox(cluster)
        self.bootstrapServers = String(cString: rd_kafka_mock_cluster_bootstraps(cluster))
    }

    deinit {
        rd_kafka_mock_cluster_destroy(cluster.pointer)
        rd_kafka_destroy(handle.pointer)
    }

    /// Creates a topic (CreateTopics requests do not work against the mock cluster).
    public func createTopic(_ name: String, partitions: Int, replicationFactor: Int = 1) throws {
        let rc = rd_kafka_mock_topic_create(cluster.pointer, name, Int32(partitions), Int32(replicationFactor))
        guard rc == RD_KAFKA_RESP_ERR_NO_ERROR else { throw KafkaError.from(rc) }
    }
}
