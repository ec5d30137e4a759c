import EncryptorCore
import Foundation
import Kafka
import PushCrypto
import PushModels
import ServiceKit
import Testing

@testable import DeviceState
@testable import StageTestSupport

/// The encryptor's logic on in-memory seams: fan-out, per-device encryption, sealed
/// tokens and bodies, the outcomes of devices with nothing to send, and publishing.
@Suite struct EncryptorStageTests {
    typealias F = MemoryFixtures
    let keys: PipelineKeyring
    let apnsKey: PushKey
    let fcmKey: PushKey
    let clock = MemoryClock(F.now)
    let publisher = MemoryPublisher()
    let directory = MemoryDeviceDirectory()
    let ttl: Int64 = 3600
    let acceptedAt = F.now - 2_000

    init() throws {
        keys = try F.pipelineKeyring()
        apnsKey = try F.pushKey()
        fcmKey = try F.pushKey()
    }

    func stage(keys: PipelineKeyring? = nil) -> EncryptorStage {
        EncryptorStage(
            devices: directory, pipelineKeys: keys ?? self.keys, publisher: publisher, topics: F.topics,
            ttlSeconds: ttl, clock: clock, logger: F.logger)
    }

    /// User 10's two phones with push keys 11 (APNs) and 12 (FCM).
    func addUserDevices() {
        directory.add(F.device(1, provider: .apns, key: (11, apnsKey)))
        directory.add(F.device(2, provider: .fcm, key: (12, fcmKey)))
    }

    static let payload: JSONValue = [
        "type": "message", "realm_url": "https://chat.example.com", "user_id": 10, "message_id": 4501,
        "content": "secret plan",
    ]

    func nativeRequest(
        id: NotificationID = "n-native", userID: Int64 = 10, deviceIDs: [DeviceID]? = nil,
        type: NotificationType = .message,
        payload: JSONValue = payload, sealWith: PipelineKeyring? = nil, sealFor sealedUser: Int64? = nil
    ) throws -> PushRequestRecord {
        let sealed = try (sealWith ?? keys).seal(
            Wire.canonical(payload),
            binding: .payload(notificationID: id, realmUUID: F.realm, userID: sealedUser ?? userID))
        return PushRequestRecord(
            notificationID: id, serverUUID: F.server, realmUUID: F.realm, acceptedAtMs: acceptedAt,
            request: .native(userID: userID, deviceIDs: deviceIDs, type: type, sealedPayload: sealed))
    }

    func handle(_ request: PushRequestRecord, headers: [(name: String, value: [UInt8])] = []) async throws
        -> RecordDisposition
    {
        await stage().handle(try F.consumed(request, topic: F.topics.requests, headers: headers))
    }

    func outbound() throws -> [OutboundRecord] { try publisher.decoded(OutboundRecord.self, on: F.topics.outbound) }
    func deliveries() throws -> [DeliveryRecord] { try publisher.decoded(DeliveryRecord.self, on: F.topics.deliveries) }

    // MARK: Native

