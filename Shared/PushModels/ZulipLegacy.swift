/// How Zulip's push bouncer turns a self-hosted server's legacy (non-E2EE) request
/// (`remotes/push/notify`, `remotes/push/test_notification`) into provider requests,
/// per docs/api/zulip.md §5.4 and §5.5. Pure functions over `JSONValue`: the
/// payloads come from another server, so nothing here traps on their numbers or shapes.
public enum ZulipLegacy {
    /// An error with Zulip's exact message, answered 400 `BAD_REQUEST` by ingest.
    public struct PayloadError: Error, Equatable, Sendable, CustomStringConvertible {
        public var message: String

        public init(message: String) {
            self.message = message
        }

        public var description: String { message }
    }

    // MARK: FCM options

    /// The FCM priority a legacy request asks for (Zulip's `parse_fcm_options`).
    ///
    /// `gcm_options.priority` when present and not null; otherwise `high` for a
    /// `message` event and `normal` for anything else (servers that predate the option).
    /// A priority other than `high`/`normal` is refused with its Python `repr`, as Zulip
    /// words it; any other option is refused with the JSON of the options left after
    /// `priority` is taken out (Zulip pops it first).
    public static func fcmPriority(gcmOptions: JSONValue?, gcmPayload: JSONValue) throws(PayloadError)
        -> String
    {
        var options: [String: JSONValue]
        switch gcmOptions {
        case nil, .null?: options = [:]
        case .object(let fields)?: options = fields
        case let other?:
            throw PayloadError(message: "Invalid GCM options to bouncer: \(jsonText(other))")
        }
        let priority: String
        switch options.removeValue(forKey: "priority") {
        case nil, .null?:
            priority = gcmPayload["event"] == .string("message") ? "high" : "normal"
        case .string(let p)? where p == "high" || p == "normal":
            priority = p
        case let other?:
            throw PayloadError(message: "Invalid GCM option to bouncer: priority \(pythonRepr(other))")
        }
        guard options.isEmpty else {
            throw PayloadError(message: "Invalid GCM options to bouncer: \(jsonText(.object(options)))")
        }
        return priority
    }

    // MARK: Removals

    /// Zulip keeps the newest 200 ids of a removal so the APNs payload stays under 4 KB.
    public static let maximumRemovalIDs = 200

    /// Rewrites `zulip_message_ids` of a removal to its 200 largest ids, ascending, in
    /// `gcm` and in `apns.custom.zulip` (Zulip's `truncate_payload` in
    /// `remote_server_notify_push`). As in Zulip, each payload is judged on its own:
    /// it is rewritten when its own `event` is `"remove"` and its `zulip_message_ids` is a
    /// non-empty string. A list with an entry that `UInt64(_:)` does not take (where Zulip
    /// would fail with a 500) leaves that payload unchanged.
    public static func truncatingRemoval(apns: JSONValue, gcm: JSONValue) -> (
        apns: JSONValue, gcm: JSONValue
    ) {
        var newGCM = gcm
        if case .object(let fields) = gcm {
            newGCM = .object(truncatingRemovalIDs(fields))
        }
        var newAPNs = apns
        if case .object(var top) = apns, case .object(var custom)? = top["custom"],
            case .object(let zulip)? = custom["zulip"]
        {
            custom["zulip"] = .object(truncatingRemovalIDs(zulip))
            top["custom"] = .object(custom)
            newAPNs = .object(top)
        }
        return (newAPNs, newGCM)
    }

    private static func truncatingRemovalIDs(_ payload: [String: JSONValue]) -> [String: JSONValue] {
        guard payload["event"] == .string("remove"),
            case .string(let text)? = payload["zulip_message_ids"],
            !text.isEmpty
        else { return payload }
        var ids: [UInt64] = []
        for part in text.split(separator: ",", omittingEmptySubsequences: false) {
            guard let id = UInt64(part) else { return payload }
            ids.append(id)
        }
        ids.sort()
        var rewritten = payload
        rewritten["zulip_message_ids"] = .string(
            ids.suffix(maximumRemovalIDs).map { String($0) }.joined(separator: ","))
        return rewritten
    }

    // MARK: APNs

    /// The APNs request body for a legacy payload (Zulip's `send_apple_push_notification`):
    /// every key of `custom` at top level, and `aps` = every other key of the payload,
    /// unchanged. `aps` wins over a custom key of the same name; a `custom` that is not
    /// an object is dropped. A pre-1.7 payload (top-level `message_ids`) is first
    /// rewritten to the current form, as Zulip's `modernize_apns_payload` does.
    public static func apnsBody(_ apnsPayload: JSONValue) -> JSONValue {
        var aps = modernized(apnsPayload.objectValue ?? [:])
        var body: [String: JSONValue] = [:]
        if case .object(let custom)? = aps.removeValue(forKey: "custom") {
            body = custom
        }
        body["aps"] = .object(aps)
        return .object(body)
    }

