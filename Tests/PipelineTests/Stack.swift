import AsyncHTTPClient
import Foundation
import NIOCore
import PushCrypto
import PushModels
import Synchronization
import Testing

/// Child processes started by the tests, killed when the test process exits.
let children = Mutex<[Int32]>([])

private func killChildrenAtExit() {
    atexit {
        for pid in children.withLock({ $0 }) { kill(pid, SIGKILL) }
    }
}

struct StackError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

/// The whole pipeline for integration tests: a real Redis, the dev broker (librdkafka's
/// Kafka-protocol mock cluster), the provider fakes and the four real service binaries,
/// each on free loopback ports in a private directory.
final class Stack: Sendable {
    enum Service: String, CaseIterable, Sendable {
        case ingest, encryptor, dispatcher, feedback
    }

    let directory: String
    let binDirectory: String
    let redisPort: Int
    let kafkaBrokers: String
    let ports: [Service: Int]
    let controlPort: Int
    let dispatcherEnvironment: [String: String]
    let bouncerPublicKey: String
    let processes = Mutex<[Service: Process]>([:])

    var ingestURL: String { "http://127.0.0.1:\(ports[.ingest] ?? 0)" }
    var controlURL: String { "http://127.0.0.1:\(controlPort)" }

    private static let shared = Mutex<Task<Stack, any Error>?>(nil)

    /// One stack per test process, started on first use.
    static func get() async throws -> Stack {
        let task = shared.withLock { task in
            if let task { return task }
            let new = Task { try await Stack.start() }
            task = new
            return new
        }
        return try await task.value
    }

    static func binDirectory() throws -> String {
        if let dir = ProcessInfo.processInfo.environment["PUSHRELAY_BIN_DIR"], !dir.isEmpty { return dir }
        // `swift test` runs the test bundle from the build directory that holds the executables.
        let candidates = [
            URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().path,
            FileManager.default.currentDirectoryPath + "/.build/debug",
        ]
        for dir in candidates where FileManager.default.isExecutableFile(atPath: "\(dir)/ingest") {
            return dir
        }
        throw StackError("service binaries not found; run `swift build` first or set PUSHRELAY_BIN_DIR")
    }

