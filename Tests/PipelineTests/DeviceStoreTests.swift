import DevStack
import Foundation
import PushCrypto
import PushModels
import RedisClient
import Testing

@testable import DeviceState

extension DeviceStore {
    /// Reports the device's token dead twice ("UNREGISTERED"); what each report changed.
    func reportDead(_ id: DeviceID, token: String) async throws -> [Bool] {
        var changed: [Bool] = []
        for _ in 0..<2 {
            changed.append(
                try await invalidate(
                    deviceID: id, tokenFingerprint: Fingerprint.token(token), reason: .provider("UNREGISTERED"),
                    providerTimestampMs: nil))
        }
        return changed
    }
}

extension StackTests {
    /// Device state against the stack's real Redis, under a key prefix of its own.
    @Suite struct DeviceStoreTests {
        func store(
            storage: StorageKeyring? = nil, prefix: String = "t\(UUID().uuidString.prefix(8)):"
        ) async throws -> DeviceStore {
            let stack = try await Stack.get()
            let redis = RedisClient(configuration: RedisConfiguration(port: stack.redisPort, connections: 4))
            let keyring = try storage ?? StorageKeyring(fileContents: StorageKeyring.generateLine(id: "s1"))
            return DeviceStore(redis: redis, keys: RedisKeys(prefix: prefix), storage: keyring)
        }

        /// What the dispatchers announce: what every current word names (any dispatcher may
        /// get any push), the latest word when none is current, nothing said at all as
        /// unknown; stale words are deleted.
        @Test func providerAnnouncementsNameWhatTheDispatchersCanSendTo() async throws {
            let stack = try await Stack.get()
            let redis = RedisClient(configuration: RedisConfiguration(port: stack.redisPort, connections: 2))
            let keys = RedisKeys(prefix: "t\(UUID().uuidString.prefix(8)):")
            let announcements = ProviderAnnouncements(redis: redis, keys: keys)
            let now: Int64 = 1_800_000_000_000
            #expect(try await announcements.enabledProviders(nowMs: now) == nil, "no dispatcher has said")
            try await announcements.announce(process: "a", providers: [.apns, .fcm], untilMs: now + 30_000, nowMs: now)
            try await announcements.announce(
                process: "b", providers: [.fcm, .webpush], untilMs: now + 30_000, nowMs: now)
            #expect(try await announcements.enabledProviders(nowMs: now) == [.fcm])
            // Only b is current a minute later... and when nobody is, the last word stands.
            try await announcements.announce(
                process: "b", providers: [.hms], untilMs: now + 90_000, nowMs: now + 60_000)
            #expect(try await announcements.enabledProviders(nowMs: now + 60_000) == [.hms])
            #expect(try await announcements.enabledProviders(nowMs: now + 600_000) == [.hms])
            // A word older than a day goes when the next dispatcher speaks.
            let later = now + ProviderAnnouncements.forgetAfterMs + 100_000
            try await announcements.announce(process: "c", providers: [.apns], untilMs: later + 30_000, nowMs: later)
            let fields = try await redis.command("HKEYS", RedisArgument(keys.providers)).array.compactMap(\.string)
            #expect(fields == ["c"], "\(fields)")
            // A word that does not read is left out.
            try await redis.command("HSET", RedisArgument(keys.providers), "d", "garbage")
            #expect(try await announcements.enabledProviders(nowMs: later) == [.apns])
            try await redis.command("DEL", RedisArgument(keys.providers))
        }

