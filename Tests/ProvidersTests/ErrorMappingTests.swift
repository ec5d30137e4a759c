import Foundation
import PushModels
import Testing

@testable import Providers

/// Every provider answer maps to what the dispatcher must do (docs/protocols.md §2, §3).
@Suite struct ErrorMappingTests {
    @Test(arguments: [APNsReason.unregistered, .expiredToken, .badDeviceToken, .deviceTokenNotForTopic])
    func apnsDeadTokenReasonsInvalidate(_ reason: APNsReason) {
        let result = Named.known(reason).result(
            status: reason == .unregistered ? 410 : 400, timestampMs: 5, retryAfter: nil)
        guard case .invalidToken(let name, _, let timestamp) = result else {
            Issue.record("\(reason) must invalidate, got \(result)")
            return
        }
        #expect(name == .apns(.known(reason)))
        #expect(name.name == reason.rawValue)
        #expect(timestamp == 5)
    }

    @Test(arguments: [
        (APNsReason.tooManyRequests, 429), (.internalServerError, 500), (.serviceUnavailable, 503), (.shutdown, 503),
        (.expiredProviderToken, 403), (.invalidProviderToken, 403),
    ])
    func apnsTransientReasonsRetry(_ reason: APNsReason, _ status: Int) {
        let result = Named.known(reason).result(status: status, timestampMs: nil, retryAfter: .seconds(7))
        #expect(result == .retry(reason: .apns(.known(reason)), status: status, retryAfter: .seconds(7)))
    }

