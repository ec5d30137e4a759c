import Crypto
import DevStack
import FakeProviders
import Foundation
import PushCrypto
import PushModels
import Testing

/// Every live kind of Telegram's token list, through the four services to its fake, and
/// decrypted by the device side of its scheme.
extension StackTests {
    @Suite struct PlatformTests {
        /// What the fakes' control API says about them (URLs, the VAPID key).
        static func fakes(_ stack: Stack) async throws -> JSONValue {
            try await HTTP.get("\(stack.controlURL)/config").json
        }

        /// A browser's subscription: its private key and auth secret stay on the "device".
        struct Subscriber {
            let privateKey = P256.KeyAgreement.PrivateKey()
            let auth: [UInt8] = (0..<16).map { _ in UInt8.random(in: 0...255) }
            let endpoint: String

            var token: JSONValue {
                [
                    "endpoint": .string(endpoint),
                    "keys": [
                        "p256dh": .string(Base64URL.encode(Array(privateKey.publicKey.x963Representation))),
                        "auth": .string(Base64URL.encode(auth)),
                    ],
                ]
            }

            func decrypt(_ push: ReceivedPush) throws -> [UInt8] {
                let text = try #require(push.body["aes128gcm"]?.stringValue)
                return try WebPushEncryption.decrypt(
                    try #require(Base64URL.decode(text)), privateKey: privateKey, auth: auth)
            }
        }

        static func register(_ realm: RealmClient, _ fields: [String: JSONValue]) async throws -> HTTP.Reply {
            var body = fields
            body["realm_uuid"] = .string(realm.realmUUID)
            return try await HTTP.send(
                "POST", "\(realm.stack.ingestURL)/v1/devices", json: .object(body), auth: realm.auth)
        }

        static func telegramPayload(_ locKey: String, userID: Int64) -> JSONValue {
            [
                "data": [
                    "loc_key": .string(locKey), "loc_args": ["John Doe", "the secret plan"], "user_id": .int(userID),
                    "custom": ["chat_id": 241_233, "msg_id": 123], "sound": "sound1.mp3",
                ]
            ]
        }

        @Test func webPushIsEncryptedToTheSubscriptionAndSentWithVAPID() async throws {
            let stack = try await Stack.get()
            let realm = try await RealmClient.registered(stack)
            let fakes = try await Self.fakes(stack)
            let prefix = try #require(fakes["webpush_endpoint_prefix"]?.stringValue)
            let subscriber = Subscriber(endpoint: prefix + UUID().uuidString.lowercased())
            // Telegram's number, and the subscription as a JSON object.
            let registered = try await Self.register(
                realm, ["user_id": 30, "token_type": 10, "token": subscriber.token])
            #expect(registered.status == 201, "\(String(decoding: registered.body, as: UTF8.self))")

            let listing = try await HTTP.get(
                "\(stack.ingestURL)/v1/devices?realm_uuid=\(realm.realmUUID)&user_id=30", auth: realm.auth)
            let device = try #require(listing.json["devices"]?.arrayValue?.first)
            #expect(device["token_kind"] == "webpush" && device["token_type"] == .int(10))
            #expect(device["encryption"] == "aes128gcm")
            let shownToken = device["token"]?.stringValue ?? ""
            #expect(!shownToken.contains(subscriber.endpoint))

            let payload = realm.messagePayload(userID: 30, messageID: 7001, content: "secret plan")
            #expect(try await realm.notify(userID: 30, payload: payload).status == 202)
            let push = try #require(
                try await stack.waitForPushes("webpush") { $0.contains { $0.token == subscriber.endpoint } }
                    .first { $0.token == subscriber.endpoint })
            #expect(push.status == 201, "the fake checked VAPID and the framing: \(push.reason ?? "")")
            #expect(push.headers["content-encoding"] == "aes128gcm")
            #expect(push.headers["urgency"] == "high")
            #expect(push.headers["ttl"].flatMap { Int($0) }.map { $0 > 0 } == true)
            #expect(push.headers["vapid_k"] == fakes["vapid_public_key"]?.stringValue)
            #expect(try subscriber.decrypt(push) == Wire.canonical(payload))
            #expect(!String(decoding: Wire.canonical(push.body), as: UTF8.self).contains("secret plan"))

            // Removals are not urgent.
            let removal = realm.removePayload(userID: 30, messageIDs: [7001])
            #expect(try await realm.notify(userID: 30, payload: removal).status == 202)
            let pushes = try await stack.waitForPushes("webpush") {
                $0.filter { $0.token == subscriber.endpoint }.count >= 2
            }.filter { $0.token == subscriber.endpoint }
            let second = try #require(pushes.first { $0.headers["urgency"] == "normal" })
            #expect(try subscriber.decrypt(second) == Wire.canonical(removal))

            // A subscription the push service forgot (410) invalidates the device.
            try await stack.unregister("webpush", token: subscriber.endpoint)
            #expect(try await realm.notify(userID: 30, payload: payload).status == 202)
            _ = try await stack.waitForPushes("webpush") {
                $0.contains { $0.token == subscriber.endpoint && $0.status == 410 }
            }
            try await waitUntil("the device is invalidated") {
                let listing = try await HTTP.get(
                    "\(stack.ingestURL)/v1/devices?realm_uuid=\(realm.realmUUID)&user_id=30", auth: realm.auth)
                return listing.json["devices"]?.arrayValue?.first?["status"] == "invalid"
            }
        }

