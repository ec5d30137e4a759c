import DeviceState
import Foundation
import Kafka
import LogKeys
import Logging
import Metrics
import Providers
import PushCrypto
import PushModels
import RedisClient
import ServiceKit
import ServiceLifecycle
import Tracing

/// The dispatcher's logic, on its seams: provider clients, a delivery ledger, a record
/// publisher, a clock.
public struct DispatchStage: Sendable {
    /// Opens each record into the push its client sends (and seals the clear tokens of older records).
    let opener: RecordOpener
    let clients: [Provider: any PushProviderClient]
    let limiters: [Provider: ConcurrencyLimiter]
    let rates: AdaptiveRateLimiter
    let ledger: any DeliveryLedger
    let publisher: any RecordPublisher
    let topics: TopicNames
    let schedule: RetrySchedule
    let clock: any WallClock
    let logger: Logger
    let meters: DispatchMeters

    public init(
        pipelineKeys: PipelineKeyring, clients: [Provider: any PushProviderClient],
        limiters: [Provider: ConcurrencyLimiter], rates: AdaptiveRateLimiter, ledger: any DeliveryLedger,
        publisher: any RecordPublisher, topics: TopicNames, schedule: RetrySchedule, clock: any WallClock,
        logger: Logger
    ) {
        self.opener = RecordOpener(pipelineKeys: pipelineKeys, logger: logger)
        self.clients = clients
        self.limiters = limiters
        self.rates = rates
        self.ledger = ledger
        self.publisher = publisher
        self.topics = topics
        self.schedule = schedule
        self.clock = clock
        self.logger = logger
        meters = DispatchMeters(providers: clients.keys)
    }

    /// What one record leads to, before it is published.
    enum Step {
        case outcome(SendResult, attempts: Int)
        case alreadySent
        case retry(OutboundRecord, stage: Int, dueAtMs: Int64)
        case dead(DeadLetterRecord.Cause, SendResult, attempts: Int)

        var isSent: Bool {
            if case .outcome(.sent, _) = self { return true }
            return false
        }

        /// The provider may have the push: the request was written and no answer came
        /// back (a transport failure). Its ledger claim stays, so the next send of the pair
        /// is counted and marked as the re-send of an interrupted send.
        var mayHaveReachedProvider: Bool {
            switch self {
            // A parked record carries its last reason by name: read back as the relay's own.
            case .retry(let next, _, _):
                return next.lastError.map(ProviderReason.init(recorded:)) == .relay(.transportError)
            case .dead(_, let result, _): return result.reason == .relay(.transportError)
            case .outcome, .alreadySent: return false
            }
        }
    }

    public func handle(_ record: KafkaRecord, maxRateWait: Duration) async -> RecordDisposition {
        await RelayTracing.withRecordSpan("dispatch push", of: record) { span in
            span?.describe(record)
            guard var messages = await sendAndAccount(record, maxRateWait: maxRateWait, span: span) else {
                return .abandoned
            }
            // Its outcome, retry, dead letter or invalidation continue this push's trace.
            if span != nil { RelayTracing.stamp(&messages) }
            return await publishUntilAcknowledged(messages, to: publisher, logger: logger)
        }
    }

