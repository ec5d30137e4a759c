import Hummingbird
import HummingbirdCore
import Logging
import Metrics
import HTTPTypes
import NIOCore
import NIOHTTP1
import NIOHTTPTypes

/// Connection limits and timeouts every HTTP listener of the relay runs with, so a
/// client that opens connections and never finishes a request cannot hold them:
///
/// - `headerTimeout`: from the connection's start until the first request head is complete
///   (a client that opens a connection and sends part of a head, or nothing, is closed then);
/// - `bodyTimeout`: from the head until the body is complete, however the bytes trickle
///   (a client that declares or starts a body and stalls is closed then);
/// - `idleTimeout`: a keep-alive connection with no whole request part in flight
///   (Hummingbird's; it sees request parts, not bytes, so it also bounds a later
///   request whose head trickles in: closed `idleTimeout` after the previous answer);
/// - `maxConnections`: past this many open connections the listener stops accepting
///   until one closes (the kernel's backlog holds the rest).
///
/// Connections cut for being slow are counted in `pushrelay_http_slow_clients_total`.
///
/// An answer that says `Connection: close` (413 `REQUEST_TOO_LARGE`, a request that is not
/// HTTP) closes the connection as soon as it is written, without waiting for the rest of
/// the request; Hummingbird would keep the connection and read the body to its end.
public struct HTTPHygiene: Sendable {
    public var maxConnections: Int
    public var headerTimeout: Duration
    public var bodyTimeout: Duration
    public var idleTimeout: Duration

    public init(maxConnections: Int, headerTimeout: Duration, bodyTimeout: Duration, idleTimeout: Duration) {
        self.maxConnections = maxConnections
        self.headerTimeout = headerTimeout
        self.bodyTimeout = bodyTimeout
        self.idleTimeout = idleTimeout
    }

    /// The HTTP/1.1 server with the request deadlines installed.
    public func server(listener: String) -> HTTPServerBuilder {
        let header = TimeAmount(headerTimeout)
        let body = TimeAmount(bodyTimeout)
        return .http1(
            configuration: .init(
                additionalChannelHandlers: [
                    RequestDeadlineHandler(headerTimeout: header, bodyTimeout: body, listener: listener)
                ],
                idleTimeout: TimeAmount(idleTimeout)))
    }

    /// Application configuration with the connection cap.
    public func configuration(host: String, port: Int, serverName: String? = nil, logger: Logger)
        -> ApplicationConfiguration
    {
        ApplicationConfiguration(
            address: .hostname(host, port: port), serverName: serverName,
            availableConnectionsDelegate: MaximumAvailableConnections(maxConnections, logger: logger))
    }
}

