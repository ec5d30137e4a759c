import AsyncHTTPClient
import CoreMetrics
import Crypto
import DeviceState
import Foundation
import Kafka
import Logging
import NIOCore
import NIOHTTP1
import Providers
import PushCrypto
import PushModels
import RedisClient
import ServiceKit
import Synchronization

/// The feedback hook's settings (README, "Replace gorush").
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

/// Reads `push.deliveries` (group `pushrelay-feedback-reports`): counts each realm's
/// outcomes per provider (gorush's `/api/stat/app`), and POSTs each failed push of a
/// server with a feedback hook to it, as gorush's `LogPushEntry`, signed.
public struct DeliveryReports: Sendable {
    let gorush: any GorushStore
    let realms: RealmDirectory
    let devices: DeviceStore
    let endpoints: OutboundEndpoints
    let settings: FeedbackHookSettings
    let logger: Logger

    public init(
        redis: RedisClient, keys: RedisKeys, devices: DeviceStore, settings: FeedbackHookSettings, caFile: String?,
        logger: Logger
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
        self.logger = logger
    }

    static let failures: Set<DeliveryOutcome> = [.invalidToken, .failed, .expired]
    static let maxHooksInFlight = 256
    let hooksInFlight = Slots(Self.maxHooksInFlight)

    /// A count of free places, taken and given back without waiting.
    final class Slots: Sendable {
        private let free: Mutex<Int>
        init(_ count: Int) { free = Mutex(count) }
        func take() -> Bool {
            free.withLock { free in
                guard free > 0 else { return false }
                free -= 1
                return true
            }
        }
        func give() { free.withLock { $0 += 1 } }
    }

    /// One fetch of `push.deliveries`: every outcome counted in one pipelined round trip
    /// (one script per realm and partition, each record once however often it is read),
    /// then the failures' hooks, concurrently.
    public func handleBatch(_ records: [KafkaRecord]) async -> [RecordDisposition] {
        var counts: [CountedOutcome] = []
        var failures: [(DeliveryRecord, DeviceID)] = []
        for record in records {
            guard let delivery = decodeRecord(DeliveryRecord.self, from: record, logger: logger) else { continue }
            counts.append(
                CountedOutcome(
                    realm: delivery.realmUUID,
                    field: "\(delivery.provider?.rawValue ?? "none"):\(delivery.outcome.rawValue)",
                    source: "\(record.topic):\(record.partition)", offset: record.offset))
            if Self.failures.contains(delivery.outcome), let device = delivery.deviceID {
                failures.append((delivery, device))
            }
        }
        if !counts.isEmpty {
            let increments = counts
            let counted: Bool? = await untilSuccess("count delivery outcomes", logger: logger) {
                try await gorush.countOutcomes(increments)
                return true
            }
            guard counted != nil else { return records.map { _ in .abandoned } }
        }
        // Hooks go on their own: a slow or failing receiver never holds up the counters,
        // the offsets or other servers' hooks. At most `maxHooksInFlight` at once; past it
        // a report is dropped and counted.
        for (delivery, device) in failures {
            guard hooksInFlight.take() else {
                RelayMetrics.hookFailures.increment()
                logger.warning(
                    "feedback hook dropped: too many in flight",
                    metadata: [LogKey.notificationID: "\(delivery.notificationID)"])
                continue
            }
            Task {
                await reportFailure(delivery, device: device)
                hooksInFlight.give()
            }
        }
        return records.map { _ in .done }
    }

    /// gorush's `LogPushEntry` for a failed push, POSTed to the owning server's hook with
    /// retries. The token is sent whole: the hook is the server's own, and it needs the
    /// token to forget it. A hook that keeps failing is logged and counted, not retried
    /// for ever.
    func reportFailure(_ delivery: DeliveryRecord, device deviceID: DeviceID) async {
        do {
            guard let server = try await realms.owners([delivery.realmUUID.rawValue]).first ?? nil,
                let hook = try await gorush.hook(server: server), let device = try await devices.device(deviceID)
            else { return }
            let secret = try devices.storage.openString(hook.sealedSecret, slot: .hookSecret(server: server))
            let notifID = try await gorush.callerID(of: delivery.notificationID)
            let body = Self.entry(delivery, device: device, notificationID: notifID)
            try await post(body, to: hook.url, secret: secret)
        } catch {
            RelayMetrics.hookFailures.increment()
            logger.warning(
                "feedback hook not delivered",
                metadata: [LogKey.notificationID: "\(delivery.notificationID)", LogKey.error: "\(error)"])
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

    func post(_ body: [UInt8], to url: String, secret: String) async throws {
        let endpoint = try PushEndpoint(url, field: "url")
        var lastError = "not tried"
        for attempt in 0..<max(1, settings.attempts) {
            if attempt > 0 { try await Task.sleep(for: .seconds(1 << min(attempt - 1, 6))) }
            switch await endpoints.client(for: endpoint) {
            case .failure(let refusal):
                throw HookError(description: "hook refused: \(refusal)")
            case .success(let client):
                var request = HTTPClientRequest(url: url)
                request.method = .POST
                request.headers.add(name: "content-type", value: "application/json; charset=utf-8")
                request.headers.add(
                    name: "x-pushrelay-signature",
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
                        break
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
