import Foundation
import Logging
import Synchronization

/// A reply from Redis, copied out of hiredis' reply object.
public enum RedisValue: Sendable, Equatable {
    case null
    case int(Int64)
    /// Bulk and status strings.
    case bytes([UInt8])
    case array([RedisValue])
    /// A Redis error reply (`-ERR …`): the command ran and was refused.
    case error(String)

    public var string: String? {
        if case .bytes(let b) = self { return String(decoding: b, as: UTF8.self) }
        return nil
    }

    public var int: Int64? {
        switch self {
        case .int(let i): i
        case .bytes(let b): Int64(String(decoding: b, as: UTF8.self))
        default: nil
        }
    }

    public var array: [RedisValue] {
        if case .array(let a) = self { return a }
        return []
    }

    /// A flat `[field, value, field, value]` reply (HGETALL) as a dictionary.
    public var hash: [String: String] {
        let items = array
        var result: [String: String] = [:]
        result.reserveCapacity(items.count / 2)
        var index = 0
        while index + 1 < items.count {
            if let key = items[index].string, let value = items[index + 1].string { result[key] = value }
            index += 2
        }
        return result
    }
}

/// Failures talking to Redis. `isRetriable` is true for connection trouble: the
/// command may be sent again once Redis is back.
public struct RedisError: Error, Sendable, CustomStringConvertible {
    public enum Code: String, Sendable {
        case connect
        case io
        case protocolError
        case replyError
        /// The TLS handshake failed, or the TLS files could not be loaded.
        case tls
        /// `AUTH` was refused (a wrong password or ACL user).
        case auth
        /// The server wants `AUTH` and none is configured (`NOAUTH`).
        case authRequired
    }

    public var code: Code
    public var message: String

    public init(code: Code, message: String) {
        self.code = code
        self.message = message
    }

    /// Connection trouble, TLS and refused credentials included: an operator's fix (or
    /// Redis coming back) lets the same command succeed. At start they stop the service
    /// instead (`RedisClient.verify`).
    public var isRetriable: Bool {
        code == .connect || code == .io || code == .tls || code == .auth || code == .authRequired
    }
    public var description: String { "redis \(code.rawValue): \(message)" }
}

/// A Redis server's address.
public struct RedisNodeAddress: Sendable, Hashable, CustomStringConvertible {
    public var host: String
    public var port: Int

    public init(host: String, port: Int) {
        self.host = host
        self.port = port
    }

    /// `host:port` (the last colon separates the port); nil when the port is not a port.
    public init?(_ text: some StringProtocol) {
        guard let colon = text.lastIndex(of: ":"), let port = Int(text[text.index(after: colon)...]),
            (1...65535).contains(port)
        else { return nil }
        self.init(host: String(text[..<colon]), port: port)
    }

    public var description: String { "\(host):\(port)" }
}

/// Where Redis is and how long to wait for it.
public struct RedisConfiguration: Sendable {
    public var host: String
    public var port: Int
    /// Connections per Redis server, spread over the event loops.
    public var connections: Int
    /// The connect timeout, and how long a command waits for its reply once written
    /// (one queued behind a connect: up to twice this in all).
    public var timeout: Duration
    /// Redis Cluster: `host:port` and `seeds` are nodes to learn the slot map from;
    /// commands go to the master of their key's slot.
    public var cluster: Bool
    public var seeds: [RedisNodeAddress]
    /// Sent first on every connection (each cluster node's too); nil: no `AUTH`.
    public var credentials: RedisCredentials?
    /// TLS on every connection (each cluster node's too, MOVED and ASK included); nil: plaintext.
    public var tls: RedisTLS?

    public init(
        host: String = "127.0.0.1", port: Int = 6379, connections: Int = 4, timeout: Duration = .seconds(2),
        cluster: Bool = false, seeds: [RedisNodeAddress] = [], credentials: RedisCredentials? = nil,
        tls: RedisTLS? = nil
    ) {
        self.host = host
        self.port = port
        self.connections = max(1, connections)
        self.timeout = timeout
        self.cluster = cluster
        self.seeds = seeds
        self.credentials = credentials
        self.tls = tls
    }

    var address: RedisNodeAddress { RedisNodeAddress(host: host, port: port) }

    /// The same settings for another server (a cluster node).
    func node(_ address: RedisNodeAddress) -> RedisConfiguration {
        var copy = self
        copy.host = address.host
        copy.port = address.port
        return copy
    }
}

/// A Redis client: one server (a small pool of connections) or a Redis Cluster
/// (a pool per master, commands routed by their key's slot). Commands are arrays of
/// arguments; a pipeline sends several in one round trip per server and returns their
/// replies in order. Concurrent callers share round trips (see `RedisConnection`).
public final class RedisClient: Sendable {
    private enum Backend {
        case single(RedisPool)
        case cluster(RedisCluster)
    }

    private let backend: Backend
    public let configuration: RedisConfiguration

