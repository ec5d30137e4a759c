import FeedbackCore
import Foundation
import Kafka
import PushCrypto
import PushModels
import ServiceKit
import Testing

@testable import DeviceState
@testable import StageTestSupport

/// The feedback stage's logic on in-memory device state: which dead-token reports apply,
/// legacy devices deleted and uncounted, and Redis errors retried.
@Suite struct FeedbackStageTests {
    typealias F = MemoryFixtures
    let clock = MemoryClock(F.now)
    let token = "fcm-token-for-device-1"
    let legacyOwner = "\(F.server)|uuid:u1"

    func store(_ devices: [DeviceRecord], counts: [ServerID: Int64] = [:]) -> MemoryDeviceInvalidations {
        MemoryDeviceInvalidations(devices, counts: counts, clock: clock)
    }

    func stage(_ store: MemoryDeviceInvalidations) -> FeedbackStage {
        FeedbackStage(devices: store, logger: F.logger)
    }

    func report(
        device: DeviceID = 1, token: String? = nil, reason: OutcomeReason = .provider("UNREGISTERED"),
        providerTimestampMs: Int64? = nil,
        provider: Provider = .fcm
    ) -> FeedbackRecord {
        FeedbackRecord(
            deviceID: device, realmUUID: F.realm, provider: provider,
            tokenFingerprint: Fingerprint.token(token ?? self.token), reason: reason,
            providerTimestampMs: providerTimestampMs, notificationID: "n-feedback", observedAtMs: F.now - 10)
    }

    func handle(_ stage: FeedbackStage, _ report: FeedbackRecord) async throws -> RecordDisposition {
        await stage.handle(try F.consumed(report, topic: F.topics.feedback))
    }

    @Test func aDeadTokenInvalidatesTheDeviceOnceAndRepeatsAreIgnored() async throws {
        let devices = store([F.device(1, provider: .fcm, token: token), F.device(2, provider: .fcm)])
        let stage = stage(devices)

        #expect(try await handle(stage, report(reason: .provider("UNREGISTERED"))) == .done)
        let invalid = try #require(devices.stored(1))
        #expect(invalid.status == .invalid(reason: .provider("UNREGISTERED"), atMs: F.now))
        #expect(devices.invalidations == [.init(deviceID: 1, reason: .provider("UNREGISTERED"), atMs: F.now)])
        #expect(devices.stored(2)?.status == .active, "only the reported device")

        // The same report again (a replay, a redelivery), and another reason later: no change.
        #expect(try await handle(stage, report(reason: .provider("UNREGISTERED"))) == .done)
        #expect(try await stage.apply(report(reason: .provider("NOT_FOUND"))) == .none)
        #expect(devices.invalidations.count == 1, "reported to the realm once")
        #expect(devices.stored(1)?.status.invalidReason == .provider("UNREGISTERED"))
    }

    @Test func applyTellsWhetherTheReportChangedTheDevice() async throws {
        let devices = store([F.device(1, provider: .fcm, token: token)])
        #expect(try await stage(devices).apply(report()) == .invalidated)
        #expect(try await stage(devices).apply(report()) == .none)
        #expect(try await stage(devices).apply(report(device: 404)) == .none, "a device that is gone")
    }

    @Test func aReportAboutAReplacedTokenIsIgnored() async throws {
        // The device registered a new token since the provider rejected the old one.
        let devices = store([F.device(1, provider: .fcm, token: "the-new-token")])
        #expect(try await handle(stage(devices), report(token: "the-old-token")) == .done)
        #expect(devices.stored(1)?.status == .active)
        #expect(devices.invalidations.isEmpty)
    }

