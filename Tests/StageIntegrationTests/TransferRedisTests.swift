import Testing

@testable import StageTestSupport

/// Zulip's registration transfer on the test stack's Redis: the same scenarios `StageTests`
/// runs in memory (`TransferScenarios`), through the Redis stores and their scripts.
@Suite struct TransferRedisTests {
    let scenarios = TransferScenarios()

    @Test func aServerThatProvesItsHostnameGetsANewKey() async throws {
        try await scenarios.aServerThatProvesItsHostnameGetsANewKey(on: .redis)
    }

    @Test func aTransferMovesTheRegistrationThatClaimedTheHostnameFirst() async throws {
        try await scenarios.aTransferMovesTheRegistrationThatClaimedTheHostnameFirst(on: .redis)
    }
}
