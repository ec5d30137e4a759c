import DevStack
import FakeProviders
import Foundation
import PushCrypto
import PushModels
import Synchronization
import Testing

@testable import DeviceState
@testable import RedisClient

/// One local Redis Cluster (three masters from Debian's redis-server) per test process.
enum SharedCluster {
    private static let shared = Mutex<Task<LocalRedisCluster, any Error>?>(nil)

    static func get() async throws -> LocalRedisCluster {
        let task = shared.withLock { task in
            if let task { return task }
            let directory = FileManager.default.temporaryDirectory
                .appendingPathComponent("pushrelay-cluster-\(getpid())").path
            try? FileManager.default.removeItem(atPath: directory)
            let new = Task { try await LocalRedisCluster.start(masters: 3, directory: directory) }
            task = new
            return new
        }
        return try await task.value
    }

    /// A cluster client seeded with the first node only: it learns the rest.
    static func client(connections: Int = 2) async throws -> RedisClient {
        let cluster = try await get()
        return RedisClient(
            configuration: RedisConfiguration(port: cluster.ports[0], connections: connections, cluster: true))
    }

    /// A plain client of one node, to see what that node itself holds.
    static func node(_ port: Int) -> RedisClient {
        RedisClient(configuration: RedisConfiguration(port: port, connections: 1))
    }

    static func nodeID(_ port: Int) async throws -> String {
        try #require(try await node(port).command("CLUSTER", "MYID").string)
    }

    /// The node that serves `slot`, asked of the cluster itself.
    static func owner(of slot: Int) async throws -> Int {
        let cluster = try await get()
        for port in cluster.ports {
            let reply = try await node(port).pipeline([["GET", RedisArgument(keyInSlot(slot))]])[0]
            if case .error(let message) = reply, message.hasPrefix("MOVED") || message.hasPrefix("ASK") { continue }
            return port
        }
        throw StackError("no node serves slot \(slot)")
    }

    /// Some key of `slot` (found by trying hash tags).
    static func keyInSlot(_ slot: Int) -> String {
        var n = 0
        while RedisSlot.of("{s\(n)}") != slot { n += 1 }
        return "{s\(n)}"
    }

    /// Moves `keys` of `slot` from `source` to `target` with MIGRATE; `finish` hands
    /// the slot over (SETSLOT NODE on every master), otherwise it stays migrating.
    static func migrate(slot: Int, keys: [String], from source: Int, to target: Int, finish: Bool) async throws {
        let cluster = try await get()
        let sourceID = try await nodeID(source)
        let targetID = try await nodeID(target)
        try await node(target).command("CLUSTER", "SETSLOT", RedisArgument(slot), "IMPORTING", RedisArgument(sourceID))
        try await node(source).command("CLUSTER", "SETSLOT", RedisArgument(slot), "MIGRATING", RedisArgument(targetID))
        if !keys.isEmpty {
            try await node(source).command(
                ["MIGRATE", "127.0.0.1", RedisArgument(target), "", "0", "5000", "KEYS"]
                    + keys.map { RedisArgument($0) })
        }
        guard finish else { return }
        for port in [target, source] + cluster.ports.filter({ $0 != source && $0 != target }) {
            try await node(port).command("CLUSTER", "SETSLOT", RedisArgument(slot), "NODE", RedisArgument(targetID))
        }
    }
}

@Suite struct RedisSlotTests {
    @Test func theSlotFunctionIsTheSpecificationsCRC16() {
        // The Redis Cluster specification's check value, and slots redis-cli shows.
        #expect(RedisSlot.crc16(Array("123456789".utf8)[...]) == 0x31C3)
        #expect(RedisSlot.of("foo") == 12182)
        #expect(RedisSlot.of("bar") == 5061)
        // Hash tags: the first {…} that is not empty.
        #expect(RedisSlot.of("{user1000}.following") == RedisSlot.of("{user1000}.followers"))
        #expect(RedisSlot.of("foo{}{bar}") == RedisSlot.of("foo{}{bar}"))
        #expect(RedisSlot.hashTag(Array("foo{}{bar}".utf8)) == Array("foo{}{bar}".utf8)[...])
        #expect(RedisSlot.hashTag(Array("foo{{bar}}zap".utf8)) == Array("{bar".utf8)[...])
        #expect(RedisSlot.hashTag(Array("foo{bar}{zap}".utf8)) == Array("bar".utf8)[...])
        #expect(RedisSlot.of("pr:dev:{42}") == RedisSlot.of("pr:dev:{42}:keys"))
    }