    /// Sends a record's push when it is time, and returns what must be published for it
    /// (outcome, retry or dead letter). Nil when shutdown interrupted it: the record
    /// stays uncommitted and the next consumer takes it.
    func sendAndAccount(_ record: KafkaRecord, maxRateWait: Duration, span: (any Span)? = nil) async
        -> [KafkaOutgoing]?
    {
        guard let received = decodeRecord(OutboundRecord.self, from: record, logger: logger) else {
            // Counted and skipped; the realm's outcome stream says so when the record names its push.
            let outcome = DeliveryRecord.malformed(record.value, reason: .malformedRecord, nowMs: clock.nowMillis())
            return outcome.flatMap { try? KafkaOutgoing.delivery($0, topic: topics.deliveries) }.map { [$0] } ?? []
        }
        // What is published for it (retry, dead letter) is the record as it came, its token sealed.
        let outbound = opener.resealed(received)
        span?.attributes[SpanKey.notificationID] = outbound.notificationID.rawValue
        span?.attributes[SpanKey.deviceID] = outbound.deviceID.rawValue
        span?.attributes[SpanKey.provider] = outbound.provider.rawValue
        let replay = record.header(RecordHeader.replay)
        if record.keyCongested {
            // Parked only if it is still alive when it comes back; else it is handled now.
            let due = clock.nowMillis().saturatingAdd(RetrySchedule.milliseconds(schedule.delays[0]))
            if !outbound.isExpired(atMs: due) {
                span?.attributes[SpanKey.outcome] = "parked_busy_device"
                return parkedForBusyDevice(outbound, due: due, replay: replay)
            }
        }
        let force = replay.map { String(decoding: $0, as: UTF8.self) } == "force"
        var machine = DispatchMachine()
        var action: DispatchMachine.Action
        let opened: ProviderPush?
        switch opener.open(received) {
        case .unreadable(let reason):
            // Nothing can be sent without the token or body; the dead letter keeps them sealed for a re-drive.
            opened = nil
            action = machine.handle(
                .unreadable(
                    .dead(
                        .rejected, .failed(reason: .relay(reason), status: nil),
                        attempts: max(0, outbound.attempts ?? 0))))
        case .push(let push):
            opened = push
            action = machine.handle(.opened(force: force, neverTried: (outbound.attempts ?? 0) == 0))
        }
        return await perform(action, machine: &machine, outbound, push: opened, maxRateWait: maxRateWait, span: span)
    }

    /// Performs the machine's actions in turn until it publishes; what is published, or nil
    /// when shutdown interrupted a wait for Redis (the record stays uncommitted).
    private func perform(
        _ first: DispatchMachine.Action, machine: inout DispatchMachine, _ outbound: OutboundRecord,
        push opened: ProviderPush?, maxRateWait: Duration, span: (any Span)?
    ) async -> [KafkaOutgoing]? {
        var action = first
        var claimedAtMs: Int64 = 0
        let pair = outbound.sendPair
        while true {
            switch action {
            case .claim:
                guard let state = await claimOnce(pair) else { return nil }
                if case .claimed(let at) = state { claimedAtMs = at }
                action = machine.handle(.claimAnswered(state))
            case .awaitClaim(let at):
                let window = maxRateWait + Self.liveSendLimit
                guard let state = await awaitLiveClaim(pair, claimedAtMs: at, window: window) else { return nil }
                if case .claimed(let at) = state { claimedAtMs = at }
                action = machine.handle(.claimSettled(state))
            case .attempt(let ambiguous):
                if ambiguous { noteInterruptedSend(outbound, claimedAtMs: claimedAtMs) }
                guard let push = opened, let step = await step(for: outbound, push: push, maxRateWait: maxRateWait)
                else { return nil }
                action = machine.handle(.attempted(step))
            case .recordSent:
                guard await recordSent(pair) else { return nil }
                action = machine.handle(.recorded)
            case .release:
                guard await releaseClaim(pair) else { return nil }
                action = machine.handle(.released)
            case .publish(let step, let ambiguous):
                Self.annotate(span, step)
                do {
                    return try self.messages(outbound, token: opened?.token ?? "", step: step, ambiguous: ambiguous)
                } catch {
                    logger.error("cannot encode outcome", metadata: [LogKey.error: "\(error)"])
                    return nil
                }
            case .abandon:
                return nil
            }
        }
    }