        /// gorush's `/api/stat/app` outcome counters count each `push.deliveries` record
        /// once: a batch counted again (a pipeline re-run after a Redis fault, a batch read
        /// again after a crash, cut differently) adds nothing; counts from before the
        /// counters were kept per partition still read.
        @Test func outcomeCountersCountEachRecordOnce() async throws {
            let stack = try await Stack.get()
            let redis = RedisClient(configuration: RedisConfiguration(port: stack.redisPort, connections: 2))
            let keys = RedisKeys(prefix: "t\(UUID().uuidString.prefix(8)):")
            let store = RedisGorushStore(redis: redis, keys: keys)
            func outcome(_ realm: RealmID, _ field: String, partition: Int32, offset: Int64) -> CountedOutcome {
                CountedOutcome(
                    realm: realm, field: field, topic: "push.deliveries", partition: partition, offset: offset)
            }
            let first = [
                outcome("r1", "ios:sent", partition: 0, offset: 0),
                outcome("r1", "ios:sent", partition: 0, offset: 1),
                outcome("r1", "android:failed", partition: 1, offset: 1),
                outcome("r2", "ios:sent", partition: 1, offset: 70_000),
            ]
            try await store.countOutcomes(first)
            // Read again, cut differently, with one new record.
            try await store.countOutcomes(Array(first[1...]) + [outcome("r1", "ios:sent", partition: 0, offset: 2)])
            try await store.countOutcomes([first[0]])
            #expect(
                try await store.counters(server: "s", realm: "r1").outcomes == ["ios:sent": 3, "android:failed": 1])
            #expect(try await store.counters(server: "s", realm: "r2").outcomes == ["ios:sent": 1])
            // The same offset on another topic is another record.
            try await store.countOutcomes([
                CountedOutcome(realm: "r2", field: "ios:sent", topic: "other", partition: 1, offset: 70_000)
            ])
            #expect(try await store.counters(server: "s", realm: "r2").outcomes == ["ios:sent": 2])
            // Counts kept before, under the realm's old key, are added in.
            try await redis.command("HINCRBY", RedisArgument(keys.realmStats("r2")), "ios:sent", "5")
            #expect(try await store.counters(server: "s", realm: "r2").outcomes == ["ios:sent": 7])
            // The marks expire; the counters do not.
            let ttl = try await redis.command(
                "TTL", RedisArgument(keys.countedMarks(shard: "push.deliveries:0", chunk: 0)))
            #expect((ttl.int ?? 0) > 0)
        }

        /// The hostname index of Zulip's registration transfer: the first server to register
        /// a hostname keeps it, a server that moves away gives it up, and servers stored
        /// before the index are indexed by `pushrelay-admin index-hostnames`, oldest first.
        @Test func hostnamesStayWithTheServerThatRegisteredThemFirst() async throws {
            let stack = try await Stack.get()
            let redis = RedisClient(configuration: RedisConfiguration(port: stack.redisPort, connections: 2))
            let keys = RedisKeys(prefix: "t\(UUID().uuidString.prefix(8)):")
            let pepper = try APIKeyPepper(fileContents: APIKeyPepper.generateLine())
            let servers = ServerStore(redis: redis, keys: keys, pepper: pepper)
            let (a, b) = (ServerID(UUID().uuidString.lowercased()), ServerID(UUID().uuidString.lowercased()))
            let key = String(repeating: "k", count: 64)
            _ = try await servers.register(
                uuid: a, apiKey: key, hostname: "chat.example.org", contactEmail: "a@example.org", newAPIKey: nil)
            _ = try await servers.register(
                uuid: b, apiKey: key, hostname: "chat.example.org", contactEmail: "b@example.org", newAPIKey: nil)
            #expect(try await servers.server(hostname: "chat.example.org") == a)
            // a moves away: the name is free, and b takes it on its next registration.
            _ = try await servers.register(
                uuid: a, apiKey: key, hostname: "new.example.org", contactEmail: "a@example.org", newAPIKey: nil)
            #expect(try await servers.server(hostname: "chat.example.org") == nil)
            #expect(try await servers.server(hostname: "new.example.org") == a)
            _ = try await servers.register(
                uuid: b, apiKey: key, hostname: "chat.example.org", contactEmail: "b@example.org", newAPIKey: nil)
            #expect(try await servers.server(hostname: "chat.example.org") == b)

            // Servers stored before the index: the older one gets the name.
            let (old, older) = (ServerID(UUID().uuidString.lowercased()), ServerID(UUID().uuidString.lowercased()))
            try await redis.command(
                "HSET", RedisArgument(keys.server(old)), "hostname", "legacy.example.org", "created_ms", "2000")
            try await redis.command(
                "HSET", RedisArgument(keys.server(older)), "hostname", "legacy.example.org", "created_ms", "1000")
            #expect(try await servers.server(hostname: "legacy.example.org") == nil)
            #expect(try await servers.indexHostnames() == 3)
            #expect(try await servers.server(hostname: "legacy.example.org") == older)
            #expect(try await servers.server(hostname: "new.example.org") == a)
        }

