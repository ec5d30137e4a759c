import DevStack
import FakeProviders
import Foundation
import PushCrypto
import PushModels
import Testing

extension ReceivedPush {
    /// The Zulip message id inside a push, decrypted with the device key.
    func messageID(with key: PushKey) -> Int64? {
        guard let plaintext = try? decrypt(with: key),
            let json = try? JSONDecoder().decode(JSONValue.self, from: Data(plaintext))
        else { return nil }
        return json["message_id"]?.intValue
    }
}

/// Guarantees under faults and key rotation, with the real services.
extension StackTests {
    @Suite struct FaultTests {
        @Test func dispatcherKilledWithPushesInFlightLosesNothing() async throws {
            let stack = try await Stack.get()
            let realm = try await RealmClient.registered(stack)
            let key = try RealmClient.pushKey()
            var tokens: [String] = []
            for _ in 0..<10 {
                let token = RealmClient.fcmToken()
                tokens.append(token)
                _ = try await realm.device(userID: 40, kind: "fcm", token: token, key: key)
            }
            // The provider is having a bad minute: pushes sit in the dispatcher's retries.
            // Retry-After 3 s: the first 40 attempts are certainly still waiting when the kill comes.
            try await stack.inject("fcm", status: 503, reason: "UNAVAILABLE", retryAfter: 3, count: 40)
            let messageIDs = (0..<20).map { Int64(90_000 + $0) }
            for id in messageIDs {
                let reply = try await realm.notify(userID: 40, payload: realm.messagePayload(userID: 40, messageID: id))
                #expect(reply.status == 202)
            }
            try await Task.sleep(for: .seconds(1))
            try await stack.stop(.dispatcher, signal: SIGKILL)
            let deliveredBeforeKill = try await stack.received("fcm").filter {
                $0.status == 200 && tokens.contains($0.token)
            }
            try stack.start(.dispatcher)
            try await stack.waitReady(.dispatcher)

            let expected = Set(tokens.flatMap { token in messageIDs.map { "\(token)#\($0)" } })
            let tokenSet = Set(tokens)
            let pushes = try await stack.waitForPushes("fcm", timeout: .seconds(120)) { pushes in
                let delivered = Set(
                    pushes.filter { $0.status == 200 && tokenSet.contains($0.token) }.compactMap { push in
                        push.messageID(with: key).map { "\(push.token)#\($0)" }
                    })
                return delivered.isSuperset(of: expected)
            }
            #expect(deliveredBeforeKill.count < expected.count, "the kill must interrupt work in flight")
            let delivered = pushes.filter { $0.status == 200 && tokenSet.contains($0.token) }
            #expect(delivered.count >= expected.count)
        }

        /// gorush's feedback hook through `push.hooks`: feedback killed while a delivery
        /// waits between retries loses it not; the restarted service delivers it.
        @Test func feedbackKilledMidHookDeliveryDeliversItAfterRestart() async throws {
            let stack = try await Stack.get()
            let realm = try await RealmClient.registered(stack)
            let prefix = try #require(
                try await HTTP.get("\(stack.controlURL)/config").json["webpush_endpoint_prefix"]?.stringValue)
            // Fails twice: the second retry waits 2 s, long enough for the kill to come first.
            let hookID = "fail-2-\(UUID().uuidString.lowercased())"
            let hookURL = prefix.replacingOccurrences(of: "/wp/", with: "/hook/") + hookID
            let hook = try await HTTP.send(
                "PUT", "\(stack.ingestURL)/api/feedback-hook", json: ["url": .string(hookURL)], auth: realm.auth)
            #expect(hook.status == 200)
            let dead = "gorush-" + UUID().uuidString.replacingOccurrences(of: "-", with: "")
            try await stack.unregister("fcm", token: dead)
            let pushed = try await HTTP.send(
                "POST", "\(stack.ingestURL)/api/push",
                json: ["notifications": [["tokens": [.string(dead)], "platform": 2, "message": "m"]]], auth: realm.auth)
            #expect(pushed.status == 200)
            _ = try await stack.waitForPushes("hook") { pushes in pushes.contains { $0.token == hookID } }
            try await stack.stop(.feedback, signal: SIGKILL)
            let beforeKill = try await stack.received("hook").filter { $0.token == hookID }
            #expect(!beforeKill.contains { $0.status == 200 }, "the kill came before the delivery succeeded")
            try stack.start(.feedback)
            try await stack.waitReady(.feedback)
            let deliveries = try await stack.waitForPushes("hook", timeout: .seconds(90)) { pushes in
                pushes.contains { $0.token == hookID && $0.status == 200 }
            }.filter { $0.token == hookID }
            #expect(deliveries.last?.body["token"] == .string(dead))
        }

