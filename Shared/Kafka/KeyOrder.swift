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

    /// Per key: the gates of records waiting behind the one running.
    private let queues = Mutex<[[UInt8]: [Gate]]>([:])

    /// Takes the next place in line for `key`.
    func reserve(_ key: [UInt8]) -> Gate {
        queues.withLock { q in
            if var waiting = q[key] {
                let gate = Gate(open: false)
                waiting.append(gate)
                q[key] = waiting
                return gate
            }
            q[key] = []
            return Gate(open: true)
        }
    }

    /// The record holding `key` finished: let the next one with that key run.
    func leave(_ key: [UInt8]) {
        let next: Gate? = queues.withLock { q in
            guard var waiting = q[key] else { return nil }
            if waiting.isEmpty {
                q[key] = nil
                return nil
            }
            let first = waiting.removeFirst()
            q[key] = waiting
            return first
        }
        next?.open()
    }
}
