import DeviceState
import Foundation
import Kafka
import Logging
import Metrics
import PushCrypto
import PushModels
import RedisClient
import ServiceKit

/// encryptor: resolves each request's devices, encrypts native notifications with each
/// device's key, and emits one `push.outbound` record per device (or its outcome on
/// `push.deliveries` when there is nothing to send).
public struct EncryptorConfiguration: Sendable {
    public var common: CommonSettings
    public var consumer: KafkaConsumerConfiguration
    public var pipelineKeys: PipelineKeyring
    public var storageKeys: StorageKeyring
    /// APNs expiration / FCM ttl from acceptance (`PUSHRELAY_NOTIFICATION_TTL_SECONDS`).
    public var ttlSeconds: Int64
    /// Requests handled together at most (`PUSHRELAY_ENCRYPTOR_BATCH`): what one fetch
    /// returned, up to this many, costs one Redis round trip and one produce wait.
    public var maxBatch: Int

    public init(reader: SettingsReader) throws {
        common = try CommonSettings(service: "encryptor", defaultPort: 8081, reader: reader)
        consumer = try common.consumer(stage: "encryptor", topic: common.topics.requests, defaultConcurrency: 256)
        maxBatch = try reader.int("pushrelay.encryptor.batch", default: 64)
        pipelineKeys = try reader.pipelineKeyring()
        storageKeys = try reader.storageKeyring()
        ttlSeconds = Int64(try reader.int("pushrelay.notification.ttl.seconds", default: 86400))
    }
}

public enum Encryptor {
    /// Builds the stage on Kafka and Redis and runs it until SIGTERM.
    public static func run(_ configuration: EncryptorConfiguration) async throws {
        let settings = configuration.common
        let observability = Observability.bootstrap(service: "encryptor", level: settings.logLevel)
        let logger = observability.logger
        let redis = RedisClient(configuration: settings.redis)
        let producer = try KafkaProducer(configuration: try settings.kafka(), logger: logger)
        let consumer = try KafkaConsumer(configuration: configuration.consumer, logger: logger)
        let stage = EncryptorStage(
            devices: DeviceStore(
                redis: redis, keys: settings.redisKeys, storage: configuration.storageKeys),
            pipelineKeys: configuration.pipelineKeys, publisher: producer, topics: settings.topics,
            ttlSeconds: configuration.ttlSeconds, clock: SystemClock(), logger: logger)
        let app = opsApplication(
            settings: settings, readiness: Readiness(kafka: { consumer.isConnected() }, redis: redis),
            observability: observability)
        try await runServices(
            [
                KafkaProducerService(producer: producer), app,
                KafkaConsumerService(
                    consumer: consumer, maxBatch: configuration.maxBatch, batchHandler: stage.handleBatch),
            ],
            shutdownTimeout: settings.shutdownTimeout, logger: logger)
    }
}

/// The encryptor's logic, on its seams: a device directory, a record publisher, a clock.
public struct EncryptorStage: Sendable {
    let devices: any DeviceDirectory
    let pipelineKeys: PipelineKeyring
    let publisher: any RecordPublisher
    let topics: TopicNames
    let ttlSeconds: Int64
    let clock: any WallClock
    let logger: Logger

    public init(
        devices: any DeviceDirectory, pipelineKeys: PipelineKeyring, publisher: any RecordPublisher, topics: TopicNames,
        ttlSeconds: Int64, clock: any WallClock, logger: Logger
    ) {
        self.devices = devices
        self.pipelineKeys = pipelineKeys
        self.publisher = publisher
        self.topics = topics
        self.ttlSeconds = ttlSeconds
        self.clock = clock
        self.logger = logger
    }

    public func handle(_ record: KafkaRecord) async -> RecordDisposition {
        guard let request = decodeRecord(PushRequestRecord.self, from: record, logger: logger) else {
            return await accountForMalformed(record)
        }
        return await handle(request, from: record)
    }

