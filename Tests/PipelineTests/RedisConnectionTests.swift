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

        /// Commands are framed byte-exact whatever their arguments: empty, lengths at each
        /// change of digit count, CRLF and NUL inside, many arguments in one command.
        @Test func argumentsOfEveryLengthAndByteRoundTrip() async throws {
            let stack = try await Stack.get()
            let redis = RedisClient(configuration: RedisConfiguration(port: stack.redisPort, connections: 1))
            let prefix = "rf\(UUID().uuidString.prefix(8)):"
            var values: [[UInt8]] = []
            for length in [0, 1, 9, 10, 11, 99, 100, 101, 999, 1000, 65_537] {
                values.append((0..<length).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) })
            }
            values.append(Array("a\r\nb\r\n\0$3\r\n*1".utf8))
            let keys = values.indices.map { RedisArgument("\(prefix)\($0)") }
            var mset: [RedisArgument] = ["MSET"]
            for (key, value) in zip(keys, values) { mset += [key, RedisArgument(bytes: value)] }
            try await redis.command(mset)
            let replies = try await redis.pipeline(keys.map { ["GET", $0] } + [["MGET"] + keys])
            #expect(Array(replies.prefix(values.count)) == values.map { .bytes($0) })
            #expect(replies.last == .array(values.map { .bytes($0) }))
            try await redis.command(["DEL"] + keys)
        }

        @Test func aServerThatStopsAnsweringFailsItsCallersAfterTheTimeout() async throws {
            let silent = try Stack.silentListener()
            defer { close(silent.fd) }
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
            let port = try Stack.freePort()
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
