import Foundation
import PushModels

/// What a pipeline seal is bound to: the record it travels in. It is the associated
/// data of the seal, so a sealed payload or token copied into another record (another
/// notification, realm, user or device) fails to open.
public struct SealBinding: Sendable, Equatable {
    /// What is sealed; part of the binding, so a sealed token never opens as a payload.
    public enum Purpose: String, Sendable {
        case payload
        case token
        /// A provider body the relay can read (legacy Zulip notifications) on `push.outbound`.
        case body
    }

    public var purpose: Purpose
    public var notificationID: NotificationID
    public var realmUUID: RealmID
    public var userID: Int64?
    public var deviceID: DeviceID?

    public init(
        purpose: Purpose, notificationID: NotificationID, realmUUID: RealmID, userID: Int64?, deviceID: DeviceID?
    ) {
        self.purpose = purpose
        self.notificationID = notificationID
        self.realmUUID = realmUUID
        self.userID = userID
        self.deviceID = deviceID
    }

    /// A notification's plaintext on `push.requests`.
    public static func payload(notificationID: NotificationID, realmUUID: RealmID, userID: Int64?) -> SealBinding {
        SealBinding(
            purpose: .payload, notificationID: notificationID, realmUUID: realmUUID, userID: userID, deviceID: nil)
    }

    /// A device token on `push.outbound`, the retry topics and `push.deadletter`. The
    /// device id names the user too (outbound records carry no user id).
    public static func token(notificationID: NotificationID, realmUUID: RealmID, deviceID: DeviceID) -> SealBinding {
        SealBinding(
            purpose: .token, notificationID: notificationID, realmUUID: realmUUID, userID: nil, deviceID: deviceID)
    }

    /// A readable provider body on `push.outbound`, the retry topics and `push.deadletter`.
    public static func body(notificationID: NotificationID, realmUUID: RealmID, deviceID: DeviceID) -> SealBinding {
        SealBinding(
            purpose: .body, notificationID: notificationID, realmUUID: realmUUID, userID: nil, deviceID: deviceID)
    }

    /// The canonical encoding: a version label, then each field as a 4-byte big-endian
    /// length and its bytes (absent ids as empty), so no two bindings encode alike.
    public var associatedData: [UInt8] {
        let user = userID.map(String.init) ?? ""
        let device = deviceID.map(\.description) ?? ""
        return LengthPrefixed.encode(
            label: "pushrelay.pipeline.v2",
            purpose.rawValue, notificationID.rawValue, realmUUID.rawValue, user, device)
    }
}

/// The associated data of the relay's seals: a label, then each field as its UTF-8
/// length (4 bytes, big-endian) and its bytes, written into one buffer sized once.
enum LengthPrefixed {
    static func encode(label: StaticString, _ fields: String...) -> [UInt8] {
        var size = label.utf8CodeUnitCount
        for field in fields { size += 4 + field.utf8.count }
        var out: [UInt8] = []
        out.reserveCapacity(size)
        out.append(contentsOf: UnsafeBufferPointer(start: label.utf8Start, count: label.utf8CodeUnitCount))
        for field in fields {
            let length = UInt32(clamping: field.utf8.count)
            out.append(UInt8(truncatingIfNeeded: length >> 24))
            out.append(UInt8(truncatingIfNeeded: length >> 16))
            out.append(UInt8(truncatingIfNeeded: length >> 8))
            out.append(UInt8(truncatingIfNeeded: length))
            out.append(contentsOf: field.utf8)
        }
        return out
    }
}

/// The pipeline keys that seal notification plaintext on `push.requests` and device
/// tokens on `push.outbound`, the retry topics and `push.deadletter`. Ingest, encryptor
/// and dispatcher load them. The file holds one `key_id:base64(32 bytes)` per line; the
/// first line is the key new records are sealed with, the rest still open older records.
public struct PipelineKeyring: Sendable {
    public let currentKeyID: String
    private let keys: [String: [UInt8]]

    public init(keys: [(id: String, key: [UInt8])]) throws(CryptoError) {
        guard let first = keys.first else { throw CryptoError(.invalidKey, "the pipeline keyring is empty") }
        var map: [String: [UInt8]] = [:]
        for (id, key) in keys {
            guard key.count == SecretBox.keyLength else {
                throw CryptoError(.invalidKey, "pipeline key '\(id)' must be 32 bytes")
            }
            map[id] = key
        }
        self.currentKeyID = first.id
        self.keys = map
    }

    public init(fileContents: String) throws(CryptoError) {
        try self.init(keys: try KeyFile.parse(fileContents, what: "pipeline"))
    }

