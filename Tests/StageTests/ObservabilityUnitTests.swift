import PushModels
import Testing

@testable import IngestCore
@testable import ServiceKit
@testable import StageTestSupport

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

    @Test func onlyASampledTraceparentIsFollowed() {
        let id = "4bf92f3577b34da6a3ce929d0e0e4736"
        #expect(RelayTracing.isSampled(Array("00-\(id)-00f067aa0ba902b7-01".utf8)))
        #expect(RelayTracing.isSampled(Array("00-\(id)-00f067aa0ba902b7-03".utf8)))
        #expect(!RelayTracing.isSampled(Array("00-\(id)-00f067aa0ba902b7-00".utf8)))
        #expect(!RelayTracing.isSampled(Array("00-\(id)-00f067aa0ba902b7-0".utf8)), "too short")
        #expect(!RelayTracing.isSampled(Array("00-\(id)-00f067aa0ba902b7-0z".utf8)))
        #expect(!RelayTracing.isSampled([]))
    }

    @Test func requestsAreSampledAsTheStandardSamplersSay() throws {
        let sampled = Array("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".utf8)
        let unsampled = Array("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00".utf8)
        let byDefault = try #require(RelayTracing.RootSampling([:]))
        #expect(byDefault.followsParent && byDefault.share == 1)
        #expect(byDefault.traces(parent: nil, random: 0.99))
        #expect(!byDefault.traces(parent: unsampled, random: 0), "an unsampled parent is followed")
        let ratio = try #require(
            RelayTracing.RootSampling([
                "OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.01",
            ]))
        #expect(ratio.traces(parent: nil, random: 0.005) && !ratio.traces(parent: nil, random: 0.5))
        #expect(ratio.traces(parent: sampled, random: 0.99), "a sampled parent is followed")
        let plain = try #require(
            RelayTracing.RootSampling(["OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.5"]))
        #expect(!plain.traces(parent: sampled, random: 0.7), "traceidratio ignores the parent")
        #expect(RelayTracing.RootSampling(["OTEL_TRACES_SAMPLER": "always_off"])?.share == 0)
        #expect(
            RelayTracing.RootSampling(["OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "7"])?.share
                == 1, "an argument out of 0...1 reads as the default")
        #expect(RelayTracing.RootSampling(["OTEL_TRACES_SAMPLER": "jaeger_remote"]) == nil, "left to OpenTelemetry")
    }

    @Test func onlyAWellFormedTraceparentIsRead() {
        let id = "4bf92f3577b34da6a3ce929d0e0e4736"
        #expect(RelayTracing.isWellFormed(Array("00-\(id)-00f067aa0ba902b7-01".utf8)))
        #expect(!RelayTracing.isWellFormed(Array("00-\(id.uppercased())-00f067aa0ba902b7-01".utf8)))
        #expect(!RelayTracing.isWellFormed(Array("01-\(id)-00f067aa0ba902b7-01".utf8)), "version 00 only")
        #expect(!RelayTracing.isWellFormed(Array("00-\(String(repeating: "0", count: 32))-00f067aa0ba902b7-01".utf8)))
        #expect(!RelayTracing.isWellFormed(Array("00-\(id)-0000000000000000-01".utf8)))
        #expect(!RelayTracing.isWellFormed(Array("00-\(id)x00f067aa0ba902b7-01".utf8)))
        #expect(!RelayTracing.isWellFormed(Array("00-\(id)-00f067aa0ba902b7-zz".utf8)))
    }

    @Test func sampledParentsAreFollowedUpToTheBudget() {
        var budget = RelayTracing.SecondBudget(limit: 2)
        let taken = [10, 10, 10, 11].map { budget.take(nowSeconds: $0) }
        #expect(taken == [true, true, false, true], "two a second; the third waits for the next second")
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