    @Test func aReportOlderThanTheLatestRegistrationIsIgnored() async throws {
        // APNs says the token was dead from T-1 s; the device renewed its registration at T.
        let devices = store([
            F.device(1, provider: .apns, token: token, registeredAtMs: F.now),
            F.device(2, provider: .apns, token: token, registeredAtMs: F.now - 5_000),
        ])
        let stage = stage(devices)
        #expect(try await stage.apply(report(device: 1, providerTimestampMs: F.now - 1_000, provider: .apns)) == .none)
        #expect(devices.stored(1)?.status == .active)
        // Registered before the timestamp: the report applies.
        #expect(
            try await stage.apply(report(device: 2, providerTimestampMs: F.now - 1_000, provider: .apns))
                == .invalidated)
        #expect(devices.stored(2)?.status.isActive == false)
    }

    @Test func aLegacyDeviceIsDeletedAndUncountedOnce() async throws {
        let devices = store(
            [F.device(40, provider: .apns, userID: nil, token: token, legacyOwner: legacyOwner)],
            counts: [F.server: 3, "another-server": 7])
        let stage = stage(devices)
        #expect(
            try await handle(stage, report(device: 40, reason: .provider("Unregistered"), provider: .apns)) == .done)
        #expect(devices.stored(40) == nil, "deleted, as Zulip's bouncer does")
        #expect(devices.count(server: F.server) == 2)
        #expect(devices.count(server: "another-server") == 7)
        #expect(devices.invalidations.isEmpty, "not invalidated: gone")

        // Reported again: nothing more to delete, nothing more to uncount.
        #expect(
            try await handle(stage, report(device: 40, reason: .provider("Unregistered"), provider: .apns)) == .done)
        #expect(try await stage.apply(report(device: 40, reason: .provider("Unregistered"), provider: .apns)) == .none)
        #expect(devices.count(server: F.server) == 2)
        #expect(devices.calls(.removeLegacy) == 1)
    }

    @Test func aLegacyDeviceIsKeptWhenTheReportIsStale() async throws {
        let devices = store(
            [
                F.device(41, provider: .fcm, userID: nil, token: "replaced-token", legacyOwner: legacyOwner),
                F.device(
                    42, provider: .apns, userID: nil, token: token, registeredAtMs: F.now, legacyOwner: legacyOwner),
            ], counts: [F.server: 2])
        let stage = stage(devices)
        #expect(try await stage.apply(report(device: 41)) == .none, "another token than the one rejected")
        #expect(
            try await stage.apply(report(device: 42, providerTimestampMs: F.now - 1, provider: .apns)) == .none,
            "registered again after the provider's timestamp")
        #expect(devices.stored(41) != nil && devices.stored(42) != nil)
        #expect(devices.count(server: F.server) == 2)
        #expect(devices.calls(.removeLegacy) == 0)
    }

    @Test func transientStoreErrorsAreRetriedUntilTheyPass() async throws {
        let devices = store([F.device(1, provider: .fcm, token: token)])
        devices.failNext(2, .device)
        devices.failNext(1, .invalidate)
        #expect(try await handle(stage(devices), report()) == .done)
        #expect(devices.calls(.device) == 4, "two failures, then each retry reads the device again")
        #expect(devices.calls(.invalidate) == 2)
        #expect(devices.stored(1)?.status.isActive == false)
        #expect(devices.invalidations.count == 1)
    }

    @Test func aTransientErrorDeletingALegacyDeviceIsRetried() async throws {
        let devices = store(
            [F.device(40, provider: .apns, userID: nil, token: token, legacyOwner: legacyOwner)], counts: [F.server: 3])
        devices.failNext(2, .removeLegacy)
        #expect(try await handle(stage(devices), report(device: 40, provider: .apns)) == .done)
        #expect(devices.calls(.removeLegacy) == 3)
        #expect(devices.stored(40) == nil)
        #expect(devices.count(server: F.server) == 2)
    }

    /// The device is deleted, then counting it out fails once: only the count is retried
    /// (a retry of the whole report would find the device gone and never count it out).
    @Test func aTransientErrorCountingALegacyDeviceOutStillUncountsIt() async throws {
        let devices = store(
            [F.device(40, provider: .apns, userID: nil, token: token, legacyOwner: legacyOwner)], counts: [F.server: 3])
        devices.failNext(1, .countDevice)
        #expect(try await handle(stage(devices), report(device: 40, provider: .apns)) == .done)
        #expect(devices.stored(40) == nil)
        #expect(devices.count(server: F.server) == 2, "the failed decrement was retried on its own")
        #expect(devices.calls(.removeLegacy) == 1 && devices.calls(.countDevice) == 2)
    }

    @Test func anUndecodableReportIsSkipped() async throws {
        let devices = store([F.device(1, provider: .fcm, token: token)])
        let disposition = await stage(devices).handle(F.consumedBytes(Array("{}".utf8), topic: F.topics.feedback))
        #expect(disposition == .done)
        #expect(devices.calls(.device) == 0 && devices.calls(.invalidate) == 0)
        #expect(devices.stored(1)?.status == .active)
    }
}
