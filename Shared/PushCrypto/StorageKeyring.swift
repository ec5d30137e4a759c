import PushModels
import Crypto
import Foundation

/// Where a secret is stored: the record and the field. It is the associated data of
/// the stored ciphertext, so a value copied to another device or field fails to open.
/// It names the record by id, not by Redis key, so a key prefix change keeps data readable.
public struct StorageSlot: Sendable, Equatable {
    public var record: String
    public var field: String

    public init(record: String, field: String) {
        self.record = record
        self.field = field
    }

    /// A device's token.
    public static func deviceToken(_ deviceID: DeviceID) -> StorageSlot {
        StorageSlot(record: "device:\(deviceID)", field: "token")
    }

    /// One of a device's push keys, by its push key id.
    public static func devicePushKey(_ deviceID: DeviceID, keyID: UInt32) -> StorageSlot {
        StorageSlot(record: "device:\(deviceID)", field: "push_key:\(keyID)")
    }

    /// A server's feedback-hook signing secret (gorush's API).
    public static func hookSecret(server: ServerID) -> StorageSlot {
        StorageSlot(record: "server:\(server)", field: "hook_secret")
    }

    /// A Status registration (the decrypted protobuf), by hashed key and installation.
    public static func statusRegistration(key: String, installation: String) -> StorageSlot {
        StorageSlot(record: "status:\(key):\(installation)", field: "registration")
    }

    var associatedData: [UInt8] {
        LengthPrefixed.encode(label: "pushrelay.storage.v1", record, field)
    }
}

/// The storage keys that encrypt device tokens and push keys in Redis. Only the stages
/// that read or write devices load them. The file holds one `key_id:base64(32 bytes)` per
/// line, like the pipeline keys: the first line encrypts new values, the rest only
/// decrypt, so a key rotates by adding a new first line and dropping the old one once
/// every value was rewritten.
///
/// A stored value is `v1:<key_id>:<base64(nonce(24) || ciphertext || MAC(16))>`
/// (XChaCha20-Poly1305, the `StorageSlot` as associated data). A value without the
/// `v1:` prefix is the first, cleartext form, and reads as itself.
public struct StorageKeyring: Sendable {
    public static let prefix = "v1:"

    public let currentKeyID: String
    /// Key ids, current first.
    public let keyIDs: [String]
    private let keys: [String: [UInt8]]
    /// Per key: the HMAC key of the token index, derived so it never equals the encryption key.
    private let indexKeys: [String: [UInt8]]

    public init(keys: [(id: String, key: [UInt8])]) throws(CryptoError) {
        guard let first = keys.first else { throw CryptoError(.invalidKey, "the storage keyring is empty") }
        var map: [String: [UInt8]] = [:]
        var index: [String: [UInt8]] = [:]
        var ids: [String] = []
        for (id, key) in keys {
            guard Self.isValidKeyID(id) else {
                throw CryptoError(.invalidKey, "storage key id '\(id)' must be 1 to 32 of A-Z a-z 0-9 . _ -")
            }
            guard key.count == XChaCha20Poly1305.keyLength else {
                throw CryptoError(.invalidKey, "storage key '\(id)' must be 32 bytes")
            }
            guard map[id] == nil else { throw CryptoError(.invalidKey, "storage key id '\(id)' appears twice") }
            map[id] = key
            index[id] = Array(
                HMAC<SHA256>.authenticationCode(
                    for: Array("pushrelay.storage.v1 token index".utf8), using: SymmetricKey(data: key)))
            ids.append(id)
        }
        self.currentKeyID = first.id
        self.keyIDs = ids
        self.keys = map
        self.indexKeys = index
    }

    public init(fileContents: String) throws(CryptoError) {
        try self.init(keys: try KeyFile.parse(fileContents, what: "storage"))
    }

    /// A fresh key line, for dev setups and key rotation.
    public static func generateLine(id: String) -> String {
        KeyFile.generateLine(id: id)
    }

    /// True for the encrypted form; false for the first, cleartext form.
    public static func isSealed(_ stored: String) -> Bool {
        stored.hasPrefix(prefix)
    }

    /// Encrypts `plaintext` for `slot` with the current key: `v1:<key_id>:<base64>`.
    public func seal(_ plaintext: some Collection<UInt8>, slot: StorageSlot) throws(CryptoError) -> String {
        let key = keys[currentKeyID] ?? []
        let sealed = try XChaCha20Poly1305.seal(plaintext, key: key, associatedData: slot.associatedData)
        return "\(Self.prefix)\(currentKeyID):\(Data(sealed).base64EncodedString())"
    }

