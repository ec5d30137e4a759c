import Hummingbird
import Metrics
import PushModels
import Synchronization

/// Hummingbird's request metrics under Hummingbird's names and dimensions (`hb.requests`,
/// `http.server.request.duration`, `hb.request.errors`, `http.server.active_requests`;
/// docs/operations.md, "Metrics"), recorded when the handler has its response.
///
/// Hummingbird's `MetricsMiddleware` records them after the body is written, by wrapping
/// the body in a closure. A closure body is written in three steps (head, body, end), each
/// flushed: two socket writes per answer instead of one, and the client woken twice. The
/// answers here are a few hundred bytes in one buffer, so the time to write them is not
/// worth a second write (benchmarks/history/20-issue-27-part-4-fakes-and-system-calls.md).
struct RequestMetricsMiddleware: RouterMiddleware {
    typealias Context = IngestContext

    private let cache = RequestMetricsCache()

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws
        -> Response
    {
        let start = ContinuousClock.now
        let active = cache.active(request.method)
        active.increment()
        defer { active.decrement() }
        do {
            let response = try await next(request, context)
            let metrics = cache.endpoint(
                .init(endpoint: context.endpointPath ?? "Unknown", method: request.method, status: response.status))
            metrics.requests.increment()
            metrics.duration.recordNanoseconds((ContinuousClock.now - start).saturatingNanoseconds)
            return response
        } catch {
            let status = (error as? any HTTPResponseError)?.status ?? .internalServerError
            let metrics = cache.endpoint(
                .init(endpoint: context.endpointPath ?? "NotFound", method: request.method, status: status))
            metrics.requests.increment()
            metrics.errors.increment()
            throw error
        }
    }
}

/// The metric handles per method and per endpoint, made once each (not nested in the
/// generic middleware, whose nested types would be instantiated at run time on each use).
final class RequestMetricsCache: Sendable {
    struct EndpointID: Hashable {
        let endpoint: String
        let method: HTTPRequest.Method
        let status: HTTPResponse.Status
    }

    struct Endpoint: Sendable {
        let requests: Counter
        let duration: Timer
        let errors: Counter

        init(_ id: EndpointID) {
            let dimensions = [
                ("http.route", id.endpoint), ("http.request.method", id.method.rawValue),
                ("http.response.status_code", String(id.status.code)),
            ]
            requests = Counter(label: "hb.requests", dimensions: dimensions)
            duration = Timer(
                label: "http.server.request.duration", dimensions: dimensions, preferredDisplayUnit: .seconds)
            errors = Counter(
                label: "hb.request.errors",
                dimensions: [
                    ("http.route", id.endpoint), ("http.request.method", id.method.rawValue),
                    ("error.type", String(id.status.code)),
                ])
        }
    }

    private let endpoints = Mutex<[EndpointID: Endpoint]>([:])
    private let methods = Mutex<[HTTPRequest.Method: Meter]>([:])

    func endpoint(_ id: EndpointID) -> Endpoint {
        endpoints.withLock { all in
            if let found = all[id] { return found }
            let made = Endpoint(id)
            all[id] = made
            return made
        }
    }

    func active(_ method: HTTPRequest.Method) -> Meter {
        methods.withLock { all in
            if let found = all[method] { return found }
            let made = Meter(
                label: "http.server.active_requests", dimensions: [("http.request.method", method.rawValue)])
            all[method] = made
            return made
        }
    }
}
