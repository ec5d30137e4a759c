import DeviceState
import Hummingbird
import PushModels

/// `POST /v1/notify` with `"dry_run": true`: the request is checked as a notify is, its
/// devices resolved and each one's push built and encrypted as the encryptor would, and
/// the answer says per device what would be sent, or why nothing would. Nothing is
/// published, nothing is written, no rate beyond the request's own is used, and no
/// provider is contacted: every check is local (`"checked": "local"`).
extension NativeController {
    /// A notify's `dry_run`: off (absent, `false`), checked here (`true`, `"local"`), or
    /// through the pipeline (`"pipeline"`).
    enum DryRunMode {
        case off, local, pipeline
    }

    /// `dry_run`: a JSON boolean, or `"local"`, `"pipeline"` (`"true"`/`"false"` in a form).
    static func dryRunMode(_ body: RequestFields) throws -> DryRunMode {
        switch body.json["dry_run"] {
        case nil, .null?, .bool(false)?, .string("false")?: return .off
        case .bool(true)?, .string("true")?, .string("local")?: return .local
        case .string("pipeline")?: return .pipeline
        default: throw APIError.badRequest("dry_run: must be true, false, \"local\" or \"pipeline\"", field: "dry_run")
        }
    }

    /// `"dry_run": "pipeline"`: accepted as a notify is, marked `send_mode: validate_only`
    /// all the way, so the encryptor builds and encrypts each push, the dispatcher asks
    /// FCM and Huawei to validate theirs and sends nothing to the others; the outcomes
    /// are read from `GET /v1/notifications/{id}`. Only while every running dispatcher
    /// says it can (an older one would send the push for real): 409 otherwise.
    func pipelineDryRun(
        server: ServerID, realm: RealmID, userID: Int64, targets: Targets, type: NotificationType, plaintext: [UInt8]
    )
        async throws -> Response
    {
        guard try await providers.everyDispatcherCan(.validateOnly) else {
            throw APIError(
                status: .conflict, code: "DRY_RUN_UNAVAILABLE",
                message:
                    "dry_run: \"pipeline\" needs every running dispatcher to support it (some run an older release, or none runs); use \"local\"",
                field: "dry_run")
        }
        var answer = try await acceptNotification(
            server: server, realm: realm, userID: userID, targets: targets, type: type, plaintext: plaintext,
            sendMode: .validateOnly)
        answer.fields["dry_run"] = "pipeline"
        func names(_ validating: Bool) -> JSONValue {
            .array(
                Provider.allCases.filter { SendMode.validatingProviders.contains($0) == validating }.map {
                    .string($0.rawValue)
                })
        }
        answer.fields["checked"] = ["provider": names(true), "local": names(false)]
        return answer.http
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
