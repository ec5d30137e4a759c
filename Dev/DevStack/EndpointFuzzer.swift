import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1
import PushCrypto
import PushModels

/// SplitMix64: a small seeded generator, so every fuzz run is reproduced from its seed.
public struct FuzzRandom: RandomNumberGenerator, Sendable {
    private var state: UInt64

    public init(seed: UInt64) { state = seed }

    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    public mutating func chance(_ p: Double) -> Bool { Double.random(in: 0..<1, using: &self) < p }
    public mutating func int(_ range: ClosedRange<Int>) -> Int { Int.random(in: range, using: &self) }
    public mutating func pick<T>(_ items: [T]) -> T { items[int(0...items.count - 1)] }

    /// The seed named by `environment` (decimal), or a fresh one.
    public static func seed(environment name: String) -> UInt64 {
        if let text = ProcessInfo.processInfo.environment[name], let seed = UInt64(text) { return seed }
        return UInt64.random(in: 0...UInt64(UInt32.max))
    }
}

/// Values that break parsers and arithmetic, shared by the JSON reader tests and the endpoint fuzzer.
public enum FuzzValues {
    /// Numbers as raw JSON text: the edges of Int64, UInt64, UInt32 and Double.
    public static let jsonNumberEdges = [
        "-9223372036854775808", "-9223372036854775807", "9223372036854775807", "9223372036854775808",
        "-9223372036854775809", "18446744073709551615", "18446744073709551616", "4294967295", "4294967296", "-1", "0",
        "-0", "-0.0", "0.5", "1.0", "1e2", "1E+2", "1e400", "-1e400", "1e-400", "1e300", "-1e300", "1e999999",
        "99999999999999999999999999999999999999", "2147483648", "-2147483649", "9007199254740993",
    ]

    /// Hostile text values with a short name for the reports (the value itself may be megabytes).
    public static func strings(_ random: inout FuzzRandom) -> (name: String, value: String) {
        switch random.int(0...27) {
        case 0: return ("empty", "")
        case 1: return ("NUL", "\u{0}")
        case 2: return ("NUL inside", "org.zulip\u{0}.Zulip")
        case 3: return ("CR/LF", "a\r\nb")
        case 4: return ("header injection", "x\r\nSet-Cookie: a=b\r\n\r\n")
        case 5: return ("200 KB of combining marks", "a" + String(repeating: "\u{301}", count: 100_000))
        case 6: return ("2 MB of combining marks", "a" + String(repeating: "\u{301}", count: 1_000_000))
        case 7: return ("4 KB of combining marks", "a" + String(repeating: "\u{301}", count: 2_000))
        case 8: return ("Arabic-Indic digits", "١٢٣")
        case 9: return ("fullwidth digits", "１２３")
        case 10: return ("numeric text", "12")
        case 11: return ("overflowing numeric text", "9223372036854775808")
        case 12: return ("Int64.min text", "-9223372036854775808")
        case 13: return ("10 KB ASCII", String(repeating: "a", count: 10_000))
        case 14: return ("300 chars", String(repeating: "b", count: 300))
        case 15: return ("emoji", "🎉🎉🎉")
        case 16: return ("RTL override", "\u{202E}gnp.exe")
        case 17: return ("path traversal", "../../../etc/passwd")
        case 18: return ("percent NUL", "%00")
        case 19: return ("markup", "<script>alert(1)</script>")
        case 20: return ("uppercase UUID", UUID().uuidString)
        case 21: return ("UUID without dashes", UUID().uuidString.replacingOccurrences(of: "-", with: ""))
        case 22: return ("nil UUID", "00000000-0000-0000-0000-000000000000")
        case 23: return ("spaces", "   ")
        case 24: return ("64 combining marks", String(repeating: "e\u{301}", count: 64))
        case 25: return ("64 chars with NUL", String(repeating: "a", count: 63) + "\u{0}")
        case 26: return ("tab and DEL", "a\tb\u{7F}")
        default: return ("U+2028", "a\u{2028}b")
        }
    }

