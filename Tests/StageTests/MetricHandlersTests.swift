import Metrics
import Prometheus
import Testing

@testable import ServiceKit
@testable import StageTestSupport

/// The metrics factory keeps one handler per name and labels, and what it exports is what
/// Prometheus's own factory would have: the same series, counted once each.
@Suite struct MetricHandlersTests {
    @Test func oneHandlerPerSeriesAndTheCountsAddUp() async throws {
        let registry = PrometheusCollectorRegistry()
        let factory = MetricHandlers(PrometheusMetricsFactory(registry: registry))
        let apns = factory.makeCounter(label: "pushrelay_test_total", dimensions: [("provider", "apns")])
        #expect(factory.makeCounter(label: "pushrelay_test_total", dimensions: [("provider", "apns")]) === apns)
        let fcm = factory.makeCounter(label: "pushrelay_test_total", dimensions: [("provider", "fcm")])
        #expect(fcm !== apns)
        let timer = factory.makeTimer(label: "pushrelay_test_seconds", dimensions: [("provider", "apns")])
        #expect(factory.makeTimer(label: "pushrelay_test_seconds", dimensions: [("provider", "apns")]) === timer)
        for _ in 0..<3 {
            factory.makeCounter(label: "pushrelay_test_total", dimensions: [("provider", "apns")]).increment(by: 1)
        }
        fcm.increment(by: 2)
        var buffer: [UInt8] = []
        registry.emit(into: &buffer)
        let text = String(decoding: buffer, as: UTF8.self)
        #expect(text.contains(#"pushrelay_test_total{provider="apns"} 3"#), "\(text)")
        #expect(text.contains(#"pushrelay_test_total{provider="fcm"} 2"#), "\(text)")
        // A destroyed handler is forgotten: the next request makes a fresh one.
        factory.destroyCounter(fcm)
        #expect(factory.makeCounter(label: "pushrelay_test_total", dimensions: [("provider", "fcm")]) !== fcm)
    }
}
