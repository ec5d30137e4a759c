import Foundation

/// Runs blocking librdkafka work (a poll loop, a flush) on a thread of its own and
/// resumes the caller when it returns. The caller suspends; no Swift-concurrency or
/// GCD worker is held while the work blocks.
func onDedicatedThread<T: Sendable>(name: String, _ body: @escaping @Sendable () -> T) async -> T {
    await withCheckedContinuation { (continuation: CheckedContinuation<T, Never>) in
        let thread = Thread { continuation.resume(returning: body()) }
        thread.name = name
        thread.start()
    }
}

/// Lets a dedicated thread sleep until another thread has news for it, or briefly.
/// Only that thread ever waits; `signal` returns at once and may be called from
/// anywhere (handler tasks, shutdown handlers). A signal sent while the thread is not
/// waiting is kept, so the next wait returns at once.
final class Wakeup: @unchecked Sendable {
    // NSCondition is thread-safe; `pending` is guarded by it.
    private let condition = NSCondition()
    private var pending = false

    func signal() {
        condition.lock()
        pending = true
        condition.signal()
        condition.unlock()
    }

    /// Returns when signalled or after `timeout`.
    func wait(timeout: Duration) {
        let seconds = Double(timeout.components.seconds) + Double(timeout.components.attoseconds) / 1e18
        let deadline = Date(timeIntervalSinceNow: seconds)
        condition.lock()
        while !pending {
            if !condition.wait(until: deadline) { break }
        }
        pending = false
        condition.unlock()
    }
}