        @Test func encryptorStoppedWithSIGTERMHandsOverEverything() async throws {
            let stack = try await Stack.get()
            let realm = try await RealmClient.registered(stack)
            let key = try RealmClient.pushKey()
            let tokens = [RealmClient.fcmToken(), RealmClient.fcmToken()]
            for token in tokens { _ = try await realm.device(userID: 70, kind: "fcm", token: token, key: key) }
            let messageIDs = (0..<30).map { Int64(70_000 + $0) }
            for id in messageIDs {
                #expect(
                    try await realm.notify(userID: 70, payload: realm.messagePayload(userID: 70, messageID: id)).status
                        == 202)
            }
            let logBefore = stack.log(.encryptor).utf8.count
            try await stack.stop(.encryptor, signal: SIGTERM)
            #expect(stack.exitStatus(.encryptor) == 0, "a graceful stop exits cleanly")
            let shutdownLog = String(stack.log(.encryptor).utf8.dropFirst(logBefore)) ?? ""
            #expect(shutdownLog.contains("partitions revoked"), "it left its consumer group")
            try stack.start(.encryptor)
            try await stack.waitReady(.encryptor)
            let expected = Set(tokens.flatMap { token in messageIDs.map { "\(token)#\($0)" } })
            _ = try await stack.waitForPushes("fcm", timeout: .seconds(120)) { pushes in
                Set(
                    pushes.filter { $0.status == 200 && tokens.contains($0.token) }.compactMap { push in
                        push.messageID(with: key).map { "\(push.token)#\($0)" }
                    }
                ).isSuperset(of: expected)
            }
        }

        @Test func newPushKeyIdIsUsedAndOldKeyKept() async throws {
            let stack = try await Stack.get()
            let realm = try await RealmClient.registered(stack)
            let token = RealmClient.fcmToken()
            let oldKey = try RealmClient.pushKey()
            let newKey = try RealmClient.pushKey()
            let first = try await realm.device(userID: 50, kind: "fcm", token: token, key: oldKey, keyID: 1)
            let second = try await realm.device(userID: 50, kind: "fcm", token: token, key: newKey, keyID: 2)
            #expect(first == second, "re-registering the same token updates the device")
            let listed = try await HTTP.get(
                "\(stack.ingestURL)/v1/devices?realm_uuid=\(realm.realmUUID)&user_id=50", auth: realm.auth)
            #expect(listed.json["devices"]?.arrayValue?.first?["push_key_ids"] == [1, 2])
            #expect(listed.json["devices"]?.arrayValue?.first?["current_push_key_id"] == 2)

            _ = try await realm.notify(userID: 50, payload: realm.messagePayload(userID: 50, messageID: 7))
            let push = try #require(
                try await stack.waitForPushes("fcm") { $0.contains { $0.token == token } }.first { $0.token == token })
            #expect(push.body["push_key_id"] == "2")
            #expect(push.messageID(with: newKey) == 7)
            #expect(throws: CryptoError.self) { try push.decrypt(with: oldKey) }
        }

        @Test func expiredAPNsReportOlderThanRegistrationIsIgnored() async throws {
            // An APNs 410 whose timestamp predates the device's latest registration must not
            // invalidate it: the device re-registered after the token was reported dead.
            let stack = try await Stack.get()
            let realm = try await RealmClient.registered(stack)
            let token = RealmClient.apnsToken()
            let key = try RealmClient.pushKey()
            let device = try await realm.device(userID: 60, kind: "apns", token: token, key: key)
            _ = try await HTTP.send(
                "POST", "\(stack.controlURL)/apns/unregistered",
                json: ["token": .string(token), "timestamp_ms": .int(Wire.nowMillis() - 3_600_000)])
            _ = try await realm.notify(userID: 60, payload: realm.messagePayload(userID: 60, messageID: 1))
            _ = try await stack.waitForPushes("apns") { $0.contains { $0.token == token && $0.status == 410 } }
            // Wait until feedback has seen the report and (correctly) ignored it.
            try await Stack.waitFor("feedback to ignore the stale report") {
                stack.log(.feedback).split(separator: "\n").contains {
                    $0.contains("invalidation ignored") && $0.contains("device_id=\(device) ")
                }
            }
            #expect(try await realm.feedback().json["invalidated"] == .array([]))
            let listed = try await HTTP.get(
                "\(stack.ingestURL)/v1/devices?realm_uuid=\(realm.realmUUID)&user_id=60", auth: realm.auth)
            #expect(listed.json["devices"]?.arrayValue?.first?["status"] == "active")
            #expect(listed.json["devices"]?.arrayValue?.first?["device_id"]?.intValue == device)
        }
    }
}
