import DeviceState
import Foundation
import Hummingbird
import PushCrypto
import PushModels
import StatusPush
import SwiftProtobuf

/// `POST /status/v1/registration` (type 16 → 17): a client's registration, encrypted to
/// the server, checked by the spec's rules and stored with its own device.
extension StatusController {
    func registration(_ request: Request, context: IngestContext) async throws -> Response {
        let (server, envelope) = try await envelope(request, context: context, type: .pushNotificationRegistration)
        guard let answer = try await answerRegistration(envelope, server: server) else {
            throw APIError.badRequest(
                "payload: does not decrypt with the key of the signer and this server; discarded",
                code: "UNDECRYPTABLE", field: "payload")
        }
        return Self.protobufResponse(answer)
    }

    /// A registration's signed answer (17), whatever carried it; nil when its payload does
    /// not decrypt under the ECDH key of the signer and the server (a key extracted from a
    /// forged signature cannot): it is then discarded.
    func answerRegistration(_ envelope: StatusEnvelope, server: StatusServer) async throws -> [UInt8]? {
        guard
            let plaintext = try? StatusCrypto.decrypt(
                envelope.payload, key: try server.key.sharedSecret(with: envelope.signer))
        else { return nil }
        var response = StatusRegistrationResponse()
        response.requestID = Data(StatusCrypto.shake256(envelope.payload))
        if let error = await registrationError(plaintext, signer: envelope.signer, server: server) {
            response.success = false
            response.error = error
        } else {
            response.success = true
            response.error = .unknownErrorType
        }
        return try server.signed(response, type: .pushNotificationRegistrationResponse)
    }

    /// Applies a registration; nil when it is stored (or removed), else the error answered.
    func registrationError(_ plaintext: [UInt8], signer: Secp256k1.PublicKey, server: StatusServer) async
        -> StatusRegistrationResponse.ErrorType?
    {
        guard let registration = try? StatusRegistration(serializedBytes: plaintext) else { return .malformedMessage }
        let hashedKey = Fingerprint.hex(StatusCrypto.hashedPublicKey(signer))
        let installation = StatusServer.installationKey(registration.installationID)
        guard let stored = try? await store.storedVersion(hashedKey: hashedKey, installation: installation) else {
            return .internalError
        }
        do {
            switch StatusRegistrationRules.check(
                registration, client: signer, server: server.publicKey, storedVersion: stored)
            {
            case .refused(let error, _):
                return error
            case .unregister(let registration):
                return try await unregister(registration, hashedKey: hashedKey, installation: installation)
            case .register(let registration):
                return try await register(
                    registration, hashedKey: hashedKey, installation: installation, server: server)
            }
        } catch {
            return .internalError
        }
    }

    /// Removes the installation's registration and its device.
    func unregister(_ registration: StatusRegistration, hashedKey: String, installation: String) async throws
        -> StatusRegistrationResponse.ErrorType?
    {
        switch try await store.store(
            hashedKey: hashedKey, installation: installation, version: registration.version, registration: nil,
            device: nil, maxInstallations: StatusServer.maxInstallations)
        {
        case .stale: return .versionMismatch
        case .full: return .malformedMessage
        case .stored(let previous):
            if let previous, let device = try await devices.device(previous) { _ = try await devices.delete(device) }
            return nil
        }
    }

    /// Registers the installation's device and stores the registration with it; a device
    /// it replaces is removed, and a device made for a registration refused after all.
    func register(_ registration: StatusRegistration, hashedKey: String, installation: String, server: StatusServer)
        async throws -> StatusRegistrationResponse.ErrorType?
    {
        let provider: Provider = registration.tokenType == .apnToken ? .apns : .fcm
        if provider == .apns, !server.apnsTopics.contains(registration.apnTopic) { return .malformedMessage }
        guard
            let token = try? DeviceToken(
                provider: provider, value: registration.deviceToken, rules: provider == .apns ? .zulip : .strict)
        else { return .malformedMessage }
        let (device, created) = try await devices.register(
            DeviceRegistration(
                realmUUID: server.realm, userID: nil, token: token,
                appID: provider == .apns ? registration.apnTopic : nil,
                pushAccountID: StatusServer.pushAccount(
                    hashedKey: hashedKey, installation: registration.installationID),
                pushKey: nil, api: .status),
            nowMs: Wire.nowMillis())
        let outcome = try await store.store(
            hashedKey: hashedKey, installation: installation, version: registration.version,
            registration: try registration.serializedBytes(), device: device,
            maxInstallations: StatusServer.maxInstallations)
        if case .stored(let previous) = outcome {
            if let previous, previous != device, let old = try await devices.device(previous) {
                _ = try await devices.delete(old)
            }
        } else if created, let orphan = try await devices.device(device) {
            // Refused after all (a newer version came first, or too many installations).
            _ = try await devices.delete(orphan)
        }
        switch outcome {
        case .stale: return .versionMismatch
        case .full: return .malformedMessage
        case .stored: return nil
        }
    }
}
