import DevStack
import Foundation
import PushCrypto
import PushModels
import RedisClient
import Testing

@testable import DeviceState

extension StackTests {
    /// Device state against the stack's real Redis, under a key prefix of its own.
    @Suite struct DeviceStoreTests {
        func store() async throws -> DeviceStore {
            let stack = try await Stack.get()
            let redis = RedisClient(configuration: RedisConfiguration(port: stack.redisPort, connections: 4))
            return DeviceStore(redis: redis, keys: RedisKeys(prefix: "t\(UUID().uuidString.prefix(8)):"))
        }

        func registration(_ token: String, user: Int64 = 1, realm: String = "realm-a") throws -> DeviceRegistration {
            DeviceRegistration(
                realmUUID: realm, userID: user, token: try DeviceToken(provider: .fcm, value: token), appID: nil,
                pushAccountID: 7, pushKey: (1, try RealmClient.pushKey()))
        }

        @Test func concurrentRegistrationsOfOneTokenGetOneDevice() async throws {
            let devices = try await store()
            let r = try registration("tok-concurrent")
            let ids = try await withThrowingTaskGroup(of: Int64.self) { group in
                for _ in 0..<16 { group.addTask { try await devices.register(r).id } }
                return try await group.reduce(into: Set<Int64>()) { $0.insert($1) }
            }
            #expect(ids.count == 1)
            #expect(try await devices.deviceIDs(realm: "realm-a", userID: 1) == Array(ids))
        }

        @Test func invalidationIsIdempotentAndReportedOnce() async throws {
            let devices = try await store()
            let id = try await devices.register(try registration("tok-dead")).id
            let fingerprint = Fingerprint.token("tok-dead")
            #expect(try await devices.invalidate(deviceID: id, tokenFingerprint: fingerprint, reason: "UNREGISTERED", providerTimestampMs: nil))
            #expect(!(try await devices.invalidate(deviceID: id, tokenFingerprint: fingerprint, reason: "UNREGISTERED", providerTimestampMs: nil)))
            let entries = try await devices.feedback(realm: "realm-a", after: nil, limit: 10)
            #expect(entries.map(\.deviceID) == [id])
            #expect(try await devices.device(id)?.status == .invalid)
            // Registering the token again revives the device.
            #expect(try await devices.register(try registration("tok-dead")).id == id)
            #expect(try await devices.device(id)?.status == .active)
        }

        @Test func reportsAboutAnotherTokenOrAnOlderRegistrationAreIgnored() async throws {
            let devices = try await store()
            let id = try await devices.register(try registration("tok-live")).id
            #expect(!(try await devices.invalidate(deviceID: id, tokenFingerprint: Fingerprint.token("tok-other"), reason: "UNREGISTERED", providerTimestampMs: nil)))
            let registered = try #require(try await devices.device(id)).registeredAtMs
            #expect(!(try await devices.invalidate(deviceID: id, tokenFingerprint: Fingerprint.token("tok-live"), reason: "Unregistered", providerTimestampMs: registered - 1000)))
            #expect(try await devices.device(id)?.status == .active)
            #expect(try await devices.invalidate(deviceID: id, tokenFingerprint: Fingerprint.token("tok-live"), reason: "Unregistered", providerTimestampMs: registered + 1000))
        }

        @Test func aDeviceSignedInAsAnotherUserLeavesTheOldUsersFanOut() async throws {
            let devices = try await store()
            let id = try await devices.register(try registration("tok-moves", user: 1)).id
            #expect(try await devices.register(try registration("tok-moves", user: 2)).id == id)
            #expect(try await devices.deviceIDs(realm: "realm-a", userID: 1) == [])
            #expect(try await devices.deviceIDs(realm: "realm-a", userID: 2) == [id])
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
