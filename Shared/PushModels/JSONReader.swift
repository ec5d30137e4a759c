import Foundation

/// A strict JSON parser into `JSONValue` (RFC 8259: one value, no trailing commas, no
/// comments, escapes checked, nesting bounded), plus a `Decoder` over `JSONValue`.
/// Together they decode topic records several times faster than `JSONDecoder`, which
/// pays a thrown error for every type it probes in a `JSONValue`.
struct JSONReader {
    struct Failure: Error, CustomStringConvertible {
        var offset: Int
        var problem: String
        var description: String { "invalid JSON at byte \(offset): \(problem)" }
    }

    private let bytes: UnsafeBufferPointer<UInt8>
    private var i = 0
    private var depth = 0
    static let maxDepth = 512

    private init(_ bytes: UnsafeBufferPointer<UInt8>) {
        self.bytes = bytes
    }

    static func parse(_ data: some Collection<UInt8>) throws -> JSONValue {
        let run: (UnsafeBufferPointer<UInt8>) throws -> JSONValue = { buffer in
            var reader = JSONReader(buffer)
            reader.skipSpace()
            let value = try reader.value()
            reader.skipSpace()
            guard reader.i == buffer.count else {
                throw Failure(offset: reader.i, problem: "unexpected data after the value")
            }
            return value
        }
        if let result = try data.withContiguousStorageIfAvailable(run) { return result }
        return try Array(data).withUnsafeBufferPointer(run)
    }

    private func fail(_ problem: String) -> Failure { Failure(offset: i, problem: problem) }

    private mutating func skipSpace() {
        while i < bytes.count, bytes[i] == 0x20 || bytes[i] == 0x0A || bytes[i] == 0x0D || bytes[i] == 0x09 { i += 1 }
    }

    private mutating func expect(_ literal: StaticString) throws {
        let count = literal.utf8CodeUnitCount
        guard i + count <= bytes.count else { throw fail("truncated literal") }
        for k in 0..<count where bytes[i + k] != literal.utf8Start[k] { throw fail("unknown literal") }
        i += count
    }

    private mutating func value() throws -> JSONValue {
        guard i < bytes.count else { throw fail("unexpected end") }
        switch bytes[i] {
        case UInt8(ascii: "{"): return try object()
        case UInt8(ascii: "["): return try array()
        case UInt8(ascii: "\""): return .string(try string())
        case UInt8(ascii: "t"): try expect("true"); return .bool(true)
        case UInt8(ascii: "f"): try expect("false"); return .bool(false)
        case UInt8(ascii: "n"): try expect("null"); return .null
        default: return try number()
        }
    }

    private mutating func nest() throws {
        depth += 1
        guard depth <= Self.maxDepth else { throw fail("nested too deeply") }
    }

    private mutating func object() throws -> JSONValue {
        try nest()
        defer { depth -= 1 }
        i += 1
        skipSpace()
        if i < bytes.count, bytes[i] == UInt8(ascii: "}") {
            i += 1
            return .object([:])
        }
        // The members in order, then the dictionary built once at its size (grown member
        // by member it was resized about twelve times per record); a repeated key keeps
        // its last value.
        var members: [(String, JSONValue)] = []
        members.reserveCapacity(16)
        while true {
            skipSpace()
            guard i < bytes.count, bytes[i] == UInt8(ascii: "\"") else { throw fail("expected a key") }
            let key = try string()
            skipSpace()
            guard i < bytes.count, bytes[i] == UInt8(ascii: ":") else { throw fail("expected ':'") }
            i += 1
            skipSpace()
            members.append((key, try value()))
            skipSpace()
            guard i < bytes.count else { throw fail("unexpected end in an object") }
            if bytes[i] == UInt8(ascii: ",") {
                i += 1
            } else if bytes[i] == UInt8(ascii: "}") {
                i += 1
                return .object(Dictionary(members, uniquingKeysWith: { _, last in last }))
            } else {
                throw fail("expected ',' or '}'")
            }
        }
    }

    private mutating func array() throws -> JSONValue {
        try nest()
        defer { depth -= 1 }
        i += 1
        var items: [JSONValue] = []
        skipSpace()
        if i < bytes.count, bytes[i] == UInt8(ascii: "]") {
            i += 1
            return .array(items)
        }
        while true {
            skipSpace()
            items.append(try value())
            skipSpace()
            guard i < bytes.count else { throw fail("unexpected end in an array") }
            if bytes[i] == UInt8(ascii: ",") {
                i += 1
            } else if bytes[i] == UInt8(ascii: "]") {
                i += 1
                return .array(items)
            } else {
                throw fail("expected ',' or ']'")
            }
        }
    }

