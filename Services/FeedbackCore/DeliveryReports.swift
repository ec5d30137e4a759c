import AsyncHTTPClient
import CoreMetrics
import Crypto
import DeviceState
import Foundation
import Kafka
import LogKeys
import Logging
import NIOCore
import NIOHTTP1
import Providers
import PushCrypto
import PushModels
import RedisClient
import ServiceKit
import ServiceLifecycle
import Synchronization
import Tracing

/// The feedback hook's settings (docs/api/gorush.md, "Replace gorush").
public struct FeedbackHookSettings: Sendable {
    public var timeout: Duration
    /// Tries per delivery of the hook, 1 s, 2 s, 4 s … apart.
    public var attempts: Int
    /// Hook hosts that may resolve to non-public addresses (tests, private networks).
    public var allowedHosts: Set<String>

    public init(reader: SettingsReader) throws {
        timeout = try reader.milliseconds("pushrelay.feedback.hook.timeout.ms", default: 10_000)
        attempts = try reader.int("pushrelay.feedback.hook.attempts", default: 5)
        allowedHosts = Set(try reader.list("pushrelay.feedback.hook.allowed.hosts"))
    }
}

/// Reads `push.deliveries` (group `pushrelay-feedback.reports`): counts each realm's
/// outcomes per provider (gorush's `/api/stat/app`), and puts each failed push of a
/// server with a feedback hook on `push.hooks`, before the batch is committed. Reading
/// `push.hooks` (group `pushrelay-feedback.hooks`), it POSTs each to the hook as gorush's
/// `LogPushEntry`, signed, with retries; a record is committed once its delivery is
/// done or given up, so a stop loses none, and a slow receiver only holds the records in
/// flight (`PUSHRELAY_FEEDBACK_HOOKS_CONCURRENCY`).
public struct DeliveryReports: Sendable {
    let gorush: any GorushStore
    let realms: RealmDirectory
    let devices: DeviceStore
    let endpoints: OutboundEndpoints
    let settings: FeedbackHookSettings
    let publisher: any RecordPublisher
    let hooksTopic: String
    let logger: Logger

    public init(
        redis: RedisClient, keys: RedisKeys, devices: DeviceStore, settings: FeedbackHookSettings, caFile: String?,
        publisher: any RecordPublisher, hooksTopic: String, logger: Logger
    ) {
        self.gorush = RedisGorushStore(redis: redis, keys: keys)
        self.realms = RealmDirectory(redis: redis, keys: keys)
        self.devices = devices
        self.settings = settings
        self.endpoints = OutboundEndpoints(
            settings: .init(
                allowedHosts: settings.allowedHosts, caFile: caFile, readTimeout: settings.timeout,
                maxConnectionsPerOrigin: 2),
            logger: logger)
        self.publisher = publisher
        self.hooksTopic = hooksTopic
        self.logger = logger
    }

    static let failures: Set<DeliveryOutcome> = [.invalidToken, .failed, .expired]

