import PushModels
import RedisClient

/// Which providers the running dispatchers can send to: each dispatcher announces the
/// providers it has credentials for, and ingest refuses a push no dispatcher could send
/// (gorush's API: a platform that is not enabled) instead of accepting it to fail later.
public protocol ProviderDirectory: Sendable {
    /// The providers some dispatcher can send to; nil while no dispatcher has said.
    func enabledProviders(nowMs: Int64) async throws -> Set<Provider>?
    /// Whether every dispatcher whose word is current (and at least one) can do
    /// `capability`: a record only such a dispatcher handles right may then be written.
    func everyDispatcherCan(_ capability: DispatcherCapability, nowMs: Int64) async throws -> Bool
}

extension ProviderDirectory {
    public func everyDispatcherCan(_ capability: DispatcherCapability, nowMs: Int64) async throws -> Bool { false }
}

/// What a dispatcher announces it can do beyond sending, as `+{name}` beside its
/// providers (a dispatcher from before announces none; an ingest from before ignores
/// them, as names that are no provider).
public enum DispatcherCapability: String, Sendable, CaseIterable {
    /// Sends a `send_mode: validate_only` push as a check: FCM and Huawei with
    /// `validate_only`, no other provider at all. A dispatcher without it would send it.
    case validateOnly = "validate_only"
    /// Keeps the send ledger in buckets (`RedisDeliveryLedger`): once every dispatcher
    /// can, none writes the per-pair keys of the first layout any more.
    case bucketedLedger = "ledger_buckets"
}

/// The announcements in one Redis hash (`RedisKeys.providers`): a field per dispatcher
/// process, `{until_ms}|{provider},…`. The providers are those every dispatcher whose
/// word is still current can send to: the dispatchers share `push.outbound`'s partitions,
/// so any of them may get any push, and one without a provider's credentials would
/// dead-letter it. When no word is current (every dispatcher stopped), the last one to
/// speak stands, since a stopped dispatcher does not change what is configured.
public struct ProviderAnnouncements: ProviderDirectory {
    public let redis: RedisClient
    public let keys: RedisKeys
    /// Announcements older than this are deleted by the next dispatcher to announce.
    public static let forgetAfterMs: Int64 = 86_400_000

    public init(redis: RedisClient, keys: RedisKeys) {
        self.redis = redis
        self.keys = keys
    }

    /// One dispatcher's word, good until `untilMs`; stale words of stopped dispatchers go.
    public func announce(
        process: String, providers: Set<Provider>, capabilities: Set<DispatcherCapability> = [], untilMs: Int64,
        nowMs: Int64
    ) async throws {
        let list = (providers.map(\.rawValue).sorted() + capabilities.map { "+\($0.rawValue)" }.sorted()).joined(
            separator: ",")
        try await redis.command(
            "HSET", RedisArgument(keys.providers), RedisArgument(process), RedisArgument("\(untilMs)|\(list)"))
        let stale = try await announcements().filter { $0.untilMs < nowMs.saturatingSubtract(Self.forgetAfterMs) }
        if !stale.isEmpty {
            try await redis.command(["HDEL", RedisArgument(keys.providers)] + stale.map { RedisArgument($0.process) })
        }
    }

    public func enabledProviders(nowMs: Int64) async throws -> Set<Provider>? {
        Self.enabled(try await announcements(), nowMs: nowMs)
    }

    public func everyDispatcherCan(_ capability: DispatcherCapability, nowMs: Int64) async throws -> Bool {
        let current = try await announcements().filter { $0.untilMs >= nowMs }
        return !current.isEmpty && current.allSatisfy { $0.capabilities.contains(capability) }
    }

    struct Announcement: Equatable {
        var process: String
        var untilMs: Int64
        var providers: Set<Provider>
        var capabilities: Set<DispatcherCapability> = []
    }

    /// What every current word names, or the latest word's when none is current.
    static func enabled(_ announcements: [Announcement], nowMs: Int64) -> Set<Provider>? {
        let current = announcements.filter { $0.untilMs >= nowMs }
        if let first = current.first {
            return current.dropFirst().reduce(first.providers) { $0.intersection($1.providers) }
        }
        return announcements.max { $0.untilMs < $1.untilMs }?.providers
    }

    func announcements() async throws -> [Announcement] {
        let reply = try await redis.command("HGETALL", RedisArgument(keys.providers)).array
        var found: [Announcement] = []
        var index = 0
        while index + 1 < reply.count {
            defer { index += 2 }
            guard let process = reply[index].string, let value = reply[index + 1].string else { continue }
            let parts = value.split(separator: "|", maxSplits: 1, omittingEmptySubsequences: false)
            // A word that does not read is left out, never guessed.
            guard parts.count == 2, let until = Int64(parts[0]) else { continue }
            var providers = Set<Provider>()
            var capabilities = Set<DispatcherCapability>()
            for name in parts[1].split(separator: ",") {
                if name.hasPrefix("+") {
                    if let capability = DispatcherCapability(rawValue: String(name.dropFirst())) {
                        capabilities.insert(capability)
                    }
                } else if let provider = Provider(rawValue: String(name)) {
                    providers.insert(provider)
                }
            }
            found.append(
                Announcement(process: process, untilMs: until, providers: providers, capabilities: capabilities))
        }
        return found
    }
}
