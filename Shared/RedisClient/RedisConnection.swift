import CHiredis
import NIOCore
import NIOPosix
import NIOSSL
import NIOTLS
import Synchronization

/// One connection to a Redis server, owned by one NIO event loop: its socket, its
/// queue of callers and hiredis's reply reader are touched only there, so a caller
/// already on that loop (a service runs its tasks on the loops, see
/// `ServiceRuntime`) sends, waits and resumes without a thread switch.
/// Reconnects lazily after an error.
///
/// Auto-pipelining: a caller's commands are written at once and flushed once per loop
/// turn, so the callers that run in one turn share one write; replies come back in
/// order and go to the callers in order. A caller's commands stay contiguous.
///
/// Commands are written in RESP; replies are parsed by hiredis's reader.
///
/// A new connection runs TLS when configured (the handshake before any byte of a
/// command) and writes `AUTH` ahead of its first commands, pipelined with them: a
/// refused `AUTH` fails the connection and its callers (their commands were refused
/// with `NOAUTH`, so none ran).
final class RedisConnection: @unchecked Sendable {
    private struct Waiting {
        var remaining: Int
        var replies: [RedisValue]
        /// Nil for the connection's own `AUTH`.
        var continuation: CheckedContinuation<[RedisValue], any Error>?
        var deadline: NIODeadline
    }

    private enum State {
        case idle
        case connecting
        case connected(any Channel)
    }

    let loop: any EventLoop
    private let configuration: RedisConfiguration
    // Everything below is touched only on `loop`: that is what makes this type Sendable.
    private var state = State.idle
    /// Callers whose commands are written, oldest first.
    private var waiting = CircularBuffer<Waiting>()
    /// Callers that arrived while connecting, with their commands.
    private var unsent: [(commands: [[[UInt8]]], waiting: Waiting)] = []
    private var flushScheduled = false
    private var timer: Scheduled<Void>?
    /// True from a TLS connection's connect until its handshake completes: a failure
    /// then is the handshake's (a plaintext port, an untrusted or misnamed certificate).
    private var handshaking = false
    /// Writes flushed so far: how many round trips the callers shared.
    let roundTrips = Atomic<Int>(0)

    /// `configuration.timeout`, as NIO counts time (bounded: it comes from a setting).
    private let timeout: TimeAmount

    init(configuration: RedisConfiguration, loop: any EventLoop) {
        self.configuration = configuration
        self.loop = loop
        let (seconds, attoseconds) = configuration.timeout.components
        timeout = .nanoseconds(min(max(seconds, 0), 1_000_000) * 1_000_000_000 + max(attoseconds, 0) / 1_000_000_000)
    }

    func pipeline(_ commands: [[[UInt8]]]) async throws -> [RedisValue] {
        try await withCheckedThrowingContinuation { continuation in
            if loop.inEventLoop {
                submit(commands, continuation)
            } else {
                loop.execute { self.submit(commands, continuation) }
            }
        }
    }

    private func submit(_ commands: [[[UInt8]]], _ continuation: CheckedContinuation<[RedisValue], any Error>) {
        guard !commands.isEmpty else { return continuation.resume(returning: []) }
        // The deadline is set when the commands are written (`send`).
        let caller = Waiting(
            remaining: commands.count, replies: [], continuation: continuation, deadline: .distantFuture)
        switch state {
        case .connected(let channel):
            send(commands, caller, on: channel)
        case .connecting:
            unsent.append((commands, caller))
        case .idle:
            unsent.append((commands, caller))
            connect()
        }
    }

    private func send(_ commands: [[[UInt8]]], _ caller: Waiting, on channel: any Channel) {
        // The reply is awaited from now: time spent connecting has its own bound (the
        // connect timeout), so a slow connect does not leave the commands no time.
        var caller = caller
        caller.deadline = .now() + timeout
        var size = 0
        for command in commands { size += RESP.maxFramedCount(command) }
        var buffer = channel.allocator.buffer(capacity: size)
        for command in commands { RESP.write(command, into: &buffer) }
        waiting.append(caller)
        channel.write(buffer, promise: nil)
        if !flushScheduled {
            flushScheduled = true
            loop.execute {
                self.flushScheduled = false
                guard case .connected(let current) = self.state, current === channel else { return }
                self.roundTrips.add(1, ordering: .relaxed)
                channel.flush()
            }
        }
        armTimer()
    }

