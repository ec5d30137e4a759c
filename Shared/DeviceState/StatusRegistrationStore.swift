import Foundation
import PushCrypto
import PushModels
import RedisClient

/// What storing a Status registration came to.
public enum StatusStoreOutcome: Sendable, Equatable {
    /// A registration of the same or a newer version is stored already.
    case stale
    /// The key holds as many installations as it may.
    case full
    /// Stored (or, for an unregistration, removed); the device the installation had before.
    case stored(previousDevice: DeviceID?)
}

/// A stored Status registration: its protobuf bytes, opened, and its device.
public struct StoredStatusRegistration: Sendable, Equatable {
    public var bytes: [UInt8]
    public var device: DeviceID?

    public init(bytes: [UInt8], device: DeviceID?) {
        self.bytes = bytes
        self.device = device
    }
}

/// What claiming a Status notification request found.
public enum StatusMessageClaim: Sendable, Equatable {
    /// Not seen before: this request handles it.
    case claimed
    /// Answered before: the answer's bytes.
    case answered([UInt8])
    /// Being handled, or answered with an answer too large to keep.
    case busy
}

/// The Status push server's registrations, per (hashed public key, installation), kept
/// sealed and versioned; the notification requests already answered; and the request
/// counts per client address (the endpoints take no credentials).
///
/// `installation` is the installation id's key part (a hash of it), so any id is safe in a key.
public protocol StatusRegistrationStore: Sendable {
    func storedVersion(hashedKey: String, installation: String) async throws -> UInt64
    /// Stores `registration` (nil: removes it) unless a version at least as new is stored,
    /// or the key already holds `maxInstallations` others; checked and stored atomically.
    func store(
        hashedKey: String, installation: String, version: UInt64, registration: [UInt8]?, device: DeviceID?,
        maxInstallations: Int
    ) async throws -> StatusStoreOutcome
    /// The registrations of `hashedKey` (all, in installation order, or one installation's).
    func registrations(hashedKey: String, installation: String?) async throws -> [StoredStatusRegistration]
    /// Counts one request from `client` in its window; the count so far.
    func countRequest(client: String, nowMs: Int64, windowSeconds: Int) async throws -> Int64
    /// Claims a notification request by its message id, for `pendingSeconds` at most.
    func claimMessage(_ messageID: String, pendingSeconds: Int) async throws -> StatusMessageClaim
    /// Keeps the answer of a claimed request (nil: answered, not kept) for `ttlSeconds`.
    func keepAnswer(_ messageID: String, answer: [UInt8]?, ttlSeconds: Int) async throws
    /// Frees a claimed request that was not answered.
    func releaseMessage(_ messageID: String) async throws
}

/// Status state in Redis (`RedisKeys`: `st:`, `sq:`, `sc:`); registrations sealed with the
/// storage keyring, bound to their key.
public struct RedisStatusRegistrationStore: StatusRegistrationStore {
    let redis: RedisClient
    let keys: RedisKeys
    let storage: StorageKeyring

    public init(redis: RedisClient, keys: RedisKeys, storage: StorageKeyring) {
        self.redis = redis
        self.keys = keys
        self.storage = storage
    }

    /// A version as the store script compares it: 20 digits, so text order is number order
    /// (Lua numbers are doubles, exact only below 2^53).
    public static func versionText(_ version: UInt64) -> String {
        let digits = String(version)
        return String(repeating: "0", count: max(0, 20 - digits.count)) + digits
    }

    public func storedVersion(hashedKey: String, installation: String) async throws -> UInt64 {
        let reply = try await redis.command(
            "HGET", RedisArgument(keys.statusRegistration(key: hashedKey, installation: installation)), "version")
        return reply.string.flatMap { UInt64($0) } ?? 0
    }

    public func store(
        hashedKey: String, installation: String, version: UInt64, registration: [UInt8]?, device: DeviceID?,
        maxInstallations: Int
    ) async throws -> StatusStoreOutcome {
        var sealed = ""
        if let registration {
            sealed = try storage.seal(
                registration, slot: .statusRegistration(key: hashedKey, installation: installation))
        }
        let reply = try await redis.command(
            "EVAL", RedisArgument(Self.storeScript), "2",
            RedisArgument(keys.statusRegistration(key: hashedKey, installation: installation)),
            RedisArgument(keys.statusInstallations(key: hashedKey)), RedisArgument(Self.versionText(version)),
            RedisArgument(sealed), RedisArgument(device.map { "\($0.rawValue)" } ?? ""), RedisArgument(installation),
            RedisArgument(maxInstallations))
        if case .error(let message) = reply { throw RedisError(code: .replyError, message: message) }
        if reply.int == -1 { return .stale }
        if reply.int == -2 { return .full }
        return .stored(previousDevice: reply.string.flatMap { Int64($0) }.map { DeviceID($0) })
    }

