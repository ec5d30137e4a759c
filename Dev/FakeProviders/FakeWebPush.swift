import Crypto
import Foundation
import HTTPTypes
import Hummingbird
import PushModels

/// A fake Web Push service (RFC 8030) that also takes simple push wake-ups:
///
/// - `POST /wp/{id}`: a push message. Checked as autopush and the browsers' services
///   check it: VAPID (RFC 8292: `Authorization: vapid t=<JWT>, k=<key>`, an ES256
///   signature by `k`, `aud` the origin the request went to, `exp` in the future and
///   at most 24 hours away, a `sub`, and `k` the key the subscription was made with),
///   `Content-Encoding: aes128gcm` with a well-formed RFC 8188 header (salt, record size,
///   a 65-byte key id), `TTL`, `Urgency` and `Topic` syntax, 4096 bytes at most.
///   Answers 201 with a `Location`; errors are autopush's JSON (`code`, `errno`, `error`,
///   `message`).
/// - `PUT /sp/{id}`: a simple push wake-up, body `version=<n>` (or empty); answers 200 `{}`.
///   `POST /sp/{id}`: a UnifiedPush message, checked as a Web Push message, VAPID optional.
///
/// The endpoint a device registers is this server's URL with the path; the recorded
/// push's `token` is that URL. The body is recorded as `{"aes128gcm": base64url}` (or
/// `{"version": n}`) for the device side to decrypt.
public struct FakeWebPush: Sendable {
    public let state: FakeState
    /// The VAPID public key (65 bytes) subscriptions were made with; nil accepts any key.
    let applicationServerKey: [UInt8]?

    static let maxBodyBytes = 4096
    static let urgencies: Set<String> = ["very-low", "low", "normal", "high"]

    public init(state: FakeState, applicationServerKey: [UInt8]?) {
        self.state = state
        self.applicationServerKey = applicationServerKey
    }

    public func addRoutes(to router: Router<BasicRequestContext>) {
        router.post("/wp/:id") { request, _ in try await message(request, provider: "webpush", vapidRequired: true) }
        router.post("/sp/:id") { request, _ in try await message(request, provider: "simplepush", vapidRequired: false)
        }
        router.put("/sp/:id") { request, _ in try await wakeUp(request) }
        // A feedback-hook receiver (gorush's API): records each POST; `/hook/fail-N-…`
        // answers 503 to the first N deliveries of that path, to exercise the retries.
        router.post("/hook/:id") { request, context in
            let id = context.parameters.get("id") ?? ""
            var request = request
            let bytes = Array(try await request.collectBody(upTo: 1 << 20).readableBytesView)
            var headers: [String: String] = [:]
            for field in request.headers { headers[field.name.canonicalName] = field.value }
            let earlier = state.received(provider: "hook").filter { $0.token == id }.count
            let failures = id.hasPrefix("fail-") ? Int(id.dropFirst(5).prefix { $0.isNumber }) ?? 0 : 0
            let status = earlier < failures ? 503 : 200
            state.record(
                ReceivedPush(
                    provider: "hook", token: id, headers: headers,
                    body: (try? Wire.decode(JSONValue.self, from: bytes)) ?? .null, status: status,
                    reason: String(decoding: bytes, as: UTF8.self), httpVersion: httpVersion(request),
                    receivedAtMs: Wire.nowMillis()))
            return Response(status: .init(code: status))
        }
        for method in [HTTPRequest.Method.get, .put, .delete, .patch] {
            router.on("/wp/:id", method: method) { _, _ in
                Self.autopush(405, errno: 999, "Method not allowed")
            }
        }
    }

    /// autopush's error body.
    static func autopush(_ status: Int, errno: Int, _ message: String, headers: HTTPFields = [:]) -> Response {
        var headers = headers
        headers[.contentType] = "application/json"
        let error = HTTPResponse.Status(code: status).reasonPhrase
        let body: JSONValue = [
            "code": .int(Int64(status)), "errno": .int(Int64(errno)), "error": .string(error),
            "message": .string(message),
        ]
        return Response(
            status: .init(code: status), headers: headers,
            body: .init(byteBuffer: ByteBuffer(bytes: Wire.canonical(body))))
    }

    func endpoint(_ request: Request) -> (url: String, origin: String) {
        let authority = request.head.authority ?? ""
        return ("https://\(authority)\(request.uri.path)", "https://\(authority)")
    }

