import CHiredis
import Dispatch
import Synchronization

/// One hiredis context, used only on its own serial queue so blocking socket calls
/// never run on Swift's cooperative pool. Reconnects lazily after an error.
///
/// Auto-pipelining: callers queue their commands and the queue drains them in round
/// trips. Everything that arrives while a round trip is under way goes out together in
/// the next one, so N concurrent callers cost about one round trip instead of N. A
/// caller's commands stay contiguous and in order.
final class RedisConnection: @unchecked Sendable {
    private struct Waiting {
        var commands: [[[UInt8]]]
        var continuation: CheckedContinuation<[RedisValue], any Error>
    }

    private struct Queue {
        var waiting: [Waiting] = []
        var draining = false
    }

    // `context` is touched only on `queue`: that is what makes this type Sendable.
    private var context: UnsafeMutablePointer<redisContext>?
    private let queue: DispatchQueue
    private let configuration: RedisConfiguration
    private let pending = Mutex(Queue())
    /// Commands sent in one round trip at most; the rest wait for the next.
    static let maxCommandsPerRoundTrip = 4096
    let roundTrips = Atomic<Int>(0)

    init(configuration: RedisConfiguration, index: Int) {
        self.configuration = configuration
        self.queue = DispatchQueue(label: "pushrelay.redis.\(configuration.address).\(index)")
    }

    deinit {
        if let context { redisFree(context) }
    }

    func pipeline(_ commands: [[[UInt8]]]) async throws -> [RedisValue] {
        try await withCheckedThrowingContinuation { continuation in
            let start = pending.withLock { state in
                state.waiting.append(Waiting(commands: commands, continuation: continuation))
                if state.draining { return false }
                state.draining = true
                return true
            }
            if start { queue.async { self.drain() } }
        }
    }

    /// Sends what waits, round trip after round trip, until nothing does.
    private func drain() {
        while true {
            let batch: [Waiting] = pending.withLock { state in
                var taken = 0
                var count = 0
                // Always at least one caller, however many commands it has.
                while taken < state.waiting.count
                    && (taken == 0 || count + state.waiting[taken].commands.count <= Self.maxCommandsPerRoundTrip)
                {
                    count += state.waiting[taken].commands.count
                    taken += 1
                }
                var batch: [Waiting] = []
                if taken == state.waiting.count {
                    swap(&batch, &state.waiting)  // the usual case: every caller fits
                } else {
                    batch = Array(state.waiting.prefix(taken))
                    state.waiting.removeFirst(taken)
                }
                if batch.isEmpty { state.draining = false }
                return batch
            }
            if batch.isEmpty { return }
            roundTrip(batch)
        }
    }

    private var timeval: timeval {
        let (seconds, attoseconds) = configuration.timeout.components
        return CHiredis.timeval(tv_sec: Int(seconds), tv_usec: Int(attoseconds / 1_000_000_000_000))
    }

    private func connected() throws(RedisError) -> UnsafeMutablePointer<redisContext> {
        if let context {
            if context.pointee.err == 0 { return context }
            redisFree(context)
            self.context = nil
        }
        guard let fresh = redisConnectWithTimeout(configuration.host, Int32(configuration.port), timeval) else {
            throw RedisError(code: .connect, message: "cannot allocate a hiredis context")
        }
        if fresh.pointee.err != 0 {
            let error = RedisError.fromContext(fresh, during: "connect \(configuration.host):\(configuration.port)")
            redisFree(fresh)
            throw RedisError(code: .connect, message: error.message)
        }
        redisSetTimeout(fresh, timeval)
        context = fresh
        return fresh
    }