    /// One fetch of `push.deliveries`: every outcome counted, each record once (one
    /// script per partition, `GorushStore.countOutcomes`), then the failures of servers
    /// with a hook published to `push.hooks`. A batch whose counting or publishing fails
    /// is read again; its records already counted are not counted again.
    public func handleBatch(_ records: [KafkaRecord]) async -> [RecordDisposition] {
        var counts: [CountedOutcome] = []
        var failures: [(DeliveryRecord, trace: [(name: String, value: [UInt8])])] = []
        var spans: [any Span] = []
        defer { for span in spans { span.end() } }
        for record in records {
            guard let delivery = decodeRecord(DeliveryRecord.self, from: record, logger: logger) else { continue }
            // A pipeline dry run's outcome is neither a delivery to count nor a failure to report.
            if delivery.sendMode == .validateOnly { continue }
            if let span = RelayTracing.startSpan("account outcome", of: record) {
                span.describe(record)
                span.attributes[SpanKey.notificationID] = delivery.notificationID.rawValue
                span.attributes[SpanKey.outcome] = delivery.outcome.rawValue
                if let reason = delivery.reason { span.attributes[SpanKey.reason] = reason.name }
                spans.append(span)
            }
            counts.append(
                CountedOutcome(
                    realm: delivery.realmUUID,
                    field: "\(delivery.provider?.rawValue ?? "none"):\(delivery.outcome.rawValue)",
                    topic: record.topic, partition: record.partition, offset: record.offset))
            if Self.failures.contains(delivery.outcome), delivery.deviceID != nil {
                failures.append((delivery, RelayTracing.traceHeaders(of: record)))
            }
        }
        if !counts.isEmpty {
            let outcomes = counts
            let counted: Bool? = await untilSuccess("count delivery outcomes", logger: logger) {
                try await gorush.countOutcomes(outcomes)
                return true
            }
            guard counted != nil else { return records.map { _ in .abandoned } }
        }
        if !failures.isEmpty {
            let reports = failures
            let published: Bool? = await untilSuccess("queue feedback hook deliveries", logger: logger) {
                try await publisher.publish(try await hookRecords(reports))
                return true
            }
            guard published != nil else { return records.map { _ in .abandoned } }
        }
        return records.map { _ in .done }
    }

    /// The failures whose server has a hook, as `push.hooks` records: each realm's owner
    /// and each owner's hook read once per batch.
    func hookRecords(_ failures: [(DeliveryRecord, trace: [(name: String, value: [UInt8])])]) async throws
        -> [KafkaOutgoing]
    {
        let realmIDs = Array(Set(failures.map(\.0.realmUUID)))
        let owners = Dictionary(
            uniqueKeysWithValues: zip(realmIDs, try await realms.owners(realmIDs)).compactMap { realm, owner in
                owner.map { (realm, $0) }
            })
        var hooked: [ServerID: Bool] = [:]
        for server in Set(owners.values) { hooked[server] = try await gorush.hookURL(server: server) != nil }
        return try failures.compactMap { delivery, trace in
            guard let server = owners[delivery.realmUUID], hooked[server] == true else { return nil }
            var message = try KafkaOutgoing.hook(
                HookDeliveryRecord(server: server, delivery: delivery), topic: hooksTopic)
            // The hook's delivery continues the push's trace.
            message.headers += trace
            return message
        }
    }

    /// One `push.hooks` record: POSTed to the server's hook with retries. A hook that
    /// keeps failing, was removed, or whose device is gone is logged and counted; the
    /// record is done either way (accounted for), and read again only after a stop.
    public func deliverHook(_ record: KafkaRecord) async -> RecordDisposition {
        guard let hookRecord = decodeRecord(HookDeliveryRecord.self, from: record, logger: logger) else {
            return .done
        }
        return await RelayTracing.withRecordSpan("feedback hook", of: record) { span in
            span?.describe(record)
            span?.attributes[SpanKey.notificationID] = hookRecord.delivery.notificationID.rawValue
            return await deliver(hookRecord)
        }
    }

    /// What a delivery needs from Redis: the hook, the device, the caller's `notif_id`.
    struct HookInputs: Sendable {
        var hook: GorushHook?
        var device: DeviceRecord?
        var callerID: String?
    }