    @Test(arguments: [
        (APNsReason.payloadTooLarge, 413), (.forbidden, 403), (.badTopic, 400), (.topicDisallowed, 400),
        (.badPriority, 400), (.missingTopic, 400),
    ])
    func apnsPermanentReasonsFailWithoutTouchingTheToken(_ reason: APNsReason, _ status: Int) {
        #expect(
            Named.known(reason).result(status: status, timestampMs: nil, retryAfter: nil)
                == .failed(reason: .apns(.known(reason)), status: status))
    }

    @Test func apnsReasonsReadByTheirDocumentedNames() {
        #expect(Named<APNsReason>("Unregistered") == .known(.unregistered))
        #expect(Named<APNsReason>("SomethingNew") == .unknown("SomethingNew"))
        #expect(Named<APNsReason>("SomethingNew").name == "SomethingNew")
        #expect(Named<APNsReason>("SomethingNew").result(status: 502, timestampMs: nil, retryAfter: nil).isRetry)
    }

    func fcm(_ status: Int, code: String?, message: String = "", grpc: String = "INVALID_ARGUMENT") -> FCMError {
        var error: [String: JSONValue] = [
            "code": .int(Int64(status)), "message": .string(message), "status": .string(grpc),
        ]
        if let code {
            error["details"] = [
                ["@type": "type.googleapis.com/google.firebase.fcm.v1.FcmError", "errorCode": .string(code)]
            ]
        }
        return FCMError(json: ["error": .object(error)])
    }

    @Test func fcmUnregisteredAndSenderMismatchInvalidate() {
        #expect(fcm(404, code: "UNREGISTERED").result(status: 404, retryAfter: nil).isInvalidToken)
        #expect(fcm(403, code: "SENDER_ID_MISMATCH").result(status: 403, retryAfter: nil).isInvalidToken)
    }

    @Test func fcmInvalidArgumentInvalidatesOnlyForBadTokens() {
        let token = fcm(
            400, code: "INVALID_ARGUMENT", message: "The registration token is not a valid FCM registration token")
        #expect(token.result(status: 400, retryAfter: nil).isInvalidToken)
        let payload = fcm(400, code: nil, message: "Invalid value at 'message.data[0].value'")
        #expect(payload.code == .known(.invalidArgument))
        #expect(
            payload.result(status: 400, retryAfter: nil) == .failed(reason: .fcm(.known(.invalidArgument)), status: 400)
        )
    }

    @Test func fcmQuotaBacksOffAtLeastAMinute() {
        let result = fcm(429, code: "QUOTA_EXCEEDED").result(status: 429, retryAfter: .seconds(3))
        #expect(result == .retry(reason: .fcm(.known(.quotaExceeded)), status: 429, retryAfter: .seconds(60)))
    }

    @Test func fcmUnavailableHonoursRetryAfter() {
        #expect(
            fcm(503, code: "UNAVAILABLE").result(status: 503, retryAfter: .seconds(9))
                == .retry(reason: .fcm(.known(.unavailable)), status: 503, retryAfter: .seconds(9)))
        #expect(fcm(500, code: "INTERNAL").result(status: 500, retryAfter: nil).isRetry)
    }

    @Test func fcmThirdPartyAuthIsACredentialsProblemNotADeadToken() {
        let result = fcm(401, code: "THIRD_PARTY_AUTH_ERROR").result(status: 401, retryAfter: nil)
        #expect(!result.isInvalidToken)
        #expect(result == .failed(reason: .fcm(.known(.thirdPartyAuthError)), status: 401))
    }

    @Test func fcmCodeNewerThanThisBuildIsKeptAndJudgedByStatus() {
        let newer = fcm(503, code: "SOMETHING_NEW")
        #expect(newer.code == .unknown("SOMETHING_NEW"))
        #expect(
            newer.result(status: 503, retryAfter: nil)
                == .retry(reason: .fcm(.unknown("SOMETHING_NEW")), status: 503, retryAfter: nil))
        #expect(newer.result(status: 400, retryAfter: nil).reasonName == "SOMETHING_NEW")
        #expect(fcm(400, code: nil, grpc: "PERMISSION_DENIED").code == .known(.permissionDenied))
    }

    @Test func apnsIDIsStablePerNotificationAndDevice() {
        func push(_ device: DeviceID) -> ProviderPush {
            ProviderPush(
                provider: .apns, token: "ab", appID: "a", delivery: DeliveryClass(.message), body: Array("{}".utf8),
                notificationID: "6dbcdd60-06da-45b6-8f37-867cf905469a", deviceID: device)
        }
        #expect(APNsClient.apnsID(push(1)) == APNsClient.apnsID(push(1)))
        #expect(APNsClient.apnsID(push(1)) != APNsClient.apnsID(push(2)))
        #expect(APNsClient.apnsID(push(1)) == APNsClient.apnsID(push(1)).lowercased())
        // Pinned: the device id, big-endian, XORed into the notification id's last 8 bytes.
        #expect(APNsClient.apnsID(push(1)) == "6dbcdd60-06da-45b6-8f37-867cf905469b")
        #expect(APNsClient.apnsID(push(0x0102_0304_0506_0708)) == "6dbcdd60-06da-45b6-8e35-8578fc034192")
        var upper = push(2)
        upper.notificationID = "6DBCDD60-06DA-45B6-8F37-867CF905469A"
        #expect(APNsClient.apnsID(upper) == "6dbcdd60-06da-45b6-8f37-867cf9054698")
        // Not a UUID: a random one, in the same form.
        var other = push(1)
        other.notificationID = "not-a-uuid"
        let random = APNsClient.apnsID(other)
        #expect(random.count == 36 && UUID(uuidString: random)?.uuidString.lowercased() == random)
        #expect(UUID.bytes(parsing: "6dbcdd60-06da-45b6-8f37-867cf905469") == nil)
        #expect(UUID.bytes(parsing: "6dbcdd60x06da-45b6-8f37-867cf905469a") == nil)
        #expect(UUID.bytes(parsing: "6dbcdd60-06da-45b6-8f37-867cf905469g") == nil)
    }
}

extension SendResult {
    var isRetry: Bool { if case .retry = self { true } else { false } }
    var isInvalidToken: Bool { if case .invalidToken = self { true } else { false } }
}