    /// Values of the wrong JSON type, nested junk and huge arrays, as raw JSON text.
    public static func junk(_ random: inout FuzzRandom) -> (name: String, raw: String) {
        switch random.int(0...13) {
        case 0: return ("true", "true")
        case 1: return ("null", "null")
        case 2: return ("empty array", "[]")
        case 3: return ("empty object", "{}")
        case 4: return ("array of strings", #"["a","b"]"#)
        case 5: return ("object", #"{"a":{"b":[1,{"c":null}]}}"#)
        case 6: return ("500-deep arrays", String(repeating: "[", count: 500) + String(repeating: "]", count: 500))
        case 7: return ("600-deep arrays", String(repeating: "[", count: 600) + String(repeating: "]", count: 600))
        case 8: return ("20,000 ids", "[" + (1...20_000).map(String.init).joined(separator: ",") + "]")
        case 9:
            return ("2,000 copies of one id", "[" + Array(repeating: "1", count: 2_000).joined(separator: ",") + "]")
        case 10:
            return (
                "array of edge numbers",
                "["
                    + jsonNumberEdges.filter { $0 != "1e999999" && $0 != "1e400" && $0 != "-1e400" }.joined(
                        separator: ",") + "]"
            )
        case 11: return ("lone surrogate string", #""\ud800""#)
        case 12: return ("100,000 zeros", "[" + Array(repeating: "0", count: 100_000).joined(separator: ",") + "]")
        default: return ("array of objects", #"[{"device_id":1},{"device_id":"x"}]"#)
        }
    }
}

/// JSON text kept as text at the leaves, so a body can hold what `JSONValue` cannot
/// (duplicate keys, `1e400`, `-0`, invalid escapes) and any node can be replaced.
public indirect enum RawJSON: Sendable {
    case raw(String)
    case object([(String, RawJSON)])
    case array([RawJSON])

    public static func value(_ v: JSONValue) -> RawJSON { .raw(String(decoding: Wire.canonical(v), as: UTF8.self)) }
    public static func string(_ s: String) -> RawJSON { value(.string(s)) }

    public var text: String {
        switch self {
        case .raw(let r): return r
        case .array(let items): return "[" + items.map(\.text).joined(separator: ",") + "]"
        case .object(let fields):
            return "{"
                + fields.map { String(decoding: Wire.canonical(.string($0.0)), as: UTF8.self) + ":" + $0.1.text }
                .joined(separator: ",") + "}"
        }
    }

    /// Paths of every node below the root (keys and indexes), for picking one to mutate.
    public var paths: [[String]] {
        var result: [[String]] = []
        func walk(_ node: RawJSON, _ path: [String]) {
            switch node {
            case .raw: break
            case .object(let fields):
                for (k, v) in fields {
                    result.append(path + [k])
                    walk(v, path + [k])
                }
            case .array(let items):
                for (i, v) in items.enumerated() {
                    result.append(path + ["[\(i)]"])
                    walk(v, path + ["[\(i)]"])
                }
            }
        }
        walk(self, [])
        return result
    }

    /// Replaces (or with nil removes) the node at `path`; `duplicate` keeps it and adds the new value under the same key.
    public func replacing(_ path: [String], with new: RawJSON?, duplicate: Bool = false) -> RawJSON {
        guard let head = path.first else { return new ?? self }
        let rest = Array(path.dropFirst())
        switch self {
        case .raw: return self
        case .object(let fields):
            var out: [(String, RawJSON)] = []
            for (k, v) in fields {
                guard k == head else {
                    out.append((k, v))
                    continue
                }
                if rest.isEmpty {
                    if duplicate { out.append((k, v)) }
                    if let new { out.append((k, new)) }
                } else {
                    out.append((k, v.replacing(rest, with: new, duplicate: duplicate)))
                }
            }
            return .object(out)
        case .array(var items):
            guard let i = Int(head.dropFirst().dropLast()), items.indices.contains(i) else { return self }
            if rest.isEmpty {
                if let new { items[i] = new } else { items.remove(at: i) }
            } else {
                items[i] = items[i].replacing(rest, with: new, duplicate: duplicate)
            }
            return .array(items)
        }
    }

    /// The string at `path` if that node is a plain JSON string.
    public func string(at path: [String]) -> String? {
        var node = self
        for key in path {
            switch node {
            case .object(let fields):
                guard let next = fields.last(where: { $0.0 == key })?.1 else { return nil }
                node = next
            case .array(let items):
                guard let i = Int(key.dropFirst().dropLast()), items.indices.contains(i) else { return nil }
                node = items[i]
            case .raw: return nil
            }
        }
        guard case .raw(let text) = node, let value = try? Wire.decode(JSONValue.self, from: Array(text.utf8)) else {
            return nil
        }
        return value.stringValue
    }
}

/// The ingest endpoints the fuzzer covers.
public enum FuzzEndpoint: String, CaseIterable, Codable, Sendable {
    case serverRegister = "POST /api/v1/remotes/server/register"
    case analytics = "POST /api/v1/remotes/server/analytics"
    case analyticsStatus = "GET /api/v1/remotes/server/analytics/status"
    case realmRegister = "POST /v1/realms"
    case bouncerRegister = "POST /api/v1/remotes/push/e2ee/register"
    case bouncerNotify = "POST /api/v1/remotes/push/e2ee/notify"
    case legacyRegister = "POST /api/v1/remotes/push/register"
    case legacyUnregister = "POST /api/v1/remotes/push/unregister"
    case legacyNotify = "POST /api/v1/remotes/push/notify"
    case testNotification = "POST /api/v1/remotes/push/test_notification"
    case registerDevice = "POST /v1/devices"
    case deleteDevice = "DELETE /v1/devices/{id}"
    case listDevices = "GET /v1/devices"
    case notify = "POST /v1/notify"
    case feedback = "GET /v1/feedback"
    case publicKeys = "GET /v1/bouncer-public-keys"
    case gorushPush = "POST /api/push"
    case statusRegistration = "POST /status/v1/registration"
    case statusNotify = "POST /status/v1/notify"
    case unknownPath = "unknown path"
    case wrongMethod = "wrong method"
}

/// One generated request, with what was done to it (`mutation`, the key failures are grouped by).
public struct FuzzRequest: Sendable {
    /// Ingest's request body limit when not configured (`PUSHRELAY_HTTP_MAX_BODY_BYTES`).
    static let overLimit = 256 * 1024
    public var endpoint: FuzzEndpoint
    public var method: String
    public var path: String
    public var contentType: String?
    public var auth: String
    public var authorization: String?
    public var body: [UInt8]?
    public var mutation: String
    /// A 2xx answer is a failure too: the value must be refused (issue 8's stated limits).
    public var mustRefuse: String?

    /// The request as a reader of a report needs it: method, path, content type, auth, body (shortened).
    public var summary: String {
        var s = "\(method) \(FuzzRequest.shorten(path, 300)) [auth: \(auth)]"
        if let contentType { s += " [\(contentType)]" }
        if let body { s += " body: \(FuzzRequest.shorten(String(decoding: body, as: UTF8.self), 600))" }
        return s
    }

    static func shorten(_ text: String, _ limit: Int) -> String {
        let scalars = text.unicodeScalars
        guard scalars.count > limit else { return text.debugDescription }
        return String(String.UnicodeScalarView(scalars.prefix(limit))).debugDescription + "… (\(text.utf8.count) bytes)"
    }
}

/// The rules every answer must follow, as one pure function so they can be tested alone.
public enum FuzzChecker {
    /// nil when the answer is acceptable, else what is wrong with it.
    public static func problem(method: String, status: Int, body: [UInt8], path: String = "") -> String? {
        if status >= 500 { return "status \(status)" }
        // The relay is no proxy: CONNECT is always refused.
        if method == "CONNECT" && !(400..<500).contains(status) { return "CONNECT answered \(status)" }
        guard !(200..<300).contains(status) else { return nil }
        // A HEAD answer has no body by definition; nor has an answer to CONNECT
        // (RFC 9110 §9.3.6: NIO frames it without one), so only its status counts.
        if method == "HEAD" { return nil }
        if method == "CONNECT" { return nil }
        guard let json = try? JSONSerialization.jsonObject(with: Data(body), options: [.fragmentsAllowed]) else {
            return "status \(status) with a non-JSON body"
        }
        // gorush's API answers in gorush's shape: {code: <status>, message, error: <code>}.
        let gorushPaths = ["/api/push", "/api/stat/app", "/api/stat/go", "/api/config", "/api/feedback-hook"]
        if gorushPaths.contains(String(path.prefix { $0 != "?" })) {
            guard let object = json as? [String: Any], (object["code"] as? NSNumber)?.intValue == status,
                object["message"] is String, object["error"] is String
            else { return "status \(status) with a JSON body that is not gorush's {code, message, error}" }
            return nil
        }
        guard let object = json as? [String: Any], object["result"] as? String == "error", object["code"] is String,
            object["msg"] is String
        else { return "status \(status) with a JSON body that is not {result:error, code, msg}" }
        return nil
    }
}

/// What a fuzz run saw: counts by status, code and endpoint, and each distinct failure once.
public struct FuzzReport: Codable, Sendable {
    public enum Kind: String, Codable, Sendable {
        /// Ingest stopped running (or, against `--url`, stopped answering its health check).
        case crash
        /// A 5xx answer.
        case serverError = "5xx"
        /// A non-2xx answer that is not `{"result":"error","code","msg"}`.
        case malformedError = "non-JSON error"
        /// No HTTP answer at all while ingest kept running.
        case noAnswer = "no answer"
        /// A 2xx answer to a value issue 8 says must be refused.
        case accepted = "accepted"
    }

    public struct Failure: Codable, Sendable {
        public var kind: Kind
        public var endpoint: String
        public var mutation: String
        public var detail: String
        public var request: String
        public var response: String
        public var count: Int
    }

    public var seed: UInt64
    public var requests = 0
    public var seconds = 0.0
    public var byStatus: [String: Int] = [:]
    public var byCode: [String: Int] = [:]
    public var byEndpoint: [String: Int] = [:]
    public var failureCounts: [String: Int] = [:]
    public var failures: [Failure] = []
    public var slowest = 0.0

    public init(seed: UInt64) { self.seed = seed }

    public func count(_ kind: Kind) -> Int { failureCounts[kind.rawValue] ?? 0 }
    /// No crash, no 5xx, no malformed error, no request left unanswered, nothing accepted that must be refused.
    public var isClean: Bool { failures.isEmpty }

    mutating func record(_ kind: Kind, _ request: FuzzRequest, detail: String, response: String) {
        failureCounts[kind.rawValue, default: 0] += 1
        let key = (kind, request.endpoint.rawValue, request.mutation)
        if let i = failures.firstIndex(where: { ($0.kind, $0.endpoint, $0.mutation) == key }) {
            failures[i].count += 1
            return
        }
        failures.append(
            Failure(
                kind: kind, endpoint: request.endpoint.rawValue, mutation: request.mutation, detail: detail,
                request: request.summary, response: response, count: 1))
    }

    /// A plain-text summary: counts, then every distinct failure with its request.
    public var text: String {
        var lines = [
            "seed \(seed): \(requests) requests in \(String(format: "%.1f", seconds)) s (slowest \(String(format: "%.2f", slowest)) s)"
        ]
        lines.append(
            "by status: " + byStatus.sorted { $0.key < $1.key }.map { "\($0.key) ×\($0.value)" }.joined(separator: ", ")
        )
        lines.append("by code:")
        for (code, n) in byCode.sorted(by: { $0.key < $1.key }) { lines.append("  \(code) ×\(n)") }
        lines.append(
            "by endpoint: "
                + byEndpoint.sorted { $0.key < $1.key }.map { "\($0.key) ×\($0.value)" }.joined(separator: ", "))
        let kinds: [Kind] = [.crash, .serverError, .malformedError, .noAnswer, .accepted]
        lines.append(
            "crashes \(count(.crash)), 5xx \(count(.serverError)), non-JSON errors \(count(.malformedError)), no answer \(count(.noAnswer)), accepted-but-must-refuse \(count(.accepted))"
        )
        for kind in kinds {
            for f in failures where f.kind == kind {
                lines.append("[\(f.kind.rawValue)] ×\(f.count) \(f.endpoint) — \(f.mutation): \(f.detail)")
                lines.append("    request: \(f.request)")
                if !f.response.isEmpty { lines.append("    answer: \(f.response)") }
            }
        }
        return lines.joined(separator: "\n")
    }
}

/// Sends seeded random and mutated requests to every ingest endpoint, checking each
/// answer with `FuzzChecker` and ingest's liveness after each one and each batch.
public struct EndpointFuzzer: Sendable {
    /// Where to send: ingest's base URL and a registered server's credentials.
    public struct Target: Sendable {
        public var baseURL: String
        public var serverUUID: String
        public var apiKey: String
        public init(baseURL: String, serverUUID: String, apiKey: String) {
            self.baseURL = baseURL
            self.serverUUID = serverUUID
            self.apiKey = apiKey
        }
    }

    /// How ingest's health is judged and restored: a private stack checks the process,
    /// a remote target only its health endpoint (and cannot restart it).
    public struct Liveness: Sendable {
        public var isRunning: @Sendable () async -> Bool
        /// Why it stopped (exit status, the last log lines), for the report.
        public var exitDetail: @Sendable () -> String
        /// Starts ingest again so the run can go on and find further failures; nil ends the run.
        public var restart: (@Sendable () async throws -> Void)?

        public init(
            isRunning: @escaping @Sendable () async -> Bool, exitDetail: @escaping @Sendable () -> String,
            restart: (@Sendable () async throws -> Void)?
        ) {
            self.isRunning = isRunning
            self.exitDetail = exitDetail
            self.restart = restart
        }

        /// Liveness of a stack this process started.
        public static func stack(_ stack: Stack) -> Liveness {
            Liveness(
                isRunning: { stack.isRunning(.ingest) },
                exitDetail: {
                    let status = stack.exitStatus(.ingest).map { "exit status \($0)" } ?? "not running"
                    // The trap's message (a backtrace follows it); the log grows across restarts.
                    let fatal = stack.log(.ingest).split(separator: "\n").last { $0.contains("Fatal error") }
                    return fatal.map { "\(status): \($0)" } ?? status
                },
                restart: {
                    try stack.start(.ingest)
                    try await stack.waitReady(.ingest)
                })
        }

        /// Liveness of a remote ingest: it still answers HTTP on its API port (health
        /// endpoints may live on a separate ops port).
        public static func remote(_ baseURL: String) -> Liveness {
            Liveness(
                isRunning: { (try? await HTTP.get("\(baseURL)/v1/bouncer-public-keys")) != nil },
                exitDetail: { "\(baseURL) does not answer any more" }, restart: nil)
        }
    }

    public var target: Target
    public var requests: Int
    public var seed: UInt64
    public var batch = 25
    public var liveness: Liveness
    public var log: @Sendable (String) -> Void

    public init(
        target: Target, requests: Int, seed: UInt64, liveness: Liveness,
        log: @escaping @Sendable (String) -> Void = { _ in }
    ) {
        self.target = target
        self.requests = requests
        self.seed = seed
        self.liveness = liveness
        self.log = log
    }

    /// Registers a fresh server (form body, as Zulip does) and returns its credentials.
    public static func registerServer(baseURL: String) async throws -> Target {
        let uuid = UUID().uuidString.lowercased()
        let key = String((0..<64).map { _ in "abcdefghijklmnopqrstuvwxyz0123456789".randomElement()! })
        let form =
            "zulip_org_id=\(uuid)&zulip_org_key=\(key)&hostname=fuzz.example.com&contact_email=fuzz%40example.com"
        let reply = try await HTTP.send(
            "POST", "\(baseURL)/api/v1/remotes/server/register", body: Array(form.utf8),
            contentType: "application/x-www-form-urlencoded")
        guard reply.status == 200 else {
            throw StackError(
                "server registration failed: \(reply.status) \(String(decoding: reply.body, as: UTF8.self))")
        }
        return Target(baseURL: baseURL, serverUUID: uuid, apiKey: key)
    }

    public func run() async throws -> FuzzReport {
        var report = FuzzReport(seed: seed)
        var random = FuzzRandom(seed: seed)
        var context = try await FuzzContext.prepare(target)
        let started = ContinuousClock.now
        var sent = 0
        while sent < requests {
            let request = FuzzRequestGenerator.request(&random, &context)
            sent += 1
            report.requests += 1
            report.byEndpoint[request.endpoint.rawValue, default: 0] += 1
            let began = ContinuousClock.now
            do {
                let reply = try await send(request)
                report.slowest = max(report.slowest, (ContinuousClock.now - began).seconds)
                report.byStatus["\(reply.status)", default: 0] += 1
                let code = reply.json["code"]?.stringValue ?? ((200..<300).contains(reply.status) ? "success" : "-")
                report.byCode["\(reply.status) \(code)", default: 0] += 1
                let answer = FuzzRequest.shorten(String(decoding: reply.body, as: UTF8.self), 300)
                if let problem = FuzzChecker.problem(
                    method: request.method, status: reply.status, body: reply.body, path: request.path)
                {
                    report.record(
                        reply.status >= 500 ? .serverError : .malformedError, request, detail: problem, response: answer
                    )
                } else if let rule = request.mustRefuse, (200..<300).contains(reply.status) {
                    report.record(.accepted, request, detail: "answered \(reply.status); \(rule)", response: answer)
                }
                context.learn(from: reply, for: request)
            } catch  where (request.body?.count ?? 0) > FuzzRequest.overLimit && !"\(error)".contains("timeout") {
                // Over ingest's body limit, ingest answers 413 with `Connection: close` at once and
                // closes after the body: an HTTP client still uploading may report the close
                // instead of the answer (AsyncHTTPClient: "I/O on closed channel"). Refused, then.
                report.byStatus["closed (body over the limit)", default: 0] += 1
            } catch {
                report.byStatus["no answer", default: 0] += 1
                // A crash shows as a broken connection; give the process a moment to be seen exiting.
                var alive = await liveness.isRunning()
                for _ in 0..<20 where alive {
                    try await Task.sleep(for: .milliseconds(50))
                    alive = await liveness.isRunning()
                }
                if alive {
                    report.record(.noAnswer, request, detail: "\(error)", response: "")
                } else {
                    report.record(.crash, request, detail: liveness.exitDetail(), response: "")
                    log("ingest crashed on \(request.endpoint.rawValue) — \(request.mutation)")
                    guard try await recover() else { break }
                }
            }
            if sent % batch == 0 || sent == requests {
                if !(await liveness.isRunning()) {
                    report.record(
                        .crash, request, detail: "found stopped after the batch: \(liveness.exitDetail())", response: ""
                    )
                    guard try await recover() else { break }
                }
                if sent % 1000 == 0 { log("\(sent) requests, \(report.failures.count) distinct failures") }
            }
        }
        report.seconds = (ContinuousClock.now - started).seconds
        return report
    }

    private func recover() async throws -> Bool {
        guard let restart = liveness.restart else { return false }
        try await restart()
        return true
    }

    private func send(_ request: FuzzRequest) async throws -> HTTP.Reply {
        var http = HTTPClientRequest(url: target.baseURL + request.path)
        http.method = .init(rawValue: request.method)
        if let body = request.body { http.body = .bytes(ByteBuffer(bytes: body)) }
        if let contentType = request.contentType { http.headers.add(name: "content-type", value: contentType) }
        if let authorization = request.authorization { http.headers.add(name: "authorization", value: authorization) }
        let response = try await HTTPClient.shared.execute(http, timeout: .seconds(15))
        let bytes = try await response.body.collect(upTo: 16 << 20)
        return HTTP.Reply(
            status: Int(response.status.code), body: Array(bytes.readableBytesView),
            headers: response.headers.map { ($0.name, $0.value) })
    }
}

extension Duration {
    var seconds: Double { Double(components.seconds) + Double(components.attoseconds) / 1e18 }
}

/// What the generator knows about the target: its credentials, realm, devices and keys.
struct FuzzContext: Sendable {
    var target: EndpointFuzzer.Target
    var realmUUID: String
    /// A realm owned by another server, for cross-tenant probes.
    var foreignRealmUUID: String
    var bouncerPublicKey: String
    var deviceIDs: [Int64]
    var userIDs: [Int64] = [10, 11, 12]

    static func prepare(_ target: EndpointFuzzer.Target) async throws -> FuzzContext {
        let keys = try await HTTP.get(
            "\(target.baseURL)/v1/bouncer-public-keys", auth: (target.serverUUID, target.apiKey))
        guard let key = keys.json["public_keys"]?.arrayValue?.first?.stringValue else {
            throw StackError("no bouncer public key: \(keys.status) \(String(decoding: keys.body, as: UTF8.self))")
        }
        var context = FuzzContext(
            target: target, realmUUID: UUID().uuidString.lowercased(), foreignRealmUUID: UUID().uuidString.lowercased(),
            bouncerPublicKey: key, deviceIDs: [])
        // The explicit ownership step (an ingest without it answers 404, and realms are claimed on first use).
        _ = try? await HTTP.send(
            "POST", "\(target.baseURL)/v1/realms", json: ["realm_uuid": .string(context.realmUUID)],
            auth: (target.serverUUID, target.apiKey))
        // A few real devices, so deletes, lists and notifies reach the device store.
        var random = FuzzRandom(seed: 1)
        var refusal = ""
        for kind in ["apns", "fcm", "apns"] {
            let body = context.deviceTemplate(&random, kind: kind, sealed: false)
                .replacing(["realm_uuid"], with: .string(context.realmUUID)).text
            let reply = try await HTTP.send(
                "POST", "\(target.baseURL)/v1/devices", body: Array(body.utf8), auth: (target.serverUUID, target.apiKey)
            )
            if let id = reply.json["device_id"]?.intValue { context.deviceIDs.append(id) }
            refusal = "\(reply.status) \(String(decoding: reply.body, as: UTF8.self))"
        }
        guard !context.deviceIDs.isEmpty else {
            throw StackError("could not register the fuzzer's devices: \(refusal)")
        }
        // Another server claims the foreign realm.
        if let other = try? await EndpointFuzzer.registerServer(baseURL: target.baseURL) {
            _ = try? await HTTP.send(
                "POST", "\(target.baseURL)/v1/realms", json: ["realm_uuid": .string(context.foreignRealmUUID)],
                auth: (other.serverUUID, other.apiKey))
            let notify = RawJSON.object([
                ("realm_uuid", .string(context.foreignRealmUUID)), ("user_id", .raw("1")),
                ("payload", .value(Self.messagePayload(userID: 1))),
            ]).text
            _ = try? await HTTP.send(
                "POST", "\(target.baseURL)/v1/notify", body: Array(notify.utf8), auth: (other.serverUUID, other.apiKey))
        }
        return context
    }

    mutating func learn(from reply: HTTP.Reply, for request: FuzzRequest) {
        if let id = reply.json["device_id"]?.intValue, (200..<300).contains(reply.status), !deviceIDs.contains(id) {
            deviceIDs.append(id)
            if deviceIDs.count > 50 { deviceIDs.removeFirst() }
        }
    }

    static func messagePayload(userID: Int64) -> JSONValue {
        [
            "channel_id": 10, "channel_name": "Denmark", "content": "hello", "message_id": 1, "realm_name": "Fuzz",
            "realm_url": "http://zulip.testserver", "recipient_type": "channel",
            "sender_avatar_url": "https://secure.gravatar.com/avatar/x?d=identicon&version=1",
            "sender_full_name": "aaron", "sender_id": 6, "time": 1_754_385_395, "topic": "test", "type": "message",
            "user_id": .int(userID),
        ]
    }

    static func apnsToken(_ random: inout FuzzRandom) -> String {
        (0..<32).map { _ in String(format: "%02x", random.int(0...255)) }.joined()
    }

    static func fcmToken(_ random: inout FuzzRandom) -> String {
        "fcm:"
            + (0..<72).map { _ in String(random.pick(Array("abcdefghijklmnopqrstuvwxyzABCDEFGHIJ0123456789-_"))) }
            .joined()
    }

    static func pushKey(_ random: inout FuzzRandom) -> String {
        Data([0x31] + (0..<32).map { _ in UInt8(random.int(0...255)) }).base64EncodedString()
    }

    func realm(_ random: inout FuzzRandom) -> String {
        switch random.int(0...19) {
        case 0: return foreignRealmUUID
        case 1: return UUID().uuidString.lowercased()
        default: return realmUUID
        }
    }

    /// The registration a device seals to the relay's key, before sealing.
    func registrationTemplate(_ random: inout FuzzRandom, kind: String) -> RawJSON {
        let now = Int64(Date().timeIntervalSince1970)
        return .object([
            ("token", .string(kind == "apns" ? Self.apnsToken(&random) : Self.fcmToken(&random))),
            ("token_kind", .string(kind)), ("timestamp", .raw(String(now - Int64(random.int(0...3600))))),
            ("ios_app_id", kind == "apns" ? .string("org.zulip.Zulip") : .raw("null")),
        ])
    }

    func seal(_ registration: RawJSON) -> String {
        let key = Array(Data(base64Encoded: bouncerPublicKey) ?? Data())
        guard let sealed = try? SealedBox.seal(Array(registration.text.utf8), to: key) else { return "" }
        return Data(sealed).base64EncodedString()
    }

    func deviceTemplate(_ random: inout FuzzRandom, kind: String, sealed: Bool) -> RawJSON {
        var fields: [(String, RawJSON)] = [
            ("realm_uuid", .string(realm(&random))), ("user_id", .raw(String(random.pick(userIDs)))),
        ]
        if sealed {
            fields.append(("encrypted_push_registration", .string(seal(registrationTemplate(&random, kind: kind)))))
            fields.append(("bouncer_public_key", .string(bouncerPublicKey)))
        } else {
            fields.append(("token_kind", .string(kind)))
            fields.append(("token", .string(kind == "apns" ? Self.apnsToken(&random) : Self.fcmToken(&random))))
            if kind == "apns" { fields.append(("ios_app_id", .string("org.zulip.Zulip"))) }
        }
        fields.append(("push_key", .string(Self.pushKey(&random))))
        fields.append(("push_key_id", .raw(String(random.int(1...5)))))
        if random.chance(0.3) { fields.append(("push_account_id", .raw(String(random.int(1...1_000_000))))) }
        return .object(fields)
    }
}

/// Builds one request: endpoint, auth, content type, then a valid body mutated in one of several ways.
enum FuzzRequestGenerator {
    /// A protobuf varint.
    static func varint(_ value: Int) -> [UInt8] {
        var value = UInt64(max(0, value))
        var out: [UInt8] = []
        while value >= 0x80 {
            out.append(UInt8(value & 0x7f) | 0x80)
            value >>= 7
        }
        return out + [UInt8(value)]
    }

    static func request(_ random: inout FuzzRandom, _ context: inout FuzzContext) -> FuzzRequest {
        let endpoint = random.pick(FuzzEndpoint.allCases)
        var request = FuzzRequest(
            endpoint: endpoint, method: "GET", path: "/", contentType: nil, auth: "valid", authorization: nil,
            body: nil,
            mutation: "valid")
        auth(&request, &random, context)
        switch endpoint {
        case .serverRegister:
            request.auth = "none"
            request.authorization = random.chance(0.2) ? request.authorization : nil
            post(&request, "/api/v1/remotes/server/register", serverTemplate(&random, context), &random, context)
        case .analytics:
            let realms: RawJSON = .array([
                .object([
                    ("uuid", .string(random.chance(0.8) ? context.realmUUID : context.realm(&random))),
                    ("host", .string("fuzz.example.com")), ("deactivated", .raw("false")),
                ])
            ])
            // Zulip sends each field as JSON text in a form; the JSON form is accepted too.
            post(&request, "/api/v1/remotes/server/analytics", .object([("realms", realms)]), &random, context)
        case .analyticsStatus:
            query(
                &request, "/api/v1/remotes/server/analytics/status", random.chance(0.7) ? [] : [("junk", "1")], &random)
        case .realmRegister:
            let realm = random.pick([context.realmUUID, context.foreignRealmUUID, UUID().uuidString.lowercased()])
            post(&request, "/v1/realms", .object([("realm_uuid", .string(realm))]), &random, context)
        case .bouncerRegister:
            post(
                &request, "/api/v1/remotes/push/e2ee/register", bouncerRegisterTemplate(&random, context, &request),
                &random, context)
        case .bouncerNotify:
            post(
                &request, "/api/v1/remotes/push/e2ee/notify", bouncerNotifyTemplate(&random, context), &random, context)
        case .legacyRegister, .legacyUnregister, .testNotification:
            let path =
                endpoint == .legacyRegister
                ? "register" : endpoint == .legacyUnregister ? "unregister" : "test_notification"
            post(&request, "/api/v1/remotes/push/\(path)", legacyDeviceTemplate(&random, context), &random, context)
        case .legacyNotify:
            post(&request, "/api/v1/remotes/push/notify", legacyNotifyTemplate(&random, context), &random, context)
        case .registerDevice:
            let sealed = random.chance(0.4)
            var template = context.deviceTemplate(&random, kind: random.pick(["apns", "fcm"]), sealed: sealed)
            if sealed, random.chance(0.6) {
                let (registration, label, rule) = hostileRegistration(&random, context)
                template = template.replacing(
                    ["encrypted_push_registration"], with: .string(context.seal(registration)))
                request.mutation = label
                request.mustRefuse = rule
                request.method = "POST"
                request.path = "/v1/devices"
                request.contentType = "application/json"
                request.body = Array(template.text.utf8)
                return request
            }
            post(&request, "/v1/devices", template, &random, context)
        case .notify:
            var fields: [(String, RawJSON)] = [
                ("realm_uuid", .string(context.realm(&random))), ("user_id", .raw("10")),
                ("payload", .value(FuzzContext.messagePayload(userID: 10))),
            ]
            if random.chance(0.6) {
                fields.append(
                    (
                        "device_ids",
                        .array(context.deviceIDs.shuffled(using: &random).prefix(3).map { .raw(String($0)) })
                    ))
            }
            post(&request, "/v1/notify", .object(fields), &random, context)
        case .deleteDevice:
            request.method = "DELETE"
            let (name, id) = pathValue(&random, context)
            request.path = "/v1/devices/\(id)"
            request.mutation = "id \(name)"
        case .listDevices:
            query(
                &request, "/v1/devices",
                [("realm_uuid", context.realm(&random)), ("user_id", String(random.pick(context.userIDs)))], &random)
        case .feedback:
            query(
                &request, "/v1/feedback",
                [
                    ("realm_uuid", context.realm(&random)),
                    ("after", random.pick(["0-0", "1700000000000-0", "\(Wire.nowMillis())-1"])),
                    ("limit", String(random.int(1...1000))),
                ],
                &random)
        case .publicKeys:
            query(&request, "/v1/bouncer-public-keys", random.chance(0.5) ? [] : [("junk", "1")], &random)
        case .gorushPush:
            let platform = random.int(1...3)
            let token = platform == 1 ? FuzzContext.apnsToken(&random) : FuzzContext.fcmToken(&random)
            let notification: RawJSON = .object([
                ("tokens", .array([.string(token)])), ("platform", .raw(String(platform))),
                ("message", .string("fuzz")), ("title", .string("t")), ("badge", .raw("1")),
                ("data", .object([("k", .string("v")), ("n", .raw("2"))])), ("priority", .string("high")),
                ("sound", .object([("name", .string("default")), ("volume", .raw("1.0"))])),
            ])
            post(&request, "/api/push", .object([("notifications", .array([notification]))]), &random, context)
        case .statusRegistration, .statusNotify:
            // Status bodies are protobuf: random bytes, or a signed envelope of random bytes.
            request.auth = "none"
            request.authorization = nil
            request.method = "POST"
            request.path = endpoint == .statusRegistration ? "/status/v1/registration" : "/status/v1/notify"
            request.contentType = "application/x-protobuf"
            let length = random.pick([0, 1, 16, 65, 200, 5000])
            let bytes = (0..<length).map { _ in UInt8(truncatingIfNeeded: random.int(0...255)) }
            if random.chance(0.5) {
                let type: UInt8 = endpoint == .statusRegistration ? 16 : 20
                // field 1 (signature, 65 bytes), field 2 (payload), field 3 (type).
                var envelope: [UInt8] =
                    [0x0a, 65] + (0..<65).map { _ in UInt8(truncatingIfNeeded: random.int(0...255)) }
                envelope += [0x12] + Self.varint(bytes.count) + bytes + [0x18, type]
                request.body = envelope
                request.mutation = "envelope of \(length) random bytes"
            } else {
                request.body = bytes
                request.mutation = "\(length) random bytes"
            }
        case .unknownPath:
            request.method = random.pick(["GET", "POST", "DELETE"])
            request.path = random.pick([
                "/", "/v1", "/v2/notify", "/api/v1/remotes/server/register/extra", "/v1/devices/1/2",
                "/api/v1/remotes/push",
                "/v1/notify/", "/%2e%2e/%2e%2e/etc/passwd", "/v1/%00", "/V1/NOTIFY",
                "/api/v1/remotes/push/e2ee/notify/..",
                "/" + String(repeating: "a", count: 8_000), "/v1/devices%2F1", "/api//v1//remotes",
            ])
            request.mutation = "path \(FuzzRequest.shorten(request.path, 40))"
            if request.method == "POST" {
                request.contentType = "application/json"
                request.body = Array("{}".utf8)
            }
        case .wrongMethod:
            let (method, path) = random.pick([
                ("GET", "/v1/notify"), ("PUT", "/v1/devices"), ("PATCH", "/v1/devices"), ("DELETE", "/v1/notify"),
                ("POST", "/v1/bouncer-public-keys"), ("POST", "/v1/feedback"),
                ("GET", "/api/v1/remotes/server/register"),
                ("PUT", "/api/v1/remotes/push/e2ee/notify"), ("OPTIONS", "/v1/devices"), ("HEAD", "/v1/devices"),
                ("HEAD", "/v1/nothing"), ("POST", "/v1/devices/1"), ("DELETE", "/v1/devices"), ("FUZZ", "/v1/notify"),
                ("TRACE", "/v1/devices"), ("CONNECT", "/v1/devices"),
            ])
            request.method = method
            request.path = path
            request.mutation = "\(method) \(path)"
            if random.chance(0.5), method != "HEAD", method != "TRACE" {
                request.contentType = "application/json"
                request.body = Array("{}".utf8)
            }
        }
        return request
    }

    /// valid 75 %, wrong key, unknown server, malformed header, none.
    static func auth(_ request: inout FuzzRequest, _ random: inout FuzzRandom, _ context: FuzzContext) {
        func basic(_ user: String, _ password: String) -> String {
            "Basic " + Data("\(user):\(password)".utf8).base64EncodedString()
        }
        let t = context.target
        switch random.int(0...19) {
        case 0: (request.auth, request.authorization) = ("wrong key", basic(t.serverUUID, String(t.apiKey.reversed())))
        case 1:
            (request.auth, request.authorization) = ("unknown server", basic(UUID().uuidString.lowercased(), t.apiKey))
        case 2:
            let (name, header) = random.pick([
                ("not base64", "Basic !!!!"), ("no colon", "Basic " + Data(t.serverUUID.utf8).base64EncodedString()),
                ("bearer", "Bearer \(t.apiKey)"), ("empty basic", "Basic "),
                ("NUL in key", basic(t.serverUUID, t.apiKey + "\u{0}")),
                ("huge", basic(t.serverUUID, String(repeating: "k", count: 6_000))), ("only colon", basic("", "")),
                ("combining marks", basic(t.serverUUID, String(repeating: "\u{301}", count: 64))),
            ])
            (request.auth, request.authorization) = ("malformed: \(name)", header)
        case 3: (request.auth, request.authorization) = ("none", nil)
        default: (request.auth, request.authorization) = ("valid", basic(t.serverUUID, t.apiKey))
        }
    }

    static func serverTemplate(_ random: inout FuzzRandom, _ context: FuzzContext) -> RawJSON {
        let ownUUID = random.chance(0.1)
        var fields: [(String, RawJSON)] = [
            ("zulip_org_id", .string(ownUUID ? context.target.serverUUID : UUID().uuidString.lowercased())),
            (
                "zulip_org_key",
                .string(
                    ownUUID
                        ? context.target.apiKey : String((0..<64).map { _ in random.pick(Array("abcdef0123456789")) }))
            ),
            ("hostname", .string("fuzz.example.com")), ("contact_email", .string("fuzz@example.com")),
        ]
        // Never a new key for the fuzzer's own server: it would lock the run out.
        if !ownUUID, random.chance(0.2) { fields.append(("new_org_key", .string(String(repeating: "n", count: 64)))) }
        return .object(fields)
    }

    static func bouncerRegisterTemplate(
        _ random: inout FuzzRandom, _ context: FuzzContext, _ request: inout FuzzRequest
    ) -> RawJSON {
        var registration = context.registrationTemplate(&random, kind: random.pick(["apns", "fcm"]))
        if random.chance(0.5) {
            let (hostile, label, rule) = hostileRegistration(&random, context)
            registration = hostile
            request.mutation = label
            request.mustRefuse = rule
        }
        // Zulip 11.x names the registration by push_account_id, Zulip 12 by token_id.
        let dialect: (String, RawJSON) =
            random.chance(0.5)
            ? ("push_account_id", .raw(String(random.int(1...1_000_000))))
            : ("token_id", .string(random.chance(0.5) ? "+wKIhyAx/Eg=" : "AAAAAAAAAAE="))
        return .object([
            ("realm_uuid", .string(context.realm(&random))), dialect,
            ("encrypted_push_registration", .string(context.seal(registration))),
            ("bouncer_public_key", .string(context.bouncerPublicKey)),
        ])
    }

    /// A sealed registration whose inner JSON carries a hostile timestamp, token, kind or app id.
    static func hostileRegistration(_ random: inout FuzzRandom, _ context: FuzzContext) -> (RawJSON, String, String?) {
        let kind = random.pick(["apns", "fcm"])
        let base = context.registrationTemplate(&random, kind: kind)
        let now = Int64(Date().timeIntervalSince1970)
        switch random.int(0...3) {
        case 0, 1:
            let (name, raw, mustRefuse): (String, String, Bool) = random.pick([
                ("Int64.min", "-9223372036854775808", true), ("Int64.min + 1", "-9223372036854775807", true),
                ("-9.2e18", "-9200000000000000000", true), ("Int64.max", "9223372036854775807", true),
                ("far future (year 3000)", "32503680000", true), ("now + 1 h", String(now + 3600), true),
                ("now + 1 min", String(now + 60), false), ("now - 25 h", String(now - 25 * 3600), true),
                ("0", "0", true), ("-1", "-1", true), ("1e300", "1e300", true), ("1e400", "1e400", true),
                ("string", "\"\(now)\"", true), ("null", "null", true), ("1.5", "1.5", true),
                ("UInt64.max", "18446744073709551615", true),
                ("milliseconds", String(now * 1000), true), ("-0", "-0", true),
            ])
            return (
                base.replacing(["timestamp"], with: .raw(raw)), "inner timestamp ← \(name)",
                mustRefuse ? "registration timestamps are accepted only within [now − 24 h, now + 5 min]" : nil
            )
        case 2:
            let field = random.pick(["token", "ios_app_id", "token_kind"])
            if random.chance(0.3) {
                let (name, raw) = FuzzValues.junk(&random)
                return (base.replacing([field], with: .raw(raw)), "inner \(field) ← \(name)", nil)
            }
            let (name, value) = FuzzValues.strings(&random)
            let control = value.unicodeScalars.contains { $0.value < 0x20 || $0.value == 0x7F }
            return (
                base.replacing([field], with: .string(value)), "inner \(field) ← \(name)",
                control && field != "token_kind" ? "\(field) must not hold control characters" : nil
            )
        default:
            let fields = ["token", "timestamp", "token_kind", "ios_app_id"]
            let field = random.pick(fields)
            if random.chance(0.5) {
                return (
                    base.replacing([field], with: nil), "inner \(field) removed",
                    field == "timestamp" ? "timestamp is required" : nil
                )
            }
            return (
                base.replacing([field], with: .raw("-9223372036854775808"), duplicate: true),
                "inner \(field) duplicated with Int64.min", nil
            )
        }
    }

    static func bouncerNotifyTemplate(_ random: inout FuzzRandom, _ context: FuzzContext) -> RawJSON {
        var items: [RawJSON] = []
        for _ in 0..<random.int(1...3) {
            let id: RawJSON = .raw(
                String(random.chance(0.7) ? random.pick(context.deviceIDs) : Int64(random.int(1...1_000_000))))
            let payload: RawJSON = .object([
                (
                    "encrypted_data",
                    .string(Data((0..<48).map { _ in UInt8(random.int(0...255)) }).base64EncodedString())
                ),
                (random.chance(0.5) ? "push_key_id" : "push_account_id", .raw(String(random.int(1...5)))),
            ])
            if random.chance(0.5) {
                items.append(
                    .object([
                        ("device_id", id), ("payload", payload),
                        (
                            "http_headers",
                            .object([("apns_priority", .raw("10")), ("apns_push_type", .string("alert"))])
                        ),
                    ]))
            } else {
                items.append(.object([("device_id", id), ("payload", payload), ("fcm_priority", .string("high"))]))
            }
        }
        return .object([("realm_uuid", .string(context.realm(&random))), ("push_requests", .array(items))])
    }

    /// A legacy register/unregister/test_notification body (Zulip's field names).
    static func legacyDeviceTemplate(_ random: inout FuzzRandom, _ context: FuzzContext) -> RawJSON {
        let apns = random.chance(0.5)
        var fields: [(String, RawJSON)] = [
            ("realm_uuid", .string(context.realm(&random))), ("user_id", .raw(String(random.pick(context.userIDs)))),
            ("user_uuid", .string(UUID().uuidString.lowercased())),
            ("token", .string(apns ? FuzzContext.apnsToken(&random) : FuzzContext.fcmToken(&random))),
            ("token_kind", .raw(apns ? "1" : "2")),
            ("base_payload", .object([("server", .string("fuzz.example.com")), ("realm_name", .string("Fuzz"))])),
        ]
        if apns { fields.append(("ios_app_id", .string("org.zulip.Zulip"))) }
        return .object(fields)
    }

    /// A legacy notify body: plaintext APNs and FCM payloads as a Zulip server sends them.
    static func legacyNotifyTemplate(_ random: inout FuzzRandom, _ context: FuzzContext) -> RawJSON {
        let remove = random.chance(0.3)
        let ids = (0..<random.int(1...300)).map { _ in String(random.int(1...1_000_000)) }.joined(separator: ",")
        let zulip: RawJSON = .object(
            remove
                ? [("event", .string("remove")), ("zulip_message_ids", .string(ids))]
                : [("event", .string("message")), ("zulip_message_id", .raw("5")), ("content", .string("fuzz"))])
        return .object([
            ("user_id", .raw(String(random.pick(context.userIDs)))), ("realm_uuid", .string(context.realm(&random))),
            ("apns_payload", .object([("badge", .raw("0")), ("custom", .object([("zulip", zulip)]))])),
            ("gcm_payload", zulip),
            ("gcm_options", .object([("priority", .string(random.pick(["high", "normal"])))])),
            ("android_devices", .array([.string(FuzzContext.fcmToken(&random))])),
            ("apple_devices", .array([.string(FuzzContext.apnsToken(&random))])),
        ])
    }

    /// Fields whose text must never hold control characters (issue 8: charsets of ids, hostnames, app ids, tokens, keys).
    static let controlFree: Set<String> = [
        "hostname", "token", "ios_app_id", "zulip_org_key", "new_org_key", "contact_email", "zulip_org_id",
    ]

    /// Sets method, path and a body: valid, one node mutated, removed or duplicated, junk added, bytes mutated, or a form.
    /// A mutation of the template's contents (a hostile sealed registration) stays in the label.
    static func post(
        _ request: inout FuzzRequest, _ path: String, _ template: RawJSON, _ random: inout FuzzRandom,
        _ context: FuzzContext
    ) {
        let inner = request.mutation
        postBody(&request, path, template, &random, context)
        if inner != "valid" {
            request.mutation = request.mutation == "valid" ? inner : "\(inner) + \(request.mutation)"
        }
    }

    static func postBody(
        _ request: inout FuzzRequest, _ path: String, _ template: RawJSON, _ random: inout FuzzRandom,
        _ context: FuzzContext
    ) {
        request.method = "POST"
        request.path = path
        request.contentType = "application/json"
        var body = template
        let paths = template.paths
        var form = false
        switch random.int(0...19) {
        case 0, 1, 2: break
        case 3, 4, 5, 6, 7, 8:
            let target = random.pick(paths)
            let name = target.joined(separator: ".")
            switch random.int(0...4) {
            case 0, 1:
                let (label, value) = FuzzValues.strings(&random)
                body = body.replacing(target, with: .string(value))
                request.mutation = "\(name) ← \(label)"
                if controlFree.contains(target.last ?? ""),
                    value.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7F })
                {
                    request.mustRefuse = "\(name) must not hold control characters"
                }
            case 2:
                let number = random.pick(FuzzValues.jsonNumberEdges)
                body = body.replacing(target, with: .raw(number))
                request.mutation = "\(name) ← \(number)"
            default:
                let (label, raw) = FuzzValues.junk(&random)
                body = body.replacing(target, with: .raw(raw))
                request.mutation = "\(name) ← \(label)"
            }
        case 9:
            let target = random.pick(paths)
            body = body.replacing(target, with: nil)
            request.mutation = "\(target.joined(separator: ".")) removed"
        case 10:
            let target = random.pick(paths.filter { !($0.last ?? "").hasPrefix("[") })
            let number = random.pick(FuzzValues.jsonNumberEdges)
            body = body.replacing(target, with: .raw(number), duplicate: true)
            request.mutation = "\(target.joined(separator: ".")) duplicated with \(number)"
        case 11:
            let (label, raw) = FuzzValues.junk(&random)
            if case .object(var fields) = body { fields.append(("junk", .raw(raw))); body = .object(fields) }
            request.mutation = "extra field ← \(label)"
        case 12, 13:
            var bytes = Array(body.text.utf8)
            let operations = mutateBytes(&bytes, &random)
            request.body = bytes
            request.mutation = "bytes: \(operations)"
            return
        case 14:
            request.mutation = random.pick([
                "empty body", "random bytes", "top-level array", "top-level string", "huge body",
            ])
            switch request.mutation {
            case "empty body": request.body = []
            case "random bytes": request.body = (0..<random.int(1...200)).map { _ in UInt8(random.int(0...255)) }
            case "top-level array": request.body = Array("[\(body.text)]".utf8)
            case "top-level string": request.body = Array("\"x\"".utf8)
            default: request.body = Array(("{\"junk\":\"" + String(repeating: "a", count: 300_000) + "\"}").utf8)
            }
            return
        case 15:
            (request.contentType, request.mutation) = random.pick([
                (nil, "no content type"), ("text/plain", "content type text/plain"),
                ("application/json; charset=utf-16", "content type json utf-16"),
                ("multipart/form-data; boundary=x", "content type multipart"),
            ])
        default:
            form = true
        }
        if form {
            request.contentType = "application/x-www-form-urlencoded"
            request.body = Array(formBody(body, &random, &request).utf8)
        } else {
            request.body = Array(body.text.utf8)
        }
    }

    /// A form body of the template's top-level fields (nested values as their JSON text), one possibly hostile.
    static func formBody(_ template: RawJSON, _ random: inout FuzzRandom, _ request: inout FuzzRequest) -> String {
        guard case .object(let fields) = template else { return "" }
        var pairs: [(String, String)] = fields.map { key, value in
            (key, template.string(at: [key]) ?? value.text)
        }
        request.mutation = "form"
        if random.chance(0.7), !pairs.isEmpty {
            let i = random.int(0...pairs.count - 1)
            switch random.int(0...3) {
            case 0:
                let (label, value) = FuzzValues.strings(&random)
                pairs[i].1 = value
                request.mutation = "form \(pairs[i].0) ← \(label)"
                if controlFree.contains(pairs[i].0),
                    value.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7F })
                {
                    request.mustRefuse = "\(pairs[i].0) must not hold control characters"
                }
            case 1:
                pairs[i].1 = random.pick(FuzzValues.jsonNumberEdges + ["١٢٣", "１２", " 1", "1 ", "+1", "0x10"])
                request.mutation = "form \(pairs[i].0) ← \(pairs[i].1)"
            case 2:
                let raw = random.pick(["%", "%ZZ", "%FF%FE", "%C0%AF", "%ED%A0%80", "a=b=c", "&&&", "%00"])
                pairs[i].1 = raw
                request.mutation = "form \(pairs[i].0) ← raw \(raw)"
                return pairs.map { $0.0 + "=" + ($0.0 == pairs[i].0 ? raw : encode($0.1)) }.joined(separator: "&")
            default:
                pairs.append((pairs[i].0, random.pick(FuzzValues.jsonNumberEdges)))
                request.mutation = "form \(pairs[i].0) duplicated"
            }
        }
        return pairs.map { encode($0.0) + "=" + encode($0.1) }.joined(separator: "&")
    }

