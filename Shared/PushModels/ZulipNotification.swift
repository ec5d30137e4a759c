/// The kind of a Zulip notification; selects the provider priority and push type.
public enum NotificationType: String, Sendable, Codable, CaseIterable {
    case message
    case remove
    case test

    /// Message and test notifications alert the user; removals are silent background updates.
    public var isAlert: Bool { self != .remove }
}

/// A payload field that failed validation, named so the realm can fix its request.
public struct PayloadValidationError: Error, Sendable, Equatable, CustomStringConvertible {
    /// Dotted path of the offending field, for example `payload.recipient_user_ids`.
    public var field: String
    public var problem: String

    public init(field: String, problem: String) {
        self.field = field
        self.problem = problem
    }

    public var description: String { "\(field): \(problem)" }
}

/// A validated Zulip plaintext notification (the JSON a device decrypts), per
/// docs/protocols.md §1. The original JSON is kept so it is encrypted exactly as sent.
public struct ZulipNotification: Sendable, Equatable {
    public enum Recipient: Sendable, Equatable {
        case channel(id: Int64, name: String, topic: String, mentionedGroup: (id: Int64, name: String)?)
        case direct(recipientUserIDs: [Int64])

        public static func == (lhs: Recipient, rhs: Recipient) -> Bool {
            switch (lhs, rhs) {
            case let (.channel(a, b, c, d), .channel(e, f, g, h)):
                a == e && b == f && c == g && d?.id == h?.id && d?.name == h?.name
            case let (.direct(a), .direct(b)): a == b
            default: false
            }
        }
    }

    public struct Message: Sendable, Equatable {
        public var senderID: Int64
        public var senderFullName: String
        public var senderAvatarURL: String
        public var messageID: Int64
        public var time: Int64
        public var content: String
        public var recipient: Recipient
    }

    public enum Body: Sendable, Equatable {
        case message(Message)
        case remove(messageIDs: [Int64])
        case test(time: Int64)
    }

    public var realmURL: String
    public var realmName: String
    public var userID: Int64
    public var body: Body
    /// The JSON object exactly as received.
    public var json: JSONValue

    public var type: NotificationType {
        switch body {
        case .message: .message
        case .remove: .remove
        case .test: .test
        }
    }

    /// Validates `json` as a Zulip notification; errors name the field under `path`.
    public init(validating json: JSONValue, path: String = "payload") throws(PayloadValidationError) {
        var reader = FieldReader(json: json, path: path)
        guard json.objectValue != nil else {
            throw PayloadValidationError(field: path, problem: "must be a JSON object, not \(json.typeName)")
        }
        let typeName = try reader.string("type")
        guard let type = NotificationType(rawValue: typeName) else {
            throw PayloadValidationError(
                field: "\(path).type",
                problem: "unknown notification type '\(typeName)'; expected message, remove or test")
        }
        self.realmURL = try reader.string("realm_url")
        self.realmName = try reader.string("realm_name")
        self.userID = try reader.int("user_id")
        self.json = json
        switch type {
        case .test:
            self.body = .test(time: try reader.int("time"))
        case .remove:
            let ids = try reader.intArray("message_ids")
            guard !ids.isEmpty else {
                throw PayloadValidationError(field: "\(path).message_ids", problem: "must not be empty")
            }
            self.body = .remove(messageIDs: ids)
        case .message:
            let senderID = try reader.int("sender_id")
            let message = Message(
                senderID: senderID,
                senderFullName: try reader.string("sender_full_name"),
                senderAvatarURL: try reader.string("sender_avatar_url"),
                messageID: try reader.int("message_id"),
                time: try reader.int("time"),
                content: try reader.string("content"),
                recipient: try Self.recipient(&reader, userID: userID, senderID: senderID))
            self.body = .message(message)
        }
    }

