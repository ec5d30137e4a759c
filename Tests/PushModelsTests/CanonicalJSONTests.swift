import Foundation
import Testing

@testable import PushModels

/// The fast canonical writer must produce exactly what JSONEncoder (sorted keys,
/// unescaped slashes) produces: devices decrypt these bytes and realms compare them.
@Suite struct CanonicalJSONTests {
    static let samples: [JSONValue] = [
        .null, true, false, 0, -42, .int(Int64.max), .int(Int64.min), .double(1.5), .double(-0.25), .double(1e21), "",
        "plain", "quote \" backslash \\ slash / tab \t newline \n cr \r bell \u{07} nul \u{00} del \u{7F}",
        "unicode é ß 日本 🎉 \u{2028}",
        [1, "two", [3], ["four": 4]],
        ["b": 1, "a": ["z": true, "y": .null], "A": "upper", "é": "accent", "10": 10, "9": 9],
        [
            "aps": ["alert": ["title": "New notification"], "mutable-content": 1], "push_key_id": 4,
            "encrypted_data": "uOGQ9m8bdnLab/2Qq6WLdJnFUsU/NlX0955rF6GgpiZylQB+HSD=",
        ],
    ]

    @Test(arguments: samples)
    func writerMatchesTheEncoder(_ value: JSONValue) throws {
        let expected = Array(try Wire.encoder().encode(value))
        #expect(Wire.canonical(value) == expected, "\(String(decoding: expected, as: UTF8.self))")
    }

    @Test(arguments: samples)
    func valuesSurviveARoundTrip(_ value: JSONValue) throws {
        #expect(try Wire.decode(JSONValue.self, from: Wire.canonical(value)) == value)
    }
}

/// The strict parser behind `Wire.decode`: the same values as JSONDecoder, and refusals.
@Suite struct JSONReaderTests {
    @Test(arguments: [
        #"{"a":1,"b":[true,false,null],"c":"x\"y\\z\/\u00e9\ud83c\udf89\n","d":-0.5,"e":1e3,"f":{}}"#,
        " [ ] ", "0", "-12", "123456789012345678", "\"\"", #"{"nested":{"deep":[[[{"k":"v"}]]]}}"#,
    ])
    func parsesLikeJSONDecoder(_ text: String) throws {
        let expected = try JSONDecoder().decode(JSONValue.self, from: Data(text.utf8))
        #expect(try Wire.decode(JSONValue.self, from: Array(text.utf8)) == expected)
    }

    @Test(arguments: [
        "", "{", "[1,]", #"{"a":1,}"#, "{'a':1}", "01", "1.", "-", "tru", "nul", "[1] 2", #""\x""#, #""\ud800""#,
        "\"a\u{01}b\"", "NaN", "1e999", #"{"a" 1}"#, "/* c */ 1", String(repeating: "[", count: 600),
    ])
    func refusesInvalidJSON(_ text: String) {
        #expect(throws: (any Error).self) { try Wire.decode(JSONValue.self, from: Array(text.utf8)) }
    }

    /// Strings are strict UTF-8 on both paths (without and with escapes), ASCII or not:
    /// a lone continuation byte, an overlong form, a surrogate or a truncated sequence is refused.
    @Test func stringsAreStrictUTF8() throws {
        for text in ["caf\u{e9} \u{1F389}", "plain"] {
            for escaped in [false, true] {
                let json = Array("[\"\(escaped ? "\\n" : "")\(text)\"]".utf8)
                let value = try Wire.decode(JSONValue.self, from: json)
                #expect(value == [.string((escaped ? "\n" : "") + text)])
            }
        }
        let invalid: [[UInt8]] = [[0x80], [0xC0, 0xAF], [0xED, 0xA0, 0x80], [0xE2, 0x82], [0x61, 0xFF, 0x62]]
        for bytes in invalid {
            for prefix in [[], Array("\\t".utf8)] {
                let json = Array("\"".utf8) + prefix + bytes + Array("xxxxxxxxx\"".utf8)
                #expect(throws: (any Error).self, "\(bytes)") { try Wire.decode(JSONValue.self, from: json) }
            }
        }
    }

