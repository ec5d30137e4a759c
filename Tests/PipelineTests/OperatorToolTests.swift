import DevStack
import FakeProviders
import Foundation
import PushCrypto
import PushModels
import Testing

extension StackTests {
    /// `pushrelay send-test`, and the status of a retried and an expired push, each read
    /// at the provider fakes and through the status API.
    @Suite struct OperatorToolTests {
        /// Runs `pushrelay send-test` as the realm's server, its key in the environment.
        static func sendTest(_ realm: RealmClient, user: Int64, _ extra: [String] = []) async throws -> (
            status: Int32, output: String, errors: String
        ) {
            try await realm.stack.runTool(
                "pushrelay",
                ["send-test", "--server", realm.serverUUID, "--realm", realm.realmUUID, "--user", "\(user)"] + extra,
                environment: ["PUSHRELAY_API_KEY": realm.apiKey, "PUSHRELAY_API_URL": realm.stack.ingestURL])
        }

        @Test func sendTestWaitsForEachDevicesOutcomeAfterARetry() async throws {
            let stack = try await Stack.get()
            let realm = try await RealmClient.registered(stack)
            let key = try RealmClient.pushKey()
            let apnsToken = RealmClient.apnsToken()
            let apns = try await realm.device(userID: 91, kind: "apns", token: apnsToken, key: key)
            let fcmToken = RealmClient.fcmToken()
            let fcm = try await realm.device(userID: 91, kind: "fcm", token: fcmToken, key: key)
            // APNs refuses the first attempt: the device is retried, then sent.
            try await stack.inject("apns", status: 503, reason: "ServiceUnavailable", retryAfter: nil, count: 1)

            let run = try await Self.sendTest(realm, user: 91, ["--wait", "--output", "json"])
            #expect(run.status == 0, "\(run.output)\(run.errors)")
            let json = try Wire.decode(JSONValue.self, from: Array(run.output.utf8))
            #expect(json["complete"] == true)
            let devices = Dictionary(
                uniqueKeysWithValues: (json["status"]?["devices"]?.arrayValue ?? []).compactMap { entry in
                    entry["device_id"]?.intValue.map { ($0, entry) }
                })
            #expect(devices.count == 2, "\(run.output)")
            #expect(devices[apns]?["state"] == "sent" && devices[apns]?["attempts"] == 2, "\(run.output)")
            #expect(devices[fcm]?["state"] == "sent" && devices[fcm]?["attempts"] == 1, "\(run.output)")

            // At the fakes: APNs refused once, then took it under the apns-id the status names;
            // the app decrypts a Zulip test notification.
            let atAPNs = try await stack.received("apns").filter { $0.token == apnsToken }
            #expect(atAPNs.map(\.status) == [503, 200], "\(atAPNs.map(\.status))")
            let apnsID = try #require(devices[apns]?["provider_message_id"]?.stringValue)
            #expect(atAPNs.last?.headers["apns-id"]?.lowercased() == apnsID.lowercased())
            let atFCM = try #require(try await stack.received("fcm").first { $0.token == fcmToken && $0.status == 200 })
            let plaintext = try Wire.decode(JSONValue.self, from: try atFCM.decrypt(with: key))
            #expect(plaintext["type"] == "test" && plaintext["user_id"] == 91)
            #expect(!run.output.contains(apnsToken) && !run.output.contains(fcmToken), "no token printed")

            // Text output, a dead token (3), a user without devices (3), a wrong key (1).
            let deadToken = RealmClient.fcmToken()
            _ = try await realm.device(userID: 92, kind: "fcm", token: deadToken, key: key)
            try await stack.unregister("fcm", token: deadToken)
            let dead = try await Self.sendTest(realm, user: 92, ["--wait"])
            #expect(dead.status == 3, "\(dead.output)\(dead.errors)")
            #expect(dead.output.contains("invalid_token") && dead.output.contains("UNREGISTERED"), "\(dead.output)")
            let nobody = try await Self.sendTest(realm, user: 93)
            #expect(nobody.status == 3 && nobody.output.contains("accepted for 0 devices"), "\(nobody.output)")
            let wrong = try await stack.runTool(
                "pushrelay",
                ["send-test", "--server", realm.serverUUID, "--realm", realm.realmUUID, "--user", "91"],
                environment: [
                    "PUSHRELAY_API_KEY": String(repeating: "x", count: 64), "PUSHRELAY_API_URL": stack.ingestURL,
                ])
            #expect(wrong.status == 1 && wrong.errors.contains("HTTP 401"), "\(wrong.errors)")
            #expect(!wrong.errors.contains(realm.apiKey))
        }

