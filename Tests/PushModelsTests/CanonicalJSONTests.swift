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

/// `Wire.encode` (through JSONValue) writes exactly what JSONEncoder writes for records.
@Suite struct RecordEncodingTests {
    @Test func recordsEncodeByteForByteLikeJSONEncoder() throws {
        var outbound = OutboundRecord(
            notificationID: "n", deviceID: 12, realmUUID: "r", provider: .apns, token: "aa", appID: "org.zulip.Zulip",
            delivery: DeliveryClass(.message),
            body: ["aps": ["alert": ["title": "t/x"]], "n": .double(1.25), "list": [1, .null]],
            expiresAt: 99, collapseID: nil, acceptedAtMs: 5, registeredAtMs: nil)
        outbound.attempts = 2
        let request = PushRequestRecord(
            notificationID: "n", serverUUID: "s", realmUUID: "r", acceptedAtMs: 1,
            request: .passThrough(items: [PassThroughItem(deviceID: 1, apnsPriority: 10, payload: ["x": "é\n"])]))
        let dead = DeadLetterRecord(
            cause: .expired, lastError: nil, httpStatus: 410, attempts: 1, deadAtMs: 3, record: outbound)
        let delivery = DeliveryRecord(
            notificationID: "n", realmUUID: "r", deviceID: nil, provider: .fcm, outcome: .alreadySent, reason: "x",
            attempts: 0, acceptedAtMs: 1, completedAtMs: 2)
        let encoder = Wire.encoder()
        #expect(try Wire.encode(outbound) == Array(encoder.encode(outbound)))
        #expect(try Wire.encode(request) == Array(encoder.encode(request)))
        #expect(try Wire.encode(dead) == Array(encoder.encode(dead)))
        #expect(try Wire.encode(delivery) == Array(encoder.encode(delivery)))
        #expect(try Wire.decode(DeadLetterRecord.self, from: Wire.encode(dead)) == dead)
    }
}
