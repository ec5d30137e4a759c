import DevStack
import Foundation
import RedisClient
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// The Redis connection on its event loop: replies go to their callers in order under
/// concurrency, a server that stops answering fails its callers after the timeout, and
/// a refused connection is a `connect` error; each time the next call connects afresh.
extension StackTests {
    @Suite struct RedisConnectionTests {
        @Test func concurrentCallersEachGetTheirOwnReplies() async throws {
            let stack = try await Stack.get()
            let redis = RedisClient(configuration: RedisConfiguration(port: stack.redisPort, connections: 2))
            let prefix = "rc\(UUID().uuidString.prefix(8)):"
            let answers = try await withThrowingTaskGroup(of: Bool.self) { group in
                for n in 0..<300 {
                    group.addTask {
                        let key = RedisArgument("\(prefix)\(n)")
                        let replies = try await redis.pipeline([
                            ["SET", key, RedisArgument("value-\(n)")], ["GET", key], ["STRLEN", key], ["DEL", key],
                        ])
                        return replies == [
                            .bytes(Array("OK".utf8)), .bytes(Array("value-\(n)".utf8)),
                            .int(Int64("value-\(n)".utf8.count)), .int(1),
                        ]
                    }
                }
                return try await group.reduce(into: [Bool]()) { $0.append($1) }
            }
            #expect(answers.count == 300 && answers.allSatisfy { $0 })
            // A multi-megabyte reply arrives in many reads and is put together whole.
            let big = [UInt8](repeating: UInt8(ascii: "x"), count: 3_000_000)
            try await redis.command("SET", RedisArgument("\(prefix)big"), RedisArgument(bytes: big))
            #expect(try await redis.command("GET", RedisArgument("\(prefix)big")) == .bytes(big))
            try await redis.command("DEL", RedisArgument("\(prefix)big"))
            // An error reply is the caller's, not the connection's.
            #expect(try await redis.pipeline([["NOSUCHCOMMAND"], ["PING"]]).last == .bytes(Array("PONG".utf8)))
        }

        @Test func aServerThatStopsAnsweringFailsItsCallersAfterTheTimeout() async throws {
            let silent = try ListeningSocket()
            defer { silent.close() }
            let redis = RedisClient(
                configuration: RedisConfiguration(port: silent.port, connections: 1, timeout: .milliseconds(300)))
            let started = ContinuousClock.now
            await #expect {
                try await redis.command("PING")
            } throws: { error in
                (error as? RedisError)?.code == .io
            }
            let waited = ContinuousClock.now - started
            #expect(waited >= .milliseconds(250) && waited < .seconds(5), "failed after \(waited)")
        }

        @Test func aRefusedConnectionIsAConnectErrorAndTheNextCallConnectsAgain() async throws {
            let closed = try ListeningSocket()
            let port = closed.port
            closed.close()
            let redis = RedisClient(configuration: RedisConfiguration(port: port, connections: 1))
            await #expect {
                try await redis.command("PING")
            } throws: { error in
                (error as? RedisError)?.code == .connect
            }
            #expect(await redis.ping() == false)
        }
    }
}

/// A TCP socket on loopback that listens and never answers (the kernel accepts).
private struct ListeningSocket {
    let fd: Int32
    let port: Int

    init() throws {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) }
        }
        guard fd >= 0, bound == 0, listen(fd, 16) == 0 else { throw POSIXError(.EADDRINUSE) }
        let named = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        guard named == 0 else { throw POSIXError(.EINVAL) }
        self.fd = fd
        port = Int(UInt16(bigEndian: address.sin_port))
    }

    func close() { _ = Glibc.close(fd) }
}
