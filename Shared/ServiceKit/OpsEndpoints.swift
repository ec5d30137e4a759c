import Foundation
import Hummingbird
import Kafka
import Prometheus
import RedisClient
import Synchronization

/// Runs a check that blocks its thread (a Kafka metadata request, at most a second) on a
/// Dispatch thread, not on the cooperative pool.
func offThePool(_ check: @escaping @Sendable () -> Bool) async -> Bool {
    await withCheckedContinuation { continuation in
        DispatchQueue.global().async { continuation.resume(returning: check()) }
    }
}

/// Answers "can this process do its work?": Kafka and Redis both respond.
/// Checks run off the cooperative pool (librdkafka's metadata call blocks) and the
/// answer is cached for a second so probes stay cheap.
public final class Readiness: Sendable {
    private let checks: [@Sendable () async -> Bool]
    private let cache = Mutex<(at: ContinuousClock.Instant, ready: Bool)?>(nil)

    public init(checks: [@Sendable () async -> Bool]) {
        self.checks = checks
    }

    public convenience init(kafka: @escaping @Sendable () -> Bool, redis: RedisClient?) {
        var checks: [@Sendable () async -> Bool] = [{ await offThePool(kafka) }]
        if let redis { checks.append { await redis.ping() } }
        self.init(checks: checks)
    }

    public func isReady() async -> Bool {
        if let cached = cache.withLock({ $0 }), ContinuousClock.now - cached.at < .seconds(1) {
            return cached.ready
        }
        var ready = true
        for check in checks where !(await check()) {
            ready = false
            break
        }
        let result = ready
        cache.withLock { $0 = (.now, result) }
        return result
    }
}

extension Router {
    /// `/health/live`, `/health/ready` and `/metrics`, the same on every service.
    public func addOpsRoutes(readiness: Readiness, registry: PrometheusCollectorRegistry) {
        // What runs here: the release and the commit (a rolling upgrade shows both).
        let health = #"{"status":"live","version":"\#(BuildInfo.version)","revision":"\#(BuildInfo.revision)"}"#
        get("/health") { _, _ in
            Response(
                status: .ok, headers: [.contentType: "application/json"],
                body: .init(byteBuffer: ByteBuffer(string: health)))
        }
        get("/health/live") { _, _ in
            Response(
                status: .ok, headers: [.contentType: "application/json"],
                body: .init(byteBuffer: ByteBuffer(string: #"{"status":"live"}"#)))
        }
        get("/health/ready") { _, _ in
            let ready = await readiness.isReady()
            return Response(
                status: ready ? .ok : .serviceUnavailable, headers: [.contentType: "application/json"],
                body: .init(byteBuffer: ByteBuffer(string: ready ? #"{"status":"ready"}"# : #"{"status":"not_ready"}"#))
            )
        }
        get("/metrics") { _, _ in
            var buffer: [UInt8] = []
            registry.emit(into: &buffer)
            return Response(
                status: .ok, headers: [.contentType: "text/plain; version=0.0.4"],
                body: .init(byteBuffer: ByteBuffer(bytes: buffer)))
        }
    }
}
