import DeviceState
import Foundation
import LogKeys
import Metrics
import Logging
import PushModels
import ServiceKit
import ServiceLifecycle

extension DispatchStage {
    /// What claiming a pair in the delivery ledger came to.
    enum Claim: Equatable {
        /// The claim is this handler's: send.
        case ours
        /// The provider accepted the pair before: do not send again.
        case sent(providerMessageID: String?)
        /// A send of the pair began and never finished: the provider may have it. The claim
        /// is kept, and this send is marked as a possible duplicate.
        case interrupted
    }

    /// The longest a send that holds a claim can take past its rate wait: the providers'
    /// 15 s answer timeout and a margin for the concurrency limit and Redis.
    static let liveSendLimit: Duration = .seconds(20)

    /// Claims `record`'s pair. Nil when shutdown interrupted the wait for Redis.
    ///
    /// A claim already there is a send that began. On a push never tried before, a claim
    /// younger than a live send can last is a send still under way: another dispatcher's,
    /// whose partition moved to this one in a rebalance (a rolling upgrade's), or this
    /// one's, on the record delivered again meanwhile. Its end is awaited: sent, the pair
    /// is not sent again; released (refused), the claim is taken; still there once it is
    /// older than a live send can be, the send was interrupted. A push being retried
    /// carries its own earlier attempt's claim, so it is not held up by it.
    func claim(_ record: OutboundRecord, maxRateWait: Duration) async -> Claim? {
        guard var state = await claimOnce(record) else { return nil }
        if case .claimed(let at) = state, (record.attempts ?? 0) == 0 {
            guard let settled = await awaitLiveClaim(record, claimedAtMs: at, window: maxRateWait + Self.liveSendLimit)
            else { return nil }
            state = settled
        }
        switch state {
        case .unknown: return .ours
        case .sent(_, let id): return .sent(providerMessageID: id)
        case .claimed(let at):
            RelayMetrics.ambiguousResends(provider: record.provider.rawValue).increment()
            logger.warning(
                "an earlier send was interrupted before the provider answered; sending again",
                metadata: [
                    LogKey.notificationID: "\(record.notificationID)", LogKey.deviceID: "\(record.deviceID)",
                    LogKey.claimedMsAgo: "\(clock.nowMillis().saturatingSubtract(at))",
                ])
            return .interrupted
        }
    }

    /// One claim attempt (`SET NX GET`): what was there before; `.unknown` means it is ours now.
    private func claimOnce(_ record: OutboundRecord) async -> LedgerState? {
        await untilSuccess("claim the pair in the delivery ledger", logger: logger) {
            try await ledger.claim(
                notificationID: record.notificationID, deviceID: record.deviceID, nowMs: clock.nowMillis())
        }
    }

    /// Polls a claim made at `claimedAtMs` until it is no longer a claim (sent, or released
    /// and now ours), or until it is older than `window` (then still `.claimed`). Nil on shutdown.
    private func awaitLiveClaim(_ record: OutboundRecord, claimedAtMs: Int64, window: Duration) async -> LedgerState? {
        let windowMs = RetrySchedule.milliseconds(window)
        var at = claimedAtMs
        // Measured on this process's monotonic clock from the claim's age now, so a wall
        // clock that stands still or jumps cannot hold the wait.
        var deadline = ContinuousClock.now + .milliseconds(max(0, windowMs - clock.nowMillis().saturatingSubtract(at)))
        while ContinuousClock.now < deadline {
            try? await cancelWhenGracefulShutdown { try await Task.sleep(for: .milliseconds(100)) }
            if Task.isCancelled || Task.isShuttingDownGracefully { return nil }
            guard let state = await claimOnce(record) else { return nil }
            guard case .claimed(let newAt) = state else { return state }
            if newAt != at {
                // Claimed again meanwhile (its send refused and retried elsewhere): wait for that one.
                at = newAt
                deadline =
                    ContinuousClock.now + .milliseconds(max(0, windowMs - clock.nowMillis().saturatingSubtract(at)))
            }
        }
        return .claimed(atMs: at)
    }
}
