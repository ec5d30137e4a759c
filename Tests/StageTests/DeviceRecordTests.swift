@testable import DeviceState
import PushModels
import Testing
@testable import StageTestSupport

/// The closed sets of a device record as they are read from the device hash.
@Suite struct DeviceRecordTests {
    @Test func aLegacyOwnerReadsAsServerAndUser() throws {
        let owner = try #require(ZulipLegacyOwner(stored: "5f0c-server|uuid:1b2c"))
        #expect(owner.server == "5f0c-server" && owner.user == "uuid:1b2c" && owner.isComplete)
        #expect(owner.stored == "5f0c-server|uuid:1b2c")
        #expect(owner.belongs(to: "5f0c-server") && !owner.belongs(to: "other"))
        #expect(ZulipLegacyOwner(stored: "s|id:5|x")?.user == "id:5|x", "split at the first bar only")
        #expect(ZulipLegacyOwner(stored: "") == nil, "an empty field: not a legacy device")
        // A value without a bar still marks a legacy device, but matches no server.
        let partial = try #require(ZulipLegacyOwner(stored: "no-bar"))
        #expect(!partial.isComplete && !partial.belongs(to: "no-bar"))
    }

    @Test func theOwnerFollowsTheStoredFields() {
        var device = DeviceRecord(
            id: 1, realmUUID: "r", userID: nil, provider: .apns, token: "t", appID: nil, pushAccountID: nil,
            currentKeyID: nil, keys: [:], status: .active, registeredAtMs: 0, createdAtMs: 0)
        #expect(device.owner == .unrecorded)
        for (api, owner) in [(DeviceAPI.zulipE2EE, DeviceOwner.zulipE2EE), (.gorush, .gorush), (.status, .status)] {
            device.api = api
            #expect(device.owner == owner)
        }
        device.api = .native
        #expect(device.owner == .unrecorded, "native with no user: not a native device")
        device.userID = 7
        #expect(device.owner == .native(userID: 7))
        device.api = nil
        #expect(device.owner == .native(userID: 7), "devices from before the API was recorded: a user is native")
        let legacy = ZulipLegacyOwner(server: "s", user: "id:7")
        device.zulipLegacyOwner = legacy
        #expect(device.owner == .zulipLegacy(legacy))
        #expect(DeviceAPI.allCases.map(\.rawValue) == ["native", "zulip_e2ee", "gorush", "status"])
    }

    @Test func aStatusIsActiveOrInvalidWithItsReason() {
        #expect(DeviceStatus.active.isActive && DeviceStatus.active.name == "active")
        let invalid = DeviceStatus.invalid(reason: .provider("Unregistered"), atMs: 5)
        #expect(!invalid.isActive && invalid.name == "invalid" && invalid.invalidReason == .provider("Unregistered"))
        #expect(DeviceStatus.invalid(reason: nil, atMs: 5).invalidReason == nil)
    }
}