    private mutating func string() throws -> String {
        i += 1
        let start = i
        // Fast path: no escapes.
        i = JSONText.firstSpecial(bytes, from: i)
        if i < bytes.count {
            let b = bytes[i]
            if b == UInt8(ascii: "\"") {
                let s = try utf8(start..<i)
                i += 1
                return s
            }
            if b < 0x20 { throw fail("control character in a string") }
        }
        var out: [UInt8] = []
        out.reserveCapacity(i - start + 64)
        out.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[start..<i]))
        while i < bytes.count {
            let b = bytes[i]
            if b == UInt8(ascii: "\"") {
                i += 1
                guard let s = out.withUnsafeBufferPointer(Self.strictUTF8) else { throw fail("invalid UTF-8") }
                return s
            }
            if b < 0x20 { throw fail("control character in a string") }
            if b != UInt8(ascii: "\\") {
                // The run up to the next quote, backslash or control character, copied whole.
                let run = i
                i = JSONText.firstSpecial(bytes, from: i)
                out.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[run..<i]))
                continue
            }
            i += 1
            guard i < bytes.count else { break }
            let e = bytes[i]
            i += 1
            switch e {
            case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): out.append(e)
            case UInt8(ascii: "b"): out.append(0x08)
            case UInt8(ascii: "f"): out.append(0x0C)
            case UInt8(ascii: "n"): out.append(0x0A)
            case UInt8(ascii: "r"): out.append(0x0D)
            case UInt8(ascii: "t"): out.append(0x09)
            case UInt8(ascii: "u"):
                var scalar = try hex4()
                if (0xD800..<0xDC00).contains(scalar) {
                    guard i + 1 < bytes.count, bytes[i] == UInt8(ascii: "\\"), bytes[i + 1] == UInt8(ascii: "u") else {
                        throw fail("lone surrogate")
                    }
                    i += 2
                    let low = try hex4()
                    guard (0xDC00..<0xE000).contains(low) else { throw fail("bad surrogate pair") }
                    scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                } else if (0xDC00..<0xE000).contains(scalar) {
                    throw fail("lone surrogate")
                }
                guard let u = Unicode.Scalar(scalar) else { throw fail("bad escape") }
                UTF8.encode(u) { out.append($0) }
            default: throw fail("bad escape")
            }
        }
        throw fail("unterminated string")
    }

    private mutating func hex4() throws -> UInt32 {
        guard i + 4 <= bytes.count else { throw fail("truncated \\u escape") }
        var v: UInt32 = 0
        for _ in 0..<4 {
            let b = bytes[i]
            let d: UInt32
            switch b {
            case 0x30...0x39: d = UInt32(b - 0x30)
            case 0x41...0x46: d = UInt32(b - 0x41 + 10)
            case 0x61...0x66: d = UInt32(b - 0x61 + 10)
            default: throw fail("bad hex digit")
            }
            v = v << 4 | d
            i += 1
        }
        return v
    }

    private func utf8(_ range: Range<Int>) throws -> String {
        guard let s = Self.strictUTF8(UnsafeBufferPointer(rebasing: bytes[range])) else {
            throw Failure(offset: range.lowerBound, problem: "invalid UTF-8")
        }
        return s
    }

    /// The text, or nil when it is not valid UTF-8. ASCII (nearly every string in a
    /// record) goes through `String(decoding:)`, which is specialised and has nothing to
    /// repair in ASCII; the rest through `String(validating:)`, whose generic validation
    /// cost about 1,000 instructions a string (callgrind: 3 % of ingest).
    static func strictUTF8(_ buffer: UnsafeBufferPointer<UInt8>) -> String? {
        if isASCII(UnsafeRawBufferPointer(buffer)) { return String(decoding: buffer, as: UTF8.self) }
        return String(validating: buffer, as: UTF8.self)
    }

    /// True when no byte has its high bit set (eight bytes at a time).
    static func isASCII(_ raw: UnsafeRawBufferPointer) -> Bool {
        var offset = 0
        var highBits: UInt64 = 0
        while offset + 8 <= raw.count {
            highBits |= raw.loadUnaligned(fromByteOffset: offset, as: UInt64.self)
            offset += 8
        }
        while offset < raw.count {
            highBits |= UInt64(raw[offset])
            offset += 1
        }
        return highBits & 0x8080_8080_8080_8080 == 0
    }

    private mutating func number() throws -> JSONValue {
        let start = i
        if i < bytes.count, bytes[i] == UInt8(ascii: "-") { i += 1 }
        guard i < bytes.count, (0x30...0x39).contains(bytes[i]) else { throw fail("unexpected character") }
        if bytes[i] == 0x30 {
            i += 1
        } else {
            while i < bytes.count, (0x30...0x39).contains(bytes[i]) { i += 1 }
        }
        var integral = true
        if i < bytes.count, bytes[i] == UInt8(ascii: ".") {
            integral = false
            i += 1
            guard i < bytes.count, (0x30...0x39).contains(bytes[i]) else { throw fail("digit expected") }
            while i < bytes.count, (0x30...0x39).contains(bytes[i]) { i += 1 }
        }
        if i < bytes.count, bytes[i] == UInt8(ascii: "e") || bytes[i] == UInt8(ascii: "E") {
            integral = false
            i += 1
            if i < bytes.count, bytes[i] == UInt8(ascii: "+") || bytes[i] == UInt8(ascii: "-") { i += 1 }
            guard i < bytes.count, (0x30...0x39).contains(bytes[i]) else { throw fail("digit expected") }
            while i < bytes.count, (0x30...0x39).contains(bytes[i]) { i += 1 }
        }
        let text = String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<i]), as: UTF8.self)
        if integral, let n = Int64(text) { return .int(n) }
        // As JSONDecoder reads it: a number whose text is exactly a whole Int64 (2.0, 1e3) is an
        // integer. Decided on the text, not on its Double: 1.0000000000000000001, 2^53 + 0.5 and
        // -9223372036854775809 round to whole Doubles but are not integers, let alone Int64.min.
        if !integral, let n = Self.exactInteger(UnsafeBufferPointer(rebasing: bytes[start..<i])) { return .int(n) }
        guard let d = Double(text), d.isFinite else { throw Failure(offset: start, problem: "number out of range") }
        return .double(d)
    }

    /// The value of a well-formed JSON number's text if it is exactly an integer that fits
    /// Int64, without rounding through Double. Linear in the text, whatever its exponent.
    static func exactInteger(_ text: UnsafeBufferPointer<UInt8>) -> Int64? {
        var k = 0
        let negative = text.first == UInt8(ascii: "-")
        if negative { k += 1 }
        let intStart = k
        while k < text.count, (0x30...0x39).contains(text[k]) { k += 1 }
        let intEnd = k
        var fracStart = k, fracEnd = k
        if k < text.count, text[k] == UInt8(ascii: ".") {
            k += 1
            fracStart = k
            while k < text.count, (0x30...0x39).contains(text[k]) { k += 1 }
            fracEnd = k
        }
        var exponent = 0
        if k < text.count, text[k] == UInt8(ascii: "e") || text[k] == UInt8(ascii: "E") {
            k += 1
            var exponentNegative = false
            if k < text.count, text[k] == UInt8(ascii: "+") || text[k] == UInt8(ascii: "-") {
                exponentNegative = text[k] == UInt8(ascii: "-")
                k += 1
            }
            while k < text.count {
                // Saturates: past a million the answer no longer depends on the exponent.
                exponent = min(exponent * 10 + Int(text[k] - 0x30), 1_000_000)
                k += 1
            }
            if exponentNegative { exponent = -exponent }
        }
        // Digit n of the mantissa (integer digits then fraction digits) has place value
        // 10^(intCount - 1 - n + exponent).
        let intCount = intEnd - intStart
        let count = intCount + (fracEnd - fracStart)
        func digit(_ n: Int) -> UInt64 { UInt64(text[n < intCount ? intStart + n : fracStart + n - intCount] - 0x30) }
        var first = 0
        while first < count, digit(first) == 0 { first += 1 }
        if first == count { return 0 }
        var last = count - 1
        while digit(last) == 0 { last -= 1 }
        let lowestPlace = intCount - 1 - last + exponent
        let highestPlace = intCount - 1 - first + exponent
        guard lowestPlace >= 0, highestPlace <= 18 else { return nil }
        var magnitude: UInt64 = 0
        for n in first...last { magnitude = magnitude * 10 + digit(n) }
        for _ in 0..<lowestPlace {
            let (product, overflow) = magnitude.multipliedReportingOverflow(by: 10)
            if overflow { return nil }
            magnitude = product
        }
        if negative { return magnitude <= UInt64(Int64.max) + 1 ? Int64(truncatingIfNeeded: 0 &- magnitude) : nil }
        return Int64(exactly: magnitude)
    }
}

