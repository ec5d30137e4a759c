import DeviceState
import Foundation
import LogKeys
import Metrics
import Logging
import PushModels
import ServiceKit
import ServiceLifecycle

extension DispatchStage {
    /// The longest a send that holds a claim can take past its rate wait: the providers'
    /// 15 s answer timeout and a margin for the concurrency limit and Redis.
    ///
    /// A claim already there is a send that began. On a push never tried before, a claim
    /// younger than this (and the rate wait) is a send still under way: another
    /// dispatcher's, whose partition moved to this one in a rebalance (a rolling
    /// upgrade's), or this one's, on the record delivered again meanwhile. Its end is
    /// awaited (`DispatchMachine`): sent, the pair is not sent again; released (refused),
    /// the claim is taken; still there once it is older than a live send can be, the
    /// send was interrupted. A push being retried carries its own earlier attempt's
    /// claim, so it is not held up by it.
    static let liveSendLimit: Duration = .seconds(20)

    /// A re-send of a pair whose earlier send was interrupted (claimed at `claimedAtMs`
    /// and never finished): counted and logged; its outcome is marked.
    func noteInterruptedSend(_ record: OutboundRecord, claimedAtMs: Int64) {
        RelayMetrics.ambiguousResends(provider: record.provider.rawValue).increment()
        logger.warning(
            "an earlier send was interrupted before the provider answered; sending again",
            metadata: [
                LogKey.notificationID: "\(record.notificationID)", LogKey.deviceID: "\(record.deviceID)",
                LogKey.claimedMsAgo: "\(clock.nowMillis().saturatingSubtract(claimedAtMs))",
            ])
    }

    /// Notes in the ledger that the provider accepted the pair, before its outcome is
    /// published: a crash from here on never re-sends. False when shutdown interrupted it.
    func recordSent(_ pair: SendPair) async -> Bool {
        let noted: Bool? = await untilSuccess("record the send in the delivery ledger", logger: logger) {
            try await ledger.recordSent(pair)
            return true
        }
        return noted != nil
    }

    /// Lets the pair's claim go: refused, parked or dead, nothing reached the phone, so a
    /// later send is not a duplicate. (After an interrupted send the claim stays, so every
    /// later send of the pair is marked.) False when shutdown interrupted it.
    func releaseClaim(_ pair: SendPair) async -> Bool {
        let released: Bool? = await untilSuccess("release the ledger claim", logger: logger) {
            try await ledger.release(pair)
            return true
        }
        return released != nil
    }

    /// One claim attempt: what was there before; `.unknown` means it is ours now.
    func claimOnce(_ pair: SendPair) async -> LedgerState? {
        await untilSuccess("claim the pair in the delivery ledger", logger: logger) {
            try await ledger.claim(pair, nowMs: clock.nowMillis())
        }
    }

    /// Polls a claim made at `claimedAtMs` until it is no longer a claim (sent, or released
    /// and now ours), or until it is older than `window` (then still `.claimed`). Nil on shutdown.
    func awaitLiveClaim(_ pair: SendPair, claimedAtMs: Int64, window: Duration) async -> LedgerState? {
        let windowMs = RetrySchedule.milliseconds(window)
        var at = claimedAtMs
        // Measured on this process's monotonic clock from the claim's age now, never more
        // than the window: a claim stamped ahead of this clock (another host's, a clock
        // stepped back, a damaged value) counts as just made, so no wall clock can hold it.
        func deadlineFor(claimedAt at: Int64) -> ContinuousClock.Instant {
            let age = max(0, clock.nowMillis().saturatingSubtract(at))
            return ContinuousClock.now + .milliseconds(max(0, windowMs.saturatingSubtract(age)))
        }
        var deadline = deadlineFor(claimedAt: at)
        while ContinuousClock.now < deadline {
            try? await cancelWhenGracefulShutdown { try await Task.sleep(for: .milliseconds(100)) }
            if Task.isCancelled || Task.isShuttingDownGracefully { return nil }
            guard let state = await claimOnce(pair) else { return nil }
            guard case .claimed(let newAt) = state else { return state }
            if newAt != at {
                // Claimed again meanwhile (its send refused and retried elsewhere): wait for that one.
                at = newAt
                deadline = deadlineFor(claimedAt: at)
            }
        }
        return .claimed(atMs: at)
    }
}
