import Foundation
import LogKeys
import Logging
import NIOCore
import NIOHPACK
import NIOHTTP2
import NIOPosix
import NIOSSL
import NIOTLS
import Synchronization

/// One request to a push provider, made by `PushHTTP2Client.request(path:body:)`: a POST
/// on the client's origin.
public struct PushRequest: Sendable {
    /// The whole header block: the pseudo-headers first, then the caller's regular
    /// headers (names in lower case), sent as they are.
    public var headers: HPACKHeaders
    public var body: ByteBuffer
}

/// A provider's answer.
public struct PushResponse: Sendable {
    public var status: Int
    public var headers: HPACKHeaders
    public var body: ByteBuffer
}

/// Why a request got no answer, split by the one thing the dispatcher must know: can
/// the provider have the push?
public enum PushTransportError: Error, Sendable, CustomStringConvertible {
    /// The provider cannot have processed it: the request was never written whole (no
    /// connection, TLS or ALPN failed, no stream in time), or the server said so (a
    /// RST_STREAM with REFUSED_STREAM, or a stream above a GOAWAY's last-stream-id,
    /// RFC 9113 §6.8 and §8.7). `resendable` when another stream may take it at once.
    case notSent(String, resendable: Bool)
    /// The request was written and no answer came (timeout, connection lost, a reset):
    /// the provider may have it.
    case noAnswer(String)

    public var description: String {
        switch self {
        case .notSent(let why, _): "not sent: \(why)"
        case .noAnswer(let why): "no answer: \(why)"
        }
    }
}

/// An HTTP/2 client made for pushing to one origin (APNs, FCM): many streams per
/// connection up to the server's SETTINGS_MAX_CONCURRENT_STREAMS, another connection
/// only when every open one is full, frames written straight to the connection (no
/// channel per stream) and one flush per event-loop turn for everything written in it.
/// A GOAWAY or REFUSED_STREAM is read from the frames, so the requests the server did
/// not process are sent again at once, and only those.
public final class PushHTTP2Client: Sendable {
    public struct Configuration: Sendable {
        /// `https://host[:port][/prefix]`.
        public var baseURL: String
        public var caFile: String?
        /// Connections opened at most; the next one only when the open ones are full.
        public var maxConnections: Int
        public var connectTimeout: Duration

        public init(baseURL: String, caFile: String?, maxConnections: Int, connectTimeout: Duration = .seconds(10)) {
            self.baseURL = baseURL
            self.caFile = caFile
            self.maxConnections = max(1, maxConnections)
            self.connectTimeout = connectTimeout
        }
    }

    /// Where requests go, from the base URL.
    struct Origin: Sendable {
        var host: String
        var port: Int
        var authority: String
        var pathPrefix: String

        init(_ baseURL: String) throws {
            guard let url = URLComponents(string: baseURL), url.scheme?.lowercased() == "https",
                let host = url.host, !host.isEmpty
            else { throw ProviderSetupError("provider URL must be https://host[:port]: \(baseURL)") }
            let port = url.port ?? 443
            guard (1...65_535).contains(port) else {
                throw ProviderSetupError("provider URL port out of range: \(port)")
            }
            self.host = host
            self.port = port
            self.authority = port == 443 ? host : "\(host):\(port)"
            self.pathPrefix = url.path.hasSuffix("/") ? String(url.path.dropLast()) : url.path
        }
    }

    /// The largest response body read; providers' answers are a few hundred bytes.
    static let maxResponseBody = 64 * 1024
    /// Requests refused unprocessed are sent again at once this many times (each time on
    /// a connection that had not refused it).
    static let resends = 8

    let origin: Origin
    private let configuration: Configuration
    private let sslContext: NIOSSLContext
    private let group: any EventLoopGroup
    private let pool = Mutex(Pool())
    private let resent = Atomic<Int>(0)
    private let logger: Logger

    struct Pool {
        var connections: [PushConnection] = []
        var closed = false
    }

    public init(configuration: Configuration, logger: Logger) throws {
        self.configuration = configuration
        self.origin = try Origin(configuration.baseURL)
        var tls = try makeTLSConfiguration(caFile: configuration.caFile)
        tls.applicationProtocols = ["h2"]
        self.sslContext = try NIOSSLContext(configuration: tls)
        self.group = MultiThreadedEventLoopGroup.singleton
        self.logger = logger
    }

