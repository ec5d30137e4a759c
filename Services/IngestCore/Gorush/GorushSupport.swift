import DeviceState
import Foundation
import HTTPTypes
import Hummingbird
import PushModels
import ServiceKit
import Synchronization

/// The providers some dispatcher can send to, read at most every `ttl`: every gorush
/// call asks, and the answer changes only when a dispatcher starts or stops.
final class CachedProviderDirectory: Sendable {
    let directory: any ProviderDirectory
    let ttlMs: Int64
    private let cached = Mutex<(providers: Set<Provider>?, readAtMs: Int64)?>(nil)

    init(_ directory: any ProviderDirectory, ttlMs: Int64 = 5_000) {
        self.directory = directory
        self.ttlMs = ttlMs
    }

    func enabledProviders(nowMs: Int64 = Wire.nowMillis()) async throws -> Set<Provider>? {
        if let hit = cached.withLock({ $0 }), nowMs.saturatingSubtract(hit.readAtMs) < ttlMs { return hit.providers }
        let providers = try await directory.enabledProviders(nowMs: nowMs)
        cached.withLock { $0 = (providers, nowMs) }
        return providers
    }

    /// Not cached: asked once per pipeline dry run, and a dispatcher of an older release
    /// starting must be seen at once.
    func everyDispatcherCan(_ capability: DispatcherCapability, nowMs: Int64 = Wire.nowMillis()) async throws -> Bool {
        try await directory.everyDispatcherCan(capability, nowMs: nowMs)
    }
}

/// No dispatcher's word: every provider may be configured (the in-memory test stores).
public struct UnannouncedProviders: ProviderDirectory {
    public init() {}
    public func enabledProviders(nowMs: Int64) async throws -> Set<Provider>? { nil }
}

/// A budget of bytes that callers take a share of and give back, waiting in turn when it
/// is spent: it bounds the memory large request bodies hold together.
actor ByteBudget {
    let capacity: Int
    private var used = 0
    private var waiting: [(bytes: Int, continuation: CheckedContinuation<Void, Never>)] = []

    init(capacity: Int) {
        self.capacity = max(1, capacity)
    }

    func acquire(_ bytes: Int) async {
        let bytes = min(max(bytes, 0), capacity)
        if waiting.isEmpty && used + bytes <= capacity {
            used += bytes
            return
        }
        await withCheckedContinuation { waiting.append((bytes, $0)) }
    }

    /// Takers waiting for their share now.
    var waitingCount: Int { waiting.count }

    func release(_ bytes: Int) {
        used -= min(max(bytes, 0), capacity)
        while let first = waiting.first, used + first.bytes <= capacity {
            waiting.removeFirst()
            used += first.bytes
            first.continuation.resume()
        }
    }
}

/// What every answer of this process came to, for gorush's `/sys/stats` (thoas/stats'
/// fields): counts by status, in all and over the last whole second, times and sizes.
final class ResponseStats: Sendable {
    struct Figures {
        var totalByStatus: [Int: Int] = [:]
        var lastSecondByStatus: [Int: Int] = [:]
        var currentSecondByStatus: [Int: Int] = [:]
        var currentSecond: Int64 = 0
        var total = 0
        var totalSeconds: Double = 0
        var totalBytes: Int64 = 0
    }

    let started = Date()
    private let figures = Mutex(Figures())

    func record(status: Int, seconds: Double, bytes: Int64, now: Date = Date()) {
        let second = Int64(now.timeIntervalSince1970)
        figures.withLock { figures in
            if second != figures.currentSecond {
                figures.lastSecondByStatus =
                    second == figures.currentSecond + 1 ? figures.currentSecondByStatus : [:]
                figures.currentSecondByStatus = [:]
                figures.currentSecond = second
            }
            figures.currentSecondByStatus[status, default: 0] += 1
            figures.totalByStatus[status, default: 0] += 1
            figures.total += 1
            figures.totalSeconds += seconds
            figures.totalBytes = figures.totalBytes.saturatingAdd(max(bytes, 0))
        }
    }

