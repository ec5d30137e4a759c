import Foundation
import HTTPTypes
import PushCrypto
import PushModels
import StatusPush
import SwiftProtobuf
import Testing
@testable import StageTestSupport

/// The Status push server's routes through the router on in-memory stores: signed
/// protobuf in and out, each error path's status and code.
@Suite struct IngestRouterStatusTests {
    static let topic = "org.zulip.Zulip"

    /// A router with the Status API on, under a fresh server key.
    static func fixture(_ settings: [String: String] = [:]) async throws -> (RouterFixture, Secp256k1.PublicKey) {
        let key = try Secp256k1.PrivateKey.generate()
        let file = FileManager.default.temporaryDirectory
            .appendingPathComponent("pushrelay-status-\(UUID().uuidString.lowercased())").path
        try Fingerprint.hex(key.bytes).write(toFile: file, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(atPath: file) }
        var values = [
            "pushrelay.status.enabled": "true", "pushrelay.status.key.file": file,
            "pushrelay.status.apns.topics": topic,
        ]
        values.merge(settings) { _, new in new }
        return (try await RouterFixture.make(values), try key.publicKey())
    }

    /// A Status client: its key, one installation, and its messages as status-go makes them.
    struct Client {
        let server: Secp256k1.PublicKey
        let key = try! Secp256k1.PrivateKey.generate()
        let installation = UUID().uuidString.lowercased()
        let accessToken = UUID().uuidString.lowercased()
        let deviceToken = routerAPNsToken()

        var hashedKey: [UInt8] { StatusCrypto.hashedPublicKey(try! key.publicKey()) }

        func registration(version: UInt64) throws -> StatusRegistration {
            var r = StatusRegistration()
            r.tokenType = .apnToken
            r.deviceToken = deviceToken
            r.installationID = installation
            r.accessToken = accessToken
            r.enabled = true
            r.version = version
            r.apnTopic = IngestRouterStatusTests.topic
            r.grant = Data(try StatusCrypto.makeGrant(client: key, server: server, accessToken: accessToken))
            return r
        }

        /// A registration encrypted to `encryptTo` (the server) and signed by this client.
        func registrationBody(_ r: StatusRegistration, encryptTo: Secp256k1.PublicKey? = nil) throws -> [UInt8] {
            let payload = try StatusCrypto.encrypt(
                try r.serializedBytes(), key: try key.sharedSecret(with: encryptTo ?? server))
            return try StatusEnvelope.seal(payload, type: .pushNotificationRegistration, key: key)
        }

        func target(token: String? = nil) -> StatusNotification {
            var n = StatusNotification()
            n.accessToken = token ?? accessToken
            n.chatID = Data(StatusCrypto.shake256(Array("general".utf8)))
            n.publicKey = Data(hashedKey)
            n.installationID = installation
            n.message = Data("ciphertext".utf8)
            n.type = .message
            n.author = Data(StatusCrypto.shake256(Array("0x04sender".utf8)))
            return n
        }
    }

    static func post(_ client: RouterClient, _ path: String, _ body: [UInt8]) async throws -> RouterReply {
        try await client.send(.post, path, .raw(body, contentType: "application/x-protobuf"))
    }

    /// The signed answer's payload, checked to be signed by the server.
    static func opened(_ reply: RouterReply, _ type: StatusEnvelope.MessageType, server: Secp256k1.PublicKey) throws
        -> [UInt8]
    {
        try #require(reply.status == 200, "\(reply.status) \(reply.text)")
        #expect(reply.headers[.contentType] == "application/x-protobuf")
        let envelope = try StatusEnvelope(bytes: reply.body, expected: type)
        #expect(envelope.signer == server, "answers are signed by the server")
        return envelope.payload
    }

    static func notifyBody(_ targets: [StatusNotification], messageID: [UInt8]) throws -> [UInt8] {
        var request = StatusNotificationRequest()
        request.requests = targets
        request.messageID = Data(messageID)
        return try StatusEnvelope.seal(
            try request.serializedBytes(), type: .pushNotificationRequest, key: try Secp256k1.PrivateKey.generate())
    }

    @Test func disabledUnlessConfigured() async throws {
        let fixture = try await RouterFixture.make()
        try await fixture.run { client in
            expectRouterError(
                try await client.send(.get, "/status/v1/server"), 404, "STATUS_DISABLED", "the server's key")
            for path in ["/status/v1/registration", "/status/v1/query", "/status/v1/notify"] {
                expectRouterError(try await Self.post(client, path, [1, 2, 3]), 404, "STATUS_DISABLED", path)
            }
        }
    }