/// Decodes any `Decodable` from a `JSONValue` tree, with `JSONDecoder`'s defaults
/// (exact number conversions, missing optional keys are nil).
struct JSONValueDecoder: Decoder {
    let value: JSONValue
    let codingPath: [any CodingKey]
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    static func decode<T: Decodable>(_ type: T.Type, from value: JSONValue, path: [any CodingKey] = []) throws -> T {
        if T.self == JSONValue.self, let same = value as? T { return same }
        return try T(from: JSONValueDecoder(value: value, codingPath: path))
    }

    func container<Key: CodingKey>(keyedBy type: Key.Type) throws -> KeyedDecodingContainer<Key> {
        guard case .object(let fields) = value else { throw mismatch([String: JSONValue].self, value, codingPath) }
        return KeyedDecodingContainer(Keyed<Key>(fields: fields, codingPath: codingPath))
    }

    func unkeyedContainer() throws -> any UnkeyedDecodingContainer {
        guard case .array(let items) = value else { throw mismatch([JSONValue].self, value, codingPath) }
        return Unkeyed(items: items, codingPath: codingPath)
    }

    func singleValueContainer() throws -> any SingleValueDecodingContainer {
        Single(value: value, codingPath: codingPath)
    }

    struct Index: CodingKey {
        var stringValue: String { "\(intValue ?? 0)" }
        var intValue: Int?
        init(_ i: Int) { intValue = i }
        init?(stringValue: String) { nil }
        init?(intValue: Int) { self.intValue = intValue }
    }

