/// Telegram's notification content (its "Handling PUSH-notifications" page, docs/
/// protocols.md §5.3), which the native API takes besides Zulip's payload:
/// `{"data": {"loc_key", "loc_args", "user_id", "custom", "sound", …}}`. The object is
/// encrypted for the device as it was sent; the relay reads only what decides delivery.
public struct TelegramNotification: Sendable, Equatable {
    /// Service notifications update the app's state and show nothing: sent as
    /// background (APNs priority 5, FCM normal, Web Push `Urgency: normal`).
    public static let serviceKeys: Set<String> = [
        "DC_UPDATE", "MESSAGE_DELETED", "READ_HISTORY", "GEO_LIVE_PENDING", "SESSION_REVOKE", "MESSAGE_MUTED",
    ]
    static let maxLocKeyBytes = 64

    public var locKey: String
    public var locArgs: [String]
    public var userID: Int64?

    /// Whether a payload is Telegram's shape (a `data` object and no Zulip `type`).
    public static func isTelegram(_ json: JSONValue) -> Bool {
        json["data"]?.objectValue != nil && json["type"] == nil
    }

    public init(validating json: JSONValue, path: String = "payload") throws(PayloadValidationError) {
        guard let object = json.objectValue, let data = object["data"], data.objectValue != nil else {
            throw PayloadValidationError(field: "\(path).data", problem: "must be a JSON object")
        }
        let reader = FieldReader(json: data, path: "\(path).data")
        let locKey = try reader.string("loc_key")
        guard !locKey.isEmpty, locKey.utf8.count <= Self.maxLocKeyBytes,
            locKey.utf8.allSatisfy({ (0x41...0x5a).contains($0) || (0x30...0x39).contains($0) || $0 == 0x5f })
        else {
            throw reader.error("loc_key", "must match [A-Z_0-9]+ (at most \(Self.maxLocKeyBytes) characters)")
        }
        self.locKey = locKey
        var args: [String] = []
        if let raw = data["loc_args"] {
            guard let array = raw.arrayValue else { throw reader.error("loc_args", "must be an array of strings") }
            for value in array {
                guard let text = value.stringValue else {
                    throw reader.error("loc_args", "must be an array of strings")
                }
                args.append(text)
            }
        }
        self.locArgs = args
        // Telegram sends the account id as a number; a decimal string is taken too.
        switch data["user_id"] {
        case nil: userID = nil
        case .int(let id)?: userID = id
        case .string(let text)? where Int64(text) != nil: userID = Int64(text)
        default: throw reader.error("user_id", "must be an integer")
        }
        if let custom = data["custom"], custom.objectValue == nil {
            throw reader.error("custom", "must be a JSON object")
        }
        for key in ["sound", "announcement"] {
            if let value = data[key], value.stringValue == nil { throw reader.error(key, "must be a string") }
        }
    }

    /// Service notifications go as background pushes; the rest alert.
    public var type: NotificationType {
        Self.serviceKeys.contains(locKey) ? .remove : .message
    }
}
