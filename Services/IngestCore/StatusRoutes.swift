import DeviceState
import Foundation
import Hummingbird
import Logging
import NIOCore
import PushCrypto
import PushModels
import ServiceKit
import StatusPush
import SwiftProtobuf

/// The Status endpoints: protobuf in, protobuf out (`application/x-protobuf`), each body
/// an `ApplicationMetadataMessage`. Answers are signed by the server's key. Registrations
/// are kept signed, encrypted and versioned per (hashed public key, installation), with
/// their preferences; notification requests become gorush-form notifications on
/// `push.requests`.
struct StatusController: Sendable {
    /// Nil when the Status API is off: every endpoint answers `STATUS_DISABLED`.
    let server: StatusServer?
    /// Whether the endpoints answer on the API port (false: over Waku only).
    var httpEnabled = true
    /// For the client address the per-address limit keys on.
    let authenticator: ServerAuthenticator
    let devices: any DeviceRegistry
    let realms: any RealmRegistry
    let store: any StatusRegistrationStore
    let acceptor: Acceptor
    let sealer: PayloadSealer

    static let serverID = ServerID("status")
    static let maxBody = 256 * 1024
    /// A request claim lasts this long: a crash before the answer is kept frees the message within a minute.
    static let claimSeconds = 60
    /// A repeated request gets the first answer for 7 days; answers past 16 KiB are not kept.
    static let answerSeconds = 7 * 86_400
    static let maxKeptAnswer = 16 * 1024

    func routes() -> RouteCollection<IngestContext> {
        let router = RouteCollection(context: IngestContext.self)
        router.get("/status/v1/server") { _, _ in
            guard let server, httpEnabled else { throw APIError.statusDisabled }
            return success([
                "public_key": .string(Fingerprint.hex(server.publicKey.compressed)),
                "query_topic_hash": "SHAKE-256 of the 33-byte compressed client key, 64 bytes",
            ])
        }
        router.post("/status/v1/registration") { request, context in
            try await registration(request, context: context)
        }
        router.post("/status/v1/query") { request, context in try await query(request, context: context) }
        router.post("/status/v1/notify") { request, context in try await notify(request, context: context) }
        return router
    }

    /// Reads a signed message of `type`; a message that is not one, or whose signature
    /// does not recover a key, is discarded with a 400 (no protobuf answer).
    func envelope(_ request: Request, context: IngestContext, type: StatusEnvelope.MessageType) async throws -> (
        StatusServer, StatusEnvelope
    ) {
        guard let server, httpEnabled else { throw APIError.statusDisabled }
        guard try await server.reserveRealm(realms) else {
            context.logger.error("the Status realm belongs to a server: set PUSHRELAY_STATUS_REALM_UUID to a free one")
            throw APIError(
                status: .serviceUnavailable, code: "STATUS_REALM_TAKEN",
                message: "The Status push server is misconfigured here")
        }
        let client = authenticator.clientAddress(request, context: context)
        let nowMs = Wire.nowMillis()
        let count = try await store.countRequest(client: client, nowMs: nowMs, windowSeconds: server.windowSeconds)
        if count > Int64(server.maxRequests) {
            let retryAfter = WindowCounter.secondsLeft(nowMs: nowMs, seconds: server.windowSeconds)
            throw APIError(
                status: .tooManyRequests, code: "RATE_LIMITED",
                message: "Too many Status requests from this address; retry in \(retryAfter) s",
                headers: [.retryAfter: "\(retryAfter)"])
        }
        var request = request
        let bytes = Array(try await request.collectBody(within: Self.maxBody).readableBytesView)
        do {
            return (server, try StatusEnvelope(bytes: bytes, expected: type))
        } catch .malformed {
            throw APIError.badRequest("The body is not an ApplicationMetadataMessage", code: "MALFORMED_MESSAGE")
        } catch .badSignature {
            throw APIError.badRequest(
                "signature: not a recoverable secp256k1 signature of Keccak-256(payload)", code: "BAD_SIGNATURE",
                field: "signature")
        } catch .wrongType(let expected, let got) {
            throw APIError.badRequest(
                "type: \(got) is not \(expected.rawValue) on this endpoint", code: "WRONG_MESSAGE_TYPE", field: "type")
        }
    }

    static func protobufResponse(_ bytes: [UInt8]) -> Response {
        Response(
            status: .ok, headers: [.contentType: "application/x-protobuf"],
            body: .init(byteBuffer: ByteBuffer(bytes: bytes)))
    }

    /// The stored registrations of a hashed key (one installation's, or all), opened.
    func registrations(hashedKey: String, installation: String? = nil) async throws -> [(
        registration: StatusRegistration, device: DeviceID?
    )] {
        try await store.registrations(
            hashedKey: hashedKey, installation: installation.map(StatusServer.installationKey)
        ).compactMap { stored in
            (try? StatusRegistration(serializedBytes: stored.bytes)).map { ($0, stored.device) }
        }
    }

    func query(_ request: Request, context: IngestContext) async throws -> Response {
        let (server, envelope) = try await envelope(request, context: context, type: .pushNotificationQuery)
        return Self.protobufResponse(try await answerQuery(envelope, server: server))
    }

    /// A query's signed answer (19), whatever carried it.
    func answerQuery(_ envelope: StatusEnvelope, server: StatusServer) async throws -> [UInt8] {
        guard let query = try? StatusQuery(serializedBytes: envelope.payload) else {
            throw APIError.badRequest("payload: not a PushNotificationQuery", code: "MALFORMED_MESSAGE")
        }
        guard query.publicKeys.count <= server.maxTargets else {
            throw APIError.badRequest(
                "public_keys: at most \(server.maxTargets)", code: "TOO_MANY_KEYS", field: "public_keys")
        }
        var response = StatusQueryResponse()
        response.messageID = Data(envelope.messageID)
        response.success = !query.publicKeys.isEmpty
        var seen: Set<Data> = []
        var answerBytes = 0
        for hashed in query.publicKeys where hashed.count == Shake256.statusLength && seen.insert(hashed).inserted {
            for (registration, _) in try await registrations(hashedKey: Fingerprint.hex(Array(hashed))) {
                answerBytes += registration.allowedKeyList.reduce(0) { $0 + $1.count } + registration.grant.count + 256
                guard answerBytes <= StatusServer.maxAnswerBytes else { break }
                var info = StatusQueryInfo()
                info.publicKey = hashed
                info.installationID = registration.installationID
                info.grant = registration.grant
                info.version = registration.version
                info.serverPublicKey = Data(server.publicKey.compressed)
                // A device that filters senders hands its token only to its contacts, encrypted.
                if registration.allowFromContactsOnly {
                    info.allowedKeyList = registration.allowedKeyList
                } else {
                    info.accessToken = registration.accessToken
                }
                response.info.append(info)
            }
        }
        return try server.signed(response, type: .pushNotificationQueryResponse)
    }

    static func constantTimeEqual(_ a: [UInt8], _ b: [UInt8]) -> Bool {
        guard a.count == b.count else { return false }
        var difference: UInt8 = 0
        for (x, y) in zip(a, b) { difference |= x ^ y }
        return difference == 0
    }
}

extension APIError {
    static let statusDisabled = APIError(
        status: .notFound, code: "STATUS_DISABLED",
        message: "The Status push server is not enabled here (PUSHRELAY_STATUS_ENABLED)")
}