    struct Keyed<Key: CodingKey>: KeyedDecodingContainerProtocol {
        let fields: [String: JSONValue]
        let codingPath: [any CodingKey]
        var allKeys: [Key] { fields.keys.compactMap { Key(stringValue: $0) } }

        func contains(_ key: Key) -> Bool { fields[key.stringValue] != nil }

        private func field(_ key: Key) throws -> JSONValue {
            guard let v = fields[key.stringValue] else {
                throw DecodingError.keyNotFound(
                    key, .init(codingPath: codingPath, debugDescription: "No value for key \"\(key.stringValue)\""))
            }
            return v
        }

        func decodeNil(forKey key: Key) throws -> Bool { (fields[key.stringValue] ?? .null) == .null }

        func decode<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T {
            try JSONValueDecoder.decode(type, from: try field(key), path: codingPath + [key])
        }

        func decodeIfPresent<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T? {
            guard let v = fields[key.stringValue], v != .null else { return nil }
            return try JSONValueDecoder.decode(type, from: v, path: codingPath + [key])
        }

        func nestedContainer<N: CodingKey>(keyedBy type: N.Type, forKey key: Key) throws -> KeyedDecodingContainer<N> {
            try JSONValueDecoder(value: try field(key), codingPath: codingPath + [key]).container(keyedBy: type)
        }

        func nestedUnkeyedContainer(forKey key: Key) throws -> any UnkeyedDecodingContainer {
            try JSONValueDecoder(value: try field(key), codingPath: codingPath + [key]).unkeyedContainer()
        }

        func superDecoder() throws -> any Decoder { JSONValueDecoder(value: .object(fields), codingPath: codingPath) }
        func superDecoder(forKey key: Key) throws -> any Decoder {
            JSONValueDecoder(value: fields[key.stringValue] ?? .null, codingPath: codingPath + [key])
        }
    }

    struct Unkeyed: UnkeyedDecodingContainer {
        let items: [JSONValue]
        let codingPath: [any CodingKey]
        var currentIndex = 0
        var count: Int? { items.count }
        var isAtEnd: Bool { currentIndex >= items.count }

        private mutating func next() throws -> (JSONValue, [any CodingKey]) {
            guard !isAtEnd else {
                throw DecodingError.valueNotFound(
                    JSONValue.self, .init(codingPath: codingPath, debugDescription: "Unkeyed container is at end"))
            }
            defer { currentIndex += 1 }
            return (items[currentIndex], codingPath + [Index(currentIndex)])
        }