    @Test func redirectionsAreRead() {
        let node = RedisNodeAddress(host: "10.0.0.7", port: 7000)
        #expect(
            Redirection("MOVED 3999 127.0.0.1:6381", from: node)
                == .moved(slot: 3999, RedisNodeAddress(host: "127.0.0.1", port: 6381)))
        #expect(Redirection("ASK 12 ::1:7001", from: node) == .ask(slot: 12, RedisNodeAddress(host: "::1", port: 7001)))
        // No host: the node that answered.
        #expect(
            Redirection("MOVED 5 :7002", from: node) == .moved(slot: 5, RedisNodeAddress(host: "10.0.0.7", port: 7002)))
        #expect(Redirection("TRYAGAIN Multiple keys request during rehashing of slot", from: node) == .tryAgain)
        #expect(Redirection("CLUSTERDOWN The cluster is down", from: node) == .tryAgain)
        #expect(Redirection("MOVED 99999 127.0.0.1:6381", from: node) == nil)
        #expect(Redirection("MOVED 1 127.0.0.1:0", from: node) == nil)
        #expect(Redirection("ERR unknown command", from: node) == nil)
    }

    @Test func commandKeysAreFoundWhereEachCommandHasThem() {
        func keys(_ words: String...) -> [Int] {
            let command = words.map { Array($0.utf8) }
            return CommandKeys.positions(command, name: CommandKeys.name(command))
        }
        #expect(keys("GET", "a") == [1])
        #expect(keys("eval", "return 1", "2", "a", "b", "x") == [3, 4])
        #expect(keys("EVAL", "return 1", "0") == [])
        #expect(keys("EVAL", "return 1", "9", "a") == [3])
        #expect(keys("EVAL", "return 1", "-3", "a") == [])
        #expect(keys("MGET", "a", "b", "c") == [1, 2, 3])
        #expect(keys("XREAD", "COUNT", "2", "STREAMS", "s1", "s2", "0", "0") == [4, 5])
        #expect(keys("PING") == [])
        #expect(keys("CLUSTER", "SLOTS") == [])
    }
}

extension StackTests {
    /// Against a real Redis Cluster of three masters on loopback.
    @Suite struct RedisClusterTests {
        @Test func theServersSlotFunctionAgrees() async throws {
            let cluster = try await SharedCluster.get()
            let node = SharedCluster.node(cluster.ports[0])
            for n in 0..<200 {
                let key = "k\(n)-\(UUID().uuidString.prefix(n % 9))" + (n % 3 == 0 ? "{t\(n % 7)}x" : "")
                #expect(
                    try await node.command("CLUSTER", "KEYSLOT", RedisArgument(key)).int == Int64(RedisSlot.of(key)))
            }
        }