    /// Sends `request` and returns the answer; throws `PushTransportError` when there is
    /// none. Requests the server refused unprocessed are sent again at once.
    public func execute(_ request: PushRequest, timeout: Duration) async throws -> PushResponse {
        var attempt = 0
        while true {
            do {
                return try await executeOnce(request, timeout: timeout)
            } catch PushTransportError.notSent(let why, resendable: true) where attempt < Self.resends {
                attempt += 1
                resent.add(1, ordering: .relaxed)
                logger.debug("provider did not process the request; sending again", metadata: [LogKey.why: "\(why)"])
            }
        }
    }

    /// A POST to `path` on this client's origin, its pseudo-headers in place: add the
    /// regular headers to `headers`. The path is not added to HPACK's table: APNs's
    /// names the device, so each would be a table entry used once.
    public func request(path: String, body: ByteBuffer) -> PushRequest {
        var headers = HPACKHeaders()
        headers.reserveCapacity(12)
        headers.add(name: HTTPHeaderName.method, value: "POST")
        headers.add(name: HTTPHeaderName.scheme, value: "https")
        headers.add(name: HTTPHeaderName.authority, value: origin.authority)
        headers.add(name: HTTPHeaderName.path, value: origin.pathPrefix + path, indexing: .nonIndexable)
        return PushRequest(headers: headers, body: body)
    }

    private func executeOnce(_ request: PushRequest, timeout: Duration) async throws -> PushResponse {
        // Any Duration may be configured: at least 1 ms, at most an hour.
        let (seconds, attoseconds) = timeout.components
        let milliseconds = min(max(seconds, 0), 3600) * 1000 + max(attoseconds, 0) / 1_000_000_000_000_000
        let deadline = NIODeadline.now() + .milliseconds(max(milliseconds, 1))
        guard let connection = acquire() else {
            throw PushTransportError.notSent("client shut down", resendable: false)
        }
        return try await withCheckedThrowingContinuation { continuation in
            connection.submit(
                PushConnectionHandler.Pending(
                    headers: request.headers, body: request.body, deadline: deadline, continuation: continuation))
        }
    }

    /// The least loaded open connection with a free stream; a new connection when every
    /// open one is full and fewer than the maximum are open; else the least loaded.
    private func acquire() -> PushConnection? {
        pool.withLock { pool -> PushConnection? in
            guard !pool.closed else { return nil }
            pool.connections.removeAll { !$0.isOpen }
            var chosen: PushConnection?
            var chosenLoad = Int.max
            for connection in pool.connections {
                let load = connection.load.load(ordering: .relaxed)
                if load < connection.capacity.load(ordering: .relaxed) && load < chosenLoad {
                    chosen = connection
                    chosenLoad = load
                }
            }
            if chosen == nil {
                if pool.connections.count < configuration.maxConnections {
                    let connection = PushConnection(
                        origin: origin, sslContext: sslContext, eventLoop: group.next(),
                        connectTimeout: configuration.connectTimeout, logger: logger)
                    pool.connections.append(connection)
                    chosen = connection
                } else {
                    chosen = pool.connections.min {
                        $0.load.load(ordering: .relaxed) < $1.load.load(ordering: .relaxed)
                    }
                }
            }
            chosen?.load.add(1, ordering: .relaxed)
            return chosen
        }
    }

    /// Requests sent again because the server had not processed them (refused streams,
    /// streams above a GOAWAY's last-stream-id).
    public var unprocessedResends: Int { resent.load(ordering: .relaxed) }

    public func shutdown() async {
        let connections = pool.withLock { pool -> [PushConnection] in
            pool.closed = true
            defer { pool.connections = [] }
            return pool.connections
        }
        for connection in connections { await connection.close() }
    }
}

