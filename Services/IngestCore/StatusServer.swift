import DeviceState
import Foundation
import Hummingbird
import NIOCore
import PushCrypto
import PushModels
import ServiceKit
import StatusPush
import SwiftProtobuf

/// The Status push server's settings (docs/api/status.md, "Run a Status push server").
public struct StatusSettings: Sendable {
    public var enabled: Bool
    /// The server identity: a secp256k1 private key, 64 hex digits, in this file.
    public var keyFile: String
    /// The realm Status devices are stored under.
    public var realmUUID: RealmID
    /// Most targets in one notification request.
    public var maxTargets: Int
    /// Requests per client address per window: the endpoints take no credentials, and each
    /// request costs a signature recovery.
    public var maxRequests: Int
    public var windowSeconds: Int
    /// The APNs topics (bundle ids) registrations may name: the relay's APNs key is good
    /// for every app of its team, so an anonymous client must not pick the app.
    public var apnsTopics: Set<String>
    /// Whether the endpoints on the API port stay on.
    public var httpEnabled: Bool
    /// The Waku transport: a node's REST API (nil: no Waku), its pubsub topic, the polling
    /// interval, how answers are published, and messages per sender key per window.
    public var waku: WakuSettings?

    public static let defaultRealm = "5f7a7e5b-0c4e-4b7e-8f3a-5354a7f5e001"

    public init(reader: SettingsReader) throws {
        enabled = try reader.bool("pushrelay.status.enabled", default: false)
        keyFile = try reader.string("pushrelay.status.key.file", default: "")
        realmUUID = RealmID(try reader.string("pushrelay.status.realm.uuid", default: Self.defaultRealm))
        maxTargets = try reader.int("pushrelay.status.max.targets", default: 100)
        maxRequests = try reader.int("pushrelay.status.requests.max", default: 600)
        windowSeconds = try reader.int("pushrelay.status.requests.window.seconds", default: 60)
        apnsTopics = Set(try reader.list("pushrelay.status.apns.topics"))
        httpEnabled = try reader.bool("pushrelay.status.http.enabled", default: true)
        let url = try reader.string("pushrelay.status.waku.url", default: "")
        if url.isEmpty {
            waku = nil
        } else {
            guard let parsed = URL(string: url), ["http", "https"].contains(parsed.scheme ?? ""), parsed.host != nil
            else { throw SettingsError("PUSHRELAY_STATUS_WAKU_URL must be an http(s) URL") }
            waku = WakuSettings(
                url: url.hasSuffix("/") ? String(url.dropLast()) : url,
                pubsubTopic: try reader.string("pushrelay.status.waku.pubsub.topic", default: WakuStatus.pubsubTopic),
                pollInterval: try reader.milliseconds("pushrelay.status.waku.poll.interval.ms", default: 250),
                lightpush: try reader.string("pushrelay.status.waku.publish", default: "relay") == "lightpush",
                maxMessages: try reader.int("pushrelay.status.waku.requests.max", default: 600))
        }
    }

    /// The server, or nil when the Status API is off.
    func server() throws -> StatusServer? {
        guard enabled else { return nil }
        guard !keyFile.isEmpty else {
            throw SettingsError("PUSHRELAY_STATUS_KEY_FILE is required when PUSHRELAY_STATUS_ENABLED is true")
        }
        guard !apnsTopics.isEmpty else {
            throw SettingsError(
                "PUSHRELAY_STATUS_APNS_TOPICS (the bundle ids Status registrations may name) is required when PUSHRELAY_STATUS_ENABLED is true"
            )
        }
        guard let realm = UUID(uuidString: realmUUID.rawValue) else {
            throw SettingsError("PUSHRELAY_STATUS_REALM_UUID must be a UUID")
        }
        let text = (try? String(contentsOfFile: keyFile, encoding: .utf8)) ?? ""
        let hex = text.trimmingCharacters(in: .whitespacesAndNewlines)
        guard hex.utf8.count == 64, let bytes = Fingerprint.bytes(fromHex: hex),
            let key = try? Secp256k1.PrivateKey(bytes: bytes)
        else {
            throw SettingsError("PUSHRELAY_STATUS_KEY_FILE must hold a secp256k1 private key as 64 hex digits")
        }
        return try StatusServer(
            key: key, realm: RealmID(realm.uuidString.lowercased()), maxTargets: maxTargets, maxRequests: maxRequests,
            windowSeconds: windowSeconds, apnsTopics: apnsTopics)
    }
}

/// The Status push-notification server's identity and rules (seeds/003): its key, which
/// signs every answer, the realm its devices live in, and its limits.
struct StatusServer: Sendable {
    let key: Secp256k1.PrivateKey
    let publicKey: Secp256k1.PublicKey
    let realm: RealmID
    let maxTargets: Int
    let maxRequests: Int
    let windowSeconds: Int
    let apnsTopics: Set<String>
    /// Installations kept per public key at most.
    static let maxInstallations = 16
    /// The owner the Status realm is registered to: not a server uuid, so no API key logs in as it.
    static let realmOwner: ServerID = "status-push-server"
    /// Largest query answer; past it the remaining installations are left out.
    static let maxAnswerBytes = 1 << 20

    init(
        key: Secp256k1.PrivateKey, realm: RealmID, maxTargets: Int, maxRequests: Int = 600, windowSeconds: Int = 60,
        apnsTopics: Set<String> = []
    ) throws {
        self.key = key
        self.publicKey = try key.publicKey()
        self.realm = realm
        self.maxTargets = maxTargets
        self.maxRequests = maxRequests
        self.windowSeconds = windowSeconds
        self.apnsTopics = apnsTopics
    }

    /// `message` in an envelope signed by the server's key.
    func signed(_ message: some SwiftProtobuf.Message, type: StatusEnvelope.MessageType) throws -> [UInt8] {
        try StatusEnvelope.seal(try message.serializedBytes(), type: type, key: key)
    }

    /// Each registration its own device (the push account id is a hash of key and
    /// installation): two chat keys on one phone share a token, not a device, so removing
    /// one never removes the other's.
    static func pushAccount(hashedKey: String, installation: String) -> Int64 {
        let digest = StatusCrypto.shake256(Array("\(hashedKey)|\(installation)".utf8))
        var value: Int64 = 0
        for byte in digest.prefix(8) { value = (value << 8) | Int64(byte) }
        return value & Int64.max
    }

    /// Registers the Status realm to its reserved owner; false when another server holds it.
    func reserveRealm(_ realms: any RealmRegistry) async throws -> Bool {
        switch try await realms.register(realm, to: Self.realmOwner, maxRealms: Int.max) {
        case .registered, .alreadyYours: true
        case .taken, .quotaExceeded: false
        }
    }

    /// A registration's Redis key part for an installation id (any text): its hash.
    static func installationKey(_ installation: String) -> String {
        Fingerprint.hex(Array(StatusCrypto.shake256(Array(installation.utf8)).prefix(16)))
    }
}
