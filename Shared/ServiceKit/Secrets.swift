import Configuration
import PushCrypto

/// The secret files the stages load at start. Each is read once; a missing or malformed
/// file stops the process with a message naming the setting and the path, never a
/// silent default key.
///
/// | setting (env) | default | holds | loaded by |
/// |---|---|---|---|
/// | `pushrelay.pipeline.keys.file` (`PUSHRELAY_PIPELINE_KEYS_FILE`) | `.run/pipeline-keys` | `key_id:base64(32 bytes)` per line, first = current | ingest, encryptor, dispatcher |
/// | `pushrelay.storage.keys.file` (`PUSHRELAY_STORAGE_KEYS_FILE`) | `.run/storage-keys` | `key_id:base64(32 bytes)` per line, first = current | ingest, encryptor, feedback |
/// | `pushrelay.apikey.pepper.file` (`PUSHRELAY_APIKEY_PEPPER_FILE`) | `.run/apikey-pepper` | base64 of ≥ 32 random bytes | ingest |
extension ConfigReader {
    /// The pipeline keys that seal notification plaintext and device tokens on the topics.
    public func pipelineKeyring() throws -> PipelineKeyring {
        try loadSecret("pushrelay.pipeline.keys.file", default: ".run/pipeline-keys", PipelineKeyring.init(fileContents:))
    }

    /// The storage keys that encrypt device tokens and push keys in Redis.
    public func storageKeyring() throws -> StorageKeyring {
        try loadSecret("pushrelay.storage.keys.file", default: ".run/storage-keys", StorageKeyring.init(fileContents:))
    }

    /// The pepper API keys are HMAC'd with.
    public func apiKeyPepper() throws -> APIKeyPepper {
        try loadSecret("pushrelay.apikey.pepper.file", default: ".run/apikey-pepper", APIKeyPepper.init(fileContents:))
    }

    private func loadSecret<T>(
        _ key: String, default path: String, _ parse: (String) throws(CryptoError) -> T
    ) throws -> T {
        let contents = try secretFile(forKey: key, default: path)
        do {
            return try parse(contents)
        } catch {
            let file = string(forKey: ConfigKey(key), default: path)
            throw SettingsError("\(file) (\(key)) is not usable: \(error.message)")
        }
    }
}