/// One HTTP/2 connection and what the pool needs to know about it without a hop to its
/// event loop.
final class PushConnection: Sendable {
    let eventLoop: any EventLoop
    private let handler: PushConnectionHandler
    /// Requests handed to this connection and not finished.
    let load = Atomic<Int>(0)
    /// The server's SETTINGS_MAX_CONCURRENT_STREAMS (100 until it says).
    let capacity = Atomic<Int>(100)
    /// False once the connection goes away (GOAWAY, closed, failed): no new requests.
    private let open = Atomic<Bool>(true)
    /// The channel once connected; `closed` once `close()` ran (a channel connecting
    /// after that is closed at once).
    private let channel = Mutex<(channel: (any Channel)?, closed: Bool)>((nil, false))

    var isOpen: Bool { open.load(ordering: .relaxed) }

    init(
        origin: PushHTTP2Client.Origin, sslContext: NIOSSLContext, eventLoop: any EventLoop,
        connectTimeout: Duration, logger: Logger
    ) {
        self.eventLoop = eventLoop
        let connectMilliseconds = min(max(connectTimeout.components.seconds, 1), 300) * 1000
        self.handler = PushConnectionHandler(
            eventLoop: eventLoop, readyTimeout: .milliseconds(connectMilliseconds * 2), logger: logger)
        handler.connection = self
        let handler = self.handler
        let isIPAddress = (try? SocketAddress(ipAddress: origin.host, port: 0)) != nil
        let settings: HTTP2Settings = [
            HTTP2Setting(parameter: .enablePush, value: 0),
            HTTP2Setting(parameter: .maxHeaderListSize, value: 16_384),
            // Above the largest answer read, so an answer over it is seen, not stalled.
            HTTP2Setting(parameter: .initialWindowSize, value: PushHTTP2Client.maxResponseBody * 2),
        ]
        // Happy eyeballs over every address of the name; the handlers go on the channel
        // that connected, never on the attempts that lost (the handler holds the queued
        // requests, and a losing attempt's close would end them).
        ClientBootstrap(group: eventLoop)
            .connectTimeout(.milliseconds(connectMilliseconds))
            .channelOption(.socketOption(.tcp_nodelay), value: 1)
            .connect(host: origin.host, port: origin.port)
            .flatMap { channel -> EventLoopFuture<any Channel> in
                // On the channel's event loop: the pool's loop is the bootstrap's only one.
                do {
                    let tls = try NIOSSLClientHandler(
                        context: sslContext, serverHostname: isIPAddress ? nil : origin.host)
                    try channel.pipeline.syncOperations.addHandler(CompleteReadBeforeClose())
                    try channel.pipeline.syncOperations.addHandler(tls)
                    try channel.pipeline.syncOperations.addHandler(
                        NIOHTTP2Handler(mode: .client, initialSettings: settings))
                    try channel.pipeline.syncOperations.addHandler(handler)
                    return channel.eventLoop.makeSucceededFuture(channel)
                } catch {
                    channel.close(promise: nil)
                    return channel.eventLoop.makeFailedFuture(error)
                }
            }
            .whenComplete { [self] result in
                switch result {
                case .success(let channel):
                    let closed = self.channel.withLock { state -> Bool in
                        state.channel = channel
                        return state.closed
                    }
                    if closed { channel.close(promise: nil) }
                case .failure(let error):
                    handler.connectFailed(error)
                }
            }
    }

    func submit(_ pending: PushConnectionHandler.Pending) {
        let handler = self.handler
        eventLoop.execute { handler.enqueue(pending) }
    }

    func goingAway() { open.store(false, ordering: .relaxed) }

    func close() async {
        goingAway()
        let channel = self.channel.withLock { state -> (any Channel)? in
            state.closed = true
            return state.channel
        }
        try? await channel?.close()
    }
}

/// First in a connection's pipeline, before TLS. NIOSSLHandler passes on what it decrypted
/// only at channelReadComplete, and NIO fires none when a read ends in an error (a server
/// that closes with a reset) or a failed write closes the channel after a read: answers
/// that came in with the close were dropped, and their requests reported as interrupted.
/// This completes the read before the channel goes inactive, so they are read first.
final class CompleteReadBeforeClose: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer

    /// Bytes were passed on since the last channelReadComplete.
    private var readPending = false

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        readPending = true
        context.fireChannelRead(data)
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        readPending = false
        context.fireChannelReadComplete()
    }

    func channelInactive(context: ChannelHandlerContext) {
        if readPending {
            readPending = false
            context.fireChannelReadComplete()
        }
        context.fireChannelInactive()
    }
}

