import DeviceState
import Foundation
import HTTPTypes
import Hummingbird
import PushModels
import ServiceKit

/// An answer to keep: a notify's status and fields, stored under its idempotency key
/// so a retried request gets the very same answer back.
struct StoredAnswer: Sendable {
    var status: Int
    var fields: [String: JSONValue]

    var http: Response { success(fields, status: HTTPResponse.Status(code: status)) }
}

/// The native notify's `Idempotency-Key` header. A request retried with the same key
/// (per server) within the TTL gets the first answer back and produces no second
/// notification. A retry while the first is still being handled answers 409; a key
/// reused with another body answers 422. A request that failed (4xx, 503) leaves no
/// answer behind, so its retry is handled afresh.
struct IdempotencyKey: Sendable {
    static let header = HTTPField.Name("Idempotency-Key")!
    static let maxBytes = 255
    let key: String
    /// This request's claim, so only it can complete or release the key. Drawn only
    /// when the request carries a key (a stored default would draw one for every request).
    let claimID: String

    /// Nil when the request carries no key; 400 when the key is not 1 to 255 visible ASCII characters.
    init?(_ request: Request) throws {
        let values = request.headers.values(Self.header)
        guard let value = values.first else { return nil }
        guard values.count == 1, Syntax.isVisibleASCII(value, maxBytes: Self.maxBytes) else {
            throw APIError.badRequest(
                "\(Self.header.rawName): must be one header of 1 to \(Self.maxBytes) visible ASCII characters",
                code: "INVALID_IDEMPOTENCY_KEY", field: Self.header.rawName)
        }
        key = value
        claimID = UUID.random().uuidString
    }

    /// Claims the key for this request. Returns the earlier answer when the key was
    /// used before with the same body; nil when this request is the first. A claim
    /// outlives the longest the request can take (`publishTimeout` plus margin), and
    /// expires if its ingest dies mid-request.
    func claim(server: ServerID, fingerprint: String, store: any IdempotencyStore, publishTimeout: Duration)
        async throws -> Response?
    {
        let pendingSeconds = publishTimeout.components.seconds.saturatingAdd(60)
        switch try await store.claim(
            server: server, key: key, fingerprint: fingerprint, claimID: claimID, pendingSeconds: pendingSeconds)
        {
        case .claimed:
            return nil
        case .held(let held, _) where held != fingerprint:
            throw APIError(
                status: .unprocessableContent, code: "IDEMPOTENCY_KEY_REUSED",
                message: "Idempotency-Key was used before with a different request", field: "Idempotency-Key")
        case .held(_, let answer):
            guard let answer, (200...599).contains(answer.status),
                let body = try? Wire.decode(JSONValue.self, from: answer.body), let fields = body.objectValue
            else {
                throw APIError(
                    status: .conflict, code: "IDEMPOTENCY_KEY_IN_USE",
                    message: "A request with this Idempotency-Key is still being handled; retry shortly",
                    headers: [.retryAfter: "1"])
            }
            return StoredAnswer(status: answer.status, fields: fields).http
        }
    }

    /// Keeps the answer for `ttlSeconds` (only while this request still holds the claim).
    func complete(server: ServerID, response: StoredAnswer, store: any IdempotencyStore, ttlSeconds: Int)
        async throws
    {
        var fields = response.fields
        fields["result"] = nil
        fields["msg"] = nil
        try await store.complete(
            server: server, key: key, claimID: claimID,
            answer: IdempotentAnswer(status: response.status, body: Wire.canonical(.object(fields))),
            ttlSeconds: ttlSeconds)
    }

    /// Releases this request's claim after it failed, so a retry is handled afresh.
    func abandon(server: ServerID, store: any IdempotencyStore) async throws {
        try await store.abandon(server: server, key: key, claimID: claimID)
    }
}