    static func encode(_ s: String) -> String {
        s.addingPercentEncoding(withAllowedCharacters: .alphanumerics.union(CharacterSet(charactersIn: "-._~"))) ?? s
    }

    /// Query parameters: valid, one hostile, one missing, duplicated or junk added.
    static func query(
        _ request: inout FuzzRequest, _ path: String, _ params: [(String, String)], _ random: inout FuzzRandom
    ) {
        request.method = "GET"
        var params = params
        request.mutation = "valid"
        if !params.isEmpty, random.chance(0.75) {
            let i = random.int(0...params.count - 1)
            switch random.int(0...5) {
            case 0, 1:
                let value =
                    params[i].0 == "after"
                    ? random.pick([
                        "-1-2", "1--2", "٣-٤", "99999999999999999999-1", "1-99999999999999999999", "-", "--", "1-2-3",
                        "0-", "-0",
                        "18446744073709551616-0", "1-١", "１-２", "1e3-1", "9223372036854775807-9223372036854775807",
                        "-9223372036854775808-0", "0-18446744073709551615",
                    ])
                    : random.pick(FuzzValues.jsonNumberEdges + ["١٢٣", "", "abc", "1e3", " 1", "%", "-"])
                params[i].1 = value
                request.mutation = "\(params[i].0)=\(value)"
            case 2:
                let (label, value) = FuzzValues.strings(&random)
                if value.utf8.count > 20_000 { break }
                params[i].1 = value
                request.mutation = "\(params[i].0) ← \(label)"
            case 3:
                request.mutation = "\(params[i].0) missing"
                params.remove(at: i)
            case 4:
                params.append((params[i].0, "x"))
                request.mutation = "\(params[i].0) duplicated"
            default:
                params.append(("junk", String(repeating: "j", count: random.int(1...4000))))
                request.mutation = "junk parameter"
            }
        }
        request.path =
            path + (params.isEmpty ? "" : "?" + params.map { encode($0.0) + "=" + encode($0.1) }.joined(separator: "&"))
    }

