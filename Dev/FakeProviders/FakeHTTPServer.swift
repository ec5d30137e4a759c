import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdCore
import Logging
import NIOCore
import NIOHPACK
import NIOHTTP1
import NIOHTTP2
import NIOHTTPTypes
import NIOHTTPTypesHTTP1
import NIOPosix
import NIOSSL
import ServiceLifecycle

/// The APNs and FCM fakes' server: HTTP/2 over TLS read as frames on the connection, with
/// no channel, pipeline or async stream per request, and the answers of one event-loop
/// turn written in one flush (one TLS record, one socket write). A client that does not
/// negotiate `h2` gets HTTP/1.1, so the fakes can answer it as the providers do.
///
/// Hummingbird's HTTP/2 server builds a child channel and an async channel per stream and
/// flushes each answer on its own: at 1,000 notifications/s the fakes spent ~110 µs a push
/// that way, most of it in that machinery (benchmarks/history/20-issue-27-part-4-fakes-and-system-calls.md).
/// The routes are the same `Router` either way; only the transport changed.
///
/// `goAwayEvery` retires connections the abrupt way a provider may: after that many
/// requests, a GOAWAY whose last-stream-id is the highest stream handed on so far. As RFC
/// 9113 §6.8 promises the client, no stream above it is processed; the streams up to it
/// are answered.
///
/// With `goAwayGrace`, the way APNs's and Google's front ends retire one: the streams up to
/// the last-stream-id are still answered, about half of them late (up to 90% of the grace
/// period after the GOAWAY), and the TCP connection is closed the grace period after the
/// GOAWAY, whatever is still unanswered then (a request whose body had not all come).
/// Without it, the connection closes as soon as its last answer is written.
struct FakeHTTPServer: Service {
    typealias Respond = @Sendable (Request, any Channel) async -> Response

    let host: String
    let port: Int
    let tls: NIOSSLContext
    let goAwayEvery: Int
    let goAwayGrace: TimeAmount?
    let state: FakeState
    let respond: Respond
    let logger: Logger

    /// `router`'s routes answer every request; an error a route throws becomes its HTTP
    /// answer as Hummingbird's would.
    init(
        host: String, port: Int, tls: TLSConfiguration, router: Router<BasicRequestContext>, goAwayEvery: Int,
        goAwayGrace: TimeAmount? = nil, state: FakeState, logger: Logger
    ) throws {
        var tls = tls
        tls.applicationProtocols = ["h2", "http/1.1"]
        self.tls = try NIOSSLContext(configuration: tls)
        self.host = host
        self.port = port
        self.goAwayEvery = goAwayEvery
        self.goAwayGrace = goAwayGrace
        self.state = state
        self.logger = logger
        let responder = router.buildResponder()
        self.respond = { request, channel in
            let context = BasicRequestContext(source: .init(channel: channel, logger: logger))
            do {
                return try await responder.respond(to: request, context: context)
            } catch let error as any HTTPResponseError {
                return (try? error.response(from: request, context: context)) ?? Response(status: error.status)
            } catch {
                return Response(status: .internalServerError)
            }
        }
    }

    func run() async throws {
        let (tls, goAwayEvery, goAwayGrace, state, respond) = (tls, goAwayEvery, goAwayGrace, state, respond)
        let server = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelOption(.socketOption(.tcp_nodelay), value: 1)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(NIOSSLServerHandler(context: tls))
                }.flatMap {
                    channel.configureHTTP2SecureUpgrade(
                        h2ChannelConfigurator: { channel in
                            channel.eventLoop.makeCompletedFuture {
                                try channel.pipeline.syncOperations.addHandler(
                                    NIOHTTP2Handler(mode: .server, initialSettings: nioDefaultSettings))
                                try channel.pipeline.syncOperations.addHandler(
                                    HTTP2Requests(
                                        goAwayEvery: goAwayEvery, goAwayGrace: goAwayGrace, state: state,
                                        respond: respond))
                            }
                        },
                        http1ChannelConfigurator: { channel in
                            channel.pipeline.configureHTTPServerPipeline(withErrorHandling: true).flatMapThrowing {
                                try channel.pipeline.syncOperations.addHandler(HTTP1ToHTTPServerCodec(secure: false))
                                try channel.pipeline.syncOperations.addHandler(HTTP1Requests(respond: respond))
                            }
                        })
                }
            }
            .bind(host: host, port: port).get()
        logger.info("fake provider listening on \(host):\(port)")
        try await withTaskCancellationOrGracefulShutdownHandler {
            try await server.closeFuture.get()
        } onCancelOrGracefulShutdown: {
            server.close(promise: nil)
        }
    }
}

