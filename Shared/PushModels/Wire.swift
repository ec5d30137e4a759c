import Foundation

/// The one place that decides how records and payloads are encoded: compact JSON with
/// sorted keys and unescaped slashes, which is also the form Zulip servers encrypt.
public enum Wire {
    public static func encoder() -> JSONEncoder {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return encoder
    }

    public static func encode<T: Encodable>(_ value: T) throws -> [UInt8] {
        Array(try encoder().encode(value))
    }

    public static func decode<T: Decodable>(_ type: T.Type, from bytes: some Collection<UInt8>) throws -> T {
        try JSONDecoder().decode(type, from: Data(bytes))
    }

    /// Canonical bytes of a JSON value (compact, sorted keys).
    public static func canonical(_ value: JSONValue) -> [UInt8] {
        // Encoding a JSONValue cannot fail: it holds only JSON-representable values,
        // except non-finite doubles, which the decoder never produces.
        (try? encode(value)) ?? Array("null".utf8)
    }

    public static func nowMillis() -> Int64 {
        Int64((Date().timeIntervalSince1970 * 1000).rounded())
    }
}
