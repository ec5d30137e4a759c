import DevStack
import Foundation
import PushModels
import Testing

@testable import ServiceKit

extension StackTests {
    /// Every binary says which release it is, and so do the running services: `--version`,
    /// `GET /health`, and the `pushrelay_build_info` gauge, all equal to VERSION.
    @Suite struct VersionTests {
        static func repositoryFile(_ name: String) throws -> String {
            var directory = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
            while directory.path != "/" {
                let candidate = directory.appendingPathComponent(name)
                if FileManager.default.fileExists(atPath: candidate.path) {
                    return try String(contentsOf: candidate, encoding: .utf8)
                }
                directory.deleteLastPathComponent()
            }
            throw CocoaError(.fileNoSuchFile)
        }

        @Test func theVersionIsVERSION() throws {
            let version = try Self.repositoryFile("VERSION").trimmingCharacters(in: .whitespacesAndNewlines)
            #expect(BuildInfo.version == version)
            #expect(
                version.split(separator: ".").count == 3 && version.split(separator: ".").allSatisfy { Int($0) != nil })
        }

        @Test(arguments: ["ingest", "encryptor", "dispatcher", "feedback", "pushrelay"])
        func everyBinaryAnswersVersion(_ binary: String) async throws {
            let directory = try Stack.binDirectory()
            let log = FileManager.default.temporaryDirectory.appendingPathComponent("version-\(UUID().uuidString)").path
            defer { try? FileManager.default.removeItem(atPath: log) }
            let process = try Stack.launch(
                "\(directory)/\(binary)", ["--version"], environment: ["PUSHRELAY_BUILD_REVISION": "abc123"], log: log)
            try await Stack.waitFor("\(binary) --version", timeout: .seconds(20)) { !process.isRunning }
            #expect(process.terminationStatus == 0)
            let output = try String(contentsOfFile: log, encoding: .utf8)
            #expect(output.trimmingCharacters(in: .whitespacesAndNewlines) == "\(binary) \(BuildInfo.version) (abc123)")
        }

        @Test func runningServicesSayTheirVersion() async throws {
            let stack = try await Stack.get()
            let health = try await HTTP.get("http://127.0.0.1:\(stack.ports[.dispatcher] ?? 0)/health")
            #expect(health.status == 200)
            #expect(health.json["version"]?.stringValue == BuildInfo.version)
            #expect(health.json["revision"]?.stringValue == "unknown")
            let metrics = try await HTTP.get("http://127.0.0.1:\(stack.ingestOpsPort)/metrics")
            let text = String(decoding: metrics.body, as: UTF8.self)
            #expect(text.contains("pushrelay_build_info{"), "\(text.prefix(300))")
            #expect(text.contains("version=\"\(BuildInfo.version)\""))
        }
    }
}
