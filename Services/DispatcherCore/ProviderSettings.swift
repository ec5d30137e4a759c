import Foundation
import Logging
import Providers
import PushModels
import ServiceKit

/// Provider endpoints and credentials. A provider whose credentials are not set is
/// not started; its pushes are recorded as failed (`provider_not_configured`).
public struct ProviderSettings: Sendable {
    var apnsURL: String
    var apnsTeamID: String
    var apnsKeyID: String
    var apnsKeyFile: String
    var apnsCAFile: String
    var apnsConnections: Int
    var fcmURL: String
    var fcmServiceAccountFile: String
    var fcmProjectID: String
    var fcmCAFile: String
    var fcmConnections: Int

    public init(reader: SettingsReader) throws {
        apnsURL = try reader.string("pushrelay.apns.url", default: "https://api.push.apple.com")
        apnsTeamID = try reader.string("pushrelay.apns.team.id", default: "")
        apnsKeyID = try reader.string("pushrelay.apns.key.id", default: "")
        apnsKeyFile = try reader.string("pushrelay.apns.key.file", default: "")
        apnsCAFile = try reader.string("pushrelay.apns.ca.file", default: "")
        apnsConnections = try reader.int("pushrelay.apns.connections", default: 2)
        fcmURL = try reader.string("pushrelay.fcm.url", default: "https://fcm.googleapis.com")
        fcmServiceAccountFile = try reader.string("pushrelay.fcm.service.account.file", default: "")
        fcmProjectID = try reader.string("pushrelay.fcm.project.id", default: "")
        fcmCAFile = try reader.string("pushrelay.fcm.ca.file", default: "")
        fcmConnections = try reader.int("pushrelay.fcm.connections", default: 2)
    }

    public func makeClients(logger: Logger) throws -> [Provider: any PushProviderClient] {
        var clients: [Provider: any PushProviderClient] = [:]
        if !apnsKeyFile.isEmpty {
            guard !apnsTeamID.isEmpty, !apnsKeyID.isEmpty else {
                throw SettingsError("PUSHRELAY_APNS_TEAM_ID and PUSHRELAY_APNS_KEY_ID are required with a key file")
            }
            let pem = try String(contentsOfFile: apnsKeyFile, encoding: .utf8)
            clients[.apns] = try APNsClient(
                configuration: APNsConfiguration(
                    baseURL: apnsURL, teamID: apnsTeamID, keyID: apnsKeyID, privateKeyPEM: pem,
                    caFile: apnsCAFile.isEmpty ? nil : apnsCAFile, connections: apnsConnections),
                logger: logger)
        }
        if !fcmServiceAccountFile.isEmpty {
            let account = try JSONDecoder().decode(
                ServiceAccount.self, from: Data(contentsOf: URL(fileURLWithPath: fcmServiceAccountFile)))
            clients[.fcm] = try FCMClient(
                configuration: try FCMConfiguration(
                    baseURL: fcmURL, serviceAccount: account, projectID: fcmProjectID.isEmpty ? nil : fcmProjectID,
                    caFile: fcmCAFile.isEmpty ? nil : fcmCAFile, connections: fcmConnections),
                logger: logger)
        }
        return clients
    }
}