    /// Expiry, rate limit, one provider attempt with `push`, and what follows from its
    /// answer (a retry carries `record` on).
    func step(for record: OutboundRecord, push: ProviderPush, maxRateWait: Duration) async -> Step? {
        let attemptsSoFar = max(0, record.attempts ?? 0)
        if record.isExpired(atMs: clock.nowMillis()) {
            return .dead(
                .expired,
                .failed(reason: record.lastError.map(ProviderReason.init(recorded:)) ?? .relay(.expired), status: nil),
                attempts: attemptsSoFar)
        }
        guard let client = clients[record.provider], let limiter = limiters[record.provider] else {
            return .dead(
                .rejected, .failed(reason: .relay(.providerNotConfigured), status: nil), attempts: attemptsSoFar)
        }
        // A pipeline dry run's push to a provider that cannot check without delivering: not sent.
        if push.validateOnly && !SendMode.validatingProviders.contains(record.provider) {
            return .outcome(.sent(status: 0, providerMessageID: nil), attempts: attemptsSoFar)
        }
        let target = AdaptiveRateLimiter.target(of: push)
        guard await rates.acquire(target, maxWait: maxRateWait) else {
            // The provider asked us to slow down: park the push rather than hold the stream.
            RelayMetrics.rateDeferred(target: target).increment()
            return plannedRetry(
                record, attempts: attemptsSoFar,
                result: .retry(reason: .relay(.rateLimited), status: nil, retryAfter: nil))
        }
        let start = ContinuousClock.now
        let result = await limiter.withSlot {
            await Self.traced(record.provider, attempt: attemptsSoFar.saturatingAdd(1)) { await client.send(push) }
        }
        rates.observe(target, result: result)
        meters.sendDuration(record.provider).record(duration: ContinuousClock.now - start)
        meters.attempt(record.provider, result, label: Self.label(result)).increment()
        let attempts = attemptsSoFar.saturatingAdd(1)
        switch result {
        case .sent, .invalidToken:
            return .outcome(result, attempts: attempts)
        case .failed:
            return .dead(.rejected, result, attempts: attempts)
        case .retry:
            if attempts >= schedule.maxAttempts { return .dead(.attemptsExhausted, result, attempts: attempts) }
            return plannedRetry(record, attempts: attempts, result: result)
        }
    }

    /// A push whose device is still busy with earlier pushes while too many others wait:
    /// parked on the first retry topic as it is (no attempt counted, no ledger claim),
    /// out of its device's order, due at `due`. Its TTL still bounds how long it may be
    /// parked. A re-driven push keeps its `replay` mark.
    func parkedForBusyDevice(_ record: OutboundRecord, due: Int64, replay: [UInt8]?) -> [KafkaOutgoing]? {
        RelayMetrics.busyDeviceParked(provider: record.provider.rawValue).increment()
        var next = record
        next.schema = OutboundRecord.currentSchema
        next.notBeforeMs = due
        do {
            var message = try KafkaOutgoing.outbound(next, topic: topics.retry(1))
            message.headers.append((RecordHeader.due, Array("\(due)".utf8)))
            if let replay { message.headers.append((RecordHeader.replay, replay)) }
            return [message]
        } catch {
            logger.error("cannot encode a parked push", metadata: [LogKey.error: "\(error)"])
            return nil
        }
    }

    private func plannedRetry(_ record: OutboundRecord, attempts: Int, result: SendResult) -> Step {
        guard case .retry(let reason, _, let retryAfter) = result else { return .outcome(result, attempts: attempts) }
        let plan = schedule.plan(
            afterAttempt: max(attempts, 1), retryAfter: retryAfter, nowMs: clock.nowMillis(),
            random: Double.random(in: 0...1))
        if let expiresAt = record.expiresAt, plan.dueAtMs / 1000 > expiresAt {
            return .dead(.expired, result, attempts: attempts)
        }
        var next = record
        next.schema = OutboundRecord.currentSchema
        next.attempts = attempts
        next.lastError = reason.name
        next.notBeforeMs = plan.dueAtMs
        return .retry(next, stage: plan.stage, dueAtMs: plan.dueAtMs)
    }

