import Kafka
import Metrics
import PushModels

/// Every metric the stages export, with its name and labels, in one place. Records are
/// counted once the broker acknowledged them (`RecordPublisher.publish` counts what the
/// records it sent carry in `KafkaOutgoing.tally`), so a retried publish never counts
/// twice. Ingest's HTTP metrics come from Hummingbird's `MetricsMiddleware`
/// (`hb_requests`, `hb_request_duration`, `hb_request_errors`).
public enum RelayMetrics {
    /// Metric names.
    public enum Name {
        public static let recordsIn = "pushrelay_records_in_total"
        public static let recordsOut = "pushrelay_records_out_total"
        public static let recordsRejected = "pushrelay_records_rejected_total"
        public static let deliveries = "pushrelay_deliveries_total"
        public static let deadLetters = "pushrelay_dead_letters_total"
        public static let stageDuration = "pushrelay_stage_duration_seconds"
        public static let sendDuration = "pushrelay_send_duration_seconds"
        public static let sendAttempts = "pushrelay_send_attempts_total"
        public static let endToEnd = "pushrelay_end_to_end_seconds"
        public static let rateDeferred = "pushrelay_rate_deferred_total"
        public static let busyDeviceParked = "pushrelay_busy_device_parked_total"
        public static let ambiguousResends = "pushrelay_ambiguous_resends_total"
        public static let unreadableTokens = "pushrelay_unreadable_tokens_total"
        public static let unreadableBodies = "pushrelay_unreadable_bodies_total"
        public static let invalidations = "pushrelay_invalidations_total"
        public static let publishFailures = "pushrelay_ingest_publish_failures_total"
        public static let hookFailures = "pushrelay_feedback_hook_failures_total"
        public static let authFailures = "pushrelay_auth_failures_total"
        public static let authLockouts = "pushrelay_auth_lockouts_total"
        public static let idempotencyStoreFailures = "pushrelay_idempotency_store_failures_total"
        public static let malformedHTTP = "pushrelay_http_malformed_requests_total"
        public static let slowClients = "pushrelay_http_slow_clients_total"
    }

    /// Label names.
    public enum Label {
        public static let topic = "topic"
        public static let stage = "stage"
        public static let provider = "provider"
        public static let outcome = "outcome"
        public static let reason = "reason"
        public static let cause = "cause"
        public static let result = "result"
        public static let target = "target"
        public static let applied = "applied"
        public static let listener = "listener"
        public static let phase = "phase"
    }

    public static func recordsIn(topic: String) -> Counter {
        Counter(label: Name.recordsIn, dimensions: [(Label.topic, topic)])
    }

    public static func recordsOut(topic: String) -> Counter {
        Counter(label: Name.recordsOut, dimensions: [(Label.topic, topic)])
    }

    public static func recordsRejected(topic: String) -> Counter {
        Counter(label: Name.recordsRejected, dimensions: [(Label.topic, topic)])
    }

    public static func stageDuration(_ stage: String) -> Timer {
        Timer(label: Name.stageDuration, dimensions: [(Label.stage, stage)])
    }

    public static func sendDuration(provider: String) -> Timer {
        Timer(label: Name.sendDuration, dimensions: [(Label.provider, provider)])
    }

    public static func sendAttempts(provider: String, result: String) -> Counter {
        Counter(label: Name.sendAttempts, dimensions: [(Label.provider, provider), (Label.result, result)])
    }

    public static func endToEnd(provider: String) -> Timer {
        Timer(label: Name.endToEnd, dimensions: [(Label.provider, provider)])
    }

    public static func rateDeferred(target: String) -> Counter {
        Counter(label: Name.rateDeferred, dimensions: [(Label.target, target)])
    }

    /// Pushes set aside on a retry topic because their device's earlier pushes were
    /// still being sent and too many pushes already waited for busy devices.
    public static func busyDeviceParked(provider: String) -> Counter {
        Counter(label: Name.busyDeviceParked, dimensions: [(Label.provider, provider)])
    }

    public static func ambiguousResends(provider: String) -> Counter {
        Counter(label: Name.ambiguousResends, dimensions: [(Label.provider, provider)])
    }

    public static func unreadable(_ part: String, provider: String) -> Counter {
        Counter(
            label: part == "body" ? Name.unreadableBodies : Name.unreadableTokens,
            dimensions: [(Label.provider, provider)])
    }

    public static func invalidations(provider: String, applied: Bool) -> Counter {
        Counter(
            label: Name.invalidations,
            dimensions: [(Label.provider, provider), (Label.applied, applied ? "yes" : "no")])
    }

    public static var publishFailures: Counter { Counter(label: Name.publishFailures) }
    /// Failed pushes a server's feedback hook never took (after its retries).
    public static var hookFailures: Counter { Counter(label: Name.hookFailures) }
    public static var authFailures: Counter { Counter(label: Name.authFailures) }
    public static var authLockouts: Counter { Counter(label: Name.authLockouts) }
    public static var idempotencyStoreFailures: Counter { Counter(label: Name.idempotencyStoreFailures) }

    public static func malformedHTTP(listener: String) -> Counter {
        Counter(label: Name.malformedHTTP, dimensions: [(Label.listener, listener)])
    }

    public static func slowClients(listener: String, phase: String) -> Counter {
        Counter(label: Name.slowClients, dimensions: [(Label.listener, listener), (Label.phase, phase)])
    }

    /// The tally of an outcome record: `pushrelay_deliveries_total{outcome,provider,reason}`.
    public static func deliveryTally(_ record: DeliveryRecord) -> KafkaOutgoing.Tally {
        .init(
            label: Name.deliveries,
            dimensions: [
                (Label.outcome, record.outcome.rawValue), (Label.provider, record.provider?.rawValue ?? "none"),
                (Label.reason, record.reason?.name ?? ""),
            ])
    }

    /// Counts acknowledged records: per topic, and each record's tally.
    public static func acknowledged(_ records: [KafkaOutgoing]) {
        var perTopic: [String: Int] = [:]
        for record in records {
            perTopic[record.topic, default: 0] += 1
            if let tally = record.tally { Counter(label: tally.label, dimensions: tally.dimensions).increment() }
        }
        for (topic, count) in perTopic { recordsOut(topic: topic).increment(by: count) }
    }
}
