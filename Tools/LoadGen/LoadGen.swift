import ArgumentParser
import DevStack
import Foundation

/// `loadgen`: starts a private stack (release binaries next to it) and drives it phase
/// by phase, printing a table and writing JSON. See docs/performance.md.
@main
struct LoadGen: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "End-to-end load: throughput, latency, consumer lag, RSS and CPU per process.")

    @Option(help: "Phases as name=rate:seconds, rate 0 for flat out.")
    var phases = ["flat-out=0:60", "2000/s=2000:60"]
    @Option(help: "Realms (servers) the users are spread over.") var realms = 10
    @Option(help: "Users.") var users = 1000
    @Option(help: "Devices per user (APNs and FCM alternating).") var devicesPerUser = 2
    @Option(help: "Concurrent keep-alive client connections.") var connections = 64
    /// 24, as every `make bench` before. The dev broker (librdkafka's mock cluster) walks
    /// a partition's retained batches for each batch it serves, so fewer partitions cost
    /// it less; but it keeps only ~5 MiB a partition, and with 12 the flat-out phase's
    /// backlog outgrows that and spills into the next phase
    /// (benchmarks/history/22-issue-27-part-6-dev-broker.md).
    @Option(help: "Kafka partitions per topic in the dev broker.") var partitions = 24
    @Option(help: "Extra service environment, KEY=VALUE (repeatable).") var env: [String] = []
    @Option(help: "Write the reports as JSON here.") var json = "benchmarks/results/latest.json"
    @Option(help: "Trace this share of notifications (0...1) with OpenTelemetry, exported to the fakes; off if unset.")
    var traceRatio: Double?

    func run() async throws {
        var settings = LoadRun.Settings()
        settings.realms = realms
        settings.users = users
        settings.devicesPerUser = devicesPerUser
        settings.connections = connections
        settings.phases = try phases.map { spec in
            let parts = spec.split(separator: "=", maxSplits: 1)
            let numbers = parts.last?.split(separator: ":") ?? []
            guard parts.count == 2, numbers.count == 2, let rate = Int(numbers[0]), let seconds = Int(numbers[1]) else {
                throw ValidationError("phase \(spec): expected name=rate:seconds")
            }
            return LoadRun.Phase(name: String(parts[0]), rate: rate, seconds: seconds)
        }
        var environment = ["PUSHRELAY_RATELIMIT_REQUESTS": "1000000000"]
        for pair in env {
            let kv = pair.split(separator: "=", maxSplits: 1)
            guard kv.count == 2 else { throw ValidationError("--env \(pair): expected KEY=VALUE") }
            environment[String(kv[0])] = String(kv[1])
        }
        if let traceRatio, !(0...1).contains(traceRatio) {
            throw ValidationError("--trace-ratio \(traceRatio): expected 0 to 1")
        }
        var options = Stack.Options(
            environment: environment, partitions: partitions,
            fakesEnvironment: ["PUSHRELAY_FAKES_MAX_RECORDED": "1000"])
        options.tracingRatio = traceRatio
        let stack = try await Stack.start(options: options)
        progress(
            "stack up in \(stack.directory) (binaries: \(stack.binDirectory))"
                + (traceRatio.map { ", tracing \($0 * 100) % of notifications" } ?? ""))
        let reports = try await LoadRun(stack: stack, settings: settings, log: progress).run()
        print(LoadRun.table(reports))
        try writeReport(
            Report(machine: Self.machine(), settings: "\(settings), \(partitions) partitions", phases: reports),
            to: json)
        print("wrote \(json)")
    }

    struct Report: Encodable {
        var machine: String
        var settings: String
        var phases: [LoadRun.PhaseReport]
    }

    static func machine() -> String {
        let cpu =
            (try? String(contentsOfFile: "/proc/cpuinfo", encoding: .utf8))?.split(separator: "\n")
            .first { $0.hasPrefix("model name") }.map {
                String($0.split(separator: ":").last ?? "").trimmingCharacters(in: .whitespaces)
            } ?? "?"
        return
            "\(ProcessInfo.processInfo.activeProcessorCount) cores, \(cpu), \(ProcessInfo.processInfo.physicalMemory >> 30) GiB"
    }
}

extension LoadRun.Settings: CustomStringConvertible {
    public var description: String {
        "\(realms) realms, \(users) users × \(devicesPerUser) devices, \(connections) connections"
    }
}
