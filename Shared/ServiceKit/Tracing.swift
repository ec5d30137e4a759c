import Foundation
import Instrumentation
import Kafka
import Logging
import OTel
import PushModels
import ServiceContextModule
import ServiceLifecycle
import Synchronization
import Tracing

/// Distributed tracing: one notification is one trace across the four stages.
///
/// Off unless the standard OpenTelemetry variables ask for it (`RelayTracing.isRequested`):
/// then swift-otel exports spans with OTLP (`OTEL_EXPORTER_OTLP_PROTOCOL`: `grpc`,
/// `http/protobuf` or `http/json`; `OTEL_EXPORTER_OTLP_*ENDPOINT`, `OTEL_TRACES_SAMPLER*`,
/// `OTEL_SERVICE_NAME`, …), and every log line written inside a span carries its
/// `trace_id` and `span_id`. The W3C trace context (`traceparent`, `tracestate`) travels
/// in each record's Kafka headers, from ingest (which honours a request's own
/// `traceparent`) through the encryptor, the dispatcher and its retries, to feedback.
/// Spans name ids, providers, statuses and reasons only: never a token, key or content.
public enum RelayTracing {
    private static let enabled = Atomic<Bool>(false)
    /// How requests without a followed parent are sampled, when the relay decides it
    /// (`RootSampling`); nil: OpenTelemetry's sampler decides every span.
    private static let rootSampling = Mutex<RootSampling?>(nil)

    /// The standard samplers, decided before a request's span is started, so a request
    /// that is not traced costs no span at all (OpenTelemetry's own sampler would start
    /// one, not recording, with new random ids, for every request).
    struct RootSampling: Sendable, Equatable {
        /// A sampled or unsampled parent decides (`parentbased_*`).
        var followsParent: Bool
        /// The share of the other requests that are traced.
        var share: Double

        /// From `OTEL_TRACES_SAMPLER` and `OTEL_TRACES_SAMPLER_ARG` (default
        /// `parentbased_always_on`); nil for a sampler the relay leaves to OpenTelemetry
        /// (`jaeger_remote`, `xray`, …).
        init?(_ environment: [String: String]) {
            let name = (environment["OTEL_TRACES_SAMPLER"] ?? "").lowercased()
            let argument = environment["OTEL_TRACES_SAMPLER_ARG"].flatMap(Double.init).flatMap {
                (0...1).contains($0) ? $0 : nil
            }
            switch name {
            case "", "parentbased_always_on": (followsParent, share) = (true, 1)
            case "parentbased_always_off": (followsParent, share) = (true, 0)
            case "parentbased_traceidratio": (followsParent, share) = (true, argument ?? 1)
            case "always_on": (followsParent, share) = (false, 1)
            case "always_off": (followsParent, share) = (false, 0)
            case "traceidratio": (followsParent, share) = (false, argument ?? 1)
            default: return nil
            }
        }

        /// Whether a request with this `traceparent` (or none) is traced.
        func traces(parent: [UInt8]?, random: Double) -> Bool {
            if followsParent, let parent, parent.count == 55 { return RelayTracing.isSampled(parent) }
            return random < share
        }
    }

    /// What ingest does with a request's `traceparent` headers (`values`, as sent): keep
    /// one that is well formed (W3C: `00-<32 hex>-<16 hex>-<2 hex>`, lowercase, ids not
    /// all zero), and follow it when it says sampled, at most `maxSampledParentsPerSecond`
    /// a second per process (callers cannot turn every notification into a trace); drop
    /// anything else, so nothing malformed reaches the propagator. `traced`: whether the
    /// request starts a span.
    public static func requestSampling(traceparents values: [String], nowSeconds: Int64 = Wire.nowMillis() / 1000)
        -> (traced: Bool, keepParent: Bool)
    {
        guard isEnabled else { return (false, false) }
        let parent = values.count == 1 ? Array(values[0].utf8) : nil
        let valid = parent.map(isWellFormed) ?? false
        var keep = valid
        if valid, let parent, isSampled(parent), !sampledParents.withLock({ $0.take(nowSeconds: nowSeconds) }) {
            keep = false
        }
        guard let sampling = rootSampling.withLock({ $0 }) else { return (true, keep) }
        return (sampling.traces(parent: keep ? parent : nil, random: Double.random(in: 0..<1)), keep)
    }

    /// Sampled parents followed per second at most (see `requestSampling`).
    public static let maxSampledParentsPerSecond = 100
    private static let sampledParents = Mutex(SecondBudget(limit: maxSampledParentsPerSecond))

    struct SecondBudget {
        let limit: Int
        var second: Int64 = 0
        var used = 0