/// A request's body is read up to this many bytes; a route that reads more sees the
/// excess (and answers 413 as its `collectBody(upTo:)` does). The rest is discarded.
private let maxRequestBody = (1 << 20) + 1

/// Appends `bytes` to a request's `body` up to `maxRequestBody`.
private func appendCapped(_ bytes: ByteBuffer, to body: inout ByteBuffer) {
    let room = maxRequestBody - body.readableBytes
    guard room > 0 else { return }
    var bytes = bytes
    if bytes.readableBytes > room { bytes.moveWriterIndex(to: bytes.readerIndex + room) }
    body.writeBuffer(&bytes)
}

/// Collects a ResponseBody's bytes (the fakes' answers are single buffers).
private struct CollectedBody: ResponseBodyWriter {
    final class Box: @unchecked Sendable {
        var buffer = ByteBuffer()
    }
    let box: Box

    mutating func write(_ buffer: ByteBuffer) async throws {
        var buffer = buffer
        box.buffer.writeBuffer(&buffer)
    }

    consuming func finish(_ trailingHeaders: HTTPFields?) async throws {}
}

/// A response's head and its body as one buffer.
private func collect(_ response: Response) async -> (HTTPResponse, ByteBuffer) {
    let box = CollectedBody.Box()
    let body = response.body
    try? await body.write(CollectedBody(box: box))
    return (response.head, box.buffer)
}

/// Serves one HTTP/2 connection from its frames.
final class HTTP2Requests: ChannelInboundHandler, @unchecked Sendable {
    typealias InboundIn = HTTP2Frame
    typealias OutboundOut = HTTP2Frame

    private struct Stream {
        var head: HTTPRequest
        var body = ByteBuffer()
    }

    /// The connection window kept open to clients (their requests share it).
    static let connectionWindow = 1 << 20

    private let goAwayEvery: Int
    /// Set: the connection closes this long after its GOAWAY, and some answers come late.
    private let goAwayGrace: TimeAmount?
    private let fakeState: FakeState
    private let respond: FakeHTTPServer.Respond
    private var streams: [HTTP2StreamID: Stream] = [:]
    /// Streams handed to a route and not yet answered.
    private var answering = Set<HTTP2StreamID>()
    private var requests = 0
    private var highestForwarded = HTTP2StreamID(0)
    /// Set once the GOAWAY is sent: its last-stream-id.
    private var goAwayLastStreamID: HTTP2StreamID?
    /// When the GOAWAY was sent, with a grace period.
    private var goAwayAt: NIODeadline?
    /// After the GOAWAY, the last answer is written: the connection closes once it is out.
    private var closing = false
    private var flushScheduled = false
    /// Windows with an update written and not yet flushed (none is granted twice).
    private var windowUpdatesPending = Set<HTTP2StreamID>()
    private var context: ChannelHandlerContext?