    func message(_ request: Request, provider: String, vapidRequired: Bool) async throws -> Response {
        var request = request
        let (url, origin) = endpoint(request)
        func field(_ name: String) -> String? { HTTPField.Name(name).flatMap { request.headers[$0] } }
        var headers: [String: String] = [:]
        for name in ["content-encoding", "content-type", "ttl", "urgency", "topic"] {
            if let value = field(name) { headers[name] = value }
        }
        let bytes = Array(try await request.collectBody(upTo: 1 << 20).readableBytesView)
        func answer(_ response: Response, reason: String?) -> Response {
            state.record(
                ReceivedPush(
                    provider: provider, token: url, headers: headers,
                    body: ["aes128gcm": .string(Base64URL.encode(bytes))], status: Int(response.status.code),
                    reason: reason, httpVersion: httpVersion(request), receivedAtMs: Wire.nowMillis()))
            return response
        }
        if let authorization = field("authorization") {
            switch Self.checkVAPID(authorization, origin: origin, expectedKey: applicationServerKey, now: Date()) {
            case .success(let key): headers["vapid_k"] = Base64URL.encode(key)
            case .failure(let failure):
                return answer(Self.autopush(failure.status, errno: 109, failure.message), reason: failure.reason)
            }
        } else if vapidRequired {
            return answer(Self.autopush(401, errno: 109, "Missing Authorization header"), reason: "vapid_missing")
        }
        guard let ttl = field("ttl") else {
            return answer(Self.autopush(400, errno: 111, "Missing TTL header"), reason: "ttl_missing")
        }
        guard Syntax.parseUInt64(Substring(ttl)) != nil else {
            return answer(Self.autopush(400, errno: 112, "Invalid TTL header"), reason: "ttl_invalid")
        }
        if let urgency = field("urgency"), !Self.urgencies.contains(urgency) {
            return answer(Self.autopush(400, errno: 112, "Invalid Urgency header"), reason: "urgency_invalid")
        }
        if let topic = field("topic"),
            topic.isEmpty || topic.utf8.count > 32 || !topic.utf8.allSatisfy(Base64URL.isAlphabet)
        {
            return answer(
                Self.autopush(400, errno: 113, "Topic must be at most 32 base64url characters"), reason: "topic_invalid"
            )
        }
        guard field("content-encoding")?.lowercased() == "aes128gcm" else {
            return answer(Self.autopush(400, errno: 110, "Unknown Content-Encoding"), reason: "encoding_invalid")
        }
        guard bytes.count <= Self.maxBodyBytes else {
            return answer(Self.autopush(413, errno: 104, "Body too large"), reason: "too_large")
        }
        if let problem = Self.framingProblem(bytes) {
            return answer(Self.autopush(400, errno: 110, problem), reason: "framing")
        }
        if let injected = state.nextInjected(provider: provider) {
            var extra: HTTPFields = [:]
            if let seconds = injected.retryAfterSeconds { extra[.retryAfter] = String(seconds) }
            return answer(
                Self.autopush(injected.status, errno: 999, injected.reason, headers: extra), reason: injected.reason)
        }
        if state.fcmUnregistered(url) {
            return answer(Self.autopush(410, errno: 106, "Request did not validate UAID not valid"), reason: "gone")
        }
        var extra: HTTPFields = [:]
        extra[.location] = "\(origin)/m/\(UUID().uuidString.lowercased())"
        if let name = HTTPField.Name("TTL") { extra[name] = ttl }
        return answer(Response(status: .created, headers: extra), reason: nil)
    }

    func wakeUp(_ request: Request) async throws -> Response {
        var request = request
        let (url, _) = endpoint(request)
        let body = String(decoding: try await request.collectBody(upTo: 64 * 1024).readableBytesView, as: UTF8.self)
        let version = formFields(body)["version"]
        func answer(_ status: Int, _ reason: String?) -> Response {
            state.record(
                ReceivedPush(
                    provider: "simplepush", token: url,
                    headers: request.headers[.contentType].map { ["content-type": $0] } ?? [:],
                    body: ["version": version.flatMap { Int64($0) }.map(JSONValue.int) ?? .null], status: status,
                    reason: reason, httpVersion: httpVersion(request), receivedAtMs: Wire.nowMillis()))
            return Response(
                status: .init(code: status), headers: [.contentType: "application/json"],
                body: .init(byteBuffer: ByteBuffer(string: "{}")))
        }
        // SimplePush took `version=<n>` (n a non-negative integer) or nothing.
        if !body.isEmpty && version.flatMap({ Syntax.parseUInt64(Substring($0)) }) == nil {
            return answer(400, "version_invalid")
        }
        if let injected = state.nextInjected(provider: "simplepush") { return answer(injected.status, injected.reason) }
        if state.fcmUnregistered(url) { return answer(404, "unknown_endpoint") }
        return answer(200, nil)
    }

