import Foundation
import HTTPTypes
import Hummingbird
import JWTKit
import PushModels

/// The claims APNs reads from a provider token (declared apart from the client's, like
/// the fake FCM's, so the fake checks Apple's contract independently).
struct APNsProviderClaims: JWTPayload {
    var iss: IssuerClaim
    var iat: IssuedAtClaim

    func verify(using algorithm: some JWTAlgorithm) throws {}
}

/// A fake APNs provider API: `POST /3/device/<token>` over HTTP/2 and TLS, checking
/// what Apple checks (docs/protocols.md §2) and answering with Apple's reason bodies.
public struct FakeAPNs: Sendable {
    public let state: FakeState
    let teamID: String
    let keyID: String
    let keys: JWTKeyCollection
    /// Bundle ids the fake accepts as `apns-topic`; empty accepts any.
    public var allowedTopics: Set<String>

    static let pushTypes: Set<String> = [
        "alert", "background", "voip", "complication", "fileprovider", "mdm", "location", "liveactivity",
        "pushtotalk", "widgets", "controls",
    ]

    public init(state: FakeState, credentials: FakeCredentials, allowedTopics: Set<String> = []) async throws {
        self.state = state
        self.teamID = credentials.apnsTeamID
        self.keyID = credentials.apnsKeyID
        self.allowedTopics = allowedTopics
        let keys = JWTKeyCollection()
        await keys.add(
            ecdsa: try ES256PublicKey(pem: try credentials.apnsPublicKeyPEM()), kid: JWKIdentifier(string: keyID))
        // The team's second key: both are good until one is revoked.
        if !credentials.apnsSecondPrivateKeyPEM.isEmpty {
            await keys.add(
                ecdsa: try ES256PublicKey(pem: try credentials.apnsSecondPublicKeyPEM()),
                kid: JWKIdentifier(string: credentials.apnsSecondKeyID))
        }
        self.keys = keys
    }

    public func addRoutes(to router: Router<BasicRequestContext>) {
        router.post("/3/device/:token") { request, context in
            try await handle(request, token: context.parameters.get("token") ?? "")
        }
        for method in [HTTPRequest.Method.get, .put, .delete] {
            router.on("/3/device/:token", method: method) { _, _ in
                Self.error(405, "MethodNotAllowed")
            }
        }
    }

    static func error(_ status: Int, _ reason: String, timestampMs: Int64? = nil, retryAfter: Int? = nil) -> Response {
        var body: [String: JSONValue] = ["reason": .string(reason)]
        if let timestampMs { body["timestamp"] = .int(timestampMs) }
        var headers: HTTPFields = [.contentType: "application/json"]
        if let retryAfter { headers[.retryAfter] = String(retryAfter) }
        return Response(
            status: .init(code: status), headers: headers,
            body: .init(byteBuffer: ByteBuffer(bytes: Wire.canonical(.object(body)))))
    }