    @Test func recordsDecodeWithTheSameRulesAsJSONDecoder() throws {
        struct R: Codable, Equatable {
            var a: Int64
            var b: Int?
            var c: [String]
            var d: Double
            var e: UInt32?
            var v: JSONValue
        }
        let text = #"{"a":5,"c":["x"],"d":2,"e":7,"v":{"k":[1,"2"]}}"#
        #expect(
            try Wire.decode(R.self, from: Array(text.utf8)) == (try JSONDecoder().decode(R.self, from: Data(text.utf8)))
        )
        #expect(throws: DecodingError.self) {
            try Wire.decode(R.self, from: Array(#"{"a":1.5,"c":[],"d":1,"v":1}"#.utf8))
        }
        #expect(throws: DecodingError.self) { try Wire.decode(R.self, from: Array(#"{"c":[],"d":1,"v":1}"#.utf8)) }
        #expect(throws: DecodingError.self) {
            try Wire.decode(R.self, from: Array(#"{"a":1,"c":[],"d":1,"e":-1,"v":1}"#.utf8))
        }
    }
}

/// Records are written and read field by field (`WireObject`): their wire form is pinned
/// here byte for byte (the form every earlier release wrote), and is canonical (sorted
/// keys, compact), so tools that rewrite a value canonically leave it unchanged.
@Suite struct RecordEncodingTests {
    static func outbound() -> OutboundRecord {
        var outbound = OutboundRecord(
            notificationID: "n", deviceID: 12, realmUUID: "r", provider: .apns, token: "aa", appID: "org.zulip.Zulip",
            delivery: DeliveryClass(.message),
            body: ["aps": ["alert": ["title": "t/x"]], "n": .double(1.25), "list": [1, .null]],
            expiresAt: 99, collapseID: nil, acceptedAtMs: 5, registeredAtMs: nil)
        outbound.attempts = 2
        return outbound
    }

    static let outboundJSON =
        #"{"accepted_at_ms":5,"app_id":"org.zulip.Zulip","attempts":2,"body_json":"{\"aps\":{\"alert\":{\"title\":\"t/x\"}},\"list\":[1,null],\"n\":1.25}","delivery":{"apns_priority":10,"apns_push_type":"alert","fcm_priority":"high"},"device_id":12,"expires_at":99,"notification_id":"n","provider":"apns","realm_uuid":"r","schema":5,"token":"aa"}"#

    /// The record's bytes are `json`; they read back as the record, and are canonical.
    func expectWireForm<R: WireObject & Equatable>(
        _ record: R, _ json: String, sourceLocation: SourceLocation = #_sourceLocation
    ) throws {
        let bytes = try Wire.encode(record)
        #expect(String(decoding: bytes, as: UTF8.self) == json, sourceLocation: sourceLocation)
        #expect(try Wire.decode(R.self, from: bytes) == record, sourceLocation: sourceLocation)
        #expect(Wire.canonical(try Wire.decode(JSONValue.self, from: bytes)) == bytes, sourceLocation: sourceLocation)
        // Through Codable (JSONEncoder, JSONDecoder) the same bytes and the same record.
        #expect(Array(try Wire.encoder().encode(record)) == bytes, sourceLocation: sourceLocation)
        #expect(try JSONDecoder().decode(R.self, from: Data(bytes)) == record, sourceLocation: sourceLocation)
    }

