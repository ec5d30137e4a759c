import Foundation
import Testing

@testable import PushModels

/// What Zulip's bouncer makes of a legacy notify request (docs/api/zulip.md §5.4, §5.5).
@Suite struct ZulipLegacyTests {
    // MARK: APNs body

    @Test func messagePayloadBecomesCustomKeysPlusAps() {
        let payload: JSONValue = [
            "alert": ["title": "T", "subtitle": "S", "body": "B"],
            "sound": "default",
            "badge": 0,
            "custom": ["zulip": ["message_ids": [1]]],
        ]
        let expected: JSONValue = [
            "zulip": ["message_ids": [1]],
            "aps": [
                "alert": ["title": "T", "subtitle": "S", "body": "B"], "sound": "default", "badge": 0,
            ],
        ]
        #expect(ZulipLegacy.apnsBody(payload) == expected)
        #expect(
            String(decoding: Wire.canonical(ZulipLegacy.apnsBody(payload)), as: UTF8.self)
                == #"{"aps":{"alert":{"body":"B","subtitle":"S","title":"T"},"badge":0,"sound":"default"},"zulip":{"message_ids":[1]}}"#
        )
    }

    @Test func removalPayloadKeepsOnlyBadgeInAps() {
        let zulip: JSONValue = [
            "event": "remove", "zulip_message_ids": "1,2", "realm_id": 2, "user_id": 10,
        ]
        let payload: JSONValue = ["badge": 0, "custom": ["zulip": zulip]]
        #expect(ZulipLegacy.apnsBody(payload) == ["zulip": zulip, "aps": ["badge": 0]])
    }

    @Test func otherApsKeysPassUnchanged() {
        let payload: JSONValue = [
            "alert": "plain text alert",
            "category": "msg",
            "thread-id": "t1",
            "mutable-content": 1,
            "custom": ["zulip": ["x": 1], "other": [true, .null]],
        ]
        let expected: JSONValue = [
            "zulip": ["x": 1],
            "other": [true, .null],
            "aps": [
                "alert": "plain text alert", "category": "msg", "thread-id": "t1", "mutable-content": 1,
            ],
        ]
        #expect(ZulipLegacy.apnsBody(payload) == expected)
    }

    @Test func customApsKeyDoesNotOverrideTheBuiltAps() {
        let payload: JSONValue = ["badge": 3, "custom": ["aps": ["alert": "spoofed"], "zulip": [:]]]
        #expect(ZulipLegacy.apnsBody(payload) == ["zulip": [:], "aps": ["badge": 3]])
    }

    @Test func customThatIsNotAnObjectIsDropped() {
        #expect(ZulipLegacy.apnsBody(["badge": 0, "custom": "nope"]) == ["aps": ["badge": 0]])
        #expect(ZulipLegacy.apnsBody(["badge": 0, "custom": .null]) == ["aps": ["badge": 0]])
        #expect(ZulipLegacy.apnsBody(["sound": "default"]) == ["aps": ["sound": "default"]])
        #expect(ZulipLegacy.apnsBody([:]) == ["aps": [:]])
        #expect(ZulipLegacy.apnsBody("not an object") == ["aps": [:]])
    }

    @Test func zulip16PayloadIsModernizedFirst() {
        // Zulip 1.6's format; Zulip's bouncer still rewrites it (`modernize_apns_payload`).
        let payload: JSONValue = [
            "alert": "New private message from A", "message_ids": [7], "badge": 1,
        ]
        let expected: JSONValue = [
            "zulip": ["message_ids": [7]],
            "aps": ["alert": "New private message from A", "badge": 0],
        ]
        #expect(ZulipLegacy.apnsBody(payload) == expected)
    }

    // MARK: APNs headers

    @Test func messagesAndRemovalsAreAlertsAtTen() {
        let message: JSONValue = [
            "alert": ["title": "T", "body": "B"], "sound": "default", "badge": 0, "custom": [:],
        ]
        let removal: JSONValue = ["badge": 0, "custom": ["zulip": ["event": "remove"]]]
        #expect(ZulipLegacy.apnsDelivery(message) == ("alert", 10))
        #expect(ZulipLegacy.apnsDelivery(removal) == ("alert", 10))
        #expect(ZulipLegacy.apnsDelivery([:]) == ("alert", 10))
    }

    @Test func contentAvailableAloneIsBackgroundAtFive() {
        #expect(
            ZulipLegacy.apnsDelivery(["content-available": 1, "custom": ["zulip": [:]]]) == (
                "background", 5
            ))
        #expect(ZulipLegacy.apnsDelivery(["content-available": 1, "badge": 2]) == ("alert", 10))
        #expect(
            ZulipLegacy.apnsDelivery(["content-available": 1, "sound": "default"]) == ("alert", 10))
        #expect(ZulipLegacy.apnsDelivery(["content-available": 1, "alert": "hi"]) == ("alert", 10))
        // A custom `content-available` is not part of aps.
        #expect(ZulipLegacy.apnsDelivery(["custom": ["content-available": 1]]) == ("alert", 10))
    }

    // MARK: FCM priority

    @Test func explicitPriorityIsTaken() throws {
        #expect(
            try ZulipLegacy.fcmPriority(gcmOptions: ["priority": "high"], gcmPayload: ["event": "remove"])
                == "high")
        #expect(
            try ZulipLegacy.fcmPriority(
                gcmOptions: ["priority": "normal"], gcmPayload: ["event": "message"])
                == "normal")
    }

    @Test func missingPriorityFollowsTheEvent() throws {
        let message: JSONValue = ["event": "message"]
        let remove: JSONValue = ["event": "remove"]
        #expect(try ZulipLegacy.fcmPriority(gcmOptions: nil, gcmPayload: message) == "high")
        #expect(try ZulipLegacy.fcmPriority(gcmOptions: .null, gcmPayload: message) == "high")
        #expect(try ZulipLegacy.fcmPriority(gcmOptions: [:], gcmPayload: message) == "high")
        #expect(
            try ZulipLegacy.fcmPriority(gcmOptions: ["priority": .null], gcmPayload: message) == "high")
        #expect(try ZulipLegacy.fcmPriority(gcmOptions: [:], gcmPayload: remove) == "normal")
        #expect(try ZulipLegacy.fcmPriority(gcmOptions: nil, gcmPayload: [:]) == "normal")
        #expect(try ZulipLegacy.fcmPriority(gcmOptions: nil, gcmPayload: "not an object") == "normal")
    }

    @Test func badPriorityCarriesZulipsMessage() {
        let payload: JSONValue = ["event": "message"]
        #expect(
            throws: ZulipLegacy.PayloadError(message: "Invalid GCM option to bouncer: priority 'urgent'")
        ) {
            try ZulipLegacy.fcmPriority(gcmOptions: ["priority": "urgent"], gcmPayload: payload)
        }
        #expect(
            throws: ZulipLegacy.PayloadError(message: "Invalid GCM option to bouncer: priority 'HIGH'")
        ) {
            try ZulipLegacy.fcmPriority(gcmOptions: ["priority": "HIGH"], gcmPayload: payload)
        }
        // Zulip formats it with `!r`: Python's repr, not JSON.
        #expect(throws: ZulipLegacy.PayloadError(message: "Invalid GCM option to bouncer: priority 5")) {
            try ZulipLegacy.fcmPriority(gcmOptions: ["priority": 5], gcmPayload: payload)
        }
        #expect(
            throws: ZulipLegacy.PayloadError(message: "Invalid GCM option to bouncer: priority True")
        ) {
            try ZulipLegacy.fcmPriority(gcmOptions: ["priority": true], gcmPayload: payload)
        }
        #expect(
            throws: ZulipLegacy.PayloadError(message: #"Invalid GCM option to bouncer: priority "it's""#)
        ) {
            try ZulipLegacy.fcmPriority(gcmOptions: ["priority": "it's"], gcmPayload: payload)
        }
        #expect(
            throws: ZulipLegacy.PayloadError(message: "Invalid GCM option to bouncer: priority ['high']")
        ) {
            try ZulipLegacy.fcmPriority(gcmOptions: ["priority": ["high"]], gcmPayload: payload)
        }
        // The priority is checked before the other keys.
        #expect(
            throws: ZulipLegacy.PayloadError(message: "Invalid GCM option to bouncer: priority 'urgent'")
        ) {
            try ZulipLegacy.fcmPriority(
                gcmOptions: ["priority": "urgent", "ttl": 60], gcmPayload: payload)
        }
    }

    @Test func unknownOptionsCarryZulipsMessage() {
        let payload: JSONValue = ["event": "message"]
        // Zulip pops `priority` before it prints what is left.
        #expect(
            throws: ZulipLegacy.PayloadError(message: #"Invalid GCM options to bouncer: {"ttl":60}"#)
        ) {
            try ZulipLegacy.fcmPriority(gcmOptions: ["priority": "high", "ttl": 60], gcmPayload: payload)
        }
        #expect(
            throws: ZulipLegacy.PayloadError(
                message: #"Invalid GCM options to bouncer: {"a":[1,"x/y"],"b":null}"#)
        ) {
            try ZulipLegacy.fcmPriority(gcmOptions: ["b": .null, "a": [1, "x/y"]], gcmPayload: payload)
        }
        #expect(throws: ZulipLegacy.PayloadError(message: #"Invalid GCM options to bouncer: "high""#)) {
            try ZulipLegacy.fcmPriority(gcmOptions: "high", gcmPayload: payload)
        }
        #expect(throws: ZulipLegacy.PayloadError(message: #"Invalid GCM options to bouncer: ["high"]"#)) {
            try ZulipLegacy.fcmPriority(gcmOptions: ["high"], gcmPayload: payload)
        }
    }

    // MARK: Removal truncation

    /// 1...count in a scrambled order (97 is coprime to 251).
    private static func scrambledIDs(_ count: Int) -> String {
        (1...count).map { String($0 * 97 % 251) }.joined(separator: ",")
    }

    private static func removal(_ ids: String) -> (apns: JSONValue, gcm: JSONValue) {
        let apns: JSONValue = [
            "badge": 0,
            "custom": ["zulip": ["event": "remove", "zulip_message_ids": .string(ids), "user_id": 10]],
        ]
        let gcm: JSONValue = ["event": "remove", "zulip_message_ids": .string(ids), "realm_id": 2]
        return (apns, gcm)
    }

    @Test func removalOf250KeepsThe200LargestAscending() {
        let (apns, gcm) = Self.removal(Self.scrambledIDs(250))
        let kept = (51...250).map(String.init).joined(separator: ",")
        let result = ZulipLegacy.truncatingRemoval(apns: apns, gcm: gcm)
        #expect(result.gcm == ["event": "remove", "zulip_message_ids": .string(kept), "realm_id": 2])
        #expect(
            result.apns == [
                "badge": 0,
                "custom": [
                    "zulip": ["event": "remove", "zulip_message_ids": .string(kept), "user_id": 10]
                ],
            ])
    }

    @Test func shortRemovalIsSortedAndNormalized() {
        let (apns, gcm) = Self.removal("30,007,2,2")
        let result = ZulipLegacy.truncatingRemoval(apns: apns, gcm: gcm)
        #expect(result.gcm["zulip_message_ids"] == "2,2,7,30")
        #expect(result.apns["custom"]?["zulip"]?["zulip_message_ids"] == "2,2,7,30")
    }

    @Test func idsUpToUInt64MaxAreCompared() {
        let (apns, gcm) = Self.removal("18446744073709551615,1,9223372036854775808")
        let result = ZulipLegacy.truncatingRemoval(apns: apns, gcm: gcm)
        #expect(result.gcm["zulip_message_ids"] == "1,9223372036854775808,18446744073709551615")
    }

    @Test func unparsableIDsLeaveThatPayloadUnchanged() {
        for bad in ["1,x,3", "1,,3", "1,-3", "18446744073709551616,1", "1, 2", ","] {
            let (apns, gcm) = Self.removal(bad)
            let result = ZulipLegacy.truncatingRemoval(apns: apns, gcm: gcm)
            #expect(result.gcm == gcm, "\(bad)")
            #expect(result.apns == apns, "\(bad)")
        }
        // Each payload is judged on its own.
        let good = Self.scrambledIDs(250)
        let apns = Self.removal(good).apns
        let gcm = Self.removal("1,x").gcm
        let result = ZulipLegacy.truncatingRemoval(apns: apns, gcm: gcm)
        #expect(result.gcm == gcm)
        #expect(
            result.apns["custom"]?["zulip"]?["zulip_message_ids"]
                == .string((51...250).map(String.init).joined(separator: ",")))
    }

    @Test func onlyRemovalsWithIDsAreTouched() {
        let ids = JSONValue.string(Self.scrambledIDs(250))
        let message: JSONValue = ["event": "message", "zulip_message_ids": ids]
        let apnsMessage: JSONValue = [
            "custom": ["zulip": ["event": "message", "zulip_message_ids": ids]]
        ]
        var result = ZulipLegacy.truncatingRemoval(apns: apnsMessage, gcm: message)
        #expect(result.gcm == message)
        #expect(result.apns == apnsMessage)

        let numeric: JSONValue = ["event": "remove", "zulip_message_ids": 5]
        let empty: JSONValue = ["event": "remove", "zulip_message_ids": ""]
        for payload in [numeric, empty, [:], "not an object", JSONValue.null] {
            result = ZulipLegacy.truncatingRemoval(apns: payload, gcm: payload)
            #expect(result.gcm == payload)
            #expect(result.apns == payload)
        }
        // A user without local Android devices sends an empty gcm_payload; the APNs side is still cut.
        let apns = Self.removal(Self.scrambledIDs(250)).apns
        result = ZulipLegacy.truncatingRemoval(apns: apns, gcm: [:])
        #expect(result.gcm == [:])
        #expect(
            result.apns["custom"]?["zulip"]?["zulip_message_ids"]?.stringValue?.hasPrefix("51,52,")
                == true)
        #expect(result.apns["badge"] == 0)
    }

    @Test func fourThousandIDsAreCutQuickly() {
        let ids = (1...4000).reversed().map { String(UInt64(1) << 40 + UInt64($0)) }.joined(
            separator: ",")
        let (apns, gcm) = Self.removal(ids)
        let clock = ContinuousClock()
        var result: (apns: JSONValue, gcm: JSONValue) = (.null, .null)
        let elapsed = clock.measure { result = ZulipLegacy.truncatingRemoval(apns: apns, gcm: gcm) }
        let kept = (3801...4000).map { String(UInt64(1) << 40 + UInt64($0)) }.joined(separator: ",")
        #expect(result.gcm["zulip_message_ids"] == .string(kept))
        #expect(result.apns["custom"]?["zulip"]?["zulip_message_ids"] == .string(kept))
        #expect(elapsed < .milliseconds(500))
    }

    // MARK: FCM data, Python spellings

    @Test func floatsAreWrittenAsPythonRepr() {
        let cases: [(Double, String)] = [
            (1.0, "1.0"), (1.5, "1.5"), (1e16, "1e+16"), (1e-05, "1e-05"),
            (1_700_000_000.0, "1700000000.0"),
            (1e15, "1000000000000000.0"), (9_007_199_254_740_992.0, "9007199254740992.0"),
            (0.0001, "0.0001"),
            (0.001234, "0.001234"), (-0.0, "-0.0"), (0.0, "0.0"), (0.1, "0.1"), (123.456, "123.456"),
            (1.2345678901234568e+17, "1.2345678901234568e+17"), (-2.5e-7, "-2.5e-07"),
            (1.7976931348623157e308, "1.7976931348623157e+308"), (.leastNonzeroMagnitude, "5e-324"),
            (.infinity, "inf"), (-.infinity, "-inf"),
        ]
        for (value, text) in cases {
            #expect(ZulipLegacy.pythonStr(.double(value)) == text, "\(value)")
        }
    }

    @Test func scalarsAreWrittenAsPythonStr() {
        #expect(ZulipLegacy.pythonStr("as is, 'quotes' and all\n") == "as is, 'quotes' and all\n")
        #expect(ZulipLegacy.pythonStr(42) == "42")
        #expect(ZulipLegacy.pythonStr(.int(.min)) == "-9223372036854775808")
        #expect(ZulipLegacy.pythonStr(true) == "True")
        #expect(ZulipLegacy.pythonStr(false) == "False")
        #expect(ZulipLegacy.pythonStr(.null) == "None")
    }

    @Test func containersAreWrittenAsPythonRepr() {
        #expect(ZulipLegacy.pythonStr([1, "a", .null]) == "[1, 'a', None]")
        #expect(ZulipLegacy.pythonStr(["k": 1, "b": true]) == "{'b': True, 'k': 1}")
        #expect(ZulipLegacy.pythonStr([]) == "[]")
        #expect(ZulipLegacy.pythonStr([:]) == "{}")
        #expect(
            ZulipLegacy.pythonStr(["ids": [1, 2], "nested": ["x": [.double(1.0), false]], "it's": "ok"])
                == #"{'ids': [1, 2], "it's": 'ok', 'nested': {'x': [1.0, False]}}"#)
    }

    @Test func stringsInsideContainersFollowPythonQuoting() {
        let cases: [(String, String)] = [
            ("it's", #""it's""#),
            (#"say "hi""#, #"'say "hi"'"#),
            (#"both ' and ""#, #"'both \' and "'"#),
            (#"back\slash"#, #"'back\\slash'"#),
            ("a\nb\rc\td", #"'a\nb\rc\td'"#),
            ("\u{1}\u{7F}\u{1B}", #"'\x01\x7f\x1b'"#),
            ("é\u{A0}\u{200B}\u{E0001}\u{2028} ", #"'é\xa0\u200b\U000e0001\u2028 '"#),
            ("😀 ok", "'😀 ok'"),
        ]
        for (text, repr) in cases {
            #expect(ZulipLegacy.pythonRepr(.string(text)) == repr, "\(text)")
            #expect(ZulipLegacy.pythonStr([.string(text)]) == "[\(repr)]")
        }
    }

    @Test func fcmDataStringifiesEveryValue() {
        let gcm: JSONValue = [
            "event": "message",
            "zulip_message_id": 45,
            "time": 1_754_385_395,
            "content": "hi",
            "content_truncated": false,
            "recipient_type": "stream",
            "stream": "Denmark",
            "stream_id": 10,
            "topic": "test",
            "realm_url": "https://zulip.example.org",
            "pm_users": "6,10",
            "mentioned_user_group_id": .null,
            "ratio": .double(0.5),
            "list": [1, "a"],
        ]
        let expected: JSONValue = [
            "event": "message",
            "zulip_message_id": "45",
            "time": "1754385395",
            "content": "hi",
            "content_truncated": "False",
            "recipient_type": "stream",
            "stream": "Denmark",
            "stream_id": "10",
            "topic": "test",
            "realm_url": "https://zulip.example.org",
            "pm_users": "6,10",
            "mentioned_user_group_id": "None",
            "ratio": "0.5",
            "list": "[1, 'a']",
        ]
        #expect(ZulipLegacy.fcmData(gcm) == expected)
        #expect(ZulipLegacy.fcmData([:]) == [:])
        #expect(ZulipLegacy.fcmData("not an object") == [:])
    }

    // MARK: Test notification

    private static let base: JSONValue = [
        "server": "zulip.example.org",
        "realm_id": 2,
        "realm_uri": "https://old.example.org",
        "realm_url": "https://zulip.example.org",
        "realm_name": "Example",
        "user_id": 10,
    ]

    @Test func testNotificationPayloads() throws {
        let (apns, gcm) = ZulipLegacy.testNotification(
            basePayload: Self.base, nowSeconds: 1_754_577_820)
        let payload: JSONValue = [
            "server": "zulip.example.org",
            "realm_id": 2,
            "realm_uri": "https://old.example.org",
            "realm_url": "https://zulip.example.org",
            "realm_name": "Example",
            "user_id": 10,
            "event": "test",
        ]
        let alert: JSONValue = [
            "title": "Test notification",
            "body": "This is a test notification from Example (https://zulip.example.org).",
        ]
        #expect(apns == ["alert": alert, "sound": "default", "custom": ["zulip": payload]])
        #expect(
            ZulipLegacy.apnsBody(apns) == [
                "zulip": payload, "aps": ["alert": alert, "sound": "default"],
            ])
        #expect(ZulipLegacy.apnsDelivery(apns) == ("alert", 10))

        var gcmPayload = try #require(payload.objectValue)
        gcmPayload["time"] = 1_754_577_820
        #expect(gcm == .object(gcmPayload))
        #expect(ZulipLegacy.fcmData(gcm)["time"] == "1754577820")
        #expect(ZulipLegacy.fcmData(gcm)["realm_id"] == "2")
        #expect(
            try ZulipLegacy.fcmPriority(gcmOptions: ["priority": "high"], gcmPayload: gcm) == "high")
    }

    @Test func testNotificationFallsBackToRealmURI() throws {
        var base = try #require(Self.base.objectValue)
        base["realm_url"] = nil
        var (apns, gcm) = ZulipLegacy.testNotification(basePayload: .object(base), nowSeconds: 1)
        #expect(
            apns["alert"]?["body"]
                == "This is a test notification from Example (https://old.example.org).")
        #expect(gcm["realm_url"] == nil)
        #expect(gcm["event"] == "test")

        base["realm_url"] = .null
        (apns, gcm) = ZulipLegacy.testNotification(basePayload: .object(base), nowSeconds: 1)
        #expect(
            apns["alert"]?["body"]
                == "This is a test notification from Example (https://old.example.org).")
        #expect(gcm["realm_url"] == .null)
    }

    @Test func testNotificationOverridesEventAndTime() {
        let (apns, gcm) = ZulipLegacy.testNotification(
            basePayload: ["event": "message", "time": 5, "realm_name": "R", "realm_url": "u"],
            nowSeconds: 9)
        #expect(
            apns["custom"]?["zulip"] == ["event": "test", "time": 5, "realm_name": "R", "realm_url": "u"])
        #expect(gcm == ["event": "test", "time": 9, "realm_name": "R", "realm_url": "u"])
        #expect(apns["alert"]?["body"] == "This is a test notification from R (u).")
    }
}