    func handle(_ request: Request, token rawToken: String) async throws -> Response {
        var request = request
        let body = try await request.collectBody(upTo: 1 << 20)
        let bytes = Array(body.readableBytesView)
        func header(_ name: String) -> String? {
            HTTPField.Name(name).flatMap { request.headers[$0] }
        }
        let recorded: [String: String] = [
            "apns-topic": header("apns-topic"), "apns-push-type": header("apns-push-type"),
            "apns-priority": header("apns-priority"), "apns-expiration": header("apns-expiration"),
            "apns-id": header("apns-id"), "apns-collapse-id": header("apns-collapse-id"),
            // Which of the team's keys signed the provider token (a key rotation shows here).
            "provider-token-kid": header("authorization").flatMap(Self.keyID),
        ].compactMapValues { $0 }
        let json = (try? Wire.decode(JSONValue.self, from: bytes)) ?? .null

        func answer(_ response: Response, reason: String?) -> Response {
            state.record(
                ReceivedPush(
                    provider: "apns", token: rawToken, headers: recorded, body: json, status: Int(response.status.code),
                    reason: reason, httpVersion: httpVersion(request), receivedAtMs: Wire.nowMillis()))
            return response
        }
        func fail(_ status: Int, _ reason: String, timestampMs: Int64? = nil, retryAfter: Int? = nil) -> Response {
            answer(Self.error(status, reason, timestampMs: timestampMs, retryAfter: retryAfter), reason: reason)
        }

        // APNs speaks HTTP/2 only.
        guard httpVersion(request) == "2" else { return fail(505, "HTTP2Required") }
        // Authentication first, as Apple does.
        guard let authorization = header("authorization") else { return fail(403, "MissingProviderToken") }
        guard authorization.lowercased().hasPrefix("bearer ") else { return fail(403, "InvalidProviderToken") }
        let jwt = String(authorization.dropFirst(7))
        if let problem = await verify(jwt) { return fail(403, problem) }

        guard !rawToken.isEmpty else { return fail(400, "MissingDeviceToken") }
        guard rawToken.utf8.count % 2 == 0, rawToken.allSatisfy(\.isHexDigit) else {
            return fail(400, "BadDeviceToken")
        }
        guard let topic = recorded["apns-topic"], !topic.isEmpty else { return fail(400, "MissingTopic") }
        if !allowedTopics.isEmpty && !allowedTopics.contains(topic.replacingOccurrences(of: ".voip", with: "")) {
            return fail(400, "TopicDisallowed")
        }
        guard let pushType = recorded["apns-push-type"], Self.pushTypes.contains(pushType) else {
            return fail(400, "InvalidPushType")
        }
        let priority = recorded["apns-priority"].flatMap { Int($0) } ?? 10
        guard recorded["apns-priority"] == nil || [10, 5, 1].contains(priority) else { return fail(400, "BadPriority") }
        if pushType == "background" && priority == 10 { return fail(400, "BadPriority") }
        if let id = recorded["apns-id"] {
            guard UUID(uuidString: id) != nil, id == id.lowercased() else { return fail(400, "BadMessageId") }
        }
        if let expiration = recorded["apns-expiration"], Int64(expiration) == nil {
            return fail(400, "BadExpirationDate")
        }
        if let collapse = recorded["apns-collapse-id"], collapse.utf8.count > 64 { return fail(400, "BadCollapseId") }
        guard !bytes.isEmpty else { return fail(400, "PayloadEmpty") }
        let limit = pushType == "voip" ? 5120 : 4096
        guard bytes.count <= limit else { return fail(413, "PayloadTooLarge") }
        guard case .object = json else { return fail(400, "BadPayload") }

        if let delay = state.delay(provider: "apns") { try? await Task.sleep(for: delay) }
        if let injected = state.nextInjected(provider: "apns") {
            return fail(injected.status, injected.reason, retryAfter: injected.retryAfterSeconds)
        }
        if let timestamp = state.apnsUnregistered(rawToken.lowercased()) {
            return fail(410, "Unregistered", timestampMs: timestamp)
        }
        var headers: HTTPFields = [:]
        headers[HTTPField.Name("apns-id")!] = recorded["apns-id"] ?? UUID().uuidString.lowercased()
        return answer(Response(status: .ok, headers: headers), reason: nil)
    }

    /// The `kid` of a `bearer <JWT>`'s header, unverified (what is recorded, not trusted).
    static func keyID(_ authorization: String) -> String? {
        guard let jwt = authorization.split(separator: " ").last,
            let header = jwt.split(separator: ".").first, let bytes = Base64URL.decode(String(header)),
            let json = try? Wire.decode(JSONValue.self, from: bytes)
        else { return nil }
        return json["kid"]?.stringValue
    }

    /// Checks a provider token: signature by the team's key, key id, issuer, age.
    /// Returns the APNs reason when it is not acceptable.
    func verify(_ jwt: String) async -> String? {
        let issuedAt: Date
        if let cached = state.verifiedAPNsToken(jwt) {
            issuedAt = cached
        } else {
            guard let claims = try? await keys.verify(jwt, as: APNsProviderClaims.self) else {
                return "InvalidProviderToken"
            }
            guard claims.iss.value == teamID else { return "InvalidProviderToken" }
            issuedAt = claims.iat.value
            state.rememberAPNsToken(jwt, issuedAt: issuedAt)
        }
        if Date().timeIntervalSince(issuedAt) > 3600 { return "ExpiredProviderToken" }
        return nil
    }
}

/// Hummingbird hands HTTP/1.1 requests over with scheme "http" (even under TLS) and
/// HTTP/2 requests with the client's `:scheme` ("https"), which tells the two apart.
func httpVersion(_ request: Request) -> String {
    request.head.scheme == "https" ? "2" : "1.1"
}
