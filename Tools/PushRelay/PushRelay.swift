import ArgumentParser
import DeviceState
import Foundation
import Kafka
import PushModels
import RedisClient
import ReplayKit
import ServiceKit

/// `pushrelay`: the operator's one tool. It reads the same settings as the services
/// (`PUSHRELAY_REDIS_*`, `PUSHRELAY_KAFKA_*`, the key files) and acts on the relay's
/// Redis (servers, realms, devices), its Kafka topics (topics, trace, replay, dead
/// letters) and its HTTP API (send-test). docs/operations.md, "The pushrelay tool".
@main
struct PushRelay: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "pushrelay",
        abstract: "Operate a PushRelay: servers, devices, test sends, topics, traces, replays and dead letters.",
        discussion: """
            Exit status: 0 done; 1 failed (a store, the brokers or the API could not be used);
            2 not found (no such server, device or notification); 3 checked and not as it
            should be (a test push not sent to every device, a topic missing or smaller than
            configured); 4 timed out waiting; 64 the command line is wrong.
            Shell completion: pushrelay --generate-completion-script bash|zsh|fish.
            """,
        version: BuildInfo.line("pushrelay"),
        subcommands: [
            Servers.self, Realms.self, Devices.self, SendTest.self, Topics.self, DeadLetter.self, Trace.self,
            Replay.self, Settings.self,
        ])
}

/// The documented exit statuses (besides ArgumentParser's 0, 1 and 64).
enum Exit {
    static let notFound = ExitCode(2)
    static let unmet = ExitCode(3)
    static let timedOut = ExitCode(4)
}

/// A failure the operator must act on: printed as is, exit status 1.
struct CLIError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

enum OutputFormat: String, ExpressibleByArgument, CaseIterable, Sendable {
    case text, json
}

/// `--output text|json`, on every command that prints results.
struct OutputOptions: ParsableArguments {
    @Option(name: .long, help: "text for people, json for scripts (one JSON document on stdout).")
    var output: OutputFormat = .text

    var json: Bool { output == .json }

    /// Prints a JSON document (keys sorted, so the output is stable).
    func print(_ value: JSONValue) {
        Swift.print(String(decoding: Wire.canonical(value), as: UTF8.self))
    }
}

/// Every setting with its default and meaning: docs/configuration.md as Markdown.
struct Settings: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Print every setting with its default and meaning (docs/configuration.md).")

    func run() {
        print(SettingsCatalog.markdown(), terminator: "")
    }
}

/// The relay's stores and brokers, from the environment as a service builds them.
struct Operator {
    let reader: SettingsReader
    let settings: CommonSettings

    static func fromEnvironment() throws -> Operator {
        do {
            let reader = try SettingsReader.environment()
            return Operator(
                reader: reader, settings: try CommonSettings(service: "pushrelay", defaultPort: 0, reader: reader))
        } catch let error as SettingsError {
            throw CLIError("\(error)")
        }
    }

    var redis: RedisClient { RedisClient(configuration: settings.redis) }

    func servers() throws -> ServerStore {
        ServerStore(redis: redis, keys: settings.redisKeys, pepper: try reader.apiKeyPepper())
    }

    /// `--brokers`, else the services' settings (`PUSHRELAY_KAFKA_BROKERS` or
    /// `PUSHRELAY_KAFKA_BROKERS_FILE`), else, in a checkout after `make up`, the dev
    /// broker's `.run/kafka-bootstrap`.
    func brokers(_ given: String?) throws -> String {
        if let given { return given }
        if !settings.kafkaBrokers.isEmpty || !settings.kafkaBrokersFile.isEmpty {
            return try settings.kafka().bootstrapServers
        }
        guard let text = try? String(contentsOfFile: ".run/kafka-bootstrap", encoding: .utf8) else {
            throw ValidationError(
                "no brokers: pass --brokers, set PUSHRELAY_KAFKA_BROKERS, or run from the repo after `make up`")
        }
        return text.trimmingCharacters(in: .whitespacesAndNewlines)
    }
}

/// A progress bar on stderr for long work: redrawn in place on a terminal, a line per
/// tenth otherwise, nothing with `--quiet`.
struct ProgressBar {
    let label: String
    let quiet: Bool
    private let terminal = isatty(STDERR_FILENO) == 1
    private var lastTenth = -1

    init(_ label: String, quiet: Bool) {
        self.label = label
        self.quiet = quiet
    }

    mutating func update(done: Int, of total: Int) {
        guard !quiet, total > 0 else { return }
        let fraction = min(1, Double(done) / Double(total))
        if terminal {
            let filled = Int(fraction * 30)
            let bar = String(repeating: "#", count: filled) + String(repeating: "-", count: 30 - filled)
            let line = "\r\(label) [\(bar)] \(Int(fraction * 100))% \(done)/\(total)"
            FileHandle.standardError.write(Data(line.utf8))
            if done >= total { FileHandle.standardError.write(Data("\n".utf8)) }
        } else {
            let tenth = Int(fraction * 10)
            guard tenth != lastTenth else { return }
            lastTenth = tenth
            FileHandle.standardError.write(Data("\(label): \(done) of \(total)\n".utf8))
        }
    }

    func note(_ text: String) {
        guard !quiet else { return }
        FileHandle.standardError.write(Data("\(text)\n".utf8))
    }
}

/// Times as operators read them, and as JSON carries them (ms since the epoch).
enum Time {
    static func text(_ ms: Int64?) -> String { ms.map(ISOTime.format) ?? "-" }

    static func json(_ ms: Int64?) -> JSONValue { ms.map { .int($0) } ?? .null }
}

/// A uuid argument in the relay's canonical (lowercase) form.
func canonicalUUID(_ text: String, _ what: String) throws -> String {
    guard let parsed = UUID(uuidString: text) else { throw ValidationError("\(what): must be a UUID") }
    return parsed.uuidString.lowercased()
}
