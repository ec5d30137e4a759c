import PushModels

/// APNs error reasons (docs/protocols.md §2), each by the name Apple documents. A reason
/// Apple adds later reads as `Named.unknown`, kept with its name.
public enum APNsReason: String, Sendable, Hashable, CaseIterable {
    // 400
    case badCollapseId = "BadCollapseId"
    case badDeviceToken = "BadDeviceToken"
    case badExpirationDate = "BadExpirationDate"
    case badMessageId = "BadMessageId"
    case badPriority = "BadPriority"
    case badTopic = "BadTopic"
    case deviceTokenNotForTopic = "DeviceTokenNotForTopic"
    case duplicateHeaders = "DuplicateHeaders"
    case idleTimeout = "IdleTimeout"
    case invalidPushType = "InvalidPushType"
    case missingDeviceToken = "MissingDeviceToken"
    case missingTopic = "MissingTopic"
    case payloadEmpty = "PayloadEmpty"
    case topicDisallowed = "TopicDisallowed"
    // 403
    case badCertificate = "BadCertificate"
    case badCertificateEnvironment = "BadCertificateEnvironment"
    case expiredProviderToken = "ExpiredProviderToken"
    case forbidden = "Forbidden"
    case invalidProviderToken = "InvalidProviderToken"
    case missingProviderToken = "MissingProviderToken"
    case unrelatedKeyIdInToken = "UnrelatedKeyIdInToken"
    case badEnvironmentKeyIdInToken = "BadEnvironmentKeyIdInToken"
    // 404, 405, 410, 413
    case badPath = "BadPath"
    case methodNotAllowed = "MethodNotAllowed"
    case expiredToken = "ExpiredToken"
    case unregistered = "Unregistered"
    case payloadTooLarge = "PayloadTooLarge"
    // 429, 500, 503
    case tooManyProviderTokenUpdates = "TooManyProviderTokenUpdates"
    case tooManyRequests = "TooManyRequests"
    case internalServerError = "InternalServerError"
    case serviceUnavailable = "ServiceUnavailable"
    case shutdown = "Shutdown"
}

extension Named where Known == APNsReason {
    /// What to do about a push APNs refused with this reason and status.
    public func result(status: Int, timestampMs: Int64?, retryAfter: Duration?) -> SendResult {
        switch self {
        case .known(.unregistered), .known(.expiredToken), .known(.badDeviceToken), .known(.deviceTokenNotForTopic):
            // BadDeviceToken assumes the relay talks to the environment the token was issued for.
            return .invalidToken(reason: .apns(self), status: status, timestampMs: timestampMs)
        case .known(.tooManyRequests), .known(.internalServerError), .known(.serviceUnavailable), .known(.shutdown),
            .known(.idleTimeout), .known(.expiredProviderToken), .known(.invalidProviderToken),
            .known(.tooManyProviderTokenUpdates):
            return .retry(reason: .apns(self), status: status, retryAfter: retryAfter)
        case .unknown where status >= 500 || status == 429:
            return .retry(reason: .apns(self), status: status, retryAfter: retryAfter)
        default:
            return .failed(reason: .apns(self), status: status)
        }
    }
}
