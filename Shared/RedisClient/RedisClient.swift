import CHiredis
import Dispatch
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
    }

    public var code: Code
    public var message: String

    public init(code: Code, message: String) {
        self.code = code
        self.message = message
    }

    public var isRetriable: Bool { code == .connect || code == .io }
    public var description: String { "redis \(code.rawValue): \(message)" }

    /// Translates hiredis' error flags; the one place hiredis error codes are read.
    static func fromContext(_ context: UnsafeMutablePointer<redisContext>, during operation: String) -> RedisError {
        let message = withUnsafeBytes(of: context.pointee.errstr) { raw in
            String(decoding: raw.prefix(while: { $0 != 0 }), as: UTF8.self)
        }
        let code: Code =
            switch context.pointee.err {
            case REDIS_ERR_PROTOCOL: .protocolError
            case REDIS_ERR_IO, REDIS_ERR_EOF: .io
            default: .io
            }
        return RedisError(code: code, message: "\(operation): \(message)")
    }
}

/// Where Redis is and how long to wait for it.
public struct RedisConfiguration: Sendable {
    public var host: String
    public var port: Int
    /// Connections in the pool; each owns one hiredis context and one serial queue.
    public var connections: Int
    public var timeout: Duration

    public init(host: String = "127.0.0.1", port: Int = 6379, connections: Int = 4, timeout: Duration = .seconds(2)) {
        self.host = host
        self.port = port
        self.connections = max(1, connections)
        self.timeout = timeout
    }
}

/// One hiredis context, used only on its own serial queue so blocking socket calls
/// never run on Swift's cooperative pool. Reconnects lazily after an error.
final class RedisConnection: @unchecked Sendable {
    // `context` is touched only on `queue`: that is what makes this type Sendable.
    private var context: UnsafeMutablePointer<redisContext>?
    private let queue: DispatchQueue
    private let configuration: RedisConfiguration

    init(configuration: RedisConfiguration, index: Int) {
        self.configuration = configuration
        self.queue = DispatchQueue(label: "pushrelay.redis.\(index)")
    }

    deinit {
        if let context { redisFree(context) }
    }

    func pipeline(_ commands: [[[UInt8]]]) async throws -> [RedisValue] {
        try await withCheckedThrowingContinuation { continuation in
            queue.async {
                continuation.resume(with: Result { try self.runPipeline(commands) })
            }
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

    private func runPipeline(_ commands: [[[UInt8]]]) throws(RedisError) -> [RedisValue] {
        let context = try connected()
        for command in commands {
            let rc = Self.append(command, to: context)
            guard rc == REDIS_OK else { throw failure(context, "append") }
        }
        var replies: [RedisValue] = []
        replies.reserveCapacity(commands.count)
        for _ in commands {
            var raw: UnsafeMutableRawPointer?
            guard redisGetReply(context, &raw) == REDIS_OK, let raw else { throw failure(context, "read reply") }
            let reply = raw.assumingMemoryBound(to: redisReply.self)
            replies.append(Self.value(of: reply))
            freeReplyObject(raw)
        }
        return replies
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

/// A small pool of Redis connections. Commands are arrays of arguments; a pipeline
/// sends several commands in one round trip and returns their replies in order.
public final class RedisClient: Sendable {
    private let connections: [RedisConnection]
    private let next = Mutex(0)
    public let configuration: RedisConfiguration

    public init(configuration: RedisConfiguration) {
        self.configuration = configuration
        self.connections = (0..<configuration.connections).map {
            RedisConnection(configuration: configuration, index: $0)
        }
    }

    private func connection() -> RedisConnection {
        let index = next.withLock { value in
            value = (value + 1) % connections.count
            return value
        }
        return connections[index]
    }

    /// Sends all commands in one round trip. Error replies come back as `.error` values.
    public func pipeline(_ commands: [[RedisArgument]]) async throws -> [RedisValue] {
        guard !commands.isEmpty else { return [] }
        return try await connection().pipeline(commands.map { $0.map(\.bytes) })
    }

    /// Runs one command; a Redis error reply is thrown as `RedisError.replyError`.
    @discardableResult
    public func command(_ arguments: RedisArgument...) async throws -> RedisValue {
        try await command(arguments)
    }

    @discardableResult
    public func command(_ arguments: [RedisArgument]) async throws -> RedisValue {
        let reply = try await pipeline([arguments])[0]
        if case .error(let message) = reply { throw RedisError(code: .replyError, message: message) }
        return reply
    }

    /// True when Redis answers PING.
    public func ping() async -> Bool {
        (try? await command("PING"))?.string == "PONG"
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
