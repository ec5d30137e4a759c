import ArgumentParser
import DevStack
import Foundation

/// `loadgen`: starts a private stack (release binaries next to it) and drives it phase
/// by phase, printing a table and writing JSON. See docs/performance.md.
@main
struct LoadGen: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "End-to-end load: throughput, latency, consumer lag, RSS and CPU per process.")

    /// A warm-up (the first seconds of a new stack stall while its connections open and
    /// groups settle), then 500/s, a rate this machine carries, for latency while the dev
    /// broker holds little (see `partitions`); then flat out and 2,000/s as before.
    @Option(help: "Phases as name=rate:seconds, rate 0 for flat out.")
    var phases = ["warm-up=500:15", "500/s=500:60", "flat-out=0:60", "2000/s=2000:60"]
    @Option(help: "Realms (servers) the users are spread over.") var realms = 10
    @Option(help: "Users.") var users = 1000
    @Option(help: "Devices per user (APNs and FCM alternating).") var devicesPerUser = 2
    @Option(help: "Concurrent keep-alive client connections.") var connections = 64
    /// The dev broker (librdkafka 2.0.2's mock cluster) finds the batch a fetch asks for by
    /// walking the partition's batches from the oldest, and keeps ~5 MiB a partition with
    /// no way to keep less; so its cost per record grows with what a partition holds and
    /// falls with the square of the records per batch. Fewer partitions and a longer
    /// `linger.ms` both make batches larger: 8 and 20 ms cut its share of the CPU by
    /// 30–40 % against 24 and 5 ms (docs/performance.md, "The dev broker"), and 8 × 5 MiB
    /// still holds the flat-out phase's backlog.
    @Option(help: "Kafka partitions per topic in the dev broker.") var partitions = 8
    @Option(help: "The services' producer linger.ms (PUSHRELAY_KAFKA_PRODUCER_PROPERTIES).") var lingerMs = 20
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
        var environment = [
            "PUSHRELAY_RATELIMIT_REQUESTS": "1000000000",
            "PUSHRELAY_KAFKA_PRODUCER_PROPERTIES": "linger.ms=\(lingerMs)",
        ]
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
            Report(
                machine: Self.machine(), settings: "\(settings), \(partitions) partitions, linger.ms \(lingerMs)",
                phases: reports),
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