    /// One provider request, in a client span of its own (provider, status, reason, attempt).
    static func traced(_ provider: Provider, attempt: Int, _ send: () async -> SendResult) async -> SendResult {
        // Only inside a traced push's span: never a trace of its own.
        guard RelayTracing.isEnabled, ServiceContext.current != nil else { return await send() }
        return await withSpan("send to \(provider.rawValue)", ofKind: .client) { span in
            let result = await send()
            span.attributes[SpanKey.provider] = provider.rawValue
            span.attributes[SpanKey.attempt] = attempt
            span.attributes[SpanKey.outcome] = label(result)
            if let status = result.status { span.attributes[SpanKey.httpStatus] = status }
            if let reason = result.reason {
                span.attributes[SpanKey.reason] = reason.name
                if case .sent = result {} else { span.setStatus(SpanStatus(code: .error, message: reason.name)) }
            }
            return result
        }
    }

    /// What a push's step was, on its span: the outcome, and a retry's or dead letter's reason.
    static func annotate(_ span: (any Span)?, _ step: Step) {
        guard let span else { return }
        switch step {
        case .outcome(let result, let attempts):
            span.attributes[SpanKey.outcome] = label(result)
            span.attributes[SpanKey.attempt] = attempts
            if let reason = result.reason { span.attributes[SpanKey.reason] = reason.name }
        case .alreadySent:
            span.attributes[SpanKey.outcome] = "already_sent"
        case .retry(let next, let stage, _):
            span.attributes[SpanKey.outcome] = "retry"
            span.attributes[SpanKey.attempt] = next.attempts ?? 0
            span.attributes[SpanKey.reason] = next.lastError ?? ""
            span.addEvent(
                SpanEvent(name: "parked for retry", attributes: ["pushrelay.retry_stage": .int64(Int64(stage))]))
        case .dead(let cause, let result, let attempts):
            span.attributes[SpanKey.outcome] = "dead_letter"
            span.attributes[SpanKey.attempt] = attempts
            span.attributes[SpanKey.reason] = result.reasonName
            span.addEvent(SpanEvent(name: "dead-lettered", attributes: ["pushrelay.cause": .string(cause.rawValue)]))
            span.setStatus(SpanStatus(code: .error, message: "dead-lettered: \(cause.rawValue)"))
        }
    }

    static func label(_ result: SendResult) -> String {
        switch result {
        case .sent: "sent"
        case .invalidToken: "invalid_token"
        case .retry: "retry"
        case .failed: "failed"
        }
    }

    /// What is published for a record's step. `token` is its clear token (empty when it
    /// did not open), for the redacted log line and a dead token's fingerprint.
    func messages(_ record: OutboundRecord, token: String, step: Step, ambiguous: Bool = false) throws
        -> [KafkaOutgoing]
    {
        let now = clock.nowMillis()
        // Built only for the steps that log: a sent push (the usual case) logs nothing.
        var metadata: Logger.Metadata { Self.logMetadata(record, token: token) }
        switch step {
        case .alreadySent:
            logger.info("already sent; not sending again", metadata: metadata)
            let outcome = delivery(
                record, .alreadySent, reason: nil, status: nil, attempts: record.attempts ?? 0, id: nil, now: now)
            return [try .delivery(outcome, topic: topics.deliveries)]
        case .retry(let next, let stage, let due):
            var metadata = metadata
            metadata[LogKey.reason] = "\(next.lastError ?? "")"
            metadata[LogKey.retryStage] = "\(stage)"
            metadata[LogKey.dueInMs] = "\(due - now)"
            logger.info("push parked for retry", metadata: metadata)
            var message = try KafkaOutgoing.outbound(next, topic: topics.retry(stage))
            message.headers.append((RecordHeader.due, Array("\(due)".utf8)))
            return [message]
        case .dead(let cause, let result, let attempts):
            let (reason, status) = Self.reasonAndStatus(result)
            var metadata = metadata
            metadata[LogKey.reason] = "\(reason)"
            metadata[LogKey.cause] = "\(cause.rawValue)"
            logger.warning("push dead-lettered", metadata: metadata)
            let dead = DeadLetterRecord(
                cause: cause, lastError: reason, httpStatus: status, attempts: attempts, deadAtMs: now, record: record)
            let outcome = delivery(
                record, cause == .expired ? .expired : .failed, reason: reason, status: status, attempts: attempts,
                now: now)
            return [try .deadLetter(dead, topic: topics.deadLetter), try .delivery(outcome, topic: topics.deliveries)]
        case .outcome(let result, let attempts):
            return try outcomeMessages(
                record, token: token, result: result, attempts: attempts, ambiguous: ambiguous, now: now)
        }
    }

