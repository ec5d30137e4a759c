import DispatcherCore
import Foundation
import Kafka
import Providers
import PushCrypto
import PushModels
import ServiceKit
import Testing

@testable import DeviceState
@testable import StageTestSupport

/// The dispatcher's logic on in-memory seams: the delivery ledger's once-only guard,
/// provider answers, retry topics, dead letters and expiry.
@Suite struct DispatchStageTests {
    typealias F = MemoryFixtures
    let keys: PipelineKeyring
    let clock = MemoryClock(F.now)
    let publisher = MemoryPublisher()
    let ledger = MemoryLedger()
    let apns = MemoryProviderClient(.apns)
    let fcm = MemoryProviderClient(.fcm)
    /// Deterministic: no jitter, stages of 1 s, 2 s and 3 s, four attempts.
    let schedule = RetrySchedule(delays: [.seconds(1), .seconds(2), .seconds(3)], maxAttempts: 4, jitter: 0)
    let token = "a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f9"
    let notification: NotificationID = "n-dispatch"
    let body: JSONValue = ["push_key_id": 11, "encrypted_data": "c2VjcmV0", "aps": ["mutable-content": 1]]

    init() throws {
        keys = try F.pipelineKeyring()
    }

    func stage(providers: [Provider]? = nil) -> DispatchStage {
        let all: [Provider: MemoryProviderClient] = [.apns: apns, .fcm: fcm]
        var clients: [Provider: any PushProviderClient] = [:]
        var limiters: [Provider: ConcurrencyLimiter] = [:]
        for provider in providers ?? Provider.allCases {
            clients[provider] = all[provider]
            limiters[provider] = ConcurrencyLimiter(limit: 4)
        }
        return DispatchStage(
            pipelineKeys: keys, clients: clients, limiters: limiters,
            rates: AdaptiveRateLimiter(settings: .init()), ledger: ledger, publisher: publisher, topics: F.topics,
            schedule: schedule, clock: clock, logger: F.logger)
    }

    /// A push as the encryptor leaves it on `push.outbound`: token sealed for this record.
    func outbound(
        device: DeviceID = 1, provider: Provider = .apns, attempts: Int? = nil, lastError: String? = nil,
        expiresAt: Int64? = F.now / 1000 + 3600
    ) throws -> OutboundRecord {
        var record = OutboundRecord(
            notificationID: notification, deviceID: device, realmUUID: F.realm, provider: provider, token: "",
            appID: provider == .apns ? "org.zulip.Zulip" : nil,
            delivery: DeliveryClass(apnsPriority: 10, apnsPushType: .known(.alert), fcmPriority: .known(.high)),
            body: body,
            expiresAt: expiresAt, acceptedAtMs: F.now - 1_500, registeredAtMs: F.now - 86_400_000,
            sealedToken: try keys.seal(
                Array(token.utf8), binding: .token(notificationID: notification, realmUUID: F.realm, deviceID: device)))
        record.attempts = attempts
        record.lastError = lastError
        return record
    }

    func handle(
        _ record: OutboundRecord, topic: String? = nil, headers: [(name: String, value: [UInt8])] = [],
        providers: [Provider]? = nil
    ) async throws -> RecordDisposition {
        await stage(providers: providers).handle(
            try F.consumed(record, topic: topic ?? F.topics.outbound, headers: headers), maxRateWait: .seconds(1))
    }

    func deliveries() throws -> [DeliveryRecord] { try publisher.decoded(DeliveryRecord.self, on: F.topics.deliveries) }
    func deadLetters() throws -> [DeadLetterRecord] {
        try publisher.decoded(DeadLetterRecord.self, on: F.topics.deadLetter)
    }
    var ledgerState: LedgerState { ledger.state(notificationID: notification, deviceID: 1) }

    // MARK: Sent, and never twice

    @Test func anAcceptedPushIsRecordedSentInTheLedgerAndOnDeliveries() async throws {
        apns.enqueue(.sent(status: 200, providerMessageID: "apns-id-1"))
        #expect(try await handle(try outbound()) == .done)

        let sent = try #require(apns.sent.soleElement)
        #expect(sent.token == token, "the provider gets the token the sealed one opens to")
        #expect(sent.body == Wire.canonical(body), "the body bytes as the encryptor built them")
        #expect(sent.deviceID == 1 && sent.notificationID == notification)
        #expect(sent.provider == .apns && sent.appID == "org.zulip.Zulip" && sent.expiresAt == F.now / 1000 + 3600)
        #expect(
            sent.delivery == DeliveryClass(apnsPriority: 10, apnsPushType: .known(.alert), fcmPriority: .known(.high)))
        #expect(fcm.sent.isEmpty)