    /// Decrypts a value in the `v1:` form. Fails on an unknown key id, on a value
    /// encrypted for another slot, and on anything not in that form.
    public func open(_ stored: String, slot: StorageSlot) throws(CryptoError) -> [UInt8] {
        // Read byte-wise: splitting the text walked every Character of the base64, and the
        // base64 went through two copies as text (~25 % of this call's instructions).
        enum Parsed {
            case notSealed, malformed, notBase64
            case unknownKey(String)
            case sealed(key: [UInt8], bytes: [UInt8])
        }
        var stored = stored
        let parsed = stored.withUTF8 { text -> Parsed in
            let prefix = Self.prefix.utf8
            guard text.count >= prefix.count, text.starts(with: prefix) else { return .notSealed }
            let rest = text[prefix.count...]
            guard let colon = rest.firstIndex(of: UInt8(ascii: ":")) else { return .malformed }
            let keyID = String(decoding: UnsafeBufferPointer(rebasing: text[prefix.count..<colon]), as: UTF8.self)
            guard let key = keys[keyID] else { return .unknownKey(keyID) }
            let base64 = Data(UnsafeBufferPointer(rebasing: text[(colon + 1)...]))
            guard let data = Data(base64Encoded: base64) else { return .notBase64 }
            return .sealed(key: key, bytes: [UInt8](data))
        }
        switch parsed {
        case .notSealed: throw CryptoError(.invalidCiphertext, "stored value is not encrypted")
        case .malformed: throw CryptoError(.invalidCiphertext, "stored value is not v1:key_id:base64")
        case .unknownKey(let id): throw CryptoError(.invalidKey, "unknown storage key id '\(id)'")
        case .notBase64: throw CryptoError(.invalidCiphertext, "stored value is not base64")
        case .sealed(let key, let bytes):
            return try XChaCha20Poly1305.open(bytes, key: key, associatedData: slot.associatedData)
        }
    }

    /// Encrypts a text value (a token).
    public func sealString(_ text: String, slot: StorageSlot) throws(CryptoError) -> String {
        try seal(Array(text.utf8), slot: slot)
    }

    /// Reads a stored text value in either form: decrypted when sealed, as it is when
    /// it is the first, cleartext form.
    public func openString(_ stored: String, slot: StorageSlot) throws(CryptoError) -> String {
        guard Self.isSealed(stored) else { return stored }
        let bytes = try open(stored, slot: slot)
        guard let text = String(validating: bytes, as: UTF8.self) else {
            throw CryptoError(.invalidCiphertext, "stored text is not UTF-8")
        }
        return text
    }

    /// The keyed digests (hex HMAC-SHA-256) a token is indexed under, one per key,
    /// current first: new entries use the first; the others find entries written before
    /// a rotation.
    public func tokenDigests(_ token: String) -> [String] {
        keyIDs.map { id in
            Fingerprint.hex(
                HMAC<SHA256>.authenticationCode(for: Array(token.utf8), using: SymmetricKey(data: indexKeys[id] ?? [])))
        }
    }

    static func isValidKeyID(_ id: String) -> Bool {
        let utf8 = Array(id.utf8)
        guard (1...32).contains(utf8.count) else { return false }
        return utf8.allSatisfy { b in
            (b >= 0x30 && b <= 0x39) || (b >= 0x41 && b <= 0x5A) || (b >= 0x61 && b <= 0x7A) || b == 0x2E || b == 0x5F
                || b == 0x2D
        }
    }
}

/// The server-side pepper API keys are hashed with: stored API keys are
/// HMAC-SHA-256(pepper, key), so a copy of Redis alone does not let anyone test guesses.
/// The file holds the base64 of at least 32 random bytes (`#` comments allowed).
public struct APIKeyPepper: Sendable {
    private let key: [UInt8]

    public init(bytes: [UInt8]) throws(CryptoError) {
        guard bytes.count >= 32 else { throw CryptoError(.invalidKey, "the API key pepper must be at least 32 bytes") }
        self.key = bytes
    }

    public init(fileContents: String) throws(CryptoError) {
        let lines = fileContents.split(whereSeparator: \.isNewline)
            .map { $0.trimmingCharacters(in: .whitespaces) }
            .filter { !$0.isEmpty && !$0.hasPrefix("#") }
        guard lines.count == 1, let data = Data(base64Encoded: lines[0]) else {
            throw CryptoError(.invalidKey, "the API key pepper file holds one line: base64 of at least 32 bytes")
        }
        try self.init(bytes: Array(data))
    }

    /// A fresh pepper line, for dev setups.
    public static func generateLine() -> String {
        Data(Sodium.randomBytes(32)).base64EncodedString()
    }

    /// HMAC-SHA-256 of the API key under the pepper, lower-case hex: what is stored.
    public func hmacHex(_ apiKey: String) -> String {
        Fingerprint.hex(hmac(apiKey))
    }

    /// Constant-time check of an API key against a stored `hmacHex`.
    public func verify(_ apiKey: String, hmacHex stored: String) -> Bool {
        guard let storedBytes = Fingerprint.bytes(fromHex: stored) else { return false }
        return constantTimeEquals(hmac(apiKey), storedBytes)
    }

    private func hmac(_ apiKey: String) -> [UInt8] {
        Array(HMAC<SHA256>.authenticationCode(for: Array(apiKey.utf8), using: SymmetricKey(data: key)))
    }
}
