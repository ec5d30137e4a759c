/// Syntax rules for identifiers that come from outside (requests, records, settings).
/// Lengths are counted in UTF-8 bytes, never in characters: a string of combining marks
/// is one character and megabytes long.
public enum Syntax {
    /// Largest hostname Zulip's server registration may carry (RFC 1035 name plus `:port`).
    public static let maxHostnameBytes = 255
    public static let maxEmailBytes = 254
    /// Apple limits bundle ids to 155 characters; the VoIP topic adds `.voip`.
    public static let maxBundleIDBytes = 155

    /// A DNS name or IP address, optionally with `:port`: ASCII letters, digits, `-`, `.`,
    /// `:` (port, IPv6) and `[`/`]` (IPv6 literals).
    public static func isHostname(_ text: String) -> Bool {
        let bytes = text.utf8
        guard !bytes.isEmpty, bytes.count <= maxHostnameBytes else { return false }
        return bytes.allSatisfy {
            $0.isASCIIAlphanumeric || $0 == UInt8(ascii: "-") || $0 == UInt8(ascii: ".")
                || $0 == UInt8(ascii: ":") || $0 == UInt8(ascii: "[") || $0 == UInt8(ascii: "]")
        }
    }

    /// A contact address: printable, no white space or control characters, one `@`
    /// with text on both sides. Non-ASCII letters are allowed (internationalised mail).
    public static func isEmail(_ text: String) -> Bool {
        let bytes = text.utf8
        guard bytes.count >= 3, bytes.count <= maxEmailBytes, !hasControlOrSpace(text) else { return false }
        let parts = text.split(separator: "@", omittingEmptySubsequences: false)
        return parts.count == 2 && !parts[0].isEmpty && !parts[1].isEmpty
    }

    /// An Apple bundle id (reverse-DNS): segments of ASCII letters, digits and `-`,
    /// separated by single dots, at least two segments.
    public static func isBundleID(_ text: String) -> Bool {
        let bytes = text.utf8
        guard !bytes.isEmpty, bytes.count <= maxBundleIDBytes else { return false }
        let segments = text.split(separator: ".", omittingEmptySubsequences: false)
        guard segments.count >= 2 else { return false }
        return segments.allSatisfy { segment in
            !segment.isEmpty && segment.utf8.allSatisfy { $0.isASCIIAlphanumeric || $0 == UInt8(ascii: "-") }
        }
    }

    /// An app id as Zulip's bouncer takes it (`^[.a-zA-Z0-9-]+$`), at most
    /// `maxBundleIDBytes`: safe as the `apns-topic` header.
    public static func isZulipAppID(_ text: String) -> Bool {
        let bytes = text.utf8
        return !bytes.isEmpty && bytes.count <= maxBundleIDBytes
            && bytes.allSatisfy { $0.isASCIIAlphanumeric || $0 == UInt8(ascii: "-") || $0 == UInt8(ascii: ".") }
    }

    /// An API key as Zulip generates them: exactly `length` ASCII letters and digits.
    public static func isAPIKey(_ text: String, length: Int = 64) -> Bool {
        text.utf8.count == length && text.utf8.allSatisfy(\.isASCIIAlphanumeric)
    }

    /// An opaque client-chosen key (for example `Idempotency-Key`): 1 to `maxBytes`
    /// visible ASCII characters.
    public static func isVisibleASCII(_ text: String, maxBytes: Int) -> Bool {
        let bytes = text.utf8
        return !bytes.isEmpty && bytes.count <= maxBytes && bytes.allSatisfy { (0x21...0x7e).contains($0) }
    }

    /// True when the text holds a C0/C1 control character, NUL, or any white space.
    public static func hasControlOrSpace(_ text: String) -> Bool {
        text.unicodeScalars.contains { scalar in
            scalar.value < 0x21 || (0x7f...0x9f).contains(scalar.value) || scalar.properties.isWhitespace
        }
    }

    /// The key per-address limits count under: IPv4 addresses as they are, IPv6 ones by
    /// their /64 prefix (the block one subscriber usually holds), so an attacker cannot
    /// take a fresh bucket per address.
    public static func clientLimitKey(_ address: String) -> String {
        guard address.contains(":"), !address.contains(".") else { return address }
        let halves = address.split(separator: "::", maxSplits: 1, omittingEmptySubsequences: false)
        let head = halves.first.map { $0.split(separator: ":").map(String.init) } ?? []
        let tail = halves.count > 1 ? halves[1].split(separator: ":").map(String.init) : []
        let zeros = Array(repeating: "0", count: max(0, 8 - head.count - tail.count))
        let groups = (head + (halves.count > 1 ? zeros : []) + tail).prefix(4).map { $0.lowercased() }
        return groups.joined(separator: ":") + "::/64"
    }