        /// `"dry_run": "pipeline"`: FCM validates (and delivers nothing), APNs is not
        /// contacted, a dead token is found dead; each read at the fakes and in the status.
        @Test func aPipelineDryRunIsValidatedByFCMAndSentNowhere() async throws {
            let stack = try await Stack.get()
            let realm = try await RealmClient.registered(stack)
            let key = try RealmClient.pushKey()
            let apnsToken = RealmClient.apnsToken()
            let apns = try await realm.device(userID: 94, kind: "apns", token: apnsToken, key: key)
            let fcmToken = RealmClient.fcmToken()
            let fcm = try await realm.device(userID: 94, kind: "fcm", token: fcmToken, key: key)
            let deadToken = RealmClient.fcmToken()
            let dead = try await realm.device(userID: 94, kind: "fcm", token: deadToken, key: key)
            try await stack.unregister("fcm", token: deadToken)

            let body: JSONValue = [
                "realm_uuid": .string(realm.realmUUID), "user_id": 94,
                "payload": realm.messagePayload(userID: 94, messageID: 9401), "dry_run": "pipeline",
            ]
            var reply = HTTP.Reply(status: 0, body: [], headers: [])
            // The dispatchers announce what they can within a few seconds of starting.
            try await Stack.waitFor("the dispatchers to take pipeline dry runs", timeout: .seconds(40)) {
                reply =
                    (try? await HTTP.send("POST", "\(stack.ingestURL)/v1/notify", json: body, auth: realm.auth))
                    ?? reply
                return reply.status != 409
            }
            #expect(
                reply.status == 202 && reply.json["dry_run"] == "pipeline",
                "\(String(decoding: reply.body, as: UTF8.self))")
            let id = try #require(reply.json["notification_id"]?.stringValue)
            var answer = HTTP.Reply(status: 0, body: [], headers: [])
            try await Stack.waitFor("every device's dry-run outcome", timeout: .seconds(30)) {
                answer = (try? await HTTP.get("\(stack.ingestURL)/v1/notifications/\(id)", auth: realm.auth)) ?? answer
                let states = answer.json["devices"]?.arrayValue?.compactMap { $0["state"]?.stringValue } ?? []
                return states.count == 3 && !states.contains("accepted") && !states.contains("retrying")
            }
            let devices = Dictionary(
                uniqueKeysWithValues: (answer.json["devices"]?.arrayValue ?? []).compactMap { entry in
                    entry["device_id"]?.intValue.map { ($0, entry) }
                })
            let text = String(decoding: answer.body, as: UTF8.self)
            #expect(devices[fcm]?["state"] == "validated", "\(text)")
            #expect(devices[fcm]?["provider_message_id"]?.stringValue?.hasSuffix("/messages/fake_message_id") == true)
            #expect(devices[apns]?["state"] == "checked" && devices[apns]?["provider"] == "apns", "\(text)")
            #expect(devices[dead]?["state"] == "invalid_token" && devices[dead]?["reason"] == "UNREGISTERED", "\(text)")

            // At the fakes: FCM was asked to validate only; APNs got nothing.
            let atFCM = try await stack.received("fcm").filter { $0.token == fcmToken }
            #expect(atFCM.count == 1 && atFCM.first?.headers["validate_only"] == "true", "\(atFCM)")
            #expect(try await stack.received("apns").filter { $0.token == apnsToken }.isEmpty)

            // A real notify afterwards is delivered to both, for real.
            let real = try await realm.notify(userID: 94, payload: realm.messagePayload(userID: 94, messageID: 9402))
            #expect(real.status == 202)
            let delivered = try await stack.waitForPushes("apns") { $0.contains { $0.token == apnsToken } }
            #expect(delivered.filter { $0.token == apnsToken }.count == 1)
            let fcmPushes = try await stack.waitForPushes("fcm") {
                $0.filter { $0.token == fcmToken }.count == 2
            }.filter { $0.token == fcmToken }
            #expect(fcmPushes.last?.headers["validate_only"] == nil)
        }

        /// A gorush push whose expiry comes before APNs' Retry-After: `expired`, read through
        /// the status API with the ids gorush's answer carries.
        @Test func aGorushPushThatCannotBeSentInTimeReadsExpired() async throws {
            let stack = try await Stack.get()
            let realm = try await RealmClient.registered(stack)
            let token = RealmClient.apnsToken()
            try await stack.inject("apns", status: 503, reason: "ServiceUnavailable", retryAfter: 600, count: 1)
            let reply = try await HTTP.send(
                "POST", "\(stack.ingestURL)/api/push",
                json: [
                    "notifications": [
                        [
                            "tokens": [.string(token)], "platform": 1, "message": "soon stale",
                            "expiration": .int(Wire.nowMillis() / 1000 + 60),
                        ]
                    ]
                ], auth: realm.auth)
            #expect(reply.status == 200, "\(String(decoding: reply.body, as: UTF8.self))")
            let id = try #require(reply.headers.first { $0.0.lowercased() == "x-pushrelay-notification-ids" }?.1)
            var answer = HTTP.Reply(status: 0, body: [], headers: [])
            try await Stack.waitFor("the push to expire", timeout: .seconds(30)) {
                answer = (try? await HTTP.get("\(stack.ingestURL)/v1/notifications/\(id)", auth: realm.auth)) ?? answer
                return answer.json["devices"]?.arrayValue?.first?["state"] == "expired"
            }
            let device = answer.json["devices"]?.arrayValue?.first
            #expect(device?["reason"] == "ServiceUnavailable", "\(String(decoding: answer.body, as: UTF8.self))")
            #expect(try await stack.received("apns").filter { $0.token == token }.map(\.status) == [503])
        }
    }
}