    public func registrations(hashedKey: String, installation: String?) async throws -> [StoredStatusRegistration] {
        let parts: [String]
        if let installation {
            parts = [installation]
        } else {
            parts = try await redis.command("SMEMBERS", RedisArgument(keys.statusInstallations(key: hashedKey)))
                .array.compactMap(\.string).sorted()
        }
        guard !parts.isEmpty else { return [] }
        let replies = try await redis.pipeline(
            parts.map {
                [
                    "HMGET", RedisArgument(keys.statusRegistration(key: hashedKey, installation: $0)), "registration",
                    "device_id",
                ]
            })
        var found: [StoredStatusRegistration] = []
        for (part, reply) in zip(parts, replies) {
            let fields = reply.array
            guard let sealed = fields.first?.string, !sealed.isEmpty,
                let bytes = try? storage.open(sealed, slot: .statusRegistration(key: hashedKey, installation: part))
            else { continue }
            let device = fields.count > 1 ? fields[1].string.flatMap { Int64($0) }.map { DeviceID($0) } : nil
            found.append(StoredStatusRegistration(bytes: bytes, device: device))
        }
        return found
    }

    /// Every hashed key with registrations, found by SCAN on each master: a Status server
    /// listens on each one's query topic.
    public func hashedKeys() async throws -> [String] {
        let prefix = keys.prefix + "st:"
        var found: Set<String> = []
        for name in try await redis.scanKeys(matching: prefix + "*") {
            var key = String(name.dropFirst(prefix.count))
            if key.hasPrefix("{"), key.hasSuffix("}") { key = String(key.dropFirst().dropLast()) }
            // `st:{key}` is a key's set of installations; `st:{key}:{installation}` one of them.
            guard key.utf8.count == 128, key.utf8.allSatisfy(\.isHexDigit), keys.statusInstallations(key: key) == name
            else { continue }
            found.insert(key)
        }
        return found.sorted()
    }

    public func countRequest(client: String, nowMs: Int64, windowSeconds: Int) async throws -> Int64 {
        let window = WindowCounter.window(nowMs: nowMs, seconds: windowSeconds)
        return try await WindowCounter(redis: redis).increment(
            keys.statusClient(client, window: window), windowSeconds: windowSeconds)
    }

    public func claimMessage(_ messageID: String, pendingSeconds: Int) async throws -> StatusMessageClaim {
        let key = RedisArgument(keys.statusRequest(messageID))
        let claim = try await redis.command("SET", key, "pending", "NX", "EX", RedisArgument(pendingSeconds))
        guard claim == .null else { return .claimed }
        if let earlier = try await redis.command("GET", key).string, earlier != "pending", earlier != "answered",
            let bytes = Data(base64Encoded: earlier)
        {
            return .answered(Array(bytes))
        }
        return .busy
    }

    public func keepAnswer(_ messageID: String, answer: [UInt8]?, ttlSeconds: Int) async throws {
        let stored = answer.map { Data($0).base64EncodedString() } ?? "answered"
        try await redis.command(
            "SET", RedisArgument(keys.statusRequest(messageID)), RedisArgument(stored), "EX", RedisArgument(ttlSeconds))
    }

    public func releaseMessage(_ messageID: String) async throws {
        try await redis.command("DEL", RedisArgument(keys.statusRequest(messageID)))
    }

    /// Stores a registration unless its version is not above the stored one (checked
    /// again atomically): `version`, the registration sealed, the device.
    static let storeScript = """
        local stored = redis.call('HGET', KEYS[1], 'version') or '00000000000000000000'
        if string.len(stored) < 20 then stored = string.rep('0', 20 - string.len(stored)) .. stored end
        if stored >= ARGV[1] then return -1 end
        if ARGV[2] ~= '' and redis.call('SISMEMBER', KEYS[2], ARGV[4]) == 0
            and redis.call('SCARD', KEYS[2]) >= tonumber(ARGV[5]) then return -2 end
        local old = redis.call('HGET', KEYS[1], 'device_id') or ''
        if ARGV[2] == '' then
            redis.call('HDEL', KEYS[1], 'registration', 'device_id')
            redis.call('HSET', KEYS[1], 'version', ARGV[1])
            redis.call('SREM', KEYS[2], ARGV[4])
        else
            redis.call('HSET', KEYS[1], 'version', ARGV[1], 'registration', ARGV[2], 'device_id', ARGV[3])
            redis.call('SADD', KEYS[2], ARGV[4])
        end
        return old
        """
}