    static func freePort() throws -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { pointer in
                bind(fd, pointer, length) == 0 && getsockname(fd, pointer, &length) == 0
            }
        }
        guard bound else { throw StackError("cannot find a free port") }
        return Int(UInt16(bigEndian: address.sin_port))
    }

    static func which(_ name: String) -> String? {
        for dir in (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin").split(separator: ":")
        where FileManager.default.isExecutableFile(atPath: "\(dir)/\(name)") {
            return "\(dir)/\(name)"
        }
        for dir in ["/usr/bin", "/usr/sbin", "/usr/local/bin"]
        where FileManager.default.isExecutableFile(atPath: "\(dir)/\(name)") {
            return "\(dir)/\(name)"
        }
        return nil
    }

    @discardableResult
    static func launch(_ path: String, _ arguments: [String], environment: [String: String], log: String) throws
        -> Process
    {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: path)
        process.arguments = arguments
        var env = ProcessInfo.processInfo.environment
        env.merge(environment) { _, new in new }
        env["PUSHRELAY_EXIT_WITH_PARENT"] = "1"
        process.environment = env
        _ = FileManager.default.createFile(atPath: log, contents: nil)
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: log))
        handle.seekToEndOfFile()
        process.standardOutput = handle
        process.standardError = handle
        try process.run()
        let pid = process.processIdentifier
        children.withLock { $0.append(pid) }
        return process
    }

    static func waitFor(_ what: String, timeout: Duration = .seconds(60), _ check: () async -> Bool) async throws {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if await check() { return }
            try await Task.sleep(for: .milliseconds(100))
        }
        throw StackError("timed out waiting for \(what)")
    }

    static func start() async throws -> Stack {
        killChildrenAtExit()
        let bin = try binDirectory()
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("pushrelay-test-\(getpid())").path
        try? FileManager.default.removeItem(atPath: dir)
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)

        guard let redisServer = which("redis-server") else { throw StackError("redis-server is not installed") }
        let redisPort = try freePort()
        try launch(
            redisServer,
            [
                "--port", "\(redisPort)", "--bind", "127.0.0.1", "--save", "", "--appendonly", "yes", "--dir", dir,
                "--daemonize", "no",
            ], environment: [:], log: "\(dir)/redis.log")

        let brokersFile = "\(dir)/kafka-bootstrap"
        try launch(
            "\(bin)/devbroker", [], environment: ["PUSHRELAY_KAFKA_BROKERS_FILE": brokersFile],
            log: "\(dir)/devbroker.log")
        try await waitFor("the dev broker") { FileManager.default.fileExists(atPath: brokersFile) }
        let brokers = try String(contentsOfFile: brokersFile, encoding: .utf8)
            .trimmingCharacters(in: .whitespacesAndNewlines)

        let fakePorts = (apns: try freePort(), fcm: try freePort(), control: try freePort())
        try launch(
            "\(bin)/provider-fakes", [],
            environment: [
                "PUSHRELAY_FAKES_DIR": "\(dir)/fakes", "PUSHRELAY_FAKES_APNS_PORT": "\(fakePorts.apns)",
                "PUSHRELAY_FAKES_FCM_PORT": "\(fakePorts.fcm)", "PUSHRELAY_FAKES_CONTROL_PORT": "\(fakePorts.control)",
            ], log: "\(dir)/fakes.log")
        try await waitFor("the provider fakes") {
            (try? await HTTP.get("http://127.0.0.1:\(fakePorts.control)/health"))?.status == 200
        }
        var dispatcherEnvironment: [String: String] = [:]
        for line in try String(contentsOfFile: "\(dir)/fakes/dispatcher.env", encoding: .utf8).split(separator: "\n") {
            let parts = line.split(separator: "=", maxSplits: 1)
            if parts.count == 2 { dispatcherEnvironment[String(parts[0])] = String(parts[1]) }
        }

        try PipelineKeyring.generateLine(id: "test1").write(
            toFile: "\(dir)/pipeline-keys", atomically: true, encoding: .utf8)
        let bouncerLine = try BouncerKeyring.generateLine()
        try bouncerLine.write(toFile: "\(dir)/bouncer-keys", atomically: true, encoding: .utf8)
        let bouncerKey = try BouncerKeyring(fileContents: bouncerLine).publicKeysBase64[0]

        var ports: [Service: Int] = [:]
        for service in Service.allCases { ports[service] = try freePort() }
        let stack = Stack(
            directory: dir, binDirectory: bin, redisPort: redisPort, kafkaBrokers: brokers, ports: ports,
            controlPort: fakePorts.control, dispatcherEnvironment: dispatcherEnvironment,
            bouncerPublicKey: bouncerKey)
        for service in Service.allCases { try stack.start(service) }
        for service in Service.allCases { try await stack.waitReady(service) }
        return stack
    }

    private init(
        directory: String, binDirectory: String, redisPort: Int, kafkaBrokers: String, ports: [Service: Int],
        controlPort: Int, dispatcherEnvironment: [String: String], bouncerPublicKey: String
    ) {
        self.directory = directory
        self.binDirectory = binDirectory
        self.redisPort = redisPort
        self.kafkaBrokers = kafkaBrokers
        self.ports = ports
        self.controlPort = controlPort
        self.dispatcherEnvironment = dispatcherEnvironment
        self.bouncerPublicKey = bouncerPublicKey
    }

    func environment(for service: Service) -> [String: String] {
        var env: [String: String] = [
            "PUSHRELAY_KAFKA_BROKERS": kafkaBrokers,
            "PUSHRELAY_REDIS_PORT": "\(redisPort)",
            "PUSHRELAY_HTTP_PORT": "\(ports[service] ?? 0)",
            "PUSHRELAY_PIPELINE_KEYS_FILE": "\(directory)/pipeline-keys",
            "PUSHRELAY_BOUNCER_KEYS_FILE": "\(directory)/bouncer-keys",
            "PUSHRELAY_RATELIMIT_REQUESTS": "300",
            "PUSHRELAY_DISPATCHER_RETRY_BASE_MS": "100",
            "PUSHRELAY_DISPATCHER_MAX_ATTEMPTS": "8",
        ]
        if service == .dispatcher { env.merge(dispatcherEnvironment) { _, new in new } }
        return env
    }

    func start(_ service: Service) throws {
        let process = try Stack.launch(
            "\(binDirectory)/\(service.rawValue)", [], environment: environment(for: service),
            log: "\(directory)/\(service.rawValue).log")
        processes.withLock { $0[service] = process }
    }

    func waitReady(_ service: Service) async throws {
        let url = "http://127.0.0.1:\(ports[service] ?? 0)/health/ready"
        try await Stack.waitFor("\(service.rawValue) to be ready") { (try? await HTTP.get(url))?.status == 200 }
    }

    /// Sends `signal` to a service and waits for it to exit.
    func stop(_ service: Service, signal: Int32) async throws {
        guard let process = processes.withLock({ $0[service] }) else { return }
        kill(process.processIdentifier, signal)
        try await Stack.waitFor("\(service.rawValue) to exit", timeout: .seconds(30)) { !process.isRunning }
    }

    /// The exit status of a service that has stopped.
    func exitStatus(_ service: Service) -> Int32? {
        processes.withLock { p in p[service].flatMap { $0.isRunning ? nil : $0.terminationStatus } }
    }

    func isRunning(_ service: Service) -> Bool {
        processes.withLock { $0[service]?.isRunning ?? false }
    }

    func log(_ service: Service) -> String {
        (try? String(contentsOfFile: "\(directory)/\(service.rawValue).log", encoding: .utf8)) ?? ""
    }

    // MARK: Fake providers

    func received(_ provider: String) async throws -> [ReceivedPush] {
        let response = try await HTTP.get("\(controlURL)/\(provider)/received")
        return try JSONDecoder().decode([ReceivedPush].self, from: Data(response.body))
    }

    func unregister(_ provider: String, token: String) async throws {
        _ = try await HTTP.send("POST", "\(controlURL)/\(provider)/unregistered", json: ["token": .string(token)])
    }

    func inject(_ provider: String, status: Int, reason: String, retryAfter: Int?, count: Int) async throws {
        var body: [String: JSONValue] = ["status": .int(Int64(status)), "reason": .string(reason), "count": .int(Int64(count))]
        if let retryAfter { body["retry_after"] = .int(Int64(retryAfter)) }
        _ = try await HTTP.send("POST", "\(controlURL)/\(provider)/inject", json: .object(body))
    }

    /// Waits until `condition` holds for the pushes a fake received.
    func waitForPushes(
        _ provider: String, timeout: Duration = .seconds(60), _ condition: ([ReceivedPush]) -> Bool
    ) async throws -> [ReceivedPush] {
        let deadline = ContinuousClock.now + timeout
        while true {
            let pushes = try await received(provider)
            if condition(pushes) { return pushes }
            if ContinuousClock.now > deadline {
                throw StackError("timed out waiting for \(provider) pushes; have \(pushes.count)")
            }
            try await Task.sleep(for: .milliseconds(100))
        }
    }
}