        mutating func take(nowSeconds: Int64) -> Bool {
            if nowSeconds != second { (second, used) = (nowSeconds, 0) }
            guard used < limit else { return false }
            used += 1
            return true
        }
    }

    /// A W3C `traceparent` of version 00, exactly.
    static func isWellFormed(_ header: [UInt8]) -> Bool {
        guard header.count == 55, header[0] == UInt8(ascii: "0"), header[1] == UInt8(ascii: "0"),
            header[2] == UInt8(ascii: "-"), header[35] == UInt8(ascii: "-"), header[52] == UInt8(ascii: "-")
        else { return false }
        let traceID = header[3..<35]
        let spanID = header[36..<52]
        let flags = header[53..<55]
        for part in [traceID, spanID, flags] where !part.allSatisfy({ hexValue($0) != nil }) { return false }
        return traceID.contains { $0 != UInt8(ascii: "0") } && spanID.contains { $0 != UInt8(ascii: "0") }
    }

    /// A tracer that exports somewhere is bootstrapped. While false, the stages start no
    /// span and read or write no trace header: tracing costs nothing when it is off.
    public static var isEnabled: Bool { enabled.load(ordering: .relaxed) }

    /// The standard variables ask for traces: `OTEL_TRACES_EXPORTER` names an exporter
    /// other than `none`, or an OTLP endpoint is set; and `OTEL_SDK_DISABLED` is not `true`.
    public static func isRequested(_ environment: [String: String]) -> Bool {
        if environment["OTEL_SDK_DISABLED"]?.lowercased() == "true" { return false }
        if let exporter = environment["OTEL_TRACES_EXPORTER"]?.lowercased(), !exporter.isEmpty {
            return exporter != "none"
        }
        return ["OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"].contains {
            !(environment[$0] ?? "").isEmpty
        }
    }

    /// Bootstraps the tracer when asked for (`isRequested`), named `pushrelay-<service>`
    /// unless `OTEL_SERVICE_NAME` says otherwise. Returns the exporter's service, to run
    /// in the process's service group (first, so it stops last and flushes what the
    /// others finished); nil when tracing is off.
    static func bootstrap(service: String, environment: [String: String]) throws -> (any Service)? {
        guard isRequested(environment) else { return nil }
        var configuration = OTel.Configuration.default
        configuration.serviceName = "pushrelay-\(service)"
        configuration.logs.enabled = false
        configuration.metrics.enabled = false
        configuration.propagators = [.traceContext]
        // swift-otel's own log: errors only (its warnings print whole carriers, such as a
        // request's headers with their credentials).
        var diagnostics = Logger(label: "swift-otel")
        diagnostics.logLevel = .error
        configuration.diagnosticLogger = .custom(diagnostics)
        // The relay samples each request itself (`requestSampling`); every span it then
        // starts is recorded: OpenTelemetry's sampler always says yes.
        let sampling = RootSampling(environment)
        if let sampling {
            configuration.traces.sampler = sampling.followsParent ? .parentBasedAlwaysOn : .alwaysOn
            unsetenv("OTEL_TRACES_SAMPLER")
            unsetenv("OTEL_TRACES_SAMPLER_ARG")
        }
        rootSampling.withLock { $0 = sampling }
        let backend = try OTel.makeTracingBackend(configuration: configuration)
        InstrumentationSystem.bootstrap(backend.factory)
        enabled.store(true, ordering: .relaxed)
        return backend.service
    }

    /// The trace context a record carries in its headers, when it carries a sampled one.
    /// A record without one (or not sampled) is not traced further: no span is started
    /// for it and nothing is stamped on what it leads to, so an unsampled notification
    /// costs the stages after ingest one header lookup.
    public static func context(of record: KafkaRecord) -> ServiceContext? {
        guard isEnabled, let header = record.header(traceparent), isSampled(header) else { return nil }
        var context = ServiceContext.topLevel
        InstrumentationSystem.instrument.extract(record.headers, into: &context, using: KafkaHeaderExtractor())
        return context
    }

    /// A W3C `traceparent` (`00-<trace id>-<parent id>-<flags>`) whose flags say sampled.
    static func isSampled(_ header: [UInt8]) -> Bool {
        guard header.count == 55, let flags = hexValue(header[54]) else { return false }
        return flags & 1 == 1
    }