    init(
        goAwayEvery: Int, goAwayGrace: TimeAmount? = nil, state: FakeState, respond: @escaping FakeHTTPServer.Respond
    ) {
        self.goAwayEvery = goAwayEvery
        self.goAwayGrace = goAwayGrace
        self.fakeState = state
        self.respond = respond
    }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        // Requests share the connection window: open it wider than the 64 KiB default.
        context.write(
            wrapOutboundOut(
                HTTP2Frame(
                    streamID: .rootStream,
                    payload: .windowUpdate(windowSizeIncrement: Self.connectionWindow - 65_535))),
            promise: nil)
        scheduleFlush()
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        self.context = nil
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        let streamID = frame.streamID
        switch frame.payload {
        case .headers(let headers):
            if streams[streamID] == nil {
                guard admit(streamID, context: context) else { return }
                guard let head = Self.request(headers.headers) else {
                    context.write(
                        wrapOutboundOut(HTTP2Frame(streamID: streamID, payload: .rstStream(.protocolError))),
                        promise: nil)
                    scheduleFlush()
                    return
                }
                streams[streamID] = Stream(head: head)
            }
            // A second HEADERS is the request's trailers: nothing a provider reads.
            if headers.endStream { dispatch(streamID) }
        case .data(let data):
            guard var stream = streams.removeValue(forKey: streamID) else { return }
            if case .byteBuffer(let bytes) = data.data { appendCapped(bytes, to: &stream.body) }
            streams[streamID] = stream
            if data.endStream { dispatch(streamID) }
        default:
            break
        }
    }

    /// Counts a new request against `goAwayEvery`; false when it arrived above the GOAWAY's
    /// last-stream-id and is dropped unprocessed.
    private func admit(_ streamID: HTTP2StreamID, context: ChannelHandlerContext) -> Bool {
        if let last = goAwayLastStreamID {
            guard streamID <= last else {
                // Not processed (RFC 9113 §8.7): the client may send it again elsewhere.
                fakeState.countRefused()
                context.write(
                    wrapOutboundOut(HTTP2Frame(streamID: streamID, payload: .rstStream(.refusedStream))), promise: nil)
                scheduleFlush()
                return false
            }
            return true
        }
        requests += 1
        highestForwarded = max(highestForwarded, streamID)
        if goAwayEvery > 0 && requests >= goAwayEvery {
            goAwayLastStreamID = highestForwarded
            fakeState.countGoAway()
            context.write(
                wrapOutboundOut(
                    HTTP2Frame(
                        streamID: .rootStream,
                        payload: .goAway(lastStreamID: highestForwarded, errorCode: .noError, opaqueData: nil))),
                promise: nil)
            scheduleFlush()
            if let goAwayGrace {
                goAwayAt = .now()
                context.eventLoop.scheduleTask(in: goAwayGrace) { [self] in closeAfterGrace() }
            }
        }
        return true
    }

    /// The request a header block names, or nil when its pseudo-headers are unusable.
    static func request(_ headers: HPACKHeaders) -> HTTPRequest? {
        var method: HTTPRequest.Method?
        var scheme: String?
        var authority: String?
        var path: String?
        var fields = HTTPFields()
        fields.reserveCapacity(headers.count)
        for (name, value, _) in headers {
            switch name {
            case ":method": method = HTTPRequest.Method(value)
            case ":scheme": scheme = value
            case ":authority": authority = value
            case ":path": path = value
            default:
                guard !name.hasPrefix(":"), let fieldName = HTTPField.Name(name) else { continue }
                fields.append(HTTPField(name: fieldName, value: value))
            }
        }
        guard let method, let path else { return nil }
        return HTTPRequest(method: method, scheme: scheme, authority: authority, path: path, headerFields: fields)
    }

    private func dispatch(_ streamID: HTTP2StreamID) {
        guard let stream = streams.removeValue(forKey: streamID), let context else { return }
        answering.insert(streamID)
        let request = Request(head: stream.head, body: RequestBody(buffer: stream.body))
        let (respond, channel, loop) = (respond, context.channel, context.eventLoop)
        let handler = NIOLoopBound(self, eventLoop: loop)
        Task {
            let (head, body) = await collect(await respond(request, channel))
            loop.execute { handler.value.answer(streamID, head: head, body: body) }
        }
    }

    private func answer(_ streamID: HTTP2StreamID, head: HTTPResponse, body: ByteBuffer, late: Bool = false) {
        guard answering.contains(streamID), let context else { return }
        if let goAwayGrace, let goAwayAt, !late, Bool.random() {
            // After the GOAWAY, about half the answers come late, each out before the close.
            let latest = goAwayAt + TimeAmount.nanoseconds(goAwayGrace.nanoseconds * 9 / 10) - NIODeadline.now()
            if latest.nanoseconds > 0 {
                let delay = TimeAmount.nanoseconds(Int64.random(in: 0...latest.nanoseconds))
                context.eventLoop.scheduleTask(in: delay) { [self] in
                    answer(streamID, head: head, body: body, late: true)
                }
                return
            }
        }
        answering.remove(streamID)
        var headers = HPACKHeaders()
        headers.reserveCapacity(head.headerFields.count + 2)
        headers.add(name: ":status", value: String(head.status.code))
        for field in head.headerFields {
            headers.add(name: field.name.canonicalName, value: field.value)
        }
        if body.readableBytes > 0, head.headerFields[.contentLength] == nil {
            headers.add(name: "content-length", value: String(body.readableBytes))
        }
        let hasBody = body.readableBytes > 0
        // The last answer after the GOAWAY: the connection closes once it is written (with
        // a grace period, when it ends).
        let last = goAwayGrace == nil && goAwayLastStreamID != nil && answering.isEmpty && streams.isEmpty
        let written = last ? context.eventLoop.makePromise(of: Void.self) : nil
        context.write(
            wrapOutboundOut(
                HTTP2Frame(streamID: streamID, payload: .headers(.init(headers: headers, endStream: !hasBody)))),
            promise: hasBody ? nil : written)
        if hasBody {
            context.write(
                wrapOutboundOut(
                    HTTP2Frame(streamID: streamID, payload: .data(.init(data: .byteBuffer(body), endStream: true)))),
                promise: written)
        }
        scheduleFlush()
        if let written {
            closing = true
            let channel = context.channel
            written.futureResult.whenComplete { _ in channel.close(promise: nil) }
        }
    }

    /// After the GOAWAY, with nothing left to answer: flush and close (with a grace period,
    /// when it ends).
    private func closeIfQuiesced() {
        guard goAwayGrace == nil, goAwayLastStreamID != nil, !closing, answering.isEmpty, streams.isEmpty,
            let context
        else { return }
        closing = true
        context.flush()
        context.close(promise: nil)
    }

    /// The grace period after the GOAWAY is over: what was written goes out, and the
    /// connection closes on the streams still unanswered.
    private func closeAfterGrace() {
        guard !closing, let context else { return }
        closing = true
        context.flush()
        context.close(promise: nil)
    }

    /// One flush for everything written in this turn of the event loop.
    private func scheduleFlush() {
        guard !flushScheduled, let context else { return }
        flushScheduled = true
        context.eventLoop.execute { [self] in
            flushScheduled = false
            windowUpdatesPending.removeAll()
            self.context?.flush()
        }
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let closed = event as? StreamClosedEvent {
            // Reset by the client, or by swift-nio-http2 on a stream error: nothing to read
            // or answer on it any more.
            streams[closed.streamID] = nil
            answering.remove(closed.streamID)
            closeIfQuiesced()
        } else if let window = event as? NIOHTTP2WindowUpdatedEvent, let inbound = window.inboundWindowSize {
            // Keep the client's windows open: the connection's for all requests, a stream's
            // for a body larger than its initial 64 KiB.
            let target = window.streamID == .rootStream ? Self.connectionWindow : 65_535
            if inbound < target / 2, window.streamID == .rootStream || streams[window.streamID] != nil,
                windowUpdatesPending.insert(window.streamID).inserted
            {
                context.write(
                    wrapOutboundOut(
                        HTTP2Frame(
                            streamID: window.streamID, payload: .windowUpdate(windowSizeIncrement: target - inbound))),
                    promise: nil)
                scheduleFlush()
            }
        }
        context.fireUserInboundEventTriggered(event)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        // Stream-level errors (frames of streams dropped after the GOAWAY, an answer to a
        // stream the client reset) end that stream, not the connection a provider keeps.
        if error is NIOHTTP2Errors.NoSuchStream || error is NIOHTTP2Errors.StreamClosed
            || error is NIOHTTP2Errors.StreamIDTooSmall || error is NIOHTTP2Errors.StreamError
            || error is NIOHTTP2Errors.RaisedGoawayLastStreamID
        {
            return
        }
        context.close(promise: nil)
    }
}