    private static func recipient(
        _ reader: inout FieldReader, userID: Int64, senderID: Int64
    ) throws(PayloadValidationError) -> Recipient {
        let kind = try reader.string("recipient_type")
        switch kind {
        case "channel":
            let groupID = try reader.optionalInt("mentioned_user_group_id")
            let groupName = try reader.optionalString("mentioned_user_group_name")
            guard (groupID == nil) == (groupName == nil) else {
                throw reader.error(
                    groupID == nil ? "mentioned_user_group_id" : "mentioned_user_group_name",
                    "mentioned_user_group_id and mentioned_user_group_name come together")
            }
            let group = groupID.flatMap { id in groupName.map { (id: id, name: $0) } }
            return .channel(
                id: try reader.int("channel_id"), name: try reader.string("channel_name"),
                topic: try reader.string("topic"), mentionedGroup: group)
        case "direct":
            if reader.has("recipient_user_ids") {
                let ids = try reader.intArray("recipient_user_ids")
                guard ids == ids.sorted() else {
                    throw reader.error("recipient_user_ids", "must be sorted ascending")
                }
                guard ids.contains(userID), ids.contains(senderID) else {
                    throw reader.error("recipient_user_ids", "must include user_id and sender_id")
                }
                return .direct(recipientUserIDs: ids)
            }
            // Servers before feature level 429 send `pm_users` only for group DMs.
            if reader.has("pm_users") {
                let text = try reader.string("pm_users")
                var ids: [Int64] = []
                for part in text.split(separator: ",", omittingEmptySubsequences: false) {
                    guard let id = Int64(part.trimmingWhitespace()) else {
                        throw reader.error("pm_users", "must be a comma-separated list of user ids")
                    }
                    ids.append(id)
                }
                return .direct(recipientUserIDs: ids.sorted())
            }
            return .direct(recipientUserIDs: [userID, senderID].sorted())
        default:
            throw reader.error("recipient_type", "unknown recipient_type '\(kind)'; expected channel or direct")
        }
    }
}

extension Substring {
    fileprivate func trimmingWhitespace() -> Substring {
        var s = self
        while s.first == " " { s.removeFirst() }
        while s.last == " " { s.removeLast() }
        return s
    }
}

/// Reads typed fields from a JSON object, turning every mismatch into a
/// `PayloadValidationError` that names the field.
public struct FieldReader: Sendable {
    public let json: JSONValue
    public let path: String

    public init(json: JSONValue, path: String) {
        self.json = json
        self.path = path
    }

    public func error(_ key: String, _ problem: String) -> PayloadValidationError {
        PayloadValidationError(field: path.isEmpty ? key : "\(path).\(key)", problem: problem)
    }

    public func has(_ key: String) -> Bool {
        if let v = json[key], v != .null { return true }
        return false
    }

    private func required(_ key: String) throws(PayloadValidationError) -> JSONValue {
        guard let value = json[key], value != .null else { throw error(key, "is required") }
        return value
    }

    public func string(_ key: String) throws(PayloadValidationError) -> String {
        let value = try required(key)
        guard case .string(let s) = value else { throw error(key, "must be a string, not \(value.typeName)") }
        return s
    }

    public func optionalString(_ key: String) throws(PayloadValidationError) -> String? {
        has(key) ? try string(key) : nil
    }

    public func int(_ key: String) throws(PayloadValidationError) -> Int64 {
        let value = try required(key)
        guard case .int(let i) = value else { throw error(key, "must be an integer, not \(value.typeName)") }
        return i
    }

    public func optionalInt(_ key: String) throws(PayloadValidationError) -> Int64? {
        has(key) ? try int(key) : nil
    }

    public func object(_ key: String) throws(PayloadValidationError) -> JSONValue {
        let value = try required(key)
        guard case .object = value else { throw error(key, "must be an object, not \(value.typeName)") }
        return value
    }

    public func intArray(_ key: String) throws(PayloadValidationError) -> [Int64] {
        let value = try required(key)
        guard case .array(let items) = value else {
            throw error(key, "must be an array of integers, not \(value.typeName)")
        }
        var result: [Int64] = []
        result.reserveCapacity(items.count)
        for (index, item) in items.enumerated() {
            guard case .int(let i) = item else {
                throw error("\(key)[\(index)]", "must be an integer, not \(item.typeName)")
            }
            result.append(i)
        }
        return result
    }
}
