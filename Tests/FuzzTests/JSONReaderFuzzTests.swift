import DevStack
import Foundation
import PushModels
import Testing

/// The hand-written strict JSON reader behind `Wire.decode`, on its own: seeded random
/// documents and mutations of them must never crash it or take long, and it must agree
/// with Foundation's `JSONSerialization`.
///
/// The agreement rule, checked on every input:
/// - both accept: the trees are the same (objects, arrays, strings byte for byte,
///   bools, null, numbers by value; see `JSONAgreement`);
/// - Foundation refuses: the reader refuses;
/// - the reader refuses what Foundation accepts only in these deliberate, documented
///   cases, each outside RFC 8259, which the relay never has to read:
///   1. a trailing comma (`[1,]`, `{"a":1,}`): RFC 8259 §5/§4 grammar has none;
///   2. a byte-order mark before the value: §8.1 says implementations "MUST NOT add
///      a byte order mark" and *may* ignore one, the reader does not;
///   3. UTF-16 or UTF-32 text (Foundation guesses the encoding from NUL bytes or a BOM):
///      §8.1 requires UTF-8 between systems;
///   4. a number beyond Double (`1e999999`) inside a value that a later duplicate key
///      replaces: Foundation converts numbers only when it keeps them, so it never sees
///      that one; the reader refuses an unrepresentable number wherever it is.
/// Two lossless differences in representation, not in acceptance: a whole number
/// written as a float (`1.0`, `1e3`) reads as an integer (as `JSONDecoder` reads it),
/// and `-0.0` reads as integer 0 (equal as numbers; the sign of zero is not kept).
/// One Foundation defect is allowed for: it drops U+FEFF at the start of a string or
/// right after an escape sequence (it decodes each run of raw bytes on its own, as if
/// the U+FEFF were a byte-order mark); the reader keeps it, as RFC 8259 says, so strings
/// are compared with U+FEFF removed when they differ only there.
/// Duplicate keys: both keep the last value (RFC 8259 leaves this open); canonically
/// equivalent keys (NFC and NFD spellings) are one key in both, as Swift `String`s.
@Suite struct JSONReaderFuzzTests {
    static let seed = FuzzRandom.seed(environment: "PUSHRELAY_FUZZ_SEED")

