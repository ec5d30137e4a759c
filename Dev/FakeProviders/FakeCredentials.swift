import Crypto
import CryptoExtras
import Foundation
import SwiftASN1
import X509

/// Everything the fakes need to look like Apple and Google to the dispatcher: a CA and
/// a server certificate for TLS, an APNs .p8 signing key with team and key ids, and an
/// FCM service account with its RSA key. Kept in a directory so a restarted fake
/// accepts the same credentials; generated on first use.
public struct FakeCredentials: Sendable {
    public let directory: String
    public let caPEM: String
    public let serverCertificatePEM: String
    public let serverKeyPEM: String
    public let apnsTeamID: String
    public let apnsKeyID: String
    /// PKCS#8 PEM, the format of Apple's .p8 files.
    public let apnsPrivateKeyPEM: String
    /// A second key of the same team (Apple takes every key of a team until it is
    /// revoked): what a rotation of the provider key moves to (`apns-second.env`).
    public let apnsSecondKeyID: String
    public let apnsSecondPrivateKeyPEM: String
    public let fcmProjectID: String
    public let fcmClientEmail: String
    public let fcmPrivateKeyID: String
    /// PKCS#8 PEM, as in Google's service-account JSON.
    public let fcmPrivateKeyPEM: String
    /// The Web Push application server's VAPID key (P-256, PEM).
    public let vapidPrivateKeyPEM: String
    /// Huawei Push Kit: the app id (also the OAuth client id) and its secret.
    public let hmsAppID: String
    public let hmsClientSecret: String
    /// WNS: the package SID and its client secret.
    public let wnsClientID: String
    public let wnsClientSecret: String

    /// The VAPID public key (65 bytes), the `applicationServerKey` devices subscribe with.
    public var vapidPublicKey: [UInt8] {
        (try? P256.Signing.PrivateKey(pemRepresentation: vapidPrivateKeyPEM)).map {
            Array($0.publicKey.x963Representation)
        } ?? []
    }

    public var caFile: String { "\(directory)/ca.pem" }
    public var apnsKeyFile: String { "\(directory)/apns-key.p8" }
    public var apnsSecondKeyFile: String { "\(directory)/apns-key-2.p8" }
    public var fcmServiceAccountFile: String { "\(directory)/fcm-service-account.json" }
    public var vapidKeyFile: String { "\(directory)/vapid-key.pem" }
    public var hmsClientSecretFile: String { "\(directory)/hms-client-secret" }
    public var wnsClientSecretFile: String { "\(directory)/wns-client-secret" }

    /// Loads the credentials in `directory`, creating any that are missing. The server
    /// certificate names localhost, 127.0.0.1 and `hostnames`; `teamID`/`keyID` pin the
    /// APNs ids (containers set them so the dispatcher can be configured in advance).
    public static func loadOrCreate(
        directory: String, hostnames: [String] = [], teamID: String? = nil, keyID: String? = nil
    ) throws -> FakeCredentials {
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let statePath = "\(directory)/fake-state.json"
        if let data = FileManager.default.contents(atPath: statePath),
            var stored = try? JSONDecoder().decode(Stored.self, from: data)
        {
            // A state from before the Web Push, HMS and WNS fakes gains their credentials.
            if stored.fillMissing() {
                _ = FileManager.default.createFile(
                    atPath: statePath, contents: try JSONEncoder().encode(stored),
                    attributes: [.posixPermissions: 0o600])
            }
            return FakeCredentials(directory: directory, stored: stored)
        }
        var stored = try Stored.generate(hostnames: hostnames)
        _ = stored.fillMissing()
        if let teamID { stored.apnsTeamID = teamID }
        if let keyID { stored.apnsKeyID = keyID }
        let data = try JSONEncoder().encode(stored)
        _ = FileManager.default.createFile(atPath: statePath, contents: data, attributes: [.posixPermissions: 0o600])
        return FakeCredentials(directory: directory, stored: stored)
    }

    private init(directory: String, stored: Stored) {
        self.directory = directory
        caPEM = stored.caPEM
        serverCertificatePEM = stored.serverCertificatePEM
        serverKeyPEM = stored.serverKeyPEM
        apnsTeamID = stored.apnsTeamID
        apnsKeyID = stored.apnsKeyID
        apnsPrivateKeyPEM = stored.apnsPrivateKeyPEM
        apnsSecondKeyID = stored.apnsSecondKeyID ?? ""
        apnsSecondPrivateKeyPEM = stored.apnsSecondPrivateKeyPEM ?? ""
        fcmProjectID = stored.fcmProjectID
        fcmClientEmail = stored.fcmClientEmail
        fcmPrivateKeyID = stored.fcmPrivateKeyID
        fcmPrivateKeyPEM = stored.fcmPrivateKeyPEM
        vapidPrivateKeyPEM = stored.vapidPrivateKeyPEM ?? ""
        hmsAppID = stored.hmsAppID ?? ""
        hmsClientSecret = stored.hmsClientSecret ?? ""
        wnsClientID = stored.wnsClientID ?? ""
        wnsClientSecret = stored.wnsClientSecret ?? ""
    }

