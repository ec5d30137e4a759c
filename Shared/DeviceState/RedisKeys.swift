import PushCrypto
import RedisClient
import PushModels

/// Every Redis key the relay uses, in one place. `prefix` (default `pr:`) lets several
/// deployments or test runs share one Redis.
///
/// | key | type | holds |
/// |---|---|---|
/// | `{p}server:{uuid}` | hash | `api_key_hmac` (HMAC-SHA-256 under the pepper; servers from before it: `api_key_sha256` until their next authentication), `hostname`, `contact_email`, `created_ms`, `updated_ms`, `deactivated_ms`?; from Zulip's analytics upload: `zulip_version`, `merge_base`, `api_feature_level`, `last_realm_count_id`, `last_installation_count_id`, `last_realmauditlog_id`, `analytics_ms` |
/// | `{p}realm:{realm_uuid}` | hash | `server_uuid`, `created_ms`; from Zulip's analytics upload: `host`, `url`, `name`, `org_type`, `deactivated` (0/1), `system_bot` (0/1), `owner_secret` (encrypted like tokens), `plan_type`, `locally_deleted` (0/1), `updated_ms` |
/// | `{p}tid:{realm}:{token_id}` | string | device id of a Zulip 12.x E2EE registration (`token_id`: base64 of the first 8 bytes of SHA-256 of the token) |
/// | `{p}zl:{server}:{user}` | hash | Zulip legacy-API devices of one user (`{user}` = `id:{user_id}` or `uuid:{user_uuid}`): `{provider}:{hmac(token)}` → device id |
/// | `{p}seq:device` | string | last device id handed out (INCR) |
/// | `{p}dev:{id}` | hash | `realm`, `user_id`?, `provider`, `token` (encrypted: `v1:{key_id}:{base64}`), `app_id`?, `push_account_id`?, `key_id`?, `scheme`?, `status` (active/invalid), `reason`, `invalid_ms`, `feedback_pending`? (invalidated, its feedback entry not yet written), `registered_ms`, `created_ms`, `zulip_legacy`? (`{server}|{user}` for a legacy-API device), `api`? (the API that registered it: `native`, `zulip_e2ee`, `gorush`, `status`) |
/// | `{p}dev:{id}:keys` | hash | push key id → `{encrypted tagged key}|added_ms` (`v1:{key_id}:{base64}`; the first form, `base64(tagged key)`, still reads) |
/// | `{p}user:{realm}:{user_id}` | set | device ids of the user |
/// | `{p}tok:{realm}:{provider}:{hmac(token)}:{push_account_id}` | string | device id (same token + account → same device); keyed with the storage key, one digest per storage key id; the first form, unkeyed SHA-256, is still found and moved on registration |
/// | `{p}fb:{realm}` | stream | invalidations: `device_id`, `reason`, `at_ms`; entry id = feedback cursor |
/// | `{p}rl:{server}:{window}` | string | requests of the rate-limit window leased to ingest instances so far (expires) |
/// | `{p}af:{client address}:{window}` | string | failed authentications from one address in a window (expires) |
/// | `{p}sr:{client address}:{window}` | string | server registrations from one address in a window (expires) |
/// | `{p}server:{uuid}:realms` | set | realm uuids the server registered (realm quota) |
/// | `{p}server:{uuid}:devices` | string | devices the server registered (device quota) |
/// | `{p}idem:{server}:{sha256(Idempotency-Key)}` | hash | `state` (pending/done), `fp` (body SHA-256), `status`, `body`: a notify's first answer (expires) |
/// | `{p}rs:{topic:partition}:{realm}` | hash | a realm's outcome counters (`{provider}:{outcome}`) from one `push.deliveries` partition; `{p}rs:{realm}` holds those counted before |
/// | `{p}rsp:{realm}` | set | the `topic:partition`s a realm has outcome counters in |
/// | `{p}rc:{topic:partition}:{chunk}` | bitmap | one bit per `push.deliveries` record (offset mod 65,536), set once counted (kept 48 h after its last write) |
/// | `{p}providers` | hash | dispatcher process id → `{until_ms}|{provider},…`: the providers each dispatcher has credentials for, renewed while it runs (`ProviderAnnouncements`) |
/// | `{p}tv:{window}` | string | Zulip registration-transfer verifications in a window, from anyone (expires) |
/// | `{p}hostname:{hostname}` | string | uuid of the server registered with that hostname (Zulip's registration transfer) |
/// | `{p}sl:{second}:{shard}` | set | send ledger: 64-bit fingerprints of the (notification, device) pairs a provider accepted, bucketed by the second the notification was accepted and 16 shards (`RedisDeliveryLedger`); expires `PUSHRELAY_DISPATCHER_DEDUPE_TTL_SECONDS` after its last write |
/// | `{p}sl:{second}:{shard}:c` | hash | send ledger claims: fingerprint → ms the send began, from the claim until the mark or release (for good after an interrupted send); expires like the set |
/// | `{p}sent:{notification_id}:{device_id}` | string | send ledger of release 0.1: `claimed {ms}` or `sent {ms} {provider message id}`; read (and written while such a dispatcher runs) until they expire |
/// | `{p}ns:{notification_id}` | hash | delivery status of one notification (`GET /v1/notifications/{id}`): `r` realm, `s` server, `a` accepted ms, `t` target device ids, `fp` FCM name prefix, `m` (devices past the bound), `d:{device_id}` and `all` → `rank|at|state|provider|http|attempts|next|reason|id` (`RedisDeliveryStatusStore`); expires `PUSHRELAY_DELIVERY_STATUS_TTL_SECONDS` after it was made |
/// | `{p}nsr:{realm}` | sorted set | a realm's notifications with status, by acceptance (ms), trimmed to `PUSHRELAY_DELIVERY_STATUS_MAX_PER_REALM` |
///
/// On a Redis Cluster (`hashTags`), the part of a key in `{…}` is its hash tag: keys that
/// one command or one pipeline touches together share a slot — a server's hash, its
/// counters, rate-limit window and idempotency records (`{server}`); a device's hash and
/// its push keys (`{id}`); a send-ledger bucket's set and claims (`{second:shard}`). Every script
/// touches one key, except the rate-limit lease, whose two keys (window counter and
/// server hash) share the server's tag, and the send ledger's, whose two share the bucket's. On one Redis the keys keep the names they always had.
public struct RedisKeys: Sendable {
    public let prefix: String
    public let hashTags: Bool