    @Test func randomValidDocumentsAgreeWithFoundation() {
        var random = FuzzRandom(seed: Self.seed)
        var agreed = 0
        for n in 0..<3000 {
            let document = JSONDocumentGenerator.document(&random)
            let outcome = JSONAgreement.compare(document)
            #expect(
                outcome.problem == nil,
                "seed \(Self.seed) case \(n): \(outcome.problem ?? "") in \(JSONAgreement.show(document))")
            if outcome.problem != nil { return }
            if outcome.bothAccepted { agreed += 1 }
        }
        // Most generated documents are valid; a generator that only produced refusals would prove nothing.
        #expect(agreed > 2000, "seed \(Self.seed): only \(agreed) of 3000 documents were accepted by both")
    }

    @Test func mutatedDocumentsNeverCrashAndRefuseWhatFoundationRefuses() {
        var random = FuzzRandom(seed: Self.seed ^ 0x5A5A)
        var corpus = JSONDocumentGenerator.fixedCorpus
        for _ in 0..<200 { corpus.append(JSONDocumentGenerator.document(&random)) }
        var slowest: (Duration, Int) = (.zero, 0)
        var refusedByBoth = 0
        for n in 0..<4000 {
            let input = JSONMutator.mutate(random.pick(corpus), corpus: corpus, &random)
            let start = ContinuousClock.now
            let outcome = JSONAgreement.compare(input)
            let took = ContinuousClock.now - start
            if took > slowest.0 { slowest = (took, input.count) }
            #expect(
                outcome.problem == nil,
                "seed \(Self.seed) case \(n): \(outcome.problem ?? "") in \(JSONAgreement.show(input))")
            if outcome.problem != nil { return }
            if outcome.bothRefused { refusedByBoth += 1 }
        }
        #expect(
            refusedByBoth > 500, "seed \(Self.seed): mutations should break many documents; \(refusedByBoth) refused")
        #expect(slowest.0 < .seconds(1), "seed \(Self.seed): slowest input took \(slowest.0) (\(slowest.1) bytes)")
    }

    /// Inputs chosen to hurt a hand-written parser: each is answered (value or error),
    /// quickly, and the same way Foundation answers it.
    @Test(arguments: JSONDocumentGenerator.hostile)
    func hostileInput(_ input: HostileJSON) {
        let start = ContinuousClock.now
        let outcome = JSONAgreement.compare(input.bytes)
        #expect(outcome.problem == nil, "\(input.name): \(outcome.problem ?? "")")
        #expect(ContinuousClock.now - start < .seconds(2), "\(input.name) took \(ContinuousClock.now - start)")
        if let accepted = input.accepted {
            #expect(outcome.readerAccepted == accepted, "\(input.name): reader accepted \(outcome.readerAccepted)")
        }
    }

    @Test func nestingIsBoundedAt512() throws {
        func nested(_ depth: Int, open: String, close: String) -> [UInt8] {
            Array((String(repeating: open, count: depth) + "1" + String(repeating: close, count: depth)).utf8)
        }
        #expect(throws: Never.self) { try Wire.decode(JSONValue.self, from: nested(512, open: "[", close: "]")) }
        #expect(throws: (any Error).self) { try Wire.decode(JSONValue.self, from: nested(513, open: "[", close: "]")) }
        #expect(throws: Never.self) { try Wire.decode(JSONValue.self, from: nested(512, open: #"{"a":"#, close: "}")) }
        #expect(throws: (any Error).self) {
            try Wire.decode(JSONValue.self, from: nested(513, open: #"{"a":"#, close: "}"))
        }
        // Far past the bound, unterminated: refused without recursing 100k frames deep.
        for open in ["[", #"{"a":"#, #"[{"a":"#] {
            let deep = Array(String(repeating: open, count: 100_000).utf8)
            #expect(throws: (any Error).self) { try Wire.decode(JSONValue.self, from: deep) }
        }
        // Foundation draws the line at the same depth.
        #expect(JSONAgreement.compare(nested(513, open: "[", close: "]")).bothRefused)
        #expect(JSONAgreement.compare(nested(512, open: "[", close: "]")).bothAccepted)
    }

    /// Integer fields take only numbers whose text is exactly an integer in range: no
    /// rounding through Double (which read -9223372036854775809 as Int64.min).
    @Test func integersAreExact() throws {
        func n(_ text: String) throws -> Int64 { try Self.decodeInteger(text) }
        #expect(try n("1e3") == 1000)
        #expect(try n("1.0") == 1)
        #expect(try n("-9223372036854775808") == Int64.min)
        #expect(try n("-0.9223372036854775808e19") == Int64.min)
        #expect(try n("12.5e1") == 125)
        for text in [
            "-9223372036854775809", "9223372036854775808", "9007199254740993.5", "1.0000000000000000001", "1.5", "1e19",
            "-1e400", "1e-400",
        ] {
            #expect(throws: (any Error).self, "\(text)") { try n(text) }
        }
        #expect(
            try Wire.decode(JSONValue.self, from: Array("-9223372036854775809".utf8))
                == .double(Double("-9223372036854775809")!))
        #expect(
            try Wire.decode(JSONValue.self, from: Array("9007199254740993.5".utf8))
                == .double(Double("9007199254740993.5")!))
    }

    private struct IntegerField: Decodable { var n: Int64 }

    private static func decodeInteger(_ text: String) throws -> Int64 {
        let decoded = try Wire.decode(IntegerField.self, from: Array(#"{"n":\#(text)}"#.utf8))
        return decoded.n
    }

    /// The agreement check must be able to fail: a tree that differs, and an input only
    /// one side accepts, are reported.
    @Test func agreementCheckCatchesDisagreement() {
        #expect(JSONAgreement.same(.int(1), NSNumber(value: 2)) == false)
        #expect(JSONAgreement.same(.string("e\u{301}"), "é") == false)
        #expect(JSONAgreement.same(.bool(true), NSNumber(value: 1)) == false)
        #expect(JSONAgreement.same(.object(["a": .int(1)]), ["a": NSNumber(value: 1), "b": NSNull()]) == false)
        #expect(JSONAgreement.same(.double(0.1), NSNumber(value: 0.1)))
        #expect(JSONAgreement.same(.int(1), NSNumber(value: 1.0)))
        // Foundation accepts a trailing comma; the reader's refusal is the documented exception.
        #expect(JSONAgreement.compare(Array("[1,]".utf8)).problem == nil)
        #expect(JSONAgreement.explainRefusal(Array("[1 2]".utf8), foundation: [NSNumber(value: 1)]) != nil)
        #expect(JSONAgreement.compare(Array("[1,]".utf8)).foundationAccepted)
    }
}

/// One named hostile input; `accepted` says what the reader must answer when it matters.
struct HostileJSON: Sendable, CustomTestStringConvertible {
    var name: String
    var bytes: [UInt8]
    var accepted: Bool?
    var testDescription: String { name }
}

/// Compares the reader with `JSONSerialization` on one input.
enum JSONAgreement {
    struct Outcome {
        var problem: String?
        var readerAccepted: Bool
        var foundationAccepted: Bool
        var bothAccepted: Bool { readerAccepted && foundationAccepted }
        var bothRefused: Bool { !readerAccepted && !foundationAccepted }
    }

    static func compare(_ bytes: [UInt8]) -> Outcome {
        var readerError = ""
        let ours: JSONValue?
        do { ours = try Wire.decode(JSONValue.self, from: bytes) } catch {
            ours = nil
            readerError = "\(error)"
            // The bytes around the point of refusal, for a reader of the failure.
            if let at = readerError.split(separator: " ").dropFirst(4).first.flatMap({
                Int($0.trimmingCharacters(in: .punctuationCharacters))
            }) {
                let window = bytes[max(0, at - 40)..<min(bytes.count, at + 40)]
                readerError += " near \(String(decoding: window, as: UTF8.self).debugDescription)"
            }
        }
        let theirs = try? JSONSerialization.jsonObject(with: Data(bytes), options: [.fragmentsAllowed])
        var outcome = Outcome(problem: nil, readerAccepted: ours != nil, foundationAccepted: theirs != nil)
        switch (ours, theirs) {
        case (let ours?, let theirs?):
            if !same(ours, theirs) { outcome.problem = "trees differ at \(difference(ours, theirs, path: "$"))" }
        case (.some(let ours), nil):
            outcome.problem = "the reader accepted what Foundation refuses: \(ours)"
        case (nil, let theirs?):
            if let problem = explainRefusal(bytes, foundation: theirs) {
                outcome.problem = "\(readerError); \(problem)"
            }
        case (nil, nil): break
        }
        return outcome
    }

    /// nil when the reader's refusal of something Foundation accepts is a documented exception.
    static func explainRefusal(_ bytes: [UInt8], foundation: Any) -> String? {
        // 2, 3: a BOM or a non-UTF-8 encoding, which Foundation detects from the first bytes.
        if bytes.starts(with: [0xEF, 0xBB, 0xBF]) || bytes.prefix(4).contains(0) || bytes.first == 0xFE
            || bytes.first == 0xFF
        {
            return nil
        }
        // 1, 4: trailing commas, and numbers past Double in values a duplicate key discards.
        // Without them the reader must accept and agree.
        let commas = withoutTrailingCommas(bytes)
        for candidate in [commas, withOutOfRangeNumbersZeroed(bytes), withOutOfRangeNumbersZeroed(commas)]
        where candidate != bytes {
            if let ours = try? Wire.decode(JSONValue.self, from: candidate), same(ours, foundation) { return nil }
        }
        return "the reader refused what Foundation accepts: \(foundation)"
    }

    /// Replaces each number token (outside strings) whose value is beyond Double with `0`.
    static func withOutOfRangeNumbersZeroed(_ bytes: [UInt8]) -> [UInt8] {
        var out: [UInt8] = []
        var inString = false
        var escaped = false
        var i = 0
        let numberBytes = Set(Array("0123456789+-.eE".utf8))
        while i < bytes.count {
            let b = bytes[i]
            if inString {
                if escaped {
                    escaped = false
                } else if b == UInt8(ascii: "\\") {
                    escaped = true
                } else if b == 0x22 {
                    inString = false
                }
            } else if b == 0x22 {
                inString = true
            } else if b == UInt8(ascii: "-") || (0x30...0x39).contains(b) {
                var j = i
                while j < bytes.count, numberBytes.contains(bytes[j]) { j += 1 }
                if let d = Double(String(decoding: bytes[i..<j], as: UTF8.self)), !d.isFinite {
                    out.append(0x30)
                    i = j
                    continue
                }
                out += bytes[i..<j]
                i = j
                continue
            }
            out.append(b)
            i += 1
        }
        return out
    }

    /// Drops each comma (outside strings) whose next non-space byte closes an array or object.
    static func withoutTrailingCommas(_ bytes: [UInt8]) -> [UInt8] {
        var out: [UInt8] = []
        var inString = false
        var escaped = false
        var i = 0
        while i < bytes.count {
            let b = bytes[i]
            if inString {
                if escaped {
                    escaped = false
                } else if b == UInt8(ascii: "\\") {
                    escaped = true
                } else if b == 0x22 {
                    inString = false
                }
            } else if b == 0x22 {
                inString = true
            } else if b == UInt8(ascii: ",") {
                var j = i + 1
                while j < bytes.count, [0x20, 0x09, 0x0A, 0x0D].contains(bytes[j]) { j += 1 }
                if j < bytes.count, bytes[j] == UInt8(ascii: "]") || bytes[j] == UInt8(ascii: "}") {
                    i += 1
                    continue
                }
            }
            out.append(b)
            i += 1
        }
        return out
    }

    /// Where two trees first differ, for the failure message.
    static func difference(_ ours: JSONValue, _ theirs: Any, path: String) -> String {
        switch ours {
        case .array(let items):
            if let list = theirs as? [Any], list.count == items.count {
                for (k, (a, b)) in zip(items, list).enumerated() where !same(a, b) {
                    return difference(a, b, path: "\(path)[\(k)]")
                }
            }
        case .object(let fields):
            if let dict = theirs as? [String: Any] {
                for (key, value) in fields {
                    if let other = dict[key], !same(value, other) {
                        return difference(value, other, path: "\(path).\(key.debugDescription)")
                    }
                }
                return
                    "\(path): keys \(fields.keys.map(\.debugDescription).sorted()) vs \(dict.keys.map(\.debugDescription).sorted())"
            }
        default: break
        }
        let kind = (theirs as? NSNumber).map { " (\(type(of: $0)) \(String(cString: $0.objCType)))" } ?? ""
        return "\(path): reader \(ours), Foundation \(theirs)\(kind)"
    }

    /// Semantic equality of a reader tree and a Foundation tree.
    static func same(_ ours: JSONValue, _ theirs: Any) -> Bool {
        switch ours {
        case .null: return theirs is NSNull
        case .bool(let b):
            guard let n = theirs as? NSNumber, isBool(n) else { return false }
            return n.boolValue == b
        case .string(let s):
            guard let t = theirs as? String else { return false }
            return s.utf8.elementsEqual(t.utf8) || withoutFEFF(s) == withoutFEFF(t)
        case .array(let items):
            guard let list = theirs as? [Any], list.count == items.count else { return false }
            return zip(items, list).allSatisfy { same($0, $1) }
        case .object(let fields):
            guard let dict = theirs as? [String: Any] else { return false }
            if dict.count == fields.count,
                Set(fields.keys.map { Array($0.utf8) }) == Set(dict.keys.map { Array($0.utf8) })
            {
                return fields.allSatisfy { key, value in dict[key].map { same(value, $0) } ?? false }
            }
            // Foundation's U+FEFF defect can rename a key, even onto another key; keys then
            // compare without U+FEFF, and values only where that leaves one key.
            let normalized = Dictionary(grouping: fields, by: { withoutFEFF($0.key) })
            let theirsNormalized = Dictionary(grouping: dict, by: { withoutFEFF($0.key) })
            guard Set(normalized.keys) == Set(theirsNormalized.keys) else { return false }
            return normalized.allSatisfy { key, ours in
                guard ours.count == 1, let other = theirsNormalized[key], other.count == 1 else { return true }
                return same(ours[0].value, other[0].value)
            }
        case .int(let i):
            guard let n = theirs as? NSNumber, !isBool(n) else { return false }
            if let decimal = n as? NSDecimalNumber { return decimal.decimalValue == Decimal(i) }
            switch String(cString: n.objCType) {
            case "Q": return i >= 0 && n.uint64Value == UInt64(i)
            case "d", "f": return n.doubleValue == Double(i) && Double(i) == n.doubleValue.rounded()
            default: return n.int64Value == i
            }
        case .double(let d):
            guard let n = theirs as? NSNumber, !isBool(n) else { return false }
            if let decimal = n as? NSDecimalNumber {
                // Decimal keeps 38 significant digits; the reader rounds the full text once.
                guard let value = Double(decimal.description) else { return false }
                return abs(value - d) <= max(abs(value), abs(d)) * 1e-15
            }
            switch String(cString: n.objCType) {
            case "Q": return Double(n.uint64Value) == d
            case "d", "f": return n.doubleValue == d
            default: return Double(n.int64Value) == d
            }
        }
    }

    /// The UTF-8 bytes of `s` without U+FEFF (see the Foundation defect above).
    static func withoutFEFF(_ s: String) -> [UInt8] {
        Array(String(String.UnicodeScalarView(s.unicodeScalars.filter { $0 != "\u{FEFF}" })).utf8)
    }

    private static func isBool(_ n: NSNumber) -> Bool { String(cString: n.objCType) == "c" }

    /// A short, printable form of an input; the whole input is written to a file named in it.
    static func show(_ bytes: [UInt8]) -> String {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent(
            "json-fuzz-\(abs(bytes.hashValue)).json"
        ).path
        if FileManager.default.createFile(atPath: path, contents: Data(bytes)) {
            return "\(preview(bytes)) (whole input: \(path))"
        }
        return preview(bytes)
    }

    static func preview(_ bytes: [UInt8]) -> String {
        let text = String(decoding: bytes.prefix(300), as: UTF8.self).debugDescription
        return bytes.count > 300 ? "\(text)… (\(bytes.count) bytes)" : text
    }
}

/// Random JSON text with the variety a parser must handle: every escape, surrogate
/// pairs, multi-byte UTF-8, numbers in every form and size, legal whitespace, duplicate keys.
enum JSONDocumentGenerator {
    static func document(_ random: inout FuzzRandom) -> [UInt8] {
        var out: [UInt8] = []
        space(&out, &random)
        value(&out, &random, depth: random.int(0...5))
        space(&out, &random)
        return out
    }

    static func value(_ out: inout [UInt8], _ random: inout FuzzRandom, depth: Int) {
        let containers = depth > 0
        switch random.int(0...(containers ? 9 : 5)) {
        case 0: out += Array(random.pick(["true", "false", "null"]).utf8)
        case 1, 2: number(&out, &random)
        case 3, 4, 5: string(&out, &random)
        case 6, 7:
            out.append(UInt8(ascii: "["))
            let count = random.int(0...5)
            for k in 0..<count {
                if k > 0 { out.append(UInt8(ascii: ",")) }
                space(&out, &random)
                value(&out, &random, depth: depth - 1)
                space(&out, &random)
            }
            if count == 0 { space(&out, &random) }
            out.append(UInt8(ascii: "]"))
        default:
            out.append(UInt8(ascii: "{"))
            let count = random.int(0...5)
            var keys: [[UInt8]] = []
            for k in 0..<count {
                if k > 0 { out.append(UInt8(ascii: ",")) }
                space(&out, &random)
                if !keys.isEmpty, random.chance(0.15) {
                    out += random.pick(keys)  // a duplicate key
                } else {
                    var key: [UInt8] = []
                    string(&key, &random)
                    keys.append(key)
                    out += key
                }
                space(&out, &random)
                out.append(UInt8(ascii: ":"))
                space(&out, &random)
                value(&out, &random, depth: depth - 1)
                space(&out, &random)
            }
            if count == 0 { space(&out, &random) }
            out.append(UInt8(ascii: "}"))
        }
    }

    static func space(_ out: inout [UInt8], _ random: inout FuzzRandom) {
        guard random.chance(0.3) else { return }
        for _ in 0..<random.int(1...3) { out.append(random.pick([0x20, 0x09, 0x0A, 0x0D])) }
    }

    static func digits(_ count: Int, _ random: inout FuzzRandom, leadingNonZero: Bool) -> String {
        var s = ""
        for k in 0..<count { s.append(String(k == 0 && leadingNonZero ? random.int(1...9) : random.int(0...9))) }
        return s
    }

    static func number(_ out: inout [UInt8], _ random: inout FuzzRandom) {
        var text: String
        switch random.int(0...9) {
        case 0: text = String(Int64.random(in: Int64.min...Int64.max, using: &random))
        case 1: text = String(random.int(-1000...1000))
        case 2: text = random.pick(FuzzValues.jsonNumberEdges)
        case 3: text = digits(random.int(19...45), &random, leadingNonZero: true)  // past Int64 and UInt64
        default:
            text = random.int(0...3) == 0 ? "0" : digits(random.int(1...20), &random, leadingNonZero: true)
            if random.chance(0.6) { text += "." + digits(random.int(1...20), &random, leadingNonZero: false) }
            if random.chance(0.5) {
                text += random.pick(["e", "E"]) + random.pick(["", "+", "-"])
                text += String(random.int(0...3) == 0 ? random.int(0...400) : random.int(0...25))
            }
        }
        if random.chance(0.3), !text.hasPrefix("-") { text = "-" + text }
        out += Array(text.utf8)
    }

    static func string(_ out: inout [UInt8], _ random: inout FuzzRandom) {
        out.append(0x22)
        for _ in 0..<random.int(0...12) {
            switch random.int(0...11) {
            case 0, 1, 2, 3:
                // Printable ASCII except the two that need escaping.
                var b = UInt8(random.int(0x20...0x7E))
                if b == 0x22 || b == 0x5C { b = UInt8(ascii: "x") }
                out.append(b)
            case 4: out += Array(random.pick([#"\""#, #"\\"#, #"\/"#, #"\b"#, #"\f"#, #"\n"#, #"\r"#, #"\t"#]).utf8)
            case 5:
                // \uXXXX of a BMP scalar that is not a surrogate, in either hex case.
                var v = random.int(0...0xFFFF)
                if (0xD800...0xDFFF).contains(v) { v = 0x41 }
                let hex = String(format: "%04x", v)
                out += Array(("\\u" + (random.chance(0.5) ? hex : hex.uppercased())).utf8)
            case 6:
                let v = random.int(0x10000...0x10FFFF) - 0x10000
                out += Array(String(format: "\\u%04X\\u%04x", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF)).utf8)
            case 7, 8:
                // A raw multi-byte scalar: 2-, 3- and 4-byte UTF-8.
                let ranges: [ClosedRange<Int>] = [0x80...0x7FF, 0x800...0xD7FF, 0xE000...0xFFFF, 0x10000...0x10FFFF]
                let scalar = Unicode.Scalar(UInt32(random.int(random.pick(ranges))))!
                out += Array(String(scalar).utf8)
            case 9:
                out += Array(random.pick(["e\u{301}", "\u{2028}", "\u{FEFF}", "\u{7F}", "🎉", "\u{202E}", "١٢٣"]).utf8)
            case 10: out += Array(#"\u0000"#.utf8)
            default: out += Array("abc".utf8)
            }
        }
        out.append(0x22)
    }

    /// Seeds for the mutator: shapes the relay reads (records, Zulip payloads) and edge values.
    static let fixedCorpus: [[UInt8]] = [
        #"{"schema":1,"kind":"native","notification_id":"7f0c","realm_uuid":"aa4b5850-14e0-4509-a658-415f5d846d01","user_id":10,"device_ids":[1,2,3],"accepted_at_ms":1754385395000}"#,
        #"{"push_requests":[{"device_id":1405,"payload":{"encrypted_data":"AAAA","push_key_id":1},"http_headers":{"apns_priority":10,"apns_push_type":"alert"}}]}"#,
        #"{"token":"abcd","token_kind":"apns","timestamp":1754385395,"ios_app_id":"org.zulip.Zulip"}"#,
        #"[1,-0,0.5,-1.5e-3,1E+2,9223372036854775807,-9223372036854775808,18446744073709551615,true,false,null,"",{}]"#,
        #"{"a":"\u00e9\ud83c\udf89\n\t\"\\\/","b":[[[]]],"c":{"d":{}}}"#,
        "\"plain\"", "0", "-12.5e10", "[]", "{}",
    ].map { Array($0.utf8) }

    static var hostile: [HostileJSON] {
        func h(_ name: String, _ text: String, _ accepted: Bool? = nil) -> HostileJSON {
            HostileJSON(name: name, bytes: Array(text.utf8), accepted: accepted)
        }
        func b(_ name: String, _ bytes: [UInt8], _ accepted: Bool? = nil) -> HostileJSON {
            HostileJSON(name: name, bytes: bytes, accepted: accepted)
        }
        let q = UInt8(ascii: "\""), open = UInt8(ascii: "["), close = UInt8(ascii: "]")
        return [
            h("100k [", String(repeating: "[", count: 100_000), false),
            h("100k [ closed", String(repeating: "[", count: 100_000) + String(repeating: "]", count: 100_000), false),
            h("100k {\"a\":", String(repeating: #"{"a":"#, count: 100_000), false),
            h("lone high surrogate", #"["\ud800"]"#, false),
            h("lone low surrogate", #"["\udc00"]"#, false),
            h("high surrogate then letter", #"["\ud800\u0041"]"#, false),
            h("two high surrogates", #"["\ud800\ud800"]"#, false),
            h("high surrogate at end of input", #"["\ud800"#, false),
            h("truncated \\u", #"["\u12"#, false),
            h("surrogate pair", #"["\ud83c\udf89"]"#, true),
            b("raw NUL in string", [open, q, 0x61, 0x00, q, close], false),
            b("NUL after value", Array("[1]".utf8) + [0], false),
            h("escaped NUL", #"["a\u0000b"]"#, true),
            b("overlong slash C0 AF", [open, q, 0xC0, 0xAF, q, close], false),
            b("overlong E0 80 AF", [open, q, 0xE0, 0x80, 0xAF, q, close], false),
            b("overlong F0 80 80 AF", [open, q, 0xF0, 0x80, 0x80, 0xAF, q, close], false),
            b("UTF-8 surrogate ED A0 80", [open, q, 0xED, 0xA0, 0x80, q, close], false),
            b("past U+10FFFF F4 90 80 80", [open, q, 0xF4, 0x90, 0x80, 0x80, q, close], false),
            b("byte FF", [open, q, 0xFF, q, close], false),
            b("lone continuation 80", [open, q, 0x80, q, close], false),
            b("truncated sequence E2 82", [open, q, 0xE2, 0x82, q, close], false),
            b(
                "invalid UTF-8 in a key", [UInt8(ascii: "{"), q, 0xC3, q, UInt8(ascii: ":"), 0x31, UInt8(ascii: "}")],
                false),
            h("1e999999", "1e999999", false),
            h("-1e999999", "[-1e999999]", false),
            h("1e400", "1e400", false),
            h("just past Double.max", "1.7976931348623159e308", false),
            h("Double.max", "1.7976931348623157e308", true),
            h("1e-400 underflows to 0", "1e-400", true),
            h("smallest subnormal", "4.9e-324", true),
            h("-0", "-0", true),
            h("-0.0", "-0.0", true),
            h("Int64.max", "9223372036854775807", true),
            h("Int64.max + 1", "9223372036854775808", true),
            h("Int64.min", "-9223372036854775808", true),
            h("Int64.min - 1", "-9223372036854775809", true),
            h("UInt64.max", "18446744073709551615", true),
            h("UInt64.max + 1", "18446744073709551616", true),
            h("1e19", "1e19", true),
            h("9223372036854775807.0", "9223372036854775807.0", true),
            h("Int64.min - 0.5", "-9223372036854775808.5", true),
            h("2^53 + 0.5", "9007199254740993.5", true),
            h("1 + 1e-19", "1.0000000000000000001", true),
            h("long fraction past 2^58", "2864353586008.68122667855903158290E+5", true),
            h("integer spelled with exponent", "123456789012345678e-17", true),
            h("Int64.max spelled 0.9223372036854775807e19", "0.9223372036854775807e19", true),
            h("100k digits", "1" + String(repeating: "0", count: 100_000), nil),
            h("200k digits then e-200000", "1" + String(repeating: "0", count: 200_000) + "e-200000", nil),
            h("1e-99999999999999999999", "1e-99999999999999999999", nil),
            h("1e99999999999999999999", "1e99999999999999999999", false),
            h("leading zero", "[01]", false),
            h("bare minus", "-", false),
            h("dot without digits", "[1.]", false),
            h("plus sign", "+1", false),
            h("hex", "0x10", false),
            h("NaN", "NaN", false),
            h("Infinity", "[-Infinity]", false),
            h("single quotes", "['a']", false),
            h("comment", "[1 /* c */]", false),
            h("unquoted key", "{a:1}", false),
            h("trailing comma (documented exception)", "[1,]", false),
            h("BOM (documented exception)", "\u{FEFF}[1]", false),
            h("non-breaking space", "[\u{A0}1]", false),
            h("form feed as space", "[\u{0C}1]", false),
            h("two values", "1 2", false),
            h("empty", "", false),
            h("only spaces", " \n\t\r ", false),
            h("duplicate keys", #"{"a":1,"a":2}"#, true),
            h("NFC and NFD keys", "{\"\u{E9}\":1,\"e\u{301}\":2}", true),
            h("250k escapes", "\"" + String(repeating: #"\u00e9"#, count: 50_000) + "\"", true),
            h("1 MB string", "\"" + String(repeating: "a", count: 1 << 20) + "\"", true),
            h("1 MB of combining marks", "\"a" + String(repeating: "\u{301}", count: 500_000) + "\"", true),
            h("100k element array", "[" + Array(repeating: "0", count: 100_000).joined(separator: ",") + "]", true),
            h("100k keys", "{" + (0..<100_000).map { "\"k\($0)\":\($0)" }.joined(separator: ",") + "}", true),
            h(
                "100k copies of one key",
                "{" + Array(repeating: #""k":1"#, count: 100_000).joined(separator: ",") + "}", true),
        ]
    }
}

/// Byte-level mutations of a valid document, and splices of hostile fragments into it.
enum JSONMutator {
    static func mutate(_ input: [UInt8], corpus: [[UInt8]], _ random: inout FuzzRandom) -> [UInt8] {
        var bytes = input
        for _ in 0..<random.int(1...3) {
            let at = bytes.isEmpty ? 0 : random.int(0...bytes.count)
            switch random.int(0...9) {
            case 0 where !bytes.isEmpty:  // flip bits
                let i = random.int(0...bytes.count - 1)
                bytes[i] ^= UInt8(1 << random.int(0...7))
            case 1 where !bytes.isEmpty:  // set a byte to an interesting one
                bytes[random.int(0...bytes.count - 1)] = random.pick([
                    0x00, 0x22, 0x5C, 0x2C, 0x3A, 0x5B, 0x5D, 0x7B, 0x7D, 0x2D, 0x2E, 0x65, 0x30, 0x80, 0xC0, 0xFF,
                    0x0A,
                ])
            case 2:  // truncate
                bytes = Array(bytes.prefix(at))
            case 3 where !bytes.isEmpty:  // delete a range
                let end = min(bytes.count, at + random.int(1...8))
                bytes.removeSubrange(min(at, end)..<end)
            case 4:  // insert a hostile fragment
                bytes.insert(contentsOf: Array(random.pick(fragments).utf8), at: at)
            case 5:  // insert raw invalid UTF-8
                bytes.insert(contentsOf: random.pick(invalidUTF8), at: at)
            case 6 where !bytes.isEmpty:  // duplicate a range
                let end = min(bytes.count, at + random.int(1...16))
                bytes.insert(contentsOf: bytes[min(at, end)..<end], at: at)
            case 7:  // splice another document in
                bytes.insert(contentsOf: random.pick(corpus), at: at)
            case 8:  // deep nesting
                let depth = random.pick([100, 511, 512, 513, 2000])
                let open = random.pick(["[", #"{"k":"#])
                bytes.insert(contentsOf: Array(String(repeating: open, count: depth).utf8), at: at)
            default:  // a number replaced by an edge
                bytes.insert(contentsOf: Array(random.pick(FuzzValues.jsonNumberEdges).utf8), at: at)
            }
        }
        return bytes
    }

    static let fragments = [
        #"\ud800"#, #"\udc00"#, #"\u"#, #"\x"#, "\\", "\"", ",", ",]", ",}", ":", "1e999999", "-0", "NaN", "//", "/*",
        "\u{FEFF}", "\u{2028}", "true", "nul", "[", "{", "]", "}", "\"a\":", " \t\r\n", "\u{0B}", "\u{A0}",
    ]
    static let invalidUTF8: [[UInt8]] = [
        [0xC0, 0xAF], [0xE0, 0x80, 0xAF], [0xF0, 0x80, 0x80, 0xAF], [0xED, 0xA0, 0x80], [0xF4, 0x90, 0x80, 0x80],
        [0xFF], [0xFE], [0x80], [0xE2, 0x82], [0xF8, 0x88, 0x80, 0x80, 0x80], [0x00],
    ]
}
