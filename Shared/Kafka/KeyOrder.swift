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

    /// One key's line: the gates of the records waiting behind the one running, and
    /// since when that one holds the key.
    private struct Line {
        var gates: [Gate] = []
        var since: ContinuousClock.Instant
    }

    /// Per key its line; and how many records wait in all.
    private let queues = Mutex<(byKey: [[UInt8]: Line], waiting: Int)>(([:], 0))
    /// Past this many records waiting behind busy keys, `reserve` refuses a key that has
    /// been busy for at least `minimumBusy`.
    private let maxWaiting: Int?
    private let minimumBusy: Duration

    init(maxWaiting: Int? = nil, minimumBusy: Duration = .zero) {
        self.maxWaiting = maxWaiting.map { max(0, $0) }
        self.minimumBusy = max(.zero, minimumBusy)
    }

    /// Takes the next place in line for `key`; nil when `maxWaiting` records already wait
    /// and the key has been busy for `minimumBusy` or longer (a slow key, not one of the
    /// many that are busy for a moment under load): the record then takes no place in line.
    func reserve(_ key: [UInt8], now: ContinuousClock.Instant = .now) -> Gate? {
        queues.withLock { q in
            if var line = q.byKey[key] {
                if let maxWaiting, q.waiting >= maxWaiting, now - line.since >= minimumBusy { return nil }
                let gate = Gate(open: false)
                line.gates.append(gate)
                q.byKey[key] = line
                q.waiting += 1
                return gate
            }
            q.byKey[key] = Line(since: now)
            return Gate(open: true)
        }
    }

    /// The record holding `key` finished: let the next one with that key run.
    func leave(_ key: [UInt8], now: ContinuousClock.Instant = .now) {
        let next: Gate? = queues.withLock { q in
            guard var line = q.byKey[key] else { return nil }
            if line.gates.isEmpty {
                q.byKey[key] = nil
                return nil
            }
            let first = line.gates.removeFirst()
            line.since = now
            q.byKey[key] = line
            q.waiting -= 1
            return first
        }
        next?.open()
    }
}