    struct VAPIDFailure: Error {
        var status: Int
        var reason: String
        var message: String
    }

    /// RFC 8292 §3: `vapid t=<JWT>, k=<base64url key>`; the JWT is checked with `k`.
    /// Returns the key.
    static func checkVAPID(_ authorization: String, origin: String, expectedKey: [UInt8]?, now: Date)
        -> Result<[UInt8], VAPIDFailure>
    {
        func fail(_ reason: String, _ message: String, status: Int = 401) -> Result<[UInt8], VAPIDFailure> {
            .failure(VAPIDFailure(status: status, reason: reason, message: message))
        }
        let trimmed = authorization.trimmingCharacters(in: .whitespaces)
        guard trimmed.lowercased().hasPrefix("vapid ") else { return fail("vapid_scheme", "Unknown auth scheme") }
        var parameters: [String: String] = [:]
        for part in trimmed.dropFirst(6).split(separator: ",") {
            let pair = part.trimmingCharacters(in: .whitespaces).split(separator: "=", maxSplits: 1)
            guard pair.count == 2 else { return fail("vapid_syntax", "Malformed Authorization header") }
            parameters[pair[0].lowercased()] = String(pair[1])
        }
        guard let token = parameters["t"], let keyText = parameters["k"], let key = Base64URL.decode(keyText),
            key.count == 65, let publicKey = try? P256.Signing.PublicKey(x963Representation: key)
        else { return fail("vapid_syntax", "Authorization needs t= and a P-256 k=") }
        if let expectedKey, expectedKey != key {
            return fail("vapid_key_mismatch", "The key is not the subscription's applicationServerKey", status: 403)
        }
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, let headerBytes = Base64URL.decode(String(parts[0])),
            let claimsBytes = Base64URL.decode(String(parts[1])), let signature = Base64URL.decode(String(parts[2])),
            let header = try? Wire.decode(JSONValue.self, from: headerBytes),
            let claims = try? Wire.decode(JSONValue.self, from: claimsBytes)
        else { return fail("vapid_jwt", "The token is not a JWT") }
        guard header["alg"]?.stringValue == "ES256" else { return fail("vapid_alg", "The token must be ES256") }
        guard let ecdsa = try? P256.Signing.ECDSASignature(rawRepresentation: signature),
            publicKey.isValidSignature(ecdsa, for: Array("\(parts[0]).\(parts[1])".utf8))
        else { return fail("vapid_signature", "The token's signature does not verify with k") }
        guard claims["aud"]?.stringValue == origin else {
            return fail("vapid_aud", "aud must be the push resource's origin \(origin)")
        }
        // A NumericDate (RFC 7519 §2): seconds, possibly with a fraction.
        let exp: Int64
        switch claims["exp"] {
        case .int(let value)?: exp = value
        case .double(let value)? where value.isFinite && abs(value) < 1e15: exp = Int64(value)
        default: return fail("vapid_exp", "exp is required")
        }
        let nowSeconds = Int64(now.timeIntervalSince1970)
        guard exp > nowSeconds else { return fail("vapid_expired", "The token has expired") }
        guard exp <= nowSeconds + 24 * 3600 + 60 else {
            return fail("vapid_exp", "exp must be at most 24 hours in the future")
        }
        guard let sub = claims["sub"]?.stringValue, sub.hasPrefix("mailto:") || sub.hasPrefix("https:") else {
            return fail("vapid_sub", "sub must be a mailto: or https: URI")
        }
        return .success(key)
    }

    /// RFC 8188 §2.1 header (salt 16, rs 4, idlen 1, keyid), RFC 8291 §4's 65-byte key
    /// id, and at least one record with its 16-byte tag.
    static func framingProblem(_ body: [UInt8]) -> String? {
        guard body.count >= 21 else { return "aes128gcm body shorter than its header" }
        let rs = body[16..<20].reduce(UInt32(0)) { $0 << 8 | UInt32($1) }
        let idlen = Int(body[20])
        guard rs >= 18 else { return "aes128gcm record size below 18" }
        guard idlen == 65, body.count >= 21 + idlen + 17, body[21] == 0x04 else {
            return "aes128gcm key id must be the 65-byte sender public key"
        }
        guard body.count - 21 - idlen <= Int(rs) else { return "aes128gcm with more than one record" }
        return nil
    }
}