    @Test func nativeRequestBecomesOnePushPerActiveDeviceThatOnlyTheDeviceCanRead() async throws {
        addUserDevices()
        // Another user's phone in the same realm is not part of user 10's fan-out.
        directory.add(F.device(5, provider: .apns, userID: 99, key: (1, try F.pushKey())))

        let disposition = try await handle(try nativeRequest())
        #expect(disposition == .done)
        #expect(publisher.batches.count == 1, "one request, one acknowledged batch")
        #expect(publisher.topics == [F.topics.outbound, F.topics.outbound])

        let records = try outbound()
        #expect(records.map(\.deviceID) == [1, 2])
        let plaintext = Wire.canonical(Self.payload)

        let apns = try #require(records.first { $0.deviceID == 1 })
        #expect(apns.provider == .apns)
        #expect(apns.appID == "org.zulip.Zulip")
        #expect(
            apns.delivery == DeliveryClass(apnsPriority: 10, apnsPushType: .known(.alert), fcmPriority: .known(.high)))
        let apnsBody = try #require(try F.body(of: apns))
        #expect(apnsBody["push_key_id"] == .int(11))
        #expect(apnsBody["aps"] == ["mutable-content": 1, "alert": ["title": "New notification"]])
        let apnsData = try #require(apnsBody["encrypted_data"]?.stringValue)
        #expect(try F.deviceOpens(apnsData, with: apnsKey) == plaintext)
        #expect(throws: CryptoError.self, "the other phone's key does not open it") {
            try F.deviceOpens(apnsData, with: fcmKey)
        }

        let fcm = try #require(records.first { $0.deviceID == 2 })
        #expect(fcm.provider == .fcm)
        let fcmBody = try #require(try F.body(of: fcm))
        #expect(fcmBody["push_key_id"] == .string("12"))
        #expect(fcmBody["aps"] == nil)
        let fcmData = try #require(fcmBody["encrypted_data"]?.stringValue)
        #expect(try F.deviceOpens(fcmData, with: fcmKey) == plaintext)

        for record in records {
            #expect(record.schema == OutboundRecord.currentSchema)
            #expect(record.realmUUID == F.realm && record.notificationID == "n-native")
            #expect(record.acceptedAtMs == acceptedAt)
            #expect(record.expiresAt == acceptedAt / 1000 + ttl)
            #expect(record.attempts == nil && record.lastError == nil)
        }
        for message in publisher.records {
            // Traceable by notification across topics.
            #expect(message.headerTexts(RecordHeader.notificationID) == ["n-native"])
            // Nothing readable on the topic: no content, no token.
            #expect(!message.valueText.contains("secret plan"))
        }
        #expect(publisher.records.map(\.keyString) == ["1", "2"], "keyed by device: one device's pushes stay in order")
    }

    @Test func theTokenTravelsSealedAndBoundToItsDevice() async throws {
        addUserDevices()
        #expect(try await handle(try nativeRequest()) == .done)
        let messages = publisher.records(on: F.topics.outbound)
        #expect(messages.count == 2)
        for (message, token) in zip(messages, ["apns-token-1", "fcm-token-2"]) {
            let json = try message.valueJSON()
            #expect(json["token"] == nil, "the clear token is never encoded")
            #expect(!message.valueText.contains(token))
            #expect(json["sealed_token"]?["alg"] == "xchacha20poly1305")
            let record = try Wire.decode(OutboundRecord.self, from: message.value)
            #expect(record.token == "")
            let sealed = try #require(record.sealedToken)
            let binding = SealBinding.token(
                notificationID: record.notificationID, realmUUID: F.realm, deviceID: record.deviceID)
            #expect(try keys.open(sealed, binding: binding) == Array(token.utf8))
            // Moved to another device's record, or opened by another keyring, it does not open.
            let moved = SealBinding.token(notificationID: record.notificationID, realmUUID: F.realm, deviceID: 77)
            #expect(throws: CryptoError.self) { try keys.open(sealed, binding: moved) }
            #expect(throws: CryptoError.self) { try F.pipelineKeyring().open(sealed, binding: binding) }
        }
    }

    @Test func removalsAreBackgroundPushesWithoutAnAlert() async throws {
        addUserDevices()
        let removal: JSONValue = ["type": "remove", "message_ids": [31, 32], "user_id": 10]
        #expect(try await handle(try nativeRequest(type: .remove, payload: removal)) == .done)
        let records = try outbound()
        #expect(records.count == 2)
        for record in records {
            #expect(
                record.delivery
                    == DeliveryClass(apnsPriority: 5, apnsPushType: .known(.background), fcmPriority: .known(.normal)))
        }
        let apns = try #require(records.first { $0.provider == .apns })
        let body = try #require(try F.body(of: apns))
        #expect(body["aps"] == ["content-available": 1])
        #expect(
            try F.deviceOpens(try #require(body["encrypted_data"]?.stringValue), with: apnsKey)
                == Wire.canonical(removal))
    }

    @Test func devicesWithNothingToSendGetTheirOutcomeOnTheDeliveriesTopic() async throws {
        directory.add(F.device(1, provider: .apns, key: (11, apnsKey)))
        directory.add(
            F.device(
                3, provider: .fcm, key: (1, fcmKey),
                status: .invalid(reason: .provider("Unregistered"), atMs: F.now - 1000)))
        directory.add(F.device(4, provider: .fcm))  // registered without a push key
        directory.add(F.device(5, provider: .apns, userID: 99, key: (1, try F.pushKey())))
        directory.add(F.device(6, provider: .fcm, realm: F.otherRealm, userID: 10, key: (1, try F.pushKey())))
        directory.add(
            F.device(7, provider: .apns, key: (1, try F.pushKey()), status: .invalid(reason: nil, atMs: F.now - 1000)))

        let request = try nativeRequest(id: "n-mixed", deviceIDs: [999, 5, 6, 3, 7, 4, 1])
        #expect(try await handle(request) == .done)
        #expect(publisher.batches.count == 1, "outcomes and pushes are acknowledged together")

        #expect(try outbound().map(\.deviceID) == [1])
        let outcomes = try deliveries()
        #expect(outcomes.map(\.deviceID) == [999, 5, 6, 3, 7, 4])
        let byDevice = Dictionary(uniqueKeysWithValues: outcomes.map { ($0.deviceID ?? -1, $0) })
        #expect(byDevice[999]?.outcome == .unknownDevice)
        #expect(byDevice[999]?.reason == .stage(.unknownDevice))
        #expect(byDevice[999]?.provider == nil)
        #expect(byDevice[5]?.outcome == .unknownDevice)
        #expect(byDevice[5]?.reason == .stage(.notUsersDevice))
        #expect(byDevice[6]?.outcome == .unknownDevice)
        #expect(byDevice[6]?.reason == .stage(.notUsersDevice), "same user id, another realm")
        #expect(byDevice[3]?.outcome == .invalidToken)
        #expect(byDevice[3]?.reason == .provider("Unregistered"))
        #expect(byDevice[3]?.provider == .fcm)
        #expect(byDevice[7]?.outcome == .invalidToken)
        #expect(byDevice[7]?.reason == .stage(.deviceInvalid))
        #expect(byDevice[4]?.outcome == .failed)
        #expect(byDevice[4]?.reason == .stage(.noPushKey))
        for outcome in outcomes {
            #expect(outcome.notificationID == "n-mixed" && outcome.realmUUID == F.realm)
            #expect(outcome.attempts == 0)
            #expect(outcome.acceptedAtMs == acceptedAt)
            #expect(outcome.completedAtMs == F.now)
        }
    }

    @Test func aUserWithoutDevicesProducesNothingAndAGoneDeviceIsUnknown() async throws {
        // User 10's set still names device 8, whose record is gone.
        directory.addMembership(realm: F.realm, userID: 10, id: 8)
        #expect(try await handle(try nativeRequest(userID: 10)) == .done)
        #expect(try outbound().isEmpty)
        #expect(
            try deliveries().map { [$0.outcome.rawValue, $0.reason?.name ?? ""] } == [
                ["unknown_device", "unknown_device"]
            ])

        let before = publisher.records.count
        #expect(try await handle(try nativeRequest(id: "n-nobody", userID: 11)) == .done)
        #expect(publisher.records.count == before, "a user with no devices: nothing to publish")
    }

    @Test func aSealedPayloadThatDoesNotOpenFailsTheRequest() async throws {
        addUserDevices()
        // Sealed with a pipeline key this encryptor does not hold.
        #expect(
            try await handle(try nativeRequest(id: "n-foreign-key", sealWith: try F.pipelineKeyring(id: "k9"))) == .done
        )
        // Sealed for another user and copied into this request: the binding refuses it.
        #expect(try await handle(try nativeRequest(id: "n-moved", sealFor: 11)) == .done)

        #expect(try outbound().isEmpty, "nothing is sent for a payload the relay cannot read")
        let outcomes = try deliveries()
        #expect(outcomes.map(\.notificationID) == ["n-foreign-key", "n-moved"])
        #expect(outcomes.map(\.outcome) == [.failed, .failed])
        #expect(outcomes.map(\.reason) == [.stage(.pipelineKeyUnavailable), .stage(.pipelineKeyUnavailable)])
        #expect(outcomes.allSatisfy { $0.deviceID == nil && $0.provider == nil })
    }

    // MARK: Pass-through (bouncer API)

    @Test func passThroughPayloadsTravelUnchangedForAPNsAndStringifiedForFCM() async throws {
        directory.add(F.device(20, provider: .apns, userID: nil, appID: "org.zulip.Zulip"))
        directory.add(F.device(21, provider: .fcm, userID: nil))
        directory.add(F.device(22, provider: .fcm, userID: nil))
        directory.add(
            F.device(
                23, provider: .fcm, userID: nil, status: .invalid(reason: .provider("UNREGISTERED"), atMs: F.now - 1000)
            ))
        directory.add(F.device(24, provider: .fcm, realm: F.otherRealm, userID: nil))
        directory.add(F.device(25, provider: .fcm, userID: nil, legacyOwner: "\(F.server)|uuid:u1"))

        let apnsPayload: JSONValue = [
            "push_account_id": 10, "encrypted_data": "uOGQ9m8bdnLab/2Qq6WLdJnFUsU=",
            "aps": ["mutable-content": 1, "alert": ["title": "New notification"]],
        ]
        let fcmPayload: JSONValue = ["push_account_id": 20, "encrypted_data": "OzPhtLiyU1U+3ynqyTxk", "flag": true]
        let request = PushRequestRecord(
            notificationID: "n-pass", serverUUID: F.server, realmUUID: F.realm, acceptedAtMs: acceptedAt,
            request: .passThrough(items: [
                PassThroughItem(deviceID: 20, apnsPriority: 5, apnsPushType: .known(.background), payload: apnsPayload),
                PassThroughItem(deviceID: 21, fcmPriority: .known(.normal), payload: fcmPayload),
                PassThroughItem(deviceID: 22, apnsPriority: 10, payload: apnsPayload),  // APNs headers, FCM device
                PassThroughItem(deviceID: 23, fcmPriority: .known(.high), payload: fcmPayload),
                PassThroughItem(deviceID: 24, fcmPriority: .known(.high), payload: fcmPayload),  // another realm's
                PassThroughItem(deviceID: 25, fcmPriority: .known(.high), payload: fcmPayload),  // legacy API device
                PassThroughItem(deviceID: 987_654_321, fcmPriority: .known(.high), payload: fcmPayload),
            ]))
        #expect(try await handle(request) == .done)

        let records = try outbound()
        #expect(records.map(\.deviceID) == [20, 21])
        let apns = records[0]
        #expect(apns.body == Wire.canonical(apnsPayload), "APNs gets the realm's ciphertext payload unchanged")
        #expect(
            apns.delivery
                == DeliveryClass(apnsPriority: 5, apnsPushType: .known(.background), fcmPriority: .known(.high)))
        #expect(apns.appID == "org.zulip.Zulip")
        let fcm = records[1]
        #expect(
            try F.body(of: fcm) == ["push_account_id": "20", "encrypted_data": "OzPhtLiyU1U+3ynqyTxk", "flag": "true"])
        #expect(fcm.delivery.fcmPriority == .known(.normal))
        for record in records {
            let sealed = try #require(record.sealedToken)
            let token = try keys.open(
                sealed, binding: .token(notificationID: "n-pass", realmUUID: F.realm, deviceID: record.deviceID))
            #expect(String(decoding: token, as: UTF8.self) == "\(record.provider.rawValue)-token-\(record.deviceID)")
        }

        let outcomes = Dictionary(uniqueKeysWithValues: try deliveries().map { ($0.deviceID ?? -1, $0) })
        #expect(outcomes.count == 5)
        #expect(outcomes[22]?.outcome == .failed)
        #expect(outcomes[22]?.reason == .stage(.providerMismatch))
        #expect(outcomes[23]?.outcome == .invalidToken)
        #expect(outcomes[23]?.reason == .provider("UNREGISTERED"))
        #expect(outcomes[24]?.outcome == .unknownDevice)
        #expect(outcomes[24]?.reason == .stage(.unknownDevice))
        #expect(outcomes[25]?.outcome == .unknownDevice, "a legacy API device is not reachable through E2EE notify")
        #expect(outcomes[987_654_321]?.outcome == .unknownDevice)
        #expect(outcomes[987_654_321]?.provider == .fcm, "the provider the item asked for")
    }

    // MARK: Legacy (Zulip's non-E2EE API)

    func legacyRequest(
        id: NotificationID, deviceIDs: [DeviceID], payload: ZulipLegacyPayload, sealWith: PipelineKeyring? = nil
    ) throws -> PushRequestRecord {
        let sealed = try (sealWith ?? keys).seal(
            try Wire.encode(payload), binding: .payload(notificationID: id, realmUUID: F.realm, userID: nil))
        return PushRequestRecord(
            notificationID: id, serverUUID: F.server, realmUUID: F.realm, acceptedAtMs: acceptedAt,
            request: .legacy(user: "uuid:u1", deviceIDs: deviceIDs, sealedPayload: sealed))
    }

    static let legacyPayload = ZulipLegacyPayload(
        apnsPayload: [
            "alert": ["title": "Iago", "body": "lunch at noon"], "badge": 0, "sound": "default",
            "custom": ["zulip": ["message_ids": [5], "server": "chat.example.com"]],
        ],
        gcmPayload: [
            "event": "message", "zulip_message_id": 5, "sender_full_name": "Iago", "content": "lunch at noon",
        ],
        fcmPriority: "high")

    @Test func legacyBodiesAreBuiltAsZulipDoesAndTravelSealed() async throws {
        let owner = "\(F.server)|uuid:u1"
        directory.add(F.device(30, provider: .apns, userID: nil, legacyOwner: owner))
        directory.add(F.device(31, provider: .fcm, userID: nil, legacyOwner: owner))
        directory.add(F.device(32, provider: .fcm, userID: nil, legacyOwner: "another-server|uuid:u1"))
        directory.add(F.device(33, provider: .fcm, key: (1, fcmKey)))  // a native device
        directory.add(
            F.device(
                34, provider: .apns, userID: nil,
                status: .invalid(reason: .provider("Unregistered"), atMs: F.now - 1000),
                legacyOwner: owner))

        let request = try legacyRequest(id: "n-legacy", deviceIDs: [30, 31, 32, 33, 34], payload: Self.legacyPayload)
        #expect(try await handle(request) == .done)

        let messages = publisher.records(on: F.topics.outbound)
        #expect(messages.count == 2)
        for message in messages {
            let json = try message.valueJSON()
            #expect(json["body"] == nil && json["body_json"] == nil, "a readable body is never encoded in the clear")
            #expect(json["token"] == nil)
            #expect(!message.valueText.contains("lunch at noon") && !message.valueText.contains("Iago"))
        }
        let records = try outbound()
        #expect(records.map(\.deviceID) == [30, 31])

        func openedBody(_ record: OutboundRecord) throws -> JSONValue {
            let sealed = try #require(record.sealedBody)
            return try Wire.decode(
                JSONValue.self,
                from: try keys.open(
                    sealed, binding: .body(notificationID: "n-legacy", realmUUID: F.realm, deviceID: record.deviceID)))
        }
        let apns = records[0]
        #expect(apns.body.isEmpty)
        #expect(
            try openedBody(apns) == [
                "zulip": ["message_ids": [5], "server": "chat.example.com"],
                "aps": ["alert": ["title": "Iago", "body": "lunch at noon"], "badge": 0, "sound": "default"],
            ])
        #expect(
            apns.delivery == DeliveryClass(apnsPriority: 10, apnsPushType: .known(.alert), fcmPriority: .known(.high)))
        let fcm = records[1]
        #expect(
            try openedBody(fcm) == [
                "event": "message", "zulip_message_id": "5", "sender_full_name": "Iago", "content": "lunch at noon",
            ])
        #expect(fcm.delivery.fcmPriority == .known(.high))
        // The sealed body does not open as another device's.
        #expect(throws: CryptoError.self) {
            try keys.open(
                try #require(fcm.sealedBody),
                binding: .body(notificationID: "n-legacy", realmUUID: F.realm, deviceID: 30))
        }

        let outcomes = try deliveries()
        #expect(outcomes.map(\.deviceID) == [32, 33, 34])
        #expect(outcomes.map(\.outcome) == [.unknownDevice, .unknownDevice, .invalidToken])
        #expect(outcomes.map(\.reason) == [.stage(.unknownDevice), .stage(.unknownDevice), .provider("Unregistered")])
    }

    @Test func aLegacyPayloadThatDoesNotOpenFailsEachDevice() async throws {
        let owner = "\(F.server)|uuid:u1"
        directory.add(F.device(30, provider: .apns, userID: nil, legacyOwner: owner))
        directory.add(F.device(31, provider: .fcm, userID: nil, legacyOwner: owner))
        let request = try legacyRequest(
            id: "n-legacy-bad", deviceIDs: [30, 31], payload: Self.legacyPayload, sealWith: try F.pipelineKeyring())
        #expect(try await handle(request) == .done)
        #expect(try outbound().isEmpty)
        let outcomes = try deliveries()
        #expect(outcomes.map(\.deviceID) == [30, 31])
        #expect(outcomes.allSatisfy { $0.outcome == .failed && $0.reason == .stage(.pipelineKeyUnavailable) })
    }

    // MARK: Consuming and publishing

    @Test func anUndecodableRecordIsSkippedAndAccountedForWhenItNamesItsNotification() async throws {
        addUserDevices()
        let stage = stage()
        #expect(await stage.handle(F.consumedBytes(Array("not json {".utf8), topic: F.topics.requests)) == .done)
        #expect(
            await stage.handle(
                F.consumedBytes(Array(#"{"schema":1,"kind":"carrier_pigeon"}"#.utf8), topic: F.topics.requests))
                == .done)
        // A native request without its sealed payload cannot be half-handled: it does not decode.
        let noPayload: JSONValue = [
            "schema": 1, "kind": "native", "notification_id": "n-empty", "server_uuid": .string(F.server.rawValue),
            "realm_uuid": .string(F.realm.rawValue), "user_id": 10, "accepted_at_ms": .int(acceptedAt),
        ]
        #expect(publisher.calls == 0, "nothing names a notification to account for")
        #expect(await stage.handle(F.consumedBytes(Wire.canonical(noPayload), topic: F.topics.requests)) == .done)
        #expect(directory.calls == 0, "not even a device look-up")
        let outcomes = try deliveries()
        #expect(publisher.records.count == 1 && outcomes.count == 1)
        let outcome = try #require(outcomes.first)
        #expect(outcome.notificationID == "n-empty" && outcome.realmUUID == F.realm)
        #expect(outcome.outcome == .failed && outcome.reason == .stage(.malformedRequest) && outcome.deviceID == nil)
    }

    @Test func aRequestThatFailsTheSameWayEveryTimeIsRecordedFailedNotRetriedForever() async throws {
        addUserDevices()
        directory.failNext(100, with: CryptoError(.invalidCiphertext, "a damaged device record"))
        let request = try nativeRequest(id: "n-poison", deviceIDs: [1, 2])
        #expect(try await stage().handle(F.consumed(request, topic: F.topics.requests)) == .done)
        #expect(directory.calls == 3, "three attempts, then it is accounted for")
        let outcomes = try deliveries()
        #expect(publisher.records.count == 2, "the outcomes, and no push")
        #expect(outcomes.map(\.deviceID) == [1, 2])
        #expect(outcomes.allSatisfy { $0.outcome == .failed && $0.reason == .stage(.encryptionFailed) })
        #expect(outcomes.allSatisfy { $0.notificationID == "n-poison" })
    }

    @Test func aMissingStorageKeyIsRetriedUntilTheOperatorFixesIt() async throws {
        addUserDevices()
        directory.failNext(5, with: CryptoError(.invalidKey, "no storage key s2"))
        let request = try nativeRequest(id: "n-config", deviceIDs: [1])
        #expect(try await stage().handle(F.consumed(request, topic: F.topics.requests)) == .done)
        #expect(directory.calls == 6)
        let outbound = try publisher.decoded(OutboundRecord.self, on: F.topics.outbound)
        #expect(outbound.map(\.deviceID) == [1])
    }

    @Test func aFailedPublishIsRetriedAndEachRecordIsPublishedOnce() async throws {
        addUserDevices()
        directory.add(
            F.device(
                3, provider: .fcm, key: (1, fcmKey),
                status: .invalid(reason: .provider("Unregistered"), atMs: F.now - 1000)))
        publisher.failNext(1)
        let request = try nativeRequest(id: "n-retry", deviceIDs: [1, 2, 3])
        #expect(try await handle(request) == .done)
        #expect(publisher.calls == 2, "the first publish failed and was tried again")
        #expect(publisher.batches.count == 1)
        #expect(try outbound().map(\.deviceID) == [1, 2])
        #expect(try deliveries().map(\.deviceID) == [3])
        // And a Redis error while resolving devices is retried the same way.
        directory.failNext(1)
        #expect(try await handle(try nativeRequest(id: "n-redis", deviceIDs: [1])) == .done)
        #expect(try outbound().map(\.notificationID) == ["n-retry", "n-retry", "n-redis"])
    }

    @Test func theReplayHeaderIsCarriedToEveryPushOnce() async throws {
        addUserDevices()
        directory.add(F.device(4, provider: .fcm))  // no key: an outcome, not a push
        publisher.failNext(2)
        let replay = F.header(RecordHeader.replay, "force")
        #expect(
            try await handle(try nativeRequest(id: "n-replayed", deviceIDs: [1, 2, 4]), headers: [replay]) == .done)
        #expect(publisher.calls == 3)
        let pushes = publisher.records(on: F.topics.outbound)
        #expect(pushes.count == 2)
        for push in pushes {
            #expect(push.headerTexts(RecordHeader.replay) == ["force"], "exactly once, even after retried publishes")
        }
        // Without the header, nothing is marked.
        #expect(try await handle(try nativeRequest(id: "n-fresh", deviceIDs: [1])) == .done)
        let fresh = try #require(publisher.records(on: F.topics.outbound).last)
        #expect(fresh.headerTexts(RecordHeader.notificationID) == ["n-fresh"])
        #expect(fresh.headerTexts(RecordHeader.replay).isEmpty)
    }

    // MARK: Batches

    /// User 10's two phones, user 20's phone (device 3), and a batch: user 10 by user
    /// id, user 20 by device id, user 10 again, and an undecodable record.
    func batchOfRequests() throws -> [KafkaRecord] {
        addUserDevices()
        directory.add(F.device(3, provider: .fcm, userID: 20, key: (13, fcmKey)))
        return [
            try F.consumed(try nativeRequest(id: "n-a"), topic: F.topics.requests),
            try F.consumed(try nativeRequest(id: "n-b", userID: 20, deviceIDs: [3]), topic: F.topics.requests),
            F.consumedBytes(Array("{".utf8), topic: F.topics.requests),
            try F.consumed(
                try nativeRequest(id: "n-c"), topic: F.topics.requests,
                headers: [F.header(RecordHeader.replay, "force")]),
        ]
    }

    @Test func aBatchReadsItsDevicesTogetherAndPublishesOnceInRecordOrder() async throws {
        let records = try batchOfRequests()
        let dispositions = await stage().handleBatch(records)
        #expect(dispositions == [.done, .done, .done, .done])
        #expect(directory.calls == 2, "user 10's set, then every device record at once")
        #expect(publisher.batches.count == 1, "one publish for the whole batch")
        let pushes = try outbound()
        #expect(pushes.map(\.notificationID) == ["n-a", "n-a", "n-b", "n-c", "n-c"])
        #expect(pushes.map(\.deviceID) == [1, 2, 3, 1, 2])
        // Each push opens on its own device, as when the records are handled one by one.
        let keysByDevice: [DeviceID: PushKey] = [1: apnsKey, 2: fcmKey, 3: fcmKey]
        for push in pushes {
            let data = try #require(try F.body(of: push)?["encrypted_data"]?.stringValue)
            let opened = try F.deviceOpens(data, with: try #require(keysByDevice[push.deviceID]))
            #expect(opened == Wire.canonical(Self.payload))
        }
        // Only the re-driven request's pushes are marked.
        let marked = publisher.records(on: F.topics.outbound).map { $0.headerTexts(RecordHeader.replay) }
        #expect(marked == [[], [], [], ["force"], ["force"]])
    }

    @Test func aBatchThatFailsTheSameWayIsHandledAgainRequestByRequest() async throws {
        let records = try batchOfRequests()
        // The batch's look-up fails twice: each request then runs on its own.
        directory.failNext(2, with: CryptoError(.invalidCiphertext, "a damaged device record"))
        let dispositions = await stage().handleBatch(records)
        #expect(dispositions == [.done, .done, .done, .done])
        #expect(publisher.batches.count == 3, "one publish per request after the fallback")
        #expect(try outbound().map(\.notificationID).sorted() == ["n-a", "n-a", "n-b", "n-c", "n-c"])
        #expect(try deliveries().isEmpty)
        // One failed publish is tried again with the batch kept whole.
        publisher.failNext(1)
        let again = try batchOfRequests()
        #expect(await stage().handleBatch(again) == [.done, .done, .done, .done])
        #expect(publisher.batches.count == 4)
    }
}
