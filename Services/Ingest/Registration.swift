import Foundation
import PushCrypto
import PushModels

/// A device registration opened from `encrypted_push_registration`.
struct OpenedRegistration {
    var token: DeviceToken
    var appID: String?
}

extension IngestAPI {
    /// Opens a registration sealed to one of the relay's bouncer keys and applies
    /// Zulip's rules: known public key, decryptable JSON, at most 24 h old, token rules.
    func openRegistration(sealed: String, bouncerPublicKey: String) throws -> OpenedRegistration {
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
            let timestamp = try reader.int("timestamp")
            let now = Int64(Date().timeIntervalSince1970)
            guard now - timestamp <= 24 * 3600 else {
                throw APIError.badRequest("Request is expired", code: "REQUEST_EXPIRED")
            }
            return try tokenAndApp(
                kind: try reader.string("token_kind"), token: try reader.string("token"),
                appID: try reader.optionalString("ios_app_id"), path: "encrypted_push_registration")
        } catch let error as PayloadValidationError {
            throw APIError.invalid(error, code: "BAD_REQUEST")
        }
    }

    /// Token kind, token and app id rules shared by both registration paths.
    func tokenAndApp(kind: String, token: String, appID: String?, path: String) throws -> OpenedRegistration {
        guard let provider = Provider(rawValue: kind) else {
            throw APIError.badRequest(
                "token_kind: unsupported token type '\(kind)'; supported: \(Provider.allCases.map(\.rawValue).joined(separator: ", "))",
                code: "UNSUPPORTED_TOKEN_TYPE", field: path.isEmpty ? "token_kind" : "\(path).token_kind")
        }
        let deviceToken: DeviceToken
        do {
            deviceToken = try DeviceToken(provider: provider, value: token)
        } catch {
            throw APIError.invalid(
                PayloadValidationError(field: path.isEmpty ? error.field : "\(path).\(error.field)", problem: error.problem),
                code: "INVALID_TOKEN")
        }
        switch provider {
        case .apns:
            guard let appID, !appID.isEmpty, appID.count <= 255 else {
                throw APIError.badRequest("ios_app_id: required for APNs tokens", field: "ios_app_id")
            }
            return OpenedRegistration(token: deviceToken, appID: appID)
        case .fcm:
            guard appID == nil else {
                throw APIError.badRequest("ios_app_id: must be null for FCM tokens", field: "ios_app_id")
            }
            return OpenedRegistration(token: deviceToken, appID: nil)
        }
    }
}
