import Crypto
import DevStack
import FakeProviders
import Foundation
import PushCrypto
import PushModels
import StatusPush
import SwiftProtobuf
import Testing

/// gorush's API and the Status push server, through the four services to the fakes.
extension StackTests {
    @Suite struct GorushStatusTests {
        static func push(_ realm: RealmClient, _ body: JSONValue, query: String = "") async throws -> HTTP.Reply {
            try await HTTP.send("POST", "\(realm.stack.ingestURL)/api/push\(query)", json: body, auth: realm.auth)
        }

        static func apnsToken() -> String { RealmClient.apnsToken() }
        static func fcmToken() -> String { "gorush-" + UUID().uuidString.replacingOccurrences(of: "-", with: "") }

        /// gorush's README examples, with real-looking tokens in place of `token_a`…: the
        /// answer is gorush's, and each push reaches its provider built as gorush builds it.
        @Test func gorushDocumentedExamplesReachTheProviders() async throws {
            let stack = try await Stack.get()
            let realm = try await RealmClient.registered(stack)
            let (ios1, ios2) = (Self.apnsToken(), Self.apnsToken())
            let (android1, android2) = (Self.fcmToken(), Self.fcmToken())
            let huawei = Self.fcmToken()
            let examples: [(JSONValue, Int)] = [
                (
                    [
                        "notifications": [
                            ["tokens": [.string(ios1), .string(ios2)], "platform": 1, "message": "Hello World iOS!"]
                        ]
                    ], 2
                ),
                (
                    [
                        "notifications": [
                            [
                                "tokens": [.string(ios1)], "platform": 1, "badge": 5,
                                "alert": [
                                    "title": "Game Request", "body": "Bob wants to play poker",
                                    "action-loc-key": "PLAY",
                                ],
                            ]
                        ]
                    ], 1
                ),
                (
                    [
                        "notifications": [
                            [
                                "tokens": [.string(ios2)], "platform": 1, "message": "You got your emails.", "badge": 9,
                                "sound": ["critical": 1, "name": "default", "volume": .double(1.0)],
                            ]
                        ]
                    ], 1
                ),
                (
                    [
                        "notifications": [
                            [
                                "tokens": [.string(android1), .string(android2)], "platform": 2,
                                "message": "Hello World Android!", "title": "You got message",
                                "data": ["Nick": "Mario", "body": "great match!", "Room": "PortugalVSDenmark"],
                            ]
                        ]
                    ], 2
                ),
                (
                    [
                        "notifications": [
                            [
                                "tokens": [.string(huawei)], "platform": 3, "message": "Hello World Huawei!",
                                "title": "You got message",
                            ]
                        ]
                    ], 1
                ),
            ]
            for (body, count) in examples {
                let reply = try await Self.push(realm, body)
                #expect(reply.status == 200, "\(String(decoding: reply.body, as: UTF8.self))")
                // gorush's answer, byte for byte.
                #expect(
                    String(decoding: reply.body, as: UTF8.self) == #"{"counts":\#(count),"logs":[],"success":"ok"}"#)
            }
            let apns = try await stack.waitForPushes("apns") { pushes in
                // Each token gets two pushes: wait for all four, whatever order they arrive in.
                pushes.filter { $0.token == ios1 }.count >= 2 && pushes.filter { $0.token == ios2 }.count >= 2
            }
            let hello = try #require(apns.first { $0.token == ios1 && $0.body["aps"]?["badge"] == nil })
            #expect(hello.body["aps"]?["alert"] == "Hello World iOS!")
            #expect(hello.headers["apns-topic"] == Stack.gorushTopic && hello.headers["apns-push-type"] == "alert")
            let game = try #require(apns.first { $0.token == ios1 && $0.body["aps"]?["badge"] == 5 })
            #expect(game.body["aps"]?["alert"]?["action-loc-key"] == "PLAY")
            #expect(game.body["aps"]?["alert"]?["title"] == "Game Request")
            let sound = try #require(apns.first { $0.token == ios2 && $0.body["aps"]?["badge"] == 9 })
            #expect(sound.body["aps"]?["sound"]?["name"] == "default")
            #expect(apns.filter { [ios1, ios2].contains($0.token) }.allSatisfy { $0.status == 200 })

            let fcm = try await stack.waitForPushes("fcm") { pushes in
                pushes.contains { $0.token == android1 } && pushes.contains { $0.token == android2 }
            }
            let android = try #require(fcm.first { $0.token == android1 })
            #expect(android.status == 200, "\(android.reason ?? "")")
            #expect(android.headers["notification.title"] == "You got message")
            #expect(android.headers["notification.body"] == "Hello World Android!")
            #expect(android.body["Room"] == "PortugalVSDenmark" && android.body["Nick"] == "Mario")
            // No priority in the example: gorush sends no android block, so FCM's defaults apply.
            #expect(android.headers["android.priority"] == nil && android.headers["android.ttl"] == nil)

            let hms = try await stack.waitForPushes("hms") { pushes in pushes.contains { $0.token.contains(huawei) } }
            #expect(hms.contains { $0.token.contains(huawei) && $0.status == 200 }, "\(hms.map(\.reason))")
        }

