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
struct FakeProvidersServer {
    static func main() async {
        // One event loop, as the services: at 1,000 notifications/s the fakes spent
        // 221 µs a notification against 231–252 with one loop per core
        // (benchmarks/history/19-issue-27-part-3-threads-and-requests.md).
        ServiceRuntime.install()
        await runMain { try await run(SettingsReader.environment(extraEntries: settings)) }
    }

    /// The fakes' own settings (not the services': they stay out of `SettingsCatalog`).
    static let settings: [String: SettingsCatalog.Kind] = [
        "pushrelay.fakes.dir": .path,
        "pushrelay.fakes.apns.port": .int(0...65535),
        "pushrelay.fakes.fcm.port": .int(0...65535),
        "pushrelay.fakes.control.port": .int(0...65535),
        "pushrelay.fakes.push.port": .int(0...65535),
        // The Waku node's REST API (nwaku's default port; 0: none), and its message cache.
        "pushrelay.fakes.waku.port": .int(0...65535),
        "pushrelay.fakes.waku.cache.capacity": .int(1...1_000_000),
        "pushrelay.fakes.otlp.grpc.port": .int(0...65535),
        "pushrelay.fakes.host": .text,
        "pushrelay.fakes.public.host": .text,
        "pushrelay.fakes.apns.team.id": .text,
        "pushrelay.fakes.apns.key.id": .text,
        "pushrelay.fakes.max.recorded": .int(0...10_000_000),
        "pushrelay.fakes.goaway.every": .int(0...1_000_000_000),
        // After a GOAWAY: answer the streams it covers for up to this long (some late), then close.
        "pushrelay.fakes.goaway.grace.ms": .int(0...600_000),
    ]

    static func run(_ reader: SettingsReader) async throws {
        let directory = try reader.string("pushrelay.fakes.dir", default: ".run/fakes")
        let ports = FakeServers.Ports(
            apns: try reader.int("pushrelay.fakes.apns.port", default: 8443),
            fcm: try reader.int("pushrelay.fakes.fcm.port", default: 8444),
            control: try reader.int("pushrelay.fakes.control.port", default: 8445),
            push: try reader.int("pushrelay.fakes.push.port", default: 8446),
            waku: try reader.int("pushrelay.fakes.waku.port", default: 8645))
        LoggingSystem.bootstrap { label in
            var handler = StreamLogHandler.standardError(label: label)
            handler.logLevel = .info
            return handler
        }
        let logger = Logger(label: "pushrelay.provider-fakes")
        let fakes = try FakeServers(
            directory: directory, host: try reader.string("pushrelay.fakes.host", default: "127.0.0.1"),
            publicHost: try reader.string("pushrelay.fakes.public.host", default: "localhost"), ports: ports,
            apnsTeamID: try reader.raw("pushrelay.fakes.apns.team.id"),
            apnsKeyID: try reader.raw("pushrelay.fakes.apns.key.id"),
            maxRecorded: try reader.int("pushrelay.fakes.max.recorded", default: 0),
            goAwayEvery: try reader.int("pushrelay.fakes.goaway.every", default: 0),
            goAwayGraceMilliseconds: try reader.int("pushrelay.fakes.goaway.grace.ms", default: 0),
            wakuCacheCapacity: try reader.int("pushrelay.fakes.waku.cache.capacity", default: 1000))
        let apps = try await fakes.applications(logger: logger)
        logger.info(
            "provider fakes ready",
            metadata: [
                "apns": "\(fakes.apnsURL)", "fcm": "\(fakes.fcmURL)", "push": "\(fakes.pushURL)",
                "control": "http://127.0.0.1:\(ports.control)", "dispatcher_env": "\(directory)/dispatcher.env",
                "waku": "\(ports.waku > 0 ? "http://127.0.0.1:\(ports.waku)" : "off")",
            ])
        var services = apps.map { $0 as any Service }
        // The OTLP/gRPC trace receiver, when given a port (OTLP/HTTP is on the control port).
        let grpcPort = try reader.int("pushrelay.fakes.otlp.grpc.port", default: 0)
        if grpcPort > 0 { services.append(fakes.otlp.grpcServer(port: grpcPort)) }
        try await runServices(services, shutdownTimeout: .seconds(10), logger: logger)
    }
}
