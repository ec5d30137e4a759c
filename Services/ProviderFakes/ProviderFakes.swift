import FakeProviders
import Foundation
import Hummingbird
import Logging
import ServiceKit
import ServiceLifecycle

/// provider-fakes: local stand-ins for APNs and FCM (the only external parts these
/// machines cannot reach). Writes its CA, keys and a `dispatcher.env` to the state
/// directory; serves a control API for tests and the demo.
@main
struct ProviderFakesMain {
    static func main() async throws {
        let env = ProcessInfo.processInfo.environment
        let directory = env["PUSHRELAY_FAKES_DIR"] ?? ".run/fakes"
        let ports = FakeServers.Ports(
            apns: Int(env["PUSHRELAY_FAKES_APNS_PORT"] ?? "") ?? 8443,
            fcm: Int(env["PUSHRELAY_FAKES_FCM_PORT"] ?? "") ?? 8444,
            control: Int(env["PUSHRELAY_FAKES_CONTROL_PORT"] ?? "") ?? 8445)
        LoggingSystem.bootstrap { label in
            var handler = StreamLogHandler.standardError(label: label)
            handler.logLevel = .info
            return handler
        }
        let logger = Logger(label: "pushrelay.provider-fakes")
        let fakes = try FakeServers(
            directory: directory, host: env["PUSHRELAY_FAKES_HOST"] ?? "127.0.0.1",
            publicHost: env["PUSHRELAY_FAKES_PUBLIC_HOST"] ?? "localhost", ports: ports,
            apnsTeamID: env["PUSHRELAY_FAKES_APNS_TEAM_ID"], apnsKeyID: env["PUSHRELAY_FAKES_APNS_KEY_ID"],
            maxRecorded: Int(env["PUSHRELAY_FAKES_MAX_RECORDED"] ?? "") ?? 0)
        let apps = try await fakes.applications(logger: logger)
        logger.info(
            "provider fakes ready",
            metadata: [
                "apns": "\(fakes.apnsURL)", "fcm": "\(fakes.fcmURL)",
                "control": "http://127.0.0.1:\(ports.control)", "dispatcher_env": "\(directory)/dispatcher.env",
            ])
        try await runServices(apps.map { $0 as any Service }, logger: logger)
    }
}
