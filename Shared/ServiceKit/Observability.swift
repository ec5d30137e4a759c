import Foundation
import Logging
import Metrics
import Prometheus

/// Metadata keys used in log lines, in one place so logs stay greppable.
/// Never log a notification's plaintext or a full device token.
public enum LogKey {
    public static let notificationID = "notification_id"
    public static let deviceID = "device_id"
    public static let realm = "realm_uuid"
    public static let provider = "provider"
    public static let reason = "reason"
    public static let status = "status"
    public static let error = "error"
    public static let token = "token"
    public static let topic = "topic"
    public static let offset = "offset"
}

/// Logging and metrics for one process: swift-log to stderr, swift-metrics into a
/// Prometheus registry served at `/metrics`.
public struct Observability: Sendable {
    public let logger: Logger
    public let registry: PrometheusCollectorRegistry

    /// Bootstraps the global logging and metrics systems; call once, first thing in main.
    public static func bootstrap(service: String, level: Logger.Level) -> Observability {
        LoggingSystem.bootstrap { label in
            var handler = StreamLogHandler.standardError(label: label)
            handler.logLevel = level
            return handler
        }
        let registry = PrometheusCollectorRegistry()
        MetricsSystem.bootstrap(PrometheusMetricsFactory(registry: registry))
        var logger = Logger(label: "pushrelay.\(service)")
        logger.logLevel = level
        return Observability(logger: logger, registry: registry)
    }
}