/// The connection's frames: writes each request's HEADERS and DATA on a stream of its
/// own, reads the answers back, and settles every request exactly once. Touched only on
/// its event loop (hence `@unchecked Sendable`).
final class PushConnectionHandler: ChannelDuplexHandler, @unchecked Sendable {
    typealias InboundIn = HTTP2Frame
    typealias OutboundIn = Never
    typealias OutboundOut = HTTP2Frame

    struct Pending {
        var headers: HPACKHeaders
        var body: ByteBuffer
        var deadline: NIODeadline
        var continuation: CheckedContinuation<PushResponse, any Error>
    }

    /// A request handed to the connection. Once its frames are written the server may
    /// have it, whatever happens next, unless the server says otherwise (REFUSED_STREAM,
    /// a GOAWAY's last-stream-id): a write promise cannot tell, since TLS joins the
    /// promises of a flush and a partial write fails them all.
    struct Active {
        var pending: Pending
        var status: Int?
        var headers = HPACKHeaders()
        var body: ByteBuffer?
    }

    /// The connection flow-control window kept open for answers.
    static let connectionWindow = 1 << 20

    private let eventLoop: any EventLoop
    private let logger: Logger
    weak var connection: PushConnection?
    private var context: ChannelHandlerContext?
    private var queue = CircularBuffer<Pending>()
    private var active: [HTTP2StreamID: Active] = [:]
    private var nextStreamID = HTTP2StreamID(1)
    private var maxStreams = 100
    /// TLS is up with `h2` negotiated and the server's first SETTINGS (its stream limit)
    /// are in: streams may be opened.
    private var ready = false
    private var negotiated = false
    /// Set once no new stream may open here. The highest stream the server may have
    /// processed: a GOAWAY's last-stream-id (the lowest, if more than one came), or the
    /// highest of all when the connection was retired for a timeout or an error.
    private var goAwayLastStreamID: HTTP2StreamID?
    /// The highest stream swift-nio-http2 opened (its HEADERS went out). It holds a new
    /// stream's frames back while the server's stream limit is reached in its count or
    /// the channel is not writable; a stream above this was never written.
    private var highestOpenedStreamID = HTTP2StreamID.rootStream
    /// Set when the connection is done: what every request still here, or arriving, gets.
    private var finishedWith: PushTransportError?
    private let created = NIODeadline.now()
    private let readyTimeout: TimeAmount
    private var flushScheduled = false
    /// A connection WINDOW_UPDATE is written and not yet flushed.
    private var windowUpdatePending = false
    private var sweep: RepeatedTask?

    init(eventLoop: any EventLoop, readyTimeout: TimeAmount, logger: Logger) {
        self.eventLoop = eventLoop
        self.readyTimeout = readyTimeout
        self.logger = logger
        // From the start, so queued requests expire even while the name resolves.
        sweep = eventLoop.scheduleRepeatedTask(initialDelay: .milliseconds(250), delay: .milliseconds(250)) {
            [self] _ in expire()
        }
    }

    // MARK: requests in

    func enqueue(_ pending: Pending) {
        if let finishedWith {
            // Never connected: the same failure, not another attempt at once. Connected and
            // since closed: another connection takes it.
            settle(
                pending,
                .failure(negotiated ? PushTransportError.notSent("connection closed", resendable: true) : finishedWith))
            return
        }
        guard goAwayLastStreamID == nil else {
            settle(pending, .failure(PushTransportError.notSent("connection going away", resendable: true)))
            return
        }
        queue.append(pending)
        startQueued()
    }

    func connectFailed(_ error: any Error) {
        eventLoop.assertInEventLoop()
        finish(because: PushTransportError.notSent("cannot connect: \(error)", resendable: false))
    }

