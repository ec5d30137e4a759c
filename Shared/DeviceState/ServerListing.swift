import PushModels
import RedisClient

/// What an operator may see of a server: never its key or the key's hash.
public struct ServerSummary: Sendable, Equatable {
    public var uuid: ServerID
    public var hostname: String?
    public var contactEmail: String?
    public var createdMs: Int64?
    public var updatedMs: Int64?
    /// When it was deactivated; nil while it is active.
    public var deactivatedMs: Int64?
    /// Realms registered to it, and devices it registered (as its quota counts them).
    public var realmCount: Int64
    public var deviceCount: Int64

    public var isActive: Bool { deactivatedMs == nil }
}

extension ServerStore {
    /// Every server's uuid, found by SCAN on every master, sorted. A server hash is
    /// `{p}server:{uuid}`; its `…:realms` and `…:devices` keys are not servers.
    public func serverIDs() async throws -> [ServerID] {
        let prefix = keys.prefix + "server:"
        var found: Set<String> = []
        for name in try await redis.scanKeys(matching: prefix + "*") {
            var uuid = String(name.dropFirst(prefix.count))
            if uuid.hasPrefix("{"), uuid.hasSuffix("}") { uuid = String(uuid.dropFirst().dropLast()) }
            guard let canonical = Syntax.canonicalUUID(uuid), keys.server(ServerID(canonical)) == name else { continue }
            found.insert(canonical)
        }
        return found.sorted().map(ServerID.init)
    }

    /// One server as an operator sees it; nil when no such server exists.
    public func summary(_ uuid: ServerID) async throws -> ServerSummary? {
        let replies = try await redis.checkedPipeline([
            [
                "HMGET", RedisArgument(keys.server(uuid)), "hostname", "contact_email", "created_ms", "updated_ms",
                "deactivated_ms", "api_key_hmac", "api_key_sha256",
            ],
            ["SCARD", RedisArgument(keys.serverRealms(uuid))],
            ["GET", RedisArgument(keys.serverDevices(uuid))],
        ])
        guard replies.count == 3 else { return nil }
        let fields = replies[0].array
        guard fields.count == 7, fields.contains(where: { $0.string != nil }) else { return nil }
        func number(_ index: Int) -> Int64? { fields[index].string.flatMap { Int64($0) } }
        return ServerSummary(
            uuid: uuid, hostname: fields[0].string, contactEmail: fields[1].string, createdMs: number(2),
            updatedMs: number(3), deactivatedMs: number(4), realmCount: replies[1].int ?? 0,
            deviceCount: max(0, replies[2].int ?? 0))
    }
}