    /// Handles one wave of a fetch (no two records share a key). The devices of every
    /// request are read in two pipelined Redis round trips, and every output is
    /// published at once, in record order, and awaited together. A batch that fails
    /// twice, whatever the error, is handled again request by request, concurrently:
    /// one request that cannot be encrypted or published, or whose device waits for a
    /// storage key, then holds up only itself. An output published before the failure
    /// may go out twice; the dispatcher's ledger sends it once.
    public func handleBatch(_ records: [KafkaRecord]) async -> [RecordDisposition] {
        var dispositions = [RecordDisposition](repeating: .done, count: records.count)
        var requests: [(index: Int, request: PushRequestRecord)] = []
        for (index, record) in records.enumerated() {
            if let request = decodeRecord(PushRequestRecord.self, from: record, logger: logger) {
                requests.append((index, request))
            } else {
                dispositions[index] = await accountForMalformed(record)
            }
        }
        guard requests.count > 1 else {
            for (index, request) in requests { dispositions[index] = await handle(request, from: records[index]) }
            return dispositions
        }
        let decoded = requests
        let start = ContinuousClock.now
        let outcome = await retrying(
            "encrypt a batch of requests", logger: logger, permanentAttempts: 2, isTransient: { _ in false }
        ) {
            let directory = try await PrefetchedDevices.read(for: decoded.map(\.request), from: self.devices)
            var messages: [KafkaOutgoing] = []
            for (index, request) in decoded {
                messages += Self.marked(
                    try await self.messages(for: request, from: directory), replay: records[index])
            }
            try await publisher.publish(messages)
            return true
        }
        switch outcome {
        case .succeeded:
            let elapsed = ContinuousClock.now - start
            for _ in requests { RelayMetrics.stageDuration("encryptor").record(duration: elapsed) }
        case .interrupted:
            for (index, _) in requests { dispositions[index] = .abandoned }
        case .failed:
            await withTaskGroup(of: (Int, RecordDisposition).self) { group in
                for (index, request) in decoded {
                    group.addTask { (index, await handle(request, from: records[index])) }
                }
                for await (index, disposition) in group { dispositions[index] = disposition }
            }
        }
        return dispositions
    }

    /// A re-driven request's outputs stay marked, so the dispatcher's dedupe knows them.
    static func marked(_ messages: [KafkaOutgoing], replay record: KafkaRecord) -> [KafkaOutgoing] {
        guard let replay = record.header(RecordHeader.replay) else { return messages }
        var messages = messages
        for i in messages.indices { messages[i].headers.append((RecordHeader.replay, replay)) }
        return messages
    }

    private func handle(_ request: PushRequestRecord, from record: KafkaRecord) async -> RecordDisposition {
        let start = ContinuousClock.now
        let outcome = await retrying("encrypt request", logger: logger, isTransient: Self.isTransient) {
            try await publisher.publish(Self.marked(try await self.messages(for: request), replay: record))
            return true
        }
        RelayMetrics.stageDuration("encryptor").record(duration: ContinuousClock.now - start)
        switch outcome {
        case .succeeded: return .done
        case .interrupted: return .abandoned
        case .failed(let error):
            // The same error every time: the request is accounted for as failed rather
            // than retried for ever behind the rest of its partition.
            logger.error(
                "request cannot be encrypted; recorded as failed",
                metadata: [LogKey.notificationID: "\(request.notificationID)", LogKey.error: "\(error)"])
            let ids: [DeviceID?] = (request.deviceIDs ?? []).map { Optional($0) }
            return await publishOutcomes(
                try (ids.isEmpty ? [nil] : ids).map {
                    try unsent(request, device: $0, provider: nil, .failed, "encryption_failed")
                })
        }
    }

    /// Errors that say Redis or Kafka is away, a storage key is missing (an operator's
    /// fix) or libsodium is unusable in this process: retried for as long as it takes. Anything else (a payload that cannot be
    /// encrypted or encoded, a record too large for the topic) fails the same way every
    /// time.
    static func isTransient(_ error: any Error) -> Bool {
        switch error {
        case let error as CryptoError: error.code == .invalidKey || error.code == .libraryUnavailable
        case let error as KafkaError: error.code.name != "MSG_SIZE_TOO_LARGE"
        case is EncodingError, is DecodingError, is PayloadValidationError: false
        default: true
        }
    }

