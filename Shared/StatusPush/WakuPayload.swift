import CLibCrypto
import Crypto
import Foundation
import PushCrypto
import PushModels

/// How Status carries its push-server messages over Waku (docs/protocols.md §11): the
/// content topics derived from keys, the version-1 payload (a signed, padded frame) and
/// its encryption, asymmetric (go-ethereum's ECIES to a public key) or symmetric
/// (AES-256-GCM under a key derived from a topic's name).
public enum WakuStatus {
    /// The pubsub topic Status's messages travel on (cluster 16, shard 32).
    public static let pubsubTopic = "/waku/2/rs/16/32"
    /// status-go's number of partitions of the contact-discovery topics.
    static let partitions: UInt32 = 5000

    public enum Problem: Error, Equatable, Sendable {
        /// The frame, its encryption or its signature does not hold.
        case undecryptable
        case malformed
        case unsigned
    }

    // MARK: Topics

    /// `/waku/1/0x{first 4 bytes of Keccak-256(name)}/rfc26`: a Waku v1 topic as a v2 content topic.
    public static func contentTopic(_ name: String) -> String {
        "/waku/1/0x" + Fingerprint.hex(Array(Keccak.keccak256(Array(name.utf8)).prefix(4))) + "/rfc26"
    }

    /// The key's partitioned topic, `contact-discovery-{X mod 5000}`: where notification
    /// requests to a server, and every answer to a client's key, travel.
    public static func partitionedTopic(_ key: Secp256k1.PublicKey) -> String {
        var remainder: UInt32 = 0
        for byte in key.uncompressed[1...32] { remainder = (remainder << 8 | UInt32(byte)) % partitions }
        return contentTopic("contact-discovery-\(remainder)")
    }

    /// The key's personal topic, `contact-discovery-{hex of its uncompressed form}`:
    /// where registrations to a server travel.
    public static func personalTopic(_ key: Secp256k1.PublicKey) -> String {
        contentTopic("contact-discovery-" + Fingerprint.hex(key.uncompressed))
    }

    /// A hashed client key's query topic, named by the lower-case hex of the hash (no
    /// `0x`, as status-go names it), and its symmetric key: PBKDF2-HMAC-SHA256 of that
    /// name, no salt, 65,356 rounds (slow on purpose: compute it once per key).
    public static func queryTopic(hashedKey: [UInt8]) -> (topic: String, key: [UInt8]) {
        let name = Fingerprint.hex(hashedKey)
        return (contentTopic(name), pbkdf2(Array(name.utf8), rounds: 65_356))
    }

