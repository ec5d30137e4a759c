import Foundation
import Hummingbird
import JWTKit
import PushModels

/// The claims of a Google OAuth2 JWT-bearer assertion. Declared here apart from the
/// client's own type on purpose: the fake checks Google's contract, not the client's
/// idea of it, so a mistake in the client cannot be mirrored by the fake.
struct AssertionClaims: JWTPayload {
    var iss: IssuerClaim
    var scope: String
    var aud: AudienceClaim
    var iat: IssuedAtClaim
    var exp: ExpirationClaim

    func verify(using algorithm: some JWTAlgorithm) throws {}
}

/// A fake FCM: the OAuth2 token endpoint (`POST /token`) and HTTP v1
/// `POST /v1/projects/{project}/messages:send`, with Google's error bodies.
public struct FakeFCM: Sendable {
    public let state: FakeState
    let projectID: String
    let clientEmail: String
    let keys: JWTKeyCollection
    /// The URL the dispatcher must use as the assertion's audience.
    let tokenURI: String

    public init(state: FakeState, credentials: FakeCredentials, baseURL: String) async throws {
        self.state = state
        self.projectID = credentials.fcmProjectID
        self.clientEmail = credentials.fcmClientEmail
        self.tokenURI = "\(baseURL)/token"
        let keys = JWTKeyCollection()
        await keys.add(
            rsa: try Insecure.RSA.PublicKey(pem: try credentials.fcmPublicKeyPEM()), digestAlgorithm: .sha256,
            kid: JWKIdentifier(string: credentials.fcmPrivateKeyID))
        self.keys = keys
    }

    public func addRoutes(to router: Router<BasicRequestContext>) {
        router.post("/token") { request, _ in try await token(request) }
        router.post("/v1/projects/:project/messages:send") { request, context in
            try await send(request, project: context.parameters.get("project") ?? "")
        }
    }

    static func json(_ status: Int, _ body: JSONValue, retryAfter: Int? = nil) -> Response {
        var headers: HTTPFields = [.contentType: "application/json; charset=UTF-8"]
        if let retryAfter { headers[.retryAfter] = String(retryAfter) }
        return Response(
            status: .init(code: status), headers: headers,
            body: .init(byteBuffer: ByteBuffer(bytes: Wire.canonical(body))))
    }

    static let grpcStatus: [Int: String] = [
        400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 404: "NOT_FOUND",
        429: "RESOURCE_EXHAUSTED", 500: "INTERNAL", 503: "UNAVAILABLE",
    ]

    /// An FCM v1 error: google.rpc.Status with an FcmError detail carrying `errorCode`.
    static func fcmError(_ status: Int, _ errorCode: String?, _ message: String, retryAfter: Int? = nil) -> Response {
        var details: [JSONValue] = []
        if let errorCode {
            details.append([
                "@type": "type.googleapis.com/google.firebase.fcm.v1.FcmError", "errorCode": .string(errorCode),
            ])
        }
        return json(
            status,
            [
                "error": [
                    "code": .int(Int64(status)), "message": .string(message),
                    "status": .string(grpcStatus[status] ?? "UNKNOWN"), "details": .array(details),
                ]
            ], retryAfter: retryAfter)
    }

    /// A payload problem: google.rpc.BadRequest naming the field, no FcmError.
    static func badRequest(field: String, _ message: String) -> Response {
        json(
            400,
            [
                "error": [
                    "code": 400, "message": .string(message), "status": "INVALID_ARGUMENT",
                    "details": [
                        [
                            "@type": "type.googleapis.com/google.rpc.BadRequest",
                            "fieldViolations": [["field": .string(field), "description": .string(message)]],
                        ]
                    ],
                ]
            ])
    }

