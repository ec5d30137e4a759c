import Configuration
import PushCrypto

/// The secret files the stages load at start. Each is read once; an unset setting, a
/// missing or a malformed file stops the process with a message naming the setting and
/// the path. There are no default paths: only the dev stack points them at `.run/`.
///
/// | setting (env) | holds | loaded by |
/// |---|---|---|
/// | `PUSHRELAY_PIPELINE_KEYS_FILE` | `key_id:base64(32 bytes)` per line, first = current | ingest, encryptor, dispatcher |
/// | `PUSHRELAY_STORAGE_KEYS_FILE` | `key_id:base64(32 bytes)` per line, first = current | ingest, encryptor, feedback |
/// | `PUSHRELAY_APIKEY_PEPPER_FILE` | base64 of ≥ 32 random bytes | ingest, pushrelay |
/// | `PUSHRELAY_BOUNCER_KEYS_FILE` | base64 X25519 secret keys, one per line | ingest |
extension SettingsReader {
    /// The pipeline keys that seal notification plaintext and device tokens on the topics.
    public func pipelineKeyring() throws -> PipelineKeyring {
        try loadSecret("pushrelay.pipeline.keys.file", "the pipeline keys", PipelineKeyring.init(fileContents:))
    }

    /// The storage keys that encrypt device tokens and push keys in Redis.
    public func storageKeyring() throws -> StorageKeyring {
        try loadSecret("pushrelay.storage.keys.file", "the storage keys", StorageKeyring.init(fileContents:))
    }

    /// The pepper API keys are HMAC'd with.
    public func apiKeyPepper() throws -> APIKeyPepper {
        try loadSecret("pushrelay.apikey.pepper.file", "the API-key pepper", APIKeyPepper.init(fileContents:))
    }

    /// The X25519 keys realms seal registrations to (Zulip's bouncer keys).
    public func bouncerKeyring() throws -> BouncerKeyring {
        try loadSecret("pushrelay.bouncer.keys.file", "the bouncer keys", BouncerKeyring.init(fileContents:))
    }

    private func loadSecret<T>(_ key: String, _ what: String, _ parse: (String) throws(CryptoError) -> T) throws -> T {
        let contents = try secretFile(key, what)
        do {
            return try parse(contents)
        } catch {
            throw SettingsError(
                "\(try raw(key) ?? "") (\(SettingsCatalog.environmentName(key))) is not usable: \(error.message)")
        }
    }
}
