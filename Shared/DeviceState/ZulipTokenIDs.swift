import PushModels
import RedisClient

/// Zulip 12.x names an E2EE device by its `token_id` (base64 of the first 8 bytes of
/// SHA-256 of the token), per realm: `{p}tid:{realm}:{token_id}` → device id.
extension DeviceStore {
    /// Binds `tokenID` in `realm` to `device` (a later registration of the same token rebinds it).
    public func bindZulipTokenID(_ tokenID: String, realm: RealmID, to device: DeviceID) async throws {
        try await redis.command(
            "SET", RedisArgument(keys.zulipTokenID(realm: realm, tokenID: tokenID)), RedisArgument(device))
    }

    /// The devices `tokenIDs` name in `realm`, in order (nil: none), in one round trip.
    public func devices(zulipTokenIDs tokenIDs: [String], realm: RealmID) async throws -> [DeviceID?] {
        guard !tokenIDs.isEmpty else { return [] }
        let found = try await redis.command(
            ["MGET"] + tokenIDs.map { RedisArgument(keys.zulipTokenID(realm: realm, tokenID: $0)) }
        ).array
        return tokenIDs.indices.map { i in i < found.count ? found[i].int.map { DeviceID($0) } : nil }
    }
}
