import ArgumentParser
import Foundation
import Kafka
import PushModels
import ServiceKit

/// `pushrelay topics …`: the pipeline's topics, made as the settings say. Run by the
/// Kubernetes Job before the stages start (`create`), and by each stage's init container
/// (`wait`), so no stage consumes before its topics exist; `check` tells an operator
/// whether they are as configured.
struct Topics: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "topics", abstract: "Create the pipeline's topics, check them, or wait for them.",
        subcommands: [CreateTopics.self, CheckTopics.self, WaitForTopics.self, ListTopics.self])
}

/// The topics the stages use, from the same settings they read: the names
/// (`PUSHRELAY_TOPIC_*`), one retry topic per `PUSHRELAY_RETRY_DELAYS` entry, and how to
/// make them (`PUSHRELAY_TOPIC_PARTITIONS`, `…_REPLICATION_FACTOR`, `…_MIN_INSYNC_REPLICAS`,
/// `…_RETENTION_MS`).
struct TopicPlan {
    let kafka: KafkaConfiguration
    let specs: [TopicSpec]

    static func fromEnvironment() throws -> TopicPlan {
        let relay = try Operator.fromEnvironment()
        let reader = relay.reader
        let settings = relay.settings
        let partitions = try reader.int("pushrelay.topic.partitions", default: 12)
        let replication = try reader.int("pushrelay.topic.replication.factor", default: 3)
        let minInSync = try reader.int("pushrelay.topic.min.insync.replicas", default: 2)
        let retention = try reader.int("pushrelay.topic.retention.ms", default: 7 * 86_400_000)
        guard minInSync <= replication else {
            throw SettingsError(
                "PUSHRELAY_TOPIC_MIN_INSYNC_REPLICAS (\(minInSync)) is more than PUSHRELAY_TOPIC_REPLICATION_FACTOR "
                    + "(\(replication)): no write could ever be acknowledged")
        }
        let topics = settings.topics
        let names =
            [topics.requests, topics.outbound, topics.feedback, topics.deliveries, topics.deadLetter, topics.hooks]
            + (1...max(1, settings.retry.delays.count)).map(topics.retry)
        let configs = ["min.insync.replicas": "\(minInSync)", "retention.ms": "\(retention)"]
        return TopicPlan(
            kafka: try settings.kafka(),
            specs: names.map {
                TopicSpec(name: $0, partitions: partitions, replicationFactor: replication, configs: configs)
            })
    }
}

struct CreateTopics: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "create",
        abstract: "Create every missing topic; existing ones are left as they are. Safe to run again.")

    @Option(help: "How long to wait for the brokers, in seconds.") var timeoutSeconds = 30

    func run() async throws {
        guard (1...3600).contains(timeoutSeconds) else { throw ValidationError("--timeout-seconds: 1 to 3600") }
        let plan = try TopicPlan.fromEnvironment()
        let admin = try KafkaAdmin(configuration: plan.kafka)
        let outcome: [String: TopicCreation]
        do {
            outcome = try await admin.create(plan.specs, timeout: .seconds(timeoutSeconds))
        } catch let error as KafkaError {
            let existing = (try? await admin.topics(timeout: .seconds(5))) ?? [:]
            let missing = plan.specs.map(\.name).filter { existing[$0] == nil }
            throw CLIError(
                "cannot create \(missing.isEmpty ? "the topics" : missing.joined(separator: ", ")) at "
                    + "\(plan.kafka.bootstrapServers): \(error) (check PUSHRELAY_KAFKA_BROKERS, the "
                    + "PUSHRELAY_KAFKA_SECURITY_PROTOCOL/SASL/TLS settings, and that this user may create topics)")
        }
        var refused: [String] = []
        for spec in plan.specs {
            switch outcome[spec.name] {
            case .created:
                print(
                    "created \(spec.name): \(spec.partitions) partitions, replication factor \(spec.replicationFactor), "
                        + spec.configs.sorted(by: { $0.key < $1.key }).map { "\($0.key)=\($0.value)" }.joined(
                            separator: ", "))
            case .existed(let partitions) where partitions < spec.partitions:
                print(
                    "exists \(spec.name): \(partitions) partitions, fewer than the \(spec.partitions) configured; "
                        + "left as it is (more partitions move keys to other partitions: add them by hand, "
                        + "between deployments)")
            case .existed(let partitions):
                print("exists \(spec.name): \(partitions) partitions")
            case .refused(let code, let message):
                refused.append("\(spec.name): the broker refused it: \(code): \(message)")
            case nil:
                refused.append("\(spec.name): the broker did not say")
            }
        }
        guard refused.isEmpty else { throw CLIError(refused.joined(separator: "\n")) }
    }
}

