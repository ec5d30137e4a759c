import DeviceState
import Hummingbird
import PushModels

/// `POST /api/push?dry_run=true`: gorush's request checked as a push is (its limits, the
/// platforms enabled, each token's form), and each token's push built as the encryptor
/// would build it, with nothing registered, counted or published. gorush's answer
/// (`counts`, `logs` with the tokens a provider would refuse, `success`) gains, per
/// notification in request order, what would be sent to each token by its index in
/// `tokens` (never the token itself). No provider is contacted (`"checked": "local"`).
extension GorushController {
    static func isDryRun(_ request: Request) throws -> Bool {
        switch request.uri.queryParameters.get("dry_run") {
        case nil, "false", "0": return false
        case "true", "1": return true
        default: throw APIError.badRequest("dry_run: must be true or false", field: "dry_run")
        }
    }

    func dryRun(_ notifications: [GorushNotification]) -> Response {
        var logs: [JSONValue] = []
        var answers: [JSONValue] = []
        for notification in notifications {
            let provider = notification.platform.provider
            let body: JSONValue =
                switch provider {
                case .apns: notification.apnsPayload()
                case .hms: notification.hmsMessage()
                default: notification.fcmMessage()
                }
            var push = NativeController.push(
                provider, delivery: notification.delivery, body: body, expiresAt: notification.expiresAt,
                collapseID: notification.collapseID)
            // gorush's Android and Huawei priority travels in the message it builds.
            if push["priority"] == .null, let android = body["android"] {
                // Named as the native dry run names it (`high`, `normal`), not FCM's `HIGH`.
                push["priority"] =
                    (android["priority"] ?? android["urgency"])?.stringValue.map { .string($0.lowercased()) } ?? .null
            }
            var devices: [JSONValue] = []
            for (index, token) in notification.tokens.enumerated() {
                var fields: [String: JSONValue] = [
                    "token_index": .int(Int64(index)), "provider": .string(provider.rawValue),
                ]
                do {
                    _ = try DeviceToken(
                        provider: provider, value: token, rules: notification.platform == .ios ? .zulip : .strict)
                    fields.merge(push) { _, new in new }
                } catch {
                    let reason = notification.platform == .ios ? "BadDeviceToken" : "InvalidRegistration"
                    logs.append(Self.log(notification, token: token, error: reason))
                    fields["result"] = "fail"
                    fields["reason"] = .string(reason)
                }
                devices.append(.object(fields))
            }
            answers.append(["devices": .array(devices)])
        }
        var response = jsonResponse(
            .ok,
            [
                "counts": .int(Int64(notifications.reduce(0) { $0 + $1.counted })), "logs": .array(logs),
                "success": "ok", "dry_run": true, "checked": "local", "notifications": .array(answers),
            ])
        response.headers[.contentType] = "application/json; charset=utf-8"
        return response
    }
}
