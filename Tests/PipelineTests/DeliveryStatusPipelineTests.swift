import DevStack
import DeviceState
import FakeProviders
import Foundation
import PushModels
import RedisClient
import Testing

extension StackTests {
    /// "Did my push go out?" through the real services: feedback reads the topics into
    /// Redis, and ingest answers `GET /v1/notifications/{id}` to the server that sent it.
    @Suite struct DeliveryStatusPipelineTests {
        @Test func theSenderSeesEachDevicesOutcomeWithTheProvidersID() async throws {
            let stack = try await Stack.get()
            let realm = try await RealmClient.registered(stack)
            let other = try await RealmClient.registered(stack)
            let apnsToken = RealmClient.apnsToken()
            let apns = try await realm.device(userID: 8, kind: "apns", token: apnsToken, key: try RealmClient.pushKey())
            let fcm = try await realm.device(
                userID: 8, kind: "fcm", token: RealmClient.fcmToken(), key: try RealmClient.pushKey())
            let deadToken = RealmClient.fcmToken()
            let dead = try await realm.device(userID: 8, kind: "fcm", token: deadToken, key: try RealmClient.pushKey())
            try await stack.unregister("fcm", token: deadToken)

            let reply = try await realm.notify(
                userID: 8, payload: realm.messagePayload(userID: 8, messageID: 1),
                deviceIDs: [apns, fcm, dead, 987_654_321])
            #expect(reply.status == 202, "\(String(decoding: reply.body, as: UTF8.self))")
            let id = try #require(reply.json["notification_id"]?.stringValue)
            let url = "\(stack.ingestURL)/v1/notifications/\(id)"

            var answer = HTTP.Reply(status: 0, body: [], headers: [])
            try await Stack.waitFor("every device's final state", timeout: .seconds(30)) {
                answer = (try? await HTTP.get(url, auth: realm.auth)) ?? answer
                let states = answer.json["devices"]?.arrayValue?.compactMap { $0["state"]?.stringValue } ?? []
                return states.count == 4 && !states.contains("accepted") && !states.contains("retrying")
            }
            #expect(
                answer.status == 200 && answer.json["result"] == "success",
                "\(String(decoding: answer.body, as: UTF8.self))")
            let devices = Dictionary(
                uniqueKeysWithValues: (answer.json["devices"]?.arrayValue ?? []).compactMap { entry in
                    entry["device_id"]?.intValue.map { ($0, entry) }
                })
            let sentAPNs = try #require(devices[apns])
            #expect(
                sentAPNs["state"] == "sent" && sentAPNs["provider"] == "apns",
                "\(String(decoding: answer.body, as: UTF8.self))")
            let apnsID = try #require(sentAPNs["provider_message_id"]?.stringValue)
            let received = try await stack.received("apns").filter { $0.token == apnsToken }
            #expect(received.contains { $0.headers["apns-id"]?.lowercased() == apnsID.lowercased() }, "\(received)")
            #expect(devices[fcm]?["state"] == "sent")
            #expect(devices[fcm]?["provider_message_id"]?.stringValue?.hasPrefix("projects/") == true)
            #expect(devices[dead]?["state"] == "invalid_token" && devices[dead]?["reason"] == "UNREGISTERED")
            #expect(devices[987_654_321]?["state"] == "skipped" && devices[987_654_321]?["reason"] == "unknown_device")
            #expect(answer.json["accepted_at_ms"]?.intValue != nil)
            #expect(
                !String(decoding: answer.body, as: UTF8.self).contains(apnsToken)
                    && !String(decoding: answer.body, as: UTF8.self).contains(deadToken), "no token in the answer")

            // Another server asking, and an id nobody made, get the same 404.
            let foreign = try await HTTP.get(url, auth: other.auth)
            let unknown = try await HTTP.get(
                "\(stack.ingestURL)/v1/notifications/\(NotificationID.random())", auth: other.auth)
            #expect(foreign.status == 404 && foreign.code == "NOTIFICATION_NOT_FOUND")
            #expect(foreign.body == unknown.body)
        }

        /// The store's scripts on a real Redis: states only move forward whatever the order,
        /// a notification keeps at most `maxDevices`, a realm at most `maxPerRealm`.
        @Test func theRedisStoreKeepsTheFurthestStateWithinItsBounds() async throws {
            let stack = try await Stack.get()
            let redis = RedisClient(configuration: RedisConfiguration(port: stack.redisPort, connections: 2))
            let keys = RedisKeys(prefix: "ns-\(UUID().uuidString.prefix(8)):")
            let store = RedisDeliveryStatusStore(
                redis: redis, keys: keys, limits: DeliveryStatusLimits(ttlSeconds: 600, maxDevices: 2, maxPerRealm: 2))
            let realm = RealmID(UUID().uuidString.lowercased())
            let server = ServerID(UUID().uuidString.lowercased())
            let now = Wire.nowMillis()
            let first = NotificationID.random()
            func update(
                _ id: NotificationID, _ device: DeviceID?, _ status: DeviceDeliveryStatus?, accepted: Int64? = nil
            )
                -> DeliveryStatusUpdate
            {
                DeliveryStatusUpdate(
                    notification: id, realm: realm, server: accepted == nil ? nil : server, acceptedAtMs: accepted,
                    device: device, status: status)
            }
            // Final first, then the acceptance and a retry read late, in two batches.
            try await store.record([
                update(first, 1, DeviceDeliveryStatus(.sent, atMs: now + 50, provider: .apns, providerMessageID: "a"))
            ])
            try await store.record([
                update(first, nil, nil, accepted: now),
                update(first, 1, DeviceDeliveryStatus(.accepted, atMs: now)),
                update(first, 1, DeviceDeliveryStatus(.retrying, atMs: now + 10, attempts: 1)),
                update(
                    first, 2, DeviceDeliveryStatus(.retrying, atMs: now + 10, attempts: 1, nextAttemptAtMs: now + 99)),
                update(first, 3, DeviceDeliveryStatus(.accepted, atMs: now)),
                update(first, nil, DeviceDeliveryStatus(.failed, atMs: now + 5, reason: "pipeline_key_unavailable")),
            ])
            let status = try #require(try await store.status(of: first))
            #expect(status.realm == realm && status.server == server && status.acceptedAtMs == now)
            #expect(
                status.devices[1]
                    == DeviceDeliveryStatus(.sent, atMs: now + 50, provider: .apns, providerMessageID: "a"))
            #expect(status.devices[2]?.nextAttemptAtMs == now + 99)
            #expect(status.devices[3] == nil && status.truncated, "two devices kept, the third counted")
            #expect(status.overall?.reason == "pipeline_key_unavailable")
            let ttl = try await redis.command("TTL", RedisArgument(keys.deliveryStatus(first))).int ?? -1
            #expect((1...600).contains(ttl), "it expires: \(ttl)")

            // Targets no stage reported on are accepted; two devices sent keep the hash compact
            // (listpack: every value within 64 bytes, FCM names under their prefix).
            let fourth = NotificationID.random()
            try await store.record([
                DeliveryStatusUpdate(
                    notification: fourth, realm: realm, server: server, acceptedAtMs: now, status: nil,
                    targets: [7, 8])
            ])
            #expect(
                try await store.status(of: fourth)?.devices == [
                    7: DeviceDeliveryStatus(.accepted, atMs: now), 8: DeviceDeliveryStatus(.accepted, atMs: now),
                ])
            let fcmName = "projects/pushrelay-dev/messages/\(UInt64.random(in: 1...UInt64.max))"
            try await store.record([
                update(
                    fourth, 7,
                    DeviceDeliveryStatus(
                        .sent, atMs: now + 90, provider: .apns, providerMessageID: UUID().uuidString, httpStatus: 200,
                        attempts: 1)),
                update(
                    fourth, 8,
                    DeviceDeliveryStatus(
                        .sent, atMs: now + 95, provider: .fcm, providerMessageID: fcmName, httpStatus: 200, attempts: 1)
                ),
            ])
            #expect(try await store.status(of: fourth)?.devices[8]?.providerMessageID == fcmName)
            let key = RedisArgument(keys.deliveryStatus(fourth))
            let encoding = try await redis.command("OBJECT", "ENCODING", key).string
            let bytes = try await redis.command("MEMORY", "USAGE", key).int ?? 0
            #expect(encoding == "listpack" && bytes < 500, "\(encoding ?? "?"), \(bytes) bytes")

            // A realm keeps its two newest notifications: the oldest goes.
            let second = NotificationID.random()
            let third = NotificationID.random()
            try await store.record([update(second, nil, nil, accepted: now + 1)])
            try await store.record([update(third, nil, nil, accepted: now + 2)])
            #expect(try await store.status(of: first) == nil)
            let kept = (try await store.status(of: second), try await store.status(of: third))
            #expect(kept.0 != nil && kept.1 != nil)
        }

        @Test func aDryRunResolvesAndMeasuresWithoutSending() async throws {
            let stack = try await Stack.get()
            let realm = try await RealmClient.registered(stack)
            let token = RealmClient.fcmToken()
            let device = try await realm.device(userID: 9, kind: "fcm", token: token, key: try RealmClient.pushKey())
            let reply = try await HTTP.send(
                "POST", "\(stack.ingestURL)/v1/notify",
                json: [
                    "realm_uuid": .string(realm.realmUUID), "user_id": 9, "dry_run": true,
                    "payload": realm.messagePayload(userID: 9, messageID: 3),
                ],
                auth: realm.auth)
            #expect(reply.status == 200, "\(String(decoding: reply.body, as: UTF8.self))")
            let answered = try #require(reply.json["devices"]?.arrayValue)
            #expect(answered.map { $0["device_id"]?.intValue } == [device])
            #expect(answered.first?["result"] == "send" && answered.first?["provider_configured"] == true)
            // A real notify afterwards reaches the provider once: the dry run sent nothing.
            let sent = try await realm.notify(userID: 9, payload: realm.messagePayload(userID: 9, messageID: 4))
            #expect(sent.status == 202)
            _ = try await stack.waitForPushes("fcm") { $0.contains { $0.token == token } }
            try await Task.sleep(for: .milliseconds(300))
            #expect(try await stack.received("fcm").filter { $0.token == token }.count == 1)
        }
    }
}
