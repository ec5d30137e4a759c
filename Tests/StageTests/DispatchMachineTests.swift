import DeviceState
import Providers
import PushModels
import Testing

@testable import DispatcherCore
@testable import StageTestSupport

/// The dispatcher's per-record decisions, every path through `DispatchMachine`: what it
/// asks of the ledger and the provider, and what it publishes.
@Suite struct DispatchMachineTests {
    typealias Step = DispatchStage.Step

    static let sent = Step.outcome(.sent(status: 200, providerMessageID: "apns-1"), attempts: 1)
    static let deadToken = Step.outcome(
        .invalidToken(reason: .apns(.known(.unregistered)), status: 410, timestampMs: nil), attempts: 1)
    static let refused = Step.dead(.rejected, .failed(reason: .apns(.known(.badTopic)), status: 400), attempts: 1)
    /// Written, no answer: the provider may have it.
    static let noAnswer = Step.dead(
        .attemptsExhausted, .retry(reason: .relay(.transportError), status: nil, retryAfter: nil), attempts: 4)

    /// Feeds `events` in turn; the actions they led to, the opening one first.
    static func run(_ events: [DispatchMachine.Event]) -> [DispatchMachine.Action] {
        var machine = DispatchMachine()
        return events.map { machine.handle($0) }
    }

    static func isAttempt(_ action: DispatchMachine.Action, ambiguous: Bool) -> Bool {
        if case .attempt(let marked) = action { return marked == ambiguous }
        return false
    }

    /// `.publish` of a step of `kind` ("sent", "already", "outcome", "dead"), marked or not.
    static func isPublish(_ action: DispatchMachine.Action, _ kind: String, ambiguous: Bool) -> Bool {
        guard case .publish(let step, let marked) = action, marked == ambiguous else { return false }
        switch step {
        case .outcome(.sent, _): return kind == "sent"
        case .outcome: return kind == "outcome"
        case .alreadySent: return kind == "already"
        case .dead: return kind == "dead"
        case .retry: return kind == "retry"
        }
    }

    static func isClaim(_ action: DispatchMachine.Action) -> Bool {
        if case .claim = action { return true } else { return false }
    }

    @Test func aFreshPairIsClaimedSentRecordedAndPublished() {
        let actions = Self.run([
            .opened(force: false, neverTried: true), .claimAnswered(.unknown), .attempted(Self.sent), .recorded,
        ])
        #expect(Self.isClaim(actions[0]))
        #expect(Self.isAttempt(actions[1], ambiguous: false))
        guard case .recordSent = actions[2] else { Issue.record("\(actions[2])"); return }
        #expect(Self.isPublish(actions[3], "sent", ambiguous: false))
    }

    @Test func aPairTheLedgerCallsSentIsPublishedAsAlreadySentWithoutAnAttempt() {
        let actions = Self.run([
            .opened(force: false, neverTried: false), .claimAnswered(.sent),
        ])
        guard case .publish(.alreadySent, false) = actions[1] else { Issue.record("\(actions[1])"); return }
    }

    @Test func nothingAtTheProviderLetsTheClaimGo() {
        for (step, kind) in [(Self.refused, "dead"), (Self.deadToken, "outcome")] {
            let actions = Self.run([
                .opened(force: false, neverTried: true), .claimAnswered(.unknown), .attempted(step), .released,
            ])
            guard case .release = actions[2] else {
                Issue.record("\(kind): \(actions[2])")
                continue
            }
            #expect(Self.isPublish(actions[3], kind, ambiguous: false))
        }
    }

    @Test func aSendTheProviderMayHaveHadKeepsTheClaim() {
        let actions = Self.run([
            .opened(force: false, neverTried: true), .claimAnswered(.unknown), .attempted(Self.noAnswer),
        ])
        #expect(Self.isPublish(actions[2], "dead", ambiguous: false), "published at once, the claim kept")
    }

    @Test func aYoungClaimOnAPushNeverTriedIsAwaited() {
        var machine = DispatchMachine()
        #expect(Self.isClaim(machine.handle(.opened(force: false, neverTried: true))))
        guard case .awaitClaim(let at) = machine.handle(.claimAnswered(.claimed(atMs: 42))) else {
            Issue.record("not awaited")
            return
        }
        #expect(at == 42)
        // It ends three ways: sent elsewhere, let go (ours now), or never finished.
        var sentElsewhere = machine
        #expect(
            Self.isPublish(
                sentElsewhere.handle(.claimSettled(.sent)), "already",
                ambiguous: false))
        var letGo = machine
        #expect(Self.isAttempt(letGo.handle(.claimSettled(.unknown)), ambiguous: false))
        guard case .release = letGo.handle(.attempted(Self.refused)) else {
            Issue.record("the claim taken over is let go after a refusal")
            return
        }
        var stale = machine
        #expect(Self.isAttempt(stale.handle(.claimSettled(.claimed(atMs: 42))), ambiguous: true))
        #expect(Self.isPublish(stale.handle(.attempted(Self.refused)), "dead", ambiguous: true), "the claim kept")
    }

    @Test func anInterruptedSendOfAPushBeingRetriedIsResentAtOnceAndMarked() {
        let actions = Self.run([
            .opened(force: false, neverTried: false), .claimAnswered(.claimed(atMs: 7)), .attempted(Self.sent),
            .recorded,
        ])
        #expect(Self.isAttempt(actions[1], ambiguous: true))
        guard case .recordSent = actions[2] else { Issue.record("\(actions[2])"); return }
        #expect(Self.isPublish(actions[3], "sent", ambiguous: true))
        // Refused this time: the claim stays, so the next send is marked too.
        let refused = Self.run([
            .opened(force: false, neverTried: false), .claimAnswered(.claimed(atMs: 7)), .attempted(Self.refused),
        ])
        #expect(Self.isPublish(refused[2], "dead", ambiguous: true))
    }

    @Test func aForcedReplaySkipsTheLedgerButRecordsItsSend() {
        let sent = Self.run([.opened(force: true, neverTried: false), .attempted(Self.sent), .recorded])
        #expect(Self.isAttempt(sent[0], ambiguous: false))
        guard case .recordSent = sent[1] else { Issue.record("\(sent[1])"); return }
        #expect(Self.isPublish(sent[2], "sent", ambiguous: false))
        // Not its claim to let go.
        let refused = Self.run([.opened(force: true, neverTried: false), .attempted(Self.refused)])
        #expect(Self.isPublish(refused[1], "dead", ambiguous: false))
    }

    @Test func anUnreadableRecordIsDeadLetteredWithoutTheLedger() {
        let actions = Self.run([.unreadable(Self.refused)])
        #expect(Self.isPublish(actions[0], "dead", ambiguous: false))
    }

    @Test func anEventOutOfTurnAbandonsTheRecord() {
        let cases: [[DispatchMachine.Event]] = [
            [.recorded],
            [.opened(force: false, neverTried: true), .attempted(Self.sent)],
            [.opened(force: false, neverTried: true), .claimAnswered(.unknown), .claimSettled(.unknown)],
            [.opened(force: true, neverTried: true), .attempted(Self.sent), .released],
            [.unreadable(Self.refused), .recorded],
        ]
        for events in cases {
            guard case .abandon = Self.run(events).last else {
                Issue.record("\(events) did not abandon")
                continue
            }
        }
    }
}
