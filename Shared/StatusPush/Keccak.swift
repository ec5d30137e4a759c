import CLibCrypto

/// Keccak-256 as Ethereum and Status use it: the Keccak sponge (rate 136 bytes) with
/// the original `0x01` padding, not SHA3-256's `0x06`. Neither swift-crypto nor
/// Debian's OpenSSL 3.0 exposes that padding, so the permutation is written here
/// (FIPS 202 §3, Keccak-f[1600]). The same sponge with SHA3's and SHAKE's padding is
/// fuzzed against swift-crypto's SHA3-256 and OpenSSL's SHAKE-256 (`pushrelay-fuzz
/// keccak`), and its speed is in BENCHMARKS.md.
public enum Keccak {
    /// Keccak-256 of the concatenation of `parts`.
    public static func keccak256(_ parts: [UInt8]...) -> [UInt8] {
        var sponge = Sponge(rate: 136, padding: 0x01)
        for part in parts { sponge.absorb(part) }
        return sponge.squeeze(32)
    }

    /// The sponge with any rate and domain padding (Keccak `0x01`, SHA3 `0x06`, SHAKE `0x1F`).
    public struct Sponge: Sendable {
        private var state = [UInt64](repeating: 0, count: 25)
        private var buffer: [UInt8] = []
        let rate: Int
        let padding: UInt8

        public init(rate: Int, padding: UInt8) {
            precondition(rate > 0 && rate < 200 && rate % 8 == 0, "Keccak rate must be a multiple of 8 below 200")
            self.rate = rate
            self.padding = padding
            buffer.reserveCapacity(rate)
        }

        public mutating func absorb(_ bytes: [UInt8]) {
            for byte in bytes {
                buffer.append(byte)
                if buffer.count == rate { absorbBlock() }
            }
        }

        private mutating func absorbBlock() {
            for lane in 0..<(rate / 8) {
                var value: UInt64 = 0
                for i in 0..<8 { value |= UInt64(buffer[lane * 8 + i]) << (8 * UInt64(i)) }
                state[lane] ^= value
            }
            buffer.removeAll(keepingCapacity: true)
            Keccak.permute(&state)
        }

        /// Pads, then squeezes `count` bytes (consumes the sponge).
        public mutating func squeeze(_ count: Int) -> [UInt8] {
            var block = buffer + [UInt8](repeating: 0, count: rate - buffer.count)
            block[buffer.count] ^= padding
            block[rate - 1] ^= 0x80
            buffer = block
            absorbBlock()
            var out: [UInt8] = []
            out.reserveCapacity(count)
            while true {
                for lane in 0..<(rate / 8) {
                    for i in 0..<8 {
                        if out.count == count { return out }
                        out.append(UInt8(truncatingIfNeeded: state[lane] >> (8 * UInt64(i))))
                    }
                }
                Keccak.permute(&state)
            }
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
    static func permute(_ a: inout [UInt64]) {
        var c = [UInt64](repeating: 0, count: 5)
        for round in 0..<24 {
            for x in 0..<5 { c[x] = a[x] ^ a[x + 5] ^ a[x + 10] ^ a[x + 15] ^ a[x + 20] }
            for x in 0..<5 {
                let d = c[(x + 4) % 5] ^ rotl(c[(x + 1) % 5], 1)
                for y in stride(from: 0, to: 25, by: 5) { a[y + x] ^= d }
            }
            var current = a[1]
            for i in 0..<24 {
                let lane = piLanes[i]
                let next = a[lane]
                a[lane] = rotl(current, rotations[i])
                current = next
            }
            for y in stride(from: 0, to: 25, by: 5) {
                for x in 0..<5 { c[x] = a[y + x] }
                for x in 0..<5 { a[y + x] = c[x] ^ (~c[(x + 1) % 5] & c[(x + 2) % 5]) }
            }
            a[0] ^= roundConstants[round]
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