    /// A record on `push.requests` that does not decode as a request: when its
    /// notification and realm can still be read, the realm's outcome stream says it
    /// failed (`malformed_request`); either way it is counted and skipped.
    func accountForMalformed(_ record: KafkaRecord) async -> RecordDisposition {
        await publishOutcomes(
            [
                malformedOutcome(
                    record, reason: "malformed_request", nowMs: clock.nowMillis(), topic: topics.deliveries)
            ].compactMap { $0 })
    }

    /// Publishes outcomes, retrying until Kafka takes them.
    private func publishOutcomes(_ messages: @autoclosure () throws -> [KafkaOutgoing]) async -> RecordDisposition {
        guard let messages = try? messages() else { return .done }
        return await publishUntilAcknowledged(messages, to: publisher, logger: logger)
    }

    /// The outbound and delivery records one request turns into.
    public func messages(for request: PushRequestRecord) async throws -> [KafkaOutgoing] {
        try await messages(for: request, from: devices)
    }

    func messages(for request: PushRequestRecord, from devices: any DeviceDirectory) async throws -> [KafkaOutgoing] {
        switch request.request {
        case .native(let userID, let deviceIDs, let type, let sealed):
            try await nativeMessages(
                request, userID: userID, deviceIDs: deviceIDs, type: type, sealed: sealed, devices: devices)
        case .passThrough(let items): try await passThroughMessages(request, items: items, devices: devices)
        case .legacy(_, let deviceIDs, let sealed):
            try await legacyMessages(request, ids: deviceIDs, sealed: sealed, devices: devices)
        case .gorush(let deviceIDs, let sealed):
            try await gorushMessages(request, ids: deviceIDs, sealed: sealed, devices: devices)
        }
    }

    private func unsent(
        _ request: PushRequestRecord, device: DeviceID?, provider: Provider?, _ outcome: DeliveryOutcome,
        _ reason: String
    ) throws -> KafkaOutgoing {
        try .delivery(
            DeliveryRecord(
                notificationID: request.notificationID, realmUUID: request.realmUUID, deviceID: device,
                provider: provider, outcome: outcome, reason: reason, attempts: 0, acceptedAtMs: request.acceptedAtMs,
                completedAtMs: clock.nowMillis()), topic: topics.deliveries)
    }

    /// The outcome of a device the provider called dead, or nil while it is active.
    private func inactive(_ request: PushRequestRecord, _ device: DeviceRecord) throws -> KafkaOutgoing? {
        guard device.status != .active else { return nil }
        return try unsent(
            request, device: device.id, provider: device.provider, .invalidToken,
            device.invalidReason ?? "device_invalid")
    }

    private func nativeMessages(
        _ request: PushRequestRecord, userID: Int64, deviceIDs: [DeviceID]?, type: NotificationType, sealed: SealedBlob,
        devices: any DeviceDirectory
    ) async throws -> [KafkaOutgoing] {
        let plaintext: [UInt8]
        do {
            plaintext = try pipelineKeys.open(
                sealed,
                binding: .payload(notificationID: request.notificationID, realmUUID: request.realmUUID, userID: userID))
        } catch {
            logger.error(
                "cannot open sealed payload",
                metadata: [LogKey.notificationID: "\(request.notificationID)", LogKey.error: "\(error)"])
            return [try unsent(request, device: nil, provider: nil, .failed, "pipeline_key_unavailable")]
        }
        let ids: [DeviceID]
        if let requested = deviceIDs {
            ids = requested
        } else {
            ids = try await devices.deviceIDs(realm: request.realmUUID, userID: userID)
        }
        let found = try await devices.devices(ids)
        var messages: [KafkaOutgoing] = []
        for id in ids {
            guard let device = found[id] else {
                messages.append(try unsent(request, device: id, provider: nil, .unknownDevice, "unknown_device"))
                continue
            }
            guard device.realmUUID == request.realmUUID, device.userID == userID else {
                messages.append(
                    try unsent(request, device: id, provider: device.provider, .unknownDevice, "not_users_device"))
                continue
            }
            if let outcome = try inactive(request, device) {
                messages.append(outcome)
                continue
            }
            let body: JSONValue
            switch try Self.body(for: device, plaintext: plaintext, type: type, acceptedAtMs: request.acceptedAtMs) {
            case .body(let built): body = built
            case .unsent(let reason):
                messages.append(try unsent(request, device: id, provider: device.provider, .failed, reason))
                continue
            }
            messages.append(
                try .outbound(
                    try outbound(request, device: device, delivery: DeliveryClass(type), body: body),
                    topic: topics.outbound))
        }
        return messages
    }

