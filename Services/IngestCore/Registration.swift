import DeviceState
import Foundation
import PushCrypto
import PushModels

/// A device registration opened from `encrypted_push_registration`.
struct OpenedRegistration {
    var token: DeviceToken
    var appID: String?
}

/// Device registration as every API does it: registrations sealed to the relay's bouncer
/// keys opened and checked, token kinds and app ids checked, and devices registered
/// within the server's device quota.
struct DeviceRegistrar: Sendable {
    let devices: any DeviceRegistry
    let realms: any RealmRegistry
    let bouncerKeys: BouncerKeyring
    let limits: Limits

    /// Registers a device unless the server is at its device quota (counted per new device).
    func registerWithinQuota(_ registration: DeviceRegistration, server: ServerID) async throws -> (
        id: DeviceID, created: Bool
    ) {
        // A device already registered renews, whatever the quota.
        if try await realms.deviceCount(server: server) >= Int64(limits.maxDevicesPerServer),
            try await !devices.isRegistered(registration)
        {
            throw APIError.deviceQuotaExceeded(limit: limits.maxDevicesPerServer)
        }
        let result = try await devices.register(registration, nowMs: Wire.nowMillis())
        if result.created { try await realms.countDevice(server: server, by: 1) }
        return result
    }

    /// Opens a registration sealed to one of the relay's bouncer keys and applies
    /// Zulip's rules: known public key, decryptable JSON, at most 24 h old, token rules.
    /// `rules: .zulip` (the bouncer API) takes tokens and app ids as Zulip's bouncer does
    /// and answers every content error as it does: 400 "Invalid encrypted_push_registration".
    /// `tokenID` (Zulip 12) must be the sealed token's; checked, as Zulip checks it, after
    /// the content and before the age.
    func openRegistration(
        sealed: String, bouncerPublicKey: String, rules: DeviceToken.Rules = .strict, tokenID: String? = nil
    ) throws -> OpenedRegistration {
        guard let pair = bouncerKeys.pair(forPublicKeyBase64: bouncerPublicKey) else {
            throw APIError.badRequest(
                "Invalid bouncer_public_key", code: "INVALID_BOUNCER_PUBLIC_KEY", field: "bouncer_public_key")
        }
        let invalid = APIError.badRequest(
            "Invalid encrypted_push_registration", field: "encrypted_push_registration")
        guard let data = Data(base64Encoded: sealed), let opened = try? SealedBox.open(Array(data), keyPair: pair),
            let json = try? Wire.decode(JSONValue.self, from: opened), json.objectValue != nil
        else { throw invalid }
        let reader = FieldReader(json: json, path: "encrypted_push_registration")
        do {
            let token = try reader.string("token")
            let opened = try Self.tokenAndApp(
                kind: try reader.string("token_kind"), token: token,
                appID: try reader.optionalString("ios_app_id"), path: "encrypted_push_registration", rules: rules)
            if let tokenID, tokenID != Fingerprint.zulipTokenID(token) { throw invalid }
            // Compared, never subtracted: the timestamp is the sender's number and may be anything.
            let timestamp = try reader.int("timestamp")
            let now = Int64(Date().timeIntervalSince1970)
            guard timestamp >= now - Self.registrationMaxAgeSeconds else {
                throw APIError.badRequest("Request expired", code: "REQUEST_EXPIRED")
            }
            guard timestamp <= now + Self.registrationMaxSkewSeconds else {
                throw rules == .zulip
                    ? invalid
                    : APIError.badRequest(
                        "encrypted_push_registration.timestamp: is in the future (more than 5 minutes ahead)",
                        code: "BAD_REQUEST", field: "encrypted_push_registration.timestamp")
            }
            return opened
        } catch let error as PayloadValidationError {
            throw rules == .zulip ? invalid : APIError.invalid(error, code: "BAD_REQUEST")
        } catch let error as APIError where rules == .zulip && error.code != "REQUEST_EXPIRED" {
            throw invalid
        }
    }

    /// A sealed registration is accepted for 24 hours after its timestamp (Zulip's rule)
    /// and at most 5 minutes before it (clock skew), so a captured one expires.
    static let registrationMaxAgeSeconds: Int64 = 24 * 3600
    static let registrationMaxSkewSeconds: Int64 = 5 * 60

