@testable import DeviceState
@testable import FeedbackCore
import Foundation
import HTTPTypes
import Kafka
import PushCrypto
import PushModels
import ServiceKit
import Testing
@testable import StageTestSupport

/// Delivery status: what feedback records from each topic, in any order, and what
/// `GET /v1/notifications/{id}` answers, to whom.
@Suite struct DeliveryStatusTests {
    typealias F = MemoryFixtures
    let notification: NotificationID = "3f2a1b4c-5d6e-4f70-8192-a3b4c5d6e7f8"

    func request(devices: [DeviceID]?) -> PushRequestRecord {
        PushRequestRecord(
            notificationID: notification, serverUUID: F.server, realmUUID: F.realm, acceptedAtMs: F.now - 5_000,
            request: .native(
                userID: 7, deviceIDs: devices, type: .message, sealedPayload: SealedBlob(keyID: "k", box: "x")))
    }

    func delivery(
        _ device: DeviceID?, _ outcome: DeliveryOutcome, reason: OutcomeReason? = nil, attempts: Int = 1,
        at: Int64 = F.now, id: String? = nil, provider: Provider? = .apns
    ) -> DeliveryRecord {
        DeliveryRecord(
            notificationID: notification, realmUUID: F.realm, deviceID: device, provider: provider, outcome: outcome,
            reason: reason, httpStatus: outcome == .sent ? 200 : nil, attempts: attempts, acceptedAtMs: F.now - 5_000,
            completedAtMs: at, providerMessageID: id)
    }

    func parked(_ device: DeviceID, attempts: Int, due: Int64) -> OutboundRecord {
        var record = OutboundRecord(
            notificationID: notification, deviceID: device, realmUUID: F.realm, provider: .fcm, token: "t",
            appID: nil,
            delivery: DeliveryClass(apnsPriority: 10, apnsPushType: .known(.alert), fcmPriority: .known(.high)),
            body: .object([:]), acceptedAtMs: F.now - 5_000)
        record.attempts = attempts
        record.lastError = "UNAVAILABLE"
        record.notBeforeMs = due
        return record
    }

    func recorder(_ store: MemoryDeliveryStatusStore) -> StatusRecorder {
        StatusRecorder(
            store: store, topics: F.topics, retryStages: 3, maxAgeSeconds: 86_400, logger: F.logger, now: { F.now })
    }

