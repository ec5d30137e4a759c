import Foundation
import Testing

@testable import PushModels

/// The seed's sample payloads (Zulip's "Mobile notifications" page), verbatim.
enum Samples {
    static let channel = """
        {
          "channel_id": 10,
          "channel_name": "Denmark",
          "content": "@test_user_group",
          "mentioned_user_group_id": 41,
          "mentioned_user_group_name": "test_user_group",
          "message_id": 45,
          "realm_name": "Zulip Dev",
          "realm_url": "http://zulip.testserver",
          "recipient_type": "channel",
          "sender_avatar_url": "https://secure.gravatar.com/avatar/818c212b9f8830dfef491b3f7da99a14?d=identicon&version=1",
          "sender_full_name": "aaron",
          "sender_id": 6,
          "time": 1754385395,
          "topic": "test",
          "type": "message",
          "user_id": 10
        }
        """
    static let direct = """
        {
          "content": "test content",
          "message_id": 46,
          "realm_name": "Zulip Dev",
          "realm_url": "http://zulip.testserver",
          "recipient_type": "direct",
          "recipient_user_ids": [6,10,12,15],
          "sender_avatar_url": "https://secure.gravatar.com/avatar/818c212b9f8830dfef491b3f7da99a14?d=identicon&version=1",
          "sender_full_name": "aaron",
          "sender_id": 6,
          "time": 1754385290,
          "type": "message",
          "user_id": 10
        }
        """
    static let remove = """
        {
          "message_ids": [
            31,
            32
          ],
          "realm_name": "Zulip Dev",
          "realm_url": "http://zulip.testserver",
          "type": "remove",
          "user_id": 10
        }
        """
    static let test = """
        {
          "realm_name": "Zulip Dev",
          "realm_url": "http://zulip.testserver",
          "time": 1754577820,
          "type": "test",
          "user_id": 10
        }
        """

    static func json(_ text: String) throws -> JSONValue {
        try JSONDecoder().decode(JSONValue.self, from: Data(text.utf8))
    }
}

@Suite struct ZulipPayloadTests {
    @Test func channelSampleValidates() throws {
        let n = try ZulipNotification(validating: try Samples.json(Samples.channel))
        #expect(n.type == .message)
        guard case .message(let m) = n.body, case .channel(let id, let name, let topic, let group) = m.recipient else {
            Issue.record("expected a channel message")
            return
        }
        #expect(id == 10 && name == "Denmark" && topic == "test")
        #expect(group?.id == 41 && group?.name == "test_user_group")
        #expect(m.senderID == 6 && m.messageID == 45)
    }

    @Test func directSampleValidates() throws {
        let n = try ZulipNotification(validating: try Samples.json(Samples.direct))
        guard case .message(let m) = n.body else {
            Issue.record("expected a message")
            return
        }
        #expect(m.recipient == .direct(recipientUserIDs: [6, 10, 12, 15]))
    }