    static func pbkdf2(_ password: [UInt8], rounds: Int32) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: 32)
        let ok = password.withUnsafeBufferPointer { input in
            input.withMemoryRebound(to: CChar.self) { chars in
                PKCS5_PBKDF2_HMAC(chars.baseAddress, Int32(chars.count), nil, 0, rounds, EVP_sha256(), 32, &out)
            }
        }
        return ok == 1 ? out : []
    }

    // MARK: The version-1 frame

    /// `flags ‖ size (little-endian, 1–3 bytes) ‖ data ‖ padding ‖ signature`: padded to a
    /// multiple of 256 bytes with random bytes, and signed by `key` (a recoverable
    /// secp256k1 signature of Keccak-256 of everything before it; flag bit 2).
    public static func frame(_ data: [UInt8], signedBy key: Secp256k1.PrivateKey, padding: [UInt8]? = nil) throws
        -> [UInt8]
    {
        let sizeLength = data.count < 256 ? 1 : data.count < 65_536 ? 2 : 3
        guard data.count < 1 << 24 else { throw Problem.malformed }
        var out: [UInt8] = [UInt8(sizeLength) | 0x04]
        for i in 0..<sizeLength { out.append(UInt8(truncatingIfNeeded: data.count >> (8 * i))) }
        out += data
        let padLength = 256 - (out.count + 65) % 256
        if let padding {
            guard padding.count == padLength else { throw Problem.malformed }
            out += padding
        } else {
            out += RandomBytes.bytes(padLength)
        }
        out += try key.sign(hash: Keccak.keccak256(out))
        return out
    }

    /// The data of a frame and its signer; a frame without a signature is refused, as
    /// status-go refuses it.
    public static func openFrame(_ frame: [UInt8]) throws(Problem) -> (data: [UInt8], signer: Secp256k1.PublicKey) {
        guard let flags = frame.first else { throw .malformed }
        guard flags & 0x04 != 0 else { throw .unsigned }
        guard frame.count >= 1 + 65 else { throw .malformed }
        let body = Array(frame[..<(frame.count - 65)])
        guard
            let signer = try? Secp256k1.PublicKey.recover(
                signature: Array(frame[(frame.count - 65)...]), hash: Keccak.keccak256(body))
        else { throw .unsigned }
        let sizeLength = Int(flags & 0x03)
        guard sizeLength > 0, body.count >= 1 + sizeLength else { throw .malformed }
        var size = 0
        for i in 0..<sizeLength { size |= Int(body[1 + i]) << (8 * i) }
        guard size <= body.count - 1 - sizeLength else { throw .malformed }
        return (Array(body[(1 + sizeLength)..<(1 + sizeLength + size)]), signer)
    }

    // MARK: Asymmetric: go-ethereum's ECIES (secp256k1, AES-128-CTR, HMAC-SHA256)

    /// `R (65, uncompressed) ‖ IV (16) ‖ AES-128-CTR(Ke, IV, message) ‖ HMAC-SHA256(Km, IV ‖ C)`,
    /// with `Ke ‖ Km'` = SHA-256(00000001 ‖ ECDH x) and `Km` = SHA-256(`Km'`).
    public static func encrypt(
        _ message: [UInt8], to recipient: Secp256k1.PublicKey, ephemeral: Secp256k1.PrivateKey? = nil,
        iv: [UInt8]? = nil
    ) throws -> [UInt8] {
        let ephemeral = try ephemeral ?? Secp256k1.PrivateKey.generate()
        let iv = iv ?? RandomBytes.bytes(16)
        guard iv.count == 16 else { throw Problem.malformed }
        let (encryptionKey, macKey) = keys(try ephemeral.sharedSecret(with: recipient))
        let ciphertext = iv + (try aes128CTR(encryptionKey, iv: iv, message))
        let tag = HMAC<SHA256>.authenticationCode(for: ciphertext, using: SymmetricKey(data: macKey))
        return try ephemeral.publicKey().uncompressed + ciphertext + Array(tag)
    }

    public static func decrypt(_ message: [UInt8], with key: Secp256k1.PrivateKey) throws(Problem) -> [UInt8] {
        guard message.count >= 65 + 16 + 32, message[0] == 0x04 else { throw .undecryptable }
        guard let sender = try? Secp256k1.PublicKey(bytes: Array(message[0..<65])),
            let shared = try? key.sharedSecret(with: sender)
        else { throw .undecryptable }
        let (encryptionKey, macKey) = keys(shared)
        let ciphertext = Array(message[65..<(message.count - 32)])
        guard
            HMAC<SHA256>.isValidAuthenticationCode(
                Array(message[(message.count - 32)...]), authenticating: ciphertext,
                using: SymmetricKey(data: macKey))
        else { throw .undecryptable }
        guard let plain = try? aes128CTR(encryptionKey, iv: Array(ciphertext[0..<16]), Array(ciphertext[16...]))
        else { throw .undecryptable }
        return plain
    }

    /// NIST SP 800-56 concatenation KDF, one round of SHA-256, no shared info.
    static func keys(_ shared: [UInt8]) -> (encryption: [UInt8], mac: [UInt8]) {
        let derived = Array(SHA256.hash(data: [0, 0, 0, 1] + shared))
        return (Array(derived[0..<16]), Array(SHA256.hash(data: Array(derived[16..<32]))))
    }

    static func aes128CTR(_ key: [UInt8], iv: [UInt8], _ input: [UInt8]) throws -> [UInt8] {
        guard key.count == 16, iv.count == 16, let context = EVP_CIPHER_CTX_new() else { throw Problem.undecryptable }
        defer { EVP_CIPHER_CTX_free(context) }
        var out = [UInt8](repeating: 0, count: input.count + 16)
        var tail = [UInt8](repeating: 0, count: 16)
        var written: Int32 = 0
        var final: Int32 = 0
        guard EVP_EncryptInit_ex(context, EVP_aes_128_ctr(), nil, key, iv) == 1,
            EVP_EncryptUpdate(context, &out, &written, input, Int32(input.count)) == 1,
            EVP_EncryptFinal_ex(context, &tail, &final) == 1
        else { throw Problem.undecryptable }
        return Array(out.prefix(Int(written))) + tail.prefix(Int(final))
    }

    // MARK: Symmetric: AES-256-GCM, the nonce last

    /// `ciphertext ‖ tag (16) ‖ nonce (12)` (Waku's layout; Status's own puts the nonce first).
    public static func encryptSymmetric(_ message: [UInt8], key: [UInt8]) throws -> [UInt8] {
        let box = try AES.GCM.seal(message, using: SymmetricKey(data: key))
        return Array(box.ciphertext) + Array(box.tag) + Array(box.nonce)
    }

    public static func decryptSymmetric(_ message: [UInt8], key: [UInt8]) throws(Problem) -> [UInt8] {
        guard message.count >= 12 + 16, key.count == 32 else { throw .undecryptable }
        let nonceStart = message.count - 12
        do {
            let box = try AES.GCM.SealedBox(
                nonce: AES.GCM.Nonce(data: message[nonceStart...]), ciphertext: message[..<(nonceStart - 16)],
                tag: message[(nonceStart - 16)..<nonceStart])
            return Array(try AES.GCM.open(box, using: SymmetricKey(data: key)))
        } catch {
            throw .undecryptable
        }
    }
}
