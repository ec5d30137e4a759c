/// One entry of gorush's `POST /api/push` `notifications[]` (gorush's `PushNotification`),
/// checked field by field with gorush's JSON types, and turned into provider bodies the
/// way gorush (apns2, firebase-admin-go, Huawei's SDK) builds them. docs/gorush.md has
/// the mapping; the README's "Replace gorush" what changes for a caller.
public struct GorushNotification: Sendable, Equatable {
    /// gorush's platform numbers.
    public enum Platform: Int, Sendable, CaseIterable {
        case ios = 1
        case android = 2
        case huawei = 3

        /// The name gorush's logs and `/api/stat/app` use.
        public var name: String {
            switch self {
            case .ios: "ios"
            case .android: "android"
            case .huawei: "huawei"
            }
        }

        public var provider: Provider {
            switch self {
            case .ios: .apns
            case .android: .fcm
            case .huawei: .hms
            }
        }

        public init?(provider: Provider) {
            switch provider {
            case .apns: self = .ios
            case .fcm: self = .android
            case .hms: self = .huawei
            default: return nil
            }
        }
    }

    /// Most tokens in one notification (gorush's FCM and HMS limit, applied to every platform).
    public static let maxTokens = 500

    public let platform: Platform
    public let tokens: [String]
    /// The notification without `tokens`: what travels sealed to the encryptor.
    public let content: [String: JSONValue]

    public var notificationID: String? { content["notif_id"]?.stringValue }
    public var message: String { content["message"]?.stringValue ?? "" }
    public var topic: String? { content["topic"]?.stringValue.flatMap { $0.isEmpty ? nil : $0 } }

    static let stringFields: Set<String> = [
        "notif_id", "to", "topic", "message", "title", "image", "priority", "condition", "app_id", "app_secret",
        "huawei_data", "huawei_ttl", "bi_tag", "apns_id", "collapse_id", "push_type", "category", "thread-id", "name",
        "interruption_level", "event", "attributes-type",
    ]
    static let boolFields: Set<String> = ["content_available", "mutable_content", "production", "development"]
    static let intFields: Set<String> = [
        "retry", "huawei_collapse_key", "fast_app_target", "expiration", "badge", "stale-date", "dismissal-date",
        "timestamp",
    ]
    static let numberFields: Set<String> = ["volume", "relevance-score"]
    static let objectFields: Set<String> = [
        "data", "notification", "android", "webpush", "apns", "fcm_options", "huawei_notification", "alert",
        "content-state", "attributes",
    ]
    static let alertStrings: Set<String> = [
        "action", "action-loc-key", "body", "launch-image", "loc-key", "title", "subtitle", "title-loc-key",
        "summary-arg",
    ]

