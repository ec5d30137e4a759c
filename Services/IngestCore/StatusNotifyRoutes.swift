import DeviceState
import Foundation
import Hummingbird
import PushCrypto
import PushModels
import StatusPush
import SwiftProtobuf

/// `POST /status/v1/notify` (type 20 → 21): one report per target; each accepted target
/// becomes a gorush-form notification on `push.requests`, or a `filtered` outcome when the
/// device's preferences say not to notify. A message is handled once: a repeat gets the
/// first answer.
extension StatusController {
    /// What one notification request accepted.
    struct Acceptance {
        var reports: [StatusNotificationReport] = []
        var records: [PushRequestRecord] = []
        var filtered: [DeliveryRecord] = []
    }

    func notify(_ request: Request, context: IngestContext) async throws -> Response {
        let (server, envelope) = try await envelope(request, context: context, type: .pushNotificationRequest)
        return Self.protobufResponse(try await answerNotification(envelope, server: server))
    }

    /// A notification request's signed answer (21), whatever carried it: the first answer
    /// again for a message handled before, 409 `DUPLICATE_REQUEST` while it is being handled.
    func answerNotification(_ envelope: StatusEnvelope, server: StatusServer) async throws -> [UInt8] {
        let notificationRequest = try Self.notificationRequest(envelope.payload, maxTargets: server.maxTargets)
        let messageID = Fingerprint.hex(envelope.messageID)
        switch try await store.claimMessage(messageID, pendingSeconds: Self.claimSeconds) {
        case .claimed: break
        case .answered(let bytes): return bytes
        case .busy:
            throw APIError(status: .conflict, code: "DUPLICATE_REQUEST", message: "This message was handled already")
        }
        var response = StatusNotificationResponse()
        response.messageID = notificationRequest.messageID
        do {
            let acceptance = try await accept(notificationRequest, server: server)
            response.reports = acceptance.reports
            // All or nothing: one notification per target, never a second on a retry.
            try await acceptor.publish(acceptance.records, outcomes: acceptance.filtered)
        } catch {
            // Nothing is remembered: the client may send the same message again.
            try? await store.releaseMessage(messageID)
            throw error
        }
        let bytes = try server.signed(response, type: .pushNotificationResponse)
        // A large answer is not kept: a repeat of it is refused (409) instead of answered.
        try? await store.keepAnswer(
            messageID, answer: bytes.count <= Self.maxKeptAnswer ? bytes : nil, ttlSeconds: Self.answerSeconds)
        return bytes
    }

    /// The request in the payload, within the server's limits.
    static func notificationRequest(_ payload: [UInt8], maxTargets: Int) throws -> StatusNotificationRequest {
        guard let notificationRequest = try? StatusNotificationRequest(serializedBytes: payload) else {
            throw APIError.badRequest("payload: not a PushNotificationRequest", code: "MALFORMED_MESSAGE")
        }
        guard !notificationRequest.messageID.isEmpty else {
            throw APIError.badRequest("message_id: is required", code: "MALFORMED_MESSAGE", field: "message_id")
        }
        guard notificationRequest.requests.count <= maxTargets else {
            throw APIError.badRequest(
                "requests: at most \(maxTargets) targets", code: "TOO_MANY_TARGETS", field: "requests")
        }
        guard
            notificationRequest.requests.allSatisfy({
                $0.installationID.utf8.count <= StatusRegistrationRules.maxInstallationBytes
                    && $0.publicKey.count <= Shake256.statusLength && $0.chatID.count <= 1024
                    && $0.author.count <= 1024 && $0.accessToken.utf8.count <= 64
            }), notificationRequest.messageID.count <= 1024
        else {
            throw APIError.badRequest(
                "requests: a field is longer than any valid one", code: "MALFORMED_MESSAGE", field: "requests")
        }
        return notificationRequest
    }

    /// Each target checked against its registration: reported, and sealed for its device or filtered.
    func accept(_ notificationRequest: StatusNotificationRequest, server: StatusServer) async throws -> Acceptance {
        var acceptance = Acceptance()
        let acceptedAt = Wire.nowMillis()
        for target in notificationRequest.requests where target.type != .unknownPushNotificationType {
            var report = StatusNotificationReport()
            report.publicKey = target.publicKey
            report.installationID = target.installationID
            defer { acceptance.reports.append(report) }
            guard target.publicKey.count == Shake256.statusLength,
                let (registration, device) = try await registrations(
                    hashedKey: Fingerprint.hex(Array(target.publicKey)), installation: target.installationID
                ).first, let device
            else {
                report.error = .notRegistered
                continue
            }
            guard Self.constantTimeEqual(Array(registration.accessToken.utf8), Array(target.accessToken.utf8)) else {
                report.error = .wrongToken
                continue
            }
            // Accepted: a filtered one too is reported as success, so a sender learns
            // nothing of the receiver's preferences.
            report.success = true
            let notificationID = NotificationID.random()
            if let reason = StatusPreferences.filterReason(target, for: registration) {
                acceptance.filtered.append(
                    DeliveryRecord(
                        notificationID: notificationID, realmUUID: server.realm, deviceID: device,
                        provider: registration.tokenType == .apnToken ? .apns : .fcm, outcome: .filtered,
                        reason: .preference(reason), attempts: 0, acceptedAtMs: acceptedAt,
                        completedAtMs: Wire.nowMillis()))
                continue
            }
            let notification = Self.gorushNotification(
                target, registration: registration, messageID: Array(notificationRequest.messageID))
            let sealed = try sealer.seal(
                notification.sealedForm, notificationID: notificationID, realm: server.realm, userID: nil)
            acceptance.records.append(
                PushRequestRecord(
                    notificationID: notificationID, serverUUID: Self.serverID, realmUUID: server.realm,
                    acceptedAtMs: acceptedAt, request: .gorush(deviceIDs: [device], sealedPayload: sealed)))
        }
        return acceptance
    }

    /// What status-go sends gorush for one target: a fixed text per type, the APN topic,
    /// and the data as `0x` hex (`encryptedMessage`, `chatId`, `publicKey`), with the
    /// spec's names beside them (`chat_id`, `message`, `installation_ids`, `message_id`).
    static func gorushNotification(
        _ target: StatusNotification, registration: StatusRegistration, messageID: [UInt8]
    ) -> GorushNotification {
        let platform: GorushNotification.Platform = registration.tokenType == .apnToken ? .ios : .android
        var content: [String: JSONValue] = [
            "message": .string(StatusPreferences.text(target.type)),
            "data": [
                "encryptedMessage": .string(StatusCrypto.hex0x(Array(target.message))),
                "chatId": .string(StatusCrypto.hex0x(Array(target.chatID))),
                "publicKey": .string(StatusCrypto.hex0x(Array(target.publicKey))),
                "chat_id": .string(StatusCrypto.hex0x(Array(target.chatID))),
                "message": .string(StatusCrypto.hex0x(Array(target.message))),
                "message_id": .string(StatusCrypto.hex0x(messageID)),
                "installation_ids": [.string(target.installationID)],
                "type": .int(Int64(target.type.rawValue)),
            ],
        ]
        if platform == .ios { content["topic"] = .string(registration.apnTopic) }
        return GorushNotification(platform: platform, content: content)
    }
}