        @Test func simplePushWakesUpWithoutContentOrSendsWebPushWithKeys() async throws {
            let stack = try await Stack.get()
            let realm = try await RealmClient.registered(stack)
            let prefix = try #require(try await Self.fakes(stack)["simplepush_endpoint_prefix"]?.stringValue)
            let bare = prefix + UUID().uuidString.lowercased()
            let withKeys = Subscriber(endpoint: prefix + UUID().uuidString.lowercased())
            #expect(
                try await Self.register(realm, ["user_id": 31, "token_type": 4, "token": .string(bare)]).status == 201)
            #expect(
                try await Self.register(
                    realm,
                    [
                        "user_id": 31, "token_kind": "simplepush",
                        "token": .string(String(decoding: Wire.canonical(withKeys.token), as: UTF8.self)),
                    ]
                ).status == 201)

            let payload = realm.messagePayload(userID: 31, messageID: 7002, content: "secret plan")
            #expect(try await realm.notify(userID: 31, payload: payload).status == 202)
            let pushes = try await stack.waitForPushes("simplepush") { pushes in
                pushes.contains { $0.token == bare } && pushes.contains { $0.token == withKeys.endpoint }
            }
            let wakeUp = try #require(pushes.first { $0.token == bare })
            #expect(wakeUp.status == 200)
            #expect(wakeUp.body["version"]?.intValue.map { $0 > 0 } == true, "a PUT of version=<n>")
            #expect(!String(decoding: Wire.canonical(wakeUp.body), as: UTF8.self).contains("secret"))
            let message = try #require(pushes.first { $0.token == withKeys.endpoint })
            #expect(message.status == 201)
            #expect(try withKeys.decrypt(message) == Wire.canonical(payload))
        }

        @Test func mtprotoSecretEncryptsTelegramContentForFCM() async throws {
            let stack = try await Stack.get()
            let realm = try await RealmClient.registered(stack)
            let secret: [UInt8] = (0..<256).map { _ in UInt8.random(in: 0...255) }
            let token = RealmClient.fcmToken()
            let reply = try await Self.register(
                realm,
                ["user_id": 32, "token_type": 2, "token": .string(token), "secret": .string(Base64URL.encode(secret))])
            #expect(reply.status == 201, "\(String(decoding: reply.body, as: UTF8.self))")

            let payload = Self.telegramPayload("CHAT_MESSAGE_TEXT", userID: 32)
            #expect(try await realm.notify(userID: 32, payload: payload).status == 202)
            let push = try #require(
                try await stack.waitForPushes("fcm") { $0.contains { $0.token == token } }.first { $0.token == token })
            #expect(push.status == 200)
            #expect(push.headers["android.priority"] == "HIGH")
            let p = try #require(push.body["p"]?.stringValue)
            let blob = try #require(Base64URL.decode(p))
            #expect(Array(blob.prefix(8)) == MTProtoPush.authKeyID(secret))
            #expect(try MTProtoPush.decrypt(blob, authKey: secret) == Wire.canonical(payload))
            #expect(!p.contains("secret plan"))

            // Service notifications are background pushes.
            let deleted = Self.telegramPayload("MESSAGE_DELETED", userID: 32)
            #expect(try await realm.notify(userID: 32, payload: deleted).status == 202)
            let pushes = try await stack.waitForPushes("fcm") { $0.filter { $0.token == token }.count >= 2 }
                .filter { $0.token == token }
            #expect(pushes.contains { $0.headers["android.priority"] == "NORMAL" })

            // Telegram content is checked like Zulip's.
            let bad = try await realm.notify(userID: 32, payload: Self.telegramPayload("chat-message", userID: 32))
            #expect(bad.status == 400 && bad.json["code"] == "INVALID_PAYLOAD")
            #expect(bad.json["msg"]?.stringValue?.contains("loc_key") == true)
            let other = try await realm.notify(
                userID: 32, payload: Self.telegramPayload("CHAT_MESSAGE_TEXT", userID: 33))
            #expect(other.status == 400 && other.json["code"] == "INVALID_PAYLOAD")
        }

        @Test func apnsVoIPGoesToTheVoIPTopicNowOrNever() async throws {
            let stack = try await Stack.get()
            let realm = try await RealmClient.registered(stack)
            let token = RealmClient.apnsToken()
            let key = try RealmClient.pushKey()
            let reply = try await Self.register(
                realm,
                [
                    "user_id": 33, "token_type": 9, "token": .string(token), "ios_app_id": "org.zulip.Zulip",
                    "push_key": .string(key.base64), "push_key_id": 5,
                ])
            #expect(reply.status == 201, "\(String(decoding: reply.body, as: UTF8.self))")
            let payload = realm.messagePayload(userID: 33, messageID: 7003)
            #expect(try await realm.notify(userID: 33, payload: payload).status == 202)
            let push = try #require(
                try await stack.waitForPushes("apns") { $0.contains { $0.token == token } }.first { $0.token == token })
            #expect(push.status == 200)
            #expect(push.headers["apns-topic"] == "org.zulip.Zulip.voip")
            #expect(push.headers["apns-push-type"] == "voip")
            #expect(push.headers["apns-priority"] == "10")
            #expect(push.headers["apns-expiration"] == "0")
            #expect(push.body["aps"] == nil)
            #expect(try push.decrypt(with: key) == Wire.canonical(payload))
        }

        @Test func huaweiAndWNSDeliverEncryptedData() async throws {
            let stack = try await Stack.get()
            let realm = try await RealmClient.registered(stack)
            let fakes = try await Self.fakes(stack)
            let hmsToken = "IQAAAACy0" + UUID().uuidString.replacingOccurrences(of: "-", with: "")
            let channel = try #require(fakes["wns_channel_prefix"]?.stringValue) + "AwYAAAD" + UUID().uuidString
            let key = try RealmClient.pushKey()
            for (type, token) in [(13, hmsToken), (8, channel)] {
                let reply = try await Self.register(
                    realm,
                    [
                        "user_id": 34, "token_type": .int(Int64(type)), "token": .string(token),
                        "push_key": .string(key.base64), "push_key_id": 6,
                    ])
                #expect(reply.status == 201, "\(type): \(String(decoding: reply.body, as: UTF8.self))")
            }
            let payload = realm.messagePayload(userID: 34, messageID: 7004, content: "secret plan")
            #expect(try await realm.notify(userID: 34, payload: payload).status == 202)
            let hms = try #require(
                try await stack.waitForPushes("hms") { $0.contains { $0.token == hmsToken } }.first {
                    $0.token == hmsToken
                })
            #expect(hms.status == 200, "\(hms.reason ?? "")")
            #expect(try hms.decrypt(with: key) == Wire.canonical(payload))
            let wns = try #require(
                try await stack.waitForPushes("wns") { $0.contains { $0.token == channel } }.first {
                    $0.token == channel
                })
            #expect(wns.status == 200, "\(wns.reason ?? "")")
            #expect(wns.headers["x-wns-type"] == "wns/raw")
            #expect(try wns.decrypt(with: key) == Wire.canonical(payload))
        }

        @Test func telegramNumbersForDeadServicesAreRefusedWithTheReason() async throws {
            let stack = try await Stack.get()
            let realm = try await RealmClient.registered(stack)
            for number in [3, 5, 6, 7, 11, 12] {
                let reply = try await Self.register(
                    realm, ["user_id": 35, "token_type": .int(Int64(number)), "token": "abc"])
                #expect(reply.status == 400 && reply.json["code"] == "UNSUPPORTED_TOKEN_TYPE", "\(number)")
                let message = reply.json["msg"]?.stringValue ?? ""
                #expect(message.contains("not supported:"), "\(number)")
            }
            let unknown = try await Self.register(realm, ["user_id": 35, "token_type": 99, "token": "abc"])
            #expect(unknown.status == 400 && unknown.json["code"] == "UNSUPPORTED_TOKEN_TYPE")
            // Each kind checks its token's syntax.
            let cases: [(Int, JSONValue)] = [
                (1, "not-hex"), (10, ["endpoint": "http://push.example/x", "keys": ["p256dh": "AA", "auth": "AA"]]),
                (4, "ftp://push.example/x"), (8, "not a url"), (13, "bad token!"),
            ]
            for (number, token) in cases {
                var fields: [String: JSONValue] = ["user_id": 35, "token_type": .int(Int64(number)), "token": token]
                if number == 1 { fields["ios_app_id"] = "org.zulip.Zulip" }
                let reply = try await Self.register(realm, fields)
                #expect(reply.status == 400 && reply.json["code"] == "INVALID_TOKEN", "\(number): \(reply.status)")
            }
        }

        @Test func endpointsResolvingToPrivateAddressesAreNeverCalled() async throws {
            let stack = try await Stack.get()
            let realm = try await RealmClient.registered(stack)
            // 10.0.0.1 is not in the fakes' allowed hosts: the dispatcher refuses it.
            let endpoint = "https://10.0.0.1/sp/\(UUID().uuidString.lowercased())"
            #expect(
                try await Self.register(realm, ["user_id": 36, "token_type": 4, "token": .string(endpoint)]).status
                    == 201)
            let reply = try await realm.notify(userID: 36, payload: realm.messagePayload(userID: 36, messageID: 1))
            let id = try #require(reply.json["notification_id"]?.stringValue)
            try await waitUntil("the refusal is recorded") {
                try stack.records("push.deliveries").contains {
                    $0.json["notification_id"]?.stringValue == id && $0.json["reason"] == "endpoint_refused"
                }
            }
        }

        func waitUntil(_ what: String, _ condition: () async throws -> Bool) async throws {
            let deadline = ContinuousClock.now + .seconds(60)
            while try await !condition() {
                guard ContinuousClock.now < deadline else { throw StackError("timed out waiting until \(what)") }
                try await Task.sleep(for: .milliseconds(200))
            }
        }
    }
}
