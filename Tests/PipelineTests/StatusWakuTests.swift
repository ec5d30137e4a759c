import DevStack
import FakeProviders
import Foundation
import PushCrypto
import PushModels
import StatusPush
import SwiftProtobuf
import Testing

extension StackTests {
    /// A Status client as status-go builds its messages, talking to the push server only
    /// through the fake Waku node's REST API: it registers (personal topic), queries
    /// (the symmetric topic of its key), and sends a notification request (the server's
    /// partitioned topic); every answer comes back on the sender's partitioned topic.
    @Suite struct StatusWakuTests {
        typealias Client = GorushStatusTests.StatusClient
        static let pubsub = WakuStatus.pubsubTopic

        /// The network, through the fake node's test routes.
        struct Network {
            let node: String
            var path: String { pubsub.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? pubsub }

            /// A client's message arriving on `topic` (at `timestamp`, ns: the same message
            /// twice has the same one).
            func publish(_ payload: [UInt8], topic: String, timestamp: Int64? = nil) async throws {
                let reply = try await HTTP.send(
                    "POST", "\(node)/test/v1/messages/\(path)",
                    json: [
                        "payload": .string(Data(payload).base64EncodedString()), "contentTopic": .string(topic),
                        "version": 1, "timestamp": .int(timestamp ?? Int64(Date().timeIntervalSince1970 * 1e9)),
                    ])
                #expect(reply.status == 200)
            }

            /// The server's messages on `topic`, opened with `key`, of `type`.
            func answers(on topic: String, key: Secp256k1.PrivateKey, type: StatusEnvelope.MessageType) async throws
                -> [StatusEnvelope]
            {
                let published = try await HTTP.get("\(node)/test/v1/published").json.arrayValue ?? []
                return published.compactMap { entry -> StatusEnvelope? in
                    guard entry["pubsubTopic"]?.stringValue == pubsub,
                        entry["message"]?["contentTopic"]?.stringValue == topic,
                        entry["message"]?["version"] == 1,
                        let text = entry["message"]?["payload"]?.stringValue, let bytes = Data(base64Encoded: text),
                        let frame = try? WakuStatus.decrypt(Array(bytes), with: key),
                        let opened = try? WakuStatus.openFrame(frame)
                    else { return nil }
                    return try? StatusEnvelope(bytes: opened.data, expected: type)
                }
            }

            func awaitAnswer(on topic: String, key: Secp256k1.PrivateKey, type: StatusEnvelope.MessageType)
                async throws -> StatusEnvelope
            {
                var found: [StatusEnvelope] = []
                try await Stack.waitFor("an answer on \(topic)", timeout: .seconds(30)) {
                    found = (try? await answers(on: topic, key: key, type: type)) ?? []
                    return !found.isEmpty
                }
                return try #require(found.first)
            }
        }

