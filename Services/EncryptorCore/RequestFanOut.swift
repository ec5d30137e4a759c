import DeviceState
import Foundation
import Kafka
import LogKeys
import Logging
import Metrics
import PushCrypto
import PushModels
import RedisClient
import ServiceKit
import Tracing

/// The encryptor's fan-out: a request's target devices resolved, and one ready-to-send
/// push (or one outcome) built per device, by request kind.
extension EncryptorStage {
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

    func unsent(
        _ request: PushRequestRecord, device: DeviceID?, provider: Provider?, _ outcome: DeliveryOutcome,
        _ reason: OutcomeReason
    ) throws -> KafkaOutgoing {
        var record = DeliveryRecord(
            notificationID: request.notificationID, realmUUID: request.realmUUID, deviceID: device,
            provider: provider, outcome: outcome, reason: reason, attempts: 0, acceptedAtMs: request.acceptedAtMs,
            completedAtMs: clock.nowMillis())
        record.sendMode = request.sendMode
        return try .delivery(record, topic: topics.deliveries)
    }

    /// The outcome of a device the provider called dead, or nil while it is active.
    func inactive(_ request: PushRequestRecord, _ device: DeviceRecord) throws -> KafkaOutgoing? {
        guard !device.status.isActive else { return nil }
        return try unsent(
            request, device: device.id, provider: device.provider, .invalidToken,
            device.status.invalidReason ?? .stage(.deviceInvalid))
    }

