import FakeProviders
import Foundation
import Logging
import NIOCore
import NIOHPACK
import NIOHTTP2
import NIOPosix
import NIOSSL
import Synchronization
import Testing

@testable import Providers

/// What the scripted server does with a complete request.
enum ServerMove: Sendable {
    case answer(status: Int, body: String)
    /// RST_STREAM with REFUSED_STREAM: not processed.
    case refuse
    /// Counts the request as processed and never answers.
    case hold
    /// Counts the request as processed, then closes the connection.
    case closeConnection
}

/// A frame-level HTTP/2 server over TLS whose every move the test scripts: answers,
/// refusals, GOAWAYs after so many requests, silence. It counts each request it
/// processed by `:path`, so a duplicate shows.
final class ScriptedHTTP2Server: Sendable {
    struct State {
        var processed: [String: Int] = [:]
        var attempts: [String: Int] = [:]
        var goAways = 0
        var connections = 0
        var maxConcurrentSeen = 0
    }
    final class Record: Sendable {
        let state = Mutex(State())
    }
    let record = Record()
    let listener: LoopbackHTTP2Listener
    var caFile: String { listener.caFile }
    var baseURL: String { "https://127.0.0.1:\(listener.port)" }

    /// `goAwayEvery`: after that many requests on a connection, GOAWAY with the highest
    /// of them as last-stream-id; later streams are dropped unprocessed.
    init(
        maxConcurrentStreams: Int = 100, goAwayEvery: Int? = nil,
        move: @escaping @Sendable (_ path: String, _ seen: Int) -> ServerMove
    ) async throws {
        let record = self.record
        let listener = try await LoopbackHTTP2Listener.start(
            name: "pushh2", settings: [HTTP2Setting(parameter: .maxConcurrentStreams, value: maxConcurrentStreams)]
        ) { ScriptedFrames(record: record, goAwayEvery: goAwayEvery, move: move) }
        self.listener = listener
    }

    func stop() async { try? await listener.channel.close() }
}

final class ScriptedFrames: ChannelInboundHandler, @unchecked Sendable {
    typealias InboundIn = HTTP2Frame
    typealias OutboundOut = HTTP2Frame

    let record: ScriptedHTTP2Server.Record
    let goAwayEvery: Int?
    let move: @Sendable (String, Int) -> ServerMove
    var paths: [HTTP2StreamID: String] = [:]
    var requests = 0
    var goAwayLast: HTTP2StreamID?
    var highestProcessed = HTTP2StreamID(0)
    var open = Set<HTTP2StreamID>()

    init(record: ScriptedHTTP2Server.Record, goAwayEvery: Int?, move: @escaping @Sendable (String, Int) -> ServerMove) {
        self.record = record
        self.goAwayEvery = goAwayEvery
        self.move = move
    }

