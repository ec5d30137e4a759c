import Foundation
import Hummingbird
import PushModels
import Synchronization

/// Access tokens one fake issued: a token from another fake (or another app) is refused,
/// as Huawei refuses app A's token for app B. Expiry is `FakeState`'s.
final class IssuedAccessTokens: Sendable {
    private let tokens = Mutex<Set<String>>([])

    func issue(_ state: FakeState, validFor seconds: TimeInterval) -> String {
        let token = state.issueAccessToken(validFor: seconds)
        tokens.withLock { _ = $0.insert(token) }
        return token
    }

    func issued(_ token: String) -> Bool { tokens.withLock { $0.contains(token) } }
}

/// An `application/x-www-form-urlencoded` body as fields ('+' is a space).
func formFields(_ body: String) -> [String: String] {
    var fields: [String: String] = [:]
    for pair in body.split(separator: "&") {
        let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
        guard parts.count == 2 else { continue }
        let decode = { (text: Substring) in text.replacingOccurrences(of: "+", with: " ").removingPercentEncoding }
        if let name = decode(parts[0]), let value = decode(parts[1]) { fields[name] = value }
    }
    return fields
}

/// A fake Huawei Push Kit: the OAuth 2.0 token endpoint (`POST /oauth2/v3/token`) and
/// the v1 server API (`POST /v1/{appId}/messages:send`), with Huawei's answers: every
/// send answer is `{"code","msg","requestId"}`, and the HTTP status goes with the code.
///
/// Huawei's references: "Sending Downlink Messages" (HMSCore-References
/// https-send-api-0000001050986197) and the account server error codes
/// (https://developer.huawei.com/consumer/en/doc/doccenter-references/api/account-server-error-code/).
public struct FakeHMS: Sendable {
    public let state: FakeState
    let appID: String
    let clientID: String
    let clientSecret: String
    let issued = IssuedAccessTokens()

    /// Huawei's token lifetime.
    static let tokenLifetime = 3600
    /// The message body, without the tokens, at most.
    static let maxMessageBytes = 4096
    static let maxTokens = 1000

    public init(state: FakeState, appID: String, clientID: String, clientSecret: String) {
        self.state = state
        self.appID = appID
        self.clientID = clientID
        self.clientSecret = clientSecret
    }

    public func addRoutes(to router: Router<BasicRequestContext>) {
        router.post("/oauth2/v3/token") { request, _ in try await token(request) }
        router.post("/v1/:appId/messages:send") { request, context in
            try await send(request, appID: context.parameters.get("appId") ?? "")
        }
    }

    static func json(_ status: Int, _ body: JSONValue, retryAfter: Int? = nil) -> Response {
        var headers: HTTPFields = [.contentType: "application/json;charset=UTF-8"]
        if let retryAfter { headers[.retryAfter] = String(retryAfter) }
        return Response(
            status: .init(code: status), headers: headers,
            body: .init(byteBuffer: ByteBuffer(bytes: Wire.canonical(body))))
    }

    /// Huawei's request ids: a long run of digits.
    static func requestID() -> String {
        String(UInt64.random(in: 100_000_000_000...999_999_999_999)) + String(UInt64.random(in: 1_000_000...9_999_999))
    }

    /// A Push Kit answer.
    static func answer(_ status: Int, _ code: String, _ msg: String, retryAfter: Int? = nil) -> Response {
        json(
            status, ["code": .string(code), "msg": .string(msg), "requestId": .string(requestID())],
            retryAfter: retryAfter)
    }

    func token(_ request: Request) async throws -> Response {
        var request = request
        func oauthError(_ subError: Int?, _ description: String) -> Response {
            var body: [String: JSONValue] = ["error": 1101, "error_description": .string(description)]
            if let subError { body["sub_error"] = .int(Int64(subError)) }
            return Self.json(400, .object(body))
        }
        guard request.headers[.contentType]?.lowercased().hasPrefix("application/x-www-form-urlencoded") == true
        else { return oauthError(nil, "invalid request content type") }
        let body = String(decoding: try await request.collectBody(upTo: 64 * 1024).readableBytesView, as: UTF8.self)
        let form = formFields(body)
        guard form["grant_type"] == "client_credentials" else { return oauthError(nil, "unsupported grant_type") }
        guard let id = form["client_id"], !id.isEmpty, id.utf8.count <= 64,
            id.utf8.allSatisfy({ (0x30...0x39).contains($0) })
        else { return oauthError(20002, "invalid client_id") }
        guard id == clientID else { return oauthError(20003, "client_id does not exist") }
        guard let secret = form["client_secret"], !secret.isEmpty else {
            return oauthError(20171, "client_secret is empty")
        }
        guard secret == clientSecret else { return oauthError(12304, "invalid client_secret") }
        let token = issued.issue(state, validFor: TimeInterval(Self.tokenLifetime))
        return Self.json(
            200,
            ["access_token": .string(token), "expires_in": .int(Int64(Self.tokenLifetime)), "token_type": "Bearer"])
    }