    /// thoas/stats' `Data`, with this process's figures (`hostname` empty, as gorush's).
    func data(now: Date = Date()) -> JSONValue {
        let figures = figures.withLock { figures in
            // A second with no answers since: the window is empty.
            if Int64(now.timeIntervalSince1970) > figures.currentSecond + 1 { figures.lastSecondByStatus = [:] }
            return figures
        }
        func counts(_ byStatus: [Int: Int]) -> JSONValue {
            .object(Dictionary(uniqueKeysWithValues: byStatus.map { (String($0.key), JSONValue.int(Int64($0.value))) }))
        }
        let uptime = now.timeIntervalSince(started)
        let average = figures.total > 0 ? figures.totalSeconds / Double(figures.total) : 0
        let averageBytes = figures.total > 0 ? figures.totalBytes / Int64(figures.total) : 0
        return [
            "pid": .int(Int64(ProcessInfo.processInfo.processIdentifier)), "hostname": "",
            "uptime": .string(Self.goDuration(uptime)), "uptime_sec": .double(uptime),
            "time": .string(now.description), "unixtime": .int(Int64(now.timeIntervalSince1970)),
            "status_code_count": counts(figures.lastSecondByStatus),
            "total_status_code_count": counts(figures.totalByStatus),
            "count": .int(Int64(figures.lastSecondByStatus.values.reduce(0, +))),
            "total_count": .int(Int64(figures.total)),
            "total_response_time": .string(Self.goDuration(figures.totalSeconds)),
            "total_response_time_sec": .double(figures.totalSeconds),
            "total_response_size": .int(figures.totalBytes), "average_response_size": .int(averageBytes),
            "average_response_time": .string(Self.goDuration(average)), "average_response_time_sec": .double(average),
            "total_metrics_counts": [:], "average_metrics_timers": [:],
        ]
    }

    /// A duration as Go prints one: `1h2m3.5s`, `2.5s`, `350ms`, `0s`.
    static func goDuration(_ seconds: Double) -> String {
        guard seconds.isFinite, seconds > 0 else { return "0s" }
        if seconds < 1 {
            let ms = seconds * 1000
            return ms < 1 ? "\(Int((seconds * 1_000_000).rounded()))µs" : "\(trimmed(ms))ms"
        }
        let whole = Int(min(seconds, 1e12))
        let hours = whole / 3600
        let minutes = (whole % 3600) / 60
        let rest = seconds - Double(hours * 3600 + minutes * 60)
        var text = ""
        if hours > 0 { text += "\(hours)h" }
        if hours > 0 || minutes > 0 { text += "\(minutes)m" }
        return text + "\(trimmed(rest))s"
    }

    private static func trimmed(_ value: Double) -> String {
        var text = String(format: "%.3f", value)
        while text.hasSuffix("0") { text.removeLast() }
        if text.hasSuffix(".") { text.removeLast() }
        return text
    }
}

/// On every answer of the API port, as gorush's global middleware does: the
/// `X-GORUSH-VERSION` header, and the answer counted for `/sys/stats`.
struct GorushHeadersMiddleware: RouterMiddleware {
    typealias Context = IngestContext
    let stats: ResponseStats

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws
        -> Response
    {
        let start = ContinuousClock.now
        var response: Response
        do {
            response = try await next(request, context)
        } catch let error as any HTTPResponseError {
            // An error that answers for itself (the JSON errors): answered here, with the header.
            response = try error.response(from: request, context: context)
        } catch {
            record(status: 500, since: start, bytes: 0)
            throw error
        }
        response.headers.set(GorushController.versionHeader, GorushController.version)
        record(
            status: response.status.code, since: start,
            bytes: response.headers.value(.contentLength).flatMap { Int64($0) } ?? 0)
        return response
    }

    private func record(status: Int, since start: ContinuousClock.Instant, bytes: Int64) {
        let elapsed = ContinuousClock.now - start
        stats.record(
            status: status, seconds: Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18,
            bytes: bytes)
    }
}