    enum BuiltBody: Equatable {
        case body(JSONValue)
        /// Nothing can be sent to this device; the reason goes on its outcome.
        case unsent(String)
    }

    /// The provider body for one device, encrypted by its scheme:
    /// - Web Push, and simple push with Web Push keys: `aes128gcm` to the subscription;
    /// - simple push without keys: a wake-up, no content (the `version` number only);
    /// - a device `secret`: MTProto 2.0, `{"p": …}`;
    /// - a push key: secretbox, Zulip's `push_key_id` and `encrypted_data`.
    static func body(for device: DeviceRecord, plaintext: [UInt8], type: NotificationType, acceptedAtMs: Int64) throws
        -> BuiltBody
    {
        if let subscription = DeviceToken.webPushSubscription(provider: device.provider, token: device.token) {
            guard plaintext.count <= WebPushEncryption.maxPlaintext else { return .unsent("payload_too_large") }
            return .body(ProviderBody.webPush(try WebPushEncryption.encrypt(plaintext, to: subscription)))
        }
        if device.provider == .simplepush { return .body(ProviderBody.wakeUp(version: acceptedAtMs)) }
        guard let keyID = device.currentKeyID, let key = device.currentKey else { return .unsent("no_push_key") }
        switch key.scheme {
        case .mtproto2:
            return .body(ProviderBody.mtproto(try key.encrypt(plaintext)))
        case .secretbox, .aes128gcm:
            return .body(
                ProviderBody.encrypted(
                    provider: device.provider, pushKeyID: keyID, encryptedData: try key.encrypt(plaintext), type: type))
        }
    }

    private func passThroughMessages(
        _ request: PushRequestRecord, items: [PassThroughItem], devices: any DeviceDirectory
    ) async throws -> [KafkaOutgoing] {
        let found = try await devices.devices(items.map(\.deviceID))
        var messages: [KafkaOutgoing] = []
        for item in items {
            let wanted: Provider = item.apnsPushType != nil || item.apnsPriority != nil ? .apns : .fcm
            guard let device = found[item.deviceID], device.realmUUID == request.realmUUID,
                device.zulipLegacyOwner == nil
            else {
                messages.append(
                    try unsent(request, device: item.deviceID, provider: wanted, .unknownDevice, "unknown_device"))
                continue
            }
            if let outcome = try inactive(request, device) {
                messages.append(outcome)
                continue
            }
            guard device.provider == wanted else {
                messages.append(
                    try unsent(request, device: item.deviceID, provider: device.provider, .failed, "provider_mismatch"))
                continue
            }
            let delivery = DeliveryClass(
                apnsPriority: item.apnsPriority ?? .immediate, apnsPushType: item.apnsPushType ?? .known(.alert),
                fcmPriority: item.fcmPriority ?? .known(.high))
            let body = ProviderBody.passThrough(provider: device.provider, payload: item.payload)
            messages.append(
                try .outbound(
                    try outbound(request, device: device, delivery: delivery, body: body), topic: topics.outbound))
        }
        return messages
    }

