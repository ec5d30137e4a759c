import Foundation
import Testing

@testable import PushModels

/// gorush's field mapping (docs/api/gorush.md): what apns2, firebase-admin-go and Huawei's
/// SDK would build from gorush's documented requests, and gorush's own checks.
@Suite struct GorushNotificationTests {
    func parse(_ json: JSONValue) throws -> GorushNotification {
        try GorushNotification(validating: json, path: "notifications[0]")
    }

    @Test func iosPayloadsAsApns2BuildsThem() throws {
        let plain = try parse(["tokens": ["aa"], "platform": 1, "message": "Hello World iOS!"])
        #expect(plain.apnsPayload() == ["aps": ["alert": "Hello World iOS!"]])
        // No priority, no expiration: apns2 sends neither header (APNs' defaults apply).
        #expect(plain.delivery.apnsPushType.name == "alert" && plain.delivery.apnsPriority == nil)
        #expect(plain.expiresAt == nil && plain.delivery.fcmPriority == nil)
        #expect(try parse(["tokens": ["aa"], "platform": 1, "priority": "high"]).delivery.apnsPriority == .immediate)
        // A priority gorush does not know is sent as none, not refused.
        #expect(try parse(["tokens": ["aa"], "platform": 1, "priority": "urgent"]).delivery.apnsPriority == nil)
        #expect(try parse(["tokens": ["aa"], "platform": 1, "expiration": 0]).expiresAt == nil)

        let titled = try parse(["tokens": ["aa"], "platform": 1, "title": "T", "message": "B", "badge": 0])
        #expect(titled.apnsPayload() == ["aps": ["alert": ["title": "T", "body": "B"], "badge": 0]])

        let alert = try parse([
            "tokens": ["aa"], "platform": 1, "badge": 5,
            "alert": ["title": "Game Request", "body": "Bob wants to play poker", "action-loc-key": "PLAY"],
        ])
        #expect(
            alert.apnsPayload() == [
                "aps": [
                    "alert": ["title": "Game Request", "body": "Bob wants to play poker", "action-loc-key": "PLAY"],
                    "badge": 5,
                ]
            ])

        let sound = try parse([
            "tokens": ["aa"], "platform": 1, "message": "m",
            "sound": ["critical": 1, "name": "default", "volume": .double(1.0)],
            "data": ["key1": "welcome", "key2": 2],
            "mutable_content": true, "category": "c", "thread-id": "t", "interruption_level": "time-sensitive",
        ])
        let payload = sound.apnsPayload()
        #expect(payload["aps"]?["sound"] == ["critical": 1, "name": "default", "volume": .double(1.0)])
        #expect(payload["key1"] == "welcome" && payload["key2"] == 2, "data keys at the root")
        #expect(payload["aps"]?["mutable-content"] == 1 && payload["aps"]?["category"] == "c")
        #expect(payload["aps"]?["thread-id"] == "t" && payload["aps"]?["interruption-level"] == "time-sensitive")

        // Top-level name/volume: apns2 starts from {critical 1, name default, volume 1}.
        let named = try parse(["tokens": ["aa"], "platform": 1, "name": "bell.caf"])
        #expect(named.apnsPayload()["aps"]?["sound"] == ["critical": 1, "name": "bell.caf", "volume": 1])