/// Closes a connection whose request head or body does not arrive in time. It sits
/// after HTTP decoding, so it sees whole request parts: a client that trickles header
/// bytes never produces a head, and its header deadline fires.
///
/// After an answer that says `Connection: close` it flushes the answer at once and stages
/// the close (RFC 9112 §9.6): a client still sending the body it declared may finish it
/// (what arrives is dropped; each part gives it `linger` more, up to the body timeout),
/// then FIN, and what still comes is read and dropped until the client closes or `linger`
/// passes (closing at once, with unread bytes, would reset the connection and could lose
/// the answer). A client that stops sending is closed `linger` after its last byte. FIN
/// before a still-uploading client is done would end its request unanswered (NIO clients
/// close on end of input).
final class RequestDeadlineHandler: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPRequestPart
    typealias InboundOut = HTTPRequestPart
    typealias OutboundIn = HTTPResponsePart
    typealias OutboundOut = HTTPResponsePart

    enum Phase: String {
        case header
        case body
        /// Answered with `Connection: close`: dropping what still arrives.
        case closing
    }

    /// How long a connection answered with `Connection: close` waits for the client to close.
    static let linger = TimeAmount.seconds(2)

    let headerTimeout: TimeAmount
    let bodyTimeout: TimeAmount
    let listener: String
    private var deadline: Scheduled<Void>?
    private var phase: Phase?
    /// Answered and closing: nothing more is passed on.
    private var refused = false
    /// The answer being written says `Connection: close`.
    private var answerCloses = false
    /// A request head was read and its end not yet.
    private var inBody = false
    /// When the answer that closes the connection was written, while the request's body
    /// was still arriving (nil: not waiting for one).
    private var drainingSince: NIODeadline?

    init(headerTimeout: TimeAmount, bodyTimeout: TimeAmount, listener: String) {
        self.headerTimeout = headerTimeout
        self.bodyTimeout = bodyTimeout
        self.listener = listener
    }

    func handlerAdded(context: ChannelHandlerContext) {
        if context.channel.isActive { arm(.header, context: context) }
    }

    func channelActive(context: ChannelHandlerContext) {
        if phase == nil { arm(.header, context: context) }
        context.fireChannelActive()
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        disarm()
    }

    /// Bytes that are not HTTP/1.1 get the relay's JSON error shape and a closed
    /// connection, instead of the bare 400 the server would write.
    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        // Answered and closing: what the client still sends is dropped, errors and all.
        guard !refused else { return }
        guard error is HTTPParserError else {
            context.fireErrorCaught(error)
            return
        }
        // A body cut short by the connection's close (a deadline) is not malformed.
        guard context.channel.isActive else { return }
        RelayMetrics.malformedHTTP(listener: listener).increment()
        refuse(
            context: context, status: .badRequest, code: "MALFORMED_REQUEST",
            message: "The request is not valid HTTP/1.1")
    }

    /// Answers the relay's JSON error shape directly and closes the connection: for what
    /// never reaches the router (bytes that are not HTTP, CONNECT, whose answer NIO
    /// would send without a body).
    private func refuse(context: ChannelHandlerContext, status: HTTPResponse.Status, code: String, message: String) {
        let body = ByteBuffer(string: #"{"code":"\#(code)","msg":"\#(message)","result":"error"}"#)
        let head = HTTPResponse(
            status: status,
            headerFields: [
                .contentType: "application/json", .contentLength: "\(body.readableBytes)", .connection: "close",
            ])
        context.write(wrapOutboundOut(.head(head)), promise: nil)
        context.write(wrapOutboundOut(.body(body)), promise: nil)
        context.write(wrapOutboundOut(.end(nil)), promise: nil)
        closeAfterAnswer(context: context)
    }

    /// Flushes the answer and sends FIN after it, once the request's body is in (or at once
    /// when it is); what the client still sends is dropped.
    private func closeAfterAnswer(context: ChannelHandlerContext) {
        refused = true
        context.flush()
        if inBody {
            drainingSince = .now()
        } else {
            context.close(mode: .output, promise: nil)
        }
        arm(.closing, context: context)
    }

    func channelInactive(context: ChannelHandlerContext) {
        disarm()
        context.fireChannelInactive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard !refused else {
            guard let since = drainingSince else { return }
            switch unwrapInboundIn(data) {
            case .end:
                // The body it declared is in: FIN, then read until it closes (or `linger`).
                drainingSince = nil
                context.close(mode: .output, promise: nil)
                arm(.closing, context: context)
            case .body where NIODeadline.now() - since < bodyTimeout:
                arm(.closing, context: context)
            case .head, .body:
                break
            }
            return
        }
        switch unwrapInboundIn(data) {
        case .head(let head) where head.method == .connect:
            refuse(
                context: context, status: .methodNotAllowed, code: "METHOD_NOT_ALLOWED", message: "Method not allowed")
            return
        case .head:
            inBody = true
            arm(.body, context: context)
        case .body: break
        case .end:
            inBody = false
            disarm()
        }
        context.fireChannelRead(data)
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        switch unwrapOutboundIn(data) {
        case .head(let head):
            answerCloses = head.headerFields.value(.connection)?.lowercased() == "close"
        case .end where answerCloses:
            // Not the rest of the body (Hummingbird reads it to its end before the next request).
            context.write(data, promise: promise)
            closeAfterAnswer(context: context)
            return
        case .body, .end:
            break
        }
        // Between requests of a keep-alive connection, the idle timeout applies.
        context.write(data, promise: promise)
    }

    private func arm(_ next: Phase, context: ChannelHandlerContext) {
        disarm()
        phase = next
        let timeout =
            switch next {
            case .header: headerTimeout
            case .body: bodyTimeout
            case .closing: Self.linger
            }
        let listener = self.listener
        let loopBound = NIOLoopBound(context, eventLoop: context.eventLoop)
        deadline = context.eventLoop.scheduleTask(in: timeout) {
            let context = loopBound.value
            if next != .closing { RelayMetrics.slowClients(listener: listener, phase: next.rawValue).increment() }
            context.close(promise: nil)
        }
    }

    private func disarm() {
        deadline?.cancel()
        deadline = nil
        phase = nil
    }
}