    @Test func eachTopicsFactsLandOnTheirDeviceWhateverTheOrder() async throws {
        let store = MemoryDeliveryStatusStore()
        let recorder = recorder(store)
        #expect(
            Set(recorder.subscribed) == [
                "push.requests", "push.deliveries", "push.deadletter", "push.retry.1", "push.retry.2", "push.retry.3",
            ])
        // The final outcomes first, then the acceptance and a parked retry read late.
        let early = [
            try F.consumed(delivery(1, .sent, at: F.now, id: "apns-id-1"), topic: F.topics.deliveries),
            try F.consumed(
                delivery(2, .invalidToken, reason: .provider("BadDeviceToken"), attempts: 1), topic: F.topics.deliveries
            ),
            try F.consumed(
                delivery(3, .unknownDevice, reason: .stage(.unknownDevice), attempts: 0, provider: nil),
                topic: F.topics.deliveries),
            try F.consumed(
                delivery(4, .invalidToken, reason: .provider("Unregistered"), attempts: 0), topic: F.topics.deliveries),
        ]
        #expect(await recorder.handleBatch(early) == Array(repeating: .done, count: 4))
        let late = [
            try F.consumed(request(devices: [1, 2, 3, 4, 5, 6]), topic: F.topics.requests),
            try F.consumed(parked(1, attempts: 1, due: F.now + 5_000), topic: F.topics.retry(1)),
            try F.consumed(parked(5, attempts: 2, due: F.now + 60_000), topic: F.topics.retry(2)),
            try F.consumed(delivery(1, .alreadySent, at: F.now + 9_000), topic: F.topics.deliveries),
            // Not a topic it reads.
            try F.consumed(delivery(6, .sent), topic: F.topics.outbound),
        ]
        #expect(await recorder.handleBatch(late) == Array(repeating: .done, count: 5))
        let status = try #require(try await store.status(of: notification))
        #expect(status.server == F.server && status.realm == F.realm && status.acceptedAtMs == F.now - 5_000)
        #expect(
            status.devices[1]
                == DeviceDeliveryStatus(
                    .sent, atMs: F.now, provider: .apns, providerMessageID: "apns-id-1", httpStatus: 200, attempts: 1))
        #expect(status.devices[2]?.state == .invalidToken && status.devices[2]?.reason == "BadDeviceToken")
        #expect(status.devices[3]?.state == .skipped && status.devices[3]?.reason == "unknown_device")
        // Known dead before the send: skipped as invalid, not reported as a provider's answer.
        #expect(status.devices[4]?.state == .skipped && status.devices[4]?.reason == "device_invalid")
        #expect(
            status.devices[5]
                == DeviceDeliveryStatus(
                    .retrying, atMs: F.now, provider: .fcm, reason: "UNAVAILABLE", attempts: 2,
                    nextAttemptAtMs: F.now + 60_000))
        #expect(status.devices[6] == DeviceDeliveryStatus(.accepted, atMs: F.now - 5_000))

        // Device 5 gives up: the dead letter wins over the failure reported with it, and a
        // later re-drive that is sent wins over both.
        let dead = DeadLetterRecord(
            cause: .attemptsExhausted, lastError: "UNAVAILABLE", httpStatus: 503, attempts: 5, deadAtMs: F.now + 70_000,
            record: parked(5, attempts: 5, due: F.now + 70_000))
        _ = await recorder.handleBatch([
            try F.consumed(dead, topic: F.topics.deadLetter),
            try F.consumed(
                delivery(5, .failed, reason: .provider("UNAVAILABLE"), attempts: 5, at: F.now + 70_000),
                topic: F.topics.deliveries),
        ])
        #expect(try await store.status(of: notification)?.devices[5]?.state == .deadLettered)
        _ = await recorder.handleBatch([
            try F.consumed(delivery(5, .sent, attempts: 6, at: F.now + 90_000, id: "x"), topic: F.topics.deliveries)
        ])
        #expect(try await store.status(of: notification)?.devices[5]?.state == .sent)
    }

    @Test func theOrderRuleHoldsBetweenEveryPairOfStates() {
        let states = DeviceDeliveryStatus.State.allCases
        for first in states {
            for second in states {
                let a = DeviceDeliveryStatus(first, atMs: 100)
                let later = DeviceDeliveryStatus(second, atMs: 200)
                // Nothing replaces a final state with an earlier-stage one.
                if a.rank >= 2 && later.rank < 2 { #expect(!later.replaces(a), "\(second) over \(first)") }
                // A final state replaces anything earlier in time.
                if later.rank >= 2 { #expect(later.replaces(a), "\(second) after \(first)") }
                // An older report never replaces a final one.
                let older = DeviceDeliveryStatus(second, atMs: 50)
                if a.rank >= 2 && older.rank <= a.rank { #expect(!older.replaces(a), "old \(second) over \(first)") }
            }
        }
    }

    /// A topic read from its start, or replayed, does not bring back status past its lifetime.
    @Test func factsOlderThanTheLifetimeAreNotRecorded() async throws {
        let store = MemoryDeliveryStatusStore()
        let recorder = StatusRecorder(
            store: store, topics: F.topics, retryStages: 3, maxAgeSeconds: 60, logger: F.logger, now: { F.now + 70_000 }
        )
        let old = [
            try F.consumed(request(devices: [1]), topic: F.topics.requests),
            try F.consumed(delivery(1, .sent, at: F.now, id: "x"), topic: F.topics.deliveries),
        ]
        #expect(await recorder.handleBatch(old) == [.done, .done])
        #expect(try await store.status(of: notification) == nil)
        let fresh = try F.consumed(delivery(2, .sent, at: F.now + 20_000, id: "y"), topic: F.topics.deliveries)
        #expect(await recorder.handleBatch([fresh]) == [.done])
        #expect(try await store.status(of: notification)?.devices[2]?.state == .sent)
    }

    @Test func aNotificationKeepsABoundedNumberOfDevices() async throws {
        let store = MemoryDeliveryStatusStore(limits: DeliveryStatusLimits(maxDevices: 3))
        _ = await recorder(store).handleBatch([
            try F.consumed(request(devices: (1...5).map { DeviceID(rawValue: Int64($0)) }), topic: F.topics.requests)
        ])
        let status = try #require(try await store.status(of: notification))
        #expect(status.devices.count == 3 && status.truncated)
    }

    @Test func theSenderReadsItsStatusAndNobodyElseLearnsItExists() async throws {
        let fixture = try await RouterFixture.make()
        let realm = UUID().uuidString.lowercased()
        let store = try #require(fixture.memory).deliveryStatus
        try await fixture.run { client in
            let owner = try await client.registeredServer(realms: [realm])
            let other = try await client.registeredServer(realms: [UUID().uuidString.lowercased()])
            let id = NotificationID.random()
            try await store.record([
                DeliveryStatusUpdate(
                    notification: id, realm: RealmID(realm), server: ServerID(owner.uuid), acceptedAtMs: F.now,
                    status: nil),
                DeliveryStatusUpdate(
                    notification: id, realm: RealmID(realm), device: 12,
                    status: DeviceDeliveryStatus(
                        .sent, atMs: F.now + 40, provider: .fcm, providerMessageID: "projects/p/messages/1",
                        httpStatus: 200, attempts: 1)),
                DeliveryStatusUpdate(
                    notification: id, realm: RealmID(realm), device: 3,
                    status: DeviceDeliveryStatus(.skipped, atMs: F.now + 10, reason: "unknown_device")),
            ])
            let reply = try await client.send(.get, "/v1/notifications/\(id)", auth: owner.auth)
            expectRouterSuccess(reply, "status")
            #expect(reply.json["notification_id"]?.stringValue == id.rawValue)
            #expect(reply.json["accepted_at_ms"]?.intValue == F.now)
            let devices = try #require(reply.json["devices"]?.arrayValue)
            #expect(devices.map { $0["device_id"]?.intValue } == [3, 12])
            #expect(devices[1]["state"] == "sent" && devices[1]["provider_message_id"] == "projects/p/messages/1")
            #expect(devices[0]["state"] == "skipped" && devices[0]["reason"] == "unknown_device")
            #expect(devices.allSatisfy { $0["token"] == nil })
            #expect(reply.json["summary"] == .object(["sent": 1, "skipped": 1]))

            // Another server, an unknown id and a malformed one: the same 404.
            for (auth, path) in [
                (other.auth, "/v1/notifications/\(id)"), (owner.auth, "/v1/notifications/\(NotificationID.random())"),
                (owner.auth, "/v1/notifications/\(id.rawValue.uppercased())"), (owner.auth, "/v1/notifications/1%27"),
            ] {
                let missing = try await client.send(.get, path, auth: auth)
                expectRouterError(missing, 404, "NOTIFICATION_NOT_FOUND", path)
            }
            let anonymous = try await client.send(.get, "/v1/notifications/\(id)")
            #expect(anonymous.status == 401)
        }
    }
}

/// `dry_run: true` on the native notify: each device's push built and measured, nothing published.
@Suite struct DryRunTests {
    @Test func aDryRunSaysWhatEachDeviceWouldGetAndPublishesNothing() async throws {
        let fixture = try await RouterFixture.make()
        try await fixture.run { client in
            let realm = UUID().uuidString.lowercased()
            let server = try await client.registeredServer(realms: [realm])
            func register(_ fields: JSONValue) async throws -> Int64 {
                let created = try await client.send(.post, "/v1/devices", auth: server.auth, .json(fields))
                return try #require(created.json["device_id"]?.intValue, "\(created.text)")
            }
            let apns = try await register([
                "realm_uuid": .string(realm), "user_id": 5, "token_kind": "apns", "token": .string(routerAPNsToken()),
                "ios_app_id": "org.zulip.Zulip", "push_key": .string(try routerPushKey().base64), "push_key_id": 1,
            ])
            let fcm = try await register([
                "realm_uuid": .string(realm), "user_id": 5, "token_kind": "fcm", "token": .string(routerFCMToken()),
                "push_key": .string(try routerPushKey().base64), "push_key_id": 2,
            ])
            let someoneElse = try await register([
                "realm_uuid": .string(realm), "user_id": 6, "token_kind": "fcm", "token": .string(routerFCMToken()),
                "push_key": .string(try routerPushKey().base64), "push_key_id": 3,
            ])
            let payload = routerMessagePayload(userID: 5, messageID: 42, content: "dry")
            let reply = try await client.send(
                .post, "/v1/notify", auth: server.auth,
                .json([
                    "realm_uuid": .string(realm), "user_id": 5, "payload": payload, "dry_run": true,
                    "device_ids": [.int(apns), .int(fcm), .int(someoneElse), 987_654_321],
                ]))
            expectRouterSuccess(reply, "dry run")
            #expect(fixture.publisher.records.isEmpty, "a dry run publishes nothing")
            #expect(reply.json["dry_run"] == true && reply.json["checked"] == "local")
            #expect(reply.json["notification_id"] == nil)
            #expect(reply.json["device_count"] == 2, "\(reply.text)")
            #expect(reply.json["delete_device_ids"] == [.int(someoneElse), 987_654_321], "\(reply.text)")
            let devices = try #require(reply.json["devices"]?.arrayValue)
            #expect(devices.map { $0["device_id"]?.intValue } == [apns, fcm, someoneElse, 987_654_321])
            #expect(devices[0]["result"] == "send" && devices[0]["provider"] == "apns")
            #expect(devices[0]["push_type"] == "alert" && devices[0]["priority"] == 10)
            #expect(
                devices[1]["result"] == "send" && devices[1]["provider"] == "fcm" && devices[1]["priority"] == "high")
            for device in devices.prefix(2) {
                // Zulip's body: base64 of nonce, MAC and the ciphertext of the plaintext, and more.
                let bytes = try #require(device["body_bytes"]?.intValue)
                #expect(bytes > Int64(Wire.canonical(payload).count) * 4 / 3, "\(device)")
                #expect(device["expires_at"]?.intValue ?? 0 > Int64(Date().timeIntervalSince1970) + 3600)
            }
            #expect(devices[2]["result"] == "skip" && devices[2]["reason"] == "not_users_device")
            #expect(devices[3]["result"] == "skip" && devices[3]["reason"] == "unknown_device")

            // A dry run is checked as a notify is.
            let bad = try await client.send(
                .post, "/v1/notify", auth: server.auth,
                .json(["realm_uuid": .string(realm), "user_id": 5, "payload": payload, "dry_run": "yes"]))
            expectRouterError(bad, 400, "BAD_REQUEST", "dry_run not a boolean")
            let foreign = try await client.send(
                .post, "/v1/notify", auth: server.auth,
                .json([
                    "realm_uuid": .string(UUID().uuidString.lowercased()), "user_id": 5, "payload": payload,
                    "dry_run": true,
                ]))
            expectRouterError(foreign, 404, "REALM_NOT_FOUND", "another realm")
            #expect(fixture.publisher.records.isEmpty)
        }
    }
}

/// `"dry_run": "pipeline"`: accepted and published marked `send_mode: validate_only`, only
/// while every dispatcher says it can; its outcomes read as `validated` or `checked`.
@Suite struct PipelineDryRunTests {
    /// A server with one FCM device for user 5 notifies it with `"dry_run": "pipeline"`.
    static func notify(_ client: RouterClient) async throws -> RouterReply {
        let realm = UUID().uuidString.lowercased()
        let server = try await client.registeredServer(realms: [realm])
        let created = try await client.send(
            .post, "/v1/devices", auth: server.auth,
            .json([
                "realm_uuid": .string(realm), "user_id": 5, "token_kind": "fcm", "token": .string(routerFCMToken()),
                "push_key": .string(try routerPushKey().base64), "push_key_id": 2,
            ]))
        #expect(created.status == 201 || created.status == 200, "\(created.text)")
        return try await client.send(
            .post, "/v1/notify", auth: server.auth,
            .json([
                "realm_uuid": .string(realm), "user_id": 5,
                "payload": routerMessagePayload(userID: 5, messageID: 1, content: "dry"), "dry_run": "pipeline",
            ]))
    }

    @Test func itIsPublishedMarkedWhenEveryDispatcherCan() async throws {
        let fixture = try await RouterFixture.make(
            providers: FixedProviders(enabled: [.fcm], capabilities: [.validateOnly]))
        try await fixture.run { client in
            let reply = try await Self.notify(client)
            #expect(reply.status == 202, "\(reply.text)")
            #expect(reply.json["dry_run"] == "pipeline" && reply.json["device_count"] == 1)
            #expect(reply.json["checked"]?["provider"] == ["fcm", "hms"], "\(reply.text)")
            #expect(reply.json["checked"]?["local"]?.arrayValue?.contains("apns") == true)
            let published = try fixture.published()
            #expect(published.count == 1)
            #expect(published.first?.record.sendMode == SendMode.validateOnly)
            #expect(published.first?.record.notificationID.rawValue == reply.json["notification_id"]?.stringValue)
        }
    }

    @Test func itIsRefusedWhileADispatcherCannot() async throws {
        let fixture = try await RouterFixture.make(providers: FixedProviders(enabled: [.fcm]))
        try await fixture.run { client in
            let reply = try await Self.notify(client)
            #expect(reply.status == 409 && reply.json["code"] == "DRY_RUN_UNAVAILABLE", "\(reply.text)")
            #expect(fixture.publisher.records.isEmpty)
        }
    }

    @Test func itsOutcomesReadAsValidatedOrChecked() {
        func delivery(_ provider: Provider, reason: String?) -> DeliveryRecord {
            var record = DeliveryRecord(
                notificationID: "n", realmUUID: "r", deviceID: 1, provider: provider, outcome: .sent,
                reason: reason.map(OutcomeReason.init(name:)), httpStatus: reason == nil ? 200 : nil, attempts: 1,
                acceptedAtMs: 1, completedAtMs: 2,
                providerMessageID: reason == nil ? "projects/p/messages/fake_message_id" : nil)
            record.sendMode = .validateOnly
            return record
        }
        let validated = StatusRecorder.status(of: delivery(.fcm, reason: nil))
        #expect(validated?.state == .validated && validated?.providerMessageID?.hasSuffix("fake_message_id") == true)
        #expect(StatusRecorder.status(of: delivery(.apns, reason: "checked_locally"))?.state == .checked)
        for state in [DeviceDeliveryStatus.State.validated, .checked] {
            let status = DeviceDeliveryStatus(state, atMs: 5, provider: .fcm)
            #expect(StoredStatus.decode(StoredStatus.encode(status, fcmPrefix: nil), fcmPrefix: nil) == status)
        }
    }
}

/// The stored form of a device's status reads back as it was written.
@Suite struct StoredStatusTests {
    @Test func everyFieldRoundTripsThroughTheCompactForm() {
        let fcmPrefix = "projects/pushrelay-dev/messages/"
        let cases: [DeviceDeliveryStatus] = [
            DeviceDeliveryStatus(.accepted, atMs: 1),
            DeviceDeliveryStatus(
                .sent, atMs: 1_764_380_000_140, provider: .apns, reason: "resent_after_interrupted_send",
                providerMessageID: "3f2a1b4c-5d6e-4f70-8192-a3b4c5d6e7f8", httpStatus: 200, attempts: 2),
            DeviceDeliveryStatus(
                .sent, atMs: 5, provider: .apns, providerMessageID: "3F2A1B4C-5D6E-4F70-8192-A3B4C5D6E7F8"),
            DeviceDeliveryStatus(
                .sent, atMs: 5, provider: .apns, providerMessageID: "3F2A1B4C-5d6e-4F70-8192-A3B4C5D6E7F8"),
            DeviceDeliveryStatus(.sent, atMs: 5, provider: .fcm, providerMessageID: fcmPrefix + "123456789"),
            DeviceDeliveryStatus(.sent, atMs: 5, provider: .fcm, providerMessageID: "projects/other/messages/9"),
            DeviceDeliveryStatus(.sent, atMs: 5, provider: .wns, providerMessageID: "=a|b|c"),
            DeviceDeliveryStatus(
                .retrying, atMs: -3, provider: .hms, reason: "80300008", attempts: 4, nextAttemptAtMs: 9_000),
            DeviceDeliveryStatus(.deadLettered, atMs: 7, provider: .webpush, httpStatus: 503, attempts: 5),
        ]
        for status in cases {
            let stored = StoredStatus.encode(status, fcmPrefix: fcmPrefix)
            #expect(StoredStatus.decode(stored, fcmPrefix: fcmPrefix) == status, "\(stored)")
            #expect(stored.hasPrefix("\(status.rank)|\(status.atMs)|"), "the script reads rank and time first")
        }
        // A reason with `|` keeps the fields apart (the bar becomes `/`).
        let odd = DeviceDeliveryStatus(.failed, atMs: 1, reason: "a|b", providerMessageID: "x|y")
        let read = StoredStatus.decode(StoredStatus.encode(odd, fcmPrefix: nil), fcmPrefix: nil)
        #expect(read?.reason == "a/b" && read?.providerMessageID == "x|y")
        // Anything else reads as nothing.
        for junk in ["", "2|x|S||||||", "2|1|?||||||", "2|1|S"] {
            #expect(StoredStatus.decode(junk, fcmPrefix: nil) == nil)
        }
        // A sent APNs push fits the 64 bytes of Redis's compact encoding.
        let apns = StoredStatus.encode(
            DeviceDeliveryStatus(
                .sent, atMs: 1_764_380_000_140, provider: .apns, providerMessageID: UUID().uuidString.lowercased(),
                httpStatus: 200, attempts: 1),
            fcmPrefix: nil)
        #expect(apns.utf8.count <= 64, "\(apns)")
    }
}
