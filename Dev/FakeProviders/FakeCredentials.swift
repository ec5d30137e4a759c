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
    public let fcmProjectID: String
    public let fcmClientEmail: String
    public let fcmPrivateKeyID: String
    /// PKCS#8 PEM, as in Google's service-account JSON.
    public let fcmPrivateKeyPEM: String

    public var caFile: String { "\(directory)/ca.pem" }
    public var apnsKeyFile: String { "\(directory)/apns-key.p8" }
    public var fcmServiceAccountFile: String { "\(directory)/fcm-service-account.json" }

    /// Loads the credentials in `directory`, creating any that are missing. The server
    /// certificate names localhost, 127.0.0.1 and `hostnames`; `teamID`/`keyID` pin the
    /// APNs ids (containers set them so the dispatcher can be configured in advance).
    public static func loadOrCreate(
        directory: String, hostnames: [String] = [], teamID: String? = nil, keyID: String? = nil
    ) throws -> FakeCredentials {
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let statePath = "\(directory)/fake-state.json"
        if let data = FileManager.default.contents(atPath: statePath),
            let stored = try? JSONDecoder().decode(Stored.self, from: data)
        {
            return FakeCredentials(directory: directory, stored: stored)
        }
        var stored = try Stored.generate(hostnames: hostnames)
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
        fcmProjectID = stored.fcmProjectID
        fcmClientEmail = stored.fcmClientEmail
        fcmPrivateKeyID = stored.fcmPrivateKeyID
        fcmPrivateKeyPEM = stored.fcmPrivateKeyPEM
    }

    public func apnsPublicKeyPEM() throws -> String {
        try P256.Signing.PrivateKey(pemRepresentation: apnsPrivateKeyPEM).publicKey.pemRepresentation
    }

    public func fcmPublicKeyPEM() throws -> String {
        try _RSA.Signing.PrivateKey(pemRepresentation: fcmPrivateKeyPEM).publicKey.pemRepresentation
    }

    /// Writes the files the dispatcher reads, with the fakes' current URLs, and an env
    /// file (`dispatcher.env`) that points a dispatcher at them.
    public func writeClientFiles(apnsURL: String, fcmURL: String) throws {
        try caPEM.write(toFile: caFile, atomically: true, encoding: .utf8)
        try apnsPrivateKeyPEM.write(toFile: apnsKeyFile, atomically: true, encoding: .utf8)
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
        var fcmProjectID: String
        var fcmClientEmail: String
        var fcmPrivateKeyID: String
        var fcmPrivateKeyPEM: String

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
