import Kafka
import Metrics
import PushModels

/// Every metric the stages export, with its name and labels, in one place. Records are
/// counted once the broker acknowledged them (`RecordPublisher.publish` counts what the
/// records it sent carry in `KafkaOutgoing.tally`), so a retried publish never counts
/// twice. Ingest's HTTP metrics come from Hummingbird's `MetricsMiddleware`
/// (`hb_requests`, `http_server_request_duration`, `hb_request_errors`).
/// docs/operations.md, "Metrics", lists every series; the dashboard and alert rules in `deploy/observability/`
/// read them (`ObservabilityTests` checks each one they query is exported).
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
        public static let consumerLag = "pushrelay_consumer_lag_records"
        public static let dependencyUp = "pushrelay_dependency_up"
        public static let tenantRequests = "pushrelay_tenant_requests_total"
        public static let statusWaku = "pushrelay_status_waku_messages_total"
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
        public static let group = "group"
        public static let dependency = "dependency"
        public static let tenant = "tenant"
        public static let api = "api"
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

    /// Provider answers: `result` (sent, invalid_token, retry, failed) and the provider's
    /// reason (empty for sent), a bounded set per provider.
    public static func sendAttempts(provider: String, result: String, reason: String) -> Counter {
        Counter(
            label: Name.sendAttempts,
            dimensions: [(Label.provider, provider), (Label.result, result), (Label.reason, reason)])
    }

    /// Records of `topic` its consumer group has not committed, on this process's partitions.
    public static func consumerLag(group: String, topic: String) -> Gauge {
        Gauge(label: Name.consumerLag, dimensions: [(Label.group, group), (Label.topic, topic)])
    }

    /// 1 while `dependency` (kafka, redis) answers, else 0.
    public static func dependencyUp(_ dependency: String) -> Gauge {
        Gauge(label: Name.dependencyUp, dimensions: [(Label.dependency, dependency)])
    }

    /// Authenticated API requests per tenant (`TenantLabels` bounds the label's values).
    public static func tenantRequests(tenant: String, api: String) -> Counter {
        Counter(label: Name.tenantRequests, dimensions: [(Label.tenant, tenant), (Label.api, api)])
    }

    public static func endToEnd(provider: String) -> Timer {
        Timer(label: Name.endToEnd, dimensions: [(Label.provider, provider)])
    }

    /// Waku messages the Status push server took from its node, by what became of them
    /// (`answered`, `duplicate`, `undecryptable`, `unsigned`, `malformed`, `rate_limited`,
    /// `failed`), and answers it could not publish (`publish_failed`).
    public static func statusWaku(_ result: String) -> Counter {
        Counter(label: Name.statusWaku, dimensions: [(Label.result, result)])
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

    /// Creates, at zero, the series a stage's alerts and dashboard read before anything
    /// happened: a counter that first appears at its first increment hides that
    /// increment from `rate()`, and an absent series reads as "no data". Labels are the
    /// known ones (the configured providers, every dead-letter cause).
    public static func prepare(dispatcherProviders providers: [String]) {
        for cause in ["expired", "rejected", "attempts_exhausted"] {
            _ = Counter(label: Name.deadLetters, dimensions: [(Label.cause, cause)])
        }
        for provider in providers {
            _ = busyDeviceParked(provider: provider)
            _ = ambiguousResends(provider: provider)
            _ = sendAttempts(provider: provider, result: "sent", reason: "")
            _ = sendDuration(provider: provider)
            _ = endToEnd(provider: provider)
            if provider == "fcm" || provider == "hms" { _ = rateDeferred(target: provider) }
        }
    }

    /// See `prepare(dispatcherProviders:)`: feedback's invalidations, per provider.
    public static func prepare(feedbackProviders providers: [String]) {
        for provider in providers {
            _ = invalidations(provider: provider, applied: true)
            _ = invalidations(provider: provider, applied: false)
        }
    }

    /// A value from outside (a provider's reason) as a label value: itself when it is a
    /// short word (letters, digits, `_.-`, at most 48), else `other`, so one odd answer
    /// cannot add series without bound.
    public static func labelValue(_ value: String) -> String {
        guard !value.isEmpty, value.utf8.count <= 48,
            value.utf8.allSatisfy({ byte in
                (byte >= 0x30 && byte <= 0x39) || (byte >= 0x41 && byte <= 0x5A) || (byte >= 0x61 && byte <= 0x7A)
                    || byte == 0x5F || byte == 0x2E || byte == 0x2D
            })
        else { return "other" }
        return value
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
