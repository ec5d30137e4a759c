import Testing

@testable import IngestCore
@testable import ServiceKit

/// The parts of observability that need no stack: when tracing turns on, the bounded
/// tenant label, and outside values as label values.
@Suite struct ObservabilityUnitTests {
    @Test func tracingIsOnOnlyWhenTheStandardVariablesAskForIt() {
        #expect(!RelayTracing.isRequested([:]))
        #expect(RelayTracing.isRequested(["OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"]))
        #expect(RelayTracing.isRequested(["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"]))
        #expect(RelayTracing.isRequested(["OTEL_TRACES_EXPORTER": "otlp"]))
        #expect(RelayTracing.isRequested(["OTEL_TRACES_EXPORTER": "console"]))
        #expect(
            !RelayTracing.isRequested(["OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"]))
        #expect(
            !RelayTracing.isRequested(["OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"]))
        #expect(!RelayTracing.isRequested(["OTEL_EXPORTER_OTLP_ENDPOINT": ""]))
        #expect(!RelayTracing.isRequested(["OTEL_SERVICE_NAME": "relay"]), "a name alone exports nothing")
    }

    @Test func theTenantLabelNamesTheFirstServersAndCallsTheRestOther() {
        let labels = TenantLabels(capacity: 2)
        #expect(labels.label("a") == "a")
        #expect(labels.label("b") == "b")
        #expect(labels.label("c") == "other")
        #expect(labels.label("a") == "a", "a server named once keeps its label")
        #expect(labels.label("d") == "other")
    }

    @Test func onlyShortWordsFromOutsideBecomeLabelValues() {
        #expect(RelayMetrics.labelValue("BadDeviceToken") == "BadDeviceToken")
        #expect(RelayMetrics.labelValue("webpush_410") == "webpush_410")
        #expect(RelayMetrics.labelValue("80300007") == "80300007")
        #expect(RelayMetrics.labelValue("") == "other")
        #expect(RelayMetrics.labelValue("The channel URI is invalid") == "other")
        #expect(RelayMetrics.labelValue(String(repeating: "x", count: 49)) == "other")
        #expect(RelayMetrics.labelValue("quote\"") == "other")
    }
}
