import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1
import PushCrypto
import PushModels
import StatusPush
import SwiftProtobuf

/// `demo-device status-waku <waku-node-url> <server-public-key-hex> <apns-topic>`: plays a
/// Status app against the push server over Waku, through the dev stack's fake node (its
/// `/test/v1/…` routes stand for the network). It registers an APNs device, queries its
/// own key as a contact would, and sends it a notification, printing each message as it
/// goes out and each answer as it comes back (docs/api/status.md, "Over Waku").
enum StatusWakuDemo {
    static let pubsub = WakuStatus.pubsubTopic

    static func run(node: String, serverKeyHex: String, apnsTopic: String) async throws {
        guard let bytes = Fingerprint.bytes(fromHex: serverKeyHex) else { throw DemoError("the server key: hex") }
        let server = try Secp256k1.PublicKey(bytes: bytes)
        let client = try Secp256k1.PrivateKey.generate()
        let me = try client.publicKey()
        let accessToken = UUID().uuidString.lowercased()
        let deviceToken = Fingerprint.hex((0..<32).map { _ in UInt8.random(in: 0...255) })
        print("client key \(Fingerprint.hex(me.compressed)); server key \(Fingerprint.hex(server.compressed))")

        var registration = StatusRegistration()
        registration.tokenType = .apnToken
        registration.deviceToken = deviceToken
        registration.installationID = UUID().uuidString.lowercased()
        registration.accessToken = accessToken
        registration.enabled = true
        registration.version = 1
        registration.apnTopic = apnsTopic
        registration.grant = Data(try StatusCrypto.makeGrant(client: client, server: server, accessToken: accessToken))
        let sealed = try StatusCrypto.encrypt(
            try registration.serializedBytes(), key: try client.sharedSecret(with: server))
        let answer = try await exchange(
            node: node, step: "registration (16)",
            envelope: try StatusEnvelope.seal(
                sealed, type: .pushNotificationRegistration, key: client),
            waku: client, to: .key(server), topic: WakuStatus.personalTopic(server), replyKey: client,
            replyType: .pushNotificationRegistrationResponse)
        let registered = try StatusRegistrationResponse(serializedBytes: answer.payload)
        print(
            "  success=\(registered.success) request_id matches=\(Array(registered.requestID) == StatusCrypto.shake256(sealed))"
        )

        let querier = try Secp256k1.PrivateKey.generate()
        var query = StatusQuery()
        query.publicKeys = [Data(StatusCrypto.hashedPublicKey(me))]
        let (queryTopic, queryKey) = WakuStatus.queryTopic(hashedKey: StatusCrypto.hashedPublicKey(me))
        let queried = try await exchange(
            node: node, step: "query (18)",
            envelope: try StatusEnvelope.seal(
                try query.serializedBytes(), type: .pushNotificationQuery, key: querier),
            waku: client, to: .symmetric(queryKey), topic: queryTopic, replyKey: querier,
            replyType: .pushNotificationQueryResponse)
        let info = try StatusQueryResponse(serializedBytes: queried.payload)
        print(
            "  success=\(info.success) installations=\(info.info.count) access token returned=\(info.info.first?.accessToken == accessToken)"
        )

        let sender = try Secp256k1.PrivateKey.generate()
        var target = StatusNotification()
        target.accessToken = accessToken
        target.chatID = Data(StatusCrypto.shake256(Array("demo".utf8)))
        target.publicKey = Data(StatusCrypto.hashedPublicKey(me))
        target.installationID = registration.installationID
        target.message = Data("ciphertext".utf8)
        target.type = .message
        var request = StatusNotificationRequest()
        request.requests = [target]
        request.messageID = Data((0..<32).map { _ in UInt8.random(in: 0...255) })
        let notified = try await exchange(
            node: node, step: "notification request (20)",
            envelope: try StatusEnvelope.seal(
                try request.serializedBytes(), type: .pushNotificationRequest, key: sender),
            waku: client, to: .key(server), topic: WakuStatus.partitionedTopic(server), replyKey: sender,
            replyType: .pushNotificationResponse)
        let reports = try StatusNotificationResponse(serializedBytes: notified.payload)
        print("  reports: \(reports.reports.map { $0.success ? "success" : "\($0.error)" })")
        print("the APNs fake gets the push for token \(deviceToken.prefix(8))…")
    }

    enum Recipient {
        case key(Secp256k1.PublicKey)
        case symmetric([UInt8])
    }

    /// Publishes one message (framed, signed by `waku`, encrypted) and waits for the answer
    /// on the partitioned topic of the envelope's signer, printing both.
    static func exchange(
        node: String, step: String, envelope: [UInt8], waku: Secp256k1.PrivateKey, to recipient: Recipient,
        topic: String, replyKey: Secp256k1.PrivateKey, replyType: StatusEnvelope.MessageType
    ) async throws -> StatusEnvelope {
        let frame = try WakuStatus.frame(envelope, signedBy: waku)
        let payload: [UInt8]
        switch recipient {
        case .key(let key): payload = try WakuStatus.encrypt(frame, to: key)
        case .symmetric(let key): payload = try WakuStatus.encryptSymmetric(frame, key: key)
        }
        let path = pubsub.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? pubsub
        let message: JSONValue = [
            "payload": .string(Data(payload).base64EncodedString()), "contentTopic": .string(topic), "version": 1,
            "timestamp": .int(Int64(Date().timeIntervalSince1970 * 1e9)),
        ]
        print(
            "→ \(step): envelope \(envelope.count) B, frame \(frame.count) B, payload \(payload.count) B on \(topic) (\(pubsub))"
        )
        _ = try await send("POST", "\(node)/test/v1/messages/\(path)", body: message)
        let replyTopic = WakuStatus.partitionedTopic(try replyKey.publicKey())
        for _ in 0..<100 {
            let published =
                (try? Wire.decode(JSONValue.self, from: try await send("GET", "\(node)/test/v1/published", body: nil)))?
                .arrayValue ?? []
            for entry in published where entry["message"]?["contentTopic"]?.stringValue == replyTopic {
                guard let text = entry["message"]?["payload"]?.stringValue, let bytes = Data(base64Encoded: text),
                    let opened = try? WakuStatus.openFrame(try WakuStatus.decrypt(Array(bytes), with: replyKey)),
                    let answer = try? StatusEnvelope(bytes: opened.data, expected: replyType)
                else { continue }
                print(
                    "← type \(replyType.rawValue) on \(replyTopic): payload \(bytes.count) B, frame signed by \(Fingerprint.hex(opened.signer.compressed).prefix(12))…, envelope by \(Fingerprint.hex(answer.signer.compressed).prefix(12))…"
                )
                return answer
            }
            try await Task.sleep(for: .milliseconds(100))
        }
        throw DemoError("no answer on \(replyTopic) within 10 s")
    }

    static func send(_ method: String, _ url: String, body: JSONValue?) async throws -> [UInt8] {
        var request = HTTPClientRequest(url: url)
        request.method = .RAW(value: method)
        if let body {
            request.headers.add(name: "Content-Type", value: "application/json")
            request.body = .bytes(ByteBuffer(bytes: Wire.canonical(body)))
        }
        let response = try await HTTPClient.shared.execute(request, timeout: .seconds(10))
        return Array(buffer: try await response.body.collect(upTo: 64 << 20))
    }

    struct DemoError: Error, CustomStringConvertible {
        let description: String
        init(_ description: String) { self.description = description }
    }
}
