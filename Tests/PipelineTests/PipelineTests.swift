import DevStack
import FakeProviders
import Foundation
import Kafka
import PushCrypto
import PushModels
import Testing

/// End to end through the real services, Redis, the dev broker and the provider fakes.
extension StackTests {
    @Suite struct PipelineTests {
        @Test func nativeNotifyIsEncryptedPerDeviceAndDelivered() async throws {
            let stack = try await Stack.get()
            let realm = try await RealmClient.registered(stack)
            let apnsToken = RealmClient.apnsToken()
            let fcmToken = RealmClient.fcmToken()
            let apnsKey = try RealmClient.pushKey()
            let fcmKey = try RealmClient.pushKey()
            let apnsDevice = try await realm.device(userID: 10, kind: "apns", token: apnsToken, key: apnsKey, keyID: 11)
            let fcmDevice = try await realm.device(userID: 10, kind: "fcm", token: fcmToken, key: fcmKey, keyID: 12)
            #expect(apnsDevice != fcmDevice)

            let payload = realm.messagePayload(userID: 10, messageID: 4501, content: "secret plan")
            let reply = try await realm.notify(userID: 10, payload: payload)
            #expect(reply.status == 202)
            #expect(reply.json["device_count"]?.intValue == 2)
            #expect(reply.json["delete_device_ids"] == .array([]))

            let apns = try await stack.waitForPushes("apns") { $0.contains { $0.token == apnsToken } }
                .filter { $0.token == apnsToken }
            let fcm = try await stack.waitForPushes("fcm") { $0.contains { $0.token == fcmToken } }
                .filter { $0.token == fcmToken }
            try await Task.sleep(for: .milliseconds(500))
            #expect(try await stack.received("apns").filter { $0.token == apnsToken }.count == 1)
            #expect(try await stack.received("fcm").filter { $0.token == fcmToken }.count == 1)

            let plaintext = Wire.canonical(payload)
            let apnsPush = try #require(apns.first)
            #expect(apnsPush.status == 200)
            #expect(apnsPush.httpVersion == "2", "APNs is spoken over HTTP/2")
            #expect(apnsPush.headers["apns-topic"] == "org.zulip.Zulip")
            #expect(apnsPush.headers["apns-push-type"] == "alert")
            #expect(apnsPush.headers["apns-priority"] == "10")
            #expect(apnsPush.body["push_key_id"] == .int(11))
            #expect(apnsPush.body["aps"] == ["mutable-content": 1, "alert": ["title": "New notification"]])
            #expect(try apnsPush.decrypt(with: apnsKey) == plaintext)

            let fcmPush = try #require(fcm.first)
            #expect(fcmPush.status == 200)
            #expect(fcmPush.httpVersion == "2")
            #expect(fcmPush.headers["android.priority"] == "HIGH")
            #expect(fcmPush.body["push_key_id"] == .string("12"))
            #expect(try fcmPush.decrypt(with: fcmKey) == plaintext)
            // Nothing readable leaves the relay: the content is only inside the ciphertext.
            #expect(!String(decoding: Wire.canonical(fcmPush.body), as: UTF8.self).contains("secret plan"))

            // Nor do the topics carry the tokens: push.outbound has them sealed.
            let id = try #require(reply.json["notification_id"]?.stringValue)
            let outbound = try stack.records("push.outbound").filter { $0.notificationID == id }
            #expect(outbound.count == 2)
            for record in outbound {
                let text = String(decoding: record.value, as: UTF8.self)
                #expect(!text.contains(apnsToken) && !text.contains(fcmToken))
                #expect(record.json["sealed_token"]?["alg"] == "xchacha20poly1305" && record.json["token"] == nil)
            }
        }