    /// Checks one notification; `path` names it in errors (`notifications[2]`).
    public init(validating json: JSONValue, path: String) throws(PayloadValidationError) {
        guard let object = json.objectValue else {
            throw PayloadValidationError(field: path, problem: "must be an object")
        }
        func fail(_ key: String, _ problem: String) -> PayloadValidationError {
            PayloadValidationError(field: "\(path).\(key)", problem: problem)
        }
        guard let number = object["platform"]?.intValue, let platform = Platform(rawValue: Int(number)) else {
            throw fail("platform", "must be 1 (iOS), 2 (Android) or 3 (Huawei)")
        }
        var tokens: [String] = []
        if let list = object["tokens"], list != .null {
            guard let array = list.arrayValue else { throw fail("tokens", "must be an array of strings") }
            for token in array {
                guard let text = token.stringValue else { throw fail("tokens", "must be an array of strings") }
                tokens.append(text)
            }
        }
        for (key, value) in object where value != .null {
            if Self.stringFields.contains(key), value.stringValue == nil { throw fail(key, "must be a string") }
            if Self.boolFields.contains(key), case .bool = value {
            } else if Self.boolFields.contains(key) {
                throw fail(key, "must be true or false")
            }
            if Self.intFields.contains(key), value.intValue == nil { throw fail(key, "must be an integer") }
            if Self.numberFields.contains(key) {
                switch value {
                case .int, .double: break
                default: throw fail(key, "must be a number")
                }
            }
            if Self.objectFields.contains(key), value.objectValue == nil { throw fail(key, "must be an object") }
        }
        if let to = object["to"]?.stringValue, !to.isEmpty { tokens.append(to) }
        if let alert = object["alert"]?.objectValue {
            for (key, value) in alert where value != .null {
                if Self.alertStrings.contains(key), value.stringValue == nil {
                    throw fail("alert.\(key)", "must be a string")
                }
            }
        }
        if let sound = object["sound"], sound != .null, sound.stringValue == nil, sound.objectValue == nil {
            throw fail("sound", "must be a string or an object")
        }
        if let priority = object["priority"]?.stringValue, !["", "high", "normal"].contains(priority) {
            throw fail("priority", "must be \"high\" or \"normal\"")
        }
        if let expiration = object["expiration"]?.intValue, expiration < 0 {
            throw fail("expiration", "must not be negative")
        }
        if object["topic"]?.stringValue.map({ !$0.isEmpty }) == true,
            platform != .ios
                || object["condition"]?.stringValue.map({ !$0.isEmpty }) == true
        {
            throw fail(
                "topic", "sending to FCM or HMS topics and conditions is not supported: give the device tokens")
        }
        guard !tokens.isEmpty else { throw fail("tokens", "please provide at least one device token") }
        guard tokens.count <= Self.maxTokens else {
            throw fail("tokens", "you can specify up to \(Self.maxTokens) device tokens per notification")
        }
        self.platform = platform
        self.tokens = tokens
        var content = object
        content["tokens"] = nil
        content["to"] = nil
        content["app_secret"] = nil
        self.content = content
    }

    /// Rebuilds a notification from its sealed content (the encryptor's side).
    public init(platform: Platform, content: [String: JSONValue]) {
        self.platform = platform
        self.tokens = []
        self.content = content
    }

    /// What travels sealed on `push.requests`: `{"content": {…}, "platform": n}`.
    public var sealedForm: [UInt8] {
        Wire.canonical(.object(["platform": .int(Int64(platform.rawValue)), "content": .object(content)]))
    }

    /// Reads the sealed form back; nil when it is not one.
    public init?(sealedForm bytes: [UInt8]) {
        guard let json = try? Wire.decode(JSONValue.self, from: bytes),
            let number = json["platform"]?.intValue, let platform = Platform(rawValue: Int(number)),
            let content = json["content"]?.objectValue
        else { return nil }
        self.init(platform: platform, content: content)
    }

    private func string(_ key: String) -> String? {
        guard let text = content[key]?.stringValue, !text.isEmpty else { return nil }
        return text
    }
    private func flag(_ key: String) -> Bool { content[key] == .bool(true) }

    // MARK: Delivery headers

    /// `apns-push-type`, priority and FCM priority, as gorush sends them: `push_type` as
    /// given (gorush's default is `alert`, but a push with only `content_available` is a
    /// background push to APNs, sent at priority 5); `priority` `high` 10, `normal` 5.
    public var delivery: DeliveryClass {
        let background = string("push_type") == nil && flag("content_available") && !hasVisibleAlert
        let pushType = string("push_type") ?? (background ? "background" : "alert")
        let priority: APNsPriority
        switch string("priority") {
        case "high": priority = .immediate
        case "normal": priority = .considerate
        default: priority = background ? .considerate : .immediate
        }
        let fcm: FCMPriority = string("priority") == "normal" ? .normal : .high
        return DeliveryClass(apnsPriority: priority, apnsPushType: Named(pushType), fcmPriority: .known(fcm))
    }

    /// Unix seconds after which APNs drops it (`expiration`); nil keeps the relay's TTL.
    public var expiresAt: Int64? { content["expiration"]?.intValue.flatMap { $0 > 0 ? $0 : nil } }
    public var collapseID: String? { string("collapse_id") }