        @Test func aStatusClientRegistersIsQueriedAndNotifiesOverWaku() async throws {
            let stack = try await Stack.get()
            let client = try await Client.make(stack)
            let network = Network(node: stack.wakuURL)
            let clientKey = try client.key.publicKey()
            try await Stack.waitFor("the push server to subscribe on the node") {
                let topics = (try? await HTTP.get("\(stack.wakuURL)/test/v1/subscriptions").json.arrayValue) ?? []
                return topics.contains { $0.stringValue == Self.pubsub }
            }

            // 1. Registration (16) to the server's personal topic, signed and framed by the client.
            let registration = try client.registration(version: 1)
            let sealedRegistration = try StatusCrypto.encrypt(
                try registration.serializedBytes(), key: try client.key.sharedSecret(with: client.serverKey))
            let registrationEnvelope = try StatusEnvelope.seal(
                sealedRegistration, type: .pushNotificationRegistration, key: client.key)
            let registrationMessage = try WakuStatus.encrypt(
                try WakuStatus.frame(registrationEnvelope, signedBy: client.key), to: client.serverKey)
            try await network.publish(registrationMessage, topic: WakuStatus.personalTopic(client.serverKey))
            let registered = try await network.awaitAnswer(
                on: WakuStatus.partitionedTopic(clientKey), key: client.key, type: .pushNotificationRegistrationResponse
            )
            #expect(registered.signer == client.serverKey, "answers are signed by the server")
            let response = try StatusRegistrationResponse(serializedBytes: registered.payload)
            #expect(response.success, "\(response)")
            #expect(Array(response.requestID) == StatusCrypto.shake256(sealedRegistration))

            // 2. Query (18) from a one-time key, on the symmetric topic of the client's key.
            let querier = try Secp256k1.PrivateKey.generate()
            var query = StatusQuery()
            query.publicKeys = [Data(client.hashedKey)]
            let queryEnvelope = try StatusEnvelope.seal(
                try query.serializedBytes(), type: .pushNotificationQuery, key: querier)
            let (queryTopic, queryKey) = WakuStatus.queryTopic(hashedKey: client.hashedKey)
            try await network.publish(
                try WakuStatus.encryptSymmetric(
                    try WakuStatus.frame(queryEnvelope, signedBy: client.key), key: queryKey),
                topic: queryTopic)
            let answered = try await network.awaitAnswer(
                on: WakuStatus.partitionedTopic(try querier.publicKey()), key: querier,
                type: .pushNotificationQueryResponse)
            let info = try StatusQueryResponse(serializedBytes: answered.payload)
            #expect(info.success && info.info.count == 1, "\(info)")
            #expect(info.info.first?.accessToken == client.accessToken)
            let expectedID = try StatusEnvelope(bytes: queryEnvelope, expected: .pushNotificationQuery).messageID
            #expect(Array(info.messageID) == expectedID)

            // 3. Notification request (20) from another one-time key, to the server's partitioned topic.
            let sender = try Secp256k1.PrivateKey.generate()
            var request = StatusNotificationRequest()
            request.requests = [client.target(chat: "general")]
            request.messageID = Data((0..<32).map { _ in UInt8.random(in: 0...255) })
            let requestEnvelope = try StatusEnvelope.seal(
                try request.serializedBytes(), type: .pushNotificationRequest, key: sender)
            let requestMessage = try WakuStatus.encrypt(
                try WakuStatus.frame(requestEnvelope, signedBy: client.key), to: client.serverKey)
            let sentAt = Int64(Date().timeIntervalSince1970 * 1e9)
            try await network.publish(
                requestMessage, topic: WakuStatus.partitionedTopic(client.serverKey), timestamp: sentAt)
            let notified = try await network.awaitAnswer(
                on: WakuStatus.partitionedTopic(try sender.publicKey()), key: sender, type: .pushNotificationResponse)
            let reports = try StatusNotificationResponse(serializedBytes: notified.payload)
            #expect(reports.messageID == request.messageID)
            #expect(reports.reports.count == 1 && reports.reports.first?.success == true, "\(reports)")
            // The push reaches APNs with the message id the client set.
            let pushes = try await stack.waitForPushes("apns") { $0.contains { $0.token == client.deviceToken } }
            #expect(pushes.filter { $0.token == client.deviceToken }.count == 1)

            // The node restarts: the server subscribes again, and a message it sees twice is handled once.
            _ = try await HTTP.send("POST", "\(stack.wakuURL)/test/v1/restart", json: [:])
            try await Stack.waitFor("the push server to subscribe again") {
                let topics = (try? await HTTP.get("\(stack.wakuURL)/test/v1/subscriptions").json.arrayValue) ?? []
                return topics.contains { $0.stringValue == Self.pubsub }
            }
            try await network.publish(
                requestMessage, topic: WakuStatus.partitionedTopic(client.serverKey), timestamp: sentAt)
            try await Task.sleep(for: .seconds(2))
            let again = try await network.answers(
                on: WakuStatus.partitionedTopic(try sender.publicKey()), key: sender, type: .pushNotificationResponse)
            #expect(again.count == 1, "a message seen twice is answered once")
            #expect(try await stack.received("apns").filter { $0.token == client.deviceToken }.count == 1)
        }

        @Test func malformedAndUnsignedMessagesAreDroppedAndCounted() async throws {
            let stack = try await Stack.get()
            let client = try await Client.make(stack)
            let network = Network(node: stack.wakuURL)
            let personal = WakuStatus.personalTopic(client.serverKey)
            func count(_ result: String) async -> Double {
                let metrics = (try? await HTTP.get("http://127.0.0.1:\(stack.ingestOpsPort)/metrics")) ?? nil
                let text = metrics.map { String(decoding: $0.body, as: UTF8.self) } ?? ""
                let line = text.split(separator: "\n").first {
                    $0.hasPrefix("pushrelay_status_waku_messages_total{") && $0.contains("result=\"\(result)\"")
                }
                return line.flatMap { Double($0.split(separator: " ").last ?? "") } ?? 0
            }
            let undecryptable = await count("undecryptable")
            let unsigned = await count("unsigned")
            // Garbage, and a frame without its signature flag, both to the server's key.
            try await network.publish(Array("not a waku payload".utf8), topic: personal)
            var frame = try WakuStatus.frame([1, 2, 3], signedBy: client.key)
            frame[0] &= ~0x04
            try await network.publish(try WakuStatus.encrypt(frame, to: client.serverKey), topic: personal)
            try await Stack.waitFor("both to be counted", timeout: .seconds(20)) {
                let (nowUndecryptable, nowUnsigned) = (await count("undecryptable"), await count("unsigned"))
                return nowUndecryptable > undecryptable && nowUnsigned > unsigned
            }
            let health = try await HTTP.get("http://127.0.0.1:\(stack.ingestOpsPort)/health/live")
            #expect(health.status == 200, "ingest stays up")
        }
    }
}
