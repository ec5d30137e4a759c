import DevStack
import Foundation
import PushModels
import Testing

extension StackTests {
    /// `pushrelay topics`, as the Kubernetes topics Job and the stages' init containers
    /// run it, against the stack's broker (librdkafka's mock: it has the pipeline's topics,
    /// and never answers CreateTopics, so a missing topic shows how a refusal reads).
    @Suite struct TopicsToolTests {
        /// Runs the tool with the stack's settings plus `extra`; its exit status and output.
        static func run(_ arguments: [String], _ extra: [String: String] = [:]) async throws -> (Int32, String) {
            let stack = try await Stack.get()
            var env = stack.environment(for: .encryptor)
            env.merge(extra) { _, new in new }
            let log = FileManager.default.temporaryDirectory.appendingPathComponent("topics-\(UUID().uuidString).log")
                .path
            defer { try? FileManager.default.removeItem(atPath: log) }
            let process = try Stack.launch(
                "\(stack.binDirectory)/pushrelay", ["topics"] + arguments, environment: env, log: log)
            try await Stack.waitFor("pushrelay topics \(arguments.first ?? "")", timeout: .seconds(90)) {
                !process.isRunning
            }
            return (process.terminationStatus, try String(contentsOfFile: log, encoding: .utf8))
        }

        @Test func createIsIdempotentWhenEveryTopicExists() async throws {
            let (status, output) = try await Self.run(["create", "--timeout-seconds", "10"])
            #expect(status == 0, "\(output)")
            for topic in ["push.requests", "push.outbound", "push.deadletter", "push.retry.1", "push.retry.3"] {
                #expect(output.contains("exists \(topic): 6 partitions"), "\(output)")
            }
            // Fewer partitions than configured: said, and left alone (more would move keys).
            let (again, said) = try await Self.run(["create"], ["PUSHRELAY_TOPIC_PARTITIONS": "12"])
            #expect(again == 0)
            #expect(said.contains("fewer than the 12 configured"), "\(said)")
        }

        @Test func waitReturnsOnceTheTopicsExist() async throws {
            let (status, output) = try await Self.run(["wait", "--timeout-seconds", "20"])
            #expect(status == 0, "\(output)")
            #expect(output.contains("every topic exists"))
        }

        @Test func checkSaysWhatIsMissingOrSmallerWithItsExitStatus() async throws {
            // The dev broker makes 6 partitions a topic.
            let (ok, okOutput) = try await Self.run(["check", "--output", "json"], ["PUSHRELAY_TOPIC_PARTITIONS": "6"])
            #expect(ok == 0, "\(okOutput)")
            let json = try Wire.decode(JSONValue.self, from: Array(okOutput.utf8))
            #expect(json["ok"] == true)
            #expect(json["topics"]?.arrayValue?.count == 9, "\(okOutput)")
            #expect(json["topics"]?.arrayValue?.allSatisfy { $0["state"] == "ok" && $0["partitions"] == 6 } == true)
            // A fourth retry stage's topic is missing, and 12 partitions are more than there are: 3.
            let (unmet, text) = try await Self.run(
                ["check"], ["PUSHRELAY_RETRY_DELAYS": "1s,2s,3s,4s", "PUSHRELAY_TOPIC_PARTITIONS": "12"])
            #expect(unmet == 3, "\(text)")
            #expect(text.contains("push.retry.4\tmissing\t- of 12 partitions"), "\(text)")
            #expect(text.contains("push.requests\tfewer_partitions\t6 of 12 partitions"), "\(text)")
        }

        @Test func aTopicTheBrokerWillNotCreateFailsWithAClearMessage() async throws {
            // A fourth retry delay names push.retry.4, which the dev broker lacks.
            let delays = ["PUSHRELAY_RETRY_DELAYS": "1s,2s,3s,4s"]
            let (waited, waitOutput) = try await Self.run(["wait", "--timeout-seconds", "3"], delays)
            #expect(waited != 0)
            #expect(waitOutput.contains("missing: push.retry.4"), "\(waitOutput)")
            let (created, createOutput) = try await Self.run(["create", "--timeout-seconds", "5"], delays)
            #expect(created != 0)
            #expect(createOutput.contains("cannot create push.retry.4 at"), "\(createOutput)")
        }

        @Test func impossibleSettingsAreRefusedBeforeAnyRequest() async throws {
            let (status, output) = try await Self.run(
                ["create"], ["PUSHRELAY_TOPIC_REPLICATION_FACTOR": "1", "PUSHRELAY_TOPIC_MIN_INSYNC_REPLICAS": "2"])
            #expect(status != 0)
            #expect(output.contains("PUSHRELAY_TOPIC_MIN_INSYNC_REPLICAS (2) is more than"), "\(output)")
        }
    }
}