    private var hasVisibleAlert: Bool {
        string("message") != nil || string("title") != nil || !(content["alert"]?.objectValue ?? [:]).isEmpty
            || content["badge"] != nil || content["sound"] != nil
    }

    // MARK: Bodies

    /// The APNs payload (apns2's builder): `aps` from the fields, `data` at the root.
    public func apnsPayload() -> JSONValue {
        var aps: [String: JSONValue] = [:]
        var alert: [String: JSONValue] = [:]
        if let title = string("title") {
            alert["title"] = .string(title)
            if let message = string("message") { alert["body"] = .string(message) }
        }
        for (key, value) in content["alert"]?.objectValue ?? [:] where value != .null {
            if let text = value.stringValue, text.isEmpty { continue }
            alert[key] = value
        }
        if !alert.isEmpty {
            aps["alert"] = .object(alert)
        } else if let message = string("message") {
            aps["alert"] = .string(message)
        }
        if let badge = content["badge"]?.intValue, badge >= 0 { aps["badge"] = .int(badge) }
        if let sound = content["sound"], sound != .null {
            if let text = sound.stringValue {
                if !text.isEmpty { aps["sound"] = .string(text) }
            } else if let fields = sound.objectValue {
                aps["sound"] = .object(fields.filter { $0.value != .null && $0.value != .string("") })
            }
        }
        if string("name") != nil || content["volume"] != nil {
            var sound =
                aps["sound"]?.objectValue ?? ["critical": .int(1), "name": .string("default"), "volume": .int(1)]
            if let name = string("name") { sound["name"] = .string(name) }
            if let volume = content["volume"], volume != .null { sound["volume"] = volume }
            aps["sound"] = .object(sound)
        }
        if let category = string("category") { aps["category"] = .string(category) }
        if let thread = string("thread-id") { aps["thread-id"] = .string(thread) }
        if let args = content["url-args"], args != .null { aps["url-args"] = args }
        if flag("mutable_content") { aps["mutable-content"] = .int(1) }
        if flag("content_available") { aps["content-available"] = .int(1) }
        if let level = string("interruption_level") { aps["interruption-level"] = .string(level) }
        if let state = content["content-state"], state != .null { aps["content-state"] = state }
        for key in ["stale-date", "dismissal-date", "timestamp"] {
            if let value = content[key]?.intValue, value > 0 { aps[key] = .int(value) }
        }
        if let event = string("event") { aps["event"] = .string(event) }
        if let type = string("attributes-type") { aps["attributes-type"] = .string(type) }
        if let attributes = content["attributes"], attributes != .null { aps["attributes"] = attributes }
        if let score = content["relevance-score"], score != .null { aps["relevance-score"] = score }
        // An `apns.payload` (FCM's form, which callers also send for iOS) adds its keys.
        var root: [String: JSONValue] = [:]
        if let payload = content["apns"]?["payload"]?.objectValue {
            for (key, value) in payload where key != "aps" { root[key] = value }
            for (key, value) in payload["aps"]?.objectValue ?? [:] where aps[key] == nil { aps[key] = value }
        }
        for (key, value) in content["data"]?.objectValue ?? [:] { root[key] = value }
        root["aps"] = .object(aps)
        return .object(root)
    }

    /// FCM's `data`: every value a string (strings as they are, anything else as JSON).
    static func stringMap(_ object: [String: JSONValue]) -> [String: JSONValue] {
        object.mapValues { value in
            if let text = value.stringValue { return .string(text) }
            return .string(String(decoding: Wire.canonical(value), as: UTF8.self))
        }
    }

