import Foundation
import NIOCore
import NIOHTTP2
import NIOHTTPTypes
import Synchronization

/// Retires HTTP/2 connections the abrupt way a provider may: after `every` requests on
/// a connection, a GOAWAY whose last-stream-id is the highest stream handed on so far.
/// As RFC 9113 §6.8 promises the client, no stream above it is processed: one that
/// arrives later is dropped unanswered (the client must send it again, safely); the
/// streams up to it are answered. Sits on each stream channel; state per connection.
final class GoAwayEvery: ChannelInboundHandler, RemovableChannelHandler, Sendable {
    typealias InboundIn = HTTPRequestPart
    typealias InboundOut = HTTPRequestPart

    struct Connection {
        var requests = 0
        var highestForwarded = HTTP2StreamID(0)
        /// Set once the GOAWAY is sent: its last-stream-id.
        var lastStreamID: HTTP2StreamID?
    }

    /// Per connection (the parent channel), forgotten when it closes.
    final class Connections: Sendable {
        let state = Mutex<[ObjectIdentifier: Connection]>([:])
        init() {}
    }

    private enum Decision {
        case forward
        case forwardThenGoAway(HTTP2StreamID)
        case drop
    }

    private let every: Int
    private let fakeState: FakeState
    private let connections: Connections
    /// This stream was dropped: its body parts are dropped too.
    private let dropping = Mutex(false)

    init(every: Int, state: FakeState, connections: Connections) {
        self.every = every
        self.fakeState = state
        self.connections = connections
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard case .head = unwrapInboundIn(data) else {
            if !dropping.withLock({ $0 }) { context.fireChannelRead(data) }
            return
        }
        guard let parent = context.channel.parent,
            let streamID = try? context.channel.syncOptions?.getOption(HTTP2StreamChannelOptions.streamID)
        else {
            context.fireChannelRead(data)
            return
        }
        let key = ObjectIdentifier(parent)
        let (decision, first) = connections.state.withLock { all -> (Decision, Bool) in
            let first = all[key] == nil
            var connection = all[key] ?? Connection()
            defer { all[key] = connection }
            if let last = connection.lastStreamID {
                return (streamID > last ? .drop : .forward, first)
            }
            connection.requests += 1
            connection.highestForwarded = max(connection.highestForwarded, streamID)
            guard connection.requests >= every else { return (.forward, first) }
            connection.lastStreamID = connection.highestForwarded
            return (.forwardThenGoAway(connection.highestForwarded), first)
        }
        if first {
            // Hummingbird closes a connection on any error its pipeline sees. After a GOAWAY
            // the client's frames for streams it has not yet learned are refused raise
            // stream errors; a provider answers the streams it kept regardless.
            if let http2 = try? parent.pipeline.syncOperations.handler(type: NIOHTTP2Handler.self) {
                try? parent.pipeline.syncOperations.addHandler(StreamErrorsAfterGoAway(), position: .after(http2))
            }
            parent.closeFuture.whenComplete { [connections] _ in
                _ = connections.state.withLock { $0.removeValue(forKey: key) }
            }
        }
        switch decision {
        case .forward:
            context.fireChannelRead(data)
        case .forwardThenGoAway(let last):
            fakeState.countGoAway()
            parent.writeAndFlush(
                HTTP2Frame(
                    streamID: .rootStream, payload: .goAway(lastStreamID: last, errorCode: .noError, opaqueData: nil)),
                promise: nil)
            context.fireChannelRead(data)
        case .drop:
            dropping.withLock { $0 = true }
            fakeState.countRefused()
            context.close(promise: nil)
        }
    }
}

/// Keeps stream-level HTTP/2 errors (frames for streams the server dropped at its GOAWAY)
/// from reaching the handler that closes the whole connection on any error.
final class StreamErrorsAfterGoAway: ChannelInboundHandler, RemovableChannelHandler, Sendable {
    typealias InboundIn = HTTP2Frame
    typealias InboundOut = HTTP2Frame

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        // Frames for dropped streams, and the GOAWAY (2^31-1) swift-nio-http2 or Hummingbird
        // would send after ours, which may not raise its last-stream-id: neither may end
        // the connection while streams below it still wait for their answers.
        if error is NIOHTTP2Errors.NoSuchStream || error is NIOHTTP2Errors.StreamClosed
            || error is NIOHTTP2Errors.StreamIDTooSmall || error is NIOHTTP2Errors.StreamError
            || error is NIOHTTP2Errors.RaisedGoawayLastStreamID
        {
            return
        }
        FileHandle.standardError.write(Data("fake: connection error \(error)\n".utf8))
        context.fireErrorCaught(error)
    }
}