        /// Every key name and value under the store's prefix, as Redis holds them.
        func dump(_ devices: DeviceStore) async throws -> String {
            var out: [String] = []
            var cursor = "0"
            repeat {
                let reply = try await devices.redis.command(
                    "SCAN", RedisArgument(cursor), "MATCH", RedisArgument("\(devices.keys.prefix)*"), "COUNT", "1000"
                ).array
                cursor = reply.first?.string ?? "0"
                for key in reply.last?.array.compactMap(\.string) ?? [] {
                    out.append(key)
                    switch try await devices.redis.command("TYPE", RedisArgument(key)).string {
                    case "hash":
                        out += try await devices.redis.command("HGETALL", RedisArgument(key)).array.compactMap(\.string)
                    case "set":
                        out += try await devices.redis.command("SMEMBERS", RedisArgument(key)).array.compactMap(
                            \.string)
                    case "string": out.append(try await devices.redis.command("GET", RedisArgument(key)).string ?? "")
                    default: break
                    }
                }
            } while cursor != "0"
            return out.joined(separator: "\n")
        }

        func registration(_ token: String, user: Int64 = 1, realm: RealmID = "realm-a") throws -> DeviceRegistration {
            DeviceRegistration(
                realmUUID: realm, userID: user, token: try DeviceToken(provider: .fcm, value: token), appID: nil,
                pushAccountID: 7, pushKey: (1, try RealmClient.pushKey()))
        }

        /// The API that registered a device is stored with it; devices from before it read by
        /// what they have (a user: native; else unrecorded).
        @Test func aDeviceKnowsTheAPIThatRegisteredIt() async throws {
            let devices = try await store()
            var gorush = try registration("tok-gorush")
            gorush.userID = nil
            gorush.api = .gorush
            let gorushID = try await devices.register(gorush).id
            #expect(try await devices.device(gorushID)?.owner == .gorush)
            var native = try registration("tok-native", user: 5)
            native.api = .native
            #expect(try await devices.device(try await devices.register(native).id)?.owner == .native(userID: 5))
            var e2ee = try registration("tok-e2ee")
            e2ee.userID = nil
            let e2eeID = try await devices.register(e2ee).id
            #expect(try await devices.device(e2eeID)?.owner == .unrecorded, "registered without its API")
            e2ee.api = .zulipE2EE
            #expect(try await devices.register(e2ee).id == e2eeID)
            #expect(try await devices.device(e2eeID)?.owner == .zulipE2EE, "a renewal records it")
        }