        /// What gorush leaves to the provider, the relay leaves too: no `apns-priority` or
        /// `apns-expiration` unless asked, nothing inferred for `content_available`, no
        /// android block without a priority; apns2's sound rules; an Android sound beside
        /// `mutable-content` in the APNs block.
        @Test func gorushDefaultsReachTheProvidersAsGorushSendsThem() async throws {
            let stack = try await Stack.get()
            let realm = try await RealmClient.registered(stack)
            let (plain, background, urgent, sound, expiring) = (
                Self.apnsToken(), Self.apnsToken(), Self.apnsToken(), Self.apnsToken(), Self.apnsToken()
            )
            let (android, mutable) = (Self.fcmToken(), Self.fcmToken())
            let reply = try await Self.push(
                realm,
                [
                    "notifications": [
                        ["tokens": [.string(plain)], "platform": 1, "message": "plain"],
                        ["tokens": [.string(background)], "platform": 1, "content_available": true],
                        ["tokens": [.string(urgent)], "platform": 1, "message": "u", "priority": "urgent"],
                        [
                            "tokens": [.string(sound)], "platform": 1, "message": "s", "priority": "normal",
                            "sound": ["critical": 3, "name": "siren.caf", "volume": .double(0.8)], "name": "bell.caf",
                        ],
                        [
                            "tokens": [.string(expiring)], "platform": 1, "message": "e", "expiration": 1_900_000_000,
                            "priority": "high",
                        ],
                        ["tokens": [.string(android)], "platform": 2, "message": "a", "title": "t"],
                        [
                            "tokens": [.string(mutable)], "platform": 2, "message": "m", "mutable_content": true,
                            "sound": "ding", "collapse_id": "c1",
                        ],
                    ]
                ])
            #expect(reply.status == 200 && reply.json["counts"] == 7, "\(reply.status)")
            let tokens = [plain, background, urgent, sound, expiring]
            let apns = try await stack.waitForPushes("apns") { pushes in
                tokens.allSatisfy { token in pushes.contains { $0.token == token } }
            }
            func push(_ token: String) throws -> ReceivedPush { try #require(apns.first { $0.token == token }) }
            for token in [plain, background, urgent] {
                let received = try push(token)
                #expect(received.status == 200 && received.headers["apns-push-type"] == "alert")
                #expect(received.headers["apns-priority"] == nil && received.headers["apns-expiration"] == nil)
            }
            #expect(try push(background).body == ["aps": ["content-available": 1]])
            #expect(
                try push(sound).body["aps"]?["sound"] == ["critical": 1, "name": "bell.caf", "volume": 1],
                "a top-level name starts over from apns2's sound")
            #expect(try push(sound).headers["apns-priority"] == "5")
            #expect(try push(expiring).headers["apns-expiration"] == "1900000000")
            #expect(try push(expiring).headers["apns-priority"] == "10")

            let fcm = try await stack.waitForPushes("fcm") { pushes in
                pushes.contains { $0.token == android } && pushes.contains { $0.token == mutable }
            }
            let plainAndroid = try #require(fcm.first { $0.token == android })
            #expect(plainAndroid.status == 200)
            #expect(!plainAndroid.headers.keys.contains { $0.hasPrefix("android.") }, "\(plainAndroid.headers)")
            let mutableAndroid = try #require(fcm.first { $0.token == mutable })
            #expect(mutableAndroid.headers["apns"] == #"{"payload":{"aps":{"mutable-content":1,"sound":"ding"}}}"#)
            #expect(mutableAndroid.headers["android.collapse_key"] == nil, "collapse_id is APNs' only")
            #expect(mutableAndroid.headers["android.ttl"] == nil && mutableAndroid.headers["android.priority"] == nil)
        }