    public func apnsSecondPublicKeyPEM() throws -> String {
        try P256.Signing.PrivateKey(pemRepresentation: apnsSecondPrivateKeyPEM).publicKey.pemRepresentation
    }

    public func apnsPublicKeyPEM() throws -> String {
        try P256.Signing.PrivateKey(pemRepresentation: apnsPrivateKeyPEM).publicKey.pemRepresentation
    }

    public func fcmPublicKeyPEM() throws -> String {
        try _RSA.Signing.PrivateKey(pemRepresentation: fcmPrivateKeyPEM).publicKey.pemRepresentation
    }

    /// Writes the files the dispatcher reads, with the fakes' current URLs, and an env
    /// file (`dispatcher.env`) that points a dispatcher at them.
    public func writeClientFiles(
        apnsURL: String, fcmURL: String, pushURL: String = "https://localhost",
        endpointHosts: [String] = ["localhost", "127.0.0.1"]
    ) throws {
        try caPEM.write(toFile: caFile, atomically: true, encoding: .utf8)
        try apnsPrivateKeyPEM.write(toFile: apnsKeyFile, atomically: true, encoding: .utf8)
        try apnsSecondPrivateKeyPEM.write(toFile: apnsSecondKeyFile, atomically: true, encoding: .utf8)
        try """
        PUSHRELAY_APNS_KEY_ID=\(apnsSecondKeyID)
        PUSHRELAY_APNS_KEY_FILE=\(apnsSecondKeyFile)

        """.write(toFile: "\(directory)/apns-second.env", atomically: true, encoding: .utf8)
        try vapidPrivateKeyPEM.write(toFile: vapidKeyFile, atomically: true, encoding: .utf8)
        try hmsClientSecret.write(toFile: hmsClientSecretFile, atomically: true, encoding: .utf8)
        try wnsClientSecret.write(toFile: wnsClientSecretFile, atomically: true, encoding: .utf8)
        let account: [String: String] = [
            "type": "service_account", "project_id": fcmProjectID, "private_key_id": fcmPrivateKeyID,
            "private_key": fcmPrivateKeyPEM, "client_email": fcmClientEmail, "client_id": "100000000000000000000",
            "token_uri": "\(fcmURL)/token",
        ]
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        try encoder.encode(account).write(to: URL(fileURLWithPath: fcmServiceAccountFile))
        let env = """
            PUSHRELAY_APNS_URL=\(apnsURL)
            PUSHRELAY_APNS_TEAM_ID=\(apnsTeamID)
            PUSHRELAY_APNS_KEY_ID=\(apnsKeyID)
            PUSHRELAY_APNS_KEY_FILE=\(apnsKeyFile)
            PUSHRELAY_APNS_CA_FILE=\(caFile)
            PUSHRELAY_FCM_URL=\(fcmURL)
            PUSHRELAY_FCM_SERVICE_ACCOUNT_FILE=\(fcmServiceAccountFile)
            PUSHRELAY_FCM_CA_FILE=\(caFile)
            PUSHRELAY_WEBPUSH_VAPID_KEY_FILE=\(vapidKeyFile)
            PUSHRELAY_WEBPUSH_VAPID_SUBJECT=mailto:operators@pushrelay.invalid
            PUSHRELAY_PUSH_ENDPOINT_ALLOWED_HOSTS=\(endpointHosts.joined(separator: ","))
            PUSHRELAY_PUSH_ENDPOINT_CA_FILE=\(caFile)
            PUSHRELAY_HMS_URL=\(pushURL)
            PUSHRELAY_HMS_TOKEN_URL=\(pushURL)/oauth2/v3/token
            PUSHRELAY_HMS_APP_ID=\(hmsAppID)
            PUSHRELAY_HMS_CLIENT_SECRET_FILE=\(hmsClientSecretFile)
            PUSHRELAY_HMS_CA_FILE=\(caFile)
            PUSHRELAY_WNS_TOKEN_URL=\(pushURL)/accesstoken.srf
            PUSHRELAY_WNS_CLIENT_ID=\(wnsClientID)
            PUSHRELAY_WNS_CLIENT_SECRET_FILE=\(wnsClientSecretFile)
            PUSHRELAY_WNS_ALLOWED_HOSTS=\(endpointHosts.joined(separator: ","))
            PUSHRELAY_WNS_CA_FILE=\(caFile)

            """
        try env.write(toFile: "\(directory)/dispatcher.env", atomically: true, encoding: .utf8)
    }

