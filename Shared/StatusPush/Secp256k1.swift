import CSecp256k1
import Foundation

/// What can go wrong with keys and signatures from outside.
public enum StatusCryptoError: Error, Equatable, Sendable {
    case invalidPrivateKey
    case invalidPublicKey
    case invalidSignature
    case undecryptable
    case libraryUnavailable
}

/// secp256k1 through Debian's libsecp256k1: Ethereum-style recoverable signatures
/// (65 bytes `r ‖ s ‖ v`, v 0 or 1, over a 32-byte hash) and Status's ECDH (the shared
/// point's x coordinate, unhashed, as go-ethereum's `ecies.GenerateShared` gives it).
public enum Secp256k1 {
    /// One context for signing and verifying, randomized once; libsecp256k1 contexts are
    /// safe to share across threads for every call made here.
    nonisolated(unsafe) private static let context: OpaquePointer? = {
        guard let context = secp256k1_context_create(UInt32(SECP256K1_CONTEXT_NONE)) else { return nil }
        var seed = [UInt8](repeating: 0, count: 32)
        for i in seed.indices { seed[i] = UInt8.random(in: 0...255) }
        _ = secp256k1_context_randomize(context, seed)
        return context
    }()

    /// A private key: 32 bytes, non-zero and below the group order.
    public struct PrivateKey: Sendable, Equatable {
        public let bytes: [UInt8]

        public init(bytes: [UInt8]) throws(StatusCryptoError) {
            guard let context = Secp256k1.context else { throw .libraryUnavailable }
            guard bytes.count == 32, secp256k1_ec_seckey_verify(context, bytes) == 1 else {
                throw .invalidPrivateKey
            }
            self.bytes = bytes
        }

        /// A new random key.
        public static func generate() throws(StatusCryptoError) -> PrivateKey {
            for _ in 0..<16 {
                var bytes = [UInt8](repeating: 0, count: 32)
                for i in bytes.indices { bytes[i] = UInt8.random(in: 0...255) }
                if let key = try? PrivateKey(bytes: bytes) { return key }
            }
            throw .libraryUnavailable
        }

        public func publicKey() throws(StatusCryptoError) -> PublicKey {
            guard let context = Secp256k1.context else { throw .libraryUnavailable }
            var key = secp256k1_pubkey()
            guard secp256k1_ec_pubkey_create(context, &key, bytes) == 1 else { throw .invalidPrivateKey }
            return PublicKey(key: key)
        }

        /// Signs a 32-byte hash: `r ‖ s ‖ v` (v is the recovery id, 0 or 1).
        public func sign(hash: [UInt8]) throws(StatusCryptoError) -> [UInt8] {
            guard let context = Secp256k1.context else { throw .libraryUnavailable }
            guard hash.count == 32 else { throw .invalidSignature }
            var signature = secp256k1_ecdsa_recoverable_signature()
            guard secp256k1_ecdsa_sign_recoverable(context, &signature, hash, bytes, nil, nil) == 1 else {
                throw .invalidPrivateKey
            }
            var output = [UInt8](repeating: 0, count: 64)
            var recoveryID: Int32 = 0
            _ = secp256k1_ecdsa_recoverable_signature_serialize_compact(context, &output, &recoveryID, &signature)
            return output + [UInt8(truncatingIfNeeded: recoveryID)]
        }

        /// ECDH as Status does it: the x coordinate of `self · peer`, 32 bytes.
        public func sharedSecret(with peer: PublicKey) throws(StatusCryptoError) -> [UInt8] {
            guard let context = Secp256k1.context else { throw .libraryUnavailable }
            var output = [UInt8](repeating: 0, count: 32)
            var point = peer.key
            let copyX: secp256k1_ecdh_hash_function = { output, x, _, _ in
                guard let output, let x else { return 0 }
                output.update(from: x, count: 32)
                return 1
            }
            guard secp256k1_ecdh(context, &output, &point, bytes, copyX, nil) == 1 else {
                throw .invalidPublicKey
            }
            return output
        }
    }

    /// A public key, parsed from its 33-byte compressed or 65-byte uncompressed form.
    public struct PublicKey: Sendable, Equatable {
        let key: secp256k1_pubkey

        init(key: secp256k1_pubkey) { self.key = key }

        public init(bytes: [UInt8]) throws(StatusCryptoError) {
            guard let context = Secp256k1.context else { throw .libraryUnavailable }
            guard bytes.count == 33 || bytes.count == 65 else { throw .invalidPublicKey }
            var key = secp256k1_pubkey()
            guard secp256k1_ec_pubkey_parse(context, &key, bytes, bytes.count) == 1 else { throw .invalidPublicKey }
            self.key = key
        }

        /// 33 bytes: `02`/`03` and x.
        public var compressed: [UInt8] { serialize(flags: UInt32(SECP256K1_EC_COMPRESSED), length: 33) }
        /// 65 bytes: `04`, x and y.
        public var uncompressed: [UInt8] { serialize(flags: UInt32(SECP256K1_EC_UNCOMPRESSED), length: 65) }

        private func serialize(flags: UInt32, length: Int) -> [UInt8] {
            guard let context = Secp256k1.context else { return [] }
            var output = [UInt8](repeating: 0, count: length)
            var outputLength = length
            var key = self.key
            _ = secp256k1_ec_pubkey_serialize(context, &output, &outputLength, &key, flags)
            return output
        }

        public static func == (a: PublicKey, b: PublicKey) -> Bool { a.compressed == b.compressed }

        /// The key that made `signature` (65 bytes, v 0–3, as go-ethereum writes it) over `hash`.
        public static func recover(signature: [UInt8], hash: [UInt8]) throws(StatusCryptoError) -> PublicKey {
            guard let context = Secp256k1.context else { throw .libraryUnavailable }
            guard signature.count == 65, hash.count == 32 else { throw .invalidSignature }
            let v = Int32(signature[64])
            guard (0...3).contains(v) else { throw .invalidSignature }
            var parsed = secp256k1_ecdsa_recoverable_signature()
            guard
                secp256k1_ecdsa_recoverable_signature_parse_compact(context, &parsed, Array(signature[0..<64]), v) == 1
            else { throw .invalidSignature }
            var key = secp256k1_pubkey()
            guard secp256k1_ecdsa_recover(context, &key, &parsed, hash) == 1 else { throw .invalidSignature }
            return PublicKey(key: key)
        }
    }
}
