import PushCrypto
import PushModels

/// What a device's push carries, or why none can be built.
public enum BuiltBody: Equatable, Sendable {
    case body(JSONValue)
    /// Nothing can be sent to this device; the reason goes on its outcome.
    case unsent(StageReason)
}

extension DeviceRecord {
    /// The provider body for this device, encrypted by its scheme (the encryptor's, and
    /// ingest's dry run measures it the same way):
    /// - Web Push, and simple push with Web Push keys: `aes128gcm` to the subscription;
    /// - simple push without keys: a wake-up, no content (the `version` number only);
    /// - a device `secret`: MTProto 2.0, `{"p": …}`;
    /// - a push key: secretbox, Zulip's `push_key_id` and `encrypted_data`.
    public func providerBody(plaintext: [UInt8], type: NotificationType, acceptedAtMs: Int64) throws -> BuiltBody {
        if let subscription = DeviceToken.webPushSubscription(provider: provider, token: token) {
            guard plaintext.count <= WebPushEncryption.maxPlaintext else { return .unsent(.payloadTooLarge) }
            return .body(ProviderBody.webPush(try WebPushEncryption.encrypt(plaintext, to: subscription)))
        }
        if provider == .simplepush { return .body(ProviderBody.wakeUp(version: acceptedAtMs)) }
        guard let keyID = currentKeyID, let key = currentKey else { return .unsent(.noPushKey) }
        switch key.scheme {
        case .mtproto2:
            return .body(ProviderBody.mtproto(try key.encrypt(plaintext)))
        case .secretbox, .aes128gcm:
            return .body(
                ProviderBody.encrypted(
                    provider: provider, pushKeyID: keyID, encryptedData: try key.encrypt(plaintext), type: type))
        }
    }
}