    func channelActive(context: ChannelHandlerContext) {
        record.state.withLock { $0.connections += 1 }
        context.fireChannelActive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        var ended = false
        switch frame.payload {
        case .headers(let headers):
            paths[frame.streamID] = headers.headers.first(name: ":path") ?? ""
            open.insert(frame.streamID)
            ended = headers.endStream
        case .data(let data):
            ended = data.endStream
        default:
            return
        }
        guard ended, let path = paths[frame.streamID] else { return }
        record.state.withLock { $0.maxConcurrentSeen = max($0.maxConcurrentSeen, open.count) }
        // After the GOAWAY, streams above its last-stream-id are dropped unprocessed; those
        // below it (their requests may end later than higher ones) are still served.
        if let last = goAwayLast, frame.streamID > last { return }
        if goAwayLast == nil {
            requests += 1
            if let every = goAwayEvery, requests > every {
                let last = highestProcessed
                goAwayLast = last
                context.writeAndFlush(
                    wrapOutboundOut(
                        HTTP2Frame(
                            streamID: .rootStream,
                            payload: .goAway(lastStreamID: last, errorCode: .noError, opaqueData: nil))),
                    promise: nil)
                record.state.withLock { $0.goAways += 1 }
                if frame.streamID > last { return }
            }
            highestProcessed = max(highestProcessed, frame.streamID)
        }
        let seen = record.state.withLock { state -> Int in
            state.attempts[path, default: 0] += 1
            return state.attempts[path] ?? 0
        }
        let move = move(path, seen)
        if case .refuse = move {} else { record.state.withLock { $0.processed[path, default: 0] += 1 } }
        switch move {
        case .answer(let status, let body):
            let streamID = frame.streamID
            let bound = NIOLoopBound(context, eventLoop: context.eventLoop)
            // Answered a little later, so many streams are open at once.
            context.eventLoop.scheduleTask(in: .milliseconds(2)) { [self] in
                let context = bound.value
                open.remove(streamID)
                context.write(
                    wrapOutboundOut(
                        HTTP2Frame(streamID: streamID, payload: .headers(.init(headers: [":status": "\(status)"])))),
                    promise: nil)
                context.writeAndFlush(
                    wrapOutboundOut(
                        HTTP2Frame(
                            streamID: streamID,
                            payload: .data(.init(data: .byteBuffer(ByteBuffer(string: body)), endStream: true)))),
                    promise: nil)
            }
        case .refuse:
            open.remove(frame.streamID)
            context.writeAndFlush(
                wrapOutboundOut(HTTP2Frame(streamID: frame.streamID, payload: .rstStream(.refusedStream))), promise: nil
            )
        case .hold:
            break
        case .closeConnection:
            context.close(promise: nil)
        }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        // Frames of streams dropped after the GOAWAY are errors here; like a provider, the
        // server keeps the connection until the streams below the last-stream-id are answered.
        FileHandle.standardError.write(Data("scripted server: \(error)\n".utf8))
    }
}

@Suite struct PushHTTP2ClientTests {
    let logger = Logger(label: "test")

    func client(_ server: ScriptedHTTP2Server, connections: Int = 1) throws -> PushHTTP2Client {
        try PushHTTP2Client(
            configuration: .init(baseURL: server.baseURL, caFile: server.caFile, maxConnections: connections),
            logger: logger)
    }

    func request(_ n: Int, body: String = "{}", on client: PushHTTP2Client) -> PushRequest {
        var request = client.request(path: "/p/\(n)", body: ByteBuffer(string: body))
        request.headers.add(name: "content-type", value: "application/json")
        return request
    }

    /// Sends `count` requests at once; the outcome of each.
    func sendAll(
        _ client: PushHTTP2Client, count: Int, body: String = "{}", timeout: Duration = .seconds(10)
    ) async -> [Result<PushResponse, PushTransportError>] {
        await withTaskGroup(of: (Int, Result<PushResponse, PushTransportError>).self) { group in
            for n in 0..<count {
                group.addTask {
                    do {
                        return (
                            n, .success(try await client.execute(request(n, body: body, on: client), timeout: timeout))
                        )
                    } catch let error as PushTransportError {
                        return (n, .failure(error))
                    } catch {
                        return (n, .failure(.noAnswer("\(error)")))
                    }
                }
            }
            var results = [Result<PushResponse, PushTransportError>?](repeating: nil, count: count)
            for await (n, result) in group { results[n] = result }
            return results.compactMap { $0 }
        }
    }

    @Test func manyStreamsShareOneConnectionUpToTheServersLimit() async throws {
        let server = try await ScriptedHTTP2Server(maxConcurrentStreams: 50) { _, _ in .answer(status: 200, body: "ok")
        }
        let client = try client(server, connections: 4)
        let results = await sendAll(client, count: 40)
        #expect(results.allSatisfy { (try? $0.get().status) == 200 })
        #expect(results.allSatisfy { (try? String(buffer: $0.get().body)) == "ok" })
        #expect(server.record.state.withLock { $0.connections } == 1, "40 streams fit in one connection")
        await client.shutdown()
        await server.stop()
    }

