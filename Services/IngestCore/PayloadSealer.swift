import LogKeys
import Logging
import PushCrypto
import PushModels

/// Seals notification content with the pipeline key, bound to its notification, realm
/// and user, before it goes on `push.requests`.
struct PayloadSealer: Sendable {
    let keys: PipelineKeyring
    let logger: Logger

    func seal(_ plaintext: [UInt8], notificationID: NotificationID, realm: RealmID, userID: Int64?) throws
        -> SealedBlob
    {
        do {
            return try keys.seal(
                plaintext, binding: .payload(notificationID: notificationID, realmUUID: realm, userID: userID))
        } catch {
            logger.error(
                "could not seal accepted content",
                metadata: [LogKey.notificationID: "\(notificationID)", LogKey.error: "\(error)"])
            throw APIError.internalError
        }
    }
}