    private func connect() {
        state = .connecting
        let address = "\(configuration.host):\(configuration.port)"
        let tls = configuration.tls
        let host = configuration.host
        ClientBootstrap(group: loop)
            .connectTimeout(timeout)
            .channelOption(.socketOption(.tcp_nodelay), value: 1)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    if let tls { try channel.pipeline.syncOperations.addHandler(try tls.handler(host: host)) }
                    try channel.pipeline.syncOperations.addHandler(RedisReplyHandler(connection: self))
                }
            }
            .connect(host: configuration.host, port: configuration.port)
            .hop(to: loop)
            .whenComplete { result in
                let callers = self.unsent
                self.unsent = []
                switch result {
                case .success(let channel):
                    self.state = .connected(channel)
                    self.handshaking = tls != nil
                    if let credentials = self.configuration.credentials {
                        let auth = Waiting(remaining: 1, replies: [], continuation: nil, deadline: .distantFuture)
                        self.send([credentials.command], auth, on: channel)
                    }
                    for (commands, caller) in callers { self.send(commands, caller, on: channel) }
                case .failure(let error):
                    self.state = .idle
                    let code: RedisError.Code = error is NIOSSLError || error is NIOSSLExtraError ? .tls : .connect
                    let failure = RedisError(code: code, message: "connect \(address): \(error)")
                    for (_, caller) in callers { caller.continuation?.resume(throwing: failure) }
                }
            }
    }

    /// One reply, for the oldest caller still waiting.
    fileprivate func received(_ reply: RedisValue, on channel: any Channel) {
        guard case .connected(let current) = state, current === channel else { return }
        guard var caller = waiting.first else {
            return drop(channel, RedisError(code: .protocolError, message: "a reply nobody asked for"))
        }
        caller.replies.append(reply)
        caller.remaining -= 1
        if caller.remaining > 0 {
            waiting[waiting.startIndex] = caller
            return
        }
        waiting.removeFirst()
        guard let continuation = caller.continuation else {
            // The connection's AUTH: refused, it fails the connection and everyone behind it.
            if case .error(let message) = reply { drop(channel, RedisError(code: .auth, message: "AUTH: \(message)")) }
            return
        }
        continuation.resume(returning: caller.replies)
        // The timer stays armed when the queue empties: it finds nothing to fail and
        // ends. One timer per timeout, not one scheduled and cancelled per round trip.
    }

    /// The connection broke or misbehaved: every caller still waiting gets `error` (the
    /// commands may or may not have run), and the next call reconnects.
    fileprivate func drop(_ channel: any Channel, _ error: RedisError) {
        guard case .connected(let current) = state, current === channel else { return }
        state = .idle
        timer?.cancel()
        timer = nil
        var error = error
        if handshaking && error.code != .tls {
            error = RedisError(
                code: .tls,
                message:
                    "TLS handshake with \(configuration.host):\(configuration.port) did not complete: \(error.message)")
        }
        handshaking = false
        let callers = waiting
        waiting.removeAll()
        for caller in callers { caller.continuation?.resume(throwing: error) }
        channel.close(promise: nil)
    }

    /// The TLS handshake of `channel` completed.
    fileprivate func secured(_ channel: any Channel) {
        guard case .connected(let current) = state, current === channel else { return }
        handshaking = false
    }

    /// Fails the connection when its oldest caller has waited longer than the timeout.
    /// Armed for the oldest caller's deadline; when it fires it fails an overdue caller,
    /// re-arms for the next deadline, or (nobody waiting) ends.
    private func armTimer() {
        guard timer == nil, let oldest = waiting.first else { return }
        timer = loop.scheduleTask(deadline: oldest.deadline) {
            self.timer = nil
            guard let oldest = self.waiting.first, case .connected(let channel) = self.state else { return }
            if oldest.deadline <= .now() {
                self.drop(
                    channel,
                    RedisError(code: .io, message: "read reply: no answer within \(self.configuration.timeout)"))
            } else {
                self.armTimer()
            }
        }
    }
}

/// Feeds what the socket reads to hiredis's reply reader and hands each whole reply to
/// the connection.
private final class RedisReplyHandler: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer

    private let connection: RedisConnection
    private var reader: UnsafeMutablePointer<redisReader>?

    init(connection: RedisConnection) {
        self.connection = connection
        reader = redisReaderCreate()
    }

    deinit {
        if let reader { redisReaderFree(reader) }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let buffer = unwrapInboundIn(data)
        guard let reader else {
            return connection.drop(context.channel, RedisError(code: .io, message: "cannot allocate a hiredis reader"))
        }
        let fed = buffer.withUnsafeReadableBytes { bytes in
            redisReaderFeed(reader, bytes.baseAddress?.assumingMemoryBound(to: CChar.self), bytes.count)
        }
        guard fed == REDIS_OK else { return protocolError(context, reader) }
        while true {
            var raw: UnsafeMutableRawPointer?
            guard redisReaderGetReply(reader, &raw) == REDIS_OK else { return protocolError(context, reader) }
            guard let raw else { return }
            let value = RESP.value(of: raw.assumingMemoryBound(to: redisReply.self))
            freeReplyObject(raw)
            connection.received(value, on: context.channel)
        }
    }

    private func protocolError(_ context: ChannelHandlerContext, _ reader: UnsafeMutablePointer<redisReader>) {
        let message = withUnsafeBytes(of: reader.pointee.errstr) { raw in
            String(decoding: raw.prefix(while: { $0 != 0 }), as: UTF8.self)
        }
        connection.drop(context.channel, RedisError(code: .protocolError, message: "read reply: \(message)"))
    }

    func channelInactive(context: ChannelHandlerContext) {
        connection.drop(context.channel, RedisError(code: .io, message: "read reply: connection closed"))
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        let code: RedisError.Code = error is NIOSSLError || error is NIOSSLExtraError ? .tls : .io
        connection.drop(context.channel, RedisError(code: code, message: "read reply: \(error)"))
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if case .handshakeCompleted = event as? TLSUserEvent { connection.secured(context.channel) }
        context.fireUserInboundEventTriggered(event)
    }
}

