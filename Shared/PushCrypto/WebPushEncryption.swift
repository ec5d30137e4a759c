import Crypto
import PushModels

/// RFC 8291 message encryption for Web Push, `aes128gcm` content coding (RFC 8188),
/// one record (docs/protocols.md §4.2–4.3).
public enum WebPushEncryption {
    /// The record size written in the header: one record of a message up to 4096 bytes.
    public static let recordSize: UInt32 = 4096
    /// salt (16) ‖ rs (4) ‖ idlen (1) ‖ keyid (65).
    public static let headerLength = 86
    /// 4096 − 86 header − 16 tag − 1 delimiter.
    public static let maxPlaintext = 3993

    /// What an `aes128gcm` header says (RFC 8188 §2.1).
    public struct Header: Sendable, Equatable {
        public var salt: [UInt8]
        public var recordSize: UInt32
        /// The application server's public key (65 bytes uncompressed) for Web Push.
        public var keyID: [UInt8]
        /// Offset of the first record.
        public var recordStart: Int
    }

    /// Encrypts `plaintext` for the subscription. `serverKey` and `salt` are fresh for
    /// every message unless a test vector supplies them.
    public static func encrypt(
        _ plaintext: [UInt8], to subscription: WebPushSubscription,
        serverKey: P256.KeyAgreement.PrivateKey = P256.KeyAgreement.PrivateKey(), salt: [UInt8]? = nil
    ) throws(CryptoError) -> [UInt8] {
        guard plaintext.count <= maxPlaintext else {
            throw CryptoError(.invalidInput, "a Web Push message holds at most \(maxPlaintext) bytes")
        }
        let salt = salt ?? (0..<16).map { _ in UInt8.random(in: 0...255) }
        guard salt.count == 16 else { throw CryptoError(.invalidInput, "the salt is 16 bytes") }
        let uaPublic: P256.KeyAgreement.PublicKey
        do {
            uaPublic = try P256.KeyAgreement.PublicKey(x963Representation: subscription.p256dh)
        } catch {
            throw CryptoError(.invalidInput, "p256dh is not a point on P-256")
        }
        let asPublic = Array(serverKey.publicKey.x963Representation)
        let (cek, nonce) = try contentKeys(
            privateKey: serverKey, peer: uaPublic, uaPublic: subscription.p256dh, asPublic: asPublic,
            auth: subscription.auth, salt: salt)
        let sealed: AES.GCM.SealedBox
        do {
            sealed = try AES.GCM.seal(
                plaintext + [0x02], using: SymmetricKey(data: cek), nonce: try AES.GCM.Nonce(data: nonce))
        } catch {
            throw CryptoError(.invalidInput, "AES-GCM refused the record: \(error)")
        }
        var body = salt
        body += withUnsafeBytes(of: recordSize.bigEndian, Array.init)
        body.append(UInt8(asPublic.count))
        body += asPublic
        body += Array(sealed.ciphertext) + Array(sealed.tag)
        return body
    }

    /// True when `bytes` is an uncompressed point on P-256 (a subscription's `p256dh`).
    public static func isValidPublicKey(_ bytes: [UInt8]) -> Bool {
        (try? P256.KeyAgreement.PublicKey(x963Representation: bytes)) != nil
    }

    /// Reads and checks the header: salt, a record size of at least 18, a key id that is
    /// a 65-byte uncompressed point, and one record no larger than the record size.
    public static func header(_ body: [UInt8]) throws(CryptoError) -> Header {
        guard body.count >= 21 else { throw CryptoError(.invalidCiphertext, "shorter than an aes128gcm header") }
        let recordSize = body[16..<20].reduce(UInt32(0)) { $0 << 8 | UInt32($1) }
        let idLength = Int(body[20])
        let recordStart = 21 + idLength
        guard recordSize >= 18 else { throw CryptoError(.invalidCiphertext, "rs is below 18") }
        guard idLength == 65, body.count > recordStart, body[21] == 0x04 else {
            throw CryptoError(.invalidCiphertext, "the key id must be a 65-byte uncompressed P-256 point")
        }
        let record = body.count - recordStart
        guard record >= 17, record <= Int(recordSize) else {
            throw CryptoError(.invalidCiphertext, "the message must be one record of 17 to rs bytes")
        }
        return Header(
            salt: Array(body[0..<16]), recordSize: recordSize, keyID: Array(body[21..<recordStart]),
            recordStart: recordStart)
    }

    /// The user agent's side: decrypts with the subscription's private key and secret,
    /// checks the last-record delimiter and strips the padding.
    public static func decrypt(_ body: [UInt8], privateKey: P256.KeyAgreement.PrivateKey, auth: [UInt8])
        throws(CryptoError) -> [UInt8]
    {
        let header = try header(body)
        let asPublic: P256.KeyAgreement.PublicKey
        do {
            asPublic = try P256.KeyAgreement.PublicKey(x963Representation: header.keyID)
        } catch {
            throw CryptoError(.invalidCiphertext, "the key id is not a point on P-256")
        }
        let (cek, nonce) = try contentKeys(
            privateKey: privateKey, peer: asPublic, uaPublic: Array(privateKey.publicKey.x963Representation),
            asPublic: header.keyID, auth: auth, salt: header.salt)
        var opened: [UInt8]
        do {
            let record = body[header.recordStart...]
            let box = try AES.GCM.SealedBox(
                nonce: try AES.GCM.Nonce(data: nonce), ciphertext: record.dropLast(16), tag: record.suffix(16))
            opened = Array(try AES.GCM.open(box, using: SymmetricKey(data: cek)))
        } catch {
            throw CryptoError(.authenticationFailed, "the record does not decrypt")
        }
        while opened.last == 0 { opened.removeLast() }
        guard opened.last == 0x02 else {
            throw CryptoError(.invalidCiphertext, "the record does not end with the last-record delimiter")
        }
        opened.removeLast()
        return opened
    }

    /// RFC 8291 §3.3–3.4 and RFC 8188 §2.2: the content-encryption key and the nonce.
    static func contentKeys(
        privateKey: P256.KeyAgreement.PrivateKey, peer: P256.KeyAgreement.PublicKey, uaPublic: [UInt8],
        asPublic: [UInt8], auth: [UInt8], salt: [UInt8]
    ) throws(CryptoError) -> (cek: [UInt8], nonce: [UInt8]) {
        let shared: SharedSecret
        do {
            shared = try privateKey.sharedSecretFromKeyAgreement(with: peer)
        } catch {
            throw CryptoError(.invalidInput, "ECDH failed: \(error)")
        }
        let ikm = shared.hkdfDerivedSymmetricKey(
            using: SHA256.self, salt: auth, sharedInfo: Array("WebPush: info".utf8) + [0] + uaPublic + asPublic,
            outputByteCount: 32)
        func derive(_ info: String, _ count: Int) -> [UInt8] {
            HKDF<SHA256>.deriveKey(
                inputKeyMaterial: ikm, salt: salt, info: Array(info.utf8) + [0], outputByteCount: count
            ).withUnsafeBytes { Array($0) }
        }
        return (derive("Content-Encoding: aes128gcm", 16), derive("Content-Encoding: nonce", 12))
    }
}