    @Test func aNameIsConnectedByAnyOfItsAddresses() async throws {
        // `localhost` may resolve to ::1 before 127.0.0.1; the server listens on the latter
        // only, so an attempt that loses must not take the queued requests with it.
        let server = try await ScriptedHTTP2Server { _, _ in .answer(status: 200, body: "ok") }
        let client = try PushHTTP2Client(
            configuration: .init(
                baseURL: "https://localhost:\(server.listener.port)", caFile: server.caFile, maxConnections: 1),
            logger: logger)
        let results = await sendAll(client, count: 20)
        #expect(results.allSatisfy { (try? $0.get().status) == 200 }, "\(results.filter { (try? $0.get()) == nil })")
        #expect(server.record.state.withLock { $0.connections } == 1)
        await client.shutdown()
        await server.stop()
    }

    @Test func aSecondConnectionOpensOnlyWhenTheStreamsRunOut() async throws {
        let server = try await ScriptedHTTP2Server(maxConcurrentStreams: 10) { _, _ in .answer(status: 200, body: "ok")
        }
        let client = try client(server, connections: 3)
        // One request first, so the server's SETTINGS are known before the burst.
        _ = try await client.execute(request(-1, on: client), timeout: .seconds(10))
        // What is checked is the connections and the streams, not the time: a generous
        // timeout, so a machine busy with the other suites does not fail the burst.
        let results = await sendAll(client, count: 300, timeout: .seconds(60))
        #expect(
            results.allSatisfy { (try? $0.get().status) == 200 },
            "\(results.compactMap { result -> String? in if case .failure(let e) = result { "\(e)" } else { nil } }.prefix(3))"
        )
        let (connections, concurrent) = server.record.state.withLock { ($0.connections, $0.maxConcurrentSeen) }
        #expect(connections >= 2 && connections <= 3)
        #expect(concurrent <= 10, "never more streams than the server allows: \(concurrent)")
        await client.shutdown()
        await server.stop()
    }

    @Test func streamsAboveAGoAwayAreSentAgainOnceAndOnlyThose() async throws {
        let server = try await ScriptedHTTP2Server(goAwayEvery: 25) { _, _ in .answer(status: 200, body: "ok") }
        let client = try client(server, connections: 2)
        // Without bodies the requests end in stream order, so the 26th request of a
        // connection always finds streams above the 25th.
        let results = await sendAll(client, count: 100, body: "")
        #expect(results.allSatisfy { (try? $0.get().status) == 200 }, "\(results.filter { (try? $0.get()) == nil })")
        let (processed, connections, goAways) = server.record.state.withLock {
            ($0.processed, $0.connections, $0.goAways)
        }
        #expect(processed.count == 100)
        #expect(processed.values.allSatisfy { $0 == 1 }, "no request processed twice")
        #expect(goAways >= 1 && connections == goAways + 1, "connections retired: \(goAways) of \(connections)")
        #expect(client.unprocessedResends > 0, "streams above a last-stream-id were sent again")
        await client.shutdown()
        await server.stop()
    }

    @Test func refusedStreamsAreSentAgainAtOnce() async throws {
        let server = try await ScriptedHTTP2Server { path, seen in
            // Every other request is refused the first time.
            (path.hasSuffix("0") || path.hasSuffix("2")) && seen == 1 ? .refuse : .answer(status: 200, body: "ok")
        }
        let client = try client(server)
        let results = await sendAll(client, count: 50)
        #expect(results.allSatisfy { (try? $0.get().status) == 200 }, "\(results.filter { (try? $0.get()) == nil })")
        #expect(server.record.state.withLock { $0.processed.values.allSatisfy { $0 == 1 } })
        #expect(client.unprocessedResends == 10, "the 10 refused streams, once each")
        await client.shutdown()
        await server.stop()
    }

    @Test func aWrittenRequestWithoutAnAnswerIsAmbiguous() async throws {
        let server = try await ScriptedHTTP2Server { path, _ in
            path == "/p/0" ? .hold : path == "/p/1" ? .closeConnection : .answer(status: 200, body: "")
        }
        let client = try client(server)
        // A connection first, so the 600 ms below time the answer, not a handshake on a busy machine.
        _ = try await client.execute(request(2, on: client), timeout: .seconds(10))
        do {
            _ = try await client.execute(request(0, on: client), timeout: .milliseconds(600))
            Issue.record("an unanswered request must fail")
        } catch let error as PushTransportError {
            guard case .noAnswer = error else {
                Issue.record("timed out after writing: ambiguous, got \(error)"); return
            }
        }
        do {
            _ = try await client.execute(request(1, on: client), timeout: .seconds(5))
            Issue.record("a request whose connection closed must fail")
        } catch let error as PushTransportError {
            guard case .noAnswer = error else {
                let attempts = server.record.state.withLock { $0.attempts["/p/1"] ?? 0 }
                Issue.record(
                    "closed after writing: ambiguous, got \(error) after \(attempts) attempts, resends \(client.unprocessedResends)"
                )
                return
            }
        }
        // The client opens a new connection for the next request.
        #expect(try await client.execute(request(2, on: client), timeout: .seconds(5)).status == 200)
        await client.shutdown()
        await server.stop()
    }

    @Test func anAnswerOverTheLimitIsRefused() async throws {
        let big = String(repeating: "x", count: 70_000)
        let server = try await ScriptedHTTP2Server { _, _ in .answer(status: 400, body: big) }
        let client = try client(server)
        let started = ContinuousClock.now
        do {
            _ = try await client.execute(request(0, on: client), timeout: .seconds(10))
            Issue.record("an answer over 64 KiB must be refused")
        } catch let error as PushTransportError {
            guard case .noAnswer(let why) = error, why.contains("64 KiB") else {
                Issue.record("got \(error)")
                return
            }
        }
        #expect(ContinuousClock.now - started < .seconds(5), "refused as it arrives, not by the timeout")
        await client.shutdown()
        await server.stop()
    }

    @Test func aSilentServerIsLeftAfterTheConnectTimeout() async throws {
        // A TCP listener that never speaks TLS: the handshake stalls.
        let silent = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .bind(host: "127.0.0.1", port: 0).get()
        let client = try PushHTTP2Client(
            configuration: .init(
                baseURL: "https://127.0.0.1:\(silent.localAddress?.port ?? 1)", caFile: nil, maxConnections: 1,
                connectTimeout: .seconds(1)),
            logger: logger)
        let started = ContinuousClock.now
        do {
            _ = try await client.execute(request(0, on: client), timeout: .seconds(30))
            Issue.record("nothing answers there")
        } catch let error as PushTransportError {
            guard case .notSent(_, resendable: false) = error else { Issue.record("got \(error)"); return }
        }
        #expect(ContinuousClock.now - started < .seconds(10), "given up after twice the connect timeout")
        await client.shutdown()
        try await silent.close()
    }

    @Test func noConnectionMeansNotSent() async throws {
        // A port nobody listens on: bind one, note it, close it.
        let probe = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .bind(host: "127.0.0.1", port: 0).get()
        let port = probe.localAddress?.port ?? 1
        try await probe.close()
        let client = try PushHTTP2Client(
            configuration: .init(baseURL: "https://127.0.0.1:\(port)", caFile: nil, maxConnections: 1), logger: logger)
        do {
            _ = try await client.execute(request(0, on: client), timeout: .seconds(5))
            Issue.record("nothing listens there")
        } catch let error as PushTransportError {
            guard case .notSent(_, resendable: false) = error else { Issue.record("got \(error)"); return }
        }
        await client.shutdown()
    }

    @Test func baseURLsAreChecked() {
        #expect(throws: ProviderSetupError.self) {
            try PushHTTP2Client.Origin("http://api.push.apple.com")
        }
        #expect(throws: ProviderSetupError.self) { try PushHTTP2Client.Origin("https://") }
        #expect(throws: ProviderSetupError.self) { try PushHTTP2Client.Origin("https://h:70000") }
        let origin = try? PushHTTP2Client.Origin("https://api.push.apple.com")
        #expect(origin?.authority == "api.push.apple.com" && origin?.port == 443 && origin?.pathPrefix == "")
        let local = try? PushHTTP2Client.Origin("https://localhost:8443/base/")
        #expect(local?.authority == "localhost:8443" && local?.pathPrefix == "/base")
    }
}