/// A push as the fakes' control API reports it.
struct ReceivedPush: Decodable, Sendable {
    var provider: String
    var token: String
    var headers: [String: String]
    var body: JSONValue
    var status: Int
    var reason: String?
    var httpVersion: String

    enum CodingKeys: String, CodingKey {
        case provider, token, headers, body, status, reason
        case httpVersion = "http_version"
    }
}

/// A minimal JSON-over-HTTP client for the tests.
enum HTTP {
    struct Reply: Sendable {
        var status: Int
        var body: [UInt8]
        var headers: [(String, String)]

        var json: JSONValue { (try? JSONDecoder().decode(JSONValue.self, from: Data(body))) ?? .null }
        var code: String? { json["code"]?.stringValue }
    }

    static func get(_ url: String, auth: (String, String)? = nil) async throws -> Reply {
        try await send("GET", url, body: nil, auth: auth)
    }

    static func send(
        _ method: String, _ url: String, json: JSONValue, auth: (String, String)? = nil
    ) async throws -> Reply {
        try await send(method, url, body: Wire.canonical(json), contentType: "application/json", auth: auth)
    }

    static func send(
        _ method: String, _ url: String, body: [UInt8]?, contentType: String = "application/json",
        auth: (String, String)? = nil
    ) async throws -> Reply {
        var request = HTTPClientRequest(url: url)
        request.method = .init(rawValue: method)
        if let body {
            request.body = .bytes(ByteBuffer(bytes: body))
            request.headers.add(name: "content-type", value: contentType)
        }
        if let (user, password) = auth {
            request.headers.add(
                name: "authorization", value: "Basic \(Data("\(user):\(password)".utf8).base64EncodedString())")
        }
        let response = try await HTTPClient.shared.execute(request, timeout: .seconds(30))
        let bytes = try await response.body.collect(upTo: 16 << 20)
        return Reply(
            status: Int(response.status.code), body: Array(bytes.readableBytesView),
            headers: response.headers.map { ($0.name, $0.value) })
    }
}
