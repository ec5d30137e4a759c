import CRdKafka

/// Connection settings shared by producers and consumers. `properties` passes any
/// further librdkafka setting through unchanged (see librdkafka's CONFIGURATION.md) to
/// both; `producerProperties` and `consumerProperties` to one kind only, after it.
public struct KafkaConfiguration: Sendable {
    /// `bootstrap.servers`, for example `127.0.0.1:9092`.
    public var bootstrapServers: String
    public var clientID: String
    public var properties: [String: String]
    public var producerProperties: [String: String] = [:]
    public var consumerProperties: [String: String] = [:]

    public init(bootstrapServers: String, clientID: String = "pushrelay", properties: [String: String] = [:]) {
        self.bootstrapServers = bootstrapServers
        self.clientID = clientID
        self.properties = properties
    }

    /// The librdkafka settings the relay's guarantees rest on: an operator's properties
    /// may not change them (the brokers have a setting of their own). Among them: where a
    /// group without offsets starts (`latest` would skip records), the assignor (the
    /// consumers assign eagerly in their rebalance callback), a static member id (replicas
    /// sharing one would fence each other), and the offset store.
    public static let reservedProperties: Set<String> = [
        "bootstrap.servers", "metadata.broker.list", "group.id", "enable.idempotence", "acks",
        "request.required.acks", "enable.auto.commit", "enable.auto.offset.store", "enable.partition.eof",
        "transactional.id", "isolation.level", "auto.offset.reset", "partition.assignment.strategy",
        "group.instance.id", "offset.store.method",
    ]

    /// `defaults`, then `properties`, then the properties of one kind of client.
    func settings(_ defaults: [String: String], producer: Bool) -> [String: String] {
        var settings = defaults
        settings.merge(properties) { _, new in new }
        settings.merge(producer ? producerProperties : consumerProperties) { _, new in new }
        return settings
    }
}

/// Builds a librdkafka configuration object; the caller owns the result until it is
/// handed to `rd_kafka_new`.
func makeConf(_ settings: [String: String]) throws(KafkaError) -> OpaquePointer {
    guard let conf = rd_kafka_conf_new() else {
        throw KafkaError(code: .configuration, message: "rd_kafka_conf_new failed")
    }
    var errstr = [CChar](repeating: 0, count: 512)
    for (key, value) in settings.sorted(by: { $0.key < $1.key }) {
        if rd_kafka_conf_set(conf, key, value, &errstr, errstr.count) != RD_KAFKA_CONF_OK {
            rd_kafka_conf_destroy(conf)
            throw KafkaError(code: .configuration, message: "\(key): \(cString(errstr))")
        }
    }
    return conf
}

func cString(_ buffer: [CChar]) -> String {
    buffer.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
}

/// Creates a client handle, taking ownership of `conf` (freed on failure too).
func makeHandle(type: rd_kafka_type_t, conf: OpaquePointer) throws(KafkaError) -> OpaquePointer {
    var errstr = [CChar](repeating: 0, count: 512)
    guard let handle = rd_kafka_new(type, conf, &errstr, errstr.count) else {
        rd_kafka_conf_destroy(conf)
        throw KafkaError(code: .configuration, message: cString(errstr))
    }
    return handle
}