    /// Zulip 1.6 sent `{"alert": str, "message_ids": [id]}`; Zulip still accepts it.
    private static func modernized(_ payload: [String: JSONValue]) -> [String: JSONValue] {
        guard let messageIDs = payload["message_ids"] else { return payload }
        var current: [String: JSONValue] = [
            "badge": .int(0),
            "custom": .object(["zulip": .object(["message_ids": messageIDs])]),
        ]
        current["alert"] = payload["alert"]
        return current
    }

    /// `apns-push-type` and `apns-priority` for a legacy push. Zulip sends neither, and
    /// APNs then treats the push as an alert at priority 10; we say so explicitly, except
    /// for a payload that is plainly a background update (`content-available` with no
    /// `alert`, `sound` or `badge`), which APNs requires to be `background` at 5.
    public static func apnsDelivery(_ apnsPayload: JSONValue) -> (pushType: String, priority: Int) {
        let aps = apnsBody(apnsPayload)["aps"]?.objectValue ?? [:]
        let visible = aps["alert"] != nil || aps["sound"] != nil || aps["badge"] != nil
        if aps["content-available"] != nil && !visible {
            return ("background", 5)
        }
        return ("alert", 10)
    }

    // MARK: FCM data

    /// The FCM `data` map of a legacy payload: every value as Python's `str()` makes it
    /// (Zulip's `send_android_push_notification`), so an Android client sees the same
    /// strings as from Zulip's bouncer, `True`/`None` spellings included. Not an object → `{}`.
    public static func fcmData(_ gcmPayload: JSONValue) -> JSONValue {
        .object((gcmPayload.objectValue ?? [:]).mapValues { .string(pythonStr($0)) })
    }

    /// Python's `str()` of a decoded JSON value: a string is itself, anything else its `repr`.
    public static func pythonStr(_ value: JSONValue) -> String {
        if case .string(let s) = value { return s }
        return pythonRepr(value)
    }

    /// Python's `repr()` of a decoded JSON value. Objects are written in sorted key
    /// order: `JSONValue` does not keep the order the keys arrived in.
    public static func pythonRepr(_ value: JSONValue) -> String {
        var out = ""
        writeRepr(value, into: &out)
        return out
    }

    private static func writeRepr(_ value: JSONValue, into out: inout String) {
        switch value {
        case .null: out += "None"
        case .bool(let b): out += b ? "True" : "False"
        case .int(let i): out += String(i)
        case .double(let d): out += pythonFloatRepr(d)
        case .string(let s): writeStringRepr(s, into: &out)
        case .array(let items):
            out += "["
            for (i, item) in items.enumerated() {
                if i > 0 { out += ", " }
                writeRepr(item, into: &out)
            }
            out += "]"
        case .object(let fields):
            out += "{"
            for (i, (key, item)) in fields.sorted(by: { $0.key < $1.key }).enumerated() {
                if i > 0 { out += ", " }
                writeStringRepr(key, into: &out)
                out += ": "
                writeRepr(item, into: &out)
            }
            out += "}"
        }
    }

    /// CPython's `unicode_repr`: single quotes unless the text holds `'` and no `"`.
    private static func writeStringRepr(_ s: String, into out: inout String) {
        let scalars = s.unicodeScalars
        let quote: Unicode.Scalar = scalars.contains("'") && !scalars.contains("\"") ? "\"" : "'"
        out.unicodeScalars.append(quote)
        for scalar in scalars {
            switch scalar {
            case quote, "\\":
                out += "\\"
                out.unicodeScalars.append(scalar)
            case "\t": out += "\\t"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            default:
                let v = scalar.value
                if v < 0x20 || v == 0x7F {
                    out += "\\x" + hex(v, width: 2)
                } else if v < 0x7F || isPythonPrintable(scalar) {
                    out.unicodeScalars.append(scalar)
                } else if v <= 0xFF {
                    out += "\\x" + hex(v, width: 2)
                } else if v <= 0xFFFF {
                    out += "\\u" + hex(v, width: 4)
                } else {
                    out += "\\U" + hex(v, width: 8)
                }
            }
        }
        out.unicodeScalars.append(quote)
    }