        @Test func removalsAreSilentBackgroundPushes() async throws {
            let stack = try await Stack.get()
            let realm = try await RealmClient.registered(stack)
            let token = RealmClient.apnsToken()
            let fcmToken = RealmClient.fcmToken()
            let key = try RealmClient.pushKey()
            _ = try await realm.device(userID: 20, kind: "apns", token: token, key: key)
            _ = try await realm.device(userID: 20, kind: "fcm", token: fcmToken, key: key)
            let payload = realm.removePayload(userID: 20, messageIDs: [31, 32])
            #expect(try await realm.notify(userID: 20, payload: payload).status == 202)
            let push = try #require(
                try await stack.waitForPushes("apns") { $0.contains { $0.token == token } }.first { $0.token == token })
            #expect(push.headers["apns-push-type"] == "background")
            #expect(push.headers["apns-priority"] == "5")
            #expect(try push.decrypt(with: key) == Wire.canonical(payload))
            let fcm = try #require(
                try await stack.waitForPushes("fcm") { $0.contains { $0.token == fcmToken } }.first {
                    $0.token == fcmToken
                })
            #expect(fcm.headers["android.priority"] == "NORMAL")
        }

        @Test func bouncerAPIPassesCiphertextThroughUnchanged() async throws {
            let stack = try await Stack.get()
            let realm = try await RealmClient.registered(stack)
            let apnsToken = RealmClient.apnsToken()
            let fcmToken = RealmClient.fcmToken()
            let first = try await realm.bouncerRegister(
                kind: "apns", token: apnsToken, appID: "org.zulip.Zulip", pushAccountID: 10)
            #expect(first.status == 200)
            let apnsDevice = try #require(first.json["device_id"]?.intValue)
            let again = try await realm.bouncerRegister(
                kind: "apns", token: apnsToken, appID: "org.zulip.Zulip", pushAccountID: 10)
            #expect(again.json["device_id"]?.intValue == apnsDevice, "same token and push_account_id → same device")
            let fcmDevice = try #require(
                try await realm.bouncerRegister(kind: "fcm", token: fcmToken, appID: nil, pushAccountID: 20)
                    .json["device_id"]?.intValue)

            let apnsPayload: JSONValue = [
                "push_account_id": 10,
                "encrypted_data":
                    "uOGQ9m8bdnLab/2Qq6WLdJnFUsU/NlX0955rF6GgpiZylQB/HSD+lrHct0KUXdCneu+fnGOuBMAGkYol+SLlbvdsnePn/f6wSvMDbm3iffcgiz2u8TywUlmQL/Q7Ruj5RSpLgEhpFitL/WjwQBtrA31vsqMHycmROju+tOhFlVjmzJmYy3o7ZQDi",
                "aps": ["mutable-content": 1, "alert": ["title": "New notification"]],
            ]
            let fcmPayload: JSONValue = [
                "push_account_id": 20,
                "encrypted_data":
                    "OzPhtLiyU1U+3ynqyTxkFt83N5GN7t3Uw8/OkCoFKFo/cu3GAzCMMbAAhPghflkrFK37SNOuxpPiL1TzPy5tQJqdSKpQrgu6cp0Y6VVA1aV",
            ]
            let reply = try await HTTP.send(
                "POST", "\(stack.ingestURL)/api/v1/remotes/push/e2ee/notify",
                json: [
                    "realm_uuid": .string(realm.realmUUID),
                    "push_requests": [
                        [
                            "device_id": .int(apnsDevice),
                            "http_headers": ["apns_priority": 10, "apns_push_type": "alert"],
                            "payload": apnsPayload,
                        ],
                        ["device_id": .int(fcmDevice), "fcm_priority": "high", "payload": fcmPayload],
                        ["device_id": 987_654_321, "fcm_priority": "high", "payload": fcmPayload],
                    ],
                ], auth: realm.auth)
            #expect(reply.status == 200)
            #expect(reply.json["result"] == "success")
            #expect(reply.json["apple_successfully_sent_count"] == 1)
            #expect(reply.json["android_successfully_sent_count"] == 1)
            #expect(reply.json["delete_device_ids"] == [987_654_321])
            #expect(reply.json["realm_push_status"]?["can_push"] == true)

            let apns = try await stack.waitForPushes("apns") { $0.contains { $0.token == apnsToken } }
            #expect(apns.first { $0.token == apnsToken }?.body == apnsPayload)
            #expect(apns.first { $0.token == apnsToken }?.headers["apns-topic"] == "org.zulip.Zulip")
            let fcm = try await stack.waitForPushes("fcm") { $0.contains { $0.token == fcmToken } }
            #expect(
                fcm.first { $0.token == fcmToken }?.body
                    == ["push_account_id": "20", "encrypted_data": fcmPayload["encrypted_data"] ?? .null])

            // The server reads each device's outcome with the id the answer's header carries.
            let id = try #require(reply.headers.first { $0.0.lowercased() == "x-pushrelay-notification-ids" }?.1)
            var status = HTTP.Reply(status: 0, body: [], headers: [])
            try await Stack.waitFor("the Zulip notification's status", timeout: .seconds(30)) {
                status = (try? await HTTP.get("\(stack.ingestURL)/v1/notifications/\(id)", auth: realm.auth)) ?? status
                let states = status.json["devices"]?.arrayValue?.compactMap { $0["state"]?.stringValue } ?? []
                return states.filter { $0 == "sent" }.count == 2
            }
            #expect(status.json["summary"]?["sent"] == 2, "\(String(decoding: status.body, as: UTF8.self))")
        }

        @Test func deadTokensAreInvalidatedReportedAndNotSentAgain() async throws {
            let stack = try await Stack.get()
            let realm = try await RealmClient.registered(stack)
            let apnsToken = RealmClient.apnsToken()
            let fcmToken = RealmClient.fcmToken()
            let liveToken = RealmClient.fcmToken()
            let key = try RealmClient.pushKey()
            let apnsDevice = try await realm.device(userID: 30, kind: "apns", token: apnsToken, key: key)
            let fcmDevice = try await realm.device(userID: 30, kind: "fcm", token: fcmToken, key: key)
            _ = try await realm.device(userID: 30, kind: "fcm", token: liveToken, key: key)
            try await stack.unregister("apns", token: apnsToken)
            try await stack.unregister("fcm", token: fcmToken)

            #expect(
                try await realm.notify(userID: 30, payload: realm.messagePayload(userID: 30, messageID: 1)).status
                    == 202)
            var reported: [JSONValue] = []
            try await Stack.waitFor("both invalidations in /v1/feedback") {
                reported = (try? await realm.feedback())?.json["invalidated"]?.arrayValue ?? []
                return reported.count == 2
            }
            let reasons = Dictionary(
                uniqueKeysWithValues: reported.compactMap { e in
                    e["device_id"]?.intValue.map { ($0, e["reason"]?.stringValue) }
                })
            #expect(reasons[apnsDevice] == "Unregistered")
            #expect(reasons[fcmDevice] == "UNREGISTERED")
            let cursor = try #require(reported.last?["cursor"]?.stringValue)
            #expect(try await realm.feedback(after: cursor).json["invalidated"] == .array([]))

            let before = (try await stack.received("apns") + stack.received("fcm")).filter {
                [apnsToken, fcmToken].contains($0.token)
            }.count
            let second = try await realm.notify(userID: 30, payload: realm.messagePayload(userID: 30, messageID: 2))
            #expect(
                second.json["delete_device_ids"]
                    == .array([.int(min(apnsDevice, fcmDevice)), .int(max(apnsDevice, fcmDevice))]))
            #expect(second.json["device_count"] == 1)
            _ = try await stack.waitForPushes("fcm") { $0.filter { $0.token == liveToken }.count == 2 }
            try await Task.sleep(for: .milliseconds(500))
            let after = (try await stack.received("apns") + stack.received("fcm")).filter {
                [apnsToken, fcmToken].contains($0.token)
            }.count
            #expect(after == before, "invalid devices are not sent to again")
        }

        @Test func serversSeeOnlyTheirOwnRealmsAndDevices() async throws {
            let stack = try await Stack.get()
            let alice = try await RealmClient.registered(stack)
            let mallory = try await RealmClient.registered(stack)
            let device = try await alice.device(
                userID: 1, kind: "fcm", token: RealmClient.fcmToken(), key: try RealmClient.pushKey())

            let noAuth = try await HTTP.get("\(stack.ingestURL)/v1/devices?realm_uuid=\(alice.realmUUID)&user_id=1")
            #expect(noAuth.status == 401)
            #expect(noAuth.code == "UNAUTHORIZED")
            let wrongKey = try await HTTP.get(
                "\(stack.ingestURL)/v1/devices?realm_uuid=\(alice.realmUUID)&user_id=1",
                auth: (alice.serverUUID, String(repeating: "x", count: 64)))
            #expect(wrongKey.status == 401)
            let bouncerNoAuth = try await HTTP.send(
                "POST", "\(stack.ingestURL)/api/v1/remotes/push/e2ee/notify",
                json: ["realm_uuid": .string(alice.realmUUID)])
            #expect(bouncerNoAuth.status == 401)
            #expect(bouncerNoAuth.code == "UNAUTHORIZED")

            let list = try await HTTP.get(
                "\(stack.ingestURL)/v1/devices?realm_uuid=\(alice.realmUUID)&user_id=1", auth: mallory.auth)
            // Another server's realm answers exactly like an unknown one.
            #expect(list.status == 404)
            #expect(list.code == "REALM_NOT_FOUND")
            let unknown = try await HTTP.get(
                "\(stack.ingestURL)/v1/devices?realm_uuid=\(UUID().uuidString.lowercased())&user_id=1",
                auth: mallory.auth)
            #expect(unknown.status == list.status)
            #expect(unknown.body == list.body)
            let delete = try await HTTP.send(
                "DELETE", "\(stack.ingestURL)/v1/devices/\(device)", body: nil, auth: mallory.auth)
            #expect(delete.status == 404)
            let notify = try await HTTP.send(
                "POST", "\(stack.ingestURL)/v1/notify",
                json: [
                    "realm_uuid": .string(alice.realmUUID), "user_id": 1,
                    "payload": alice.messagePayload(userID: 1, messageID: 1),
                ],
                auth: mallory.auth)
            #expect(notify.status == 404)
            // Re-registering someone else's server uuid with another key is refused.
            let hijack = try await RealmClient(stack: stack, serverUUID: alice.serverUUID).registerServer()
            #expect(hijack.status == 400)
            #expect(hijack.code == "INVALID_ZULIP_SERVER")

            let own = try await HTTP.get(
                "\(stack.ingestURL)/v1/devices?realm_uuid=\(alice.realmUUID)&user_id=1", auth: alice.auth)
            let listed = try #require(own.json["devices"]?.arrayValue?.first)
            #expect(listed["device_id"]?.intValue == device)
            #expect(listed["token"]?.stringValue?.contains("…") == true, "tokens are never returned in full")
            #expect(listed["push_key"] == nil)
            let deleted = try await HTTP.send(
                "DELETE", "\(stack.ingestURL)/v1/devices/\(device)", body: nil, auth: alice.auth)
            #expect(deleted.status == 200)
            let gone = try await HTTP.get(
                "\(stack.ingestURL)/v1/devices?realm_uuid=\(alice.realmUUID)&user_id=1", auth: alice.auth)
            #expect(gone.json["devices"] == .array([]))
        }

        @Test func perServerRateLimitAnswers429() async throws {
            let stack = try await Stack.get()
            let realm = try await RealmClient.registered(stack)
            var last = HTTP.Reply(status: 0, body: [], headers: [])
            // 700 requests: even if a 60 s window boundary falls inside the loop, one window sees more than 300.
            for _ in 0..<700 {
                last = try await HTTP.get(
                    "\(stack.ingestURL)/v1/feedback?realm_uuid=\(realm.realmUUID)", auth: realm.auth)
                if last.status == 429 { break }
            }
            #expect(last.status == 429)
            #expect(last.code == "RATE_LIMIT_HIT")
            #expect(last.headers.contains { $0.0.lowercased() == "retry-after" })
            // Another server is not affected.
            let other = try await RealmClient.registered(stack)
            #expect(try await HTTP.get("\(stack.ingestURL)/v1/bouncer-public-keys", auth: other.auth).status == 200)
        }

        @Test func badInputGetsClearErrorsAndServicesStayHealthy() async throws {
            let stack = try await Stack.get()
            let realm = try await RealmClient.registered(stack)
            let url = "\(stack.ingestURL)/v1/notify"

            let malformed = try await HTTP.send("POST", url, body: Array("{not json".utf8), auth: realm.auth)
            #expect(malformed.status == 400)
            #expect(malformed.code == "MALFORMED_JSON")

            var payload = realm.messagePayload(userID: 5, messageID: 1).objectValue ?? [:]
            payload["sender_id"] = "six"
            let mistyped = try await HTTP.send(
                "POST", url,
                json: ["realm_uuid": .string(realm.realmUUID), "user_id": 5, "payload": .object(payload)],
                auth: realm.auth)
            #expect(mistyped.status == 400)
            #expect(mistyped.code == "INVALID_PAYLOAD")
            #expect(mistyped.json["field"] == "payload.sender_id")

            payload["sender_id"] = 6
            payload["type"] = "broadcast"
            let unknownType = try await HTTP.send(
                "POST", url,
                json: ["realm_uuid": .string(realm.realmUUID), "user_id": 5, "payload": .object(payload)],
                auth: realm.auth)
            #expect(unknownType.json["field"] == "payload.type")

            let wrongUserType = try await HTTP.send(
                "POST", url, json: ["realm_uuid": .string(realm.realmUUID), "user_id": "5", "payload": [:]],
                auth: realm.auth)
            #expect(wrongUserType.status == 400)
            #expect(wrongUserType.json["field"] == "user_id")

            let huge = try await HTTP.send(
                "POST", url, body: Array(repeating: UInt8(ascii: " "), count: 300 * 1024), auth: realm.auth)
            #expect(huge.status == 413)
            #expect(huge.code == "REQUEST_TOO_LARGE")

            let bigContent = realm.messagePayload(userID: 5, messageID: 1, content: String(repeating: "x", count: 3000))
            let tooBig = try await realm.notify(userID: 5, payload: bigContent)
            #expect(tooBig.status == 413)
            #expect(tooBig.code == "PAYLOAD_TOO_LARGE")

            let badKey = try await HTTP.send(
                "POST", "\(stack.ingestURL)/v1/devices",
                json: [
                    "realm_uuid": .string(realm.realmUUID), "user_id": 5, "token_kind": "fcm", "token": "t",
                    "push_key": "AAAA", "push_key_id": 1,
                ], auth: realm.auth)
            #expect(badKey.status == 400)
            #expect(badKey.code == "INVALID_PUSH_KEY")

            let badKind = try await realm.registerDevice(
                userID: 5, kind: "mpns", token: "t", key: try RealmClient.pushKey(), keyID: 1)
            #expect(badKind.code == "UNSUPPORTED_TOKEN_TYPE")
            let badAPNsToken = try await realm.registerDevice(
                userID: 5, kind: "apns", token: "not-hex", appID: "org.zulip.Zulip", key: try RealmClient.pushKey(),
                keyID: 1)
            #expect(badAPNsToken.code == "INVALID_TOKEN")
            let missingApp = try await realm.registerDevice(
                userID: 5, kind: "apns", token: RealmClient.apnsToken(), key: try RealmClient.pushKey(), keyID: 1)
            #expect(missingApp.json["field"] == "ios_app_id")

            let bouncer = "\(stack.ingestURL)/api/v1/remotes/push/e2ee/register"
            let expired = try await HTTP.send(
                "POST", bouncer,
                json: [
                    "realm_uuid": .string(realm.realmUUID), "push_account_id": 1,
                    "encrypted_push_registration": .string(
                        try realm.sealedRegistration(
                            kind: "fcm", token: "t", appID: nil,
                            timestamp: Int64(Date().timeIntervalSince1970) - 25 * 3600)),
                    "bouncer_public_key": .string(stack.bouncerPublicKey),
                ], auth: realm.auth)
            #expect(expired.code == "REQUEST_EXPIRED")
            let wrongBouncerKey = try await HTTP.send(
                "POST", bouncer,
                json: [
                    "realm_uuid": .string(realm.realmUUID), "push_account_id": 1,
                    "encrypted_push_registration": .string(
                        try realm.sealedRegistration(kind: "fcm", token: "t", appID: nil)),
                    "bouncer_public_key": .string(Data(repeating: 1, count: 32).base64EncodedString()),
                ], auth: realm.auth)
            #expect(wrongBouncerKey.code == "INVALID_BOUNCER_PUBLIC_KEY")
            let garbage = try await HTTP.send(
                "POST", bouncer,
                json: [
                    "realm_uuid": .string(realm.realmUUID), "push_account_id": 1,
                    "encrypted_push_registration": "bm90IGEgc2VhbGVkIGJveA==",
                    "bouncer_public_key": .string(stack.bouncerPublicKey),
                ], auth: realm.auth)
            #expect(garbage.code == "BAD_REQUEST")

            let badPassThrough = try await HTTP.send(
                "POST", "\(stack.ingestURL)/api/v1/remotes/push/e2ee/notify",
                json: [
                    "realm_uuid": .string(realm.realmUUID),
                    "push_requests": [["device_id": 1, "payload": ["push_key_id": 1]]],
                ],
                auth: realm.auth)
            #expect(badPassThrough.status == 400)
            #expect(badPassThrough.json["field"] == "push_requests[0].payload.encrypted_data")

            let notFound = try await HTTP.get("\(stack.ingestURL)/v1/nothing-here", auth: realm.auth)
            #expect(notFound.status == 404)
            #expect(notFound.code == "NOT_FOUND")

            for service in Stack.Service.allCases {
                #expect(stack.isRunning(service))
                let ready = try await HTTP.get("\(stack.opsURL(service))/health/ready")
                #expect(ready.status == 200)
            }
        }

        @Test func nativeRegistrationAcceptsASealedToken() async throws {
            let stack = try await Stack.get()
            let realm = try await RealmClient.registered(stack)
            let token = RealmClient.apnsToken()
            let key = try RealmClient.pushKey()
            let reply = try await HTTP.send(
                "POST", "\(stack.ingestURL)/v1/devices",
                json: [
                    "realm_uuid": .string(realm.realmUUID), "user_id": 80,
                    "encrypted_push_registration": .string(
                        try realm.sealedRegistration(kind: "apns", token: token, appID: "org.zulip.Zulip")),
                    "bouncer_public_key": .string(stack.bouncerPublicKey), "push_key": .string(key.base64),
                    "push_key_id": 3,
                ], auth: realm.auth)
            #expect(reply.status == 201)
            _ = try await realm.notify(userID: 80, payload: realm.removePayload(userID: 80, messageIDs: [1]))
            let push = try #require(
                try await stack.waitForPushes("apns") { $0.contains { $0.token == token } }.first { $0.token == token })
            #expect(push.headers["apns-topic"] == "org.zulip.Zulip")
            #expect(try push.decrypt(with: key) == Wire.canonical(realm.removePayload(userID: 80, messageIDs: [1])))
        }

        @Test func notReadyWithoutRedisButStillLive() async throws {
            let stack = try await Stack.get()
            // A second ingest pointed at a port where no Redis listens.
            let noRedis = try await stack.launchExtraIngest(
                ["PUSHRELAY_REDIS_PORT": "\(try Stack.freePort())", "PUSHRELAY_REDIS_TIMEOUT_MS": "200"],
                name: "noredis",
                ready: false)
            #expect(try await HTTP.get("\(noRedis.ops)/health/ready").status == 503)
            let realm = RealmClient(stack: stack)
            let register = try await HTTP.send(
                "POST", "\(noRedis.api)/api/v1/remotes/server/register",
                body: Array(
                    "zulip_org_id=\(realm.serverUUID)&zulip_org_key=\(realm.apiKey)&hostname=h&contact_email=a%40b.c"
                        .utf8),
                contentType: "application/x-www-form-urlencoded")
            #expect(register.status == 503)
            #expect(register.code == "SERVICE_UNAVAILABLE")
            #expect(try await HTTP.get("\(noRedis.ops)/health/live").status == 200, "still running")
        }

        @Test func metricsAreExported() async throws {
            let stack = try await Stack.get()
            let metrics = try await HTTP.get("http://127.0.0.1:\(stack.ports[.dispatcher] ?? 0)/metrics")
            #expect(metrics.status == 200)
            let text = String(decoding: metrics.body, as: UTF8.self)
            #expect(text.contains("pushrelay_records_in_total"))
            #expect(text.contains("pushrelay_records_out_total"))
            #expect(text.contains("pushrelay_deliveries_total"))
            #expect(try await HTTP.get("http://127.0.0.1:\(stack.ports[.feedback] ?? 0)/health/live").status == 200)
        }
    }
}
