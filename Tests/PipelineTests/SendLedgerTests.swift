import DevStack
import Foundation
import PushModels
import RedisClient
import Testing

@testable import DeviceState

extension StackTests {
    /// The send ledger on the stack's real Redis, under a key prefix of its own.
    @Suite struct SendLedgerTests {
        /// `legacyWrites`: as while a dispatcher of release 0.1 still runs.
        func ledger(legacyWrites: Bool = false) async throws -> (RedisDeliveryLedger, RedisClient, RedisKeys) {
            let stack = try await Stack.get()
            let redis = RedisClient(configuration: RedisConfiguration(port: stack.redisPort, connections: 2))
            let keys = RedisKeys(prefix: "t\(UUID().uuidString.prefix(8)):")
            let transition = LedgerTransition()
            transition.writesLegacyKeys = legacyWrites
            return (
                RedisDeliveryLedger(redis: redis, keys: keys, ttl: .seconds(3600), transition: transition), redis, keys
            )
        }

        func pairs(_ count: Int, overSeconds seconds: Int64, from: Int64 = 1_795_000_000_000) -> [SendPair] {
            (0..<count).map { i in
                SendPair(
                    notificationID: NotificationID(UUID().uuidString.lowercased()),
                    deviceID: DeviceID(Int64(i % 7 + 1)),
                    acceptedAtMs: from + Int64(i) * seconds * 1000 / Int64(count))
            }
        }

        /// Claim, mark and release, as the dispatcher uses them; a claim left by an
        /// interrupted send stays until a send of the pair is marked.
        @Test func claimsMarksAndReleasesEachPairOnItsOwn() async throws {
            let (ledger, redis, keys) = try await ledger()
            let pair = SendPair(notificationID: "n-1", deviceID: 4, acceptedAtMs: 1_795_000_000_123)
            let sibling = SendPair(notificationID: "n-1", deviceID: 5, acceptedAtMs: 1_795_000_000_123)
            #expect(try await ledger.claim(pair, nowMs: 10) == .unknown)
            #expect(try await ledger.claim(pair, nowMs: 20) == .claimed(atMs: 10), "the first claim stands")
            #expect(try await ledger.claim(sibling, nowMs: 20) == .unknown, "another device is another pair")
            try await ledger.release(sibling)
            #expect(try await ledger.claim(sibling, nowMs: 30) == .unknown, "released: free to send")
            try await ledger.recordSent(pair)
            #expect(try await ledger.claim(pair, nowMs: 40) == .sent)
            try await ledger.release(pair)
            #expect(try await ledger.claim(pair, nowMs: 50) == .sent, "a release never undoes a mark")
            #expect(try await ledger.sentPairs([pair, sibling]) == [pair])

            // The same pair accepted in another second is found in another bucket: every
            // copy of a push carries its notification's acceptance time, so this never
            // happens to one push; it shows the bucket is part of the identity.
            let moved = SendPair(
                notificationID: pair.notificationID, deviceID: pair.deviceID, acceptedAtMs: pair.acceptedAtMs + 1000)
            #expect(try await ledger.claim(moved, nowMs: 60) == .unknown)

            // Every key expires.
            let names = try await redis.scanKeys(matching: keys.prefix + "sl:*")
            #expect(names.count >= 2)
            for name in names {
                let ttl = try await redis.command("PTTL", RedisArgument(name)).int ?? -1
                #expect(ttl > 0 && ttl <= 3_600_000, "\(name): \(ttl)")
            }
        }