    private struct Stored: Codable {
        var caPEM: String
        var serverCertificatePEM: String
        var serverKeyPEM: String
        var apnsTeamID: String
        var apnsKeyID: String
        var apnsPrivateKeyPEM: String
        var apnsSecondKeyID: String?
        var apnsSecondPrivateKeyPEM: String?
        var fcmProjectID: String
        var fcmClientEmail: String
        var fcmPrivateKeyID: String
        var fcmPrivateKeyPEM: String
        var vapidPrivateKeyPEM: String?
        var hmsAppID: String?
        var hmsClientSecret: String?
        var wnsClientID: String?
        var wnsClientSecret: String?

        /// Generates the credentials a stored state lacks; true when it did.
        mutating func fillMissing() -> Bool {
            func secret() -> String {
                (0..<24).map { _ in String(format: "%02x", UInt8.random(in: 0...255)) }.joined()
            }
            var changed = false
            if apnsSecondKeyID == nil || apnsSecondPrivateKeyPEM == nil {
                apnsSecondKeyID = String(
                    (0..<10).map { _ in "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789".randomElement() ?? "A" })
                apnsSecondPrivateKeyPEM = P256.Signing.PrivateKey().pemRepresentation
                changed = true
            }
            if vapidPrivateKeyPEM == nil {
                vapidPrivateKeyPEM = P256.Signing.PrivateKey().pemRepresentation
                changed = true
            }
            if hmsAppID == nil || hmsClientSecret == nil {
                hmsAppID = String(UInt64.random(in: 100_000_000...999_999_999))
                hmsClientSecret = secret()
                changed = true
            }
            if wnsClientID == nil || wnsClientSecret == nil {
                wnsClientID =
                    "ms-app://s-1-15-2-\(UInt32.random(in: 1...UInt32.max))-\(UInt32.random(in: 1...UInt32.max))"
                wnsClientSecret = secret()
                changed = true
            }
            return changed
        }

        static func generate(hostnames: [String]) throws -> Stored {
            let now = Date()
            let caKey = P256.Signing.PrivateKey()
            let caName = try DistinguishedName {
                OrganizationName("PushRelay fakes")
                CommonName("PushRelay Fake Provider CA")
            }
            let ca = try Certificate(
                version: .v3, serialNumber: .init(), publicKey: .init(caKey.publicKey),
                notValidBefore: now - 3600, notValidAfter: now + 5 * 365 * 86400, issuer: caName, subject: caName,
                signatureAlgorithm: .ecdsaWithSHA256,
                extensions: try Certificate.Extensions {
                    Critical(BasicConstraints.isCertificateAuthority(maxPathLength: 0))
                    Critical(KeyUsage(keyCertSign: true, cRLSign: true))
                },
                issuerPrivateKey: .init(caKey))
            let serverKey = P256.Signing.PrivateKey()
            let server = try Certificate(
                version: .v3, serialNumber: .init(), publicKey: .init(serverKey.publicKey),
                notValidBefore: now - 3600, notValidAfter: now + 2 * 365 * 86400, issuer: caName,
                subject: try DistinguishedName { CommonName("localhost") },
                signatureAlgorithm: .ecdsaWithSHA256,
                extensions: try Certificate.Extensions {
                    Critical(BasicConstraints.notCertificateAuthority)
                    Critical(KeyUsage(digitalSignature: true))
                    try ExtendedKeyUsage([.serverAuth])
                    SubjectAlternativeNames(
                        [.dnsName("localhost"), .ipAddress(ASN1OctetString(contentBytes: [127, 0, 0, 1]))]
                            + hostnames.map { .dnsName($0) })
                },
                issuerPrivateKey: .init(caKey))
            let rsa = try _RSA.Signing.PrivateKey(keySize: .bits2048)
            func hex(_ count: Int) -> String {
                (0..<count).map { _ in String(format: "%02x", UInt8.random(in: 0...255)) }.joined()
            }
            let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
            func appleID() -> String { String((0..<10).map { _ in alphabet[Int.random(in: 0..<alphabet.count)] }) }
            return Stored(
                caPEM: try ca.serializeAsPEM().pemString,
                serverCertificatePEM: try server.serializeAsPEM().pemString,
                serverKeyPEM: serverKey.pemRepresentation,
                apnsTeamID: appleID(), apnsKeyID: appleID(),
                apnsPrivateKeyPEM: P256.Signing.PrivateKey().pemRepresentation,
                fcmProjectID: "pushrelay-fake", fcmClientEmail: "relay@pushrelay-fake.iam.gserviceaccount.com",
                fcmPrivateKeyID: hex(20), fcmPrivateKeyPEM: rsa.pkcs8PEMRepresentation)
        }
    }
}
