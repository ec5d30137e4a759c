import Hummingbird
import LogKeys
import Logging
import NIOCore
import RedisClient
import PushModels

/// An error answered to a realm: HTTP status, a machine-readable code and a message,
/// as `{"result":"error","code":"…","msg":"…"}` (Zulip's error shape).
struct APIError: Error, HTTPResponseError {
    var status: HTTPResponse.Status
    var code: String
    var message: String
    /// The request field at fault, when there is one.
    var field: String?
    var headers: HTTPFields = [:]
    /// Further fields of the answer (Zulip's errors carry some: `retry-after`, `var_name`).
    var data: [String: JSONValue] = [:]

    func response(from request: Request, context: some RequestContext) throws -> Response {
        var body = data
        body["result"] = "error"
        body["code"] = .string(code)
        body["msg"] = .string(message)
        if let field { body["field"] = .string(field) }
        var response = jsonResponse(status, .object(body))
        response.headers.append(contentsOf: headers)
        return response
    }

    static func badRequest(_ message: String, code: String = "BAD_REQUEST", field: String? = nil) -> APIError {
        APIError(status: .badRequest, code: code, message: message, field: field)
    }

    static func invalid(_ error: PayloadValidationError, code: String = "INVALID_FIELD") -> APIError {
        APIError(status: .badRequest, code: code, message: error.description, field: error.field)
    }

    static func realmQuotaExceeded(limit: Int) -> APIError {
        APIError(
            status: .forbidden, code: "REALM_QUOTA_EXCEEDED",
            message: "This server holds as many realms as it may (\(limit))")
    }

    static func deviceQuotaExceeded(limit: Int) -> APIError {
        APIError(
            status: .forbidden, code: "DEVICE_QUOTA_EXCEEDED",
            message: "This server holds as many devices as it may (\(limit))")
    }

    static func tooManyTargets(field: String, limit: Int) -> APIError {
        APIError(
            status: .contentTooLarge, code: "TOO_MANY_DEVICES",
            message: "\(field): at most \(limit) devices per request", field: field)
    }

    static let unauthorized = APIError(
        status: .unauthorized, code: "UNAUTHORIZED", message: "Missing or invalid server credentials",
        headers: [.wwwAuthenticate: #"Basic realm="pushrelay""#])
    /// A body over its route's limit, declared or counted: answered at once with
    /// `Connection: close`, and the connection closes (`RequestDeadlineHandler`) instead of
    /// waiting for, and reading, the rest of the body.
    static let requestTooLarge = APIError(
        status: .contentTooLarge, code: "REQUEST_TOO_LARGE", message: "Request body is too large",
        headers: [.connection: "close"])
    static let deviceNotFound = APIError(status: .notFound, code: "DEVICE_NOT_FOUND", message: "No such device")
    static let internalError = APIError(
        status: .internalServerError, code: "INTERNAL_ERROR", message: "Internal error; the request was not accepted")
    static let unavailable = APIError(
        status: .serviceUnavailable, code: "SERVICE_UNAVAILABLE",
        message: "The relay cannot accept work right now; retry later", headers: [.retryAfter: "5"])
}

func jsonResponse(_ status: HTTPResponse.Status, _ body: JSONValue) -> Response {
    Response(
        status: status, headers: [.contentType: "application/json"],
        body: .init(byteBuffer: ByteBuffer(bytes: Wire.canonical(body))))
}

func success(_ fields: [String: JSONValue] = [:], status: HTTPResponse.Status = .ok) -> Response {
    var body = fields
    body["result"] = "success"
    body["msg"] = ""
    return jsonResponse(status, .object(body))
}

/// The methods each route path answers, to tell a wrong method (405, with `Allow`)
/// from an unknown path (404). Built from the router's own route list.
struct RouteMethods: Sendable {
    private var routes: [(path: RouterPath, methods: Set<HTTPRequest.Method>)] = []

    init<Context>(_ routes: [Router<Context>.RouteDescription]) {
        for route in routes {
            if let i = self.routes.firstIndex(where: { $0.path == route.path }) {
                self.routes[i].methods.insert(route.method)
            } else {
                self.routes.append((route.path, [route.method]))
            }
        }
    }

    /// The methods answered at `path` (matched segment by segment, as the router does).
    func methods(at path: String) -> Set<HTTPRequest.Method> {
        let segments = path.split(separator: "/")
        var found: Set<HTTPRequest.Method> = []
        for route in routes where route.path.count == segments.count {
            if zip(route.path, segments).allSatisfy({ $0 ~= $1 }) { found.formUnion(route.methods) }
        }
        return found
    }
}

/// Turns every failure into the JSON error shape: unknown routes, wrong methods,
/// oversize bodies, and unexpected errors (logged, answered 500 without details).
struct ErrorMiddleware<Context: RequestContext>: RouterMiddleware {
    var routes = RouteMethods([Router<Context>.RouteDescription]())

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws
        -> Response
    {
        do {
            return try await next(request, context)
        } catch {
            throw Self.apiError(error, request: request, context: context, routes: routes)
        }
    }

    /// The API error a failure is answered with.
    static func apiError(_ error: any Error, request: Request, context: Context, routes: RouteMethods) -> APIError {
        switch error {
        case let error as APIError:
            return error
        case let error as HTTPError:
            switch error.status {
            case .contentTooLarge:
                return APIError.requestTooLarge
            case .notFound:
                let allowed = routes.methods(at: request.uri.path)
                guard allowed.isEmpty || allowed.contains(request.method) else {
                    let names = allowed.map(\.rawValue).sorted()
                    return APIError(
                        status: .methodNotAllowed, code: "METHOD_NOT_ALLOWED",
                        message:
                            "\(request.method.rawValue) is not allowed here; use \(names.joined(separator: " or "))",
                        headers: [.allow: names.joined(separator: ", ")])
                }
                return APIError(status: .notFound, code: "NOT_FOUND", message: "No such endpoint")
            case .methodNotAllowed:
                return APIError(status: .methodNotAllowed, code: "METHOD_NOT_ALLOWED", message: "Method not allowed")
            default:
                return APIError(status: error.status, code: "BAD_REQUEST", message: error.body ?? "Bad request")
            }
        case let error as RedisError where error.isRetriable:
            context.logger.warning("redis unavailable", metadata: [LogKey.error: "\(error)"])
            return APIError.unavailable
        case is NIOTooManyBytesError:
            return APIError.requestTooLarge
        default:
            context.logger.error("request failed", metadata: [LogKey.error: "\(error)"])
            return APIError.internalError
        }
    }
}
