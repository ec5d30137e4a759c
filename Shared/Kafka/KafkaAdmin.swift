import CRdKafka
import Foundation
import Synchronization

/// A topic as the relay wants it: its partitions, replication factor and topic-level
/// configuration (`min.insync.replicas`, `retention.ms`).
public struct TopicSpec: Sendable, Equatable {
    public var name: String
    public var partitions: Int
    public var replicationFactor: Int
    public var configs: [String: String]

    public init(name: String, partitions: Int, replicationFactor: Int, configs: [String: String] = [:]) {
        self.name = name
        self.partitions = partitions
        self.replicationFactor = replicationFactor
        self.configs = configs
    }
}

/// What `KafkaAdmin.create` did with one topic.
public enum TopicCreation: Sendable, Equatable {
    case created
    /// It was there already, with this many partitions (left as it is).
    case existed(partitions: Int)
    /// The broker refused it: librdkafka's error name and the broker's message.
    case refused(code: String, message: String)
}

/// Kafka's admin side, for the operator tool: lists the topics the cluster has and
/// creates the missing ones. Each call blocks a thread of its own (librdkafka's admin
/// API answers on a queue), never a Swift-concurrency worker.
public final class KafkaAdmin: Sendable {
    // The handle is only used by librdkafka's thread-safe calls.
    private let handle: HandleBox
    /// What librdkafka's error callback reported (a refused login, a failed handshake):
    /// the reason a request failed, which its error code alone does not say.
    private let errors = ErrorLog()

    public init(configuration: KafkaConfiguration) throws {
        let settings = configuration.settings(
            ["bootstrap.servers": configuration.bootstrapServers, "client.id": configuration.clientID],
            producer: true)
        let conf = try makeConf(settings)
        rd_kafka_conf_set_error_cb(conf, adminErrorCallback)
        rd_kafka_conf_set_opaque(conf, Unmanaged.passUnretained(errors).toOpaque())
        handle = HandleBox(try makeHandle(type: RD_KAFKA_PRODUCER, conf: conf))
    }

    deinit { rd_kafka_destroy(handle.pointer) }

    /// Whether the brokers can be reached with these settings, asked once within
    /// `timeout`: `.refused` when they answered but the login or the TLS handshake failed
    /// (a setting is wrong), `.unreachable` when nothing answered (they may come later).
    public func reachability(timeout: Duration) async -> KafkaReachability {
        let deadline = ContinuousClock.now + timeout
        var last = ""
        // Asked in short rounds: a refusal is reported within milliseconds, and needs no
        // waiting out the whole timeout.
        repeat {
            do {
                _ = try await topics(timeout: .seconds(1))
                return .reachable
            } catch {
                last = "\(error)"
            }
            let handle = handle
            let reported = await onDedicatedThread(name: "kafka-admin") {
                rd_kafka_poll(handle.pointer, 0)  // serves the error callback
                return self.errors.entries.withLock { $0 }
            }
            if let refusal = reported.first(where: \.isRefusal) { return .refused(refusal.text) }
            if let newest = reported.last { last = newest.text }
        } while ContinuousClock.now < deadline
        return .unreachable(last)
    }

    /// Every topic the cluster has, with its partition count (one metadata request for
    /// all topics: naming a topic could auto-create it on a broker that allows that).
    public func topics(timeout: Duration) async throws -> [String: Int] {
        let handle = handle
        let result: Result<[String: Int], KafkaError> = await onDedicatedThread(name: "kafka-admin") {
            var metadata: UnsafePointer<rd_kafka_metadata>?
            let rc = rd_kafka_metadata(handle.pointer, 1, nil, &metadata, milliseconds(timeout))
            defer { if let metadata { rd_kafka_metadata_destroy(metadata) } }
            guard rc == RD_KAFKA_RESP_ERR_NO_ERROR, let metadata else { return .failure(KafkaError.from(rc)) }
            var topics: [String: Int] = [:]
            for index in 0..<Int(metadata.pointee.topic_cnt) {
                let topic = metadata.pointee.topics[index]
                guard topic.err == RD_KAFKA_RESP_ERR_NO_ERROR, let name = topic.topic else { continue }
                topics[String(cString: name)] = Int(topic.partition_cnt)
            }
            return .success(topics)
        }
        return try result.get()
    }

    /// Creates the topics of `specs` that the cluster lacks; the others are reported as
    /// they are. Safe to run again: a topic that appeared meanwhile counts as existing.
    public func create(_ specs: [TopicSpec], timeout: Duration) async throws -> [String: TopicCreation] {
        let existing = try await topics(timeout: timeout)
        var outcome: [String: TopicCreation] = [:]
        var missing: [TopicSpec] = []
        for spec in specs {
            if let partitions = existing[spec.name] {
                outcome[spec.name] = .existed(partitions: partitions)
            } else {
                missing.append(spec)
            }
        }
        guard !missing.isEmpty else { return outcome }
        let handle = handle
        let wanted = missing
        let created: Result<[String: TopicCreation], KafkaError> = await onDedicatedThread(name: "kafka-admin") {
            Self.createTopics(handle.pointer, wanted, timeout: timeout)
        }
        for (name, result) in try created.get() {
            if case .refused(let code, _) = result, code == "TOPIC_ALREADY_EXISTS" {
                outcome[name] = .existed(partitions: existing[name] ?? 0)
            } else {
                outcome[name] = result
            }
        }
        return outcome
    }

