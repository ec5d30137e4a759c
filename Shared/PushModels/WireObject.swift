/// A topic record, or an object inside one, written and read field by field: no
/// `Codable` containers, no coding keys looked up by string, and no `JSONValue` tree on
/// the way out. `Wire.encode` and `Wire.decode` take this path for every conforming
/// type; `Codable` (for `JSONEncoder`, and for records nested in `Codable` types) goes
/// through the same two functions, so each record's wire form is written down once.
public protocol WireObject: Codable, Sendable {
    /// Writes the fields, keys in ascending byte order: the canonical form (compact,
    /// sorted keys) that `Wire.canonical` writes for the same object.
    func write(to object: inout JSONObjectWriter)
    /// Reads the object from its parsed fields. A missing required field, a value of the
    /// wrong type or an unknown name throws `DecodingError`, as `Codable` would.
    init(fields: WireFields) throws
    /// Bytes to reserve for the encoded object: enough for most, so the buffer does
    /// not grow (and copy) while it is written.
    var encodedSizeHint: Int { get }
}

extension WireObject {
    public var encodedSizeHint: Int { 512 }
}

extension WireObject {
    public init(from decoder: any Decoder) throws {
        try self.init(fields: WireFields(try decoder.singleValueContainer().decode(JSONValue.self)))
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(try JSONReader.parse(Wire.encodeObject(self)))
    }
}

/// One JSON object being written, compact, keys in the order the caller gives them
/// (ascending, checked in debug builds). The records in `Records.wire` get that order
/// from `scripts/wiregen.py`; the check is for writers written by hand (`DeliveryClass`).
public struct JSONObjectWriter {
    fileprivate var out: [UInt8]
    private var empty = true
    #if DEBUG
        private var lastKey: [UInt8] = []
    #endif

    init(reservingCapacity capacity: Int) {
        out = []
        out.reserveCapacity(capacity)
        out.append(UInt8(ascii: "{"))
    }

    private init(continuing out: inout [UInt8]) {
        self.out = []
        swap(&self.out, &out)
        self.out.append(UInt8(ascii: "{"))
    }

    /// The object's bytes, closed.
    consuming func finish() -> [UInt8] {
        out.append(UInt8(ascii: "}"))
        return out
    }

    private mutating func key(_ name: StaticString) {
        #if DEBUG
            let bytes = Array(UnsafeBufferPointer(start: name.utf8Start, count: name.utf8CodeUnitCount))
            assert(
                empty || bytes.lexicographicallyPrecedes(lastKey) == false && bytes != lastKey, "\(name) out of order")
            lastKey = bytes
        #endif
        if !empty { out.append(UInt8(ascii: ",")) }
        empty = false
        out.append(UInt8(ascii: "\""))
        out.append(contentsOf: UnsafeBufferPointer(start: name.utf8Start, count: name.utf8CodeUnitCount))
        out.append(contentsOf: [UInt8(ascii: "\""), UInt8(ascii: ":")])
    }

    public mutating func field(_ name: StaticString, _ value: String) {
        key(name)
        JSONWriter.writeString(value, into: &out)
    }

    /// UTF-8 text (JSON that travels as a string, such as a provider body) written as a
    /// JSON string without a `String` in between.
    public mutating func field(_ name: StaticString, utf8 text: [UInt8]) {
        key(name)
        text.withUnsafeBufferPointer { JSONWriter.writeString(utf8: $0, into: &out) }
    }

    public mutating func field(_ name: StaticString, _ value: Int64) {
        key(name)
        JSONWriter.writeInteger(value, into: &out)
    }

    public mutating func field(_ name: StaticString, _ value: Int) {
        field(name, Int64(value))
    }

    public mutating func field(_ name: StaticString, _ value: JSONValue) {
        key(name)
        JSONWriter.write(value, into: &out)
    }

    public mutating func field<Name: RawRepresentable<String>>(_ name: StaticString, _ value: Name) {
        field(name, value.rawValue)
    }

    public mutating func field(_ name: StaticString, _ values: [Int64]) {
        key(name)
        out.append(UInt8(ascii: "["))
        for (index, value) in values.enumerated() {
            if index > 0 { out.append(UInt8(ascii: ",")) }
            JSONWriter.writeInteger(value, into: &out)
        }
        out.append(UInt8(ascii: "]"))
    }

    public mutating func field(_ name: StaticString, _ value: some WireObject) {
        key(name)
        var nested = JSONObjectWriter(continuing: &out)
        value.write(to: &nested)
        nested.out.append(UInt8(ascii: "}"))
        swap(&out, &nested.out)
    }

    public mutating func field(_ name: StaticString, _ values: [some WireObject]) {
        key(name)
        out.append(UInt8(ascii: "["))
        for (index, value) in values.enumerated() {
            if index > 0 { out.append(UInt8(ascii: ",")) }
            var nested = JSONObjectWriter(continuing: &out)
            value.write(to: &nested)
            nested.out.append(UInt8(ascii: "}"))
            swap(&out, &nested.out)
        }
        out.append(UInt8(ascii: "]"))
    }

