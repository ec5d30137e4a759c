import CLibCrypto

/// Keccak-256 as Ethereum and Status use it: the Keccak sponge (rate 136 bytes) with
/// the original `0x01` padding, not SHA3-256's `0x06`. Neither swift-crypto nor
/// Debian's OpenSSL 3.0 exposes that padding, so the permutation is written here
/// (FIPS 202 §3, Keccak-f[1600]). The same sponge with SHA3's and SHAKE's padding is
/// fuzzed against swift-crypto's SHA3-256 and OpenSSL's SHAKE-256 (`StatusFuzzTests`),
/// and its speed is in docs/performance.md (`make microbench`).
public enum Keccak {
    /// Keccak-256 of the concatenation of `parts`.
    public static func keccak256(_ parts: [UInt8]...) -> [UInt8] {
        var sponge = Sponge(.keccak256)
        for part in parts { sponge.absorb(part) }
        return sponge.squeeze(32)
    }

    /// The sponge, in the shapes the tests compare with other implementations: the same
    /// rate (136 bytes, capacity 512 bits) and one domain padding each.
    public struct Sponge: Sendable {
        public enum Shape: Sendable {
            /// Ethereum's Keccak-256: padding `0x01`.
            case keccak256
            /// FIPS 202 SHA3-256: padding `0x06`.
            case sha3_256
            /// FIPS 202 SHAKE-256: padding `0x1F`.
            case shake256
        }

        private var state = [UInt64](repeating: 0, count: 25)
        /// Bytes of the current block absorbed so far (XORed into the state as they come).
        private var position = 0
        let rate = 136
        let padding: UInt8

        public init(_ shape: Shape) {
            switch shape {
            case .keccak256: padding = 0x01
            case .sha3_256: padding = 0x06
            case .shake256: padding = 0x1F
            }
        }

        /// XORs one byte into the state at byte offset `index` (little-endian lanes).
        @inline(__always) private static func xorByte(
            _ state: UnsafeMutablePointer<UInt64>, _ index: Int, _ byte: UInt8
        ) {
            state[index >> 3] ^= UInt64(byte) << (UInt64(index & 7) << 3)
        }

        public mutating func absorb(_ bytes: [UInt8]) {
            let rate = self.rate
            var position = self.position
            state.withUnsafeMutableBufferPointer { lanes in
                guard let state = lanes.baseAddress else { return }
                bytes.withUnsafeBytes { input in
                    var offset = 0
                    let count = input.count
                    // Whole lanes straight from the input while aligned to a lane.
                    while offset < count {
                        if position & 7 == 0, count - offset >= 8 {
                            state[position >> 3] ^= UInt64(
                                littleEndian: input.loadUnaligned(fromByteOffset: offset, as: UInt64.self))
                            position += 8
                            offset += 8
                        } else {
                            Self.xorByte(state, position, input[offset])
                            position += 1
                            offset += 1
                        }
                        if position == rate {
                            Keccak.permute(state)
                            position = 0
                        }
                    }
                }
            }
            self.position = position
        }

        /// Pads, then squeezes `count` bytes (consumes the sponge).
        public mutating func squeeze(_ count: Int) -> [UInt8] {
            let rate = self.rate
            let position = self.position
            let padding = self.padding
            var out: [UInt8] = []
            out.reserveCapacity(count)
            state.withUnsafeMutableBufferPointer { lanes in
                guard let state = lanes.baseAddress else { return }
                Self.xorByte(state, position, padding)
                Self.xorByte(state, rate - 1, 0x80)
                Keccak.permute(state)
                while true {
                    for index in 0..<rate {
                        if out.count == count { return }
                        out.append(UInt8(truncatingIfNeeded: state[index >> 3] >> (UInt64(index & 7) << 3)))
                    }
                    Keccak.permute(state)
                }
            }
            self.position = 0
            return out
        }
    }

