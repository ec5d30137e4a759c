import Crypto
import Foundation
import PushModels

/// A device's push key as Zulip clients register it: base64 of 33 bytes, a scheme tag
/// byte followed by the 32-byte key. Only tag 0x31 (libsodium secretbox) exists in
/// Zulip's API. A Telegram-style device `secret` (256 bytes, MTProto 2.0) is stored the
/// same way under the relay's own tag 0x54, which the API never takes as a `push_key`.
public struct PushKey: Sendable, Equatable {
    public static let secretboxTag: UInt8 = 0x31
    /// The stored form of an MTProto auth key: 0x54 ('T') ‖ 256 bytes.
    public static let mtprotoTag: UInt8 = 0x54

    public let scheme: EncryptionScheme
    public let keyBytes: [UInt8]

    /// Parses the base64 wire form of a `push_key`, rejecting any other length or tag.
    public init(base64 text: String) throws(PayloadValidationError) {
        guard let data = Data(base64Encoded: text) else {
            throw PayloadValidationError(field: "push_key", problem: "must be standard base64")
        }
        guard data.first != Self.mtprotoTag else {
            throw PayloadValidationError(
                field: "push_key", problem: "unsupported key tag 0x54; only 0x31 (secretbox) is known")
        }
        try self.init(tagged: Array(data))
    }

    /// A device `secret` (Telegram's `account.registerDevice`): the 256-byte MTProto auth key.
    public init(mtprotoAuthKey bytes: [UInt8]) throws(PayloadValidationError) {
        guard bytes.count == MTProtoPush.authKeyLength else {
            throw PayloadValidationError(
                field: "secret", problem: "must be \(MTProtoPush.authKeyLength) bytes, got \(bytes.count)")
        }
        self.scheme = .mtproto2
        self.keyBytes = bytes
    }

    /// The key id a `secret` is stored under: the low 32 bits of its `auth_key_id`.
    public var mtprotoKeyID: UInt32 {
        MTProtoPush.authKeyID(keyBytes).prefix(4).reduce(UInt32(0)) { $0 << 8 | UInt32($1) }
    }

    /// The stored (tagged) form: a push key or a device secret.
    public init(tagged bytes: [UInt8]) throws(PayloadValidationError) {
        if bytes.first == Self.mtprotoTag {
            self = try PushKey(mtprotoAuthKey: Array(bytes.dropFirst()))
            return
        }
        guard bytes.count == 1 + SecretBox.keyLength else {
            throw PayloadValidationError(
                field: "push_key", problem: "must be 33 bytes (tag byte + 32-byte key), got \(bytes.count)")
        }
        guard bytes[0] == Self.secretboxTag else {
            throw PayloadValidationError(
                field: "push_key",
                problem: "unsupported key tag 0x\(String(bytes[0], radix: 16)); only 0x31 (secretbox) is known")
        }
        self.scheme = .secretbox
        self.keyBytes = Array(bytes[1...])
    }

    /// The tagged wire form (33 bytes for secretbox).
    public var tagged: [UInt8] { [scheme == .mtproto2 ? Self.mtprotoTag : Self.secretboxTag] + keyBytes }

    /// The tagged wire form, base64.
    public var base64: String { Data(tagged).base64EncodedString() }

    /// Encrypts a notification for the device: base64 `nonce || MAC || ciphertext` for
    /// secretbox; for MTProto, base64url of `auth_key_id ‖ msg_key ‖ ciphertext` (`p`).
    public func encrypt(_ plaintext: some Collection<UInt8>, nonce: [UInt8]? = nil) throws(CryptoError) -> String {
        switch scheme {
        case .secretbox:
            Data(try SecretBox.seal(plaintext, key: keyBytes, nonce: nonce)).base64EncodedString()
        case .mtproto2:
            Base64URL.encode(try MTProtoPush.encrypt(Array(plaintext), authKey: keyBytes))
        case .aes128gcm:
            throw CryptoError(.invalidInput, "Web Push messages are encrypted to the subscription, not to a push key")
        }
    }

    public func decrypt(_ encryptedData: String) throws(CryptoError) -> [UInt8] {
        switch scheme {
        case .secretbox:
            guard let data = Data(base64Encoded: encryptedData) else {
                throw CryptoError(.invalidCiphertext, "encrypted_data is not base64")
            }
            return try SecretBox.open(Array(data), key: keyBytes)
        case .mtproto2:
            guard let blob = Base64URL.decode(encryptedData) else {
                throw CryptoError(.invalidCiphertext, "p is not base64url")
            }
            return try MTProtoPush.decrypt(blob, authKey: keyBytes)
        case .aes128gcm:
            throw CryptoError(.invalidInput, "Web Push messages are decrypted with the subscription's private key")
        }
    }
}

/// Short fingerprints of secrets and tokens: storable, comparable, not reversible.
public enum Fingerprint {
    public static func sha256Hex(_ text: String) -> String {
        hex(SHA256.hash(data: Array(text.utf8)))
    }

    /// Lower-case hex. (Not `String(format:)`: that showed up as 9 % of ingest's CPU.)
    public static func hex(_ bytes: some Sequence<UInt8>) -> String {
        var out: [UInt8] = []
        out.reserveCapacity(64)
        for b in bytes {
            out.append(Syntax.hexDigit(b >> 4))
            out.append(Syntax.hexDigit(b & 0x0F))
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// Bytes from lower- or upper-case hex; nil for anything else.
    public static func bytes(fromHex text: String) -> [UInt8]? {
        Syntax.bytes(fromHex: Array(text.utf8))
    }

    public static func sha256(_ bytes: [UInt8]) -> [UInt8] {
        Array(SHA256.hash(data: bytes))
    }

    /// The first 64 bits of SHA-256 of the text's UTF-8, big-endian, as a signed integer
    /// (hashed in place: no copy of the text).
    public static func sha256Prefix64(_ text: String) -> Int64 {
        var text = text
        let digest = text.withUTF8 { bytes in
            var hasher = SHA256()
            hasher.update(bufferPointer: UnsafeRawBufferPointer(bytes))
            return hasher.finalize()
        }
        var value: UInt64 = 0
        for byte in digest.prefix(8) { value = value << 8 | UInt64(byte) }
        return Int64(bitPattern: value)
    }

    /// Lower-case hex of SHA-1: the name Redis gives a script (`EVALSHA`). Not a security use.
    public static func sha1Hex(_ text: String) -> String {
        hex(Insecure.SHA1.hash(data: Array(text.utf8)))
    }

    /// The first 16 hex digits of SHA-256, used to recognise a token without storing it in records.
    public static func token(_ token: String) -> String {
        String(sha256Hex(token).prefix(16))
    }

    /// Zulip's `token_id` (API feature level 468+): standard base64, with padding, of the
    /// first 8 bytes of SHA-256 of the token's UTF-8 exactly as the app registered it
    /// (case matters). `c0ffee` → `+wKIhyAx/Eg=` (docs/protocols.md §1).
    public static func zulipTokenID(_ token: String) -> String {
        Data(sha256(Array(token.utf8)).prefix(8)).base64EncodedString()
    }
}