        /// A large send, as gorush users make them: one iOS notification to 3,000 tokens
        /// (over gorush's Android cap and the relay's usual body limit) is accepted, split
        /// into records of at most 1,000 devices under one id, and every push arrives.
        @Test func aLargeSendReachesEveryToken() async throws {
            let stack = try await Stack.get()
            let realm = try await RealmClient.registered(stack)
            let tokens = (0..<3000).map { _ in Self.apnsToken() }
            let reply = try await Self.push(
                realm,
                [
                    "notifications": [
                        ["tokens": .array(tokens.map { .string($0) }), "platform": 1, "message": "to everyone"]
                    ]
                ])
            #expect(reply.status == 200 && reply.json["counts"] == 3000, "\(reply.status)")
            let ids = reply.headers.first { $0.0.lowercased() == "x-pushrelay-notification-ids" }?.1 ?? ""
            #expect(UUID(uuidString: ids) != nil, "one notification: \(ids)")
            let wanted = Set(tokens)
            let apns = try await stack.waitForPushes("apns", timeout: .seconds(120)) { pushes in
                Set(pushes.map(\.token)).isSuperset(of: wanted)
            }
            let mine = apns.filter { wanted.contains($0.token) }
            #expect(mine.count == 3000, "each token once: \(mine.count)")
            #expect(mine.allSatisfy { $0.status == 200 && $0.body["aps"]?["alert"] == "to everyone" })
        }

        @Test func gorushAnswersAsGorushDoes() async throws {
            let stack = try await Stack.get()
            let realm = try await RealmClient.registered(stack)
            // The verbatim example: `token_a` is no APNs token. gorush would send it and
            // log Apple's BadDeviceToken; the relay logs the same without asking.
            let verbatim = try await Self.push(
                realm,
                ["notifications": [["tokens": ["token_a", "token_b"], "platform": 1, "message": "Hello World iOS!"]]])
            #expect(verbatim.status == 200)
            #expect(verbatim.json["counts"] == 2 && verbatim.json["success"] == "ok")
            let logs = verbatim.json["logs"]?.arrayValue ?? []
            #expect(logs.count == 2)
            #expect(logs.first?["type"] == "failed-push" && logs.first?["platform"] == "ios")
            #expect(logs.first?["token"] == "*******" && logs.first?["error"] == "BadDeviceToken")
            #expect(logs.first?["message"] == "Hello World iOS!")
            // Byte for byte as gorush writes it: log entries in LogPushEntry's field order.
            #expect(
                String(decoding: verbatim.body, as: UTF8.self)
                    == #"{"counts":2,"logs":[{"type":"failed-push","platform":"ios","token":"*******","message":"Hello World iOS!","error":"BadDeviceToken"},{"type":"failed-push","platform":"ios","token":"*******","message":"Hello World iOS!","error":"BadDeviceToken"}],"success":"ok"}"#
            )

            // gorush's three 400s, with its body shape.
            let missing = try await Self.push(realm, ["nothing": true])
            #expect(missing.status == 400 && missing.json["code"] == 400)
            #expect(missing.json["message"] == "Missing notifications field.")
            let empty = try await Self.push(realm, ["notifications": []])
            #expect(empty.status == 400 && empty.json["message"] == "Notifications field is empty.")
            let many = JSONValue.object([
                "notifications": .array(
                    Array(
                        repeating: ["tokens": .array([.string(Self.fcmToken())]), "platform": 2, "message": "x"],
                        count: 101))
            ])
            let over = try await Self.push(realm, many)
            #expect(over.status == 400 && over.json["message"] == "Number of notifications(101) over limit(100)")
            // Clear errors where gorush would drop silently.
            let platform = try await Self.push(realm, ["notifications": [["tokens": ["a"], "platform": 9]]])
            #expect(platform.status == 400 && platform.json["field"] == "notifications[0].platform")
            let mistyped = try await Self.push(
                realm, ["notifications": [["tokens": ["a"], "platform": 2, "mutable_content": 1]]])
            #expect(mistyped.status == 400 && mistyped.json["field"] == "notifications[0].mutable_content")