    /// Zulip's legacy API: the server's own APNs and FCM payloads, readable by the relay,
    /// built into provider bodies as Zulip's bouncer builds them. The bodies travel
    /// sealed on `push.outbound`, like the token.
    private func legacyMessages(
        _ request: PushRequestRecord, ids: [DeviceID], sealed: SealedBlob, devices: any DeviceDirectory
    ) async throws -> [KafkaOutgoing] {
        guard
            let payload = openContent(
                request, sealed, "legacy", { try Wire.decode(ZulipLegacyPayload.self, from: $0) })
        else {
            return try ids.map { try unsent(request, device: $0, provider: nil, .failed, "pipeline_key_unavailable") }
        }
        let found = try await devices.devices(ids)
        let owner = "\(request.serverUUID)|"
        var messages: [KafkaOutgoing] = []
        for id in ids {
            guard let device = found[id], device.zulipLegacyOwner?.hasPrefix(owner) == true else {
                messages.append(try unsent(request, device: id, provider: nil, .unknownDevice, "unknown_device"))
                continue
            }
            if let outcome = try inactive(request, device) {
                messages.append(outcome)
                continue
            }
            let body: JSONValue
            let delivery: DeliveryClass
            switch device.provider {
            case .apnsVoIP, .webpush, .simplepush, .hms, .wns:
                // Zulip's legacy API registers APNs and FCM devices only.
                messages.append(
                    try unsent(request, device: id, provider: device.provider, .failed, "provider_mismatch"))
                continue
            case .apns:
                let (pushType, priority) = ZulipLegacy.apnsDelivery(payload.apnsPayload)
                body = ZulipLegacy.apnsBody(payload.apnsPayload)
                delivery = DeliveryClass(
                    apnsPriority: APNsPriority(priority), apnsPushType: Named(pushType),
                    fcmPriority: Named(payload.fcmPriority))
            case .fcm:
                body = ZulipLegacy.fcmData(payload.gcmPayload)
                delivery = DeliveryClass(
                    apnsPriority: .immediate, apnsPushType: .known(.alert), fcmPriority: Named(payload.fcmPriority))
            }
            messages.append(
                try .outbound(
                    try sealedOutbound(request, device: device, delivery: delivery, body: body), topic: topics.outbound)
            )
        }
        return messages
    }

    /// Opens a sealed payload bound to no user (legacy and gorush content) and reads it;
    /// nil (logged) when it cannot be.
    private func openContent<T>(
        _ request: PushRequestRecord, _ sealed: SealedBlob, _ kind: String, _ read: ([UInt8]) throws -> T?
    ) -> T? {
        do {
            let plaintext = try pipelineKeys.open(
                sealed,
                binding: .payload(notificationID: request.notificationID, realmUUID: request.realmUUID, userID: nil))
            guard let content = try read(plaintext) else { throw EncodingError.unreadable }
            return content
        } catch {
            logger.error(
                "cannot open sealed \(kind) payload",
                metadata: [LogKey.notificationID: "\(request.notificationID)", LogKey.error: "\(error)"])
            return nil
        }
    }

    /// A push whose body travels sealed (content the relay can read), bound to the notification and device.
    private func sealedOutbound(
        _ request: PushRequestRecord, device: DeviceRecord, delivery: DeliveryClass, body: JSONValue
    ) throws -> OutboundRecord {
        var record = try outbound(request, device: device, delivery: delivery, body: .null)
        record.body = []
        record.sealedBody = try pipelineKeys.seal(
            Wire.canonical(body),
            binding: .body(notificationID: request.notificationID, realmUUID: request.realmUUID, deviceID: device.id))
        return record
    }

    /// gorush's API and the Status push server: the notification in gorush's form, built
    /// into each device's provider body as gorush builds it (`GorushNotification`). Like
    /// legacy content, the bodies travel sealed on `push.outbound`.
    private func gorushMessages(
        _ request: PushRequestRecord, ids: [DeviceID], sealed: SealedBlob, devices: any DeviceDirectory
    ) async throws -> [KafkaOutgoing] {
        guard let notification = openContent(request, sealed, "gorush", { GorushNotification(sealedForm: $0) }) else {
            return try ids.map { try unsent(request, device: $0, provider: nil, .failed, "pipeline_key_unavailable") }
        }
        let found = try await devices.devices(ids)
        var messages: [KafkaOutgoing] = []
        for id in ids {
            guard let device = found[id], device.realmUUID == request.realmUUID, device.zulipLegacyOwner == nil else {
                messages.append(try unsent(request, device: id, provider: nil, .unknownDevice, "unknown_device"))
                continue
            }
            if let outcome = try inactive(request, device) {
                messages.append(outcome)
                continue
            }
            let body: JSONValue
            switch device.provider {
            case .apns: body = notification.apnsPayload()
            case .fcm: body = notification.fcmMessage()
            case .hms: body = notification.hmsMessage()
            case .apnsVoIP, .webpush, .simplepush, .wns:
                messages.append(
                    try unsent(request, device: id, provider: device.provider, .failed, "provider_mismatch"))
                continue
            }
            var record = try sealedOutbound(request, device: device, delivery: notification.delivery, body: body)
            record.bodyForm = device.provider == .apns ? nil : .message
            if let expiresAt = notification.expiresAt { record.expiresAt = expiresAt }
            record.collapseID = notification.collapseID
            messages.append(try .outbound(record, topic: topics.outbound))
        }
        return messages
    }