        #expect(publisher.topics == [F.topics.deliveries])
        let delivery = try #require(try deliveries().soleElement)
        #expect(delivery.outcome == .sent)
        #expect(delivery.reason == nil)
        #expect(delivery.httpStatus == 200)
        #expect(delivery.providerMessageID == "apns-id-1")
        #expect(delivery.attempts == 1)
        #expect(delivery.deviceID == 1 && delivery.provider == .apns)
        #expect(delivery.acceptedAtMs == F.now - 1_500 && delivery.completedAtMs == F.now)

        #expect(ledgerState == .sent)
        #expect(ledger.claims == 1 && ledger.releases == 0)
    }

    // MARK: Pipeline dry runs

    @Test func aDryRunsFCMPushIsOnlyValidatedAndReportedAsSuch() async throws {
        fcm.enqueue(.sent(status: 200, providerMessageID: "projects/p/messages/fake_message_id"))
        var record = try outbound(provider: .fcm)
        record.sendMode = .validateOnly
        #expect(try await handle(record) == .done)
        let sent = try #require(fcm.sent.soleElement)
        #expect(sent.validateOnly, "FCM is asked to validate it only")
        let delivery = try #require(try deliveries().soleElement)
        #expect(delivery.outcome == .sent && delivery.sendMode == .validateOnly && delivery.reason == nil)
        #expect(delivery.providerMessageID == "projects/p/messages/fake_message_id" && delivery.httpStatus == 200)
    }

    @Test func aDryRunsAPNsPushIsNotSentAtAll() async throws {
        var record = try outbound(provider: .apns)
        record.sendMode = .validateOnly
        #expect(try await handle(record) == .done)
        #expect(apns.sent.isEmpty, "APNs has no check-only mode: nothing goes to it")
        let delivery = try #require(try deliveries().soleElement)
        #expect(delivery.outcome == .sent && delivery.sendMode == .validateOnly)
        #expect(delivery.reason?.name == "checked_locally" && delivery.httpStatus == nil && delivery.attempts == 0)
        // An ordinary push of the same kind still goes out.
        apns.enqueue(.sent(status: 200, providerMessageID: "apns-id-2"))
        #expect(try await handle(try outbound(device: 2)) == .done)
        #expect(apns.sent.count == 1 && apns.sent.first?.validateOnly == false)
    }

    @Test func aDryRunsDeadTokenStillInvalidatesTheDevice() async throws {
        fcm.enqueue(.invalidToken(reason: .fcm(.known(.unregistered)), status: 404, timestampMs: nil))
        var record = try outbound(provider: .fcm)
        record.sendMode = .validateOnly
        #expect(try await handle(record) == .done)
        #expect(try publisher.decoded(FeedbackRecord.self, on: F.topics.feedback).count == 1)
        let delivery = try #require(try deliveries().soleElement)
        #expect(delivery.outcome == .invalidToken && delivery.sendMode == .validateOnly)
    }

    @Test func aPairTheLedgerCallsSentIsNotSentAgain() async throws {
        ledger.seedSent(notificationID: notification, deviceID: 1)
        #expect(try await handle(try outbound(attempts: 2)) == .done)
        #expect(apns.sent.isEmpty, "the provider is not called")
        let delivery = try #require(try deliveries().soleElement)
        #expect(delivery.outcome == .alreadySent)
        #expect(delivery.providerMessageID == nil, "the ledger keeps no message id: the first outcome has it")
        #expect(delivery.attempts == 2)
        #expect(publisher.topics == [F.topics.deliveries])
        #expect(ledgerState == .sent, "left as it was")
        #expect(ledger.releases == 0 && ledger.sentWrites == 0)
    }

    /// Waits (at most 5 s) until the handler has polled the ledger's claim `count` times.
    func claimsReach(_ count: Int) async throws {
        let deadline = ContinuousClock.now + .seconds(5)
        while ledger.claims < count {
            guard ContinuousClock.now < deadline else { throw CancellationError() }
            try await Task.sleep(for: .milliseconds(5))
        }
    }

    @Test func aYoungClaimIsASendUnderWayWhoseEndIsAwaited() async throws {
        // Another dispatcher claimed the pair 100 ms ago and is sending it: a partition
        // moved in a rebalance, and its record came here as well.
        ledger.seedClaimed(notificationID: notification, deviceID: 1, atMs: F.now - 100)
        let record = try outbound()
        let handled = Task { try await handle(record) }
        try await claimsReach(2)
        #expect(apns.sent.isEmpty, "nothing sent while the other send is under way")
        ledger.seedSent(notificationID: notification, deviceID: 1)
        #expect(try await handled.value == .done)
        #expect(apns.sent.isEmpty, "not sent a second time")
        let delivery = try #require(try deliveries().soleElement)
        #expect(delivery.outcome == .alreadySent)
    }

    @Test func aYoungClaimReleasedByARefusalIsTakenAndSentUnmarked() async throws {
        ledger.seedClaimed(notificationID: notification, deviceID: 1, atMs: F.now - 100)
        apns.enqueue(.sent(status: 200, providerMessageID: "apns-id-9"))
        let record = try outbound()
        let handled = Task { try await handle(record) }
        try await claimsReach(2)
        // The other send was refused (say 429) and let its claim go: nothing reached the phone.
        try await ledger.release(try outbound().sendPair)
        #expect(try await handled.value == .done)
        #expect(apns.sent.count == 1)
        let delivery = try #require(try deliveries().soleElement)
        #expect(delivery.outcome == .sent && delivery.reason == nil, "not a possible duplicate")
        #expect(ledgerState == .sent)
    }

    @Test func anInterruptedEarlierSendIsSentAgainAndMarkedAmbiguous() async throws {
        ledger.seedClaimed(notificationID: notification, deviceID: 1, atMs: F.now - 30_000)
        apns.enqueue(.sent(status: 200, providerMessageID: "apns-id-2"))
        #expect(try await handle(try outbound()) == .done)
        #expect(apns.sent.count == 1)
        let delivery = try #require(try deliveries().soleElement)
        #expect(delivery.outcome == .sent)
        #expect(delivery.reason == .stage(.resentAfterInterruptedSend))
        #expect(ledgerState == .sent)

        // Redelivered once more (say, a crash before the commit): now it is not sent.
        #expect(try await handle(try outbound()) == .done)
        #expect(apns.sent.count == 1)
        #expect(try deliveries().map(\.outcome) == [.sent, .alreadySent])
    }

    @Test func aFailedPublishOfTheOutcomeIsRetriedWithoutSendingAgain() async throws {
        publisher.failNext(2)
        #expect(try await handle(try outbound()) == .done)
        #expect(apns.sent.count == 1, "only the publish is retried, not the send")
        #expect(publisher.calls == 3)
        #expect(try deliveries().map(\.outcome) == [.sent])
        #expect(ledgerState == .sent)
    }

    @Test func replayForceSkipsTheLedgerAndOtherReplaysDoNot() async throws {
        ledger.seedSent(notificationID: notification, deviceID: 1)
        // A replay without `force` is still deduplicated.
        let replay = F.header(RecordHeader.replay, "\(F.now - 5_000)")
        #expect(try await handle(try outbound(), headers: [replay]) == .done)
        #expect(apns.sent.isEmpty)
        #expect(try deliveries().map(\.outcome) == [.alreadySent])

        apns.enqueue(.sent(status: 200, providerMessageID: "forced-id"))
        #expect(try await handle(try outbound(), headers: [F.header(RecordHeader.replay, "force")]) == .done)
        #expect(apns.sent.count == 1, "force re-sends a pair already delivered")
        let forced = try #require(try deliveries().last)
        #expect(forced.outcome == .sent)
        #expect(forced.reason == nil)
        #expect(forced.providerMessageID == "forced-id")
        #expect(ledger.claims == 1, "force does not claim")
        #expect(ledgerState == .sent)
    }

    // MARK: Provider answers

    @Test func aDeadTokenBecomesFeedbackAndAnInvalidTokenOutcome() async throws {
        apns.enqueue(.invalidToken(reason: .apns(.known(.unregistered)), status: 410, timestampMs: F.now - 100))
        #expect(try await handle(try outbound()) == .done)
        #expect(publisher.batches.count == 1, "feedback and outcome are acknowledged together")
        #expect(Set(publisher.topics) == [F.topics.feedback, F.topics.deliveries])

        let feedback = try #require(try publisher.decoded(FeedbackRecord.self, on: F.topics.feedback).soleElement)
        #expect(feedback.deviceID == 1)
        #expect(feedback.realmUUID == F.realm)
        #expect(feedback.provider == .apns)
        #expect(feedback.tokenFingerprint == Fingerprint.token(token))
        #expect(feedback.reason == .provider("Unregistered"))
        #expect(feedback.providerTimestampMs == F.now - 100)
        #expect(feedback.notificationID == notification)
        #expect(feedback.observedAtMs == F.now)
        let message = try #require(publisher.records(on: F.topics.feedback).soleElement)
        #expect(!message.valueText.contains(token), "feedback carries a fingerprint, not the token")
        #expect(message.keyString == "1")

        let delivery = try #require(try deliveries().soleElement)
        #expect(delivery.outcome == .invalidToken)
        #expect(delivery.reason == .provider("Unregistered"))
        #expect(delivery.httpStatus == 410)
        #expect(delivery.attempts == 1)

        #expect(ledgerState == .unknown, "the claim is released: nothing reached the phone")
        #expect(ledger.releases == 1)
    }

    @Test func aTransportFailureKeepsTheClaimSoTheNextSendsAreMarked() async throws {
        // Written, no answer: the provider may have it.
        apns.enqueue(.retry(reason: .relay(.transportError), status: nil, retryAfter: nil))
        #expect(try await handle(try outbound()) == .done)
        #expect(ledger.releases == 0)
        #expect(ledgerState == .claimed(atMs: F.now))
        let parked = try Wire.decode(OutboundRecord.self, from: try #require(publisher.records.soleElement).value)
        // The next attempt is answered 503: still unknown whether the first one arrived.
        apns.enqueue(.retry(reason: .apns(.known(.serviceUnavailable)), status: 503, retryAfter: nil))
        #expect(try await handle(parked) == .done)
        #expect(ledger.releases == 0)
        // And the one after is sent: marked as a possible duplicate.
        apns.enqueue(.sent(status: 200, providerMessageID: "apns-id-3"))
        #expect(try await handle(parked) == .done)
        #expect(try deliveries().soleElement?.reason == .stage(.resentAfterInterruptedSend))
    }

    @Test func aRetryableAnswerParksThePushOnTheFirstRetryTopic() async throws {
        apns.enqueue(.retry(reason: .apns(.known(.serviceUnavailable)), status: 503, retryAfter: nil))
        #expect(try await handle(try outbound()) == .done)
        #expect(publisher.topics == ["push.retry.1"])
        let message = try #require(publisher.records.soleElement)
        #expect(message.headerTexts(RecordHeader.due) == ["\(F.now + 1_000)"])
        #expect(message.headerTexts(RecordHeader.notificationID) == [notification.rawValue])
        #expect(message.keyString == "1")
        #expect(try message.valueJSON()["token"] == nil, "the token stays sealed on retry topics")
        #expect(!message.valueText.contains(token))

        let parked = try Wire.decode(OutboundRecord.self, from: message.value)
        #expect(parked.attempts == 1)
        #expect(parked.lastError == "ServiceUnavailable")
        #expect(parked.notBeforeMs == F.now + 1_000)
        #expect(parked.body == Wire.canonical(body))
        let sealed = try #require(parked.sealedToken)
        #expect(
            try keys.open(sealed, binding: .token(notificationID: notification, realmUUID: F.realm, deviceID: 1))
                == Array(token.utf8))

        #expect(try deliveries().isEmpty, "no outcome yet")
        #expect(ledgerState == .unknown)
        #expect(ledger.releases == 1)
    }

    @Test func aPushBehindACongestedDeviceIsParkedUnsentWithoutAnAttempt() async throws {
        var consumed = try F.consumed(
            try outbound(attempts: 2, lastError: "ServiceUnavailable"), topic: F.topics.outbound)
        consumed.keyCongested = true
        #expect(await stage().handle(consumed, maxRateWait: .seconds(1)) == .done)
        #expect(apns.sent.isEmpty, "the provider is not called")
        #expect(ledger.claims == 0, "the ledger is not touched")
        #expect(publisher.topics == ["push.retry.1"])
        let message = try #require(publisher.records.soleElement)
        #expect(message.headerTexts(RecordHeader.due) == ["\(F.now + 1_000)"])
        #expect(!message.valueText.contains(token))
        let parked = try Wire.decode(OutboundRecord.self, from: message.value)
        #expect(
            parked.attempts == 2 && parked.lastError == "ServiceUnavailable", "its attempts and reason as they were")
        #expect(parked.notBeforeMs == F.now + 1_000)
        #expect(try deliveries().isEmpty)

        // A forced re-drive keeps its mark when parked.
        var forced = try F.consumed(
            try outbound(), topic: F.topics.outbound, headers: [F.header(RecordHeader.replay, "force")])
        forced.keyCongested = true
        #expect(await stage().handle(forced, maxRateWait: .seconds(1)) == .done)
        #expect(publisher.records.last?.headerTexts(RecordHeader.replay) == ["force"])

        // Expired, it is not parked but dead-lettered as expired.
        var expired = try F.consumed(try outbound(expiresAt: F.now / 1000 - 1), topic: F.topics.outbound)
        expired.keyCongested = true
        #expect(await stage().handle(expired, maxRateWait: .seconds(1)) == .done)
        #expect(try deadLetters().soleElement?.cause == .expired)

        // Alive now but expired before it would come back: sent now, not parked.
        apns.enqueue(.sent(status: 200, providerMessageID: "sent-now"))
        var late = try F.consumed(try outbound(device: 2, expiresAt: F.now / 1000), topic: F.topics.outbound)
        late.keyCongested = true
        #expect(await stage().handle(late, maxRateWait: .seconds(1)) == .done)
        #expect(apns.sent.last?.deviceID == 2)
    }

    @Test func retryAfterChoosesTheStageThatCoversItAndLaterAttemptsMoveOn() async throws {
        // Attempt 1 with Retry-After 2 s: the 1 s stage cannot honour it.
        apns.enqueue(.retry(reason: .apns(.known(.tooManyRequests)), status: 429, retryAfter: .seconds(2)))
        #expect(try await handle(try outbound()) == .done)
        // Attempt 3 (two were made): the third stage.
        apns.enqueue(.retry(reason: .apns(.known(.internalServerError)), status: 500, retryAfter: nil))
        #expect(try await handle(try outbound(attempts: 2), topic: "push.retry.2") == .done)

        #expect(publisher.topics == ["push.retry.2", "push.retry.3"])
        #expect(
            publisher.records.map { $0.headerTexts(RecordHeader.due) } == [["\(F.now + 2_000)"], ["\(F.now + 3_000)"]])
        let parked = try publisher.records.map { try Wire.decode(OutboundRecord.self, from: $0.value) }
        #expect(parked.map(\.attempts) == [1, 3])
        #expect(parked.map(\.lastError) == ["TooManyRequests", "InternalServerError"])
    }

    @Test func exhaustedAttemptsAreDeadLettered() async throws {
        apns.enqueue(.retry(reason: .apns(.known(.serviceUnavailable)), status: 503, retryAfter: nil))
        // Three attempts made; the fourth is the last the schedule allows.
        #expect(
            try await handle(try outbound(attempts: 3, lastError: "InternalServerError"), topic: "push.retry.3")
                == .done)
        #expect(apns.sent.count == 1)
        #expect(publisher.topics == [F.topics.deadLetter, F.topics.deliveries])

        let dead = try #require(try deadLetters().soleElement)
        #expect(dead.cause == .attemptsExhausted)
        #expect(dead.lastError == "ServiceUnavailable")
        #expect(dead.httpStatus == 503)
        #expect(dead.attempts == 4)
        #expect(dead.deadAtMs == F.now)
        #expect(dead.record.deviceID == 1 && dead.record.notificationID == notification)
        #expect(dead.record.sealedToken != nil, "kept sealed for a re-drive")
        #expect(!(publisher.records(on: F.topics.deadLetter).first?.valueText.contains(token) ?? true))

        let delivery = try #require(try deliveries().soleElement)
        #expect(delivery.outcome == .failed)
        #expect(delivery.reason == .provider("ServiceUnavailable"))
        #expect(delivery.attempts == 4)
        #expect(ledgerState == .unknown)
    }

    @Test func aProviderRefusalIsDeadLetteredAsRejected() async throws {
        fcm.enqueue(.failed(reason: .fcm(.known(.invalidArgument)), status: 400))
        #expect(try await handle(try outbound(provider: .fcm)) == .done)
        let dead = try #require(try deadLetters().soleElement)
        #expect(dead.cause == .rejected)
        #expect(dead.lastError == "INVALID_ARGUMENT")
        #expect(dead.attempts == 1)
        let delivery = try #require(try deliveries().soleElement)
        #expect(delivery.outcome == .failed)
        #expect(delivery.reason == .provider("INVALID_ARGUMENT"))
        #expect(delivery.httpStatus == 400)
        #expect(delivery.provider == .fcm)
        #expect(ledgerState == .unknown)
    }

    // MARK: Not sent at all

    @Test func anExpiredPushIsDeadLetteredWithoutCallingTheProvider() async throws {
        // Expired ten seconds ago, after an earlier retryable failure.
        #expect(
            try await handle(try outbound(attempts: 2, lastError: "ServiceUnavailable", expiresAt: F.now / 1000 - 10))
                == .done)
        // Expired with no earlier error.
        #expect(try await handle(try outbound(device: 2, expiresAt: F.now / 1000 - 1)) == .done)
        #expect(apns.sent.isEmpty)

        let dead = try deadLetters()
        #expect(dead.map(\.cause) == [.expired, .expired])
        #expect(dead.map(\.lastError) == ["ServiceUnavailable", "expired"])
        #expect(dead.map(\.attempts) == [2, 0])
        let outcomes = try deliveries()
        #expect(outcomes.map(\.outcome) == [.expired, .expired])
        #expect(outcomes.map(\.reason) == [.provider("ServiceUnavailable"), .stage(.expired)])
        #expect(ledgerState == .unknown)
        #expect(ledger.state(notificationID: notification, deviceID: 2) == .unknown)
    }

    @Test func aPushDueOnlyAfterItsExpiryIsDeadLetteredAsExpired() async throws {
        // Not expired yet, but the 1 s retry would land after the expiry.
        apns.enqueue(.retry(reason: .apns(.known(.serviceUnavailable)), status: 503, retryAfter: nil))
        #expect(try await handle(try outbound(expiresAt: F.now / 1000)) == .done)
        #expect(apns.sent.count == 1)
        #expect(publisher.records.allSatisfy { !$0.topic.hasPrefix(F.topics.retryPrefix) })
        let dead = try #require(try deadLetters().soleElement)
        #expect(dead.cause == .expired)
        #expect(dead.attempts == 1)
        #expect(try deliveries().map(\.outcome) == [.expired])
    }

    @Test func aPushForAProviderThatIsNotConfiguredIsRejected() async throws {
        #expect(try await handle(try outbound(provider: .fcm), providers: [.apns]) == .done)
        #expect(fcm.sent.isEmpty && apns.sent.isEmpty)
        let dead = try #require(try deadLetters().soleElement)
        #expect(dead.cause == .rejected)
        #expect(dead.lastError == "provider_not_configured")
        #expect(dead.attempts == 0)
        let delivery = try #require(try deliveries().soleElement)
        #expect(delivery.outcome == .failed)
        #expect(delivery.reason == .stage(.providerNotConfigured))
        #expect(ledgerState == .unknown)
    }

    @Test func aSealedTokenThatDoesNotOpenIsRejectedUnsent() async throws {
        // The token of device 2, moved into device 1's record.
        var moved = try outbound()
        moved.sealedToken = try keys.seal(
            Array(token.utf8), binding: .token(notificationID: notification, realmUUID: F.realm, deviceID: 2))
        #expect(try await handle(moved) == .done)
        // A token sealed with a pipeline key this dispatcher does not hold.
        var foreign = try outbound(device: 3)
        foreign.sealedToken = try F.pipelineKeyring(id: "k9").seal(
            Array(token.utf8), binding: .token(notificationID: notification, realmUUID: F.realm, deviceID: 3))
        #expect(try await handle(foreign) == .done)

        #expect(apns.sent.isEmpty)
        #expect(ledger.claims == 0, "nothing to send: the ledger is not touched")
        let dead = try deadLetters()
        #expect(dead.map(\.cause) == [.rejected, .rejected])
        #expect(dead.map(\.lastError) == ["token_unreadable", "token_unreadable"])
        #expect(
            dead.map(\.record.sealedToken) == [moved.sealedToken, foreign.sealedToken],
            "kept as it came, for a re-drive")
        #expect(try deliveries().map(\.reason) == [.stage(.tokenUnreadable), .stage(.tokenUnreadable)])
        #expect(try deliveries().map(\.outcome) == [.failed, .failed])
    }

    @Test func aSealedBodyThatDoesNotOpenIsRejectedUnsent() async throws {
        var record = try outbound()
        record.body = []
        record.sealedBody = try F.pipelineKeyring().seal(
            Wire.canonical(["aps": ["alert": "hi"]]),
            binding: .body(notificationID: notification, realmUUID: F.realm, deviceID: 1))
        #expect(try await handle(record) == .done)
        #expect(apns.sent.isEmpty)
        #expect(try deadLetters().map(\.lastError) == ["body_unreadable"])
        #expect(try deliveries().map(\.reason) == [.stage(.bodyUnreadable)])
    }

    @Test func aSealedBodyIsOpenedForTheProviderAndStaysSealedOnRetry() async throws {
        var record = try outbound()
        let readable: JSONValue = [
            "aps": ["alert": ["title": "Iago", "body": "lunch"]], "zulip": ["message_ids": [5]],
        ]
        record.body = []
        record.sealedBody = try keys.seal(
            Wire.canonical(readable), binding: .body(notificationID: notification, realmUUID: F.realm, deviceID: 1))
        apns.enqueue(.retry(reason: .apns(.known(.serviceUnavailable)), status: 503, retryAfter: nil))
        #expect(try await handle(record) == .done)
        #expect(apns.sent.first?.body == Wire.canonical(readable))
        let parked = try #require(publisher.records(on: "push.retry.1").soleElement)
        #expect(try parked.valueJSON()["body"] == nil && parked.valueJSON()["body_json"] == nil)
        #expect(!parked.valueText.contains("lunch"))
        #expect(try Wire.decode(OutboundRecord.self, from: parked.value).sealedBody == record.sealedBody)
    }

    @Test func aClearTokenOfAnOlderRecordIsSentAndSealedBeforeItIsPublishedAgain() async throws {
        // As records carried it before schema 3: the token in the clear, no sealed one.
        var record = try outbound()
        record.sealedToken = nil
        record.token = token
        apns.enqueue(.retry(reason: .apns(.known(.serviceUnavailable)), status: 503, retryAfter: nil))
        #expect(try await handle(record) == .done)
        #expect(apns.sent.soleElement?.token == token)
        let parked = try #require(publisher.records(on: "push.retry.1").soleElement)
        #expect(try parked.valueJSON()["token"] == nil && !parked.valueText.contains(token))
        let sealed = try #require(try Wire.decode(OutboundRecord.self, from: parked.value).sealedToken)
        #expect(
            try keys.open(sealed, binding: .token(notificationID: notification, realmUUID: F.realm, deviceID: 1))
                == Array(token.utf8))
    }

    @Test func anUndecodableRecordIsSkipped() async throws {
        let disposition = await stage().handle(
            F.consumedBytes(Array(#"{"schema":4,"device_id":"one"}"#.utf8), topic: F.topics.outbound),
            maxRateWait: .seconds(1))
        #expect(disposition == .done)
        #expect(publisher.calls == 0)
        #expect(ledger.claims == 0)
        #expect(apns.sent.isEmpty && fcm.sent.isEmpty)
    }

    @Test func anUndecodableRecordThatNamesItsPushIsAccountedForAsFailed() async throws {
        let value: JSONValue = [
            "schema": 5, "notification_id": "n-bad", "realm_uuid": .string(F.realm.rawValue), "device_id": 7,
            "provider": "carrier_pigeon", "accepted_at_ms": .int(F.now),
        ]
        let disposition = await stage().handle(
            F.consumedBytes(Wire.canonical(value), topic: F.topics.outbound), maxRateWait: .seconds(1))
        #expect(disposition == .done)
        #expect(ledger.claims == 0 && apns.sent.isEmpty && fcm.sent.isEmpty)
        let outcome = try #require(try publisher.decoded(DeliveryRecord.self, on: F.topics.deliveries).soleElement)
        #expect(outcome.notificationID == "n-bad" && outcome.deviceID == 7 && outcome.realmUUID == F.realm)
        #expect(outcome.outcome == .failed && outcome.reason == .stage(.malformedRecord))
        #expect(publisher.records.count == 1)
    }
}

extension Array {
    /// The single element, or nil when there are none or several.
    fileprivate var soleElement: Element? { count == 1 ? first : nil }
}