    /// One round trip for every waiting caller. Callers answered before a failure keep
    /// their replies; the failure goes to the caller it hit and to every one after it.
    private func roundTrip(_ batch: [Waiting]) {
        roundTrips.add(1, ordering: .relaxed)
        let context: UnsafeMutablePointer<redisContext>
        do {
            context = try connected()
            for waiting in batch {
                for command in waiting.commands {
                    guard Self.append(command, to: context) == REDIS_OK else { throw failure(context, "append") }
                }
            }
        } catch {
            for waiting in batch { waiting.continuation.resume(throwing: error) }
            return
        }
        for (position, waiting) in batch.enumerated() {
            do {
                var replies: [RedisValue] = []
                replies.reserveCapacity(waiting.commands.count)
                for _ in waiting.commands {
                    var raw: UnsafeMutableRawPointer?
                    guard redisGetReply(context, &raw) == REDIS_OK, let raw else {
                        throw failure(context, "read reply")
                    }
                    let reply = raw.assumingMemoryBound(to: redisReply.self)
                    replies.append(Self.value(of: reply))
                    freeReplyObject(raw)
                }
                waiting.continuation.resume(returning: replies)
            } catch {
                for rest in batch[position...] { rest.continuation.resume(throwing: error) }
                return
            }
        }
    }

    /// Drops the broken context so the next call reconnects, and describes the error.
    private func failure(_ context: UnsafeMutablePointer<redisContext>, _ operation: String) -> RedisError {
        let error = RedisError.fromContext(context, during: operation)
        redisFree(context)
        self.context = nil
        return error
    }

    private static func append(_ command: [[UInt8]], to context: UnsafeMutablePointer<redisContext>) -> Int32 {
        // Copy each argument into one contiguous buffer so the pointers stay valid for the call.
        let total = command.reduce(0) { $0 + $1.count + 1 }
        var storage = [CChar](repeating: 0, count: max(total, 1))
        var offsets: [Int] = []
        var lengths: [Int] = []
        var cursor = 0
        for argument in command {
            offsets.append(cursor)
            lengths.append(argument.count)
            for byte in argument {
                storage[cursor] = CChar(bitPattern: byte)
                cursor += 1
            }
            cursor += 1
        }
        return storage.withUnsafeBufferPointer { buffer in
            var pointers: [UnsafePointer<CChar>?] = offsets.map { buffer.baseAddress! + $0 }
            return pointers.withUnsafeMutableBufferPointer { argv in
                redisAppendCommandArgv(context, Int32(command.count), argv.baseAddress, lengths)
            }
        }
    }

    private static func value(of reply: UnsafeMutablePointer<redisReply>) -> RedisValue {
        let r = reply.pointee
        switch r.type {
        case REDIS_REPLY_INTEGER:
            return .int(Int64(r.integer))
        case REDIS_REPLY_NIL:
            return .null
        case REDIS_REPLY_STRING, REDIS_REPLY_STATUS:
            guard let str = r.str else { return .bytes([]) }
            return .bytes(Array(UnsafeRawBufferPointer(start: str, count: r.len)))
        case REDIS_REPLY_ERROR:
            guard let str = r.str else { return .error("") }
            return .error(String(decoding: UnsafeRawBufferPointer(start: str, count: r.len), as: UTF8.self))
        case REDIS_REPLY_ARRAY:
            var items: [RedisValue] = []
            items.reserveCapacity(r.elements)
            for i in 0..<r.elements {
                if let element = r.element[i] { items.append(value(of: element)) } else { items.append(.null) }
            }
            return .array(items)
        default:
            return .null
        }
    }
}

/// The connections to one Redis server, taken in turn.
final class RedisPool: Sendable {
    private let connections: [RedisConnection]
    private let next = Mutex(0)

    init(configuration: RedisConfiguration) {
        connections = (0..<configuration.connections).map {
            RedisConnection(configuration: configuration, index: $0)
        }
    }

    func pipeline(_ commands: [[[UInt8]]]) async throws -> [RedisValue] {
        let index = next.withLock { value in
            value = (value + 1) % connections.count
            return value
        }
        return try await connections[index].pipeline(commands)
    }

    var roundTrips: Int { connections.reduce(0) { $0 + $1.roundTrips.load(ordering: .relaxed) } }
}