    @Test func registerQueryAndNotify() async throws {
        let (fixture, serverKey) = try await Self.fixture()
        try await fixture.run { client in
            let info = try await client.send(.get, "/status/v1/server")
            expectRouterSuccess(info, "the server's key")
            #expect(info.json["public_key"] == .string(Fingerprint.hex(serverKey.compressed)))

            let user = Client(server: serverKey)
            let body = try user.registrationBody(try user.registration(version: 1))
            let registered = try StatusRegistrationResponse(
                serializedBytes: try Self.opened(
                    try await Self.post(client, "/status/v1/registration", body), .pushNotificationRegistrationResponse,
                    server: serverKey))
            #expect(registered.success, "\(registered)")
            let again = try StatusRegistrationResponse(
                serializedBytes: try Self.opened(
                    try await Self.post(client, "/status/v1/registration", body), .pushNotificationRegistrationResponse,
                    server: serverKey))
            #expect(!again.success && again.error == .versionMismatch, "the same version again")

            var query = StatusQuery()
            query.publicKeys = [Data(user.hashedKey)]
            let queryBody = try StatusEnvelope.seal(
                try query.serializedBytes(), type: .pushNotificationQuery, key: try Secp256k1.PrivateKey.generate())
            let answer = try StatusQueryResponse(
                serializedBytes: try Self.opened(
                    try await Self.post(client, "/status/v1/query", queryBody), .pushNotificationQueryResponse,
                    server: serverKey))
            #expect(answer.success && answer.info.count == 1 && answer.info.first?.accessToken == user.accessToken)

            let messageID = (0..<32).map { _ in UInt8.random(in: 0...255) }
            let notifyBody = try Self.notifyBody([user.target(), user.target(token: "wrong")], messageID: messageID)
            let notified = try await Self.post(client, "/status/v1/notify", notifyBody)
            let response = try StatusNotificationResponse(
                serializedBytes: try Self.opened(notified, .pushNotificationResponse, server: serverKey))
            #expect(response.reports.map(\.success) == [true, false])
            #expect(response.reports.last?.error == .wrongToken)
            let published = try fixture.published()
            try #require(published.count == 1, "one notification for the one right token")
            #expect(published[0].json["kind"] == "gorush" && published[0].json["server_uuid"] == "status")
            // A repeat gets the first answer, and publishes nothing.
            let repeated = try await Self.post(client, "/status/v1/notify", notifyBody)
            #expect(repeated.status == 200 && repeated.body == notified.body)
            #expect(try fixture.published().count == 1)
        }
    }

    @Test func refusesWhatIsNotASignedMessageOfItsType() async throws {
        let (fixture, serverKey) = try await Self.fixture()
        try await fixture.run { client in
            let user = Client(server: serverKey)
            expectRouterError(
                try await Self.post(client, "/status/v1/registration", [0xff, 0x00, 0x13]), 400, "MALFORMED_MESSAGE",
                "not an ApplicationMetadataMessage")
            let registration = try user.registrationBody(try user.registration(version: 1))
            expectRouterError(
                try await Self.post(client, "/status/v1/notify", registration), 400, "WRONG_MESSAGE_TYPE",
                "a registration sent to notify")
            var forged = try StatusEnvelopeMessage(serializedBytes: registration)
            forged.signature = Data(repeating: 0, count: 65)
            expectRouterError(
                try await Self.post(client, "/status/v1/registration", try forged.serializedBytes()), 400,
                "BAD_SIGNATURE", "a signature that recovers no key")
            let elsewhere = try user.registrationBody(
                try user.registration(version: 1), encryptTo: try Secp256k1.PrivateKey.generate().publicKey())
            expectRouterError(
                try await Self.post(client, "/status/v1/registration", elsewhere), 400, "UNDECRYPTABLE",
                "a payload encrypted to another key")
            let empty = try Self.notifyBody([user.target()], messageID: [])
            expectRouterError(
                try await Self.post(client, "/status/v1/notify", empty), 400, "MALFORMED_MESSAGE",
                "a request without a message id")
            let crowd = try Self.notifyBody(
                Array(repeating: user.target(), count: 101), messageID: Array("m".utf8))
            expectRouterError(
                try await Self.post(client, "/status/v1/notify", crowd), 400, "TOO_MANY_TARGETS", "101 targets")
            var query = StatusQuery()
            query.publicKeys = Array(repeating: Data(user.hashedKey), count: 101)
            let wide = try StatusEnvelope.seal(
                try query.serializedBytes(), type: .pushNotificationQuery, key: try Secp256k1.PrivateKey.generate())
            expectRouterError(
                try await Self.post(client, "/status/v1/query", wide), 400, "TOO_MANY_KEYS", "a query of 101 keys")
            let garbled = try StatusEnvelope.seal([0xff, 0xff, 0xff], type: .pushNotificationQuery, key: user.key)
            expectRouterError(
                try await Self.post(client, "/status/v1/query", garbled), 400, "MALFORMED_MESSAGE",
                "a query payload that is not a PushNotificationQuery")
            let garbledNotify = try StatusEnvelope.seal(
                [0xff, 0xff, 0xff], type: .pushNotificationRequest, key: user.key)
            expectRouterError(
                try await Self.post(client, "/status/v1/notify", garbledNotify), 400, "MALFORMED_MESSAGE",
                "a notify payload that is not a PushNotificationRequest")
        }
        #expect(fixture.publisher.records.isEmpty)
    }

    @Test func limitsRequestsPerAddress() async throws {
        // The windows are whole minutes: three requests that straddle the turn of one are
        // two windows' worth, so they are sent again in the next (once at most).
        for attempt in 1...2 {
            let minute = Wire.nowMillis() / 60_000
            let (fixture, serverKey) = try await Self.fixture(["pushrelay.status.requests.max": "2"])
            let straddled = try await fixture.run { client in
                let user = Client(server: serverKey)
                let body = try user.registrationBody(try user.registration(version: 1))
                var statuses: [Int] = []
                for _ in 0..<2 { statuses.append(try await Self.post(client, "/status/v1/registration", body).status) }
                let limited = try await Self.post(client, "/status/v1/registration", body)
                if Wire.nowMillis() / 60_000 != minute && attempt == 1 { return true }
                #expect(statuses == [200, 200])
                expectRouterError(limited, 429, "RATE_LIMITED", "a third request in the window")
                #expect(limited.headers[.retryAfter] != nil)
                return false
            }
            if !straddled { return }
        }
    }
}