    func token(_ request: Request) async throws -> Response {
        var request = request
        let body = String(decoding: try await request.collectBody(upTo: 64 * 1024).readableBytesView, as: UTF8.self)
        var form: [String: String] = [:]
        for pair in body.split(separator: "&") {
            let parts = pair.split(separator: "=", maxSplits: 1)
            if parts.count == 2 { form[String(parts[0])] = String(parts[1]).removingPercentEncoding }
        }
        func oauthError(_ error: String, _ description: String) -> Response {
            Self.json(400, ["error": .string(error), "error_description": .string(description)])
        }
        guard form["grant_type"] == "urn:ietf:params:oauth:grant-type:jwt-bearer" else {
            return oauthError("unsupported_grant_type", "Invalid grant_type")
        }
        guard let assertion = form["assertion"],
            let claims = try? await keys.verify(assertion, as: AssertionClaims.self)
        else { return oauthError("invalid_grant", "Invalid JWT Signature.") }
        guard claims.iss.value == clientEmail else { return oauthError("invalid_grant", "Invalid issuer") }
        guard claims.aud.value.contains(tokenURI) else {
            return oauthError(
                "invalid_grant", "Invalid JWT: Token must be a short-lived token and in a reasonable timeframe")
        }
        guard claims.scope.split(separator: " ").contains("https://www.googleapis.com/auth/firebase.messaging") else {
            return oauthError("invalid_scope", "Invalid OAuth scope")
        }
        let lifetime = claims.exp.value.timeIntervalSince(claims.iat.value)
        guard lifetime > 0, lifetime <= 3600, claims.exp.value > Date() else {
            return oauthError("invalid_grant", "Invalid JWT: Token must be a short-lived token (60 minutes)")
        }
        let token = state.issueAccessToken(validFor: 3599)
        return Self.json(200, ["access_token": .string(token), "expires_in": 3599, "token_type": "Bearer"])
    }

