import DeviceState
import Hummingbird
import PushModels

/// `POST /v1/notify` with `"dry_run": true`: the request is checked as a notify is, its
/// devices resolved and each one's push built and encrypted as the encryptor would, and
/// the answer says per device what would be sent, or why nothing would. Nothing is
/// published, nothing is written, no rate beyond the request's own is used, and no
/// provider is contacted: every check is local (`"checked": "local"`).
extension NativeController {
    /// `dry_run`: a JSON boolean (or `"true"`/`"false"` in a form); absent is false.
    static func isDryRun(_ body: RequestFields) throws -> Bool {
        switch body.json["dry_run"] {
        case nil, .null?: return false
        case .bool(let flag)?: return flag
        case .string("true")?: return true
        case .string("false")?: return false
        default: throw APIError.badRequest("dry_run: must be true or false", field: "dry_run")
        }
    }

    func dryRun(realm: RealmID, userID: Int64, ids: [DeviceID], type: NotificationType, plaintext: [UInt8])
        async throws -> Response
    {
        let found = try await devices.devices(ids)
        let now = Wire.nowMillis()
        // What the dispatchers say they can send to; nil while none has said.
        let enabled = try? await providers.enabledProviders(nowMs: now)
        var answers: [JSONValue] = []
        var deleteIDs: [DeviceID] = []
        var sendable = 0
        for id in ids {
            var fields: [String: JSONValue] = ["device_id": .int(id.rawValue)]
            guard let device = found[id], device.zulipLegacyOwner == nil else {
                deleteIDs.append(id)
                answers.append(.object(fields.merging(Self.skip(.unknownDevice)) { _, new in new }))
                continue
            }
            fields["provider"] = .string(device.provider.rawValue)
            guard device.realmUUID == realm, device.userID == userID else {
                deleteIDs.append(id)
                answers.append(.object(fields.merging(Self.skip(.notUsersDevice)) { _, new in new }))
                continue
            }
            guard device.status.isActive else {
                deleteIDs.append(id)
                answers.append(.object(fields.merging(Self.skip(.deviceInvalid)) { _, new in new }))
                continue
            }
            switch try device.providerBody(plaintext: plaintext, type: type, acceptedAtMs: now) {
            case .unsent(let reason):
                fields["result"] = "fail"
                fields["reason"] = .string(reason.rawValue)
            case .body(let body):
                sendable += 1
                fields.merge(
                    Self.push(
                        device.provider, delivery: DeliveryClass(type), body: body,
                        expiresAt: now / 1000 + limits.notificationTTLSeconds, collapseID: nil)
                ) { _, new in new }
                if let enabled { fields["provider_configured"] = .bool(enabled.contains(device.provider)) }
            }
            answers.append(.object(fields))
        }
        return success([
            "dry_run": true, "checked": "local", "device_count": .int(Int64(sendable)),
            "delete_device_ids": .array(Array(Set(deleteIDs)).sorted().map { .int($0.rawValue) }),
            "devices": .array(answers),
        ])
    }

    static func skip(_ reason: StageReason) -> [String: JSONValue] {
        ["result": "skip", "reason": .string(reason.rawValue)]
    }

    /// What the dispatcher would send: the provider's push type and priority as it sets
    /// them, the expiry (nil: the provider's default), the collapse id, and the body's
    /// size once built (and, for end-to-end encrypted content, encrypted).
    static func push(
        _ provider: Provider, delivery: DeliveryClass, body: JSONValue, expiresAt: Int64?, collapseID: String?
    ) -> [String: JSONValue] {
        var fields: [String: JSONValue] = [
            "result": "send", "body_bytes": .int(Int64(Wire.canonical(body).count)),
            "expires_at": expiresAt.map { .int($0) } ?? .null, "collapse_id": collapseID.map { .string($0) } ?? .null,
        ]
        switch provider {
        case .apns, .apnsVoIP:
            fields["push_type"] = .string(provider == .apnsVoIP ? "voip" : delivery.apnsPushType.name)
            fields["priority"] = delivery.apnsPriority.map { .int(Int64($0.value)) } ?? .null
        case .fcm, .hms:
            fields["priority"] = delivery.fcmPriority.map { .string($0.name) } ?? .null
        default:
            break
        }
        return fields
    }
}
