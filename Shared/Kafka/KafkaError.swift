import CRdKafka

/// A Kafka failure with librdkafka's error name and text. `isRetriable` marks errors
/// that go away by waiting (queue full, broker down, timeouts).
public struct KafkaError: Error, Sendable, CustomStringConvertible {
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        public let name: String
        public var description: String { name }

        public static let queueFull = Code(name: "_QUEUE_FULL")
        public static let configuration = Code(name: "CONFIGURATION")
        public static let closed = Code(name: "CLOSED")
        public static let timedOut = Code(name: "_TIMED_OUT")
    }

    public var code: Code
    public var message: String
    public var isRetriable: Bool
    public var file: String
    public var line: Int

    public init(
        code: Code, message: String, isRetriable: Bool = false, file: String = #fileID, line: Int = #line
    ) {
        self.code = code
        self.message = message
        self.isRetriable = isRetriable
        self.file = file
        self.line = line
    }

    public var description: String { "kafka \(code): \(message)" }

    /// The one place librdkafka response codes are translated.
    static func from(
        _ err: rd_kafka_resp_err_t, file: String = #fileID, line: Int = #line
    ) -> KafkaError {
        let name = String(cString: rd_kafka_err2name(err))
        let text = String(cString: rd_kafka_err2str(err))
        let retriable: Bool =
            switch err {
            case RD_KAFKA_RESP_ERR__QUEUE_FULL, RD_KAFKA_RESP_ERR__MSG_TIMED_OUT, RD_KAFKA_RESP_ERR__TRANSPORT,
                RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN, RD_KAFKA_RESP_ERR__TIMED_OUT,
                RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT, RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS,
                RD_KAFKA_RESP_ERR_LEADER_NOT_AVAILABLE, RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION:
                true
            default:
                false
            }
        return KafkaError(code: Code(name: name), message: text, isRetriable: retriable, file: file, line: line)
    }
}