    @Test func everyRecordKeepsItsWireForm() throws {
        let outbound = Self.outbound()
        try expectWireForm(outbound, Self.outboundJSON)

        // `body_form` sorts before `body_json` (the writer before Records.wire had them the
        // other way round, an order no canonical rewrite keeps).
        var message = outbound
        message.bodyForm = .message
        try expectWireForm(
            message,
            Self.outboundJSON.replacingOccurrences(of: #""body_json":"#, with: #""body_form":"message","body_json":"#))

        var sealed = outbound
        sealed.sealedToken = SealedBlob(keyID: "p1", alg: .xchacha20poly1305, box: "QUJD")
        sealed.sealedBody = SealedBlob(keyID: "p1", box: "REVG")
        sealed.body = []
        sealed.token = ""
        sealed.collapseID = "c"
        sealed.registeredAtMs = 4
        sealed.lastError = "Unavailable"
        sealed.notBeforeMs = 6
        sealed.attempts = nil
        try expectWireForm(
            sealed,
            #"{"accepted_at_ms":5,"app_id":"org.zulip.Zulip","collapse_id":"c","delivery":{"apns_priority":10,"apns_push_type":"alert","fcm_priority":"high"},"device_id":12,"expires_at":99,"last_error":"Unavailable","not_before_ms":6,"notification_id":"n","provider":"apns","realm_uuid":"r","registered_at_ms":4,"schema":5,"sealed_body":{"box":"REVG","key_id":"p1"},"sealed_token":{"alg":"xchacha20poly1305","box":"QUJD","key_id":"p1"}}"#
        )

        try expectWireForm(
            PushRequestRecord(
                notificationID: "n", serverUUID: "s", realmUUID: "r", acceptedAtMs: 1,
                request: .passThrough(items: [
                    PassThroughItem(deviceID: 1, apnsPriority: 10, payload: ["x": "é\n"]),
                    PassThroughItem(
                        deviceID: 2, apnsPushType: .known(.background), fcmPriority: .known(.normal), payload: .null),
                ])),
            #"{"accepted_at_ms":1,"items":[{"apns_priority":10,"device_id":1,"payload":{"x":"é\n"}},{"apns_push_type":"background","device_id":2,"fcm_priority":"normal","payload":null}],"kind":"pass_through","notification_id":"n","realm_uuid":"r","schema":1,"server_uuid":"s"}"#
        )
        try expectWireForm(
            PushRequestRecord(
                notificationID: "n", serverUUID: "s", realmUUID: "r", acceptedAtMs: -1,
                request: .native(
                    userID: 7, deviceIDs: [3, 4], type: .remove, sealedPayload: SealedBlob(keyID: "k", box: "Qg=="))),
            #"{"accepted_at_ms":-1,"device_ids":[3,4],"kind":"native","notification_id":"n","notification_type":"remove","realm_uuid":"r","schema":1,"sealed_payload":{"box":"Qg==","key_id":"k"},"server_uuid":"s","user_id":7}"#
        )
        try expectWireForm(
            PushRequestRecord(
                notificationID: "n", serverUUID: "s", realmUUID: "r", acceptedAtMs: 1,
                request: .native(
                    userID: Int64.min, deviceIDs: nil, type: .message, sealedPayload: SealedBlob(keyID: "k", box: "B"))),
            #"{"accepted_at_ms":1,"kind":"native","notification_id":"n","notification_type":"message","realm_uuid":"r","schema":1,"sealed_payload":{"box":"B","key_id":"k"},"server_uuid":"s","user_id":-9223372036854775808}"#
        )
        try expectWireForm(
            PushRequestRecord(
                notificationID: "n", serverUUID: "s", realmUUID: "r", acceptedAtMs: 1,
                request: .legacy(user: "uuid:u\"1", deviceIDs: [], sealedPayload: SealedBlob(keyID: "k", box: "B"))),
            #"{"accepted_at_ms":1,"device_ids":[],"kind":"legacy","legacy_user":"uuid:u\"1","notification_id":"n","realm_uuid":"r","schema":1,"sealed_payload":{"box":"B","key_id":"k"},"server_uuid":"s"}"#
        )
        try expectWireForm(
            DeadLetterRecord(
                cause: .expired, lastError: nil, httpStatus: 410, attempts: 1, deadAtMs: 3, record: outbound),
            #"{"attempts":1,"cause":"expired","dead_at_ms":3,"http_status":410,"record":"# + Self.outboundJSON
                + #","schema":1}"#)
        try expectWireForm(
            DeliveryRecord(
                notificationID: "n", realmUUID: "r", deviceID: nil, provider: .fcm, outcome: .alreadySent,
                reason: .provider("x"),
                attempts: 0, acceptedAtMs: 1, completedAtMs: 2),
            #"{"accepted_at_ms":1,"attempts":0,"completed_at_ms":2,"notification_id":"n","outcome":"already_sent","provider":"fcm","realm_uuid":"r","reason":"x","schema":1}"#
        )
        try expectWireForm(
            DeliveryRecord(
                notificationID: "n", realmUUID: "r", deviceID: 9, provider: nil, outcome: .sent, reason: nil,
                httpStatus: 200, attempts: 1, acceptedAtMs: 1, completedAtMs: 2, providerMessageID: "m"),
            #"{"accepted_at_ms":1,"attempts":1,"completed_at_ms":2,"device_id":9,"http_status":200,"notification_id":"n","outcome":"sent","provider_message_id":"m","realm_uuid":"r","schema":1}"#
        )
        try expectWireForm(
            FeedbackRecord(
                deviceID: 9, realmUUID: "r", provider: .apns, tokenFingerprint: "ab12",
                reason: .provider("Unregistered"),
                providerTimestampMs: 77, notificationID: "n", observedAtMs: 78),
            #"{"device_id":9,"notification_id":"n","observed_at_ms":78,"provider":"apns","provider_timestamp_ms":77,"realm_uuid":"r","reason":"Unregistered","schema":1,"token_fingerprint":"ab12"}"#
        )
    }

    @Test func recordsReadOlderFormsAndRefuseBadFields() throws {
        // Schema ≤ 4: the body as an object, written out canonically once.
        let old =
            #"{"accepted_at_ms":5,"body":{"z":1,"a":"b"},"delivery":{"apns_priority":5,"apns_push_type":"background","fcm_priority":"normal"},"device_id":12,"notification_id":"n","provider":"fcm","realm_uuid":"r","schema":2,"token":"t","app_id":null}"#
        let record = try Wire.decode(OutboundRecord.self, from: Array(old.utf8))
        #expect(record.body == Array(#"{"a":"b","z":1}"#.utf8))
        #expect(record.appID == nil)
        #expect(record.delivery == DeliveryClass(.remove))

        let good = Array(Self.outboundJSON.utf8)
        _ = try Wire.decode(OutboundRecord.self, from: good)
        for (from, to) in [
            (#""device_id":12"#, #""device_id":"12""#),  // wrong type
            (#""device_id":12"#, #""device_id":1.5"#),  // not an integer
            (#""provider":"apns""#, #""provider":"mqtt""#),  // unknown name
            (#","token":"aa""#, ""),  // neither token nor sealed token
            (#""schema":5,"#, ""),  // required field absent
            (#""accepted_at_ms":5"#, #""accepted_at_ms":null"#),  // required field null
        ] {
            let bad = Self.outboundJSON.replacingOccurrences(of: from, with: to)
            #expect(bad != Self.outboundJSON)
            #expect(throws: DecodingError.self, "\(to)") { try Wire.decode(OutboundRecord.self, from: Array(bad.utf8)) }
        }
        #expect(throws: DecodingError.self) {
            try Wire.decode(PushRequestRecord.self, from: Array(#"{"kind":"native"}"#.utf8))
        }
        #expect(throws: DecodingError.self) { try Wire.decode(DeliveryRecord.self, from: Array("[]".utf8)) }
    }
}

/// The word-at-a-time scan for the bytes a JSON string must escape agrees with a byte
/// loop, at every start and length, whatever bytes surround the one it should find.
@Suite struct JSONTextScanTests {
    @Test func findsTheFirstSpecialByteLikeAByteLoop() {
        var state: UInt64 = 0x9E37_79B9_7F4A_7C15
        func next() -> UInt64 {
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            return state >> 33
        }
        let alphabet: [UInt8] = [0x00, 0x1F, 0x20, 0x21, 0x22, 0x23, 0x5B, 0x5C, 0x5D, 0x7F, 0x80, 0xA2, 0xDC, 0xFF]
        for _ in 0..<4000 {
            let count = Int(next() % 40)
            var bytes = (0..<count).map { _ in UInt8(ascii: "a") + UInt8(next() % 26) }
            // Zero to three bytes from the edge cases, anywhere.
            for _ in 0..<Int(next() % 4) where count > 0 {
                bytes[Int(next() % UInt64(count))] = alphabet[Int(next() % UInt64(alphabet.count))]
            }
            let start = count == 0 ? 0 : Int(next() % UInt64(count + 1))
            let expected =
                bytes[start...].firstIndex { $0 < 0x20 || $0 == 0x22 || $0 == 0x5C } ?? count
            let found = bytes.withUnsafeBufferPointer { JSONText.firstSpecial($0, from: start) }
            #expect(found == expected, "\(bytes) from \(start)")
        }
    }
}
