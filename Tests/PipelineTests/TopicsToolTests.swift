import DevStack
import Foundation
import Testing

extension StackTests {
    /// `pushrelay-admin topics`, as the Kubernetes topics Job and the stages' init containers
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
                "\(stack.binDirectory)/pushrelay-admin", ["topics"] + arguments, environment: env, log: log)
            try await Stack.waitFor("pushrelay-admin topics \(arguments.first ?? "")", timeout: .seconds(90)) {
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
