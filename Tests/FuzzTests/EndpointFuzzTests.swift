import DevStack
import Foundation
import Testing

/// Every ingest endpoint fuzzed against a real stack. The run happens in `pushrelay-fuzz`,
/// which starts a private stack of its own: a crash it provokes, or the rate limit it needs
/// lifted, must not touch the stack the other integration tests share. The test reads the
/// tool's JSON report and asserts: no crash, no 5xx, every error a JSON
/// `{"result":"error","code","msg"}`, every request answered, and nothing accepted that
/// issue 8 says must be refused.
///
/// `PUSHRELAY_FUZZ_REQUESTS` (default 1,500) and `PUSHRELAY_FUZZ_SEED` (default random,
/// printed) set the run, so the same test can send 10,000 or more.
@Suite(.timeLimit(.minutes(10)))
struct EndpointFuzzTests {
    @Test func everyEndpointSurvivesFuzzedRequests() async throws {
        let env = ProcessInfo.processInfo.environment
        let requests = env["PUSHRELAY_FUZZ_REQUESTS"].flatMap { Int($0) } ?? 1_500
        let seed = FuzzRandom.seed(environment: "PUSHRELAY_FUZZ_SEED")
        let reportPath = FileManager.default.temporaryDirectory.appendingPathComponent(
            "pushrelay-fuzz-\(getpid()).json"
        ).path
        defer { try? FileManager.default.removeItem(atPath: reportPath) }

        let tool = Process()
        tool.executableURL = URL(fileURLWithPath: "\(try Stack.binDirectory())/pushrelay-fuzz")
        tool.arguments = ["--requests", "\(requests)", "--seed", "\(seed)", "--json", reportPath]
        let output = Pipe()
        tool.standardOutput = output
        tool.standardError = FileHandle.standardError
        try tool.run()
        let text = await Task.detached {
            String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        }.value
        tool.waitUntilExit()

        let data = try #require(
            FileManager.default.contents(atPath: reportPath),
            "seed \(seed): no report; status \(tool.terminationStatus)\n\(text)")
        let report = try JSONDecoder().decode(FuzzReport.self, from: data)
        #expect(report.requests == requests, "seed \(seed): the run stopped early\n\(report.text)")
        for kind: FuzzReport.Kind in [.crash, .serverError, .malformedError, .noAnswer, .accepted] {
            let found = report.failures.filter { $0.kind == kind }
            #expect(
                found.isEmpty,
                "seed \(seed): \(report.count(kind)) × \(kind.rawValue)\n\(found.map { "\($0.endpoint) — \($0.mutation): \($0.detail)\n    \($0.request)\n    \($0.response)" }.joined(separator: "\n"))"
            )
        }
        // The run must reach past authentication and validation, or it proves little.
        #expect(
            report.byStatus.filter { $0.key.hasPrefix("2") }.values.reduce(0, +) > requests / 10,
            "seed \(seed): too few accepted requests\n\(report.text)")
        #expect(report.byEndpoint.count == FuzzEndpoint.allCases.count, "seed \(seed): not every endpoint was fuzzed")
        #expect(
            tool.terminationStatus
                == (report.isClean ? 0 : (report.count(.crash) + report.count(.serverError) > 0 ? 1 : 2)))
    }
}

/// The rules the fuzzer applies to each answer, so its checks are known to fire.
@Suite struct FuzzCheckerTests {
    @Test func flagsServerErrors() {
        let body = Array(#"{"result":"error","code":"INTERNAL","msg":"x"}"#.utf8)
        #expect(FuzzChecker.problem(method: "GET", status: 500, body: body) == "status 500")
        #expect(FuzzChecker.problem(method: "GET", status: 503, body: body) == "status 503")
    }

    @Test func flagsErrorsThatAreNotJSONErrors() {
        #expect(FuzzChecker.problem(method: "GET", status: 404, body: []) != nil)
        #expect(FuzzChecker.problem(method: "POST", status: 413, body: Array("Payload Too Large".utf8)) != nil)
        #expect(FuzzChecker.problem(method: "GET", status: 400, body: Array(#"{"error":{"message":"x"}}"#.utf8)) != nil)
        #expect(
            FuzzChecker.problem(method: "GET", status: 400, body: Array(#"{"result":"error","code":1,"msg":"x"}"#.utf8))
                != nil)
        #expect(
            FuzzChecker.problem(
                method: "GET", status: 401, body: Array(#"{"result":"error","code":"UNAUTHORIZED"}"#.utf8)) != nil)
    }

    @Test func acceptsSuccessAndWellFormedErrors() {
        let error = Array(
            #"{"result":"error","code":"BAD_REQUEST","msg":"user_id: must be an integer","field":"user_id"}"#.utf8)
        #expect(FuzzChecker.problem(method: "POST", status: 400, body: error) == nil)
        #expect(FuzzChecker.problem(method: "POST", status: 202, body: Array(#"{"result":"success"}"#.utf8)) == nil)
        #expect(FuzzChecker.problem(method: "HEAD", status: 404, body: []) == nil)
        #expect(FuzzChecker.problem(method: "CONNECT", status: 405, body: []) == nil)
        #expect(FuzzChecker.problem(method: "CONNECT", status: 200, body: []) != nil)
    }

    @Test func reportKeepsOneExamplePerDistinctFailure() throws {
        var random = FuzzRandom(seed: 7)
        var other = FuzzRandom(seed: 7)
        #expect((0..<100).map { _ in random.next() } == (0..<100).map { _ in other.next() })
        let json = try JSONEncoder().encode(FuzzReport(seed: 7))
        #expect(try JSONDecoder().decode(FuzzReport.self, from: json).isClean)
    }
}