    /// Opens streams for queued requests while the server allows more.
    private func startQueued() {
        // Not on a channel that is closing: answers read as it closes free streams too.
        guard ready, goAwayLastStreamID == nil, let context, context.channel.isActive else { return }
        while active.count < maxStreams, let pending = queue.popFirst() {
            let streamID = nextStreamID
            // Client stream ids are odd and end at 2^31-1: the connection retires before.
            guard streamID < HTTP2StreamID(Int32.max - 2) else {
                queue.prepend(pending)
                retire(context: context, reason: "stream ids used up")
                return
            }
            nextStreamID = streamID.advanced(by: 2)
            active[streamID] = Active(pending: pending)
            let hasBody = pending.body.readableBytes > 0
            context.write(
                wrapOutboundOut(
                    HTTP2Frame(
                        streamID: streamID, payload: .headers(.init(headers: pending.headers, endStream: !hasBody)))),
                promise: nil)
            if hasBody {
                context.write(
                    wrapOutboundOut(
                        HTTP2Frame(
                            streamID: streamID, payload: .data(.init(data: .byteBuffer(pending.body), endStream: true)))
                    ),
                    promise: nil)
            }
        }
        scheduleFlush()
    }

    /// One flush for everything written in this turn of the event loop.
    private func scheduleFlush() {
        guard !flushScheduled else { return }
        flushScheduled = true
        eventLoop.execute { [self] in
            flushScheduled = false
            windowUpdatePending = false
            context?.flush()
        }
    }