    /// The FCM v1 message fields, without `token` (firebase-admin-go's mapping in gorush).
    public func fcmMessage() -> JSONValue {
        var message: [String: JSONValue] = [:]
        var notification =
            content["notification"]?.objectValue?.filter {
                ["title", "body", "image"].contains($0.key) && $0.value.stringValue != nil
            } ?? [:]
        if let title = string("title") { notification["title"] = .string(title) }
        if let body = string("message") { notification["body"] = .string(body) }
        if let image = string("image") { notification["image"] = .string(image) }
        if !notification.isEmpty { message["notification"] = .object(notification) }
        if let data = content["data"]?.objectValue, !data.isEmpty { message["data"] = .object(Self.stringMap(data)) }
        var android = content["android"]?.objectValue
        if let priority = string("priority"), android?["priority"]?.stringValue.map({ $0.isEmpty }) ?? true {
            android = android ?? [:]
            android?["priority"] = .string(priority.uppercased())
        }
        if let sound = string("sound") {
            var apns = content["apns"]?.objectValue ?? [:]
            var payload = apns["payload"]?.objectValue ?? [:]
            var aps = payload["aps"]?.objectValue ?? [:]
            aps["sound"] = .string(sound)
            payload["aps"] = .object(aps)
            apns["payload"] = .object(payload)
            message["apns"] = .object(apns)
            if content["android"]?.objectValue == nil {
                var fields = android ?? [:]
                fields["notification"] = .object(["sound": .string(sound)])
                android = fields
            }
        } else if let apns = content["apns"], apns.objectValue != nil {
            message["apns"] = apns
        }
        if flag("mutable_content"), !notification.isEmpty {
            message["apns"] = .object(["payload": .object(["aps": .object(["mutable-content": .int(1)])])])
        }
        if flag("content_available") {
            var aps: [String: JSONValue] = ["content-available": .int(1)]
            for (key, value) in content["data"]?.objectValue ?? [:] { aps[key] = value }
            message["apns"] = .object([
                "headers": .object(["apns-priority": .string("5")]), "payload": .object(["aps": .object(aps)]),
            ])
        }
        if let android { message["android"] = .object(android) }
        for key in ["webpush", "fcm_options"] {
            if let value = content[key], value.objectValue != nil { message[key] = value }
        }
        return .object(message)
    }

    /// The Huawei Push Kit message fields, without `token` (gorush's HMS mapping).
    public func hmsMessage() -> JSONValue {
        var android: [String: JSONValue] = [:]
        var notification = content["huawei_notification"]?.objectValue ?? [:]
        if let title = string("title") { notification["title"] = .string(title) }
        if let body = string("message") { notification["body"] = .string(body) }
        if let image = string("image") { notification["image"] = .string(image) }
        if let sound = string("sound") {
            notification["sound"] = .string(sound)
        } else if !notification.isEmpty {
            notification["default_sound"] = .bool(true)
        }
        if !notification.isEmpty {
            if notification["click_action"] == nil { notification["click_action"] = .object(["type": .int(3)]) }
            android["notification"] = .object(notification)
        }
        if string("priority") == "high" { android["urgency"] = .string("HIGH") }
        if let collapse = content["huawei_collapse_key"]?.intValue { android["collapse_key"] = .int(collapse) }
        if let category = string("category") { android["category"] = .string(category) }
        if let ttl = string("huawei_ttl") { android["ttl"] = .string(ttl) }
        if let tag = string("bi_tag") { android["bi_tag"] = .string(tag) }
        if let target = content["fast_app_target"]?.intValue { android["fast_app_target"] = .int(target) }
        var message: [String: JSONValue] = [:]
        if !android.isEmpty { message["android"] = .object(android) }
        if let data = string("huawei_data") {
            message["data"] = .string(data)
        } else if let data = content["data"]?.objectValue, !data.isEmpty {
            message["data"] = .string(String(decoding: Wire.canonical(.object(data)), as: UTF8.self))
        }
        return .object(message)
    }

    /// gorush's `hideToken(token, 10)`: short tokens all `*`, longer ones with their first
    /// and last ten characters starred.
    public static func maskedToken(_ token: String) -> String {
        let characters = Array(token)
        guard !characters.isEmpty else { return "" }
        guard characters.count >= 20 else { return String(repeating: "*", count: characters.count) }
        return String(repeating: "*", count: 10) + String(characters[10..<(characters.count - 10)])
            + String(repeating: "*", count: 10)
    }
}