    func nativeMessages(
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
            return [try unsent(request, device: nil, provider: nil, .failed, .stage(.pipelineKeyUnavailable))]
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
                messages.append(try unsent(request, device: id, provider: nil, .unknownDevice, .stage(.unknownDevice)))
                continue
            }
            guard device.realmUUID == request.realmUUID, device.userID == userID else {
                messages.append(
                    try unsent(request, device: id, provider: device.provider, .unknownDevice, .stage(.notUsersDevice)))
                continue
            }
            if let outcome = try inactive(request, device) {
                messages.append(outcome)
                continue
            }
            messages.append(
                try traced(device) {
                    switch try device.providerBody(plaintext: plaintext, type: type, acceptedAtMs: request.acceptedAtMs)
                    {
                    case .body(let body):
                        return try .outbound(
                            try outbound(request, device: device, delivery: DeliveryClass(type), body: body),
                            topic: topics.outbound)
                    case .unsent(let reason):
                        return try unsent(request, device: id, provider: device.provider, .failed, .stage(reason))
                    }
                })
        }
        return messages
    }

    func passThroughMessages(
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
                    try unsent(request, device: item.deviceID, provider: wanted, .unknownDevice, .stage(.unknownDevice))
                )
                continue
            }
            if let outcome = try inactive(request, device) {
                messages.append(outcome)
                continue
            }
            guard device.provider == wanted else {
                messages.append(
                    try unsent(
                        request, device: item.deviceID, provider: device.provider, .failed, .stage(.providerMismatch)))
                continue
            }
            let delivery = DeliveryClass(
                apnsPriority: item.apnsPriority ?? .immediate, apnsPushType: item.apnsPushType ?? .known(.alert),
                fcmPriority: item.fcmPriority ?? .known(.high))
            let body = ProviderBody.passThrough(provider: device.provider, payload: item.payload)
            messages.append(
                try traced(device) {
                    try .outbound(
                        try outbound(request, device: device, delivery: delivery, body: body), topic: topics.outbound)
                })
        }
        return messages
    }

    /// Zulip's legacy API: the server's own APNs and FCM payloads, readable by the relay,
    /// built into provider bodies as Zulip's bouncer builds them. The bodies travel
    /// sealed on `push.outbound`, like the token.
    func legacyMessages(
        _ request: PushRequestRecord, ids: [DeviceID], sealed: SealedBlob, devices: any DeviceDirectory
    ) async throws -> [KafkaOutgoing] {
        guard
            let payload = openContent(
                request, sealed, "legacy", { try Wire.decode(ZulipLegacyPayload.self, from: $0) })
        else {
            return try ids.map {
                try unsent(request, device: $0, provider: nil, .failed, .stage(.pipelineKeyUnavailable))
            }
        }
        var messages: [KafkaOutgoing] = []
        let targets = try await targets(request, ids: ids, from: devices) { device in
            guard case .zulipLegacy(let owner) = device.owner else { return false }
            return owner.belongs(to: request.serverUUID)
        }
        for target in targets {
            guard case .send(let device) = target else {
                if case .settled(let outcome) = target { messages.append(outcome) }
                continue
            }
            let body: JSONValue
            let delivery: DeliveryClass
            switch device.provider {
            case .apnsVoIP, .webpush, .simplepush, .hms, .wns:
                // Zulip's legacy API registers APNs and FCM devices only.
                messages.append(
                    try unsent(
                        request, device: device.id, provider: device.provider, .failed, .stage(.providerMismatch)))
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
                try traced(device) {
                    try .outbound(
                        try sealedOutbound(request, device: device, delivery: delivery, body: body),
                        topic: topics.outbound)
                })
        }
        return messages
    }

    /// One device of a request: to send to, or settled by an outcome already.
    enum Target {
        case send(DeviceRecord)
        case settled(KafkaOutgoing)
    }

    /// The devices `ids` name, in order: those `belongs` accepts and that are active are
    /// sent to; an unknown or foreign device is settled as `unknown_device`, a dead one
    /// by its invalidation.
    func targets(
        _ request: PushRequestRecord, ids: [DeviceID], from devices: any DeviceDirectory,
        belongs: (DeviceRecord) -> Bool
    ) async throws -> [Target] {
        let found = try await devices.devices(ids)
        return try ids.map { id in
            guard let device = found[id], belongs(device) else {
                return .settled(try unsent(request, device: id, provider: nil, .unknownDevice, .stage(.unknownDevice)))
            }
            return try inactive(request, device).map(Target.settled) ?? .send(device)
        }
    }

    /// Opens a sealed payload bound to no user (legacy and gorush content) and reads it;
    /// nil (logged) when it cannot be.
    func openContent<T>(
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
    func sealedOutbound(
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
    func gorushMessages(
        _ request: PushRequestRecord, ids: [DeviceID], sealed: SealedBlob, devices: any DeviceDirectory
    ) async throws -> [KafkaOutgoing] {
        guard let notification = openContent(request, sealed, "gorush", { GorushNotification(sealedForm: $0) }) else {
            return try ids.map {
                try unsent(request, device: $0, provider: nil, .failed, .stage(.pipelineKeyUnavailable))
            }
        }
        var messages: [KafkaOutgoing] = []
        let targets = try await targets(request, ids: ids, from: devices) { device in
            device.realmUUID == request.realmUUID && device.zulipLegacyOwner == nil
        }
        for target in targets {
            guard case .send(let device) = target else {
                if case .settled(let outcome) = target { messages.append(outcome) }
                continue
            }
            let body: JSONValue
            switch device.provider {
            case .apns: body = notification.apnsPayload()
            case .fcm: body = notification.fcmMessage()
            case .hms: body = notification.hmsMessage()
            case .apnsVoIP, .webpush, .simplepush, .wns:
                messages.append(
                    try unsent(
                        request, device: device.id, provider: device.provider, .failed, .stage(.providerMismatch)))
                continue
            }
            messages.append(
                try traced(device) {
                    var record = try sealedOutbound(
                        request, device: device, delivery: notification.delivery, body: body)
                    record.bodyForm = device.provider == .apns ? nil : .message
                    if let expiresAt = notification.expiresAt {
                        record.expiresAt = expiresAt
                    } else {
                        // gorush tells the provider nothing: the relay's expiry bounds only its retries.
                        record.providerExpiry = .providerDefault
                    }
                    record.collapseID = notification.collapseID
                    return try .outbound(record, topic: topics.outbound)
                })
        }
        return messages
    }

    /// One device's push (or its outcome when nothing can be sent), built in a span of
    /// its own when tracing is on: the record carries that span's context, so the
    /// dispatcher's span of this push is its child.
    func traced(_ device: DeviceRecord, _ build: () throws -> KafkaOutgoing) rethrows -> KafkaOutgoing {
        guard RelayTracing.isEnabled, ServiceContext.current != nil else { return try build() }
        return try RelayTracing.withChildSpan("encrypt for device") { span in
            span?.attributes[SpanKey.deviceID] = device.id.rawValue
            span?.attributes[SpanKey.provider] = device.provider.rawValue
            var message = [try build()]
            RelayTracing.stamp(&message)
            return message[0]
        }
    }

    /// The push for one device. The token travels sealed, bound to this notification
    /// and device, so only the dispatcher (which holds the pipeline keys) reads it.
    func outbound(
        _ request: PushRequestRecord, device: DeviceRecord, delivery: DeliveryClass, body: JSONValue
    ) throws -> OutboundRecord {
        let sealedToken = try pipelineKeys.seal(
            Array(device.token.utf8),
            binding: .token(notificationID: request.notificationID, realmUUID: request.realmUUID, deviceID: device.id))
        var record = OutboundRecord(
            notificationID: request.notificationID, deviceID: device.id, realmUUID: request.realmUUID,
            provider: device.provider, token: "", appID: device.appID, delivery: delivery, body: body,
            expiresAt: request.acceptedAtMs / 1000 + ttlSeconds, acceptedAtMs: request.acceptedAtMs,
            registeredAtMs: device.registeredAtMs, sealedToken: sealedToken)
        // A pipeline dry run stays one to the dispatcher.
        record.sendMode = request.sendMode
        return record
    }
}