    /// A device id for the path: a real one, edges, text.
    static func pathValue(_ random: inout FuzzRandom, _ context: FuzzContext) -> (String, String) {
        if random.chance(0.3) { return ("real", String(random.pick(context.deviceIDs))) }
        let value = random.pick([
            "-1", "0", "9223372036854775807", "9223372036854775808", "-9223372036854775809", "18446744073709551616",
            "abc",
            "%00", "1e3", "%D9%A1", "1%20", "%20", String(repeating: "9", count: 4000), "1.0", "0x1", "+1",
        ])
        return (value.count > 40 ? "4000 nines" : value, value)
    }

    static func mutateBytes(_ bytes: inout [UInt8], _ random: inout FuzzRandom) -> String {
        var names: [String] = []
        for _ in 0..<random.int(1...3) {
            let at = bytes.isEmpty ? 0 : random.int(0...bytes.count)
            switch random.int(0...4) {
            case 0 where !bytes.isEmpty:
                bytes[random.int(0...bytes.count - 1)] ^= UInt8(1 << random.int(0...7))
                names.append("flip")
            case 1:
                bytes = Array(bytes.prefix(at))
                names.append("truncate")
            case 2:
                bytes.insert(
                    contentsOf: random.pick([
                        [0x00], [0xC0, 0xAF], [0xED, 0xA0, 0x80], [0xFF], Array(#"\ud800"#.utf8), Array(",".utf8),
                        Array("}".utf8),
                    ]), at: at)
                names.append("insert")
            case 3 where !bytes.isEmpty:
                let end = min(bytes.count, at + random.int(1...8))
                bytes.removeSubrange(min(at, end)..<end)
                names.append("delete")
            default:
                bytes.insert(
                    contentsOf: Array(String(repeating: "[", count: random.pick([100, 600, 100_000])).utf8), at: at)
                names.append("deep nesting")
            }
        }
        return names.joined(separator: "+")
    }
}