    func send(_ request: Request, project: String) async throws -> Response {
        var request = request
        let bytes = Array(try await request.collectBody(upTo: 1 << 20).readableBytesView)
        let json = (try? Wire.decode(JSONValue.self, from: bytes)) ?? .null
        let message = json["message"]
        let token = message?["token"]?.stringValue ?? ""
        var headers: [String: String] = [:]
        if let android = message?["android"]?.objectValue {
            for (key, value) in android { headers["android.\(key)"] = value.stringValue ?? "\(value)" }
        }
        // The block FCM hands APNs for iOS apps, as sent (canonical JSON).
        if let apns = message?["apns"], apns != .null {
            headers["apns"] = String(decoding: Wire.canonical(apns), as: UTF8.self)
        }
        // A notification message's visible part, as FCM v1 takes it (`notification.title`, …).
        if let notification = message?["notification"]?.objectValue {
            for (key, value) in notification { headers["notification.\(key)"] = value.stringValue ?? "\(value)" }
        }
        // `validate_only`: checked as a send is, answered as one, delivered to no device.
        let validateOnly = json["validate_only"] == .bool(true)
        if validateOnly { headers["validate_only"] = "true" }
        func answer(_ response: Response, reason: String?) -> Response {
            state.record(
                ReceivedPush(
                    provider: "fcm", token: token, headers: headers, body: message?["data"] ?? .null,
                    status: Int(response.status.code), reason: reason, httpVersion: httpVersion(request),
                    receivedAtMs: Wire.nowMillis()))
            return response
        }

        guard let authorization = request.headers[.authorization], authorization.hasPrefix("Bearer "),
            state.accessTokenValid(String(authorization.dropFirst(7)))
        else {
            return answer(
                Self.fcmError(
                    401, nil,
                    "Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other valid authentication credential."
                ), reason: "UNAUTHENTICATED")
        }
        guard project == projectID else {
            return answer(
                Self.fcmError(403, "SENDER_ID_MISMATCH", "Permission 'cloudmessaging.messages.create' denied"),
                reason: "SENDER_ID_MISMATCH")
        }
        guard case .object = message ?? .null else {
            return answer(
                Self.badRequest(field: "message", "Invalid JSON payload received."), reason: "INVALID_ARGUMENT")
        }
        if let flag = json["validate_only"], flag != .bool(true), flag != .bool(false) {
            return answer(
                Self.badRequest(field: "validate_only", "Invalid value at 'validate_only' (TYPE_BOOL)"),
                reason: "INVALID_ARGUMENT")
        }
        guard !token.isEmpty else {
            return answer(
                Self.fcmError(400, "INVALID_ARGUMENT", "The registration token is not a valid FCM registration token"),
                reason: "INVALID_ARGUMENT")
        }
        // FCM refuses fields a Message does not have, and mistyped known ones.
        let known: Set<String> = [
            "name", "token", "topic", "condition", "data", "notification", "android", "apns", "webpush", "fcm_options",
        ]
        if let unknown = message?.objectValue?.keys.first(where: { !known.contains($0) }) {
            return answer(
                Self.badRequest(
                    field: "message", "Invalid JSON payload received. Unknown name \"\(unknown)\" at 'message'"),
                reason: "INVALID_ARGUMENT")
        }
        for key in ["notification", "android", "apns", "webpush", "fcm_options"] {
            if let value = message?[key], value.objectValue == nil {
                return answer(
                    Self.badRequest(field: "message.\(key)", "Invalid value at 'message.\(key)'"),
                    reason: "INVALID_ARGUMENT")
            }
        }
        if let notification = message?["notification"]?.objectValue {
            for (key, value) in notification
            where !["title", "body", "image"].contains(key) || value.stringValue == nil {
                return answer(
                    Self.badRequest(
                        field: "message.notification.\(key)",
                        "Invalid JSON payload received. Unknown name or bad value at 'message.notification.\(key)'"),
                    reason: "INVALID_ARGUMENT")
            }
        }
        var dataSize = 0
        if let data = message?["data"] {
            guard case .object(let fields) = data else {
                return answer(
                    Self.badRequest(field: "message.data", "Invalid value at 'message.data'"),
                    reason: "INVALID_ARGUMENT")
            }
            for (key, value) in fields {
                guard let text = value.stringValue else {
                    return answer(
                        Self.badRequest(
                            field: "message.data[\(key)]",
                            "Invalid value at 'message.data[0].value' (TYPE_STRING), \(value.typeName)"),
                        reason: "INVALID_ARGUMENT")
                }
                dataSize += key.utf8.count + text.utf8.count
            }
        }
        guard dataSize <= 4096 else {
            return answer(Self.fcmError(400, "INVALID_ARGUMENT", "Message is too big"), reason: "INVALID_ARGUMENT")
        }
        if let priority = message?["android"]?["priority"]?.stringValue, !["HIGH", "NORMAL"].contains(priority) {
            return answer(
                Self.badRequest(field: "message.android.priority", "Invalid value at 'message.android.priority'"),
                reason: "INVALID_ARGUMENT")
        }
        if let ttl = message?["android"]?["ttl"]?.stringValue,
            !(ttl.hasSuffix("s") && Double(ttl.dropLast()) != nil)
        {
            return answer(
                Self.badRequest(field: "message.android.ttl", "Invalid value at 'message.android.ttl'"),
                reason: "INVALID_ARGUMENT")
        }
        if let delay = state.delay(provider: "fcm") { try? await Task.sleep(for: delay) }
        if let injected = state.nextInjected(provider: "fcm") {
            return answer(
                Self.fcmError(
                    injected.status, injected.reason, "Injected failure", retryAfter: injected.retryAfterSeconds),
                reason: injected.reason)
        }
        if state.fcmUnregistered(token) {
            return answer(Self.fcmError(404, "UNREGISTERED", "Requested entity was not found."), reason: "UNREGISTERED")
        }
        // A validated message gets FCM's placeholder id: nothing was sent.
        let id = validateOnly ? "fake_message_id" : "\(UInt64.random(in: 1...UInt64.max))"
        return answer(Self.json(200, ["name": .string("projects/\(projectID)/messages/\(id)")]), reason: nil)
    }
}