/// Commands out in RESP, replies copied out of hiredis's reply objects.
enum RESP {
    /// The most a command's framing adds to it: `*`, a count of up to 20 digits and CRLF,
    /// then per argument `$`, a length of up to 20 digits, CRLF, the bytes and CRLF.
    static func maxFramedCount(_ command: [[UInt8]]) -> Int {
        var size = 23
        for argument in command { size += argument.count + 25 }
        return size
    }

    /// Writes the command in one pass into memory reserved up front (byte by byte, each
    /// `ByteBuffer.writeInteger` cost ~160 instructions: 2.5 % of ingest).
    static func write(_ command: [[UInt8]], into buffer: inout ByteBuffer) {
        buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: maxFramedCount(command)) { out in
            var at = 0
            func put(_ byte: UInt8) {
                out[at] = byte
                at += 1
            }
            func putDecimalLine(_ n: Int) {
                var value = n.magnitude
                var digits = 1
                var rest = value / 10
                while rest > 0 {
                    digits += 1
                    rest /= 10
                }
                var index = at + digits
                at = index
                repeat {
                    index -= 1
                    out[index] = UInt8(ascii: "0") + UInt8(value % 10)
                    value /= 10
                } while value > 0
                put(UInt8(ascii: "\r"))
                put(UInt8(ascii: "\n"))
            }
            put(UInt8(ascii: "*"))
            putDecimalLine(command.count)
            for argument in command {
                put(UInt8(ascii: "$"))
                putDecimalLine(argument.count)
                argument.withUnsafeBytes { bytes in
                    UnsafeMutableRawBufferPointer(rebasing: out[at..<(at + bytes.count)]).copyMemory(from: bytes)
                }
                at += argument.count
                put(UInt8(ascii: "\r"))
                put(UInt8(ascii: "\n"))
            }
            return at
        }
    }

    static func value(of reply: UnsafeMutablePointer<redisReply>) -> RedisValue {
        let r = reply.pointee
        switch r.type {
        case REDIS_REPLY_INTEGER:
            return .int(Int64(r.integer))
        case REDIS_REPLY_NIL:
            return .null
        case REDIS_REPLY_STRING, REDIS_REPLY_STATUS:
            guard let str = r.str, r.len > 0 else { return .bytes([]) }
            // Copied straight into the array's storage (`Array(_:)` over a raw buffer took
            // the generic collection copy: ~230 instructions a reply string).
            let count = Int(r.len)
            return .bytes(
                [UInt8](unsafeUninitializedCapacity: count) { buffer, initialized in
                    UnsafeMutableRawBufferPointer(buffer).copyMemory(
                        from: UnsafeRawBufferPointer(start: str, count: count))
                    initialized = count
                })
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

/// The connections to one Redis server, spread over the event loops. A caller on a
/// loop uses that loop's connections, so its commands need no thread switch.
final class RedisPool: Sendable {
    private let connections: [RedisConnection]
    private let next = Atomic<Int>(0)

    init(configuration: RedisConfiguration) {
        let group = MultiThreadedEventLoopGroup.singleton
        connections = (0..<configuration.connections).map { _ in
            RedisConnection(configuration: configuration, loop: group.next())
        }
    }

    func pipeline(_ commands: [[[UInt8]]]) async throws -> [RedisValue] {
        let turn = UInt(bitPattern: next.add(1, ordering: .relaxed).newValue)
        let count = UInt(connections.count)
        if let current = MultiThreadedEventLoopGroup.currentEventLoop {
            // Rotate among this loop's connections, if it has any.
            for offset in 0..<count {
                let connection = connections[Int((turn &+ offset) % count)]
                if connection.loop === current { return try await connection.pipeline(commands) }
            }
        }
        return try await connections[Int(turn % count)].pipeline(commands)
    }

    var roundTrips: Int { connections.reduce(0) { $0 + $1.roundTrips.load(ordering: .relaxed) } }
}