/// Serves one HTTP/1.1 connection (a client that did not negotiate h2), a request at a
/// time as HTTP/1.1 orders them.
final class HTTP1Requests: ChannelInboundHandler, @unchecked Sendable {
    typealias InboundIn = HTTPRequestPart
    typealias OutboundOut = HTTPResponsePart

    private let respond: FakeHTTPServer.Respond
    private var head: HTTPRequest?
    private var body = ByteBuffer()

    init(respond: @escaping FakeHTTPServer.Respond) {
        self.respond = respond
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let head):
            self.head = head
            body.clear()
        case .body(let bytes):
            appendCapped(bytes, to: &body)
        case .end:
            guard let head else { return }
            self.head = nil
            // `Connection: close`: the connection ends after this answer.
            let close = head.headerFields[values: .connection].contains { $0.lowercased().contains("close") }
            let request = Request(head: head, body: RequestBody(buffer: body))
            body = ByteBuffer()
            let (respond, channel, loop) = (respond, context.channel, context.eventLoop)
            let handler = NIOLoopBound(self, eventLoop: loop)
            let bound = NIOLoopBound(context, eventLoop: loop)
            Task {
                let (head, body) = await collect(await respond(request, channel))
                loop.execute { handler.value.answer(head: head, body: body, close: close, context: bound.value) }
            }
        }
    }

    private func answer(head: HTTPResponse, body: ByteBuffer, close: Bool, context: ChannelHandlerContext) {
        var head = head
        head.headerFields[.contentLength] = String(body.readableBytes)
        if close { head.headerFields[.connection] = "close" }
        context.write(wrapOutboundOut(.head(head)), promise: nil)
        if body.readableBytes > 0 { context.write(wrapOutboundOut(.body(body)), promise: nil) }
        guard close else {
            context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
            return
        }
        let written = context.eventLoop.makePromise(of: Void.self)
        context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: written)
        let channel = context.channel
        written.futureResult.whenComplete { _ in channel.close(promise: nil) }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        // A request that is not HTTP (or not one HTTPTypes can hold) ends the connection.
        context.close(promise: nil)
    }
}
