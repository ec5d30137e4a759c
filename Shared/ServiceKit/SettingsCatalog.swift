import Foundation
import LogKeys
import Logging
import PushModels

/// Every setting the services read, with the values that make sense for it. Each
/// executable checks its environment against this table before it reads anything, so
/// a value that makes no sense stops the process at start with a message naming the
/// variable, instead of being replaced by a default without a word.
///
/// swift-configuration's `config.int(forKey:default:)` answers the default for a value
/// it cannot read; after this check every value it reads is known to be valid.
public enum SettingsCatalog {
    public enum Kind: Sendable {
        case int(ClosedRange<Int>)
        case double(ClosedRange<Double>)
        /// Free text of at most 4,096 bytes without control characters.
        case text
        /// Text that is a secret (a password): checked like `text`, never quoted in a message.
        case secret
        /// A file path (read where used; a missing file fails there, at start).
        case path
        case oneOf([String])
        /// A duration list such as `5s,1m,10m`.
        case delays
        /// A Kafka topic name or prefix: ASCII letters, digits, `.`, `_`, `-`; 1 to 200 bytes.
        case topic
        case bool
        /// An HTTP header field name (RFC 9110 token), or empty.
        case headerName
    }

    /// The settings every service may read (keys as written in code; the environment
    /// variable is the key upper-cased with `.` as `_`).
    public static let entries: [String: Kind] = [
        "pushrelay.kafka.brokers": .text,
        "pushrelay.kafka.brokers.file": .path,
        // Properties may hold `sasl.password`: never quoted.
        "pushrelay.kafka.properties": .secret,
        "pushrelay.kafka.properties.file": .path,
        "pushrelay.kafka.producer.properties": .secret,
        "pushrelay.kafka.consumer.properties": .secret,
        "pushrelay.kafka.security.protocol": .oneOf(["plaintext", "ssl", "sasl_plaintext", "sasl_ssl"]),
        "pushrelay.kafka.sasl.mechanism": .oneOf(["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]),
        "pushrelay.kafka.sasl.username": .text,
        "pushrelay.kafka.sasl.password.file": .path,
        "pushrelay.kafka.tls.ca.file": .path,
        "pushrelay.kafka.tls.cert.file": .path,
        "pushrelay.kafka.tls.key.file": .path,
        "pushrelay.kafka.tls.verify": .bool,
        "pushrelay.redis.host": .text,
        "pushrelay.redis.port": .int(1...65535),
        "pushrelay.redis.connections": .int(1...256),
        "pushrelay.redis.timeout.ms": .int(1...600_000),
        "pushrelay.redis.prefix": .topic,
        "pushrelay.redis.cluster": .bool,
        "pushrelay.redis.cluster.seeds": .text,
        "pushrelay.redis.username": .text,
        "pushrelay.redis.password": .secret,
        "pushrelay.redis.password.file": .path,
        "pushrelay.redis.tls": .bool,
        "pushrelay.redis.tls.ca.file": .path,
        "pushrelay.redis.tls.cert.file": .path,
        "pushrelay.redis.tls.key.file": .path,
        "pushrelay.redis.tls.server.name": .text,
        "pushrelay.redis.tls.verify": .bool,
        "pushrelay.topic.requests": .topic,
        "pushrelay.topic.outbound": .topic,
        "pushrelay.topic.feedback": .topic,
        "pushrelay.topic.deliveries": .topic,
        "pushrelay.topic.deadletter": .topic,
        "pushrelay.topic.hooks": .topic,
        "pushrelay.topic.retry.prefix": .topic,
        // How `pushrelay-admin topics create` makes the topics.
        "pushrelay.topic.partitions": .int(1...10_000),
        "pushrelay.topic.replication.factor": .int(1...32),
        "pushrelay.topic.min.insync.replicas": .int(1...32),
        "pushrelay.topic.retention.ms": .int(60_000...(3650 * 86_400_000)),
        "pushrelay.retry.delays": .delays,
        "pushrelay.retry.max.attempts": .int(1...100),
        "pushrelay.retry.jitter": .double(0...0.9),
        "pushrelay.http.host": .text,
        "pushrelay.http.port": .int(0...65535),
        "pushrelay.ops.host": .text,
        "pushrelay.ops.port": .int(0...65535),
        "pushrelay.http.max.connections": .int(1...1_000_000),
        "pushrelay.http.header.timeout.ms": .int(100...600_000),
        "pushrelay.http.body.timeout.ms": .int(100...600_000),
        "pushrelay.http.idle.timeout.ms": .int(100...3_600_000),
        "pushrelay.http.max.body.bytes": .int(1024...(64 << 20)),
        "pushrelay.http.max.analytics.body.bytes": .int(65536...(256 << 20)),
        "pushrelay.http.client.ip.header": .headerName,
        "pushrelay.log.level": .oneOf(Logger.Level.allCases.map(\.rawValue)),
        "pushrelay.shutdown.timeout.ms": .int(1000...600_000),
        "pushrelay.shutdown.grace.seconds": .int(10...3600),
        "pushrelay.shutdown.prestop.seconds": .int(0...600),
        // Read by `ServiceRuntime.install()` before anything else; catalogued so they are checked.
        "pushrelay.executor": .oneOf(["loops", "pool"]),
        "pushrelay.event.loops": .int(1...256),
        "pushrelay.malloc.arenas": .int(1...64),
        "pushrelay.pipeline.keys.file": .path,
        "pushrelay.bouncer.keys.file": .path,
        "pushrelay.storage.keys.file": .path,
        "pushrelay.apikey.pepper.file": .path,
        "pushrelay.ratelimit.requests": .int(1...1_000_000_000),
        "pushrelay.ratelimit.window.seconds": .int(1...86_400),
        "pushrelay.auth.failures.max": .int(1...1_000_000),
        "pushrelay.auth.failures.window.seconds": .int(1...86_400),
        "pushrelay.server.registration": .oneOf(["open", "closed"]),
        "pushrelay.server.registrations.max": .int(1...1_000_000),
        "pushrelay.server.registrations.window.seconds": .int(1...86_400 * 7),
        "pushrelay.max.plaintext.bytes": .int(64...3500),
        "pushrelay.notify.max.device.ids": .int(1...10_000),
        "pushrelay.device.max.push.keys": .int(1...16),
        "pushrelay.server.max.realms": .int(1...10_000_000),
        "pushrelay.server.max.devices": .int(1...1_000_000_000),
        "pushrelay.notify.publish.timeout.ms": .int(100...120_000),
        "pushrelay.idempotency.ttl.seconds": .int(60...(7 * 86_400)),
        "pushrelay.notification.ttl.seconds": .int(0...2_419_200),
        "pushrelay.encryptor.group": .topic,
        "pushrelay.encryptor.concurrency": .int(1...10_000),
        "pushrelay.encryptor.batch": .int(1...4096),
        "pushrelay.dispatcher.group": .topic,
        "pushrelay.dispatcher.concurrency": .int(1...10_000),
        "pushrelay.feedback.group": .topic,
        "pushrelay.feedback.concurrency": .int(1...10_000),
        "pushrelay.feedback.reports.group": .topic,
        "pushrelay.feedback.reports.concurrency": .int(1...10_000),
        "pushrelay.feedback.hooks.group": .topic,
        "pushrelay.feedback.hooks.concurrency": .int(1...10_000),
        "pushrelay.dispatcher.retry.group": .topic,
        "pushrelay.dispatcher.retry.concurrency": .int(1...10_000),
        "pushrelay.dispatcher.dedupe.ttl.seconds": .int(3600...(30 * 86_400)),
        "pushrelay.dispatcher.provider.concurrency": .int(1...100_000),
        "pushrelay.dispatcher.rate.ceiling": .double(1...1_000_000),
        "pushrelay.dispatcher.rate.floor": .double(0.01...1_000_000),
        "pushrelay.dispatcher.rate.max.wait.ms": .int(0...60_000),
        "pushrelay.dispatcher.busy.device.queue": .int(1...100_000),
        "pushrelay.dispatcher.retry.busy.device.queue": .int(1...100_000),
        "pushrelay.dispatcher.busy.device.park.after.ms": .int(0...600_000),
        "pushrelay.apns.url": .text,
        "pushrelay.apns.team.id": .text,
        "pushrelay.apns.key.id": .text,
        "pushrelay.apns.key.file": .path,
        "pushrelay.apns.ca.file": .path,
        "pushrelay.apns.connections": .int(1...64),
        "pushrelay.fcm.connections": .int(1...64),
        "pushrelay.fcm.url": .text,
        "pushrelay.fcm.service.account.file": .path,
        "pushrelay.fcm.project.id": .text,
        "pushrelay.fcm.ca.file": .path,
        "pushrelay.gorush.max.notifications": .int(1...10_000),
        "pushrelay.gorush.max.tokens": .int(0...10_000_000),
        "pushrelay.gorush.max.body.bytes": .int(1024...256 * 1024 * 1024),
        "pushrelay.zulip.transfer.verifications.per.day": .int(0...100_000),
        "pushrelay.zulip.transfer.allowed.hosts": .text,
        "pushrelay.zulip.transfer.ca.file": .path,
        "pushrelay.gorush.apns.topic": .text,
        "pushrelay.gorush.sync": .bool,
        "pushrelay.gorush.sync.timeout.ms": .int(100...600_000),
        "pushrelay.status.enabled": .bool,
        "pushrelay.status.key.file": .path,
        "pushrelay.status.realm.uuid": .text,
        "pushrelay.status.max.targets": .int(1...10_000),
        "pushrelay.status.apns.topics": .text,
        "pushrelay.status.requests.max": .int(1...100_000_000),
        "pushrelay.status.requests.window.seconds": .int(1...86_400),
        "pushrelay.feedback.hook.timeout.ms": .int(100...600_000),
        "pushrelay.feedback.hook.attempts": .int(1...20),
        "pushrelay.feedback.hook.allowed.hosts": .text,
        "pushrelay.webpush.vapid.key.file": .path,
        "pushrelay.webpush.vapid.subject": .text,
        "pushrelay.simplepush.enabled": .bool,
        "pushrelay.push.endpoint.allowed.hosts": .text,
        "pushrelay.push.endpoint.ca.file": .path,
        "pushrelay.push.endpoint.connections": .int(1...64),
        "pushrelay.push.endpoint.timeout.ms": .int(100...120_000),
        "pushrelay.hms.url": .text,
        "pushrelay.hms.token.url": .text,
        "pushrelay.hms.app.id": .text,
        "pushrelay.hms.client.id": .text,
        "pushrelay.hms.client.secret.file": .path,
        "pushrelay.hms.ca.file": .path,
        "pushrelay.wns.token.url": .text,
        "pushrelay.wns.client.id": .text,
        "pushrelay.wns.client.secret.file": .path,
        "pushrelay.wns.allowed.hosts": .text,
        "pushrelay.wns.ca.file": .path,
    ]

    /// Variables that belong to the dev tools and the test harness, not to a service.
    static let toolPrefixes = ["PUSHRELAY_FAKES_", "PUSHRELAY_DEVBROKER_", "PUSHRELAY_FUZZ_", "PUSHRELAY_BENCH_"]
    /// Not settings: the harness's, and the image's build revision (`BuildInfo`).
    static let toolVariables: Set<String> = [
        "PUSHRELAY_BIN_DIR", "PUSHRELAY_EXIT_WITH_PARENT", "PUSHRELAY_BUILD_REVISION",
    ]

    public static func environmentName(_ key: String) -> String {
        key.uppercased().replacingOccurrences(of: ".", with: "_")
    }

    /// Problems with the given environment: one line per variable whose value makes no
    /// sense. Unknown `PUSHRELAY_` variables are returned separately (likely typos).
    public static func check(_ environment: [String: String]) -> (errors: [String], unknown: [String]) {
        var byName: [String: (String, Kind)] = [:]
        for (key, kind) in entries { byName[environmentName(key)] = (key, kind) }
        var errors: [String] = []
        var unknown: [String] = []
        for (name, value) in environment.sorted(by: { $0.key < $1.key }) where name.hasPrefix("PUSHRELAY_") {
            guard let (_, kind) = byName[name] else {
                if !toolVariables.contains(name) && !toolPrefixes.contains(where: name.hasPrefix) {
                    unknown.append(name)
                }
                continue
            }
            if let problem = problem(value, kind) { errors.append("\(name)=\(shown(value, kind)): \(problem)") }
        }
        return (errors, unknown)
    }

    /// Checks the process environment; throws a `SettingsError` listing every bad value.
    public static func validateEnvironment(logger: Logger? = nil) throws {
        let (errors, unknown) = check(ProcessInfo.processInfo.environment)
        for name in unknown {
            logger?.warning("unknown setting ignored (a typo?)", metadata: [LogKey.variable: "\(name)"])
        }
        guard errors.isEmpty else {
            throw SettingsError("invalid configuration:\n  " + errors.joined(separator: "\n  "))
        }
    }

    public static func problem(_ value: String, _ kind: Kind) -> String? {
        // Checked as given, unvalue: swift-configuration reads "5 " as no number at all
        // and would fall back to its default.
        switch kind {
        case .headerName:
            let token = Set("!#$%&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz".utf8)
            return value.utf8.count <= 256 && value.utf8.allSatisfy(token.contains)
                ? nil : "must be an HTTP header name (letters, digits and !#$%&'*+-.^_`|~)"
        case .int(let range):
            guard let n = Int(value) else { return "must be a whole number" }
            return range.contains(n) ? nil : "must be between \(range.lowerBound) and \(range.upperBound)"
        case .double(let range):
            guard let d = Double(value), d.isFinite else { return "must be a number" }
            return range.contains(d) ? nil : "must be between \(range.lowerBound) and \(range.upperBound)"
        case .text, .path, .secret:
            guard value.utf8.count <= 4096 else { return "is longer than 4096 bytes" }
            return value.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7f })
                ? "must not contain control characters" : nil
        case .oneOf(let allowed):
            return allowed.contains(value) ? nil : "must be one of \(allowed.joined(separator: ", "))"
        case .delays:
            do { _ = try RetrySchedule.parseDelays(value) } catch { return "\(error)" }
            return nil
        case .topic:
            let ok =
                !value.isEmpty && value.utf8.count <= 200
                && value.utf8.allSatisfy { b in
                    (0x30...0x39).contains(b) || (0x41...0x5a).contains(b) || (0x61...0x7a).contains(b)
                        || b == UInt8(ascii: ".") || b == UInt8(ascii: "_") || b == UInt8(ascii: "-")
                        || b == UInt8(ascii: ":")
                }
            return ok ? nil : "must be 1 to 200 ASCII letters, digits, '.', '_', '-' or ':'"
        case .bool:
            return ["true", "false", "1", "0"].contains(value.lowercased()) ? nil : "must be true or false"
        }
    }

    /// A value as an error message may quote it: a secret never.
    static func shown(_ value: String, _ kind: Kind) -> String {
        if case .secret = kind { return "<redacted>" }
        return value.utf8.count > 40 ? "\(value.prefix(40))…" : value
    }
}
