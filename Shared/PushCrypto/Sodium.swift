import CSodium
import PushModels
import Foundation

/// Errors from the crypto layer; none of them carries key or plaintext bytes.
public struct CryptoError: Error, Sendable, Equatable, CustomStringConvertible {
    public enum Code: String, Sendable {
        case invalidKey
        case invalidCiphertext
        case authenticationFailed
        case libraryUnavailable
        /// A key or plaintext of the wrong shape for the scheme: the same every time.
        case invalidInput
    }

    public var code: Code
    public var message: String

    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    public var description: String { "\(code.rawValue): \(message)" }
}

/// libsodium must be initialised once per process before any other call.
enum Sodium {
    private static let initialised: Bool = sodium_init() >= 0

    static func ensureReady() throws(CryptoError) {
        guard initialised else { throw CryptoError(.libraryUnavailable, "libsodium failed to initialise") }
    }

    /// Random bytes for keys: straight from libsodium, never through a shared buffer.
    static func randomBytes(_ count: Int) -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: count)
        bytes.withUnsafeMutableBytes { randombytes_buf($0.baseAddress!, count) }
        return bytes
    }
}

/// libsodium `crypto_secretbox_easy` (XSalsa20-Poly1305) in the framing Zulip uses:
/// `nonce(24) || MAC(16) || ciphertext`.
public enum SecretBox {
    public static let keyLength = Int(crypto_secretbox_KEYBYTES)
    public static let nonceLength = Int(crypto_secretbox_NONCEBYTES)
    public static let macLength = Int(crypto_secretbox_MACBYTES)

    /// Encrypts with a fresh random nonce unless one is given (tests pin it for vectors).
    public static func seal(
        _ plaintext: some Collection<UInt8>, key: [UInt8], nonce: [UInt8]? = nil
    ) throws(CryptoError) -> [UInt8] {
        try Sodium.ensureReady()
        guard key.count == keyLength else { throw CryptoError(.invalidKey, "secretbox key must be 32 bytes") }
        let nonce = nonce ?? RandomBytes.bytes(nonceLength)
        guard nonce.count == nonceLength else { throw CryptoError(.invalidKey, "secretbox nonce must be 24 bytes") }
        let message = Array(plaintext)
        var output = [UInt8](repeating: 0, count: nonceLength + macLength + message.count)
        output.replaceSubrange(0..<nonceLength, with: nonce)
        let rc = output.withUnsafeMutableBufferPointer { out in
            crypto_secretbox_easy(
                out.baseAddress! + nonceLength, message, UInt64(message.count), nonce, key)
        }
        guard rc == 0 else { throw CryptoError(.invalidKey, "secretbox encryption failed") }
        return output
    }

    /// Decrypts `nonce || MAC || ciphertext`; fails if the MAC does not verify.
    public static func open(_ sealed: [UInt8], key: [UInt8]) throws(CryptoError) -> [UInt8] {
        try Sodium.ensureReady()
        guard key.count == keyLength else { throw CryptoError(.invalidKey, "secretbox key must be 32 bytes") }
        guard sealed.count >= nonceLength + macLength else {
            throw CryptoError(.invalidCiphertext, "secretbox ciphertext is too short")
        }
        let nonce = Array(sealed[0..<nonceLength])
        let boxed = Array(sealed[nonceLength...])
        var plaintext = [UInt8](repeating: 0, count: boxed.count - macLength)
        let rc = crypto_secretbox_open_easy(&plaintext, boxed, UInt64(boxed.count), nonce, key)
        guard rc == 0 else { throw CryptoError(.authenticationFailed, "secretbox MAC did not verify") }
        return plaintext
    }
}

/// libsodium `crypto_aead_xchacha20poly1305_ietf` in the framing the relay stores and
/// seals with: `nonce(24) || ciphertext || MAC(16)`. The associated data is authenticated,
/// not encrypted: it names where the value belongs, so a ciphertext copied elsewhere
/// fails to open.
public enum XChaCha20Poly1305 {
    public static let keyLength = Int(crypto_aead_xchacha20poly1305_ietf_KEYBYTES)
    public static let nonceLength = Int(crypto_aead_xchacha20poly1305_ietf_NPUBBYTES)
    public static let macLength = Int(crypto_aead_xchacha20poly1305_ietf_ABYTES)

    /// Encrypts with a fresh random nonce (192 bits: random nonces never collide in practice).
    public static func seal(
        _ plaintext: some Collection<UInt8>, key: [UInt8], associatedData: [UInt8]
    ) throws(CryptoError) -> [UInt8] {
        try Sodium.ensureReady()
        guard key.count == keyLength else { throw CryptoError(.invalidKey, "AEAD key must be 32 bytes") }
        let nonce = RandomBytes.bytes(nonceLength)
        let message = Array(plaintext)
        var output = [UInt8](repeating: 0, count: nonceLength + message.count + macLength)
        output.replaceSubrange(0..<nonceLength, with: nonce)
        var written: UInt64 = 0
        let rc = output.withUnsafeMutableBufferPointer { out in
            crypto_aead_xchacha20poly1305_ietf_encrypt(
                out.baseAddress! + nonceLength, &written, message, UInt64(message.count), associatedData,
                UInt64(associatedData.count), nil, nonce, key)
        }
        guard rc == 0, written == UInt64(message.count + macLength) else {
            throw CryptoError(.invalidKey, "AEAD encryption failed")
        }
        return output
    }