    /// `str.isprintable()` for one character: not in Cc, Cf, Cs, Co, Cn, Zl, Zp or Zs
    /// (the space itself excepted). Unicode versions may differ from Python's at the edges.
    private static func isPythonPrintable(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar.properties.generalCategory {
        case .control, .format, .surrogate, .privateUse, .unassigned, .lineSeparator,
            .paragraphSeparator,
            .spaceSeparator:
            scalar == " "
        default: true
        }
    }

    private static func hex(_ value: UInt32, width: Int) -> String {
        let digits = String(value, radix: 16)
        return String(repeating: "0", count: max(0, width - digits.count)) + digits
    }

    /// Python's `repr(float)`: the shortest digits that round-trip (Swift's `description`
    /// finds the same ones), laid out Python's way: scientific when the decimal exponent
    /// is below -4 or at least 16 (`1e+16`, `1e-05`), else positional with at least
    /// one fractional digit (`1700000000.0`).
    static func pythonFloatRepr(_ d: Double) -> String {
        if d.isNaN { return "nan" }
        if d.isInfinite { return d < 0 ? "-inf" : "inf" }
        let sign = d.sign == .minus ? "-" : ""
        let text = d.magnitude.description
        var mantissa = Substring(text)
        var exponent = 0
        if let e = text.firstIndex(where: { $0 == "e" || $0 == "E" }) {
            mantissa = text[..<e]
            exponent = Int(text[text.index(after: e)...]) ?? 0
        }
        let point = mantissa.firstIndex(of: ".")
        let integerPart = point.map { mantissa[..<$0] } ?? mantissa
        let fractionPart = point.map { mantissa[mantissa.index(after: $0)...] } ?? ""
        var digits = Array(integerPart.utf8) + Array(fractionPart.utf8)
        // The value is 0.d1d2d3… × 10^decimalPoint.
        var decimalPoint = integerPart.utf8.count + exponent
        let leadingZeros = digits.prefix { $0 == UInt8(ascii: "0") }.count
        digits.removeFirst(leadingZeros)
        decimalPoint -= leadingZeros
        while digits.last == UInt8(ascii: "0") { digits.removeLast() }
        guard !digits.isEmpty else { return sign + "0.0" }

        let digitText = String(decoding: digits, as: UTF8.self)
        let scientific = decimalPoint - 1
        if scientific < -4 || scientific >= 16 {
            let head = String(decoding: digits.prefix(1), as: UTF8.self)
            let tail = String(decoding: digits.dropFirst(), as: UTF8.self)
            let magnitude = String(scientific.magnitude)
            return sign + head + (tail.isEmpty ? "" : "." + tail) + "e" + (scientific < 0 ? "-" : "+")
                + (magnitude.count < 2 ? "0" : "") + magnitude
        }
        if decimalPoint <= 0 {
            return sign + "0." + String(repeating: "0", count: -decimalPoint) + digitText
        }
        if decimalPoint >= digits.count {
            return sign + digitText + String(repeating: "0", count: decimalPoint - digits.count) + ".0"
        }
        return sign + String(decoding: digits.prefix(decimalPoint), as: UTF8.self) + "."
            + String(decoding: digits.dropFirst(decimalPoint), as: UTF8.self)
    }

    // MARK: Test notifications

    /// The payloads of `remotes/push/test_notification` (Zulip's
    /// `send_test_push_notification_directly_to_devices`): `base_payload` plus
    /// `"event": "test"`; for APNs a legacy payload (to be passed to `apnsBody`) with an
    /// English alert, for FCM the payload plus `"time"` (sent at priority `high`).
    /// `realm_url` falls back to `realm_uri` when absent or null; a missing name or URL
    /// reads `None`, as Python would format it.
    public static func testNotification(basePayload: JSONValue, nowSeconds: Int64) -> (
        apns: JSONValue, gcm: JSONValue
    ) {
        let base = basePayload.objectValue ?? [:]
        var payload = base
        payload["event"] = "test"
        let realmURL =
            base["realm_url"].flatMap { $0 == .null ? nil : $0 } ?? base["realm_uri"] ?? .null
        let realmName = base["realm_name"] ?? .null
        let apns: JSONValue = [
            "alert": [
                "title": "Test notification",
                "body": .string(
                    "This is a test notification from \(pythonStr(realmName)) (\(pythonStr(realmURL)))."),
            ],
            "sound": "default",
            "custom": ["zulip": .object(payload)],
        ]
        var gcm = payload
        gcm["time"] = .int(nowSeconds)
        return (apns, .object(gcm))
    }

    private static func jsonText(_ value: JSONValue) -> String {
        String(decoding: Wire.canonical(value), as: UTF8.self)
    }
}