        // content_available alone: gorush infers nothing (push type alert, no priority).
        let background = try parse(["tokens": ["aa"], "platform": 1, "content_available": true])
        #expect(background.apnsPayload() == ["aps": ["content-available": 1]])
        #expect(background.delivery.apnsPushType.name == "alert")
        #expect(background.delivery.apnsPriority == nil)
        let live = try parse([
            "tokens": ["aa"], "platform": 1, "push_type": "liveactivity", "priority": "normal", "event": "start",
            "timestamp": 1_685_952_000, "content-state": ["homeScore": 0], "expiration": 1_900_000_000,
            "collapse_id": "c1",
        ])
        #expect(live.delivery.apnsPushType.name == "liveactivity" && live.delivery.apnsPriority == .considerate)
        #expect(
            live.apnsPayload()["aps"]?["event"] == "start" && live.apnsPayload()["aps"]?["timestamp"] == 1_685_952_000)
        #expect(live.expiresAt == 1_900_000_000 && live.collapseID == "c1")
    }

    @Test func soundsAsApns2CombinesThem() throws {
        func sound(_ fields: [String: JSONValue]) throws -> JSONValue? {
            var json: [String: JSONValue] = ["tokens": ["aa"], "platform": 1]
            for (key, value) in fields { json[key] = value }
            return try parse(.object(json)).apnsPayload()["aps"]?["sound"]
        }
        // A dictionary alone keeps its critical level; zero values are left out.
        #expect(
            try sound(["sound": ["critical": 3, "name": "alarm.caf", "volume": 0]]) == [
                "critical": 3, "name": "alarm.caf",
            ])
        // A top-level name or volume starts over from apns2's defaults: critical back to 1.
        #expect(
            try sound([
                "sound": ["critical": 3, "name": "x", "volume": .double(0.2)], "name": "foobar", "volume": .double(5.5),
            ])
                == ["critical": 1, "name": "foobar", "volume": .double(5.5)])
        #expect(
            try sound(["sound": "ping.aiff", "volume": .double(0.5)])
                == ["critical": 1, "name": "default", "volume": .double(0.5)])
        #expect(try sound(["sound": "ping.aiff", "volume": 0]) == "ping.aiff", "volume 0 is not set")
        #expect(try sound(["sound": ""]) == "", "an empty string is sent as it is")
        #expect(try sound(["message": "m"]) == nil)
    }

    @Test func countsAndCapsAsGorushHasThem() throws {
        // iOS: no token cap, `to` ignored, the topic counted as one more target.
        let many = JSONValue.array((0..<1200).map { .string(String(format: "%064x", $0)) })
        let ios = try parse(["tokens": many, "platform": 1, "topic": "com.example", "to": "x"])
        #expect(ios.tokens.count == 1200 && ios.counted == 1201)
        #expect(try parse(["tokens": ["a", "b"], "platform": 1, "topic": "t"]).counted == 3)
        // Android: 500 per notification, `to` added but not counted.
        let android = try parse(["tokens": ["a"], "to": "b", "platform": 2])
        #expect(android.tokens == ["a", "b"] && android.counted == 1)
        #expect(throws: PayloadValidationError.self) {
            try parse(["tokens": .array(Array(repeating: "a", count: 501)), "platform": 3])
        }
    }

    @Test func androidDefaultsAreFirebasesNotTheRelays() throws {
        // No priority, sound or android block: no android block, no TTL (FCM's normal, four weeks).
        let plain = try parse(["tokens": ["t"], "platform": 2, "message": "m", "title": "t"])
        #expect(plain.fcmMessage() == ["notification": ["title": "t", "body": "m"]])
        #expect(plain.expiresAt == nil && plain.collapseID == nil && plain.delivery.fcmPriority == nil)
        let collapsing = try parse([
            "tokens": ["t"], "platform": 2, "message": "m", "collapse_id": "c", "expiration": 9,
        ])
        #expect(collapsing.collapseID == nil && collapsing.expiresAt == nil, "iOS-only fields")
        // mutable_content with a sound: the sound goes beside mutable-content in apns.payload.aps.
        let mutable = try parse([
            "tokens": ["t"], "platform": 2, "message": "m", "mutable_content": true, "sound": "ding",
        ])
        #expect(mutable.fcmMessage()["apns"] == ["payload": ["aps": ["mutable-content": 1, "sound": "ding"]]])
        #expect(mutable.fcmMessage()["android"] == ["notification": ["sound": "ding"]])
        // mutable_content counts only with a title, message or image; it replaces a given apns block.
        let bare = try parse(["tokens": ["t"], "platform": 2, "mutable_content": true, "data": ["k": "v"]])
        #expect(bare.fcmMessage()["apns"] == nil)
        let replaced = try parse([
            "tokens": ["t"], "platform": 2, "title": "t", "mutable_content": true,
            "apns": ["headers": ["apns-priority": "10"]],
        ])
        #expect(replaced.fcmMessage()["apns"] == ["payload": ["aps": ["mutable-content": 1]]])
        // A sound beside a given android block leaves that block alone; priority fills it.
        let given = try parse([
            "tokens": ["t"], "platform": 2, "message": "m", "sound": "ding", "priority": "high",
            "android": ["ttl": "60s"],
        ])
        #expect(given.fcmMessage()["android"] == ["ttl": "60s", "priority": "HIGH"])
    }

    @Test func androidMessagesAsFirebaseBuildsThem() throws {
        let android = try parse([
            "tokens": ["t1", "t2"], "platform": 2, "message": "Hello World Android!", "title": "You got message",
            "data": ["Nick": "Mario", "n": 2, "o": ["a": 1]], "priority": "normal",
            "notification": ["image": "https://img"], "fcm_options": ["analytics_label": "example"],
        ])
        #expect(android.tokens == ["t1", "t2"])
        let message = android.fcmMessage()
        #expect(
            message["notification"]
                == ["title": "You got message", "body": "Hello World Android!", "image": "https://img"])
        #expect(message["data"] == ["Nick": "Mario", "n": "2", "o": #"{"a":1}"#], "every data value a string")
        #expect(message["android"]?["priority"] == "NORMAL")
        #expect(message["fcm_options"] == ["analytics_label": "example"])

        let background = try parse(["tokens": ["t"], "platform": 2, "content_available": true, "data": ["k": "v"]])
        #expect(
            background.fcmMessage()["apns"]
                == ["headers": ["apns-priority": "5"], "payload": ["aps": ["content-available": 1, "k": "v"]]])
        let sound = try parse(["tokens": ["t"], "platform": 2, "message": "m", "sound": "ding"])
        #expect(sound.fcmMessage()["apns"]?["payload"]?["aps"]?["sound"] == "ding")
        #expect(sound.fcmMessage()["android"]?["notification"]?["sound"] == "ding")
    }

    @Test func huaweiMessagesAsPushKitTakesThem() throws {
        let huawei = try parse([
            "tokens": ["t"], "platform": 3, "message": "Hello World Huawei!", "title": "You got message",
            "huawei_notification": ["icon": "myicon", "color": "#112244"], "priority": "high",
            "huawei_data": "{'title' : 'Mario'}", "huawei_collapse_key": 3, "huawei_ttl": "86400s",
        ])
        let message = huawei.hmsMessage()
        let notification = message["android"]?["notification"]
        #expect(notification?["title"] == "You got message" && notification?["body"] == "Hello World Huawei!")
        #expect(notification?["icon"] == "myicon" && notification?["default_sound"] == true)
        #expect(notification?["click_action"] == ["type": 3])
        #expect(message["android"]?["urgency"] == "HIGH" && message["android"]?["collapse_key"] == 3)
        #expect(message["android"]?["ttl"] == "86400s" && message["data"] == "{'title' : 'Mario'}")
    }

    @Test func checksFieldByField() throws {
        #expect(throws: PayloadValidationError.self) { try parse(["tokens": ["a"], "platform": 4]) }
        #expect(throws: PayloadValidationError.self) { try parse(["tokens": ["a"]]) }
        #expect(throws: PayloadValidationError.self) { try parse(["tokens": ["a"], "platform": "1"]) }
        #expect(throws: PayloadValidationError.self) { try parse(["tokens": "a", "platform": 1]) }
        #expect(throws: PayloadValidationError.self) { try parse(["tokens": [1], "platform": 1]) }
        #expect(throws: PayloadValidationError.self) { try parse(["platform": 2, "message": "m"]) }
        #expect(throws: PayloadValidationError.self) {
            try parse(["tokens": ["a"], "platform": 1, "badge": .double(1.5)])
        }
        #expect(throws: PayloadValidationError.self) { try parse(["tokens": ["a"], "platform": 1, "alert": "x"]) }
        #expect(throws: PayloadValidationError.self) {
            try parse(["tokens": ["a"], "platform": 1, "mutable_content": 1])
        }
        #expect(throws: PayloadValidationError.self) {
            try parse(["tokens": ["a"], "platform": 2, "priority": "urgent"])
        }
        #expect(throws: PayloadValidationError.self) { try parse(["tokens": ["a"], "platform": 2, "topic": "news"]) }
        #expect(throws: PayloadValidationError.self) {
            try parse(["tokens": .array(Array(repeating: "a", count: 501)), "platform": 2])
        }
        // `to` is one more token; an iOS topic is the apns-topic.
        #expect(try parse(["tokens": ["a"], "to": "b", "platform": 2]).tokens == ["a", "b"])
        #expect(try parse(["tokens": ["a"], "platform": 1, "topic": "com.example"]).topic == "com.example")
        // The sealed form round-trips, without tokens or the HMS app secret.
        let sealed = try parse(["tokens": ["a"], "platform": 3, "message": "m", "app_secret": "s"])
        let reopened = try #require(GorushNotification(sealedForm: sealed.sealedForm))
        #expect(reopened.platform == .huawei && reopened.content["app_secret"] == nil && reopened.message == "m")
    }

    @Test func tokensAreMaskedAsGorushMasksThem() {
        #expect(GorushNotification.maskedToken("") == "")
        #expect(GorushNotification.maskedToken("12345") == "*****")
        #expect(GorushNotification.maskedToken("token_a") == "*******")
        let long = "0123456789abcdefghij0123456789"
        #expect(GorushNotification.maskedToken(long) == "**********abcdefghij**********")
    }
}
