import DevStack
import Foundation
import Testing

/// The rolling-upgrade drill (`RollingUpgrade`), in both orders. `make drill-upgrade`
/// runs it from the previous release's binaries (`PUSHRELAY_UPGRADE_FROM_BIN`, built by
/// scripts/drill-upgrade.sh) to HEAD's, two instances a stage at 200 notifications/s.
/// `make test` runs a short form, HEAD to HEAD, one instance a stage at 100/s: the roll
/// itself (graceful stops, consumer groups rebalancing, ingest's rotation) held to the
/// same figures.
extension StackTests {
    @Suite struct UpgradeDrillTests {
        static let environment = ProcessInfo.processInfo.environment
        static let from = environment["PUSHRELAY_UPGRADE_FROM_BIN"].flatMap { $0.isEmpty ? nil : $0 }

        @Test(arguments: RollingUpgrade.Order.allCases)
        func aRollingUpgradeLosesNothing(order: RollingUpgrade.Order) async throws {
            let head = try Stack.binDirectory()
            var settings = RollingUpgrade.Settings(from: Self.from ?? head, to: head, order: order)
            // The builds' git names (scripts/drill-upgrade.sh), shown beside their versions.
            settings.fromName = Self.environment["PUSHRELAY_UPGRADE_FROM_NAME"]
            settings.toName = Self.environment["PUSHRELAY_UPGRADE_TO_NAME"]
            if Self.from == nil {
                settings.instances = 1
                settings.rate = 100
                settings.lead = .seconds(3)
                settings.tail = .seconds(3)
                settings.preStop = .milliseconds(500)
            }
            let report = try await RollingUpgrade(
                settings: settings,
                log: { line in
                    if Self.from != nil { print(line) }
                }
            ).run()
            print(report.load.table)
            print(report)
            #expect(report.load.faults.count == 1, "the roll ran")
            #expect(report.load.notificationsAccepted > 0 && report.load.gorush.accepted > 0)
            #expect(report.lost == 0, "lost: \(report.load.lostSamples)")
            #expect(report.failed == 0, "pairs failed, expired or with an unknown device: \(report)")
            #expect(report.unmarkedDuplicates == 0, "duplicates: \(report.load.duplicateSamples)")
            #expect(report.recordsRefused == 0, "\(report)")
            #expect(report.serverErrors == 0 && report.unanswered == 0, "ingest's answers: \(report.load.answers)")
            #expect(report.uncleanExits.isEmpty, "\(report.uncleanExits)")
            #expect(report.load.delivered + report.load.failed == report.load.pairsExpected, "\(report)")
        }
    }
}