    private static func createTopics(_ handle: OpaquePointer, _ specs: [TopicSpec], timeout: Duration)
        -> Result<[String: TopicCreation], KafkaError>
    {
        var errstr = [CChar](repeating: 0, count: 512)
        var newTopics: [OpaquePointer?] = []
        defer { for topic in newTopics { rd_kafka_NewTopic_destroy(topic) } }
        for spec in specs {
            guard
                let topic = rd_kafka_NewTopic_new(
                    spec.name, Int32(clamping: spec.partitions), Int32(clamping: spec.replicationFactor), &errstr,
                    errstr.count)
            else { return .failure(KafkaError(code: .configuration, message: "\(spec.name): \(cString(errstr))")) }
            newTopics.append(topic)
            for (name, value) in spec.configs.sorted(by: { $0.key < $1.key }) {
                let rc = rd_kafka_NewTopic_set_config(topic, name, value)
                guard rc == RD_KAFKA_RESP_ERR_NO_ERROR else { return .failure(KafkaError.from(rc)) }
            }
        }
        guard let options = rd_kafka_AdminOptions_new(handle, RD_KAFKA_ADMIN_OP_CREATETOPICS) else {
            return .failure(KafkaError(code: .configuration, message: "cannot allocate admin options"))
        }
        defer { rd_kafka_AdminOptions_destroy(options) }
        let timeoutMs = milliseconds(timeout)
        _ = rd_kafka_AdminOptions_set_request_timeout(options, timeoutMs, &errstr, errstr.count)
        _ = rd_kafka_AdminOptions_set_operation_timeout(options, timeoutMs, &errstr, errstr.count)
        guard let queue = rd_kafka_queue_new(handle) else {
            return .failure(KafkaError(code: .configuration, message: "cannot allocate a queue"))
        }
        defer { rd_kafka_queue_destroy(queue) }
        newTopics.withUnsafeMutableBufferPointer { buffer in
            rd_kafka_CreateTopics(handle, buffer.baseAddress, buffer.count, options, queue)
        }
        // The result arrives within the request timeout; a little more for the queue.
        guard let event = rd_kafka_queue_poll(queue, timeoutMs + 5000) else {
            return .failure(KafkaError(code: .timedOut, message: "no answer to CreateTopics", isRetriable: true))
        }
        defer { rd_kafka_event_destroy(event) }
        let eventError = rd_kafka_event_error(event)
        guard eventError == RD_KAFKA_RESP_ERR_NO_ERROR else {
            var error = KafkaError.from(eventError)
            if let text = rd_kafka_event_error_string(event) { error.message = String(cString: text) }
            return .failure(error)
        }
        guard let result = rd_kafka_event_CreateTopics_result(event) else {
            return .failure(KafkaError(code: .configuration, message: "CreateTopics answered with another event"))
        }
        var count = 0
        guard let results = rd_kafka_CreateTopics_result_topics(result, &count) else { return .success([:]) }
        var outcome: [String: TopicCreation] = [:]
        for index in 0..<count {
            guard let topic = results[index], let name = rd_kafka_topic_result_name(topic) else { continue }
            let rc = rd_kafka_topic_result_error(topic)
            if rc == RD_KAFKA_RESP_ERR_NO_ERROR {
                outcome[String(cString: name)] = .created
            } else {
                let message = rd_kafka_topic_result_error_string(topic).map { String(cString: $0) } ?? ""
                outcome[String(cString: name)] = .refused(
                    code: String(cString: rd_kafka_err2name(rc)),
                    message: message.isEmpty ? String(cString: rd_kafka_err2str(rc)) : message)
            }
        }
        return .success(outcome)
    }
}

/// What `KafkaAdmin.reachability` found.
public enum KafkaReachability: Sendable, Equatable {
    case reachable
    /// The brokers answered, and refused: the reason, as librdkafka gave it.
    case refused(String)
    case unreachable(String)
}

/// The errors librdkafka reported to a client, oldest first (at most 32 kept).
final class ErrorLog: Sendable {
    struct Entry: Sendable {
        var code: rd_kafka_resp_err_t
        var reason: String
        var text: String { "\(String(cString: rd_kafka_err2name(code))): \(reason)" }

        /// A failed login or TLS handshake, or a listener of another protocol: settings
        /// that are wrong, not a broker that is away.
        var isRefusal: Bool {
            switch code {
            case RD_KAFKA_RESP_ERR__AUTHENTICATION, RD_KAFKA_RESP_ERR__SSL,
                RD_KAFKA_RESP_ERR_SASL_AUTHENTICATION_FAILED, RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED,
                RD_KAFKA_RESP_ERR_CLUSTER_AUTHORIZATION_FAILED:
                return true
            default:
                let text = reason.lowercased()
                return text.contains("ssl handshake") || text.contains("security.protocol")
                    || text.contains("certificate") || text.contains("sasl")
            }
        }
    }

    let entries = Mutex<[Entry]>([])

    func add(_ entry: Entry) {
        entries.withLock { entries in
            if entries.count == 32 { entries.removeFirst() }
            entries.append(entry)
        }
    }
}

private let adminErrorCallback:
    @convention(c) (OpaquePointer?, Int32, UnsafePointer<CChar>?, UnsafeMutableRawPointer?) -> Void = {
        _, code, reason, opaque in
        guard let opaque else { return }
        let log = Unmanaged<ErrorLog>.fromOpaque(opaque).takeUnretainedValue()
        log.add(.init(code: rd_kafka_resp_err_t(code), reason: reason.map { String(cString: $0) } ?? ""))
    }
