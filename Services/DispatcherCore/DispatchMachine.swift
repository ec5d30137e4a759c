import DeviceState
import Providers

/// One record's way through the dispatcher as a plain value: events in, actions out, no
/// I/O (as `ConsumerStateMachine` is the consumer's). `DispatchStage` feeds it what its
/// seams answer (the ledger, the provider through `step`) and performs the action it
/// gets back, until `.publish`.
///
///     start ──unreadable──────────────────────────────────────────────▶ publish (dead)
///       │ opened
///       ▼
///     claiming ──sent────────────────────────────────────────────────▶ publish (already sent)
///       │ ours         │ claimed, young, never tried
///       │              ▼
///       │          awaitingClaim ──sent──────────────────────────────▶ publish (already sent)
///       │  (claimed: interrupted, ambiguous)  │ ours, or still claimed (ambiguous)
///       ▼                                     ▼
///     attempting ──sent──▶ recording ──recorded──────────────────────▶ publish
///       │ refused, parked, dead, with nothing at the provider: releasing ──released──▶ publish
///       │ may have reached the provider, or the claim was not ours to let go ─▶ publish
///
/// Guarantees kept here:
/// - a pair the ledger calls sent is never sent again (unless replayed with `force`,
///   which skips the ledger);
/// - a send is recorded in the ledger before its outcome is published, so a crash after
///   it never sends again;
/// - a claim is let go only when nothing can have reached the phone: not after a send
///   the provider may have had, and not when an earlier send of the pair was interrupted
///   (then every later send is marked as a possible duplicate);
/// - a young claim on a push never tried is a send under way elsewhere: its end is
///   awaited before sending.
struct DispatchMachine {
    enum State {
        case start
        case claiming(neverTried: Bool)
        case awaitingClaim
        /// `claimed`: the claim is this handler's to keep or let go. `ambiguous`: an
        /// earlier send of the pair was interrupted.
        case attempting(claimed: Bool, ambiguous: Bool)
        case recording(DispatchStage.Step, ambiguous: Bool)
        case releasing(DispatchStage.Step)
        case done
    }

    enum Event {
        /// The record opened into a push. `force`: a replay that skips the ledger;
        /// `neverTried`: no attempt counted on it yet.
        case opened(force: Bool, neverTried: Bool)
        /// The record did not open: `step` is its dead letter.
        case unreadable(DispatchStage.Step)
        /// The ledger's answer to `.claim`: what was there before (`.unknown`: ours now).
        case claimAnswered(LedgerState)
        /// How an awaited claim ended: sent, ours (`.unknown`), or still claimed (stale).
        case claimSettled(LedgerState)
        /// One attempt's step.
        case attempted(DispatchStage.Step)
        case recorded
        case released
    }

    enum Action {
        case claim
        /// Wait for the send that claimed the pair at `atMs` to end.
        case awaitClaim(atMs: Int64)
        /// Make one attempt; `ambiguous`: it re-sends an interrupted send (log and count it).
        case attempt(ambiguous: Bool)
        /// Note in the ledger that the provider accepted the pair.
        case recordSent
        /// Let the claim go: nothing reached the phone.
        case release
        /// Publish what `step` comes to; the record is done.
        case publish(DispatchStage.Step, ambiguous: Bool)
        /// An event this state does not take (a bug in the caller): leave the record
        /// uncommitted, for the next consumer.
        case abandon
    }

    private(set) var state = State.start

    mutating func handle(_ event: Event) -> Action {
        switch (state, event) {
        case (.start, .unreadable(let dead)):
            return finish(dead, ambiguous: false)
        case (.start, .opened(let force, let neverTried)):
            if force {
                state = .attempting(claimed: false, ambiguous: false)
                return .attempt(ambiguous: false)
            }
            state = .claiming(neverTried: neverTried)
            return .claim
        case (.claiming(let neverTried), .claimAnswered(let ledger)):
            if case .claimed(let at) = ledger, neverTried {
                state = .awaitingClaim
                return .awaitClaim(atMs: at)
            }
            return claimed(ledger)
        case (.awaitingClaim, .claimSettled(let ledger)):
            return claimed(ledger)
        case (.attempting(let claimed, let ambiguous), .attempted(let step)):
            if step.isSent {
                state = .recording(step, ambiguous: ambiguous)
                return .recordSent
            }
            if claimed && !ambiguous && !step.mayHaveReachedProvider {
                state = .releasing(step)
                return .release
            }
            return finish(step, ambiguous: ambiguous)
        case (.recording(let step, let ambiguous), .recorded):
            return finish(step, ambiguous: ambiguous)
        case (.releasing(let step), .released):
            return finish(step, ambiguous: false)
        default:
            state = .done
            return .abandon
        }
    }

    /// After the ledger's last word on the claim.
    private mutating func claimed(_ ledger: LedgerState) -> Action {
        switch ledger {
        case .sent:
            return finish(.alreadySent, ambiguous: false)
        case .unknown:
            state = .attempting(claimed: true, ambiguous: false)
            return .attempt(ambiguous: false)
        case .claimed:
            state = .attempting(claimed: true, ambiguous: true)
            return .attempt(ambiguous: true)
        }
    }

    private mutating func finish(_ step: DispatchStage.Step, ambiguous: Bool) -> Action {
        state = .done
        return .publish(step, ambiguous: ambiguous)
    }
}
