import DeviceState
import Foundation
import LogKeys
import Logging
import PushModels
import ServiceKit
import ServiceLifecycle

/// Tells ingest which providers this dispatcher can send to (`ProviderAnnouncements`):
/// every `interval`, a word good for three intervals, so ingest answers a push for a
/// provider no dispatcher has credentials for at once, not with a failure later. Then it
/// reads whether every dispatcher keeps the bucketed send ledger (`ledger`).
struct ProviderAnnouncer: Service {
    let announcements: ProviderAnnouncements
    let providers: Set<Provider>
    let ledger: LedgerTransition
    let process = UUID.random().uuidString.lowercased()
    var interval: Duration = .seconds(10)
    let logger: Logger

    func run() async throws {
        let intervalMs = RetrySchedule.milliseconds(interval)
        while !Task.isCancelled && !Task.isShuttingDownGracefully {
            let now = Wire.nowMillis()
            do {
                try await announcements.announce(
                    process: process, providers: providers, capabilities: [.validateOnly, .bucketedLedger],
                    untilMs: now.saturatingAdd(intervalMs.saturatingMultiply(3)),
                    nowMs: now)
                ledger.writesLegacyKeys = !(try await announcements.everyDispatcherCan(.bucketedLedger, nowMs: now))
            } catch {
                logger.warning("cannot announce the configured providers", metadata: [LogKey.error: "\(error)"])
            }
            try? await cancelWhenGracefulShutdown { try await Task.sleep(for: interval) }
        }
    }
}