    /// A decimal unsigned integer of ASCII digits only (no sign, no other scripts' digits),
    /// that fits in UInt64.
    /// The value of one hex digit of either case; nil for anything else.
    public static func hexValue(_ digit: UInt8) -> UInt8? {
        switch digit {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): digit - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): digit - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): digit - UInt8(ascii: "A") + 10
        default: nil
        }
    }

    /// The lowercase hex digit of a value 0...15.
    public static func hexDigit(_ value: UInt8) -> UInt8 {
        value < 10 ? UInt8(ascii: "0") + value : UInt8(ascii: "a") + value - 10
    }

    /// Bytes from hex digits of either case (an even count); nil for anything else.
    public static func bytes(fromHex digits: some Collection<UInt8>) -> [UInt8]? {
        guard digits.count % 2 == 0 else { return nil }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(digits.count / 2)
        var index = digits.startIndex
        while index != digits.endIndex {
            let next = digits.index(after: index)
            guard let high = hexValue(digits[index]), let low = hexValue(digits[next]) else { return nil }
            bytes.append(high << 4 | low)
            index = digits.index(after: next)
        }
        return bytes
    }

    /// A uuid in its one canonical text form, 8-4-4-4-12 hex digits (either case), as
    /// lowercase; nil for anything else (braces, no dashes, trailing bytes).
    public static func canonicalUUID(_ text: String) -> String? {
        var text = text
        return text.withUTF8 { canonicalUUID(bytes: $0) }
    }

    public static func canonicalUUID(_ bytes: [UInt8]) -> String? {
        bytes.withUnsafeBufferPointer { canonicalUUID(bytes: $0) }
    }

    private static func canonicalUUID(bytes: UnsafeBufferPointer<UInt8>) -> String? {
        guard bytes.count == 36 else { return nil }
        return String(unsafeUninitializedCapacity: 36) { out in
            for index in 0..<36 {
                let byte = bytes[index]
                if index == 8 || index == 13 || index == 18 || index == 23 {
                    guard byte == UInt8(ascii: "-") else { return 0 }
                    out[index] = byte
                    continue
                }
                switch byte {
                case UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "a")...UInt8(ascii: "f"): out[index] = byte
                case UInt8(ascii: "A")...UInt8(ascii: "F"): out[index] = byte | 0x20
                default: return 0
                }
            }
            return 36
        }.nilIfEmpty
    }

    /// An integer in its one canonical decimal form, as a JSON encoder or `str(int)`
    /// writes it: an optional `-`, then digits without leading zeros. `+5`, `05`, `-0`,
    /// spaces and anything past Int64 are refused (Swift's `Int64(String)` takes `+5`).
    public static func canonicalInt64(_ text: Substring) -> Int64? {
        let digits = text.first == "-" ? text.dropFirst() : text
        guard !digits.isEmpty, digits.utf8.count <= 19, digits.utf8.allSatisfy({ (0x30...0x39).contains($0) }),
            digits.first != "0" || digits.count == 1, !(text.first == "-" && digits == "0")
        else { return nil }
        return Int64(text)
    }

    public static func parseUInt64(_ text: Substring) -> UInt64? {
        guard !text.isEmpty, text.utf8.count <= 20, text.utf8.allSatisfy({ (0x30...0x39).contains($0) }) else {
            return nil
        }
        return UInt64(text)
    }
}

extension UInt8 {
    var isASCIIAlphanumeric: Bool {
        (0x30...0x39).contains(self) || (0x41...0x5a).contains(self) || (0x61...0x7a).contains(self)
    }
}

/// Arithmetic on numbers from outside that must never trap: the result saturates at the
/// type's bounds instead. Use for time stamps, durations and counters read from
/// requests, records, provider answers and settings.
extension FixedWidthInteger {
    public func saturatingAdd(_ other: Self) -> Self {
        let (result, overflow) = addingReportingOverflow(other)
        guard overflow else { return result }
        return other > 0 ? .max : .min
    }

    public func saturatingSubtract(_ other: Self) -> Self {
        let (result, overflow) = subtractingReportingOverflow(other)
        guard overflow else { return result }
        return other > 0 ? .min : .max
    }

    public func saturatingMultiply(_ other: Self) -> Self {
        let (result, overflow) = multipliedReportingOverflow(by: other)
        guard overflow else { return result }
        return (self < 0) == (other < 0) ? .max : .min
    }
}

extension Duration {
    /// Whole milliseconds, saturating at Int64's bounds (a `Duration` holds far more).
    public var saturatingMilliseconds: Int64 {
        let (seconds, attoseconds) = components
        return seconds.saturatingMultiply(1000).saturatingAdd(attoseconds / 1_000_000_000_000_000)
    }

    /// Whole nanoseconds, saturating at Int64's bounds.
    public var saturatingNanoseconds: Int64 {
        let (seconds, attoseconds) = components
        return seconds.saturatingMultiply(1_000_000_000).saturatingAdd(attoseconds / 1_000_000_000)
    }
}

extension String {
    /// Nil for the empty string.
    fileprivate var nilIfEmpty: String? { isEmpty ? nil : self }
}