    // Absent values are left out, as `encodeIfPresent` leaves them out.
    public mutating func field(_ name: StaticString, _ value: String?) {
        if let value { field(name, value) }
    }

    public mutating func field(_ name: StaticString, _ value: Int64?) {
        if let value { field(name, value) }
    }

    public mutating func field(_ name: StaticString, _ value: Int?) {
        if let value { field(name, Int64(value)) }
    }

    public mutating func field<Name: RawRepresentable<String>>(_ name: StaticString, _ value: Name?) {
        if let value { field(name, value.rawValue) }
    }

    public mutating func field(_ name: StaticString, _ values: [Int64]?) {
        if let values { field(name, values) }
    }

    public mutating func field(_ name: StaticString, _ value: (some WireObject)?) {
        if let value { field(name, value) }
    }
}

/// The fields of one parsed JSON object, read by name into typed values.
public struct WireFields {
    private let fields: [String: JSONValue]

    public init(_ value: JSONValue) throws {
        guard case .object(let fields) = value else {
            throw DecodingError.typeMismatch(
                [String: JSONValue].self,
                .init(codingPath: [], debugDescription: "Expected an object, found \(value.typeName)"))
        }
        self.fields = fields
    }

    private struct Key: CodingKey {
        var stringValue: String
        var intValue: Int? { nil }
        init(stringValue: String) { self.stringValue = stringValue }
        init?(intValue: Int) { nil }
    }

    private func mismatch(_ type: Any.Type, _ key: String, _ value: JSONValue) -> DecodingError {
        .typeMismatch(
            type,
            .init(codingPath: [Key(stringValue: key)], debugDescription: "Expected \(type), found \(value.typeName)"))
    }

    /// The value of `key`; absent or null is nil.
    private func present(_ key: String) -> JSONValue? {
        guard let value = fields[key], value != .null else { return nil }
        return value
    }

    private func required(_ key: String) throws -> JSONValue {
        guard let value = fields[key] else {
            throw DecodingError.keyNotFound(
                Key(stringValue: key), .init(codingPath: [], debugDescription: "No value for key \"\(key)\""))
        }
        return value
    }

    private func string(_ key: String, from value: JSONValue) throws -> String {
        guard case .string(let text) = value else { throw mismatch(String.self, key, value) }
        return text
    }

    private func int64(_ key: String, from value: JSONValue) throws -> Int64 {
        guard case .int(let number) = value else { throw mismatch(Int64.self, key, value) }
        return number
    }

    private func named<Name: RawRepresentable<String>>(_ key: String, from value: JSONValue) throws -> Name {
        let text = try string(key, from: value)
        guard let name = Name(rawValue: text) else {
            throw DecodingError.dataCorrupted(
                .init(
                    codingPath: [Key(stringValue: key)],
                    debugDescription: "Cannot initialize \(Name.self) from invalid value \(text)"))
        }
        return name
    }

    private func int64s(_ key: String, from value: JSONValue) throws -> [Int64] {
        guard case .array(let items) = value else { throw mismatch([Int64].self, key, value) }
        return try items.map { try int64(key, from: $0) }
    }

    private func objects<Object: WireObject>(_ key: String, from value: JSONValue) throws -> [Object] {
        guard case .array(let items) = value else { throw mismatch([Object].self, key, value) }
        return try items.map { try Object(fields: WireFields($0)) }
    }

    public func string(_ key: String) throws -> String { try string(key, from: try required(key)) }
    public func int64(_ key: String) throws -> Int64 { try int64(key, from: try required(key)) }
    public func int(_ key: String) throws -> Int { Int(try int64(key)) }
    /// Any JSON value, null included; only an absent key throws.
    public func value(_ key: String) throws -> JSONValue { try required(key) }
    public func named<Name: RawRepresentable<String>>(_ key: String) throws -> Name {
        try named(key, from: try required(key))
    }
    public func int64s(_ key: String) throws -> [Int64] { try int64s(key, from: try required(key)) }
    public func object<Object: WireObject>(_ key: String) throws -> Object {
        try Object(fields: WireFields(try required(key)))
    }
    public func objects<Object: WireObject>(_ key: String) throws -> [Object] {
        try objects(key, from: try required(key))
    }

    public func string(ifPresent key: String) throws -> String? { try present(key).map { try string(key, from: $0) } }
    public func int64(ifPresent key: String) throws -> Int64? { try present(key).map { try int64(key, from: $0) } }
    public func int(ifPresent key: String) throws -> Int? { try int64(ifPresent: key).map { Int($0) } }
    public func named<Name: RawRepresentable<String>>(ifPresent key: String) throws -> Name? {
        try present(key).map { try named(key, from: $0) }
    }
    public func int64s(ifPresent key: String) throws -> [Int64]? { try present(key).map { try int64s(key, from: $0) } }
    public func object<Object: WireObject>(ifPresent key: String) throws -> Object? {
        try present(key).map { try Object(fields: WireFields($0)) }
    }
}