    func deliver(_ record: HookDeliveryRecord) async -> RecordDisposition {
        let delivery = record.delivery
        let server = record.serverUUID
        guard let deviceID = delivery.deviceID else { return .done }
        // Redis errors are retried (a failover, a restart): a delivery is never dropped for them.
        guard
            let inputs = await untilSuccess(
                "read a feedback hook's delivery", logger: logger,
                {
                    HookInputs(
                        hook: try await gorush.hook(server: server), device: try await devices.device(deviceID),
                        callerID: try await gorush.callerID(of: delivery.notificationID))
                })
        else { return .abandoned }
        guard let hook = inputs.hook, let device = inputs.device else {
            // The hook was removed, or the device deleted, since the push failed.
            RelayMetrics.hookFailures.increment()
            logger.info(
                "feedback hook delivery dropped: the hook or the device is gone",
                metadata: [LogKey.notificationID: "\(delivery.notificationID)"])
            return .done
        }
        do {
            let secret = try devices.storage.openString(hook.sealedSecret, slot: .hookSecret(server: server))
            let body = Self.entry(delivery, device: device, notificationID: inputs.callerID)
            try await post(body, to: hook.url, secret: secret)
            return .done
        } catch is CancellationError {
            // Stopping: the record is not committed, and is delivered after the restart.
            return .abandoned
        } catch {
            RelayMetrics.hookFailures.increment()
            logger.warning(
                "feedback hook not delivered",
                metadata: [LogKey.notificationID: "\(delivery.notificationID)", LogKey.error: "\(error)"])
            return .done
        }
    }

    static func entry(_ delivery: DeliveryRecord, device: DeviceRecord, notificationID: String?) -> [UInt8] {
        var fields: [String: JSONValue] = [
            "type": "failed-push",
            "platform": .string(
                GorushNotification.Platform(provider: device.provider)?.name ?? device.provider.rawValue),
            "token": .string(device.token), "message": "",
            "error": .string(delivery.reason?.name ?? delivery.outcome.rawValue),
            "outcome": .string(delivery.outcome.rawValue),
            "pushrelay_notification_id": .string(delivery.notificationID.rawValue),
            "device_id": .int(device.id.rawValue),
        ]
        if let notificationID { fields["notif_id"] = .string(notificationID) }
        return Wire.canonical(.object(fields))
    }

    /// `X-PushRelay-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>`.
    static func signature(body: [UInt8], secret: String, at seconds: Int64) -> String {
        let mac = HMAC<SHA256>.authenticationCode(
            for: Array("\(seconds).".utf8) + body, using: SymmetricKey(data: Array(secret.utf8)))
        return "t=\(seconds),v1=" + mac.map { String(format: "%02x", $0) }.joined()
    }

    struct HookError: Error, CustomStringConvertible {
        var description: String
    }

    /// POSTs with retries, 1 s, 2 s, 4 s … apart. A shutdown between tries throws
    /// `CancellationError`: the record stays uncommitted and is delivered after the restart.
    func post(_ body: [UInt8], to url: String, secret: String) async throws {
        let endpoint = try PushEndpoint(url, field: "url")
        var lastError = "not tried"
        attempts: for attempt in 0..<max(1, settings.attempts) {
            if attempt > 0 {
                try? await cancelWhenGracefulShutdown { try await Task.sleep(for: .seconds(1 << min(attempt - 1, 6))) }
            }
            if Task.isCancelled || Task.isShuttingDownGracefully { throw CancellationError() }
            switch await endpoints.client(for: endpoint) {
            case .failure(let refusal):
                throw HookError(description: "hook refused: \(refusal)")
            case .success(let client):
                var request = HTTPClientRequest(url: url)
                request.method = .POST
                request.headers.add(name: HTTPHeaderName.contentType, value: "application/json; charset=utf-8")
                request.headers.add(
                    name: HTTPHeaderName.pushRelaySignature,
                    value: Self.signature(body: body, secret: secret, at: Int64(Date().timeIntervalSince1970)))
                request.body = .bytes(ByteBuffer(bytes: body))
                do {
                    let response = try await client.execute(
                        request, timeout: .milliseconds(Int64(RetrySchedule.milliseconds(settings.timeout))))
                    _ = try? await response.body.collect(upTo: 64 * 1024)
                    if (200..<300).contains(response.status.code) { return }
                    lastError = "HTTP \(response.status.code)"
                    // A 4xx other than 408/429 will not change on a retry.
                    if (400..<500).contains(response.status.code), ![408, 429].contains(response.status.code) {
                        break attempts
                    }
                } catch {
                    lastError = "\(error)"
                }
            }
        }
        throw HookError(description: "hook failed: \(lastError)")
    }

    public func shutdown() async { await endpoints.shutdown() }
}
