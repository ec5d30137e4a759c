import ArgumentParser
import DevStack
import Foundation

/// `pushrelay-fuzz`: seeded random and mutated requests to every ingest endpoint, against a
/// private stack (started here, ingest restarted after each crash so the run goes on) or a
/// running one (`--url` with a registered server's credentials). Prints counts by status and
/// code and every distinct failure with its request.
@main
struct Fuzz: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "pushrelay-fuzz",
        abstract: "Fuzz every ingest endpoint; exit 1 on a crash or a 5xx, 2 on any other failed check.")

    @Option(help: "Requests to send.") var requests = 10_000
    @Option(help: "Seed (default: PUSHRELAY_FUZZ_SEED, else random); the same seed sends the same requests.")
    var seed: UInt64?
    @Option(help: "Ingest base URL of a running stack (default: start a private one).") var url: String?
    @Option(help: "With --url: a registered server's UUID (default: register a new server).") var serverUUID: String?
    @Option(help: "With --url: that server's API key.") var apiKey: String?
    @Option(help: "Extra service environment for the private stack, KEY=VALUE (repeatable).") var env: [String] = []
    @Option(help: "Write the report as JSON here.") var json: String?

    func run() async throws {
        let seed = seed ?? FuzzRandom.seed(environment: "PUSHRELAY_FUZZ_SEED")
        let fuzzer: EndpointFuzzer
        if let url {
            let target: EndpointFuzzer.Target
            if let serverUUID, let apiKey {
                target = EndpointFuzzer.Target(baseURL: url, serverUUID: serverUUID, apiKey: apiKey)
            } else {
                guard serverUUID == nil, apiKey == nil else {
                    throw ValidationError("--server-uuid and --api-key go together")
                }
                target = try await EndpointFuzzer.registerServer(baseURL: url)
            }
            fuzzer = EndpointFuzzer(
                target: target, requests: requests, seed: seed, liveness: .remote(url), log: Self.progress)
        } else {
            // The per-server rate limit and the per-address limits on failed authentications
            // and server registrations would answer most of a long run with 429 before any
            // validation; they are lifted here (`--env` sets them back).
            var environment = [
                "PUSHRELAY_RATELIMIT_REQUESTS": "1000000000", "PUSHRELAY_AUTH_FAILURES_MAX": "1000000",
                "PUSHRELAY_SERVER_REGISTRATIONS_MAX": "1000000", "PUSHRELAY_STATUS_REQUESTS_MAX": "1000000",
            ]
            for pair in env {
                let kv = pair.split(separator: "=", maxSplits: 1)
                guard kv.count == 2 else { throw ValidationError("--env \(pair): expected KEY=VALUE") }
                environment[String(kv[0])] = String(kv[1])
            }
            let stack = try await Stack.start(options: Stack.Options(environment: environment, partitions: 2))
            Self.progress("stack up in \(stack.directory)")
            let target = try await EndpointFuzzer.registerServer(baseURL: stack.ingestURL)
            fuzzer = EndpointFuzzer(
                target: target, requests: requests, seed: seed, liveness: .stack(stack), log: Self.progress)
        }
        Self.progress("seed \(seed), \(requests) requests")
        let report = try await fuzzer.run()
        print(report.text)
        if let json {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
            try encoder.encode(report).write(to: URL(fileURLWithPath: json))
        }
        if report.count(.crash) > 0 || report.count(.serverError) > 0 { throw ExitCode(1) }
        if !report.isClean { throw ExitCode(2) }
    }

    static func progress(_ line: String) {
        FileHandle.standardError.write(Data("pushrelay-fuzz: \(line)\n".utf8))
    }
}