    /// The push for one device. The token travels sealed, bound to this notification
    /// and device, so only the dispatcher (which holds the pipeline keys) reads it.
    private func outbound(
        _ request: PushRequestRecord, device: DeviceRecord, delivery: DeliveryClass, body: JSONValue
    ) throws -> OutboundRecord {
        let sealedToken = try pipelineKeys.seal(
            Array(device.token.utf8),
            binding: .token(notificationID: request.notificationID, realmUUID: request.realmUUID, deviceID: device.id))
        return OutboundRecord(
            notificationID: request.notificationID, deviceID: device.id, realmUUID: request.realmUUID,
            provider: device.provider, token: "", appID: device.appID, delivery: delivery, body: body,
            expiresAt: request.acceptedAtMs / 1000 + ttlSeconds, acceptedAtMs: request.acceptedAtMs,
            registeredAtMs: device.registeredAtMs, sealedToken: sealedToken)
    }
}

extension EncodingError {
    /// A sealed payload that opened but is not the form its kind says.
    static var unreadable: EncodingError {
        .invalidValue((), .init(codingPath: [], debugDescription: "sealed payload is not in its kind's form"))
    }
}

/// The devices of a batch of requests, read in two pipelined round trips at most (the
/// users' device sets, then every device record). Whatever was not read (past
/// `maxDevices`) is asked of the directory behind it.
struct PrefetchedDevices: DeviceDirectory {
    private struct User: Hashable {
        var realm: RealmID
        var userID: Int64
    }

    /// Device records read for one batch at most; a request past it reads its own.
    static let maxDevices = 4096

    private let base: any DeviceDirectory
    private let users: [User: [DeviceID]]
    private let read: Set<DeviceID>
    private let found: [DeviceID: DeviceRecord]

    static func read(for requests: [PushRequestRecord], from base: any DeviceDirectory) async throws
        -> PrefetchedDevices
    {
        var wanted: [User] = []
        var seen: Set<User> = []
        var ids: Set<DeviceID> = []
        for request in requests {
            switch request.request {
            case .native(let userID, let deviceIDs, _, _):
                if let deviceIDs {
                    if ids.count + deviceIDs.count <= maxDevices { ids.formUnion(deviceIDs) }
                } else if seen.insert(User(realm: request.realmUUID, userID: userID)).inserted {
                    wanted.append(User(realm: request.realmUUID, userID: userID))
                }
            case .passThrough(let items):
                if ids.count + items.count <= maxDevices { ids.formUnion(items.map(\.deviceID)) }
            case .legacy(_, let deviceIDs, _), .gorush(let deviceIDs, _):
                if ids.count + deviceIDs.count <= maxDevices { ids.formUnion(deviceIDs) }
            }
        }
        var users: [User: [DeviceID]] = [:]
        if !wanted.isEmpty {
            let lists = try await base.deviceIDs(users: wanted.map { ($0.realm, $0.userID) })
            for (user, list) in zip(wanted, lists) {
                users[user] = list
                if ids.count + list.count <= maxDevices { ids.formUnion(list) }
            }
        }
        let found = ids.isEmpty ? [:] : try await base.devices(Array(ids))
        return PrefetchedDevices(base: base, users: users, read: ids, found: found)
    }

    func deviceIDs(realm: RealmID, userID: Int64) async throws -> [DeviceID] {
        if let ids = users[User(realm: realm, userID: userID)] { return ids }
        return try await base.deviceIDs(realm: realm, userID: userID)
    }

    func devices(_ ids: [DeviceID]) async throws -> [DeviceID: DeviceRecord] {
        let unread = ids.filter { !read.contains($0) }
        var result = unread.isEmpty ? [:] : try await base.devices(unread)
        for id in ids { if let device = found[id] { result[id] = device } }
        return result
    }
}