    func send(_ request: Request, appID pathAppID: String) async throws -> Response {
        var request = request
        let bytes = Array(try await request.collectBody(upTo: 1 << 20).readableBytesView)
        let json = try? Wire.decode(JSONValue.self, from: bytes)
        let message = json?["message"]
        let tokens = message?["token"]?.arrayValue?.compactMap(\.stringValue) ?? []
        var headers: [String: String] = [:]
        for (key, value) in message?["android"]?.objectValue ?? [:] {
            headers["android.\(key)"] = value.stringValue ?? String(decoding: Wire.canonical(value), as: UTF8.self)
        }
        // `validate_only`: checked as a send is, answered as one, delivered to no device.
        if json?["validate_only"] == .bool(true) { headers["validate_only"] = "true" }
        let data = message?["data"]?.stringValue
        // The data string as the app reads it: JSON when it is JSON.
        let body = data.map { text in (try? Wire.decode(JSONValue.self, from: Array(text.utf8))) ?? .string(text) }
        func answer(_ response: Response, code: String) -> Response {
            for token in tokens.isEmpty ? [""] : tokens {
                state.record(
                    ReceivedPush(
                        provider: "hms", token: token, headers: headers, body: body ?? .null,
                        status: Int(response.status.code), reason: code == "80000000" ? nil : code,
                        httpVersion: httpVersion(request), receivedAtMs: Wire.nowMillis()))
            }
            return response
        }

        guard let authorization = request.headers[.authorization], authorization.hasPrefix("Bearer "),
            issued.issued(String(authorization.dropFirst(7)))
        else {
            return answer(Self.answer(401, "80200001", "Oauth authentication error"), code: "80200001")
        }
        guard state.accessTokenValid(String(authorization.dropFirst(7))) else {
            return answer(Self.answer(401, "80200003", "Oauth Token expired."), code: "80200003")
        }
        // A token obtained for one app is refused for another.
        guard pathAppID == appID else {
            return answer(Self.answer(401, "80200001", "Oauth authentication error"), code: "80200001")
        }
        guard case .object(var fields) = message ?? .null else {
            return answer(
                Self.answer(400, "80100003", "Illegal payload, message structure is invalid"), code: "80100003")
        }
        if let validateOnly = json?["validate_only"], validateOnly != .bool(true), validateOnly != .bool(false) {
            return answer(Self.answer(400, "80100001", "Illegal parameter: validate_only"), code: "80100001")
        }
        guard message?["token"]?.arrayValue?.count == tokens.count, (1...Self.maxTokens).contains(tokens.count) else {
            return answer(
                Self.answer(400, "80300010", "The number of tokens in the message body exceeds the default value"),
                code: "80300010")
        }
        if let value = fields["data"], value.stringValue == nil {
            return answer(Self.answer(400, "80100003", "Illegal payload, data must be a string"), code: "80100003")
        }
        guard data != nil || fields["notification"] != nil || fields["android"]?["notification"] != nil else {
            return answer(Self.answer(400, "80100003", "Illegal payload, no data or notification"), code: "80100003")
        }
        fields["token"] = nil
        guard (data?.utf8.count ?? 0) <= Self.maxMessageBytes,
            Wire.canonical(.object(fields)).count <= Self.maxMessageBytes
        else {
            return answer(
                Self.answer(413, "80300008", "The message body size exceeds the default value"), code: "80300008")
        }
        if let problem = Self.androidProblem(message?["android"]) {
            return answer(Self.answer(400, problem.code, problem.msg), code: problem.code)
        }
        if let injected = state.nextInjected(provider: "hms") {
            return answer(
                Self.answer(
                    injected.status, injected.reason, "Injected failure", retryAfter: injected.retryAfterSeconds),
                code: injected.reason)
        }
        let illegal = tokens.filter { state.fcmUnregistered($0) }
        if illegal.count == tokens.count {
            return answer(Self.answer(400, "80300007", "All the tokens are invalid"), code: "80300007")
        }
        if !illegal.isEmpty {
            let detail: JSONValue = [
                "success": .int(Int64(tokens.count - illegal.count)), "failure": .int(Int64(illegal.count)),
                "illegal_tokens": .array(illegal.map { .string($0) }),
            ]
            return answer(
                Self.answer(200, "80100000", String(decoding: Wire.canonical(detail), as: UTF8.self)), code: "80100000")
        }
        return answer(Self.answer(200, "80000000", "Success"), code: "80000000")
    }

    /// `message.android` as the API takes it: `urgency` HIGH or NORMAL, `ttl` seconds
    /// (`"86400s"`, up to 15 days), `collapse_key` an integer from -1 to 100.
    static func androidProblem(_ android: JSONValue?) -> (code: String, msg: String)? {
        guard let android else { return nil }
        guard case .object = android else { return ("80100003", "Illegal payload, android must be an object") }
        if let urgency = android["urgency"], urgency != "HIGH" && urgency != "NORMAL" {
            return ("80100001", "Illegal parameter: urgency must be HIGH or NORMAL")
        }
        if let ttl = android["ttl"] {
            guard let text = ttl.stringValue, let seconds = ttlSeconds(text), seconds <= 1_296_000 else {
                return ("80100001", "Illegal parameter: ttl")
            }
        }
        if let key = android["collapse_key"] {
            guard let value = key.intValue, (-1...100).contains(value) else {
                return ("80100013", "Illegal parameter: collapse_key must be an integer from -1 to 100")
            }
        }
        return nil
    }

    /// `\d+|\d+[sS]|\d+.\d{1,9}|\d+.\d{1,9}[sS]`, in whole seconds.
    static func ttlSeconds(_ text: String) -> UInt64? {
        var body = Substring(text)
        if body.hasSuffix("s") || body.hasSuffix("S") { body = body.dropLast() }
        let parts = body.split(separator: ".", maxSplits: 1, omittingEmptySubsequences: false)
        guard let whole = parts.first, let seconds = Syntax.parseUInt64(whole) else { return nil }
        if parts.count == 2 {
            guard (1...9).contains(parts[1].count), Syntax.parseUInt64(parts[1]) != nil else { return nil }
        }
        return seconds
    }
}
