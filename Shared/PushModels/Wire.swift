import Foundation

/// The one place that decides how records and payloads are encoded: compact JSON with
/// sorted keys and unescaped slashes, which is also the form Zulip servers encrypt.
public enum Wire {
    public static func encoder() -> JSONEncoder {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return encoder
    }

    /// Compact JSON with sorted keys: byte for byte what `encoder()` writes, built
    /// through `JSONValue` and `JSONWriter` (several times faster).
    /// Records (`WireObject`) are written field by field.
    public static func encode<T: Encodable>(_ value: T) throws -> [UInt8] {
        if let object = value as? any WireObject { return encodeObject(object) }
        return canonical(try JSONValueEncoder.encode(value))
    }

    /// A record, written field by field (no dynamic cast to find that it is one).
    public static func encode<T: WireObject>(_ value: T) throws -> [UInt8] {
        encodeObject(value)
    }

    /// A record read field by field from strict JSON (no dynamic casts to find that it is one).
    public static func decode<T: WireObject>(_ type: T.Type, from bytes: some Collection<UInt8>) throws -> T {
        try T(fields: WireFields(try JSONReader.parse(bytes)))
    }

    /// Strict JSON (RFC 8259) into any `Decodable`, through `JSONValue`: several times
    /// faster than `JSONDecoder` for records that hold JSON values. Records
    /// (`WireObject`) are read field by field from the parsed object.
    public static func decode<T: Decodable>(_ type: T.Type, from bytes: some Collection<UInt8>) throws -> T {
        let value = try JSONReader.parse(bytes)
        if let objectType = type as? any WireObject.Type,
            let object = try objectType.init(fields: WireFields(value)) as? T
        {
            return object
        }
        return try JSONValueDecoder.decode(type, from: value)
    }

    static func encodeObject(_ object: some WireObject) -> [UInt8] {
        var writer = JSONObjectWriter(reservingCapacity: object.encodedSizeHint)
        object.write(to: &writer)
        return writer.finish()
    }

    /// Canonical bytes of a JSON value (compact, sorted keys).
    public static func canonical(_ value: JSONValue) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(256)
        JSONWriter.write(value, into: &out)
        return out
    }

    public static func nowMillis() -> Int64 {
        Int64((Date().timeIntervalSince1970 * 1000).rounded())
    }
}