    private static let roundConstants: [UInt64] = [
        0x0000_0000_0000_0001, 0x0000_0000_0000_8082, 0x8000_0000_0000_808A, 0x8000_0000_8000_8000,
        0x0000_0000_0000_808B, 0x0000_0000_8000_0001, 0x8000_0000_8000_8081, 0x8000_0000_0000_8009,
        0x0000_0000_0000_008A, 0x0000_0000_0000_0088, 0x0000_0000_8000_8009, 0x0000_0000_8000_000A,
        0x0000_0000_8000_808B, 0x8000_0000_0000_008B, 0x8000_0000_0000_8089, 0x8000_0000_0000_8003,
        0x8000_0000_0000_8002, 0x8000_0000_0000_0080, 0x0000_0000_0000_800A, 0x8000_0000_8000_000A,
        0x8000_0000_8000_8081, 0x8000_0000_0000_8080, 0x0000_0000_8000_0001, 0x8000_0000_8000_8008,
    ]
    /// ρ offsets, and π's lane order, as in the reference "compact" implementation.
    private static let rotations: [UInt64] = [
        1, 3, 6, 10, 15, 21, 28, 36, 45, 55, 2, 14, 27, 41, 56, 8, 25, 43, 62, 18, 39, 61, 20, 44,
    ]
    private static let piLanes: [Int] = [
        10, 7, 11, 17, 18, 3, 5, 16, 8, 21, 24, 4, 15, 23, 19, 13, 12, 2, 20, 14, 22, 9, 6, 1,
    ]

    /// Keccak-f[1600]: 24 rounds of θ, ρ, π, χ, ι on 25 little-endian lanes.
    static func permute(_ a: UnsafeMutablePointer<UInt64>) {
        roundConstants.withUnsafeBufferPointer { constants in
            rotations.withUnsafeBufferPointer { rotations in
                piLanes.withUnsafeBufferPointer { pi in
                    for round in 0..<24 {
                        // θ
                        let c0 = a[0] ^ a[5] ^ a[10] ^ a[15] ^ a[20]
                        let c1 = a[1] ^ a[6] ^ a[11] ^ a[16] ^ a[21]
                        let c2 = a[2] ^ a[7] ^ a[12] ^ a[17] ^ a[22]
                        let c3 = a[3] ^ a[8] ^ a[13] ^ a[18] ^ a[23]
                        let c4 = a[4] ^ a[9] ^ a[14] ^ a[19] ^ a[24]
                        let d0 = c4 ^ rotl(c1, 1)
                        let d1 = c0 ^ rotl(c2, 1)
                        let d2 = c1 ^ rotl(c3, 1)
                        let d3 = c2 ^ rotl(c4, 1)
                        let d4 = c3 ^ rotl(c0, 1)
                        for y in stride(from: 0, to: 25, by: 5) {
                            a[y] ^= d0
                            a[y + 1] ^= d1
                            a[y + 2] ^= d2
                            a[y + 3] ^= d3
                            a[y + 4] ^= d4
                        }
                        // ρ and π
                        var current = a[1]
                        for i in 0..<24 {
                            let lane = pi[i]
                            let next = a[lane]
                            a[lane] = rotl(current, rotations[i])
                            current = next
                        }
                        // χ
                        for y in stride(from: 0, to: 25, by: 5) {
                            let b0 = a[y]
                            let b1 = a[y + 1]
                            let b2 = a[y + 2]
                            let b3 = a[y + 3]
                            let b4 = a[y + 4]
                            a[y] = b0 ^ (~b1 & b2)
                            a[y + 1] = b1 ^ (~b2 & b3)
                            a[y + 2] = b2 ^ (~b3 & b4)
                            a[y + 3] = b3 ^ (~b4 & b0)
                            a[y + 4] = b4 ^ (~b0 & b1)
                        }
                        // ι
                        a[0] ^= constants[round]
                    }
                }
            }
        }
    }

    @inline(__always) private static func rotl(_ value: UInt64, _ by: UInt64) -> UInt64 {
        (value << by) | (value >> (64 - by))
    }
}

/// SHAKE-256 through OpenSSL's libcrypto. Status's `Shake256` helper squeezes 64 bytes.
public enum Shake256 {
    public static let statusLength = 64

    /// SHAKE-256 of `bytes`, `length` bytes long; nil only if libcrypto fails.
    public static func hash(_ bytes: [UInt8], length: Int = statusLength) -> [UInt8]? {
        guard length > 0, let context = EVP_MD_CTX_new() else { return nil }
        defer { EVP_MD_CTX_free(context) }
        var out = [UInt8](repeating: 0, count: length)
        let ok = bytes.withUnsafeBytes { input in
            EVP_DigestInit_ex(context, EVP_shake256(), nil) == 1
                && EVP_DigestUpdate(context, input.baseAddress, input.count) == 1
                && EVP_DigestFinalXOF(context, &out, length) == 1
        }
        return ok ? out : nil
    }
}