        /// A device's standing (whose, active) reads without its secrets and agrees with
        /// the full record: ingest counts targets with it.
        @Test func standingsAgreeWithTheRecords() async throws {
            let devices = try await store()
            let active = try await devices.register(try registration("tok-standing-a", user: 3)).id
            let dead = try await devices.register(try registration("tok-standing-b", user: 3)).id
            let elsewhere = try await devices.register(try registration("tok-standing-c", user: 3, realm: "realm-b")).id
            #expect(try await devices.reportDead(dead, token: "tok-standing-b") == [true, false])
            let missing = DeviceID(rawValue: 9_999_999)
            let ids = [active, dead, elsewhere, missing]
            let standings = try await devices.standings(ids)
            let records = try await devices.devices(ids)
            #expect(standings[missing] == nil && records[missing] == nil)
            for id in [active, dead, elsewhere] {
                let record = try #require(records[id])
                #expect(
                    standings[id]
                        == DeviceStanding(
                            realmUUID: record.realmUUID, userID: record.userID, isActive: record.status.isActive))
            }
            let deliverable = ids.filter { standings[$0]?.isDeliverable(realm: "realm-a", userID: 3) == true }
            #expect(deliverable == [active])
        }

        @Test func concurrentRegistrationsOfOneTokenGetOneDevice() async throws {
            let devices = try await store()
            let r = try registration("tok-concurrent")
            let ids = try await withThrowingTaskGroup(of: DeviceID.self) { group in
                for _ in 0..<16 { group.addTask { try await devices.register(r).id } }
                return try await group.reduce(into: Set<DeviceID>()) { $0.insert($1) }
            }
            #expect(ids.count == 1)
            #expect(try await devices.deviceIDs(realm: "realm-a", userID: 1) == Array(ids))
        }

        @Test func invalidationIsIdempotentAndReportedOnce() async throws {
            let devices = try await store()
            let id = try await devices.register(try registration("tok-dead")).id
            // The first report changes the device; the same report again changes nothing.
            #expect(try await devices.reportDead(id, token: "tok-dead") == [true, false])
            let entries = try await devices.feedback(realm: "realm-a", after: nil, limit: 10)
            #expect(entries.map(\.deviceID) == [id])
            #expect(try await devices.device(id)?.status.isActive == false)
            // Registering the token again revives the device.
            #expect(try await devices.register(try registration("tok-dead")).id == id)
            #expect(try await devices.device(id)?.status == .active)
        }

        @Test func concurrentReportsOfOneDeadTokenWriteOneFeedbackEntry() async throws {
            let devices = try await store()
            let id = try await devices.register(try registration("tok-many")).id
            let changed = try await withThrowingTaskGroup(of: Bool.self) { group in
                for _ in 0..<16 {
                    group.addTask {
                        // As the feedback stage does: a report that finds the entry being
                        // written elsewhere is tried again.
                        while true {
                            do {
                                return try await devices.invalidate(
                                    deviceID: id, tokenFingerprint: Fingerprint.token("tok-many"),
                                    reason: .provider("UNREGISTERED"), providerTimestampMs: nil)
                            } catch let error as RedisError where error.isRetriable {
                                try await Task.sleep(for: .milliseconds(10))
                            }
                        }
                    }
                }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            #expect(changed.filter { $0 }.count == 1)
            #expect(try await devices.feedback(realm: "realm-a", after: nil, limit: 10).map(\.deviceID) == [id])
            #expect(
                try await devices.redis.command("HGET", RedisArgument(devices.keys.device(id)), "feedback_pending")
                    == .null)
        }

        @Test func aReportWhileAnotherWriterHoldsTheMarkIsTriedAgainNotDropped() async throws {
            let devices = try await store()
            let id = try await devices.register(try registration("tok-busy")).id
            try await devices.redis.command(
                "HSET", RedisArgument(devices.keys.device(id)), "status", "invalid", "reason", "UNREGISTERED",
                "invalid_ms", "1234", "feedback_pending", RedisArgument("\(Wire.nowMillis()) 7"))
            await #expect(throws: RedisError.self) {
                try await devices.reportDead(id, token: "tok-busy")
            }
            #expect(try await devices.feedback(realm: "realm-a", after: nil, limit: 10).isEmpty)
        }

        @Test func anInvalidationWhoseFeedbackWasNotWrittenIsReportedByTheNextReport() async throws {
            let devices = try await store()
            let id = try await devices.register(try registration("tok-half")).id
            // As if the relay stopped after marking the device and before the stream entry,
            // longer ago than the lease.
            try await devices.redis.command(
                "HSET", RedisArgument(devices.keys.device(id)), "status", "invalid", "reason", "UNREGISTERED",
                "invalid_ms", "1234", "feedback_pending", "1234 99")
            #expect(try await devices.feedback(realm: "realm-a", after: nil, limit: 10).isEmpty)
            // The first report changes the device; the same report again changes nothing.
            #expect(try await devices.reportDead(id, token: "tok-half") == [true, false])
            let entries = try await devices.feedback(realm: "realm-a", after: nil, limit: 10)
            #expect(entries.map(\.deviceID) == [id])
            #expect(entries.first?.atMs == 1234)
        }

        @Test func reportsAboutAnotherTokenOrAnOlderRegistrationAreIgnored() async throws {
            let devices = try await store()
            let id = try await devices.register(try registration("tok-live")).id
            #expect(
                !(try await devices.invalidate(
                    deviceID: id, tokenFingerprint: Fingerprint.token("tok-other"), reason: .provider("UNREGISTERED"),
                    providerTimestampMs: nil)))
            let registered = try #require(try await devices.device(id)).registeredAtMs
            #expect(
                !(try await devices.invalidate(
                    deviceID: id, tokenFingerprint: Fingerprint.token("tok-live"), reason: .provider("Unregistered"),
                    providerTimestampMs: registered - 1000)))
            #expect(try await devices.device(id)?.status == .active)
            #expect(
                try await devices.invalidate(
                    deviceID: id, tokenFingerprint: Fingerprint.token("tok-live"), reason: .provider("Unregistered"),
                    providerTimestampMs: registered + 1000))
        }

        @Test func aDeviceSignedInAsAnotherUserLeavesTheOldUsersFanOut() async throws {
            let devices = try await store()
            let id = try await devices.register(try registration("tok-moves", user: 1)).id
            #expect(try await devices.register(try registration("tok-moves", user: 2)).id == id)
            #expect(try await devices.deviceIDs(realm: "realm-a", userID: 1) == [])
            #expect(try await devices.deviceIDs(realm: "realm-a", userID: 2) == [id])
        }

        @Test func redisHoldsNeitherTheTokenNorThePushKey() async throws {
            let devices = try await store()
            let token = "fcm-secret:APA91bTokenThatMustNotBeStored"
            let key = try RealmClient.pushKey()
            let r = DeviceRegistration(
                realmUUID: "realm-a", userID: 1, token: try DeviceToken(provider: .fcm, value: token), appID: nil,
                pushAccountID: 7, pushKey: (3, key))
            let id = try await devices.register(r).id
            let raw = try await dump(devices)
            #expect(raw.contains("v1:s1:"), "the token and key are stored encrypted")
            for secret in [
                token, "APA91bTokenThat", key.base64, Data(key.keyBytes).base64EncodedString(),
                Fingerprint.sha256Hex(token),
            ] {
                #expect(!raw.contains(secret))
            }
            let device = try #require(try await devices.device(id))
            #expect(device.token == token)
            #expect(device.keys[3] == key && device.currentKey == key)
        }

        @Test func devicesStoredInTheClearStillWorkAndAreUpgradedOnRegistration() async throws {
            let devices = try await store()
            let token = "old-cleartext-token"
            let key = try RealmClient.pushKey()
            let id = DeviceID(4_000_000 + Int64.random(in: 0..<1_000_000))
            // A device exactly as the first version wrote it.
            _ = try await devices.redis.pipeline([
                [
                    "HSET", RedisArgument(devices.keys.device(id)), "realm", "realm-a", "provider", "fcm", "token",
                    RedisArgument(token), "status", "active", "reason", "", "invalid_ms", "", "registered_ms", "1000",
                    "user_id", "1", "push_account_id", "7", "key_id", "1", "scheme", "secretbox", "created_ms", "1000",
                ],
                ["HSET", RedisArgument(devices.keys.deviceKeys(id)), "1", RedisArgument("\(key.base64)|1000")],
                ["SADD", RedisArgument(devices.keys.userDevices(realm: "realm-a", userID: 1)), RedisArgument(id)],
                [
                    "SET",
                    RedisArgument(
                        devices.keys.legacyTokenIndex(realm: "realm-a", provider: .fcm, token: token, pushAccountID: 7)),
                    RedisArgument(id),
                ],
            ])
            let old = try #require(try await devices.device(id))
            #expect(old.token == token && old.currentKey == key)

            // Registering again finds it through the old index and rewrites it in the new form.
            let again = try await devices.register(
                DeviceRegistration(
                    realmUUID: "realm-a", userID: 1, token: try DeviceToken(provider: .fcm, value: token), appID: nil,
                    pushAccountID: 7, pushKey: (2, try RealmClient.pushKey())))
            #expect(again.id == id && !again.created)
            let raw = try await dump(devices)
            #expect(!raw.contains(token) && !raw.contains(key.base64))
            #expect(raw.contains(devices.storage.tokenDigests(token)[0]))
            #expect(!raw.contains(Fingerprint.sha256Hex(token)), "the old index is moved, not kept")
            let upgraded = try #require(try await devices.device(id))
            #expect(upgraded.token == token && upgraded.keys[1] == key && upgraded.currentKeyID == 2)

            // Invalidation compares the stored (encrypted) token and still applies once.
            #expect(
                try await devices.invalidate(
                    deviceID: id, tokenFingerprint: Fingerprint.token(token), reason: .provider("UNREGISTERED"),
                    providerTimestampMs: nil))
            #expect(try await devices.device(id)?.status.isActive == false)
        }

        @Test func anEncryptedValueMovedToAnotherDeviceDoesNotOpen() async throws {
            let devices = try await store()
            let a = try await devices.register(try registration("tok-a")).id
            let b = try await devices.register(try registration("tok-b", user: 2)).id
            let tokenA = try #require(
                try await devices.redis.command("HGET", RedisArgument(devices.keys.device(a)), "token").string)
            let keyA = try #require(
                try await devices.redis.command("HGET", RedisArgument(devices.keys.deviceKeys(a)), "1").string)
            try await devices.redis.command("HSET", RedisArgument(devices.keys.deviceKeys(b)), "1", RedisArgument(keyA))
            #expect(try await devices.device(b)?.keys[1] == nil, "a push key copied from another device is not used")
            try await devices.redis.command(
                "HSET", RedisArgument(devices.keys.device(b)), "token", RedisArgument(tokenA))
            #expect(try await devices.device(b) == nil, "a token copied from another device is not read")
            #expect(try await devices.device(a)?.token == "tok-a")
        }

        @Test func aRotatedStorageKeyringReadsAndFindsDevicesStoredUnderTheOldKey() async throws {
            let oldLine = StorageKeyring.generateLine(id: "s1")
            let prefix = "t\(UUID().uuidString.prefix(8)):"
            let before = try await store(storage: try StorageKeyring(fileContents: oldLine), prefix: prefix)
            let id = try await before.register(try registration("tok-rotate")).id
            let after = try await store(
                storage: try StorageKeyring(fileContents: "\(StorageKeyring.generateLine(id: "s2"))\n\(oldLine)"),
                prefix: prefix)
            let device = try #require(try await after.device(id))
            #expect(device.token == "tok-rotate" && device.currentKey != nil)
            #expect(try await after.register(try registration("tok-rotate")).id == id)
            let raw = try await dump(after)
            #expect(raw.contains("v1:s2:") && !raw.contains("tok-rotate"))
            #expect(raw.contains(after.storage.tokenDigests("tok-rotate")[0]))
            #expect(!raw.contains(after.storage.tokenDigests("tok-rotate")[1]), "the index moved to the current key")
            // A keyring that lacks the key a value was stored under is a configuration error, not a missing device.
            let lost = try await store(
                storage: try StorageKeyring(fileContents: StorageKeyring.generateLine(id: "s9")), prefix: prefix)
            await #expect(throws: CryptoError.self) { try await lost.device(id) }
        }

        @Test func serversWithTheOldSHA256KeyAuthenticateAndAreUpgradedToHMAC() async throws {
            let devices = try await store()
            let pepper = try APIKeyPepper(fileContents: APIKeyPepper.generateLine())
            let servers = ServerStore(redis: devices.redis, keys: devices.keys, pepper: pepper)
            let uuid = ServerID(UUID().uuidString)
            let apiKey = String(repeating: "a", count: 64)
            let server = RedisArgument(devices.keys.server(uuid))
            try await devices.redis.command(
                "HSET", server, "api_key_sha256", RedisArgument(Fingerprint.sha256Hex(apiKey)))

            #expect(!(try await servers.authenticate(uuid: uuid, apiKey: String(repeating: "b", count: 64))))
            #expect(
                try await devices.redis.command("HGET", server, "api_key_hmac") == .null, "a failure upgrades nothing")
            #expect(try await servers.authenticate(uuid: uuid, apiKey: apiKey))
            #expect(try await devices.redis.command("HGET", server, "api_key_sha256") == .null)
            #expect(try await devices.redis.command("HGET", server, "api_key_hmac").string == pepper.hmacHex(apiKey))
            #expect(try await servers.authenticate(uuid: uuid, apiKey: apiKey))

            // An old server is not "new": re-registering needs its key.
            let legacy = ServerID(UUID().uuidString)
            try await devices.redis.command(
                "HSET", RedisArgument(devices.keys.server(legacy)), "api_key_sha256",
                RedisArgument(Fingerprint.sha256Hex(apiKey)))
            await #expect(throws: ServerRegistrationError.self) {
                try await servers.register(
                    uuid: legacy, apiKey: String(repeating: "c", count: 64), hostname: "h", contactEmail: "e",
                    newAPIKey: nil)
            }
            #expect(
                !(try await servers.register(
                    uuid: legacy, apiKey: apiKey, hostname: "h", contactEmail: "e", newAPIKey: nil)))
        }

        @Test func newServersAndRotatedKeysAreStoredAsHMAC() async throws {
            let devices = try await store()
            let pepper = try APIKeyPepper(fileContents: APIKeyPepper.generateLine())
            let servers = ServerStore(redis: devices.redis, keys: devices.keys, pepper: pepper)
            let uuid = ServerID(UUID().uuidString)
            let first = String(repeating: "1", count: 64)
            let second = String(repeating: "2", count: 64)
            #expect(
                try await servers.register(uuid: uuid, apiKey: first, hostname: "h", contactEmail: "e", newAPIKey: nil))
            let server = RedisArgument(devices.keys.server(uuid))
            #expect(try await devices.redis.command("HGET", server, "api_key_hmac").string == pepper.hmacHex(first))
            #expect(try await devices.redis.command("HGET", server, "api_key_sha256") == .null)
            #expect(
                !(try await servers.register(
                    uuid: uuid, apiKey: first, hostname: "h", contactEmail: "e", newAPIKey: second)))
            #expect(try await servers.authenticate(uuid: uuid, apiKey: second))
            #expect(!(try await servers.authenticate(uuid: uuid, apiKey: first)))
            let other = ServerStore(
                redis: devices.redis, keys: devices.keys,
                pepper: try APIKeyPepper(fileContents: APIKeyPepper.generateLine()))
            #expect(
                !(try await other.authenticate(uuid: uuid, apiKey: second)),
                "the stored value is useless without the pepper")
        }

        @Test func redisErrorRepliesAreThrownNotCrashed() async throws {
            let stack = try await Stack.get()
            let redis = RedisClient(configuration: RedisConfiguration(port: stack.redisPort, connections: 1))
            let key = RedisArgument("t-\(UUID().uuidString)")
            try await redis.command("SET", key, "text")
            await #expect(throws: RedisError.self) { try await redis.command("INCR", key) }
            let replies = try await redis.pipeline([["GET", key], ["NOSUCHCOMMAND"], ["STRLEN", key]])
            #expect(replies[0].string == "text")
            if case .error = replies[1] {} else { Issue.record("expected an error reply") }
            #expect(replies[2].int == 4)
        }
    }
}