        /// 4,000 sent pairs over two seconds of acceptance (2,000 pushes a second) take
        /// well under 24 bytes each, as Redis counts its keys (`MEMORY USAGE`), and leave
        /// no claims behind.
        @Test func sentPairsTakeAboutTenBytesEach() async throws {
            let (ledger, redis, keys) = try await ledger()
            let batch = pairs(4000, overSeconds: 2)
            for chunk in stride(from: 0, to: batch.count, by: 200) {
                try await withThrowingTaskGroup(of: Void.self) { group in
                    for pair in batch[chunk..<min(chunk + 200, batch.count)] {
                        group.addTask {
                            #expect(try await ledger.claim(pair, nowMs: 1) == .unknown)
                            try await ledger.recordSent(pair)
                        }
                    }
                    try await group.waitForAll()
                }
            }
            #expect(try await ledger.sentPairs(batch).count == batch.count)
            let names = try await redis.scanKeys(matching: keys.prefix + "sl:*")
            #expect(!names.contains { $0.hasSuffix(":c") }, "claims go once marked")
            #expect(names.count == 2 * Int(RedisDeliveryLedger.shards))
            var bytes: Int64 = 0
            for name in names {
                #expect(try await redis.command("OBJECT", "ENCODING", RedisArgument(name)).string == "intset")
                bytes += try await redis.command("MEMORY", "USAGE", RedisArgument(name)).int ?? 0
            }
            let perPush = Double(bytes) / Double(batch.count)
            #expect(perPush < 14, "\(perPush) bytes a push")
        }

        /// A rolling upgrade from release 0.1: pairs its dispatchers claimed or sent (a key
        /// per pair) answer as they left them, and while one of them still runs, this
        /// ledger's claims and marks are written where it looks too.
        @Test func pairsOfTheFirstLayoutAreReadAndWrittenWhileAnOlderDispatcherRuns() async throws {
            let (ledger, redis, keys) = try await ledger(legacyWrites: true)
            func legacy(_ pair: SendPair) -> RedisArgument {
                RedisArgument(keys.legacySent(notificationID: pair.notificationID, deviceID: pair.deviceID))
            }
            let sentBefore = SendPair(notificationID: "n-old", deviceID: 1, acceptedAtMs: 1_795_000_000_000)
            let claimedBefore = SendPair(notificationID: "n-old", deviceID: 2, acceptedAtMs: 1_795_000_000_000)
            try await redis.command("SET", legacy(sentBefore), "sent 1795000000050 apns-id-1", "PX", "60000")
            try await redis.command("SET", legacy(claimedBefore), "claimed 1795000000040", "PX", "60000")
            #expect(try await ledger.sentPairs([sentBefore, claimedBefore]) == [sentBefore])
            #expect(try await ledger.claim(sentBefore, nowMs: 1) == .sent)
            #expect(try await ledger.claim(claimedBefore, nowMs: 1) == .claimed(atMs: 1_795_000_000_040))
            // Once its keys expire, the bucket still knows the pair it found sent there.
            try await redis.command("DEL", legacy(sentBefore))
            #expect(try await ledger.claim(sentBefore, nowMs: 2) == .sent)

            // This ledger's claim, mark and release, as an older dispatcher reads them.
            let fresh = SendPair(notificationID: "n-new", deviceID: 3, acceptedAtMs: 1_795_000_000_000)
            let refused = SendPair(notificationID: "n-new", deviceID: 4, acceptedAtMs: 1_795_000_000_000)
            #expect(try await ledger.claim(fresh, nowMs: 77) == .unknown)
            #expect(try await redis.command("GET", legacy(fresh)).string == "claimed 77")
            try await ledger.recordSent(fresh)
            #expect(try await redis.command("GET", legacy(fresh)).string?.hasPrefix("sent ") == true)
            #expect(try await ledger.claim(refused, nowMs: 78) == .unknown)
            try await ledger.release(refused)
            #expect(try await redis.command("EXISTS", legacy(refused)).int == 0)

            // Once every dispatcher keeps buckets, nothing more is written per pair.
            let (quiet, quietRedis, quietKeys) = try await self.ledger(legacyWrites: false)
            #expect(try await quiet.claim(fresh, nowMs: 79) == .unknown)
            try await quiet.recordSent(fresh)
            #expect(try await quietRedis.scanKeys(matching: quietKeys.prefix + "sent:*").isEmpty)
        }
    }
}
