import Foundation
import HTTPTypes
import Hummingbird
import PushModels

/// A fake Windows Push Notification Services: the token endpoint (`POST /accesstoken.srf`,
/// as login.live.com) and channels (`POST /w/…`, any path under `/w/`; the channel URI is
/// the URL the request was sent to, rebuilt from its authority and path). Answers are
/// WNS's: an empty body, the outcome in the status and the `X-WNS-*` headers.
///
/// Microsoft's references: "Push notification service request and response headers"
/// (learn.microsoft.com …/tiles-and-notifications/push-request-response-headers) and the
/// response codes in "Troubleshooting push notifications" (…/push-notifications/troubleshooting).
public struct FakeWNS: Sendable {
    public let state: FakeState
    let clientID: String
    let clientSecret: String
    let issued = IssuedAccessTokens()

    /// Microsoft's token lifetime.
    static let tokenLifetime = 86_400
    static let maxPayloadBytes = 5000
    static let types: Set<String> = ["wns/raw", "wns/toast", "wns/tile", "wns/badge"]

    public init(state: FakeState, clientID: String, clientSecret: String) {
        self.state = state
        self.clientID = clientID
        self.clientSecret = clientSecret
    }

    public func addRoutes(to router: Router<BasicRequestContext>) {
        router.post("/accesstoken.srf") { request, _ in try await token(request) }
        // `/w/?token=…` has no path component after `w`; `/w/**` takes the rest.
        for path in ["/w", "/w/**"] {
            router.post(RouterPath(path)) { request, _ in try await notify(request) }
            // Only POST is a notification (WNS answers other methods 405).
            for method in [HTTPRequest.Method.get, .put, .delete, .patch] {
                router.on(RouterPath(path), method: method) { _, _ in
                    Self.wns(405, error: "Method not allowed; use POST")
                }
            }
        }
    }

    static func json(_ status: Int, _ body: JSONValue) -> Response {
        Response(
            status: .init(code: status), headers: [.contentType: "application/json", .cacheControl: "no-store"],
            body: .init(byteBuffer: ByteBuffer(bytes: Wire.canonical(body))))
    }

    /// A WNS answer: no body, `X-WNS-Error-Description` on errors.
    static func wns(_ status: Int, error: String? = nil, headers extra: HTTPFields = [:]) -> Response {
        var headers = extra
        if let error, let name = HTTPField.Name("X-WNS-Error-Description") { headers[name] = error }
        return Response(status: .init(code: status), headers: headers)
    }

    func token(_ request: Request) async throws -> Response {
        var request = request
        func oauthError(_ error: String, _ description: String) -> Response {
            Self.json(400, ["error": .string(error), "error_description": .string(description)])
        }
        guard request.headers[.contentType]?.lowercased().hasPrefix("application/x-www-form-urlencoded") == true
        else { return oauthError("invalid_request", "The request body must be application/x-www-form-urlencoded.") }
        let body = String(decoding: try await request.collectBody(upTo: 64 * 1024).readableBytesView, as: UTF8.self)
        let form = formFields(body)
        guard form["grant_type"] == "client_credentials" else {
            return oauthError(
                "unsupported_grant_type", "The provided value for the input parameter 'grant_type' is not valid.")
        }
        guard form["client_id"] == clientID, form["client_secret"] == clientSecret else {
            return oauthError("invalid_client", "The client does not exist or the secret is wrong.")
        }
        guard form["scope"] == "notify.windows.com" else {
            return oauthError("invalid_scope", "The provided value for the input parameter 'scope' is not valid.")
        }
        let token = issued.issue(state, validFor: TimeInterval(Self.tokenLifetime))
        return Self.json(
            200,
            ["access_token": .string(token), "token_type": "bearer", "expires_in": .int(Int64(Self.tokenLifetime))])
    }