        mutating func decodeNil() throws -> Bool {
            guard !isAtEnd, items[currentIndex] == .null else { return false }
            currentIndex += 1
            return true
        }

        mutating func decode<T: Decodable>(_ type: T.Type) throws -> T {
            let (v, path) = try next()
            return try JSONValueDecoder.decode(type, from: v, path: path)
        }

        mutating func nestedContainer<N: CodingKey>(keyedBy type: N.Type) throws -> KeyedDecodingContainer<N> {
            let (v, path) = try next()
            return try JSONValueDecoder(value: v, codingPath: path).container(keyedBy: type)
        }

        mutating func nestedUnkeyedContainer() throws -> any UnkeyedDecodingContainer {
            let (v, path) = try next()
            return try JSONValueDecoder(value: v, codingPath: path).unkeyedContainer()
        }

        mutating func superDecoder() throws -> any Decoder {
            let (v, path) = try next()
            return JSONValueDecoder(value: v, codingPath: path)
        }
    }

    struct Single: SingleValueDecodingContainer {
        let value: JSONValue
        let codingPath: [any CodingKey]

        func decodeNil() -> Bool { value == .null }
        func decode(_ type: Bool.Type) throws -> Bool {
            guard case .bool(let b) = value else { throw mismatch(type, value, codingPath) }
            return b
        }
        func decode(_ type: String.Type) throws -> String {
            guard case .string(let s) = value else { throw mismatch(type, value, codingPath) }
            return s
        }
        func decode(_ type: Double.Type) throws -> Double {
            switch value {
            case .double(let d): return d
            case .int(let i): return Double(i)
            default: throw mismatch(type, value, codingPath)
            }
        }
        func decode(_ type: Float.Type) throws -> Float { Float(try decode(Double.self)) }
        func decode<T: Decodable>(_ type: T.Type) throws -> T {
            if let integer = type as? any FixedWidthInteger.Type, let exact = try decodeInteger(integer) as? T {
                return exact
            }
            return try JSONValueDecoder.decode(type, from: value, path: codingPath)
        }

        private func decodeInteger<I: FixedWidthInteger>(_ type: I.Type) throws -> I {
            switch value {
            case .int(let i):
                guard let exact = I(exactly: i) else { throw mismatch(type, value, codingPath) }
                return exact
            case .double:
                // The reader makes every number whose text is exactly an Int64 an `.int`; a
                // `.double` is a fraction or beyond Int64, and rounding it into an integer would
                // read 2^53 + 0.5 or -9223372036854775809 as a different number.
                throw mismatch(type, value, codingPath)
            default: throw mismatch(type, value, codingPath)
            }
        }
    }
}

private func mismatch(_ type: Any.Type, _ value: JSONValue, _ path: [any CodingKey]) -> DecodingError {
    DecodingError.typeMismatch(
        type, .init(codingPath: path, debugDescription: "Expected \(type), found \(value.typeName)"))
}

/// Encodes any `Encodable` into a `JSONValue` tree (then `JSONWriter` writes it), with
/// `JSONEncoder`'s defaults: nil optionals are left out.
struct JSONValueEncoder: Encoder {
    /// One place in the tree being built; containers fill it in.
    final class Node {
        var value: JSONValue = .null
        var object: [String: Node]?
        var array: [Node]?

        var json: JSONValue {
            if let object { return .object(object.mapValues(\.json)) }
            if let array { return .array(array.map(\.json)) }
            return value
        }
    }

    let node: Node
    let codingPath: [any CodingKey]
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    static func encode<T: Encodable>(_ value: T) throws -> JSONValue {
        let node = Node()
        try encode(value, into: node, path: [])
        return node.json
    }

    static func encode<T: Encodable>(_ value: T, into node: Node, path: [any CodingKey]) throws {
        if let json = value as? JSONValue {
            node.value = json
            return
        }
        try value.encode(to: JSONValueEncoder(node: node, codingPath: path))
    }

    func container<Key: CodingKey>(keyedBy type: Key.Type) -> KeyedEncodingContainer<Key> {
        if node.object == nil { node.object = [:] }
        return KeyedEncodingContainer(Keyed<Key>(node: node, codingPath: codingPath))
    }