    @Test func removeAndTestSamplesValidate() throws {
        #expect(
            try ZulipNotification(validating: try Samples.json(Samples.remove)).body == .remove(messageIDs: [31, 32]))
        #expect(try ZulipNotification(validating: try Samples.json(Samples.test)).body == .test(time: 1_754_577_820))
    }

    @Test func legacyPmUsersIsAccepted() throws {
        var fields = try Samples.json(Samples.direct).objectValue!
        fields["recipient_user_ids"] = nil
        fields["pm_users"] = "6,10,12"
        let n = try ZulipNotification(validating: .object(fields))
        guard case .message(let m) = n.body else {
            Issue.record("expected a message")
            return
        }
        #expect(m.recipient == .direct(recipientUserIDs: [6, 10, 12]))
    }

    @Test func canonicalEncodingMatchesTheVectorPlaintext() throws {
        let plaintext =
            #"{"message_ids":[31,32],"realm_name":"Zulip Dev","realm_url":"http://zulip.testserver","type":"remove","user_id":10}"#
        #expect(Wire.canonical(try Samples.json(Samples.remove)) == Array(plaintext.utf8))
    }

    /// Each mistyped or missing field fails, and the error names that field.
    @Test(
        arguments: [
            (Samples.channel, "user_id", JSONValue.string("10"), "payload.user_id"),
            (Samples.channel, "channel_id", nil, "payload.channel_id"),
            (Samples.channel, "mentioned_user_group_name", nil, "payload.mentioned_user_group_name"),
            (Samples.direct, "recipient_user_ids", JSONValue.array([10, 6]), "payload.recipient_user_ids"),
            (Samples.direct, "recipient_user_ids", JSONValue.array([6, "x"]), "payload.recipient_user_ids[1]"),
            (Samples.remove, "message_ids", JSONValue.string("31,32"), "payload.message_ids"),
            (Samples.test, "time", JSONValue.double(1.5), "payload.time"),
            (Samples.test, "type", JSONValue.string("broadcast"), "payload.type"),
            (Samples.direct, "recipient_type", JSONValue.string("stream"), "payload.recipient_type"),
            (Samples.direct, "sender_full_name", JSONValue.int(3), "payload.sender_full_name"),
        ] as [(String, String, JSONValue?, String)])
    func mistypedPayloadNamesTheField(sample: String, key: String, value: JSONValue?, field: String) throws {
        var fields = try Samples.json(sample).objectValue!
        fields[key] = value
        #expect {
            try ZulipNotification(validating: .object(fields))
        } throws: { error in
            (error as? PayloadValidationError)?.field == field
        }
    }

    @Test func nonObjectPayloadIsRejected() {
        #expect(throws: PayloadValidationError.self) { try ZulipNotification(validating: .array([])) }
    }

    @Test func apnsTokensMustBeHex() throws {
        #expect(throws: PayloadValidationError.self) { try DeviceToken(provider: .apns, value: "xyz1") }
        #expect(throws: PayloadValidationError.self) { try DeviceToken(provider: .fcm, value: "") }
        #expect(
            try DeviceToken(provider: .apns, value: String(repeating: "AB12", count: 16)).value
                == String(repeating: "ab12", count: 16))
        #expect(throws: PayloadValidationError.self) { try DeviceToken(provider: .apns, value: "ABCD12") }
        #expect(throws: PayloadValidationError.self) { try DeviceToken(provider: .fcm, value: "a\u{0}b") }
        #expect(throws: PayloadValidationError.self) { try DeviceToken(provider: .fcm, value: "a\r\nb") }
        #expect(try DeviceToken(provider: .fcm, value: "dXNlcjE:APA91b-H_x.y").value == "dXNlcjE:APA91b-H_x.y")
        #expect(DeviceToken.redact("0123456789abcdef") == "0123…cdef")
    }

    @Test func recordsRoundTripWithSchema() throws {
        let record = DeliveryRecord(
            notificationID: "n1", realmUUID: "r", deviceID: 3, provider: .fcm, outcome: .invalidToken,
            reason: .provider("UNREGISTERED"), httpStatus: 404, attempts: 1, acceptedAtMs: 1, completedAtMs: 2)
        let bytes = try Wire.encode(record)
        let text = String(decoding: bytes, as: UTF8.self)
        #expect(text.contains(#""schema":1"#))
        #expect(text.contains(#""outcome":"invalid_token""#))
        #expect(try Wire.decode(DeliveryRecord.self, from: bytes) == record)
    }

    @Test func deliveryClassFollowsType() throws {
        #expect(
            DeliveryClass(.remove)
                == DeliveryClass(apnsPriority: 5, apnsPushType: .known(.background), fcmPriority: .known(.normal)))
        #expect(DeliveryClass(.remove).apnsPushType == .known(.background))
        #expect(Named<APNsPushType>("liveactivity") == .known(.liveactivity))
        #expect(Named<APNsPushType>("hologram") == .unknown("hologram"))
        #expect(APNsPriority(7) == .unknown(7))
        #expect(
            try Wire.decode(
                DeliveryClass.self,
                from: Array(#"{"apns_priority":7,"apns_push_type":"hologram","fcm_priority":"urgent"}"#.utf8))
                == DeliveryClass(
                    apnsPriority: .unknown(7), apnsPushType: .unknown("hologram"), fcmPriority: .unknown("urgent")))
        #expect(DeliveryClass(.test).apnsPriority == 10)
    }
}