        @Test func commandsGoToTheMasterOfTheirSlotAndMultiKeyCommandsAreSplit() async throws {
            let cluster = try await SharedCluster.get()
            let redis = try await SharedCluster.client()
            #expect(try await Set(redis.masters().map(\.port)) == Set(cluster.ports))
            let prefix = "route-\(UUID().uuidString.prefix(8))-"
            let keys = (0..<300).map { "\(prefix)\($0)" }
            let sets = try await redis.pipeline(
                keys.enumerated().map { ["SET", RedisArgument($1), RedisArgument($0)] })
            #expect(sets.allSatisfy { $0.string == "OK" })
            // Each key is on exactly one master, and every master has some.
            var perNode: [Int: Int] = [:]
            for port in cluster.ports {
                let replies = try await SharedCluster.node(port).pipeline(keys.map { ["EXISTS", RedisArgument($0)] })
                perNode[port] = replies.filter { $0.int == 1 }.count
            }
            #expect(perNode.values.reduce(0, +) == keys.count)
            #expect(perNode.values.allSatisfy { $0 > 0 })
            // MGET and DEL over keys of many slots: split per slot, put back in order.
            let values = try await redis.command(["MGET"] + keys.map { RedisArgument($0) } + ["\(prefix)missing"])
            #expect(values.array.map(\.int) == (0..<300).map { Int64($0) } + [nil])
            #expect(try await redis.command(["EXISTS"] + keys.prefix(10).map { RedisArgument($0) }).int == 10)
            #expect(try await redis.command(["DEL"] + keys.map { RedisArgument($0) }).int == 300)
            #expect(
                try await redis.command(["MGET"] + keys.prefix(3).map { RedisArgument($0) }).array == [
                    .null, .null, .null,
                ])
        }

        @Test func concurrentCallersShareRoundTrips() async throws {
            let cluster = try await SharedCluster.get()
            let redis = RedisClient(configuration: RedisConfiguration(port: cluster.ports[0], connections: 1))
            let key = SharedCluster.keyInSlot(try await slotServed(by: cluster.ports[0]))
            try await redis.command("SET", RedisArgument(key), "v")
            let before = redis.roundTrips
            let answers = try await withThrowingTaskGroup(of: String?.self) { group in
                for _ in 0..<500 { group.addTask { try await redis.command("GET", RedisArgument(key)).string } }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            #expect(answers.count == 500 && answers.allSatisfy { $0 == "v" })
            let trips = redis.roundTrips - before
            #expect(trips < 500, "500 concurrent GETs took \(trips) round trips")
        }

        @Test func movedIsFollowedAndTheSlotMapRelearned() async throws {
            let cluster = try await SharedCluster.get()
            let redis = try await SharedCluster.client()
            let key = "moved-\(UUID().uuidString)"
            let slot = RedisSlot.of(key)
            try await redis.command("SET", RedisArgument(key), "before")
            let source = try await SharedCluster.owner(of: slot)
            let target = try #require(cluster.ports.first { $0 != source })
            try await SharedCluster.migrate(slot: slot, keys: [key], from: source, to: target, finish: true)
            // The client still thinks the old node has the slot: it answers MOVED.
            #expect(try await redis.command("GET", RedisArgument(key)).string == "before")
            try await redis.command("SET", RedisArgument(key), "after")
            #expect(try await SharedCluster.node(target).command("GET", RedisArgument(key)).string == "after")
            // Relearned: the next command goes straight to the new owner.
            let before = redis.roundTrips
            #expect(try await redis.command("GET", RedisArgument(key)).string == "after")
            #expect(redis.roundTrips - before == 1)
        }

        @Test func askIsFollowedWhileASlotMigrates() async throws {
            let cluster = try await SharedCluster.get()
            let redis = try await SharedCluster.client()
            let tag = "{ask-\(UUID().uuidString.prefix(8))}"
            let (moved, stays, fresh) = ("\(tag)moved", "\(tag)stays", "\(tag)fresh")
            let slot = RedisSlot.of(tag)
            _ = try await redis.pipeline([["SET", RedisArgument(moved), "1"], ["SET", RedisArgument(stays), "2"]])
            let source = try await SharedCluster.owner(of: slot)
            let target = try #require(cluster.ports.first { $0 != source })
            try await SharedCluster.migrate(slot: slot, keys: [moved], from: source, to: target, finish: false)
            // Mid-migration: the moved key answers ASK from the source; the other is still there.
            #expect(try await redis.command("GET", RedisArgument(moved)).string == "1")
            #expect(try await redis.command("GET", RedisArgument(stays)).string == "2")
            // A new key of a migrating slot is created on the importing node (ASK too).
            try await redis.command("SET", RedisArgument(fresh), "3")
            #expect(
                try await SharedCluster.node(target).pipeline([["ASKING"], ["GET", RedisArgument(fresh)]])[1].string
                    == "3")
            // ASK does not move the slot: the source still serves what it holds.
            #expect(try await redis.command("INCR", RedisArgument(stays)).int == 3)
            try await SharedCluster.migrate(slot: slot, keys: [stays], from: source, to: target, finish: true)
            let values = try await redis.command(
                "MGET", RedisArgument(moved), RedisArgument(stays), RedisArgument(fresh))
            #expect(values.array.map(\.string) == ["1", "3", "3"])
        }

        @Test func deviceStateWorksOnTheCluster() async throws {
            let redis = try await SharedCluster.client()
            let keys = RedisKeys(prefix: "c\(UUID().uuidString.prefix(6)):", hashTags: true)
            let storage = try StorageKeyring(fileContents: StorageKeyring.generateLine(id: "s1"))
            let devices = DeviceStore(redis: redis, keys: keys, storage: storage)
            // A device: registered, found again, fanned out to its user, invalidated once.
            let registration = DeviceRegistration(
                realmUUID: "realm-c", userID: 7, token: try DeviceToken(provider: .fcm, value: "fcm-cluster-token"),
                appID: nil, pushAccountID: nil, pushKey: nil)
            let (id, created) = try await devices.register(registration)
            #expect(created)
            #expect(try await devices.register(registration).id == id)
            #expect(try await devices.deviceIDs(realm: "realm-c", userID: 7) == [id])
            // The first report changes the device; the same report again changes nothing.
            #expect(try await devices.reportDead(id, token: "fcm-cluster-token") == [true, false])
            #expect(try await devices.feedback(realm: "realm-c", after: nil, limit: 10).map(\.deviceID) == [id])
            #expect(try await devices.delete(try #require(try await devices.device(id))))
            #expect(try await devices.device(id) == nil)

            // Realms: the realm hash and the server's realm set are in different slots.
            let realms = RealmDirectory(redis: redis, keys: keys)
            #expect(RedisSlot.of(keys.realm("r1")) != RedisSlot.of(keys.serverRealms("s1")))
            #expect(try await realms.register(["r1", "r2"], to: "s1", maxRealms: 2) == [.registered, .registered])
            #expect(
                try await realms.register(["r1", "r3"], to: "s1", maxRealms: 2) == [.alreadyYours, .quotaExceeded])
            #expect(try await realms.register(["r1", "r4"], to: "s2", maxRealms: 2) == [.taken, .registered])
            #expect(try await redis.command("SCARD", RedisArgument(keys.serverRealms("s2"))).int == 1)
            // One place left: a realm another server has gives its place back to the next one.
            #expect(try await realms.register(["r2", "r9"], to: "s3", maxRealms: 1) == [.taken, .registered])

            // Zulip's legacy API: one device per token and user, ids from the shared sequence.
            let legacy = ZulipLegacyDevices(devices: devices)
            let user = ZulipLegacyUser(userID: 5, userUUID: nil)
            let token = try DeviceToken(provider: .fcm, value: "legacy-cluster-token", rules: .zulip)
            let first = try await legacy.register(server: "s1", user: user, token: token, appID: nil, realm: nil)
            let again = try await legacy.register(server: "s1", user: user, token: token, appID: nil, realm: nil)
            #expect(first.countDelta == 1 && again.countDelta == 0 && again.id == first.id)

            // The send ledger: a bucket's set and claims share a slot; claim, mark, release.
            let ledger = RedisDeliveryLedger(redis: redis, keys: keys, ttl: .seconds(60))
            #expect(
                RedisSlot.of(keys.sendLedger(second: 1_795_000_000, shard: 3))
                    == RedisSlot.of(keys.sendLedger(second: 1_795_000_000, shard: 3) + ":c"))
            let pairs = (1...40).map {
                SendPair(notificationID: "n-cluster", deviceID: DeviceID($0), acceptedAtMs: 1_795_000_000_000 + $0 * 97)
            }
            for pair in pairs {
                #expect(try await ledger.claim(pair, nowMs: 1) == .unknown)
                #expect(try await ledger.claim(pair, nowMs: 2) == .claimed(atMs: 1))
            }
            for pair in pairs.prefix(20) { try await ledger.recordSent(pair) }
            for pair in pairs.suffix(20) { try await ledger.release(pair) }
            #expect(try await ledger.sentPairs(pairs) == Set(pairs.prefix(20)))
            #expect(try await ledger.claim(pairs[0], nowMs: 3) == .sent)
            #expect(try await ledger.claim(pairs[39], nowMs: 3) == .unknown)

            // gorush's outcome counters: each record once, a partition's marks and counters in one slot.
            let gorush = RedisGorushStore(redis: redis, keys: keys)
            #expect(
                RedisSlot.of(keys.countedMarks(shard: "push.deliveries:3", chunk: 0))
                    == RedisSlot.of(keys.realmStats("realm-c", shard: "push.deliveries:3")))
            let batch = (0..<6).map { offset in
                CountedOutcome(
                    realm: offset < 4 ? "realm-c" : "realm-d", field: "fcm:sent", topic: "push.deliveries",
                    partition: Int32(offset % 3), offset: Int64(offset) * 40_000)
            }
            try await gorush.countOutcomes(batch)
            try await gorush.countOutcomes(Array(batch.prefix(5)))
            #expect(try await gorush.counters(server: "s1", realm: "realm-c").outcomes == ["fcm:sent": 4])
            #expect(try await gorush.counters(server: "s1", realm: "realm-d").outcomes == ["fcm:sent": 2])
        }

        @Test func theWholePipelineRunsOnTheCluster() async throws {
            var options = Stack.Options.tests
            options.redisClusterMasters = 3
            options.name = "cluster"
            let stack = try await Stack.start(options: options)
            #expect(stack.redisCluster?.ports.count == 3)
            let realm = try await RealmClient.registered(stack)
            let token = RealmClient.fcmToken()
            let key = try RealmClient.pushKey()
            let device = try await realm.device(userID: 3, kind: "fcm", token: token, key: key, keyID: 4)
            let payload = realm.messagePayload(userID: 3, messageID: 77, content: "on the cluster")
            #expect(try await realm.notify(userID: 3, payload: payload).status == 202)
            let push = try #require(
                try await stack.waitForPushes("fcm") { $0.contains { $0.token == token } }.first { $0.token == token })
            #expect(try push.decrypt(with: key) == Wire.canonical(payload))

            // A dead token: invalidated by feedback, reported to the realm.
            try await stack.unregister("fcm", token: token)
            #expect(try await realm.notify(userID: 3, payload: payload).status == 202)
            try await Stack.waitFor("the invalidation in /v1/feedback") {
                let reported = (try? await realm.feedback())?.json["invalidated"]?.arrayValue ?? []
                return reported.contains { $0["device_id"]?.intValue == device }
            }
            // The keys are spread over the masters. (Which masters depends on the random
            // ids' hash tags: a handful of tags may all miss one of three masters.)
            var sizes: [Int64] = []
            for port in try #require(stack.redisCluster).ports {
                sizes.append(try await SharedCluster.node(port).command("DBSIZE").int ?? 0)
            }
            #expect(sizes.filter { $0 > 0 }.count >= 2, "keys per master: \(sizes)")
        }

        /// A slot the node serves.
        private func slotServed(by port: Int) async throws -> Int {
            for slot in stride(from: 0, to: RedisSlot.count, by: 97)
            where try await SharedCluster.owner(of: slot) == port {
                return slot
            }
            throw StackError("node \(port) serves no slot")
        }
    }
}
