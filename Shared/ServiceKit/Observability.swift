import Foundation
import Logging
import Metrics
import Prometheus
import ServiceLifecycle
import Synchronization

/// Logging, metrics and tracing for one process: swift-log to stderr, swift-metrics
/// into a Prometheus registry served at `/metrics`, and, when the OpenTelemetry
/// variables ask for it, spans exported with OTLP (`RelayTracing`).
public struct Observability: Sendable {
    public let logger: Logger
    public let registry: PrometheusCollectorRegistry
    /// The span exporter, when tracing is on: run it first in the service group, so it
    /// stops last and exports what the others finished.
    public let tracingService: (any Service)?

    /// The services to run before the process's own: the span exporter, if any.
    public var services: [any Service] { tracingService.map { [$0] } ?? [] }

    /// Bootstraps the global logging, metrics and (when asked for) tracing systems; call
    /// once, first thing in main. Throws when the OpenTelemetry variables do not read.
    public static func bootstrap(
        service: String, level: Logger.Level, tracing: Bool = true,
        environment: [String: String] = ProcessInfo.processInfo.environment
    ) throws -> Observability {
        let traced = tracing && RelayTracing.isRequested(environment)
        // Inside a span, every line carries its trace_id and span_id.
        LoggingSystem.bootstrap(
            { label, metadataProvider in
                var handler = StreamLogHandler.standardError(label: label, metadataProvider: metadataProvider)
                handler.logLevel = level
                return handler
            }, metadataProvider: traced ? RelayTracing.loggingMetadataProvider : nil)
        let registry = PrometheusCollectorRegistry()
        MetricsSystem.bootstrap(MetricHandlers(PrometheusMetricsFactory(registry: registry)))
        BuildInfo.recordMetric()
        var logger = Logger(label: "pushrelay.\(service)")
        logger.logLevel = level
        let tracingService = traced ? try RelayTracing.bootstrap(service: service, environment: environment) : nil
        return Observability(logger: logger, registry: registry, tracingService: tracingService)
    }
}

/// Keeps the handler the factory made for each name and labels. swift-metrics asks the
/// factory on every `Counter(label:dimensions:)`, and Prometheus's factory sanitises the
/// name and labels and looks the series up in its registry each time: several
/// microseconds, several times per notification. Past `capacity` series (labels are
/// bounded by design) it stops keeping new ones rather than grow.
final class MetricHandlers: MetricsFactory, Sendable {
    private struct Key: Hashable {
        var kind: UInt8
        var label: String
        var dimensions: [String]

        init(_ kind: UInt8, _ label: String, _ dimensions: [(String, String)]) {
            self.kind = kind
            self.label = label
            var flat: [String] = []
            flat.reserveCapacity(dimensions.count * 2)
            for (name, value) in dimensions {
                flat.append(name)
                flat.append(value)
            }
            self.dimensions = flat
        }
    }

    private struct Kept {
        var counters: [Key: any CounterHandler] = [:]
        var floatingCounters: [Key: any FloatingPointCounterHandler] = [:]
        var recorders: [Key: any RecorderHandler] = [:]
        var meters: [Key: any MeterHandler] = [:]
        var timers: [Key: any TimerHandler] = [:]
        var count = 0
    }

    private let base: any MetricsFactory
    private let kept = Mutex(Kept())
    static let capacity = 20_000

    init(_ base: any MetricsFactory) {
        self.base = base
    }

    private func handler<H: Sendable>(
        _ key: Key, _ table: WritableKeyPath<Kept, [Key: H]>, make: () -> H
    ) -> H {
        if let found = kept.withLock({ $0[keyPath: table][key] }) { return found }
        let made = make()
        return kept.withLock { kept in
            if let raced = kept[keyPath: table][key] { return raced }
            guard kept.count < Self.capacity else { return made }
            kept[keyPath: table][key] = made
            kept.count += 1
            return made
        }
    }

    func makeCounter(label: String, dimensions: [(String, String)]) -> any CounterHandler {
        handler(Key(0, label, dimensions), \.counters) { base.makeCounter(label: label, dimensions: dimensions) }
    }

    func makeFloatingPointCounter(label: String, dimensions: [(String, String)]) -> any FloatingPointCounterHandler {
        handler(Key(1, label, dimensions), \.floatingCounters) {
            base.makeFloatingPointCounter(label: label, dimensions: dimensions)
        }
    }

    func makeRecorder(label: String, dimensions: [(String, String)], aggregate: Bool) -> any RecorderHandler {
        handler(Key(aggregate ? 2 : 3, label, dimensions), \.recorders) {
            base.makeRecorder(label: label, dimensions: dimensions, aggregate: aggregate)
        }
    }

    func makeMeter(label: String, dimensions: [(String, String)]) -> any MeterHandler {
        handler(Key(4, label, dimensions), \.meters) { base.makeMeter(label: label, dimensions: dimensions) }
    }

    func makeTimer(label: String, dimensions: [(String, String)]) -> any TimerHandler {
        handler(Key(5, label, dimensions), \.timers) { base.makeTimer(label: label, dimensions: dimensions) }
    }

    private func forget<H>(_ handler: AnyObject, in table: WritableKeyPath<Kept, [Key: H]>) {
        kept.withLock { kept in
            let before = kept[keyPath: table].count
            kept[keyPath: table] = kept[keyPath: table].filter { ($0.value as AnyObject) !== handler }
            kept.count -= before - kept[keyPath: table].count
        }
    }

    func destroyCounter(_ handler: any CounterHandler) {
        forget(handler, in: \.counters)
        base.destroyCounter(handler)
    }

    func destroyFloatingPointCounter(_ handler: any FloatingPointCounterHandler) {
        forget(handler, in: \.floatingCounters)
        base.destroyFloatingPointCounter(handler)
    }

    func destroyRecorder(_ handler: any RecorderHandler) {
        forget(handler, in: \.recorders)
        base.destroyRecorder(handler)
    }

    func destroyMeter(_ handler: any MeterHandler) {
        forget(handler, in: \.meters)
        base.destroyMeter(handler)
    }

    func destroyTimer(_ handler: any TimerHandler) {
        forget(handler, in: \.timers)
        base.destroyTimer(handler)
    }
}
