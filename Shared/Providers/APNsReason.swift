/// APNs error reasons (docs/protocols.md §2), with `unknown` for any Apple adds later.
public enum APNsReason: Sendable, Hashable {
    case badCollapseId, badDeviceToken, badExpirationDate, badMessageId, badPriority, badTopic
    case deviceTokenNotForTopic, duplicateHeaders, idleTimeout, invalidPushType, missingDeviceToken
    case missingTopic, payloadEmpty, topicDisallowed
    case badCertificate, badCertificateEnvironment, expiredProviderToken, forbidden, invalidProviderToken
    case missingProviderToken, unrelatedKeyIdInToken, badEnvironmentKeyIdInToken
    case badPath, methodNotAllowed, expiredToken, unregistered, payloadTooLarge
    case tooManyProviderTokenUpdates, tooManyRequests, internalServerError, serviceUnavailable, shutdown
    case unknown(String)

    static let byName: [String: APNsReason] = [
        "BadCollapseId": .badCollapseId, "BadDeviceToken": .badDeviceToken,
        "BadExpirationDate": .badExpirationDate, "BadMessageId": .badMessageId, "BadPriority": .badPriority,
        "BadTopic": .badTopic, "DeviceTokenNotForTopic": .deviceTokenNotForTopic,
        "DuplicateHeaders": .duplicateHeaders, "IdleTimeout": .idleTimeout, "InvalidPushType": .invalidPushType,
        "MissingDeviceToken": .missingDeviceToken, "MissingTopic": .missingTopic, "PayloadEmpty": .payloadEmpty,
        "TopicDisallowed": .topicDisallowed, "BadCertificate": .badCertificate,
        "BadCertificateEnvironment": .badCertificateEnvironment, "ExpiredProviderToken": .expiredProviderToken,
        "Forbidden": .forbidden, "InvalidProviderToken": .invalidProviderToken,
        "MissingProviderToken": .missingProviderToken, "UnrelatedKeyIdInToken": .unrelatedKeyIdInToken,
        "BadEnvironmentKeyIdInToken": .badEnvironmentKeyIdInToken, "BadPath": .badPath,
        "MethodNotAllowed": .methodNotAllowed, "ExpiredToken": .expiredToken, "Unregistered": .unregistered,
        "PayloadTooLarge": .payloadTooLarge, "TooManyProviderTokenUpdates": .tooManyProviderTokenUpdates,
        "TooManyRequests": .tooManyRequests, "InternalServerError": .internalServerError,
        "ServiceUnavailable": .serviceUnavailable, "Shutdown": .shutdown,
    ]

    public init(_ name: String) {
        self = Self.byName[name] ?? .unknown(name)
    }

    public var name: String {
        if case .unknown(let name) = self { return name }
        return Self.byName.first { $0.value == self }?.key ?? "Unknown"
    }

    /// What to do about a push APNs refused with this reason and status.
    public func result(status: Int, timestampMs: Int64?, retryAfter: Duration?) -> SendResult {
        switch self {
        case .unregistered, .expiredToken, .badDeviceToken, .deviceTokenNotForTopic:
            // BadDeviceToken assumes the relay talks to the environment the token was issued for.
            return .invalidToken(reason: .apns(self), status: status, timestampMs: timestampMs)
        case .tooManyRequests, .internalServerError, .serviceUnavailable, .shutdown, .idleTimeout,
            .expiredProviderToken, .invalidProviderToken, .tooManyProviderTokenUpdates:
            return .retry(reason: .apns(self), status: status, retryAfter: retryAfter)
        case .unknown where status >= 500 || status == 429:
            return .retry(reason: .apns(self), status: status, retryAfter: retryAfter)
        default:
            return .failed(reason: .apns(self), status: status)
        }
    }
}
