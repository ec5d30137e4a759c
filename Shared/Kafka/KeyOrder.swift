import Synchronization

/// Keeps records with the same key in order while records with different keys run
/// concurrently. `reserve` is called in consumption order (synchronously); the record's
/// task then waits on its gate and calls `leave` when done, opening the next gate.
final class KeyOrder: Sendable {
    /// Opens once the records before it with the same key have finished.
    final class Gate: Sendable {
        private let state = Mutex<(open: Bool, waiter: CheckedContinuation<Void, Never>?)>((false, nil))

        init(open: Bool) {
            if open { state.withLock { $0.open = true } }
        }

        var isOpen: Bool { state.withLock { $0.open } }

        func wait() async {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let ready = state.withLock { s in
                    if s.open { return true }
                    s.waiter = continuation
                    return false
                }
                if ready { continuation.resume() }
            }
        }

        func open() {
            let waiter = state.withLock { s in
                s.open = true
                defer { s.waiter = nil }
                return s.waiter
            }
            waiter?.resume()
        }
    }

    /// Per key: the gates of records waiting behind the one running; and how many wait in all.
    private let queues = Mutex<(byKey: [[UInt8]: [Gate]], waiting: Int)>(([:], 0))
    /// Past this many records waiting behind busy keys, `reserve` refuses a busy key.
    private let maxWaiting: Int?

    init(maxWaiting: Int? = nil) {
        self.maxWaiting = maxWaiting.map { max(0, $0) }
    }

    /// Takes the next place in line for `key`; nil when the key is busy and
    /// `maxWaiting` records already wait (the record then takes no place in line).
    func reserve(_ key: [UInt8]) -> Gate? {
        queues.withLock { q in
            if var waiting = q.byKey[key] {
                if let maxWaiting, q.waiting >= maxWaiting { return nil }
                let gate = Gate(open: false)
                waiting.append(gate)
                q.byKey[key] = waiting
                q.waiting += 1
                return gate
            }
            q.byKey[key] = []
            return Gate(open: true)
        }
    }

    /// The record holding `key` finished: let the next one with that key run.
    func leave(_ key: [UInt8]) {
        let next: Gate? = queues.withLock { q in
            guard var waiting = q.byKey[key] else { return nil }
            if waiting.isEmpty {
                q.byKey[key] = nil
                return nil
            }
            let first = waiting.removeFirst()
            q.byKey[key] = waiting
            q.waiting -= 1
            return first
        }
        next?.open()
    }
}
