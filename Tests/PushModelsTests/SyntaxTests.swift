import PushModels
import Testing

/// The syntax rules ingest applies to identifiers from outside, and the checked arithmetic.
@Suite struct SyntaxTests {
    @Test func hostnamesAreASCIIHostNamesCountedInBytes() {
        #expect(Syntax.isHostname("chat.example.com"))
        #expect(Syntax.isHostname("chat.example.com:8443"))
        #expect(Syntax.isHostname("[::1]:9991"))
        #expect(!Syntax.isHostname(""))
        #expect(!Syntax.isHostname("chat\u{0}.example.com"))
        #expect(!Syntax.isHostname("chat.example.com\r\n"))
        #expect(!Syntax.isHostname("é.example.com"))
        #expect(!Syntax.isHostname(String(repeating: "a", count: 256)))
        // One character, 401 bytes.
        #expect(!Syntax.isHostname("a" + String(repeating: "\u{0301}", count: 200)))
    }

    @Test func bundleIDsAndKeys() {
        #expect(Syntax.isBundleID("org.zulip.Zulip"))
        #expect(Syntax.isBundleID("com.example.app-beta"))
        for bad in ["Zulip", "org..zulip", ".org.zulip", "org.zulip.", "org.zulip/x", "org.zulip\u{0}", "org.zülip"] {
            #expect(!Syntax.isBundleID(bad), "\(bad.debugDescription)")
        }
        #expect(Syntax.isAPIKey(String(repeating: "aZ9", count: 21) + "x"))
        #expect(!Syntax.isAPIKey(String(repeating: "a", count: 63) + "\u{0}"))
        #expect(!Syntax.isAPIKey(String(repeating: "é", count: 32)))
        #expect(Syntax.isEmail("admin@example.com"))
        #expect(!Syntax.isEmail("admin@exa mple.com"))
        #expect(!Syntax.isEmail("admin"))
    }

    @Test func decimalsAreASCIIDigitsThatFit() {
        #expect(Syntax.parseUInt64("18446744073709551615") == .max)
        #expect(Syntax.parseUInt64("18446744073709551616") == nil)
        #expect(Syntax.parseUInt64("-1") == nil)
        #expect(Syntax.parseUInt64("+1") == nil)
        #expect(Syntax.parseUInt64("١٢") == nil)
        #expect(Syntax.parseUInt64("") == nil)
    }

    @Test func ipv6AddressesCountPerSlash64() {
        #expect(Syntax.clientLimitKey("203.0.113.7") == "203.0.113.7")
        #expect(Syntax.clientLimitKey("2001:db8:1:2:3:4:5:6") == "2001:db8:1:2::/64")
        #expect(Syntax.clientLimitKey("2001:db8:1:2::9") == Syntax.clientLimitKey("2001:DB8:1:2:ffff::1"))
        #expect(Syntax.clientLimitKey("2001:db8::1") == "2001:db8:0:0::/64")
        #expect(Syntax.clientLimitKey("::1") == "0:0:0:0::/64")
        #expect(Syntax.clientLimitKey("::ffff:192.0.2.1") == "::ffff:192.0.2.1")
    }

    @Test func arithmeticSaturates() {
        #expect(Int64.max.saturatingAdd(1) == .max)
        #expect(Int64.min.saturatingAdd(-1) == .min)
        #expect(Int64.min.saturatingSubtract(1) == .min)
        #expect(Int64.max.saturatingSubtract(-1) == .max)
        #expect(Int64.max.saturatingMultiply(1000) == .max)
        #expect(Int64.min.saturatingMultiply(1000) == .min)
        #expect(Int64(-3).saturatingMultiply(4) == -12)
        #expect(Duration.seconds(Int64.max).saturatingMilliseconds == .max)
        #expect(Duration.milliseconds(1500).saturatingMilliseconds == 1500)
        #expect(Duration.seconds(Int64.max).saturatingNanoseconds == .max)
        #expect(Duration.microseconds(1500).saturatingNanoseconds == 1_500_000)
    }

    /// One canonical text form per uuid: anything before, after or instead of its 36
    /// characters is refused, not read up to where it stops making sense.
    @Test func integersHaveOneCanonicalForm() {
        for (text, value) in [
            ("0", Int64(0)), ("5", 5), ("-5", -5), ("9223372036854775807", .max), ("-9223372036854775808", .min),
        ] {
            #expect(Syntax.canonicalInt64(Substring(text)) == value, "\(text)")
        }
        for bad in ["+5", "05", "-0", "00", " 5", "5 ", "5\u{0}", "", "-", "9223372036854775808", "1e3", "0x10", "٣"] {
            #expect(Syntax.canonicalInt64(Substring(bad)) == nil, "\(bad.debugDescription)")
        }
    }

    @Test func uuidsHaveOneCanonicalForm() {
        let uuid = "0c5b1a3e-7d2f-4e6a-9b8c-1d2e3f4a5b6c"
        #expect(Syntax.canonicalUUID(uuid) == uuid)
        #expect(Syntax.canonicalUUID(uuid.uppercased()) == uuid)
        for bad in [
            uuid + "\u{0}", uuid + "\u{0}junk", uuid + " ", " " + uuid, "{\(uuid)}", String(uuid.filter { $0 != "-" }),
            String(uuid.dropLast()), String(uuid.dropLast()) + "g", "0c5b1a3e-7d2f-4e6a-9b8c_1d2e3f4a5b6c", "",
        ] {
            #expect(Syntax.canonicalUUID(bad) == nil, "\(bad.debugDescription)")
        }
    }
}