    public static func load(path: String) throws -> PipelineKeyring {
        try PipelineKeyring(fileContents: String(contentsOfFile: path, encoding: .utf8))
    }

    /// A fresh key line, for dev setups and key rotation.
    public static func generateLine(id: String) -> String {
        KeyFile.generateLine(id: id)
    }

    /// Seals with the current key, bound to `binding` (XChaCha20-Poly1305, the binding
    /// as associated data).
    public func seal(_ plaintext: [UInt8], binding: SealBinding) throws(CryptoError) -> SealedBlob {
        let box = try XChaCha20Poly1305.seal(plaintext, key: currentKey, associatedData: binding.associatedData)
        return SealedBlob(keyID: currentKeyID, alg: .xchacha20poly1305, box: Data(box).base64EncodedString())
    }

    /// Opens a blob sealed for `binding`. A blob of the first form (no `alg`) carries no
    /// binding and opens as it always did, so records already in flight still work.
    public func open(_ blob: SealedBlob, binding: SealBinding) throws(CryptoError) -> [UInt8] {
        guard let key = keys[blob.keyID] else {
            throw CryptoError(.invalidKey, "unknown pipeline key id '\(blob.keyID)'")
        }
        guard let data = Data(base64Encoded: blob.box) else {
            throw CryptoError(.invalidCiphertext, "sealed payload is not base64")
        }
        switch blob.alg {
        case nil:
            return try SecretBox.open(Array(data), key: key)
        case .xchacha20poly1305?:
            return try XChaCha20Poly1305.open(Array(data), key: key, associatedData: binding.associatedData)
        case let other?:
            throw CryptoError(.invalidCiphertext, "unknown seal algorithm '\(other.rawValue)'")
        }
    }

    // The current key is always present: the initialiser requires a first key.
    private var currentKey: [UInt8] { keys[currentKeyID] ?? [] }
}

/// The key file format shared by the pipeline and storage keyrings: one
/// `key_id:base64(32 bytes)` per line, `#` comments and blank lines ignored.
enum KeyFile {
    static func parse(_ contents: String, what: String) throws(CryptoError) -> [(id: String, key: [UInt8])] {
        var parsed: [(id: String, key: [UInt8])] = []
        for line in contents.split(whereSeparator: \.isNewline) {
            let trimmed = line.trimmingCharacters(in: .whitespaces)
            if trimmed.isEmpty || trimmed.hasPrefix("#") { continue }
            let parts = trimmed.split(separator: ":", maxSplits: 1)
            guard parts.count == 2, let data = Data(base64Encoded: String(parts[1])) else {
                throw CryptoError(.invalidKey, "\(what) key lines are key_id:base64")
            }
            parsed.append((String(parts[0]), Array(data)))
        }
        return parsed
    }

    static func generateLine(id: String) -> String {
        "\(id):\(Data(Sodium.randomBytes(SecretBox.keyLength)).base64EncodedString())"
    }
}

/// The relay's X25519 key pairs that realms seal `encrypted_push_registration` to.
/// Several may be active so a key can be rotated without breaking older servers.
/// The file holds one base64 secret key per line.
public struct BouncerKeyring: Sendable {
    public let pairs: [BoxKeyPair]

    public init(pairs: [BoxKeyPair]) {
        self.pairs = pairs
    }

    public init(fileContents: String) throws(CryptoError) {
        var pairs: [BoxKeyPair] = []
        for line in fileContents.split(whereSeparator: \.isNewline) {
            let trimmed = line.trimmingCharacters(in: .whitespaces)
            if trimmed.isEmpty || trimmed.hasPrefix("#") { continue }
            guard let data = Data(base64Encoded: trimmed) else {
                throw CryptoError(.invalidKey, "bouncer key lines are base64 X25519 secret keys")
            }
            pairs.append(try BoxKeyPair(secretKey: Array(data)))
        }
        guard !pairs.isEmpty else { throw CryptoError(.invalidKey, "the bouncer keyring is empty") }
        self.pairs = pairs
    }

    public static func load(path: String) throws -> BouncerKeyring {
        try BouncerKeyring(fileContents: String(contentsOfFile: path, encoding: .utf8))
    }

    public static func generateLine() throws -> String {
        Data(try BoxKeyPair.generate().secretKey).base64EncodedString()
    }

    public var publicKeysBase64: [String] { pairs.map { Data($0.publicKey).base64EncodedString() } }

    /// The pair whose public key the realm named, if the relay holds it.
    public func pair(forPublicKeyBase64 text: String) -> BoxKeyPair? {
        guard let data = Data(base64Encoded: text) else { return nil }
        let bytes = Array(data)
        return pairs.first { $0.publicKey == bytes }
    }
}
