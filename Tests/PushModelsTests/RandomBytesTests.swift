import Testing

@testable import PushModels

@Suite struct RandomBytesTests {
    @Test func drawsAreNeverRepeatedAcrossPoolRefills() {
        // 24-byte nonces over several refills of the 4 KiB pool: all distinct, all the
        // right size, and not the wiped (zero) bytes of a used pool.
        var seen = Set<[UInt8]>()
        for _ in 0..<(RandomBytes.poolSize / 24 * 5) {
            let nonce = RandomBytes.bytes(24)
            #expect(nonce.count == 24)
            #expect(nonce != [UInt8](repeating: 0, count: 24))
            seen.insert(nonce)
        }
        #expect(seen.count == RandomBytes.poolSize / 24 * 5)
    }

    @Test func sizesAtTheEdges() {
        #expect(RandomBytes.bytes(0).isEmpty)
        #expect(RandomBytes.bytes(-5).isEmpty)
        #expect(RandomBytes.bytes(1).count == 1)
        let large = RandomBytes.bytes(RandomBytes.largest + 1)
        #expect(large.count == RandomBytes.largest + 1)
        #expect(Set(large).count > 100)
        let whole = RandomBytes.bytes(RandomBytes.largest)
        #expect(whole.count == RandomBytes.largest)
        #expect(Set(whole).count > 100)
    }

    @Test func bytesLookUniform() {
        // 64 KiB drawn in 16-byte pieces: every byte value appears, none far off 1/256.
        var counts = [Int](repeating: 0, count: 256)
        for _ in 0..<4096 { for byte in RandomBytes.bytes(16) { counts[Int(byte)] += 1 } }
        #expect(counts.allSatisfy { $0 > 128 && $0 < 384 })
    }

    @Test func uuidsAreVersion4AndDistinct() {
        let ids = (0..<1000).map { _ in NotificationID.random().rawValue }
        #expect(Set(ids).count == 1000)
        #expect(ids.allSatisfy { $0.count == 36 && Array($0.utf8)[14] == UInt8(ascii: "4") })
    }
}
