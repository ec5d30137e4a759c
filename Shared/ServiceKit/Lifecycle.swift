import Foundation
import Kafka
import LogKeys
import Logging
import ServiceLifecycle
import UnixSignals

/// Runs a unit of infrastructure work (Redis, Kafka) until it succeeds, backing off
/// exponentially with jitter between attempts. Returns nil only when the task is
/// cancelled or the service is shutting down, so the caller can leave the record
/// uncommitted for redelivery instead of losing it.
public func untilSuccess<T: Sendable>(
    _ what: String, logger: Logger, maxDelay: Duration = .seconds(5),
    _ operation: @Sendable () async throws -> T
) async -> T? {
    switch await retrying(what, logger: logger, maxDelay: maxDelay, isTransient: { _ in true }, operation) {
    case .succeeded(let value): value
    case .failed, .interrupted: nil
    }
}

/// How `retrying` ended.
public enum RetryOutcome<T: Sendable>: Sendable {
    case succeeded(T)
    /// A failure that is not transient came back `permanentAttempts` times in a row.
    case failed(any Error)
    /// Cancelled, or the service is shutting down: leave the record for redelivery.
    case interrupted
}

/// Like `untilSuccess`, but an error `isTransient` calls permanent (a bug or a bad
/// record rather than Redis or Kafka being away) ends the loop after
/// `permanentAttempts` such failures in a row, so one poison record never holds its
/// partition.
public func retrying<T: Sendable>(
    _ what: String, logger: Logger, maxDelay: Duration = .seconds(5), permanentAttempts: Int = 3,
    isTransient: (any Error) -> Bool, _ operation: @Sendable () async throws -> T
) async -> RetryOutcome<T> {
    var delay = Duration.milliseconds(50)
    var permanentFailures = 0
    while true {
        do {
            return .succeeded(try await operation())
        } catch {
            if isTransient(error) {
                permanentFailures = 0
            } else {
                permanentFailures += 1
                if permanentFailures >= max(1, permanentAttempts) {
                    logger.error("\(what) failed; giving up", metadata: [LogKey.error: "\(error)"])
                    return .failed(error)
                }
            }
            logger.warning("\(what) failed; retrying", metadata: [LogKey.error: "\(error)"])
        }
        if Task.isCancelled || Task.isShuttingDownGracefully { return .interrupted }
        let jittered = delay * Double.random(in: 0.5...1.0)
        try? await cancelWhenGracefulShutdown { try await Task.sleep(for: jittered) }
        if Task.isCancelled || Task.isShuttingDownGracefully { return .interrupted }
        delay = min(delay * 2, maxDelay)
    }
}

/// A service that runs `body` until it returns (the dev broker waits for shutdown in one).
@_spi(Dev) public struct StageService: Service {
    let body: @Sendable () async throws -> Void

    public init(_ body: @escaping @Sendable () async throws -> Void) {
        self.body = body
    }

    public func run() async throws {
        try await body()
    }
}

/// Runs the services of one executable in a ServiceGroup with graceful shutdown on
/// SIGTERM/SIGINT. Services stop in reverse order: list the HTTP endpoint first and
/// the consumer last, so the consumer drains before health goes away. A graceful stop
/// is bounded by `shutdownTimeout`; what is still running then is cancelled.
public func runServices(_ services: [any Service], shutdownTimeout: Duration, logger: Logger) async throws {
    var configuration = ServiceGroupConfiguration(
        services: services.map { .init(service: $0) },
        gracefulShutdownSignals: [.sigterm, .sigint],
        logger: logger)
    configuration.maximumGracefulShutdownDuration = shutdownTimeout
    configuration.maximumCancellationDuration = .seconds(CommonSettings.cancellationSeconds)
    try await ServiceGroup(configuration: configuration).run()
}

/// An executable's `main`: runs `body`; a configuration error (or any other error at
/// start) is printed to stderr and the process exits with status 78 (EX_CONFIG), never
/// a trap.
public func runMain(_ body: @Sendable () async throws -> Void) async {
    BuildInfo.answerVersionFlag()
    do {
        try await body()
    } catch {
        FileHandle.standardError.write(Data("pushrelay: \(error)\n".utf8))
        exit(78)
    }
}

/// Runs `cleanup` once graceful shutdown begins: closing clients after the services
/// listed after it have stopped (ServiceGroup stops services in reverse order).
public struct ShutdownHook: Service {
    let cleanup: @Sendable () async -> Void

    public init(_ cleanup: @escaping @Sendable () async -> Void) {
        self.cleanup = cleanup
    }

    public func run() async throws {
        try? await gracefulShutdown()
        await cleanup()
    }
}
