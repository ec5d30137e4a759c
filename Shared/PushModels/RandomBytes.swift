import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Random bytes for nonces and identifiers, from the kernel's generator 4 KiB at a time.
///
/// glibc's `arc4random_buf` (as libsodium's `randombytes_buf`) is one `getrandom` system
/// call per call: at 1,000 notifications/s that was the encryptor loop's most frequent
/// system call (four a notification: two nonces, two push ids) and two a notification in
/// ingest (benchmarks/history/20-issue-27-part-4-fakes-and-system-calls.md). Here one call fills a pool whose bytes
/// are each handed out once and wiped as they go. They are the kernel's bytes unchanged,
/// so a nonce or id drawn here is as unpredictable as one drawn alone; keys are not drawn
/// here (they are made with libsodium directly and never sit in a shared buffer). The
/// services never fork, so no two processes share a pool.
public enum RandomBytes {
    static let poolSize = 4096
    /// Larger requests go to the kernel directly.
    static let largest = 256

    private struct Pool {
        var bytes = [UInt8](repeating: 0, count: RandomBytes.poolSize)
        var used = RandomBytes.poolSize
    }

    private static let pool = Mutex(Pool())

    /// Fills `buffer` with random bytes.
    public static func fill(_ buffer: UnsafeMutableRawBufferPointer) {
        guard let target = buffer.baseAddress, buffer.count > 0 else { return }
        let count = buffer.count
        guard count <= largest else {
            arc4random_buf(target, count)
            return
        }
        pool.withLock { pool in
            if pool.bytes.count - pool.used < count {
                pool.bytes.withUnsafeMutableBytes { raw in
                    if let base = raw.baseAddress { arc4random_buf(base, raw.count) }
                }
                pool.used = 0
            }
            let used = pool.used
            pool.bytes.withUnsafeMutableBytes { raw in
                guard let base = raw.baseAddress else { return }
                target.copyMemory(from: base + used, byteCount: count)
                (base + used).initializeMemory(as: UInt8.self, repeating: 0, count: count)
            }
            pool.used = used + count
        }
    }

    /// `count` random bytes (0...`Int.max`; a negative count gives none).
    public static func bytes(_ count: Int) -> [UInt8] {
        guard count > 0 else { return [] }
        return [UInt8](unsafeUninitializedCapacity: count) { buffer, initialized in
            fill(UnsafeMutableRawBufferPointer(buffer))
            initialized = count
        }
    }
}
