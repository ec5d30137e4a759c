import CLibCrypto
import Crypto
import PushModels

/// Telegram's push payload encryption with a device `secret` (docs/protocols.md §5):
/// MTProto 2.0 with x = 8 (server to client), AES-256-IGE from OpenSSL's libcrypto.
public enum MTProtoPush {
    public static let authKeyLength = 256
    /// x in MTProto 2.0's key derivation: 0 for client → server, 8 for server → client.
    static let x = 8

    /// The last 8 bytes of SHA-1 of the key: names the key in every blob.
    public static func authKeyID(_ authKey: [UInt8]) -> [UInt8] {
        Array(Insecure.SHA1.hash(data: authKey).suffix(8))
    }

    /// `auth_key_id ‖ msg_key ‖ AES-256-IGE(length ‖ json ‖ padding)`. `padding` is
    /// for test vectors; by default 12 to 27 random bytes make the whole a multiple of 16.
    public static func encrypt(_ json: [UInt8], authKey: [UInt8], padding: [UInt8]? = nil) throws(CryptoError)
        -> [UInt8]
    {
        guard authKey.count == authKeyLength else {
            throw CryptoError(.invalidInput, "an MTProto auth key is \(authKeyLength) bytes")
        }
        guard let length = UInt32(exactly: json.count) else {
            throw CryptoError(.invalidInput, "the payload is too large")
        }
        var plaintext = withUnsafeBytes(of: length.littleEndian, Array.init) + json
        let pad: [UInt8]
        if let padding {
            pad = padding
        } else {
            let count = 12 + (16 - (plaintext.count + 12) % 16) % 16
            pad = (0..<count).map { _ in UInt8.random(in: 0...255) }
        }
        plaintext += pad
        guard (plaintext.count % 16) == 0, (12...1024).contains(pad.count) else {
            throw CryptoError(.invalidInput, "MTProto padding must be 12 to 1024 bytes to a multiple of 16")
        }
        let msgKey = Array(SHA256.hash(data: authKey[(88 + x)..<(88 + x + 32)] + plaintext).dropFirst(8).prefix(16))
        let (key, iv) = keyAndIV(authKey: authKey, msgKey: msgKey)
        return authKeyID(authKey) + msgKey + ige(plaintext, key: key, iv: iv, encrypt: true)
    }

    /// The device side: checks the key id, the message key over the decrypted plaintext,
    /// the length prefix and the padding bounds, and returns the JSON.
    public static func decrypt(_ blob: [UInt8], authKey: [UInt8]) throws(CryptoError) -> [UInt8] {
        guard authKey.count == authKeyLength else {
            throw CryptoError(.invalidInput, "an MTProto auth key is \(authKeyLength) bytes")
        }
        guard blob.count >= 24 + 16, (blob.count - 24) % 16 == 0 else {
            throw CryptoError(.invalidCiphertext, "an MTProto blob is 24 bytes and whole AES blocks")
        }
        guard Array(blob[0..<8]) == authKeyID(authKey) else {
            throw CryptoError(.invalidCiphertext, "the blob is for another auth key")
        }
        let msgKey = Array(blob[8..<24])
        let (key, iv) = keyAndIV(authKey: authKey, msgKey: msgKey)
        let plaintext = ige(Array(blob[24...]), key: key, iv: iv, encrypt: false)
        let expected = Array(
            SHA256.hash(data: authKey[(88 + x)..<(88 + x + 32)] + plaintext).dropFirst(8).prefix(16))
        guard expected == msgKey else { throw CryptoError(.invalidCiphertext, "msg_key does not match") }
        let length = plaintext[0..<4].reversed().reduce(0) { $0 << 8 | Int($1) }
        let padding = plaintext.count - 4 - length
        guard length >= 0, (12...1024).contains(padding) else {
            throw CryptoError(.invalidCiphertext, "the length prefix does not fit the padding rules")
        }
        return Array(plaintext[4..<(4 + length)])
    }

    static func keyAndIV(authKey: [UInt8], msgKey: [UInt8]) -> (key: [UInt8], iv: [UInt8]) {
        let a = Array(SHA256.hash(data: msgKey + authKey[x..<(x + 36)]))
        let b = Array(SHA256.hash(data: authKey[(40 + x)..<(40 + x + 36)] + msgKey))
        let key = a[0..<8] + b[8..<24] + a[24..<32]
        let iv = b[0..<8] + a[8..<24] + b[24..<32]
        return (Array(key), Array(iv))
    }

    /// AES-256-IGE over whole blocks (the caller guarantees the length).
    static func ige(_ input: [UInt8], key: [UInt8], iv: [UInt8], encrypt: Bool) -> [UInt8] {
        var schedule = AES_KEY()
        _ =
            encrypt
            ? AES_set_encrypt_key(key, Int32(key.count * 8), &schedule)
            : AES_set_decrypt_key(key, Int32(key.count * 8), &schedule)
        var output = [UInt8](repeating: 0, count: input.count)
        var ivCopy = iv
        AES_ige_encrypt(input, &output, input.count, &schedule, &ivCopy, encrypt ? AES_ENCRYPT : AES_DECRYPT)
        return output
    }
}
