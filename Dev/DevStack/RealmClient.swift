import AsyncHTTPClient
import FakeProviders
import Foundation
import PushCrypto
import PushModels

/// A realm host (e.g. a self-hosted Zulip server) as the tests drive it: its own
/// server credentials and realm, so each test is isolated from the others.
public struct RealmClient: Sendable {
    public let stack: Stack
    public let serverUUID: String
    public let apiKey: String
    public let realmUUID: String
    /// The HTTP client its requests go through (load runs pass one with a large pool).
    public let client: HTTPClient

    public init(stack: Stack, serverUUID: String = UUID().uuidString.lowercased(), client: HTTPClient = .shared) {
        self.stack = stack
        self.client = client
        self.serverUUID = serverUUID
        self.apiKey = (0..<64).map { _ in String("abcdefghijklmnopqrstuvwxyz0123456789".randomElement()!) }.joined()
        self.realmUUID = UUID().uuidString.lowercased()
    }

    public var auth: (String, String) { (serverUUID, apiKey) }

    public static func registered(_ stack: Stack, client http: HTTPClient = .shared) async throws -> RealmClient {
        let client = RealmClient(stack: stack, client: http)
        let reply = try await client.registerServer()
        guard reply.status == 200 else { throw StackError("server registration failed: \(reply.status)") }
        let realm = try await client.registerRealm()
        guard realm.status == 201 else { throw StackError("realm registration failed: \(realm.status)") }
        return client
    }

    /// Registers the client's realm to its server (`POST /v1/realms`), the explicit
    /// ownership step both APIs rely on.
    public func registerRealm(_ realm: String? = nil) async throws -> HTTP.Reply {
        try await HTTP.send(
            "POST", "\(stack.ingestURL)/v1/realms", json: ["realm_uuid": .string(realm ?? realmUUID)], auth: auth,
            client: client)
    }

    public func registerServer() async throws -> HTTP.Reply {
        let form =
            "zulip_org_id=\(serverUUID)&zulip_org_key=\(apiKey)&hostname=zulip.example.com&contact_email=admin%40example.com"
        return try await HTTP.send(
            "POST", "\(stack.ingestURL)/api/v1/remotes/server/register", body: Array(form.utf8),
            contentType: "application/x-www-form-urlencoded")
    }

    public static func apnsToken() -> String {
        (0..<32).map { _ in String(format: "%02x", UInt8.random(in: 0...255)) }.joined()
    }
    public static func fcmToken() -> String { "fcm:" + UUID().uuidString + UUID().uuidString }

    /// A fresh device push key (33-byte tagged secretbox key).
    public static func pushKey() throws -> PushKey {
        try PushKey(tagged: [0x31] + (0..<32).map { _ in UInt8.random(in: 0...255) })
    }

    /// `encrypted_push_registration`: the registration JSON sealed to the relay's bouncer key.
    public func sealedRegistration(kind: String, token: String, appID: String?, timestamp: Int64? = nil) throws
        -> String
    {
        let fields: [String: JSONValue] = [
            "token": .string(token), "token_kind": .string(kind),
            "timestamp": .int(timestamp ?? Int64(Date().timeIntervalSince1970)),
            "ios_app_id": appID.map { .string($0) } ?? .null,
        ]
        let publicKey = Array(Data(base64Encoded: stack.bouncerPublicKey) ?? Data())
        return Data(try SealedBox.seal(Wire.canonical(.object(fields)), to: publicKey)).base64EncodedString()
    }

    public func bouncerRegister(kind: String, token: String, appID: String?, pushAccountID: Int64) async throws
        -> HTTP.Reply
    {
        try await HTTP.send(
            "POST", "\(stack.ingestURL)/api/v1/remotes/push/e2ee/register",
            json: [
                "realm_uuid": .string(realmUUID), "push_account_id": .int(pushAccountID),
                "encrypted_push_registration": .string(try sealedRegistration(kind: kind, token: token, appID: appID)),
                "bouncer_public_key": .string(stack.bouncerPublicKey),
            ], auth: auth)
    }

    public func registerDevice(
        userID: Int64, kind: String, token: String, appID: String? = nil, key: PushKey, keyID: Int64
    ) async throws -> HTTP.Reply {
        var body: [String: JSONValue] = [
            "realm_uuid": .string(realmUUID), "user_id": .int(userID), "token_kind": .string(kind),
            "token": .string(token), "push_key": .string(key.base64), "push_key_id": .int(keyID),
        ]
        if let appID { body["ios_app_id"] = .string(appID) }
        return try await HTTP.send("POST", "\(stack.ingestURL)/v1/devices", json: .object(body), auth: auth)
    }

    /// Registers a device through the native API and returns its id.
    public func device(userID: Int64, kind: String, token: String, key: PushKey, keyID: Int64 = 1) async throws -> Int64
    {
        let reply = try await registerDevice(
            userID: userID, kind: kind, token: token, appID: kind == "apns" ? "org.zulip.Zulip" : nil, key: key,
            keyID: keyID)
        guard let id = reply.json["device_id"]?.intValue else {
            throw StackError(
                "device registration failed: \(reply.status) \(String(decoding: reply.body, as: UTF8.self))")
        }
        return id
    }

    public func notify(
        userID: Int64, payload: JSONValue, deviceIDs: [Int64]? = nil, headers: [(String, String)] = []
    ) async throws -> HTTP.Reply {
        var body: [String: JSONValue] = ["realm_uuid": .string(realmUUID), "user_id": .int(userID), "payload": payload]
        if let deviceIDs { body["device_ids"] = .array(deviceIDs.map { .int($0) }) }
        return try await HTTP.send(
            "POST", "\(stack.ingestURL)/v1/notify", json: .object(body), auth: auth, headers: headers, client: client)
    }

    public func feedback(after cursor: String? = nil) async throws -> HTTP.Reply {
        var url = "\(stack.ingestURL)/v1/feedback?realm_uuid=\(realmUUID)"
        if let cursor { url += "&after=\(cursor)" }
        return try await HTTP.get(url, auth: auth)
    }

    public func messagePayload(userID: Int64, messageID: Int64, content: String = "hello") -> JSONValue {
        [
            "channel_id": 10, "channel_name": "Denmark", "content": .string(content), "message_id": .int(messageID),
            "realm_name": "Zulip Dev", "realm_url": "http://zulip.testserver", "recipient_type": "channel",
            "sender_avatar_url": "https://secure.gravatar.com/avatar/x?d=identicon&version=1",
            "sender_full_name": "aaron", "sender_id": 6, "time": 1_754_385_395, "topic": "test", "type": "message",
            "user_id": .int(userID),
        ]
    }

    public func removePayload(userID: Int64, messageIDs: [Int64]) -> JSONValue {
        [
            "message_ids": .array(messageIDs.map { .int($0) }), "realm_name": "Zulip Dev",
            "realm_url": "http://zulip.testserver", "type": "remove", "user_id": .int(userID),
        ]
    }
}

extension ReceivedPush {
    /// Decrypts `encrypted_data` with the device's key.
    public func decrypt(with key: PushKey) throws -> [UInt8] {
        guard let encrypted = body["encrypted_data"]?.stringValue else { throw StackError("no encrypted_data") }
        return try key.decrypt(encrypted)
    }
}
