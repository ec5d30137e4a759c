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
    var vapidKeyFile: String
    var vapidSubject: String
    var simplePushEnabled: Bool
    var endpoints: OutboundEndpoints.Settings
    var hmsURL: String
    var hmsTokenURL: String
    var hmsAppID: String
    var hmsClientID: String
    var hmsClientSecretFile: String
    var hmsCAFile: String
    var wnsTokenURL: String
    var wnsClientID: String
    var wnsClientSecretFile: String
    var wnsAllowedHosts: [String]
    var wnsCAFile: String

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
        vapidKeyFile = try reader.string("pushrelay.webpush.vapid.key.file", default: "")
        vapidSubject = try reader.string("pushrelay.webpush.vapid.subject", default: "")
        simplePushEnabled = try reader.bool("pushrelay.simplepush.enabled", default: true)
        let timeout = try reader.milliseconds("pushrelay.push.endpoint.timeout.ms", default: 15_000)
        let endpointCA = try reader.string("pushrelay.push.endpoint.ca.file", default: "")
        endpoints = OutboundEndpoints.Settings(
            allowedHosts: Set(try reader.list("pushrelay.push.endpoint.allowed.hosts")),
            caFile: endpointCA.isEmpty ? nil : endpointCA, readTimeout: timeout,
            maxConnectionsPerOrigin: try reader.int("pushrelay.push.endpoint.connections", default: 4))
        hmsURL = try reader.string("pushrelay.hms.url", default: HMSConfiguration.defaultBaseURL)
        hmsTokenURL = try reader.string("pushrelay.hms.token.url", default: HMSConfiguration.defaultTokenURL)
        hmsAppID = try reader.string("pushrelay.hms.app.id", default: "")
        hmsClientID = try reader.string("pushrelay.hms.client.id", default: "")
        hmsClientSecretFile = try reader.string("pushrelay.hms.client.secret.file", default: "")
        hmsCAFile = try reader.string("pushrelay.hms.ca.file", default: "")
        wnsTokenURL = try reader.string("pushrelay.wns.token.url", default: WNSConfiguration.defaultTokenURL)
        wnsClientID = try reader.string("pushrelay.wns.client.id", default: "")
        wnsClientSecretFile = try reader.string("pushrelay.wns.client.secret.file", default: "")
        wnsAllowedHosts = SettingsReader.list(
            try reader.string("pushrelay.wns.allowed.hosts", default: "notify.windows.com"))
        wnsCAFile = try reader.string("pushrelay.wns.ca.file", default: "")
    }

    /// A secret file's contents without the trailing newline editors add.
    static func secret(_ path: String) throws -> String {
        try String(contentsOfFile: path, encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
    }

    public func makeClients(logger: Logger) throws -> [Provider: any PushProviderClient] {
        var clients: [Provider: any PushProviderClient] = [:]
        if !apnsKeyFile.isEmpty {
            guard !apnsTeamID.isEmpty, !apnsKeyID.isEmpty else {
                throw SettingsError("PUSHRELAY_APNS_TEAM_ID and PUSHRELAY_APNS_KEY_ID are required with a key file")
            }
            let pem = try String(contentsOfFile: apnsKeyFile, encoding: .utf8)
            let apns = try APNsClient(
                configuration: APNsConfiguration(
                    baseURL: apnsURL, teamID: apnsTeamID, keyID: apnsKeyID, privateKeyPEM: pem,
                    caFile: apnsCAFile.isEmpty ? nil : apnsCAFile, connections: apnsConnections),
                logger: logger)
            clients[.apns] = apns
            clients[.apnsVoIP] = apns.voip()
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
        try addEndpointClients(to: &clients, logger: logger)
        if !hmsAppID.isEmpty || !hmsClientSecretFile.isEmpty {
            guard !hmsAppID.isEmpty, !hmsClientSecretFile.isEmpty else {
                throw SettingsError("PUSHRELAY_HMS_APP_ID and PUSHRELAY_HMS_CLIENT_SECRET_FILE go together")
            }
            clients[.hms] = try HMSClient(
                configuration: try HMSConfiguration(
                    baseURL: hmsURL, tokenURL: hmsTokenURL, appID: hmsAppID,
                    clientID: hmsClientID.isEmpty ? nil : hmsClientID,
                    clientSecret: try Self.secret(hmsClientSecretFile),
                    caFile: hmsCAFile.isEmpty ? nil : hmsCAFile),
                logger: logger)
        }
        return clients
    }

    /// Web Push, simple push and WNS: endpoints devices chose, all through one guard.
    private func addEndpointClients(to clients: inout [Provider: any PushProviderClient], logger: Logger) throws {
        let wnsConfigured = !wnsClientID.isEmpty || !wnsClientSecretFile.isEmpty
        guard !vapidKeyFile.isEmpty || simplePushEnabled || wnsConfigured else { return }
        let endpoints = OutboundEndpoints(settings: endpoints, logger: logger)
        var vapid: WebPushConfiguration?
        if !vapidKeyFile.isEmpty {
            guard !vapidSubject.isEmpty else {
                throw SettingsError(
                    "PUSHRELAY_WEBPUSH_VAPID_SUBJECT (a mailto: or https: contact) is required with a VAPID key")
            }
            vapid = try WebPushConfiguration(
                privateKey: try String(contentsOfFile: vapidKeyFile, encoding: .utf8), subject: vapidSubject,
                requestTimeout: self.endpoints.readTimeout)
            clients[.webpush] = try WebPushClient(
                provider: .webpush, configuration: vapid, endpoints: endpoints, logger: logger)
        }
        if simplePushEnabled {
            clients[.simplepush] = try WebPushClient(
                provider: .simplepush, configuration: vapid, endpoints: endpoints, logger: logger)
        }
        if wnsConfigured {
            guard !wnsClientID.isEmpty, !wnsClientSecretFile.isEmpty else {
                throw SettingsError("PUSHRELAY_WNS_CLIENT_ID and PUSHRELAY_WNS_CLIENT_SECRET_FILE go together")
            }
            clients[.wns] = try WNSClient(
                configuration: try WNSConfiguration(
                    tokenURL: wnsTokenURL, clientID: wnsClientID, clientSecret: try Self.secret(wnsClientSecretFile),
                    allowedHostSuffixes: wnsAllowedHosts, caFile: wnsCAFile.isEmpty ? nil : wnsCAFile,
                    requestTimeout: self.endpoints.readTimeout),
                endpoints: endpoints, logger: logger)
        }
    }
}
