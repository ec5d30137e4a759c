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
        case .fcm:
            return ["push_key_id": .string(String(pushKeyID)), "encrypted_data": .string(encryptedData)]
        }
    }

    /// The body for a payload the realm already encrypted: APNs gets it unchanged; FCM
    /// data values must be strings, so numbers become their decimal text.
    public static func passThrough(provider: Provider, payload: JSONValue) -> JSONValue {
        switch provider {
        case .apns:
            return payload
        case .fcm:
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