    public init(prefix: String = "pr:", hashTags: Bool = false) {
        self.prefix = prefix
        self.hashTags = hashTags
    }

    /// `value` as a hash tag on a cluster, as itself on one Redis.
    public func tag(_ value: some CustomStringConvertible) -> String {
        hashTags ? "{\(value)}" : value.description
    }

    public func server(_ uuid: ServerID) -> String { "\(prefix)server:\(tag(uuid))" }
    public func realm(_ uuid: RealmID) -> String { "\(prefix)realm:\(uuid)" }
    public var deviceSequence: String { "\(prefix)seq:device" }
    public func device(_ id: DeviceID) -> String { "\(prefix)dev:\(tag(id))" }
    public func deviceKeys(_ id: DeviceID) -> String { "\(prefix)dev:\(tag(id)):keys" }
    public func userDevices(realm: RealmID, userID: Int64) -> String { "\(prefix)user:\(realm):\(userID)" }
    /// The token index under a digest of the token (`StorageKeyring.tokenDigests`).
    public func tokenIndex(realm: RealmID, provider: Provider, tokenDigest: String, pushAccountID: Int64?) -> String {
        "\(prefix)tok:\(realm):\(provider.rawValue):\(tokenDigest):\(pushAccountID.map(String.init) ?? "-")"
    }
    /// The first form of the token index, under the unkeyed SHA-256 of the token: still
    /// looked up, so devices registered before the keyed index keep their ids.
    public func legacyTokenIndex(realm: RealmID, provider: Provider, token: String, pushAccountID: Int64?) -> String {
        tokenIndex(
            realm: realm, provider: provider, tokenDigest: Fingerprint.sha256Hex(token), pushAccountID: pushAccountID)
    }
    public func feedback(realm: RealmID) -> String { "\(prefix)fb:\(realm)" }
    /// gorush's API: a server's counters (`/api/stat/app`) and feedback hook.
    public func gorushStats(server: ServerID) -> String { "\(prefix)gs:\(tag(server))" }
    public func gorushHook(server: ServerID) -> String { "\(prefix)gh:\(tag(server))" }
    /// The caller's `notif_id` of one accepted notification, for the feedback hook.
    public func gorushNotificationID(_ id: NotificationID) -> String { "\(prefix)gn:\(id)" }
    /// Outcome counters of one realm (`{provider}:{outcome}` fields), as first kept: read, no longer written.
    public func realmStats(_ realm: RealmID) -> String { "\(prefix)rs:\(realm)" }
    /// Outcome counters of one realm from one `push.deliveries` partition (`shard`:
    /// `{topic}:{partition}`), in the partition's slot beside its counted marks.
    public func realmStats(_ realm: RealmID, shard: String) -> String { "\(prefix)rs:\(tag(shard)):\(realm)" }
    /// The partitions (`shard`s) a realm has outcome counters in.
    public func realmStatsShards(_ realm: RealmID) -> String { "\(prefix)rsp:\(realm)" }
    /// One bit per record of a `push.deliveries` partition, set once it is counted
    /// (`chunk`: the record's offset / 65,536; kept 48 h after it was last written).
    public func countedMarks(shard: String, chunk: Int64) -> String { "\(prefix)rc:\(tag(shard)):\(chunk)" }
    /// Status push server: one registration (by hashed key and installation), the
    /// installations of a hashed key, and notification requests already answered.
    public func statusRegistration(key: String, installation: String) -> String {
        "\(prefix)st:\(tag(key)):\(installation)"
    }
    public func statusInstallations(key: String) -> String { "\(prefix)st:\(tag(key))" }
    public func statusRequest(_ messageID: String) -> String { "\(prefix)sq:\(messageID)" }
    /// Status requests from one client address in one window (they carry no credentials).
    public func statusClient(_ client: String, window: Int64) -> String { "\(prefix)sc:\(client):\(window)" }
    public func zulipTokenID(realm: RealmID, tokenID: String) -> String { "\(prefix)tid:\(realm):\(tokenID)" }
    public func zulipLegacyUser(server: ServerID, user: ZulipUserKey) -> String { "\(prefix)zl:\(server):\(user)" }
    public func rateLimit(server: ServerID, window: Int64) -> String { "\(prefix)rl:\(tag(server)):\(window)" }
    public var providers: String { "\(prefix)providers" }
    /// Delivery status of one notification, and a realm's notifications that have one.
    public func deliveryStatus(_ id: NotificationID) -> String { "\(prefix)ns:\(tag(id))" }
    public func deliveryStatusIndex(realm: RealmID) -> String { "\(prefix)nsr:\(tag(realm))" }
    public func transferVerifications(window: Int64) -> String { "\(prefix)tv:\(window)" }
    public func serverHostname(_ hostname: String) -> String { "\(prefix)hostname:\(hostname)" }
    /// The send ledger's per-pair key of release 0.1: read until they expire.
    public func legacySent(notificationID: NotificationID, deviceID: DeviceID) -> String {
        "\(prefix)sent:\(tag(notificationID)):\(deviceID)"
    }
    /// A send-ledger bucket's set of sent pairs; its claims are this key + `:c`.
    public func sendLedger(second: Int64, shard: Int64) -> String { "\(prefix)sl:\(tag("\(second):\(shard)"))" }
}

extension RedisArgument {
    /// An id as Redis gets it: its bare value.
    public init(_ id: some Identifier) { self.init(id.description) }
}