    /// Decrypts `nonce || ciphertext || MAC`; fails unless key and associated data both match.
    public static func open(_ sealed: [UInt8], key: [UInt8], associatedData: [UInt8]) throws(CryptoError) -> [UInt8] {
        try Sodium.ensureReady()
        guard key.count == keyLength else { throw CryptoError(.invalidKey, "AEAD key must be 32 bytes") }
        guard sealed.count >= nonceLength + macLength else {
            throw CryptoError(.invalidCiphertext, "AEAD ciphertext is too short")
        }
        // Read in place: the nonce and the box are views of `sealed`, not copies.
        let plaintextLength = sealed.count - nonceLength - macLength
        var written: UInt64 = 0
        var rc: Int32 = -1
        let plaintext = [UInt8](unsafeUninitializedCapacity: plaintextLength) { out, initialized in
            sealed.withUnsafeBufferPointer { input in
                guard let base = input.baseAddress else { return }
                rc = crypto_aead_xchacha20poly1305_ietf_decrypt(
                    out.baseAddress, &written, nil, base + nonceLength, UInt64(input.count - nonceLength),
                    associatedData, UInt64(associatedData.count), base, key)
            }
            // Nothing is kept unless the tag verified.
            initialized = rc == 0 && written == UInt64(plaintextLength) ? plaintextLength : 0
        }
        guard rc == 0, written == UInt64(plaintextLength) else {
            throw CryptoError(.authenticationFailed, "AEAD tag did not verify (wrong key or moved ciphertext)")
        }
        return plaintext
    }
}

/// An X25519 key pair for libsodium sealed boxes (`crypto_box_seal`).
public struct BoxKeyPair: Sendable, Equatable {
    public static let keyLength = Int(crypto_box_PUBLICKEYBYTES)

    public let publicKey: [UInt8]
    public let secretKey: [UInt8]

    public static func generate() throws(CryptoError) -> BoxKeyPair {
        try Sodium.ensureReady()
        var pk = [UInt8](repeating: 0, count: keyLength)
        var sk = [UInt8](repeating: 0, count: Int(crypto_box_SECRETKEYBYTES))
        guard crypto_box_keypair(&pk, &sk) == 0 else { throw CryptoError(.invalidKey, "key generation failed") }
        return BoxKeyPair(publicKey: pk, secretKey: sk)
    }

    /// Rebuilds the pair from its secret key (the public key is derived).
    public init(secretKey: [UInt8]) throws(CryptoError) {
        try Sodium.ensureReady()
        guard secretKey.count == Int(crypto_box_SECRETKEYBYTES) else {
            throw CryptoError(.invalidKey, "X25519 secret key must be 32 bytes")
        }
        var pk = [UInt8](repeating: 0, count: Self.keyLength)
        guard crypto_scalarmult_base(&pk, secretKey) == 0 else {
            throw CryptoError(.invalidKey, "invalid X25519 secret key")
        }
        self.init(publicKey: pk, secretKey: secretKey)
    }

    private init(publicKey: [UInt8], secretKey: [UInt8]) {
        self.publicKey = publicKey
        self.secretKey = secretKey
    }
}

/// libsodium sealed boxes: anonymous encryption to an X25519 public key,
/// `ephemeral_pk(32) || MAC(16) || ciphertext`.
public enum SealedBox {
    public static let overhead = Int(crypto_box_sealbytes())

    public static func seal(_ plaintext: some Collection<UInt8>, to publicKey: [UInt8]) throws(CryptoError) -> [UInt8] {
        try Sodium.ensureReady()
        guard publicKey.count == BoxKeyPair.keyLength else {
            throw CryptoError(.invalidKey, "X25519 public key must be 32 bytes")
        }
        let message = Array(plaintext)
        var output = [UInt8](repeating: 0, count: message.count + overhead)
        guard crypto_box_seal(&output, message, UInt64(message.count), publicKey) == 0 else {
            throw CryptoError(.invalidKey, "sealed box encryption failed")
        }
        return output
    }

    public static func open(_ sealed: [UInt8], keyPair: BoxKeyPair) throws(CryptoError) -> [UInt8] {
        try Sodium.ensureReady()
        guard sealed.count >= overhead else { throw CryptoError(.invalidCiphertext, "sealed box is too short") }
        var plaintext = [UInt8](repeating: 0, count: sealed.count - overhead)
        let rc = crypto_box_seal_open(
            &plaintext, sealed, UInt64(sealed.count), keyPair.publicKey, keyPair.secretKey)
        guard rc == 0 else { throw CryptoError(.authenticationFailed, "sealed box did not open with this key") }
        return plaintext
    }
}

/// Constant-time comparison of secrets (API key hashes).
public func constantTimeEquals(_ a: [UInt8], _ b: [UInt8]) -> Bool {
    guard a.count == b.count else { return false }
    return sodium_memcmp(a, b, a.count) == 0
}