    func notify(_ request: Request) async throws -> Response {
        var request = request
        let authority = request.head.authority ?? ""
        let channel = "https://\(authority)\(request.uri.string)"
        func field(_ name: String) -> String? { HTTPField.Name(name).flatMap { request.headers[$0] } }
        var headers: [String: String] = [:]
        for name in ["content-type", "x-wns-type", "x-wns-ttl", "x-wns-cache-policy", "x-wns-requestforstatus"] {
            if let value = field(name) { headers[name] = value }
        }
        let bytes = Array(try await request.collectBody(upTo: 1 << 20).readableBytesView)
        func answer(_ response: Response, reason: String?) -> Response {
            let body =
                (try? Wire.decode(JSONValue.self, from: bytes)) ?? .string(String(decoding: bytes, as: UTF8.self))
            state.record(
                ReceivedPush(
                    provider: "wns", token: channel, headers: headers, body: body, status: Int(response.status.code),
                    reason: reason, httpVersion: httpVersion(request), receivedAtMs: Wire.nowMillis()))
            return response
        }

        guard let authorization = field("authorization"), authorization.lowercased().hasPrefix("bearer "),
            issued.issued(String(authorization.dropFirst(7)))
        else {
            return answer(Self.wns(401, error: "Invalid authentication token"), reason: "401")
        }
        guard state.accessTokenValid(String(authorization.dropFirst(7))) else {
            return answer(
                Self.wns(
                    401, error: "Token has expired",
                    headers: [
                        .wwwAuthenticate: #"Bearer error="invalid_request",error_description="Token has expired""#
                    ]),
                reason: "401")
        }
        guard let type = field("x-wns-type"), Self.types.contains(type) else {
            return answer(Self.wns(400, error: "Invalid X-WNS-Type header"), reason: "400")
        }
        let contentType = field("content-type")?.lowercased() ?? ""
        let expected = type == "wns/raw" ? "application/octet-stream" : "text/xml"
        guard contentType.hasPrefix(expected) else {
            return answer(Self.wns(400, error: "Content-Type must be \(expected) for \(type)"), reason: "400")
        }
        if let policy = field("x-wns-cache-policy"), policy != "cache" && policy != "no-cache" {
            return answer(Self.wns(400, error: "Invalid X-WNS-Cache-Policy header"), reason: "400")
        }
        if let ttl = field("x-wns-ttl"), Syntax.parseUInt64(Substring(ttl)) == nil {
            return answer(Self.wns(400, error: "Invalid X-WNS-TTL header"), reason: "400")
        }
        guard bytes.count <= Self.maxPayloadBytes else {
            return answer(
                Self.wns(413, error: "The notification payload exceeds the 5000 byte size limit"), reason: "413")
        }
        // Every channel URI WNS hands out carries its token in the query.
        guard request.uri.queryParameters.get("token").map({ !$0.isEmpty }) == true else {
            return answer(Self.wns(404, error: "The channel URI is not valid"), reason: "404")
        }
        if let injected = state.nextInjected(provider: "wns") {
            var extra: HTTPFields = [:]
            if let seconds = injected.retryAfterSeconds { extra[.retryAfter] = String(seconds) }
            return answer(Self.wns(injected.status, error: injected.reason, headers: extra), reason: injected.reason)
        }
        if state.fcmUnregistered(channel) {
            return answer(Self.wns(410, error: "The channel expired"), reason: "410")
        }
        var extra: HTTPFields = [:]
        if let name = HTTPField.Name("X-WNS-Status") { extra[name] = "received" }
        if let name = HTTPField.Name("X-WNS-Msg-ID") {
            extra[name] = String(format: "%016llX", UInt64.random(in: 1...UInt64.max))
        }
        if field("x-wns-requestforstatus") == "true", let name = HTTPField.Name("X-WNS-DeviceConnectionStatus") {
            extra[name] = "connected"
        }
        return answer(Self.wns(200, headers: extra), reason: nil)
    }
}
