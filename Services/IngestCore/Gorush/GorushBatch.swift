import DeviceState
import Foundation
import HTTPTypes
import Hummingbird
import Logging
import NIOCore
import PushCrypto
import PushModels
import ServiceKit

/// What one `POST /api/push` call accepts: a record per notification with a valid token,
/// and the log entries of the tokens no provider would take.
struct GorushBatch {
    struct Accepted {
        var notification: GorushNotification
        var id: NotificationID
        /// The devices the notification goes to, with the tokens the caller gave for them.
        var targets: [DeviceID: String]
    }

    var logs: [JSONValue] = []
    var accepted: [Accepted] = []
    var records: [PushRequestRecord] = []
    var callerIDs: [(NotificationID, String)] = []

    /// Registers the notification's tokens under the server and seals it for its devices.
    mutating func add(
        _ notification: GorushNotification, controller: GorushController, server: ServerID, realm: RealmID
    ) async throws {
        let appID = notification.platform == .ios ? notification.topic ?? controller.settings.apnsTopic : nil
        var tokens: [String] = []
        var registrations: [DeviceRegistration] = []
        for token in notification.tokens {
            let deviceToken: DeviceToken
            do {
                deviceToken = try DeviceToken(
                    provider: notification.platform.provider, value: token,
                    rules: notification.platform == .ios ? .zulip : .strict)
            } catch {
                // What the provider would answer for it, without asking.
                let error = notification.platform == .ios ? "BadDeviceToken" : "InvalidRegistration"
                logs.append(GorushController.log(notification, token: token, error: error))
                continue
            }
            tokens.append(token)
            registrations.append(
                DeviceRegistration(
                    realmUUID: realm, userID: nil, token: deviceToken, appID: appID, pushAccountID: nil, pushKey: nil,
                    api: .gorush))
        }
        let ids = try await controller.register(registrations, server: server)
        var targets: [DeviceID: String] = [:]
        var order: [DeviceID] = []
        for (token, id) in zip(tokens, ids) {
            if targets[id] == nil { order.append(id) }
            targets[id] = token
        }
        guard !order.isEmpty else { return }
        let notificationID = NotificationID.random()
        let sealed = try controller.sealer.seal(
            notification.sealedForm, notificationID: notificationID, realm: realm, userID: nil)
        if let callerID = notification.notificationID, !callerID.isEmpty {
            callerIDs.append((notificationID, callerID))
        }
        // A large send: several records of one notification, each its share of the devices.
        var start = 0
        while start < order.count {
            let end = min(start + GorushController.devicesPerRecord, order.count)
            records.append(
                PushRequestRecord(
                    notificationID: notificationID, serverUUID: server, realmUUID: realm,
                    acceptedAtMs: Wire.nowMillis(),
                    request: .gorush(deviceIDs: Array(order[start..<end]), sealedPayload: sealed)))
            start = end
        }
        accepted.append(Accepted(notification: notification, id: notificationID, targets: targets))
    }
}
