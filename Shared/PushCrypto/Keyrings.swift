import Foundation
import PushModels

/// The pipeline keys that seal notification plaintext on `push.requests`. Only ingest
/// and encryptor load them. The file holds one `key_id:base64(32 bytes)` per line; the
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
        var parsed: [(id: String, key: [UInt8])] = []
        for line in fileContents.split(whereSeparator: \.isNewline) {
            let trimmed = line.trimmingCharacters(in: .whitespaces)
            if trimmed.isEmpty || trimmed.hasPrefix("#") { continue }
            let parts = trimmed.split(separator: ":", maxSplits: 1)
            guard parts.count == 2, let data = Data(base64Encoded: String(parts[1])) else {
                throw CryptoError(.invalidKey, "pipeline key lines are key_id:base64")
            }
            parsed.append((String(parts[0]), Array(data)))
        }
        try self.init(keys: parsed)
    }

    public static func load(path: String) throws -> PipelineKeyring {
        try PipelineKeyring(fileContents: String(contentsOfFile: path, encoding: .utf8))
    }

    /// A fresh key line, for dev setups and key rotation.
    public static func generateLine(id: String) -> String {
        "\(id):\(Data(Sodium.randomBytes(SecretBox.keyLength)).base64EncodedString())"
    }

    public func seal(_ plaintext: [UInt8]) throws(CryptoError) -> SealedBlob {
        // The current key is always present: the initialiser requires a first key.
        let key = keys[currentKeyID] ?? []
        let box = try SecretBox.seal(plaintext, key: key)
        return SealedBlob(keyID: currentKeyID, box: Data(box).base64EncodedString())
    }

    public func open(_ blob: SealedBlob) throws(CryptoError) -> [UInt8] {
        guard let key = keys[blob.keyID] else {
            throw CryptoError(.invalidKey, "unknown pipeline key id '\(blob.keyID)'")
        }
        guard let data = Data(base64Encoded: blob.box) else {
            throw CryptoError(.invalidCiphertext, "sealed payload is not base64")
        }
        return try SecretBox.open(Array(data), key: key)
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