    /// A push's log fields: its ids, provider and redacted token.
    static func logMetadata(_ record: OutboundRecord, token: String) -> Logger.Metadata {
        [
            LogKey.notificationID: "\(record.notificationID)", LogKey.deviceID: "\(record.deviceID)",
            LogKey.provider: "\(record.provider.rawValue)", LogKey.token: "\(DeviceToken.redact(token))",
        ]
    }

    /// What a provider's final answer publishes: the outcome, and for a dead token its feedback.
    private func outcomeMessages(
        _ record: OutboundRecord, token: String, result: SendResult, attempts: Int, ambiguous: Bool, now: Int64
    ) throws -> [KafkaOutgoing] {
        switch result {
        case .sent(let status, let id):
            if record.sendMode == .validateOnly {
                // Checked by the provider (`validate_only`), or not sent at all: no phone got it.
                let local = !SendMode.validatingProviders.contains(record.provider)
                let outcome = delivery(
                    record, .sent, reason: local ? StageReason.checkedLocally.rawValue : nil,
                    status: local ? nil : status, attempts: attempts, id: id, now: now)
                return [try .delivery(outcome, topic: topics.deliveries)]
            }
            meters.endToEnd(record.provider).recordMilliseconds(
                max(0, now.saturatingSubtract(record.acceptedAtMs)))
            // An ambiguous re-send is marked, so accounting can tell a possible duplicate from a bug.
            let reason = ambiguous ? StageReason.resentAfterInterruptedSend.rawValue : nil
            let outcome = delivery(record, .sent, reason: reason, status: status, attempts: attempts, id: id, now: now)
            return [try .delivery(outcome, topic: topics.deliveries)]
        case .invalidToken(let providerReason, let status, let timestamp):
            let reason = providerReason.name
            var metadata = Self.logMetadata(record, token: token)
            metadata[LogKey.reason] = "\(reason)"
            logger.info("provider reports a dead token", metadata: metadata)
            let feedback = FeedbackRecord(
                deviceID: record.deviceID, realmUUID: record.realmUUID, provider: record.provider,
                tokenFingerprint: Fingerprint.token(token), reason: OutcomeReason(name: reason),
                providerTimestampMs: timestamp,
                notificationID: record.notificationID, observedAtMs: now)
            let outcome = delivery(record, .invalidToken, reason: reason, status: status, attempts: attempts, now: now)
            return [try .feedback(feedback, topic: topics.feedback), try .delivery(outcome, topic: topics.deliveries)]
        case .retry, .failed:
            let (reason, status) = Self.reasonAndStatus(result)
            let outcome = delivery(record, .failed, reason: reason, status: status, attempts: attempts, now: now)
            return [try .delivery(outcome, topic: topics.deliveries)]
        }
    }

    /// The record's outcome on `push.deliveries`.
    private func delivery(
        _ record: OutboundRecord, _ outcome: DeliveryOutcome, reason: String?, status: Int?, attempts: Int,
        id: String? = nil, now: Int64
    ) -> DeliveryRecord {
        var delivery = DeliveryRecord(
            notificationID: record.notificationID, realmUUID: record.realmUUID, deviceID: record.deviceID,
            provider: record.provider, outcome: outcome, reason: reason.map(OutcomeReason.init(name:)),
            httpStatus: status,
            attempts: attempts, acceptedAtMs: record.acceptedAtMs, completedAtMs: now, providerMessageID: id)
        delivery.sendMode = record.sendMode
        return delivery
    }

    static func reasonAndStatus(_ result: SendResult) -> (String, Int?) {
        (result.reasonName, result.status)
    }
}