            // Callers authenticate: no key, a wrong key, and the https://user:key@host form.
            let anonymous = try await HTTP.send(
                "POST", "\(stack.ingestURL)/api/push", json: ["notifications": []], auth: nil)
            #expect(anonymous.status == 401 && anonymous.json["code"] == 401)
            let wrong = try await HTTP.send(
                "POST", "\(stack.ingestURL)/api/push", json: ["notifications": []], auth: (realm.auth.0, "wrong"))
            #expect(wrong.status == 401)

            // gorush's other endpoints.
            #expect(try await HTTP.get("\(stack.ingestURL)/healthz").status == 200)
            let version = try await HTTP.get("\(stack.ingestURL)/version")
            #expect(version.json["version"]?.stringValue?.isEmpty == false && version.json["source"] != nil)
            let goStats = try await HTTP.get("\(stack.ingestURL)/api/stat/go", auth: realm.auth)
            #expect(goStats.status == 200 && goStats.json["go_version"] != nil && goStats.json["cpu_num"] != nil)
            let config = try await HTTP.get("\(stack.ingestURL)/api/config", auth: realm.auth)
            let yaml = String(decoding: config.body, as: UTF8.self)
            #expect(config.status == 200 && yaml.contains("max_notification: 100"))
            #expect(yaml.contains("[REDACTED]") && !yaml.contains(realm.auth.1))
            #expect(
                config.headers.contains { $0.0.lowercased() == "content-type" && $0.1.hasPrefix("application/yaml") })
        }

        /// Sync mode answers after delivery, with the failed pushes in `logs`; `/api/stat/app`
        /// counts them; the feedback hook gets the failure, signed.
        @Test func gorushSyncModeStatsAndFeedbackHook() async throws {
            let stack = try await Stack.get()
            let realm = try await RealmClient.registered(stack)
            let good = Self.fcmToken()
            let sent = try await Self.push(
                realm, ["notifications": [["tokens": [.string(good)], "platform": 2, "message": "sync"]]],
                query: "?sync=true")
            #expect(String(decoding: sent.body, as: UTF8.self) == #"{"counts":1,"logs":[],"success":"ok"}"#)
            let ids = sent.headers.first { $0.0.lowercased() == "x-pushrelay-notification-ids" }?.1 ?? ""
            #expect(UUID(uuidString: ids) != nil, "one notification, its id")
            #expect(try await stack.received("fcm").contains { $0.token == good }, "answered after delivery")

            let stats = try await HTTP.get("\(stack.ingestURL)/api/stat/app", auth: realm.auth)
            #expect(stats.json["total_count"] == 1 && stats.json["submitted_tasks"] == 1)
            for platform in ["ios", "android", "huawei"] { #expect(stats.json[platform]?["push_success"] != nil) }
            try await waitUntil("the success is counted") {
                try await HTTP.get("\(stack.ingestURL)/api/stat/app", auth: realm.auth).json["android"]?[
                    "push_success"] == 1
            }

            // The feedback hook: a URL of the fakes that fails once, so the relay retries.
            let prefix = try #require(
                try await HTTP.get("\(stack.controlURL)/config").json["webpush_endpoint_prefix"]?.stringValue)
            let hookID = "fail-1-\(UUID().uuidString.lowercased())"
            let hookURL = prefix.replacingOccurrences(of: "/wp/", with: "/hook/") + hookID
            let hook = try await HTTP.send(
                "PUT", "\(stack.ingestURL)/api/feedback-hook", json: ["url": .string(hookURL)], auth: realm.auth)
            let secret = try #require(hook.json["secret"]?.stringValue, "\(String(decoding: hook.body, as: UTF8.self))")
            #expect(
                try await HTTP.get("\(stack.ingestURL)/api/feedback-hook", auth: realm.auth).json["url"]
                    == .string(hookURL))
            let insecure = try await HTTP.send(
                "PUT", "\(stack.ingestURL)/api/feedback-hook", json: ["url": "http://example.com/hook"],
                auth: realm.auth)
            #expect(insecure.status == 400)

            // A dead token: sync mode answers with the failure in `logs`, as gorush does.
            let dead = Self.fcmToken()
            try await stack.unregister("fcm", token: dead)
            let failed = try await Self.push(
                realm,
                [
                    "notifications": [
                        ["tokens": [.string(dead)], "platform": 2, "message": "to a dead token", "notif_id": "n-42"]
                    ]
                ], query: "?sync=true")
            let log = try #require(
                failed.json["logs"]?.arrayValue?.first, "\(String(decoding: failed.body, as: UTF8.self))")
            #expect(log["type"] == "failed-push" && log["platform"] == "android" && log["notif_id"] == "n-42")
            #expect(log["message"] == "to a dead token" && log["token"]?.stringValue?.hasPrefix("**********") == true)
            #expect(log["error"]?.stringValue?.isEmpty == false)
            // The dead token is in the realm's feedback, as for any device.
            let yaml = String(
                decoding: try await HTTP.get("\(stack.ingestURL)/api/config", auth: realm.auth).body, as: UTF8.self)
            let realmLine = try #require(yaml.split(separator: "\n").first { $0.contains("gorush_realm_uuid") })
            let gorushRealm = String(realmLine.split(separator: "\"").dropFirst().first ?? "")
            try await waitUntil("the invalidation is in the feedback") {
                let feedback = try await HTTP.get(
                    "\(stack.ingestURL)/v1/feedback?realm_uuid=\(gorushRealm)", auth: realm.auth)
                return feedback.json["invalidated"]?.arrayValue?.isEmpty == false
            }

            // The hook gets it after one retry, signed with the secret.
            let deliveries = try await stack.waitForPushes("hook") { pushes in
                pushes.contains { $0.token == hookID && $0.status == 200 }
            }.filter { $0.token == hookID }
            #expect(deliveries.count == 2, "a 503, then a retry")
            let delivered = try #require(deliveries.last)
            #expect(delivered.body["token"] == .string(dead) && delivered.body["notif_id"] == "n-42")
            #expect(delivered.body["type"] == "failed-push" && delivered.body["platform"] == "android")
            let signature = try #require(
                delivered.headers["X-PushRelay-Signature"] ?? delivered.headers["x-pushrelay-signature"])
            let parts = Dictionary(
                uniqueKeysWithValues: signature.split(separator: ",").compactMap { part -> (String, String)? in
                    let pair = part.split(separator: "=", maxSplits: 1)
                    return pair.count == 2 ? (String(pair[0]), String(pair[1])) : nil
                })
            let t = try #require(parts["t"])
            let mac = HMAC<SHA256>.authenticationCode(
                for: Array("\(t).".utf8) + Array((delivered.reason ?? "").utf8),
                using: SymmetricKey(data: Array(secret.utf8)))
            #expect(parts["v1"] == mac.map { String(format: "%02x", $0) }.joined())
        }

        func waitUntil(_ what: String, _ condition: () async throws -> Bool) async throws {
            let deadline = ContinuousClock.now + .seconds(60)
            while try await !condition() {
                guard ContinuousClock.now < deadline else { throw StackError("timed out waiting until \(what)") }
                try await Task.sleep(for: .milliseconds(200))
            }
        }

        // MARK: Status

        struct StatusClient {
            let stack: Stack
            var key = try! Secp256k1.PrivateKey.generate()
            let serverKey: Secp256k1.PublicKey
            var installation = UUID().uuidString.lowercased()
            var accessToken = UUID().uuidString.lowercased()
            var deviceToken = RealmClient.apnsToken()

            init(stack: Stack, serverKey: Secp256k1.PublicKey) {
                self.stack = stack
                self.serverKey = serverKey
            }

            init(stack: Stack, serverKey: Secp256k1.PublicKey, installation: String, deviceToken: String) {
                self.init(stack: stack, serverKey: serverKey)
                self.installation = installation
                self.deviceToken = deviceToken
            }

            var hashedKey: [UInt8] { StatusCrypto.hashedPublicKey(try! key.publicKey()) }

            static func make(_ stack: Stack) async throws -> StatusClient {
                let info = try await HTTP.get("\(stack.ingestURL)/status/v1/server")
                let hex = try #require(info.json["public_key"]?.stringValue)
                return StatusClient(stack: stack, serverKey: try Secp256k1.PublicKey(bytes: hexBytes(hex)))
            }

            func registration(version: UInt64, _ change: (inout StatusRegistration) -> Void = { _ in }) throws
                -> StatusRegistration
            {
                var r = StatusRegistration()
                r.tokenType = .apnToken
                r.deviceToken = deviceToken
                r.installationID = installation
                r.accessToken = accessToken
                r.enabled = true
                r.version = version
                r.apnTopic = "org.zulip.Zulip"
                r.allowedMentionsChatList = [Data(StatusCrypto.shake256(Array("general".utf8)))]
                r.grant = Data(try StatusCrypto.makeGrant(client: key, server: serverKey, accessToken: accessToken))
                change(&r)
                return r
            }

            /// Sends a registration: encrypted to the server, signed by `signer`.
            func register(
                _ r: StatusRegistration, signer: Secp256k1.PrivateKey? = nil, encryptTo: Secp256k1.PublicKey? = nil
            )
                async throws -> (HTTP.Reply, StatusRegistrationResponse?, [UInt8])
            {
                let signer = signer ?? key
                let shared = try signer.sharedSecret(with: encryptTo ?? serverKey)
                let payload = try StatusCrypto.encrypt(try r.serializedBytes(), key: shared)
                let body = try StatusEnvelope.seal(payload, type: .pushNotificationRegistration, key: signer)
                let reply = try await HTTP.send(
                    "POST", "\(stack.ingestURL)/status/v1/registration", body: body,
                    contentType: "application/x-protobuf")
                guard reply.status == 200 else { return (reply, nil, payload) }
                let envelope = try StatusEnvelope(bytes: reply.body, expected: .pushNotificationRegistrationResponse)
                #expect(envelope.signer == serverKey, "answers are signed by the server")
                return (reply, try StatusRegistrationResponse(serializedBytes: envelope.payload), payload)
            }

            func query(_ keys: [[UInt8]]) async throws -> StatusQueryResponse {
                var query = StatusQuery()
                query.publicKeys = keys.map { Data($0) }
                let ephemeral = try Secp256k1.PrivateKey.generate()
                let body = try StatusEnvelope.seal(
                    try query.serializedBytes(), type: .pushNotificationQuery, key: ephemeral)
                let reply = try await HTTP.send(
                    "POST", "\(stack.ingestURL)/status/v1/query", body: body, contentType: "application/x-protobuf")
                let envelope = try StatusEnvelope(bytes: reply.body, expected: .pushNotificationQueryResponse)
                return try StatusQueryResponse(serializedBytes: envelope.payload)
            }

            func notify(_ targets: [StatusNotification]) async throws -> StatusNotificationResponse {
                var request = StatusNotificationRequest()
                request.requests = targets
                request.messageID = Data((0..<32).map { _ in UInt8.random(in: 0...255) })
                let ephemeral = try Secp256k1.PrivateKey.generate()
                let body = try StatusEnvelope.seal(
                    try request.serializedBytes(), type: .pushNotificationRequest, key: ephemeral)
                let reply = try await HTTP.send(
                    "POST", "\(stack.ingestURL)/status/v1/notify", body: body, contentType: "application/x-protobuf")
                let envelope = try StatusEnvelope(bytes: reply.body, expected: .pushNotificationResponse)
                let response = try StatusNotificationResponse(serializedBytes: envelope.payload)
                #expect(response.messageID == request.messageID)
                return response
            }

            func target(_ type: StatusNotification.PushNotificationType = .message, chat: String, token: String? = nil)
                -> StatusNotification
            {
                var n = StatusNotification()
                n.accessToken = token ?? accessToken
                n.chatID = Data(StatusCrypto.shake256(Array(chat.utf8)))
                n.publicKey = Data(hashedKey)
                n.installationID = installation
                n.message = Data("ciphertext-\(chat)".utf8)
                n.type = type
                n.author = Data(StatusCrypto.shake256(Array("0x04sender".utf8)))
                return n
            }
        }

        @Test func statusRegistrationRulesOverHTTP() async throws {
            let stack = try await Stack.get()
            let client = try await StatusClient.make(stack)
            let (reply, response, payload) = try await client.register(try client.registration(version: 1))
            #expect(reply.status == 200)
            #expect(response?.success == true)
            #expect(
                response?.requestID == Data(StatusCrypto.shake256(payload)), "request_id = SHAKE-256 of the payload")

            // version: the same or lower again is VERSION_MISMATCH; zero (empty) is malformed.
            #expect(try await client.register(try client.registration(version: 1)).1?.error == .versionMismatch)
            #expect(try await client.register(try client.registration(version: 0)).1?.error == .malformedMessage)
            // unsupported token type, empty token, bad access token, missing topic, bad grant.
            #expect(
                try await client.register(try client.registration(version: 2) { $0.tokenType = .unknownTokenType }).1?
                    .error == .unsupportedTokenType)
            #expect(
                try await client.register(try client.registration(version: 2) { $0.deviceToken = "" }).1?.error
                    == .malformedMessage)
            #expect(
                try await client.register(try client.registration(version: 2) { $0.accessToken = "nope" }).1?.error
                    == .malformedMessage)
            #expect(
                try await client.register(try client.registration(version: 2) { $0.apnTopic = "" }).1?.error
                    == .malformedMessage)
            #expect(
                try await client.register(try client.registration(version: 2) { $0.grant = Data([1, 2, 3]) }).1?.error
                    == .malformedMessage)
            // An APNs topic the operator did not list: anonymous clients do not pick the app.
            #expect(
                try await client.register(try client.registration(version: 2) { $0.apnTopic = "com.other.app" }).1?
                    .error == .malformedMessage)
            // Undecryptable (encrypted to another key) and badly signed messages are discarded: 400, no answer.
            let other = try Secp256k1.PrivateKey.generate()
            let undecryptable = try await client.register(
                try client.registration(version: 2), encryptTo: try other.publicKey())
            #expect(undecryptable.0.status == 400 && undecryptable.0.json["code"] == "UNDECRYPTABLE")
            var broken = StatusEnvelopeMessage()
            broken.type = .pushNotificationRegistration
            broken.payload = Data([1, 2, 3])
            broken.signature = Data([UInt8](repeating: 7, count: 65))
            let badSignature = try await HTTP.send(
                "POST", "\(stack.ingestURL)/status/v1/registration", body: try broken.serializedBytes(),
                contentType: "application/x-protobuf")
            #expect(badSignature.status == 400)

            // The query answers the access token by the hashed key.
            let found = try await client.query([client.hashedKey, [UInt8](repeating: 1, count: 64), client.hashedKey])
            #expect(found.success && found.info.count == 1, "a key named twice is answered once")
            #expect(found.info.first?.accessToken == client.accessToken)
            #expect(found.info.first?.installationID == client.installation)

            // Unregistering keeps only the version: older registrations are refused after it.
            let unregister = try client.registration(version: 5) {
                $0.unregister = true
                $0.deviceToken = ""
            }
            #expect(try await client.register(unregister).1?.success == true)
            #expect(try await client.query([client.hashedKey]).info.isEmpty)
            #expect(try await client.register(try client.registration(version: 4)).1?.error == .versionMismatch)
            #expect(try await client.register(try client.registration(version: 6)).1?.success == true)

            // No credentials: each client address has its own budget of requests.
            let limited = try await stack.launchExtraIngest(
                ["PUSHRELAY_STATUS_REQUESTS_MAX": "2", "PUSHRELAY_HTTP_CLIENT_IP_HEADER": "X-Forwarded-For"],
                name: "status-limit")
            let address = "10.\(Int.random(in: 0...255)).\(Int.random(in: 0...255)).\(Int.random(in: 1...254))"
            // The three requests in one 60 s window: not across its edge.
            let intoWindow = Date().timeIntervalSince1970.truncatingRemainder(dividingBy: 60)
            if intoWindow > 50 { try await Task.sleep(for: .seconds(61 - intoWindow)) }
            var statuses: [Int] = []
            for _ in 0..<3 {
                statuses.append(
                    try await HTTP.send(
                        "POST", "\(limited.api)/status/v1/query", body: [0x08], contentType: "application/x-protobuf",
                        headers: [("X-Forwarded-For", address)]
                    ).status)
            }
            #expect(statuses == [400, 400, 429])
        }

        @Test func statusNotificationsReachTheDeviceUnlessFiltered() async throws {
            let stack = try await Stack.get()
            let client = try await StatusClient.make(stack)
            let registration = try client.registration(version: 1) {
                $0.blockedChatList = [Data(StatusCrypto.shake256(Array("spam".utf8)))]
            }
            #expect(try await client.register(registration).1?.success == true)

            var unknown = client.target(chat: "general")
            unknown.installationID = UUID().uuidString
            let response = try await client.notify([
                client.target(chat: "general"), client.target(chat: "general", token: UUID().uuidString.lowercased()),
                unknown, client.target(chat: "spam"),
            ])
            #expect(response.reports.count == 4)
            #expect(response.reports[0].success)
            #expect(!response.reports[1].success && response.reports[1].error == .wrongToken)
            #expect(!response.reports[2].success && response.reports[2].error == .notRegistered)
            // Filtered: reported as a success, so the sender learns nothing of the preferences.
            #expect(response.reports[3].success)

            let pushes = try await stack.waitForPushes("apns") { $0.contains { $0.token == client.deviceToken } }
            let push = try #require(pushes.first { $0.token == client.deviceToken })
            #expect(push.body["aps"]?["alert"] == "You have a new message")
            #expect(
                push.body["chatId"]?.stringValue == StatusCrypto.hex0x(StatusCrypto.shake256(Array("general".utf8))))
            #expect(push.body["installation_ids"] == [.string(client.installation)])
            #expect(push.body["encryptedMessage"]?.stringValue == StatusCrypto.hex0x(Array("ciphertext-general".utf8)))
            #expect(push.headers["apns-topic"] == "org.zulip.Zulip")
            try await waitUntil("the filtered device's outcome is recorded") {
                try stack.records("push.deliveries").contains {
                    $0.json["outcome"] == "filtered" && $0.json["reason"] == "blocked_chat"
                }
            }
            // One push only: the spam chat was not sent.
            try await Task.sleep(for: .seconds(1))
            #expect(try await stack.received("apns").filter { $0.token == client.deviceToken }.count == 1)
        }

        /// Two chat keys on one phone (one token): unregistering one leaves the other's pushes alone.
        @Test func twoKeysOnOnePhoneAreTwoRegistrations() async throws {
            let stack = try await Stack.get()
            let first = try await StatusClient.make(stack)
            let second = StatusClient(
                stack: stack, serverKey: first.serverKey, installation: first.installation,
                deviceToken: first.deviceToken)
            #expect(try await first.register(try first.registration(version: 1)).1?.success == true)
            #expect(try await second.register(try second.registration(version: 1)).1?.success == true)
            let unregister = try first.registration(version: 2) {
                $0.unregister = true
                $0.deviceToken = ""
            }
            #expect(try await first.register(unregister).1?.success == true)
            let response = try await second.notify([second.target(chat: "general")])
            #expect(response.reports.first?.success == true)
            let pushes = try await stack.waitForPushes("apns") { $0.contains { $0.token == second.deviceToken } }
            #expect(pushes.filter { $0.token == second.deviceToken }.allSatisfy { $0.status == 200 })
            #expect(try await first.notify([first.target(chat: "general")]).reports.first?.error == .notRegistered)
        }
    }
}

func hexBytes(_ text: String) -> [UInt8] { Fingerprint.bytes(fromHex: text) ?? [] }
