import PushCrypto
import PushModels
import RedisClient

/// A realm as a Zulip server describes it in its analytics upload.
public struct ZulipRealmInfo: Sendable, Equatable {
    public var uuid: RealmID
    public var host: String
    public var url: String
    public var name: String
    public var orgType: Int64
    public var deactivated: Bool
    public var isSystemBotRealm: Bool
    /// `uuid_owner_secret`: the realm's proof of ownership towards Zulip's billing pages.
    /// Stored encrypted, like device tokens.
    public var ownerSecret: String

    public init(
        uuid: RealmID, host: String, url: String, name: String, orgType: Int64, deactivated: Bool,
        isSystemBotRealm: Bool, ownerSecret: String
    ) {
        self.uuid = uuid
        self.host = host
        self.url = url
        self.name = name
        self.orgType = orgType
        self.deactivated = deactivated
        self.isSystemBotRealm = isSystemBotRealm
        self.ownerSecret = ownerSecret
    }
}

extension StorageSlot {
    /// A realm's `uuid_owner_secret`.
    public static func realmOwnerSecret(_ realm: RealmID) -> StorageSlot {
        StorageSlot(record: "realm:\(realm)", field: "owner_secret")
    }
}

extension RealmDirectory {
    /// The owning server of each realm (nil: never registered), in one round trip. An error
    /// reply throws: a realm is never taken as unowned because Redis could not say.
    public func owners(_ realms: [RealmID]) async throws -> [ServerID?] {
        guard !realms.isEmpty else { return [] }
        let replies = try await redis.checkedPipeline(
            realms.map { ["HGET", RedisArgument(keys.realm($0)), "server_uuid"] })
        return realms.indices.map { $0 < replies.count ? replies[$0].string.map(ServerID.init) : nil }
    }

    /// The plan every realm is on: the relay has no plans, every realm may push.
    public static let zulipPlanType = "self_hosted"

    /// Stores what a server uploaded about its realms (all already registered to it),
    /// and marks the server's realms missing from the upload as locally deleted (kept,
    /// as Zulip's bouncer keeps them).
    public func describe(
        _ realms: [ZulipRealmInfo], of server: ServerID, storage: StorageKeyring, nowMs: Int64 = Wire.nowMillis()
    ) async throws {
        var commands: [[RedisArgument]] = []
        for realm in realms {
            commands.append([
                "HSET", RedisArgument(keys.realm(realm.uuid)),
                "host", RedisArgument(realm.host), "url", RedisArgument(realm.url), "name", RedisArgument(realm.name),
                "org_type", RedisArgument(realm.orgType), "deactivated", realm.deactivated ? "1" : "0",
                "system_bot", realm.isSystemBotRealm ? "1" : "0",
                "owner_secret",
                RedisArgument(try storage.sealString(realm.ownerSecret, slot: .realmOwnerSecret(realm.uuid))),
                "plan_type", RedisArgument(Self.zulipPlanType), "locally_deleted", "0",
                "updated_ms", RedisArgument(nowMs),
            ])
        }
        let uploaded = Set(realms.map(\.uuid))
        let owned = try await redis.command("SMEMBERS", RedisArgument(keys.serverRealms(server))).array.compactMap {
            $0.string.map(RealmID.init)
        }
        for realm in owned where !uploaded.contains(realm) {
            commands.append([
                "HSET", RedisArgument(keys.realm(realm)), "locally_deleted", "1", "updated_ms", RedisArgument(nowMs),
            ])
        }
        guard !commands.isEmpty else { return }
        try await redis.checkedPipeline(commands)
    }
}
