import Foundation

/// Canonical JSON bytes of a `JSONValue` without going through `JSONEncoder`: compact,
/// keys sorted, slashes unescaped — byte for byte what `Wire.encoder()` writes (the
/// tests compare both), several times faster on the hot path (provider bodies).
enum JSONWriter {
    static func write(_ value: JSONValue, into out: inout [UInt8]) {
        switch value {
        case .null: out.append(contentsOf: [0x6E, 0x75, 0x6C, 0x6C])
        case .bool(let b):
            if b {
                out.append(contentsOf: [0x74, 0x72, 0x75, 0x65])  // true
            } else {
                out.append(contentsOf: [0x66, 0x61, 0x6C, 0x73, 0x65])  // false
            }
        case .int(let i): writeInteger(i, into: &out)
        case .double(let d):
            // Rare in payloads: let the encoder format it exactly as it always has.
            out.append(contentsOf: (try? Wire.encoder().encode(d)) ?? Data("null".utf8))
        case .string(let s): writeString(s, into: &out)
        case .array(let items):
            out.append(UInt8(ascii: "["))
            for (i, item) in items.enumerated() {
                if i > 0 { out.append(UInt8(ascii: ",")) }
                write(item, into: &out)
            }
            out.append(UInt8(ascii: "]"))
        case .object(let fields):
            out.append(UInt8(ascii: "{"))
            // Sorted as pairs: no second hash lookup per key.
            for (i, field) in fields.sorted(by: { $0.key < $1.key }).enumerated() {
                if i > 0 { out.append(UInt8(ascii: ",")) }
                writeString(field.key, into: &out)
                out.append(UInt8(ascii: ":"))
                write(field.value, into: &out)
            }
            out.append(UInt8(ascii: "}"))
        }
    }

    /// Decimal digits of `value`, without a `String` in between.
    static func writeInteger(_ value: Int64, into out: inout [UInt8]) {
        if value < 0 { out.append(UInt8(ascii: "-")) }
        var magnitude = value.magnitude
        var digits: (UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0)
        var count = 0
        withUnsafeMutableBytes(of: &digits) { buffer in
            repeat {
                buffer[count] = UInt8(ascii: "0") + UInt8(magnitude % 10)
                magnitude /= 10
                count += 1
            } while magnitude > 0
            for index in stride(from: count - 1, through: 0, by: -1) { out.append(buffer[index]) }
        }
    }

    static func writeString(_ s: String, into out: inout [UInt8]) {
        var text = s
        text.withUTF8 { writeString(utf8: $0, into: &out) }
    }

    /// A JSON string of UTF-8 text: runs that need no escape (most of any string), found
    /// eight bytes at a time, are copied whole; escapes are appended byte by byte. (A byte
    /// at a time with an array literal per escape, this was 5 % of the encryptor.)
    static func writeString(utf8 bytes: UnsafeBufferPointer<UInt8>, into out: inout [UInt8]) {
        out.append(UInt8(ascii: "\""))
        var runStart = 0
        var index = 0
        while true {
            index = JSONText.firstSpecial(bytes, from: index)
            guard index < bytes.count else { break }
            let byte = bytes[index]
            if runStart < index { out.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[runStart..<index])) }
            index += 1
            runStart = index
            out.append(0x5C)
            switch byte {
            case 0x22, 0x5C: out.append(byte)
            case 0x08: out.append(UInt8(ascii: "b"))
            case 0x0C: out.append(UInt8(ascii: "f"))
            case 0x0A: out.append(UInt8(ascii: "n"))
            case 0x0D: out.append(UInt8(ascii: "r"))
            case 0x09: out.append(UInt8(ascii: "t"))
            default:
                out.append(UInt8(ascii: "u"))
                out.append(0x30)
                out.append(0x30)
                out.append(Syntax.hexDigit(byte >> 4))
                out.append(Syntax.hexDigit(byte & 0x0F))
            }
        }
        if runStart < bytes.count { out.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[runStart...])) }
        out.append(UInt8(ascii: "\""))
    }

}

/// What the JSON reader and writer share about string text.
enum JSONText {
    /// The index of the first byte at or after `start` that a JSON string cannot hold
    /// as it is (a quote, a backslash, a control character below 0x20), or
    /// `bytes.count`. Eight bytes at a time: a word with none of them is skipped whole
    /// (the classic has-zero-byte and has-less-than tests); a word that may hold one is
    /// looked at byte by byte, which decides.
    @inline(__always)
    static func firstSpecial(_ bytes: UnsafeBufferPointer<UInt8>, from start: Int) -> Int {
        let ones: UInt64 = 0x0101_0101_0101_0101
        let highs: UInt64 = 0x8080_8080_8080_8080
        var index = max(start, 0)
        let raw = UnsafeRawBufferPointer(bytes)
        while index + 8 <= raw.count {
            let word = raw.loadUnaligned(fromByteOffset: index, as: UInt64.self)
            let quote = word ^ (ones &* 0x22)
            let backslash = word ^ (ones &* 0x5C)
            let found =
                ((quote &- ones) & ~quote) | ((backslash &- ones) & ~backslash) | ((word &- ones &* 0x20) & ~word)
            if found & highs != 0 { break }
            index += 8
        }
        while index < bytes.count {
            let byte = bytes[index]
            if byte < 0x20 || byte == 0x22 || byte == 0x5C { return index }
            index += 1
        }
        return index
    }
}