struct WaitForTopics: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "wait", abstract: "Wait until every topic exists (a stage's init container).")

    @Option(help: "How long to wait in all, in seconds.") var timeoutSeconds = 600

    func run() async throws {
        guard (1...86_400).contains(timeoutSeconds) else { throw ValidationError("--timeout-seconds: 1 to 86400") }
        let plan = try TopicPlan.fromEnvironment()
        let admin = try KafkaAdmin(configuration: plan.kafka)
        let deadline = ContinuousClock.now + .seconds(timeoutSeconds)
        var missing = plan.specs.map(\.name)
        var problem = ""
        while true {
            do {
                let existing = try await admin.topics(timeout: .seconds(10))
                missing = plan.specs.map(\.name).filter { (existing[$0] ?? 0) == 0 }
                if missing.isEmpty {
                    print("every topic exists: \(plan.specs.map(\.name).joined(separator: ", "))")
                    return
                }
                problem = "missing: \(missing.joined(separator: ", "))"
            } catch {
                problem = "\(error)"
            }
            guard ContinuousClock.now < deadline else { break }
            print("waiting for the topics (\(problem))")
            try await Task.sleep(for: .seconds(2))
        }
        throw CLIError("the topics are not there after \(timeoutSeconds) s: \(problem)")
    }
}

struct ListTopics: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "list", abstract: "Print each pipeline topic and its partitions, or that it is missing.")

    func run() async throws {
        let plan = try TopicPlan.fromEnvironment()
        let existing = try await KafkaAdmin(configuration: plan.kafka).topics(timeout: .seconds(10))
        for spec in plan.specs {
            print("\(spec.name)\t\(existing[spec.name].map { "\($0) partitions" } ?? "missing")")
        }
    }
}

struct CheckTopics: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "check",
        abstract: "Check that every topic exists with at least the configured partitions.",
        discussion: "Exit status 3 when one is missing or has fewer partitions; 1 when the brokers cannot be asked.")

    @OptionGroup var output: OutputOptions

    func run() async throws {
        let plan = try TopicPlan.fromEnvironment()
        let existing: [String: Int]
        do {
            existing = try await KafkaAdmin(configuration: plan.kafka).topics(timeout: .seconds(10))
        } catch {
            throw CLIError("cannot list the topics at \(plan.kafka.bootstrapServers): \(error)")
        }
        var problems = 0
        var rows: [JSONValue] = []
        for spec in plan.specs {
            let partitions = existing[spec.name]
            let state =
                switch partitions {
                case nil: "missing"
                case let p? where p < spec.partitions: "fewer_partitions"
                default: "ok"
                }
            if state != "ok" { problems += 1 }
            rows.append([
                "topic": .string(spec.name), "state": .string(state),
                "partitions": partitions.map { .int(Int64($0)) } ?? .null, "configured": .int(Int64(spec.partitions)),
            ])
            if !output.json {
                print("\(spec.name)\t\(state)\t\(partitions.map(String.init) ?? "-") of \(spec.partitions) partitions")
            }
        }
        if output.json { output.print(["topics": .array(rows), "ok": .bool(problems == 0)]) }
        if problems > 0 { throw Exit.unmet }
    }
}
