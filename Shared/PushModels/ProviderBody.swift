/// Provider bodies in the shapes Zulip's apps expect (docs/protocols.md §1).
public enum ProviderBody {
    /// The body for a payload the relay encrypted: APNs JSON with `aps`, or the FCM data map.
    public static func encrypted(provider: Provider, pushKeyID: UInt32, encryptedData: String, type: NotificationType)
        -> JSONValue
    {
        switch provider {
        case .apns:
            // Background pushes (removals) must not carry an alert; APNs wakes the app with content-available.
            let aps: JSONValue =
                type.isAlert
                ? ["mutable-content": 1, "alert": ["title": "New notification"]]
                : ["content-available": 1]
            return ["push_key_id": .int(Int64(pushKeyID)), "encrypted_data": .string(encryptedData), "aps": aps]
        case .apnsVoIP:
            // PushKit hands the whole payload to the app; VoIP pushes show no alert of their own.
            return ["push_key_id": .int(Int64(pushKeyID)), "encrypted_data": .string(encryptedData)]
        case .fcm, .hms, .wns, .webpush, .simplepush:
            // FCM and Huawei data values are strings; WNS raw and Web Push carry these bytes as they are.
            return ["push_key_id": .string(String(pushKeyID)), "encrypted_data": .string(encryptedData)]
        }
    }

    /// The body for a payload encrypted with Telegram's MTProto scheme (docs/protocols.md
    /// §5): `{"p": base64url(auth_key_id ‖ msg_key ‖ ciphertext)}`, the FCM data map, or
    /// the APNs VoIP payload.
    public static func mtproto(_ p: String) -> JSONValue {
        ["p": .string(p)]
    }

    /// The body of a Web Push message: the `aes128gcm` bytes (RFC 8291), base64url in a
    /// JSON object because topic records carry text. The dispatcher POSTs the bytes.
    public static func webPush(_ encrypted: [UInt8]) -> JSONValue {
        ["content_encoding": "aes128gcm", "payload": .string(Base64URL.encode(encrypted))]
    }

    /// A simple push wake-up: only the `version` number the dispatcher PUTs (the
    /// acceptance time, so distinct notifications give distinct numbers).
    public static func wakeUp(version: Int64) -> JSONValue {
        ["version": .int(version)]
    }

    /// The bytes a Web Push body carries, or nil when the body is not one.
    public static func webPushBytes(_ body: JSONValue) -> [UInt8]? {
        guard body["content_encoding"]?.stringValue == "aes128gcm", let payload = body["payload"]?.stringValue
        else { return nil }
        return Base64URL.decode(payload)
    }

    /// The body for a payload the realm already encrypted: APNs gets it unchanged; FCM
    /// data values must be strings, so numbers become their decimal text.
    public static func passThrough(provider: Provider, payload: JSONValue) -> JSONValue {
        switch provider {
        case .apns, .apnsVoIP, .webpush, .simplepush, .wns:
            return payload
        case .fcm, .hms:
            var data: [String: JSONValue] = [:]
            for (key, value) in payload.objectValue ?? [:] {
                switch value {
                case .string(let s): data[key] = .string(s)
                case .int(let i): data[key] = .string(String(i))
                default: data[key] = .string(String(decoding: Wire.canonical(value), as: UTF8.self))
                }
            }
            return .object(data)
        }
    }
}