    private static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
        default: nil
        }
    }

    /// A record's trace headers as they are, to carry on to a record it leads to (none
    /// when it is not traced).
    public static func traceHeaders(of record: KafkaRecord) -> [(name: String, value: [UInt8])] {
        guard isEnabled, let header = record.header(traceparent), isSampled(header) else { return [] }
        return record.headers.filter { $0.name == traceparent || $0.name == tracestate }
    }

    /// Writes `context` (its span's trace context) into the headers of those `messages`
    /// that carry none yet (a message built in a span of its own keeps that span's). A
    /// context that is not sampled is not written: the stages after it start no span.
    /// Nothing when tracing is off.
    public static func stamp(_ messages: inout [KafkaOutgoing], with context: ServiceContext? = .current) {
        guard isEnabled, let context, !messages.isEmpty else { return }
        var headers: [(name: String, value: [UInt8])] = []
        InstrumentationSystem.instrument.inject(context, into: &headers, using: KafkaHeaderInjector())
        guard let parent = headers.first(where: { $0.name == traceparent }), isSampled(parent.value) else { return }
        for index in messages.indices where !messages[index].headers.contains(where: { $0.name == traceparent }) {
            messages[index].headers += headers
        }
    }

    /// The W3C trace context headers.
    static let traceparent = "traceparent"
    static let tracestate = "tracestate"

    /// Runs `body` in a consumer span `name`, child of the span `record` carries, with the
    /// span's context current (so its log lines carry the trace id). When the record is
    /// not traced, just runs `body` with no span.
    public static func withRecordSpan<T>(
        _ name: String, of record: KafkaRecord, _ body: (_ span: (any Span)?) async throws -> T
    ) async rethrows -> T {
        guard let parent = context(of: record) else { return try await body(nil) }
        return try await withSpan(name, context: parent, ofKind: .consumer) { span in
            try await body(span)
        }
    }

    /// Starts a span `name` for `record`, child of the span it carries (for work several
    /// records share a task for, such as one batch): the caller ends it. Nil when the
    /// record is not traced.
    public static func startSpan(_ name: String, of record: KafkaRecord) -> (any Span)? {
        guard let parent = context(of: record) else { return nil }
        return Tracing.startSpan(name, context: parent, ofKind: .consumer)
    }

    /// Runs `body` with `span`'s context current (its child spans and log lines belong to
    /// it); just runs `body` when there is no span.
    public static func within<T>(_ span: (any Span)?, _ body: () async throws -> T) async rethrows -> T {
        guard let span else { return try await body() }
        return try await ServiceContext.withValue(span.context) { try await body() }
    }

    /// Runs `body` in a span `name`, child of the current one, with its context current;
    /// without a current span (the work is not traced), just runs `body`.
    public static func withChildSpan<T>(
        _ name: String, _ body: (_ span: (any Span)?) throws -> T
    ) rethrows -> T {
        guard isEnabled, ServiceContext.current != nil else { return try body(nil) }
        return try withSpan(name, ofKind: .internal) { span in try body(span) }
    }

    /// The logging metadata of the current span (`trace_id`, `span_id`), when tracing is on.
    static var loggingMetadataProvider: Logger.MetadataProvider { OTel.makeLoggingMetadataProvider() }
}

/// Span attribute names, in one place (OpenTelemetry's where one fits).
public enum SpanKey {
    public static let notificationID = "pushrelay.notification_id"
    public static let realm = "pushrelay.realm_uuid"
    public static let deviceID = "pushrelay.device_id"
    public static let devices = "pushrelay.devices"
    public static let provider = "pushrelay.provider"
    public static let attempt = "pushrelay.attempt"
    public static let outcome = "pushrelay.outcome"
    public static let reason = "pushrelay.reason"
    public static let httpStatus = "http.response.status_code"
    public static let topic = "messaging.destination.name"
    public static let partition = "messaging.destination.partition.id"
    public static let offset = "messaging.kafka.offset"
    public static let messagingSystem = "messaging.system"
}

extension Span {
    /// Where the record a span handles was on its topic.
    public func describe(_ record: KafkaRecord) {
        attributes[SpanKey.messagingSystem] = "kafka"
        attributes[SpanKey.topic] = record.topic
        attributes[SpanKey.partition] = "\(record.partition)"
        attributes[SpanKey.offset] = record.offset
    }
}

/// Writes trace headers into a Kafka record's headers (replacing any of the same name).
struct KafkaHeaderInjector: Injector {
    func inject(_ value: String, forKey key: String, into carrier: inout [(name: String, value: [UInt8])]) {
        carrier.removeAll { $0.name == key }
        carrier.append((key, Array(value.utf8)))
    }
}

/// Reads trace headers from a Kafka record's headers.
struct KafkaHeaderExtractor: Extractor {
    func extract(key: String, from carrier: [(name: String, value: [UInt8])]) -> String? {
        carrier.first { $0.name == key }.map { String(decoding: $0.value, as: UTF8.self) }
    }
}
