import Crypto
import Foundation
import SwiftProtobuf
import Testing

@testable import StatusPush

/// The hand-written Keccak sponge against swift-crypto's SHA3-256 and OpenSSL's SHAKE-256
/// (same permutation, their padding) on random inputs and output lengths, and the Status
/// decoders on random bytes: no crash, no acceptance of garbage.
@Suite struct StatusFuzzTests {
    struct SplitMix: RandomNumberGenerator {
        var state: UInt64
        mutating func next() -> UInt64 {
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
    }

    static let seed =
        UInt64(ProcessInfo.processInfo.environment["PUSHRELAY_FUZZ_SEED"] ?? "") ?? UInt64.random(in: 1...UInt64.max)

    @Test func keccakSpongeAgreesWithSHA3AndSHAKE() {
        var random = SplitMix(state: Self.seed)
        for _ in 0..<1500 {
            let length = Int.random(in: 0...700, using: &random)
            let input = (0..<length).map { _ in UInt8.random(in: 0...255, using: &random) }
            var sha3 = Keccak.Sponge(.sha3_256)
            // Absorbed in random pieces: the sponge's buffering must not matter.
            var offset = 0
            while offset < input.count {
                let piece = Int.random(in: 1...200, using: &random)
                sha3.absorb(Array(input[offset..<min(input.count, offset + piece)]))
                offset += piece
            }
            #expect(sha3.squeeze(32) == Array(SHA3_256.hash(data: input)), "seed \(Self.seed), length \(length)")
            let outLength = Int.random(in: 1...400, using: &random)
            var shake = Keccak.Sponge(.shake256)
            shake.absorb(input)
            #expect(shake.squeeze(outLength) == Shake256.hash(input, length: outLength), "seed \(Self.seed)")
        }
    }

    @Test func decodersRefuseRandomBytesWithoutCrashing() {
        var random = SplitMix(state: Self.seed ^ 0x5A5A)
        var accepted = 0
        for _ in 0..<3000 {
            let length = Int.random(in: 0...300, using: &random)
            let bytes = (0..<length).map { _ in UInt8.random(in: 0...255, using: &random) }
            if (try? StatusEnvelope(bytes: bytes, expected: .pushNotificationRegistration)) != nil { accepted += 1 }
            _ = try? StatusRegistration(serializedBytes: bytes)
            _ = try? StatusNotificationRequest(serializedBytes: bytes)
            _ = try? Secp256k1.PublicKey(bytes: bytes)
            _ = try? Secp256k1.PublicKey.recover(signature: bytes, hash: Array(bytes.prefix(32)))
            _ = try? StatusCrypto.decrypt(bytes, key: [UInt8](repeating: 7, count: 32))
        }
        #expect(accepted == 0, "random bytes are no signed registration (seed \(Self.seed))")
    }
}