    public init(configuration: RedisConfiguration) {
        self.configuration = configuration
        backend =
            configuration.cluster
            ? .cluster(RedisCluster(configuration: configuration)) : .single(RedisPool(configuration: configuration))
    }

    /// Sends all commands, in one round trip per server. Error replies come back as
    /// `.error` values. In a cluster, commands for different masters run concurrently:
    /// only commands on the same slot keep their order.
    public func pipeline(_ commands: [[RedisArgument]]) async throws -> [RedisValue] {
        guard !commands.isEmpty else { return [] }
        let raw = commands.map { $0.map(\.bytes) }
        switch backend {
        case .single(let pool): return try await pool.pipeline(raw)
        case .cluster(let cluster): return try await cluster.pipeline(raw)
        }
    }

    /// Runs one command; a Redis error reply is thrown as `RedisError.replyError`.
    @discardableResult
    public func command(_ arguments: RedisArgument...) async throws -> RedisValue {
        try await command(arguments)
    }

    @discardableResult
    public func command(_ arguments: [RedisArgument]) async throws -> RedisValue {
        try await checkedPipeline([arguments])[0]
    }

    /// `pipeline`, with the first error reply thrown as `RedisError.replyError`.
    @discardableResult
    public func checkedPipeline(_ commands: [[RedisArgument]]) async throws -> [RedisValue] {
        let replies = try await pipeline(commands)
        for reply in replies {
            if case .error(let message) = reply { throw RedisError(code: .replyError, message: message) }
        }
        return replies
    }

    /// True when Redis answers PING (in a cluster: a master answers, and the slot map is known).
    public func ping() async -> Bool {
        (try? await command("PING"))?.string == "PONG"
    }

    /// Connects, authenticates and PINGs, each within the timeout; a connection closed
    /// or left unanswered is tried twice more. Throws what went wrong: `.auth`,
    /// `.authRequired` and `.tls` mean a setting is wrong; `.connect`, that nothing
    /// listens (Redis may come later). Services call it at start, so a wrong setting
    /// stops them with a message that says which.
    public func verify(attempts: Int = 3) async throws(RedisError) {
        var last = RedisError(code: .connect, message: "no attempt made")
        for attempt in 1...max(1, attempts) {
            if attempt > 1 { try? await Task.sleep(for: .milliseconds(200)) }
            do {
                switch try await pipeline([["PING"]])[0] {
                case .bytes(let bytes) where bytes == Array("PONG".utf8):
                    return
                case .error(let message) where message.hasPrefix("NOAUTH"):
                    throw RedisError(code: .authRequired, message: message)
                case .error(let message) where message.hasPrefix("WRONGPASS"):
                    throw RedisError(code: .auth, message: message)
                case let reply:
                    last = RedisError(code: .protocolError, message: "PING answered \(reply)")
                }
            } catch let error as RedisError {
                guard error.code == .io || error.code == .protocolError else { throw error }
                last = error
            } catch {
                last = RedisError(code: .io, message: "\(error)")
            }
        }
        throw last
    }

    /// Round trips made so far (all servers): shows how many commands shared one.
    public var roundTrips: Int {
        switch backend {
        case .single(let pool): pool.roundTrips
        case .cluster(let cluster): cluster.roundTrips
        }
    }

    /// The masters a cluster client knows (one entry for a single server).
    public func masters() async throws -> [RedisNodeAddress] {
        switch backend {
        case .single: [configuration.address]
        case .cluster(let cluster): try await cluster.masters()
        }
    }

    /// Every key name matching `pattern` (SCAN's MATCH), on every master, in no order.
    /// For operators' listings and start-up scans, never for a request's path.
    public func scanKeys(matching pattern: String) async throws -> [String] {
        var names: [String] = []
        for node in try await masterClients() {
            var cursor = "0"
            repeat {
                let reply = try await node.command(
                    "SCAN", RedisArgument(cursor), "MATCH", RedisArgument(pattern), "COUNT", "1000"
                ).array
                guard reply.count == 2, let next = reply[0].string else { break }
                cursor = next
                names += reply[1].array.compactMap(\.string)
            } while cursor != "0"
        }
        return names
    }

    /// A client of each master, alone: SCAN and other per-node commands go to each.
    public func masterClients() async throws -> [RedisClient] {
        try await masters().map { master in
            var single = configuration
            single.cluster = false
            single.host = master.host
            single.port = master.port
            return RedisClient(configuration: single)
        }
    }
}

/// A command argument: text or raw bytes.
public struct RedisArgument: Sendable, ExpressibleByStringLiteral, ExpressibleByStringInterpolation {
    public let bytes: [UInt8]

    public init(_ text: String) { bytes = Array(text.utf8) }
    public init(bytes: [UInt8]) { self.bytes = bytes }
    public init(_ number: some BinaryInteger) { bytes = Array(String(number).utf8) }
    public init(stringLiteral value: String) { self.init(value) }
}
