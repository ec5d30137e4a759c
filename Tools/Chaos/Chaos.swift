import ArgumentParser
import DevStack
import Foundation
import PushModels

/// `chaos`: starts a private stack (Redis with AOF, the dev broker, the provider fakes,
/// the four services), pushes notifications while killing each stage and restarting
/// Redis, then prints the accounting of every accepted notification.
@main
struct Chaos: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Fault drill: push notifications while killing stages; account for every one.")

    @Option(help: "Notifications to send.") var notifications = 20_000
    @Option(help: "Users, each with --devices-per-user devices (APNs and FCM alternating).") var users = 500
    @Option(help: "Devices per user.") var devicesPerUser = 2
    @Option(help: "Notifications per second offered (0: flat out).") var rate = 400
    @Option(help: "Concurrent client connections.") var concurrency = 32
    @Option(help: "Share of device tokens the fake providers report dead.") var deadTokenShare = 0.02
    @Option(help: "Retry delays for the run's dispatcher.") var retryDelays = "1s,2s,5s"
    @Option(help: "Kafka partitions per topic in the dev broker.") var partitions = 6
    @Option(help: "Write the report as JSON to this file.") var json: String?
    @Option(help: "The provider fakes retire each HTTP/2 connection with a GOAWAY after this many requests (0: never).")
    var goawayEvery = 0

    func run() async throws {
        var settings = ChaosRun.Settings()
        settings.notifications = notifications
        settings.users = users
        settings.devicesPerUser = devicesPerUser
        settings.rate = rate
        settings.concurrency = concurrency
        settings.deadTokenShare = deadTokenShare
        progress("starting the stack")
        let stack = try await Stack.start(
            options: Stack.Options(
                environment: ["PUSHRELAY_RETRY_DELAYS": retryDelays, "PUSHRELAY_RATELIMIT_REQUESTS": "100000000"],
                partitions: partitions,
                fakesEnvironment: goawayEvery > 0 ? ["PUSHRELAY_FAKES_GOAWAY_EVERY": "\(goawayEvery)"] : [:]))
        progress("stack up in \(stack.directory)")
        let report = try await ChaosRun(stack: stack, settings: settings, log: progress).run()
        print(report.table)
        if !report.lostSamples.isEmpty { print("lost (message:device): \(report.lostSamples.joined(separator: ", "))") }
        if let json { try writeReport(report, to: json) }
        if report.lost > 0 || report.unexplainedDuplicates > 0 { throw ExitCode(1) }
    }
}