    func unkeyedContainer() -> any UnkeyedEncodingContainer {
        if node.array == nil { node.array = [] }
        return Unkeyed(node: node, codingPath: codingPath)
    }

    func singleValueContainer() -> any SingleValueEncodingContainer { Single(node: node, codingPath: codingPath) }

    static func scalar<T: Encodable>(_ value: T) -> JSONValue? {
        switch value {
        case let v as String: return .string(v)
        case let v as Bool: return .bool(v)
        case let v as Int: return .int(Int64(v))
        case let v as Int64: return .int(v)
        case let v as Int32: return .int(Int64(v))
        case let v as UInt32: return .int(Int64(v))
        case let v as Double: return .double(v)
        default: return nil
        }
    }

    struct Keyed<Key: CodingKey>: KeyedEncodingContainerProtocol {
        let node: Node
        let codingPath: [any CodingKey]

        private func child(_ key: Key) -> Node {
            let child = Node()
            node.object?[key.stringValue] = child
            return child
        }

        mutating func encodeNil(forKey key: Key) throws { child(key).value = .null }

        mutating func encode<T: Encodable>(_ value: T, forKey key: Key) throws {
            if let scalar = JSONValueEncoder.scalar(value) {
                child(key).value = scalar
                return
            }
            try JSONValueEncoder.encode(value, into: child(key), path: codingPath + [key])
        }

        mutating func nestedContainer<N: CodingKey>(keyedBy type: N.Type, forKey key: Key) -> KeyedEncodingContainer<N>
        {
            JSONValueEncoder(node: child(key), codingPath: codingPath + [key]).container(keyedBy: type)
        }

        mutating func nestedUnkeyedContainer(forKey key: Key) -> any UnkeyedEncodingContainer {
            JSONValueEncoder(node: child(key), codingPath: codingPath + [key]).unkeyedContainer()
        }

        mutating func superEncoder() -> any Encoder { JSONValueEncoder(node: node, codingPath: codingPath) }
        mutating func superEncoder(forKey key: Key) -> any Encoder {
            JSONValueEncoder(node: child(key), codingPath: codingPath + [key])
        }
    }

    struct Unkeyed: UnkeyedEncodingContainer {
        let node: Node
        let codingPath: [any CodingKey]
        var count: Int { node.array?.count ?? 0 }

        private func next() -> Node {
            let child = Node()
            node.array?.append(child)
            return child
        }

        mutating func encodeNil() throws { next().value = .null }

        mutating func encode<T: Encodable>(_ value: T) throws {
            let child = next()
            if let scalar = JSONValueEncoder.scalar(value) {
                child.value = scalar
                return
            }
            try JSONValueEncoder.encode(value, into: child, path: codingPath + [JSONValueDecoder.Index(count - 1)])
        }

        mutating func nestedContainer<N: CodingKey>(keyedBy type: N.Type) -> KeyedEncodingContainer<N> {
            JSONValueEncoder(node: next(), codingPath: codingPath).container(keyedBy: type)
        }

        mutating func nestedUnkeyedContainer() -> any UnkeyedEncodingContainer {
            JSONValueEncoder(node: next(), codingPath: codingPath).unkeyedContainer()
        }

        mutating func superEncoder() -> any Encoder { JSONValueEncoder(node: next(), codingPath: codingPath) }
    }

    struct Single: SingleValueEncodingContainer {
        let node: Node
        let codingPath: [any CodingKey]

        mutating func encodeNil() throws { node.value = .null }
        mutating func encode(_ value: Bool) throws { node.value = .bool(value) }
        mutating func encode(_ value: String) throws { node.value = .string(value) }
        mutating func encode(_ value: Double) throws {
            guard value.isFinite else {
                throw EncodingError.invalidValue(
                    value, .init(codingPath: codingPath, debugDescription: "not a JSON number"))
            }
            node.value = .double(value)
        }
        mutating func encode(_ value: Float) throws { try encode(Double(value)) }
        mutating func encode<T: Encodable>(_ value: T) throws {
            if let integer = value as? any FixedWidthInteger {
                guard let exact = Int64(exactly: integer) else {
                    throw EncodingError.invalidValue(
                        value, .init(codingPath: codingPath, debugDescription: "beyond Int64"))
                }
                node.value = .int(exact)
                return
            }
            try JSONValueEncoder.encode(value, into: node, path: codingPath)
        }
    }
}
