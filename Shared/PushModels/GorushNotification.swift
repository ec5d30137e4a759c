/// One entry of gorush's `POST /api/push` `notifications[]` (gorush's `PushNotification`),
/// checked field by field with gorush's JSON types, and turned into provider bodies the
/// way gorush (apns2, firebase-admin-go, Huawei's SDK) builds them. docs/api/gorush.md has
/// the mapping, and under "Replace gorush" what changes for a caller.
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

    /// Most tokens in one Android or Huawei notification (gorush's limit, FCM's 500
    /// messages per batch). gorush has none for iOS, and neither has the relay.
    public static let maxTokens = 500

    public let platform: Platform
    /// Where it goes: `tokens`, and `to` for Android and Huawei.
    public let tokens: [String]
    /// What gorush's `counts` adds for it: the `tokens` given (not `to`), and one more
    /// for a `topic`, as gorush counts them (an iOS `topic` is the app's bundle id, but
    /// gorush counts it all the same).
    public let counted: Int
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
        var counted = tokens.count
        if object["topic"]?.stringValue.map({ !$0.isEmpty }) == true { counted += 1 }
        // gorush adds `to` for Android and Huawei only; for iOS it is ignored.
        if platform != .ios, let to = object["to"]?.stringValue, !to.isEmpty { tokens.append(to) }
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
        // iOS: gorush sends no `apns-priority` for any other value. FCM refuses the whole
        // notification (firebase-admin-go's check), so Android and Huawei are told here.
        if platform != .ios, let priority = object["priority"]?.stringValue, !["", "high", "normal"].contains(priority)
        {
            throw fail("priority", "must be \"high\" or \"normal\"")
        }
        if object["topic"]?.stringValue.map({ !$0.isEmpty }) == true,
            platform != .ios
                || object["condition"]?.stringValue.map({ !$0.isEmpty }) == true
        {
            throw fail(
                "topic", "sending to FCM or HMS topics and conditions is not supported: give the device tokens")
        }
        guard !tokens.isEmpty else { throw fail("tokens", "please provide at least one device token") }
        guard platform == .ios || tokens.count <= Self.maxTokens else {
            throw fail("tokens", "you can specify up to \(Self.maxTokens) device registration tokens per invocation")
        }
        self.platform = platform
        self.tokens = tokens
        self.counted = counted
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
        self.counted = 0
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

    /// `apns-push-type` and `apns-priority` as gorush (apns2) sends them: `push_type` as
    /// given, else `alert` (nothing is inferred, not even for `content_available` alone);
    /// `priority` `high` 10, `normal` 5, anything else no header. The FCM and Huawei
    /// priorities are in their message bodies (`fcmMessage`, `hmsMessage`), so none is
    /// added to them: without `priority` FCM's default (normal) applies.
    public var delivery: DeliveryClass {
        let priority: APNsPriority?
        switch content["priority"]?.stringValue {
        case "high": priority = .immediate
        case "normal": priority = .considerate
        default: priority = nil
        }
        return DeliveryClass(
            apnsPriority: priority, apnsPushType: Named(string("push_type") ?? "alert"), fcmPriority: nil)
    }

    /// Unix seconds after which APNs drops it (`expiration`, iOS only, when positive:
    /// apns2 sends no `apns-expiration` otherwise); nil leaves the provider its default.
    public var expiresAt: Int64? {
        guard platform == .ios else { return nil }
        return content["expiration"]?.intValue.flatMap { $0 > 0 ? $0 : nil }
    }
    /// `apns-collapse-id` (iOS only: gorush's Android and Huawei messages have their own).
    public var collapseID: String? { platform == .ios ? string("collapse_id") : nil }

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
        if let sound = apnsSound { aps["sound"] = sound }
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

    /// `aps.sound` as gorush and apns2 build it. A string goes as it is (even empty); a
    /// dictionary keeps its `critical` (an integer), `name` and `volume`, the zero ones
    /// left out. A top-level `name` or positive `volume` starts over from apns2's
    /// `{"critical":1,"name":"default","volume":1}` (whatever `sound` said is dropped),
    /// then sets them.
    var apnsSound: JSONValue? {
        var sound: JSONValue?
        switch content["sound"] {
        case .string(let text)?: sound = .string(text)
        case .object(let fields)?:
            // mapstructure's decoding into gorush's Sound: keys matched without case.
            var decoded: [String: JSONValue] = [:]
            for (key, value) in fields {
                switch (key.lowercased(), value) {
                case ("critical", .int(let number)) where number != 0: decoded["critical"] = .int(number)
                case ("critical", .double(let number)) where number.isFinite && abs(number) >= 1 && abs(number) < 1e15:
                    decoded["critical"] = .int(Int64(number))
                case ("name", .string(let name)) where !name.isEmpty: decoded["name"] = .string(name)
                case ("volume", .int(let number)) where number != 0: decoded["volume"] = .int(number)
                case ("volume", .double(let number)) where number != 0: decoded["volume"] = .double(number)
                default: break
                }
            }
            sound = .object(decoded)
        default: sound = nil
        }
        let name = string("name")
        let volume: JSONValue?
        switch content["volume"] {
        case .int(let number)? where number > 0: volume = .int(number)
        case .double(let number)? where number > 0: volume = .double(number)
        default: volume = nil
        }
        guard name != nil || volume != nil else { return sound }
        var reset: [String: JSONValue] = ["critical": .int(1), "name": "default", "volume": .int(1)]
        if let name { reset["name"] = .string(name) }
        if let volume { reset["volume"] = volume }
        return .object(reset)
    }

    /// FCM's `data`: every value a string (strings as they are, anything else as JSON).
    static func stringMap(_ object: [String: JSONValue]) -> [String: JSONValue] {
        object.mapValues { value in
            if let text = value.stringValue { return .string(text) }
            return .string(String(decoding: Wire.canonical(value), as: UTF8.self))
        }
    }

    /// The FCM v1 message fields, without `token`, as gorush builds them with
    /// firebase-admin-go, step by step in its order: the `notification` (and, with
    /// `mutable_content`, an `apns` block that replaces a given one), `content_available`
    /// (an `apns` block with the data in `aps`, replacing again), a string `sound` (into
    /// `apns.payload.aps`, and an `android` block when none was given), then `priority`
    /// into `android`. Without `priority`, `sound` or an `android` block there is no
    /// `android` block at all, so FCM's defaults apply (normal priority, four weeks).
    public func fcmMessage() -> JSONValue {
        var message: [String: JSONValue] = [:]
        var notification =
            content["notification"]?.objectValue?.filter {
                ["title", "body", "image"].contains($0.key) && $0.value.stringValue != nil
            } ?? [:]
        var apns = content["apns"]?.objectValue
        var android = content["android"]?.objectValue
        let title = string("title")
        let body = string("message")
        let image = string("image")
        if title != nil || body != nil || image != nil {
            if let title { notification["title"] = .string(title) }
            if let body { notification["body"] = .string(body) }
            if let image { notification["image"] = .string(image) }
            if flag("mutable_content") { apns = ["payload": ["aps": ["mutable-content": 1]]] }
        }
        if flag("content_available") {
            var aps: [String: JSONValue] = ["content-available": 1]
            for (key, value) in content["data"]?.objectValue ?? [:] { aps[key] = value }
            apns = ["headers": ["apns-priority": "5"], "payload": ["aps": .object(aps)]]
        }
        let priority = string("priority")
        if let sound = content["sound"]?.stringValue {
            var fields = apns ?? [:]
            var payload = fields["payload"]?.objectValue ?? [:]
            var aps = payload["aps"]?.objectValue ?? [:]
            if !sound.isEmpty { aps["sound"] = .string(sound) }
            payload["aps"] = .object(aps)
            fields["payload"] = .object(payload)
            apns = fields
            if android == nil {
                android = ["notification": .object(sound.isEmpty ? [:] : ["sound": .string(sound)])]
                if let priority { android?["priority"] = .string(priority.uppercased()) }
            }
        }
        if let priority, android?["priority"]?.stringValue.map({ $0.isEmpty }) ?? true {
            android = android ?? [:]
            android?["priority"] = .string(priority.uppercased())
        }
        if !notification.isEmpty { message["notification"] = .object(notification) }
        if let data = content["data"]?.objectValue, !data.isEmpty { message["data"] = .object(Self.stringMap(data)) }
        if let apns { message["apns"] = .object(apns) }
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