    // MARK: frames in

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        switch frame.payload {
        case .headers(let headers):
            guard var stream = active[frame.streamID] else { return }
            if stream.status == nil {
                guard let status = headers.headers.first(name: HTTPHeaderName.status).flatMap({ Int($0) }),
                    (100...599).contains(status)
                else {
                    reset(frame.streamID, context: context, failure: .noAnswer("answer without a valid :status"))
                    return
                }
                // 1xx answers are interim; the final one follows.
                guard status >= 200 else { return }
                stream.status = status
                stream.headers = headers.headers
            }
            active[frame.streamID] = stream
            if headers.endStream { complete(frame.streamID) }
        case .data(let data):
            guard var stream = active[frame.streamID] else { return }
            guard stream.status != nil, case .byteBuffer(var bytes) = data.data else {
                reset(frame.streamID, context: context, failure: .noAnswer("data before the answer's headers"))
                return
            }
            if (stream.body?.readableBytes ?? 0) + bytes.readableBytes > PushHTTP2Client.maxResponseBody {
                reset(frame.streamID, context: context, failure: .noAnswer("answer over 64 KiB"))
                return
            }
            if stream.body == nil {
                stream.body = bytes
            } else {
                stream.body?.writeBuffer(&bytes)
            }
            active[frame.streamID] = stream
            if data.endStream { complete(frame.streamID) }
        case .rstStream(let code):
            guard let stream = active.removeValue(forKey: frame.streamID) else { return }
            settle(
                stream.pending,
                .failure(
                    code == .refusedStream
                        ? PushTransportError.notSent("stream refused", resendable: true)
                        : PushTransportError.noAnswer("stream reset (\(code))")))
            streamsFreed()
        case .goAway(let lastStreamID, let code, _):
            logger.debug(
                "provider sent GOAWAY", metadata: [LogKey.lastStreamID: "\(lastStreamID)", LogKey.code: "\(code)"])
            // The streams up to the last-stream-id that were written may have been processed:
            // they wait for their answers, until the connection closes. The others were not
            // (RFC 9113 §6.8): another connection takes them at once, as it takes the queued
            // requests; this one takes no new request first, so none of them comes back to it.
            let processed = min(lastStreamID, highestOpenedStreamID)
            goAwayLastStreamID = min(goAwayLastStreamID ?? processed, processed)
            connection?.goingAway()
            for (streamID, stream) in active where streamID > processed {
                active[streamID] = nil
                if streamID > highestOpenedStreamID {
                    // Held back by swift-nio-http2: an RST_STREAM drops its frames from the buffer
                    // and writes nothing. Let go after the GOAWAY, they would raise a connection
                    // error (CreatedStreamAfterGoaway) and close the connection on the answers
                    // still due on it.
                    context.write(
                        wrapOutboundOut(HTTP2Frame(streamID: streamID, payload: .rstStream(.cancel))), promise: nil)
                }
                settle(stream.pending, .failure(PushTransportError.notSent("above GOAWAY", resendable: true)))
            }
            retire(context: context, reason: "connection going away")
        case .settings(.settings(let settings)):
            for setting in settings where setting.parameter == .maxConcurrentStreams {
                maxStreams = max(0, min(setting.value, 10_000))
                connection?.capacity.store(max(1, maxStreams), ordering: .relaxed)
            }
            ready = negotiated
            startQueued()
        default:
            break
        }
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let closed = event as? StreamClosedEvent {
            // A stream closed with no answer read: reset by swift-nio-http2 itself (a stream
            // error) or dropped by a GOAWAY whose frame this handler reads after the event.
            // Settled once this read is done, when the GOAWAY has been seen.
            if active[closed.streamID] != nil {
                eventLoop.execute { [self] in settleClosed(closed.streamID, reason: closed.reason) }
            }
        } else if let created = event as? NIOHTTP2StreamCreatedEvent {
            // Fired as swift-nio-http2 passes the stream's HEADERS on: at once, or when it
            // lets go of a stream it held back.
            highestOpenedStreamID = max(highestOpenedStreamID, created.streamID)
        } else if let window = event as? NIOHTTP2WindowUpdatedEvent, window.streamID == .rootStream,
            let inbound = window.inboundWindowSize, inbound < Self.connectionWindow / 2, !windowUpdatePending
        {
            windowUpdatePending = true
            let increment = Self.connectionWindow - inbound
            context.write(
                wrapOutboundOut(
                    HTTP2Frame(streamID: .rootStream, payload: .windowUpdate(windowSizeIncrement: increment))),
                promise: nil)
            scheduleFlush()
        } else if case .handshakeCompleted(let alpn) = event as? TLSUserEvent {
            guard alpn == "h2" else {
                finish(because: .notSent("server did not negotiate h2 (ALPN: \(alpn ?? "none"))", resendable: false))
                context.close(promise: nil)
                return
            }
            negotiated = true
            // Answers share one connection window: open it wider than the 64 KiB default.
            context.write(
                wrapOutboundOut(
                    HTTP2Frame(
                        streamID: .rootStream,
                        payload: .windowUpdate(windowSizeIncrement: Self.connectionWindow - 65_535))),
                promise: nil)
            startQueued()
        }
        context.fireUserInboundEventTriggered(event)
    }

    private func settleClosed(_ streamID: HTTP2StreamID, reason: HTTP2ErrorCode?) {
        guard let stream = active.removeValue(forKey: streamID) else { return }
        let error: PushTransportError
        if reason == .refusedStream || (goAwayLastStreamID.map { streamID > $0 } ?? false) {
            error = .notSent("stream refused", resendable: true)
        } else {
            error = .noAnswer("stream closed without an answer (\(reason.map { "\($0)" } ?? "no code"))")
        }
        settle(stream.pending, .failure(error))
        streamsFreed()
    }

    private func complete(_ streamID: HTTP2StreamID) {
        guard let stream = active.removeValue(forKey: streamID) else { return }
        guard let status = stream.status else {
            settle(stream.pending, .failure(PushTransportError.noAnswer("stream ended without an answer")))
            streamsFreed()
            return
        }
        let body = stream.body ?? ByteBuffer()
        settle(stream.pending, .success(PushResponse(status: status, headers: stream.headers, body: body)))
        streamsFreed()
    }

    private func reset(_ streamID: HTTP2StreamID, context: ChannelHandlerContext, failure: PushTransportError) {
        guard let stream = active.removeValue(forKey: streamID) else { return }
        context.write(wrapOutboundOut(HTTP2Frame(streamID: streamID, payload: .rstStream(.cancel))), promise: nil)
        scheduleFlush()
        settle(stream.pending, .failure(failure))
        streamsFreed()
    }

    private func streamsFreed() {
        guard let context else { return }
        if goAwayLastStreamID != nil {
            closeIfIdle(context: context)
        } else {
            startQueued()
        }
    }

    /// No new streams here any more: the pool opens another connection; this one closes
    /// when its last answer is in.
    private func retire(context: ChannelHandlerContext, reason: String) {
        connection?.goingAway()
        goAwayLastStreamID = goAwayLastStreamID ?? HTTP2StreamID(Int32.max)
        while let pending = queue.popFirst() {
            settle(pending, .failure(PushTransportError.notSent(reason, resendable: true)))
        }
        closeIfIdle(context: context)
    }

    private func closeIfIdle(context: ChannelHandlerContext) {
        if active.isEmpty && queue.isEmpty { context.close(promise: nil) }
    }

    private func settle(_ pending: Pending, _ result: Result<PushResponse, any Error>) {
        connection?.load.subtract(1, ordering: .relaxed)
        pending.continuation.resume(with: result)
    }

    /// Settles everything left: the queue and the streams never opened were not written;
    /// a written stream may have been processed unless the server's GOAWAY said it was not.
    private func finish(because error: PushTransportError) {
        guard finishedWith == nil else { return }
        // Requests that arrive later (submitted before the pool saw this) get the same answer:
        // after a failed connect, not another connection attempt at once.
        finishedWith = error
        connection?.goingAway()
        sweep?.cancel()
        while let pending = queue.popFirst() { settle(pending, .failure(error)) }
        let streams = active
        active = [:]
        for (streamID, stream) in streams {
            if streamID > highestOpenedStreamID {
                settle(stream.pending, .failure(PushTransportError.notSent("never opened", resendable: true)))
            } else if goAwayLastStreamID.map({ streamID > $0 }) ?? false {
                settle(stream.pending, .failure(PushTransportError.notSent("above GOAWAY", resendable: true)))
            } else {
                settle(stream.pending, .failure(PushTransportError.noAnswer("connection closed before the answer")))
            }
        }
    }

    // MARK: lifecycle

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        finish(because: .notSent("connection closed", resendable: false))
        self.context = nil
    }

    func channelInactive(context: ChannelHandlerContext) {
        finish(because: .notSent("connection closed", resendable: false))
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        // A stream error resets that stream (its StreamClosedEvent settles it); anything
        // else ends the connection.
        if error is NIOHTTP2Errors.StreamError { return }
        logger.debug("provider connection error", metadata: [LogKey.error: "\(error)"])
        if !negotiated {
            finish(because: .notSent("connection failed: \(error)", resendable: false))
        } else {
            // No new stream on a connection that is closing: the answers still read until it
            // is closed (TLS's close, CompleteReadBeforeClose) free streams too.
            connection?.goingAway()
            goAwayLastStreamID = goAwayLastStreamID ?? HTTP2StreamID(Int32.max)
        }
        context.close(promise: nil)
    }

    /// Requests past their deadline: a stream is reset (the provider may have it), a
    /// queued request was never sent.
    private func expire() {
        let now = NIODeadline.now()
        if !ready && now - created > readyTimeout {
            // No TLS, h2 or SETTINGS in time: a stalled server; nothing was written.
            finish(
                because: .notSent(
                    "no HTTP/2 session within \(readyTimeout.nanoseconds / 1_000_000) ms", resendable: false))
            context?.close(promise: nil)
            return
        }
        let late = active.filter { $0.value.pending.deadline <= now }.map(\.key)
        if let context, !late.isEmpty {
            // The connection may be half-open: no new streams on it (first, so no request
            // comes to it while the late ones are settled); it closes once the streams it
            // has are answered or timed out.
            retire(context: context, reason: "a stream timed out on this connection")
            for streamID in late {
                logger.warning(
                    "provider did not answer in time",
                    metadata: [
                        LogKey.streamID: "\(streamID)", LogKey.openStreams: "\(active.count)",
                    ])
                // A stream swift-nio-http2 held back and never opened was not written; the
                // RST_STREAM drops it from its buffer.
                reset(
                    streamID, context: context,
                    failure: streamID > highestOpenedStreamID
                        ? .notSent("no stream free in time", resendable: false) : .noAnswer("timed out"))
            }
        }
        while let first = queue.first, first.deadline <= now {
            _ = queue.popFirst()
            settle(first, .failure(PushTransportError.notSent("no stream free in time", resendable: false)))
        }
    }
}
