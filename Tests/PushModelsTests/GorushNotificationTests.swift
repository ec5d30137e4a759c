import Testing

@testable import PushModels

/// gorush's field mapping (docs/gorush.md): what apns2, firebase-admin-go and Huawei's
/// SDK would build from gorush's documented requests, and gorush's own checks.
@Suite struct GorushNotificationTests {
    func parse(_ json: JSONValue) throws -> GorushNotification {
        try GorushNotification(validating: json, path: "notifications[0]")
    }

    @Test func iosPayloadsAsApns2BuildsThem() throws {
        let plain = try parse(["tokens": ["aa"], "platform": 1, "message": "Hello World iOS!"])
        #expect(plain.apnsPayload() == ["aps": ["alert": "Hello World iOS!"]])
        #expect(plain.delivery.apnsPushType.name == "alert" && plain.delivery.apnsPriority == .immediate)

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

        // content_available alone: a background push at priority 5; priority and push_type as given.
        let background = try parse(["tokens": ["aa"], "platform": 1, "content_available": true])
        #expect(background.apnsPayload() == ["aps": ["content-available": 1]])
        #expect(background.delivery.apnsPushType.name == "background")
        #expect(background.delivery.apnsPriority == .considerate)
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