    /// Token kind, token and app id rules shared by both registration paths.
    static func tokenAndApp(
        kind: String, token: String, appID: String?, path: String, rules: DeviceToken.Rules = .strict
    ) throws -> OpenedRegistration {
        // Zulip's APIs know APNs and FCM; the native API takes every live kind.
        let supported: [Provider] = rules == .zulip ? [.apns, .fcm] : Provider.allCases
        guard let provider = Provider(rawValue: kind), supported.contains(provider) else {
            let shown = kind.utf8.count <= 32 && !Syntax.hasControlOrSpace(kind) ? "'\(kind)'" : "given"
            throw APIError.badRequest(
                "token_kind: unsupported token type \(shown); supported: \(supported.map(\.rawValue).joined(separator: ", "))",
                code: "UNSUPPORTED_TOKEN_TYPE", field: path.isEmpty ? "token_kind" : "\(path).token_kind")
        }
        let deviceToken: DeviceToken
        do {
            deviceToken = try DeviceToken(provider: provider, value: token, rules: rules)
        } catch {
            throw APIError.invalid(
                PayloadValidationError(
                    field: path.isEmpty ? error.field : "\(path).\(error.field)", problem: error.problem),
                code: "INVALID_TOKEN")
        }
        if provider == .webpush || provider == .simplepush, let subscription = deviceToken.webPushSubscription,
            !WebPushEncryption.isValidPublicKey(subscription.p256dh)
        {
            throw APIError.badRequest(
                "token.keys.p256dh: is not a point on P-256", code: "INVALID_TOKEN",
                field: path.isEmpty ? "token.keys.p256dh" : "\(path).token.keys.p256dh")
        }
        switch provider {
        case .apns, .apnsVoIP:
            guard let appID else {
                throw APIError.badRequest("ios_app_id: required for APNs tokens", field: "ios_app_id")
            }
            // It becomes the apns-topic header: a bundle id, nothing else.
            guard rules == .zulip ? Syntax.isZulipAppID(appID) : Syntax.isBundleID(appID) else {
                throw APIError.badRequest(
                    "ios_app_id: must be a bundle id (letters, digits and '-' in dot-separated parts, at most \(Syntax.maxBundleIDBytes) bytes)",
                    code: "INVALID_APP_ID", field: "ios_app_id")
            }
            return OpenedRegistration(token: deviceToken, appID: appID)
        case .fcm, .webpush, .simplepush, .hms, .wns:
            guard appID == nil else {
                throw APIError.badRequest(
                    "ios_app_id: must be null for \(provider == .fcm ? "FCM" : provider.rawValue) tokens",
                    field: "ios_app_id")
            }
            return OpenedRegistration(token: deviceToken, appID: nil)
        }
    }

    /// The provider a native registration names: `token_kind` by name (or Telegram's
    /// number as text), or Telegram's numeric `token_type`. Telegram's numbers for
    /// services that are gone, or are not push services, answer why.
    static func nativeTokenKind(_ body: RequestFields) throws -> String {
        let named = try body.optionalString("token_kind")
        let numbered = try body.optionalInt("token_type").map { Int(clamping: $0) }
        let number = numbered ?? named.flatMap { Syntax.parseUInt64(Substring($0)) }.flatMap { Int(exactly: $0) }
        guard let number else {
            guard let named else {
                throw APIError.badRequest(
                    "token_kind: required (or Telegram's numeric token_type)", field: "token_kind")
            }
            return named
        }
        let field = numbered != nil ? "token_type" : "token_kind"
        if let why = Provider.unsupportedTelegramTokenTypes[number] {
            throw APIError.badRequest(
                "\(field): token type \(number) is not supported: \(why)", code: "UNSUPPORTED_TOKEN_TYPE", field: field)
        }
        guard let provider = Provider.telegramTokenTypes[number] else {
            let known = Provider.telegramTokenTypes.keys.sorted().map(String.init).joined(separator: ", ")
            throw APIError.badRequest(
                "\(field): unknown token type \(number); supported: \(known)", code: "UNSUPPORTED_TOKEN_TYPE",
                field: field)
        }
        if numbered != nil, let named, named != provider.rawValue, named != String(number) {
            throw APIError.badRequest(
                "token_kind: '\(provider.rawValue)' is token_type \(number), not the kind named", field: "token_kind")
        }
        return provider.rawValue
    }
}
