import AsyncHTTPClient
import FakeProviders
import Kafka
import Logging
import Foundation
import NIOCore
import NIOHTTP1
import PushCrypto
import PushModels
import Synchronization

/// Child processes started by the tests, killed when the test process exits.
public let children = Mutex<[Int32]>([])

private func killChildrenAtExit() {
    atexit {
        for pid in children.withLock({ $0 }) { kill(pid, SIGKILL) }
    }
}

/// Stops the children a test run started when the run goes away however it ends (a
/// crash or SIGKILL leaves no `atexit`): a `sh` beside the run reads each child's pid
/// from a pipe whose only writer is this process, and when the pipe closes, which the
/// kernel does as this process ends, sends each of them SIGTERM, so services stop as
/// they do in production and a run never leaves orphans. The services know nothing of it.
private let reaper = Mutex<FileHandle?>(nil)

/// SIGINT and SIGHUP reach the whole terminal group: the reaper outlives them. A child
/// still running 30 s after SIGTERM (Redis started from a test thread may have the signal
/// blocked) gets SIGKILL.
private let reaperScript = """
    trap '' INT HUP; pids=''
    while read -r pid; do pids="$pids $pid"; done
    [ -z "$pids" ] && exit 0
    kill -TERM $pids 2>/dev/null
    for _ in $(seq 60); do
      alive=''; for pid in $pids; do kill -0 "$pid" 2>/dev/null && alive="$alive $pid"; done
      [ -z "$alive" ] && exit 0
      sleep 0.5
    done
    kill -KILL $alive 2>/dev/null
    exit 0
    """

private func reapWhenThisProcessEnds(_ pid: Int32) {
    reaper.withLock { writer in
        if writer == nil {
            let pipe = Pipe()
            let process = Process()
            process.executableURL = URL(fileURLWithPath: "/bin/sh")
            process.arguments = ["-c", reaperScript]
            process.standardInput = pipe
            process.standardOutput = FileHandle.nullDevice
            process.standardError = FileHandle.nullDevice
            guard (try? process.run()) != nil else { return }
            // Only this process holds the write end: children it starts later get none.
            _ = fcntl(pipe.fileHandleForWriting.fileDescriptor, F_SETFD, FD_CLOEXEC)
            try? pipe.fileHandleForReading.close()
            writer = pipe.fileHandleForWriting
        }
        try? writer?.write(contentsOf: Data("\(pid)\n".utf8))
    }
}

public struct StackError: Error, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}

/// The whole pipeline for integration tests: a real Redis, the dev broker (librdkafka's
/// Kafka-protocol mock cluster), the provider fakes and the four real service binaries,
/// each on free loopback ports in a private directory.
public final class Stack: Sendable {
    public enum Service: String, CaseIterable, Sendable {
        case ingest, encryptor, dispatcher, feedback
    }

    public let directory: String
    public let binDirectory: String
    public let redisPort: Int
    public let kafkaBrokers: String
    /// Each service's HTTP port (ingest's API port).
    public var ports: [Service: Int] { portTable.withLock { $0.services } }
    /// Ingest's ops listener (health, metrics), apart from its API port.
    public var ingestOpsPort: Int { portTable.withLock { $0.ingestOps } }
    /// New ports replace a service's when another process took one first (`start`).
    private let portTable: Mutex<(services: [Service: Int], ingestOps: Int)>
    public let controlPort: Int
    /// The fake Waku node's REST API (the Status push server's transport).
    public let wakuPort: Int
    public var wakuURL: String { "http://127.0.0.1:\(wakuPort)" }
    /// The fakes' OTLP/gRPC trace receiver (OTLP/HTTP is on the control port).
    public let otlpGRPCPort: Int
    public let dispatcherEnvironment: [String: String]
    public let bouncerPublicKey: String
    public let options: Options
    /// The Redis Cluster the stack runs on (`Options.redisClusterMasters`); nil: one Redis.
    public let redisCluster: LocalRedisCluster?
    public let processes = Mutex<[Service: Process]>([:])
    let redis = Mutex<Process?>(nil)
    /// Processes besides the services, by name (for resource sampling).
    let helpers = Mutex<[String: Process]>([:])
    let dispatcherOverrides = Mutex<[String: String]>([:])

    /// Every running process of the stack by name: the four services, Redis, the fakes.
    public func pids() -> [String: Int32] {
        var result: [String: Int32] = [:]
        for (service, process) in processes.withLock({ $0 }) where process.isRunning {
            result[service.rawValue] = process.processIdentifier
        }
        for (name, process) in helpers.withLock({ $0 }) where process.isRunning {
            result[name] = process.processIdentifier
        }
        return result
    }

    /// How to start a stack: extra environment for every service, broker partitions.
    public struct Options: Sendable {
        public var environment: [String: String]
        public var partitions: Int
        /// Extra environment for the provider fakes.
        public var fakesEnvironment: [String: String]
        /// Masters of a local Redis Cluster to run on instead of one Redis (0: one Redis).
        public var redisClusterMasters: Int
        /// Replicas per master of that cluster (the failover drill).
        public var redisClusterReplicas = 0
        /// A Redis the test started (TLS only, an ACL user) to run on instead of the stack's own.
        public var secureRedis: SecureRedis?
        /// Told apart in the stack's directory name, for a second stack in one process.
        public var name: String
        /// Tracing: the share of requests traced (OpenTelemetry's parent-based ratio sampler;
        /// a request whose own `traceparent` is sampled is always traced), exported to the
        /// fakes' OTLP receiver. Nil: tracing off, as in production unless configured.
        public var tracingRatio: Double?
        /// Where the four services' binaries are (an earlier release's, for the rolling-upgrade
        /// drill); nil: beside the tools' (`binDirectory`).
        public var serviceBinDirectory: String?

        public init(
            environment: [String: String] = [:], partitions: Int = 6, fakesEnvironment: [String: String] = [:],
            redisClusterMasters: Int = 0, name: String = ""
        ) {
            self.environment = environment
            self.partitions = partitions
            self.fakesEnvironment = fakesEnvironment
            self.redisClusterMasters = redisClusterMasters
            self.name = name
        }

        /// What the integration tests run with: short retry delays so retries finish within a test.
        /// Every test shares 127.0.0.1, so the per-address limits on failed
        /// authentication and server registration are lifted here; the hardening tests
        /// start an extra ingest with them (`launchExtraIngest`).
        /// Tracing is on, tracing only the requests that ask for it.
        public static let tests: Options = {
            var options = Options(environment: [
                "PUSHRELAY_AUTH_FAILURES_MAX": "1000000",
                "PUSHRELAY_SERVER_REGISTRATIONS_MAX": "1000000",
                "PUSHRELAY_STATUS_REQUESTS_MAX": "1000000",
                "PUSHRELAY_RATELIMIT_REQUESTS": "300",
                "PUSHRELAY_RETRY_DELAYS": "1s,2s,3s",
                "PUSHRELAY_RETRY_MAX_ATTEMPTS": "4",
                // Spans exported every 200 ms (OpenTelemetry's default: 5 s), for the trace tests.
                "OTEL_BSP_SCHEDULE_DELAY": "200",
            ])
            options.tracingRatio = 0
            return options
        }()
    }

    /// Where requests to ingest go: the next of `ingestRotation` (a load balancer's
    /// round robin over several instances), or the stack's own ingest.
    public var ingestURL: String {
        ingestRotation.withLock { rotation in
            guard !rotation.urls.isEmpty else { return nil }
            rotation.next = (rotation.next + 1) % rotation.urls.count
            return rotation.urls[rotation.next]
        } ?? "http://127.0.0.1:\(ports[.ingest] ?? 0)"
    }
    /// The ingest instances `ingestURL` spreads requests over; empty: the stack's own.
    public let ingestRotation = Mutex<(urls: [String], next: Int)>(([], 0))
    public var controlURL: String { "http://127.0.0.1:\(controlPort)" }
    public var otlpGRPCURL: String { "http://127.0.0.1:\(otlpGRPCPort)" }

    private static let shared = Mutex<Task<Stack, any Error>?>(nil)

    /// One stack per test process, started on first use.
    public static func get() async throws -> Stack {
        let task = shared.withLock { task in
            if let task { return task }
            let new = Task { try await Stack.start(options: .tests) }
            task = new
            return new
        }
        return try await task.value
    }

    public static func binDirectory() throws -> String {
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

    /// Ports `freePort` has handed out in this process.
    private static let handedOut = Mutex<Set<Int>>([])

    /// A loopback port nothing listens on now, and one this process has not handed out
    /// before: the kernel may offer a port again as soon as the probe closes it, and two
    /// processes of a stack given the same port would race for it (the loser exits; its
    /// readiness probe reaches the winner).
    public static func freePort() throws -> Int {
        for _ in 0..<100 {
            let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            defer { close(fd) }
            let port = try bindLoopback(fd)
            if handedOut.withLock({ $0.insert(port).inserted }) { return port }
        }
        throw StackError("cannot find a free port not handed out before")
    }

    /// A loopback socket that listens and never answers (the kernel completes the
    /// handshake): a server that hangs. Close `fd` when done.
    /// `port` 0: a free one; another: that one (taken from whoever was to bind it).
    public static func silentListener(port: Int = 0) throws -> (fd: Int32, port: Int) {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        do {
            let port = try bindLoopback(fd, port: port)
            guard listen(fd, 16) == 0 else { throw StackError("cannot listen on port \(port)") }
            return (fd, port)
        } catch {
            close(fd)
            throw error
        }
    }

    /// Binds `fd` to loopback `port` (0: a free one); the port.
    private static func bindLoopback(_ fd: Int32, port: Int = 0) throws -> Int {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = in_port_t(UInt16(clamping: port).bigEndian)
        if port != 0 {
            // A port just closed may still have connections in TIME_WAIT.
            var reuse: Int32 = 1
            setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &reuse, socklen_t(MemoryLayout<Int32>.size))
        }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { pointer in
                bind(fd, pointer, length) == 0 && getsockname(fd, pointer, &length) == 0
            }
        }
        guard fd >= 0, bound else {
            throw StackError(port == 0 ? "cannot find a free port" : "cannot bind port \(port)")
        }
        return Int(UInt16(bigEndian: address.sin_port))
    }

    public static func which(_ name: String) -> String? {
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
    public static func launch(_ path: String, _ arguments: [String], environment: [String: String], log: String) throws
        -> Process
    {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: path)
        process.arguments = arguments
        var env = ProcessInfo.processInfo.environment
        env.merge(environment) { _, new in new }
        process.environment = env
        _ = FileManager.default.createFile(atPath: log, contents: nil)
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: log))
        handle.seekToEndOfFile()
        process.standardOutput = handle
        process.standardError = handle
        try process.run()
        let pid = process.processIdentifier
        children.withLock { $0.append(pid) }
        reapWhenThisProcessEnds(pid)
        return process
    }

    public static func waitFor(_ what: String, timeout: Duration = .seconds(60), _ check: () async -> Bool) async throws
    {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if await check() { return }
            try await Task.sleep(for: .milliseconds(100))
        }
        throw StackError("timed out waiting for \(what)")
    }

    public static func start(options: Options) async throws -> Stack {
        killChildrenAtExit()
        let bin = try binDirectory()
        let suffix = options.name.isEmpty ? "" : "-\(options.name)"
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("pushrelay-test-\(getpid())\(suffix)")
            .path
        try? FileManager.default.removeItem(atPath: dir)
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)

        let redisPort: Int
        var redis: Process?
        var redisCluster: LocalRedisCluster?
        if let secure = options.secureRedis {
            redisPort = secure.port
        } else if options.redisClusterMasters > 0 {
            let cluster = try await LocalRedisCluster.start(
                masters: options.redisClusterMasters, replicas: options.redisClusterReplicas,
                directory: "\(dir)/redis-cluster")
            redisCluster = cluster
            redisPort = cluster.ports[0]
        } else {
            // A port another process bound first ends this Redis at once: then a new port.
            var started: (port: Int, process: Process)?
            for _ in 1...3 where started == nil {
                let port = try freePort()
                let process = try launchRedis(port: port, directory: dir)
                try await waitFor("redis on \(port)") { !process.isRunning || redisAnswers(port: port) }
                // Redis ends within milliseconds when its port is taken (and another may answer there).
                try await Task.sleep(for: .milliseconds(100))
                if process.isRunning { started = (port, process) }
            }
            guard let started else { throw StackError("redis did not start (see \(dir)/redis.log)") }
            (redisPort, redis) = (started.port, started.process)
        }

        let brokersFile = "\(dir)/kafka-bootstrap"
        let broker = try launch(
            "\(bin)/devbroker", [],
            environment: [
                "PUSHRELAY_KAFKA_BROKERS_FILE": brokersFile, "PUSHRELAY_DEVBROKER_PARTITIONS": "\(options.partitions)",
            ],
            log: "\(dir)/devbroker.log")
        try await waitFor("the dev broker") { FileManager.default.fileExists(atPath: brokersFile) }
        let brokers = try String(contentsOfFile: brokersFile, encoding: .utf8)
            .trimmingCharacters(in: .whitespacesAndNewlines)

        // Free ports are picked, then bound by the fakes: another process may take one in
        // between (many stacks start at once in a test run). The fakes then exit; try new ports.
        var fakePorts = (apns: 0, fcm: 0, control: 0, push: 0, otlpGRPC: 0, waku: 0)
        var fakes: Process?
        for attempt in 1...3 {
            fakePorts = (
                apns: try freePort(), fcm: try freePort(), control: try freePort(), push: try freePort(),
                otlpGRPC: try freePort(), waku: try freePort()
            )
            let process = try launch(
                "\(bin)/provider-fakes", [],
                environment: [
                    "PUSHRELAY_FAKES_DIR": "\(dir)/fakes", "PUSHRELAY_FAKES_APNS_PORT": "\(fakePorts.apns)",
                    "PUSHRELAY_FAKES_FCM_PORT": "\(fakePorts.fcm)",
                    "PUSHRELAY_FAKES_CONTROL_PORT": "\(fakePorts.control)",
                    "PUSHRELAY_FAKES_PUSH_PORT": "\(fakePorts.push)",
                    "PUSHRELAY_FAKES_OTLP_GRPC_PORT": "\(fakePorts.otlpGRPC)",
                    "PUSHRELAY_FAKES_WAKU_PORT": "\(fakePorts.waku)",
                ].merging(options.fakesEnvironment) { _, new in new }, log: "\(dir)/fakes.log")
            let control = fakePorts.control
            try await waitFor("the provider fakes") {
                if !process.isRunning { return true }
                return (try? await HTTP.get("http://127.0.0.1:\(control)/health"))?.status == 200
            }
            if process.isRunning {
                fakes = process
                break
            }
            if attempt == 3 { throw StackError("the provider fakes exited (see \(dir)/fakes.log)") }
        }
        guard let fakes else { throw StackError("the provider fakes did not start") }
        var dispatcherEnvironment: [String: String] = [:]
        for line in try String(contentsOfFile: "\(dir)/fakes/dispatcher.env", encoding: .utf8).split(separator: "\n") {
            let parts = line.split(separator: "=", maxSplits: 1)
            if parts.count == 2 { dispatcherEnvironment[String(parts[0])] = String(parts[1]) }
        }

        try PipelineKeyring.generateLine(id: "test1").write(
            toFile: "\(dir)/pipeline-keys", atomically: true, encoding: .utf8)
        try StorageKeyring.generateLine(id: "test1").write(
            toFile: "\(dir)/storage-keys", atomically: true, encoding: .utf8)
        try APIKeyPepper.generateLine().write(toFile: "\(dir)/apikey-pepper", atomically: true, encoding: .utf8)
        // The Status server's secp256k1 identity: 32 random bytes (invalid with odds of 2^-128).
        try (0..<32).map { _ in String(format: "%02x", UInt8.random(in: 0...255)) }.joined().write(
            toFile: "\(dir)/status-key", atomically: true, encoding: .utf8)
        let bouncerLine = try BouncerKeyring.generateLine()
        try bouncerLine.write(toFile: "\(dir)/bouncer-keys", atomically: true, encoding: .utf8)
        let bouncerKey = try BouncerKeyring(fileContents: bouncerLine).publicKeysBase64[0]

        var ports: [Service: Int] = [:]
        for service in Service.allCases { ports[service] = try freePort() }
        let stack = Stack(
            directory: dir, binDirectory: bin, redisPort: redisPort, kafkaBrokers: brokers, ports: ports,
            ingestOpsPort: try freePort(), controlPort: fakePorts.control, wakuPort: fakePorts.waku,
            otlpGRPCPort: fakePorts.otlpGRPC,
            dispatcherEnvironment: dispatcherEnvironment, bouncerPublicKey: bouncerKey, options: options,
            redisCluster: redisCluster)
        stack.redis.withLock { $0 = redis }
        stack.helpers.withLock { helpers in
            helpers = ["provider-fakes": fakes, "devbroker": broker]
            helpers["redis"] = redis
        }
        for service in Service.allCases { try stack.start(service) }
        for service in Service.allCases { try await stack.waitReadyOnItsPorts(service) }
        return stack
    }

    /// `waitReady`, and when the service exited because a port of its was taken (another
    /// process bound it between `freePort` and the service: the kernel hands out ports
    /// for binds to port 0 to anyone), it is started again on new ports, twice at most.
    public func waitReadyOnItsPorts(_ service: Service) async throws {
        for attempt in 1...3 {
            do {
                return try await waitReady(service)
            } catch {
                let log = FileManager.default.contents(atPath: "\(directory)/\(service.rawValue).log") ?? Data()
                let running = processes.withLock { $0[service]?.isRunning ?? false }
                guard attempt < 3, !running, String(decoding: log, as: UTF8.self).contains("Address already in use")
                else { throw error }
                let (port, opsPort) = (try Stack.freePort(), try Stack.freePort())
                portTable.withLock { table in
                    table.services[service] = port
                    if service == .ingest { table.ingestOps = opsPort }
                }
                try start(service)
            }
        }
    }

    private init(
        directory: String, binDirectory: String, redisPort: Int, kafkaBrokers: String, ports: [Service: Int],
        ingestOpsPort: Int, controlPort: Int, wakuPort: Int, otlpGRPCPort: Int, dispatcherEnvironment: [String: String],
        bouncerPublicKey: String, options: Options, redisCluster: LocalRedisCluster?
    ) {
        self.otlpGRPCPort = otlpGRPCPort
        self.options = options
        self.redisCluster = redisCluster
        self.directory = directory
        self.binDirectory = binDirectory
        self.redisPort = redisPort
        self.kafkaBrokers = kafkaBrokers
        self.portTable = Mutex((ports, ingestOpsPort))
        self.controlPort = controlPort
        self.wakuPort = wakuPort
        self.dispatcherEnvironment = dispatcherEnvironment
        self.bouncerPublicKey = bouncerPublicKey
    }

    /// Where the stack's Redis is: its port, and the cluster's settings when it is one.
    var redisEnvironment: [String: String] {
        var env = ["PUSHRELAY_REDIS_PORT": "\(redisPort)"]
        if let redisCluster { env.merge(redisCluster.environment) { _, new in new } }
        if let secure = options.secureRedis { env.merge(secure.environment) { _, new in new } }
        return env
    }

    /// The APNs topic of gorush-API iOS notifications that give none.
    public static let gorushTopic = "org.zulip.Zulip"

    public func environment(for service: Service) -> [String: String] {
        var env: [String: String] = [
            "PUSHRELAY_KAFKA_BROKERS": kafkaBrokers,
            "PUSHRELAY_HTTP_PORT": "\(ports[service] ?? 0)",
            "PUSHRELAY_PIPELINE_KEYS_FILE": "\(directory)/pipeline-keys",
            "PUSHRELAY_BOUNCER_KEYS_FILE": "\(directory)/bouncer-keys",
            "PUSHRELAY_STORAGE_KEYS_FILE": "\(directory)/storage-keys",
            "PUSHRELAY_APIKEY_PEPPER_FILE": "\(directory)/apikey-pepper",
        ]
        if service == .ingest {
            env["PUSHRELAY_OPS_PORT"] = "\(ingestOpsPort)"
            // The Status push server and gorush's API, on the stack's own identity.
            env["PUSHRELAY_STATUS_ENABLED"] = "true"
            env["PUSHRELAY_STATUS_KEY_FILE"] = "\(directory)/status-key"
            env["PUSHRELAY_STATUS_APNS_TOPICS"] = Self.gorushTopic
            env["PUSHRELAY_GORUSH_APNS_TOPIC"] = Self.gorushTopic
            // Status clients over Waku, through the fakes' node.
            env["PUSHRELAY_STATUS_WAKU_URL"] = wakuURL
            env["PUSHRELAY_STATUS_WAKU_POLL_INTERVAL_MS"] = "50"
        }
        if service == .feedback {
            // Feedback hooks may call the test's own receivers on loopback.
            env["PUSHRELAY_FEEDBACK_HOOK_ALLOWED_HOSTS"] = "127.0.0.1,localhost"
            env["PUSHRELAY_FEEDBACK_HOOK_ATTEMPTS"] = "3"
            if let ca = dispatcherEnvironment["PUSHRELAY_PUSH_ENDPOINT_CA_FILE"] {
                env["PUSHRELAY_PUSH_ENDPOINT_CA_FILE"] = ca
            }
        }
        if let ratio = options.tracingRatio {
            // Exported to the fakes' OTLP receiver; a request whose own `traceparent` says
            // sampled is traced, others at `ratio` (OpenTelemetry's parent-based sampler).
            env["OTEL_EXPORTER_OTLP_ENDPOINT"] = controlURL
            env["OTEL_EXPORTER_OTLP_PROTOCOL"] = "http/protobuf"
            env["OTEL_TRACES_SAMPLER"] = "parentbased_traceidratio"
            env["OTEL_TRACES_SAMPLER_ARG"] = "\(ratio)"
        }
        env.merge(redisEnvironment) { _, new in new }
        env.merge(options.environment) { _, new in new }
        if service == .dispatcher {
            env.merge(dispatcherEnvironment) { _, new in new }
            env.merge(dispatcherOverrides.withLock { $0 }) { _, new in new }
        }
        return env
    }

    /// Settings the dispatcher starts with from now on, over the fakes' (a rotated key).
    public func overrideDispatcher(_ environment: [String: String]) {
        dispatcherOverrides.withLock { $0.merge(environment) { _, new in new } }
    }

    public func start(_ service: Service) throws {
        let process = try Stack.launch(
            "\(options.serviceBinDirectory ?? binDirectory)/\(service.rawValue)", [],
            environment: environment(for: service),
            log: "\(directory)/\(service.rawValue).log")
        processes.withLock { $0[service] = process }
    }

    /// Where a service answers health and metrics: ingest's ops port, the others' HTTP port.
    public func opsURL(_ service: Service) -> String {
        "http://127.0.0.1:\(service == .ingest ? ingestOpsPort : ports[service] ?? 0)"
    }

    /// Starts one more ingest on the same Redis and Kafka with extra settings (for
    /// limits and timeouts the shared one must not have). Stopped with the stack.
    public func launchExtraIngest(_ extra: [String: String], name: String, ready: Bool = true) async throws -> (
        api: String, ops: String
    ) {
        let apiPort = try Stack.freePort()
        let opsPort = try Stack.freePort()
        var env = environment(for: .ingest)
        env["PUSHRELAY_HTTP_PORT"] = "\(apiPort)"
        env["PUSHRELAY_OPS_PORT"] = "\(opsPort)"
        // One reader of the fake Waku node: the shared ingest (its cache drains on each read).
        env["PUSHRELAY_STATUS_WAKU_URL"] = nil
        env.merge(extra) { _, new in new }
        let process = try Stack.launch(
            "\(binDirectory)/ingest", [], environment: env, log: "\(directory)/ingest-\(name).log")
        helpers.withLock { $0["ingest-\(name)"] = process }
        let ops = "http://127.0.0.1:\(opsPort)"
        let probe = ready ? "ready" : "live"
        try await Stack.waitFor("ingest \(name) to be \(probe)") {
            (try? await HTTP.get("\(ops)/health/\(probe)"))?.status == 200
        }
        return ("http://127.0.0.1:\(apiPort)", ops)
    }

    /// Waits until `service` answers ready; fails at once, quoting the logs, if it exits.
    public func waitReady(_ service: Service) async throws {
        let url = "\(opsURL(service))/health/ready"
        let process = processes.withLock { $0[service] }
        do {
            try await Stack.waitFor("\(service.rawValue) to be ready") {
                if let process, !process.isRunning { return true }
                // Briefly: a listener that never answers (not the service) must not hold the wait.
                return (try? await HTTP.get(url, timeout: .seconds(2)))?.status == 200
            }
        } catch let error as StackError {
            throw StackError("\(error.description)\n\(logDigest())")
        }
        if let process, !process.isRunning {
            throw StackError("\(service.rawValue) exited while starting\n\(logDigest())")
        }
    }

    /// Sends `signal` to a service and waits for it to exit.
    public func stop(_ service: Service, signal: Int32) async throws {
        guard let process = processes.withLock({ $0[service] }) else { return }
        kill(process.processIdentifier, signal)
        try await Stack.waitFor("\(service.rawValue) to exit", timeout: .seconds(30)) { !process.isRunning }
    }

    /// Redis with AOF persistence (`appendfsync everysec`) in the stack's directory.
    static func launchRedis(port: Int, directory: String) throws -> Process {
        guard let redisServer = which("redis-server") else { throw StackError("redis-server is not installed") }
        return try launch(
            redisServer,
            [
                "--port", "\(port)", "--bind", "127.0.0.1", "--save", "", "--appendonly", "yes",
                "--appendfsync", "everysec", "--dir", directory, "--daemonize", "no",
            ], environment: [:], log: "\(directory)/redis.log")
    }

    /// Stops Redis with `signal` and starts it again on the same port and data directory.
    public func restartRedis(signal: Int32 = SIGTERM, downFor: Duration = .seconds(1)) async throws {
        if let process = redis.withLock({ $0 }) {
            if signal == SIGTERM {
                // The graceful path operators use (fsyncs the AOF); a signal sent to a child
                // started from a test thread may arrive blocked.
                _ = Stack.redisCommand(port: redisPort, "SHUTDOWN")
            } else {
                kill(process.processIdentifier, signal)
            }
            do {
                try await Stack.waitFor("redis to exit", timeout: .seconds(10)) { !process.isRunning }
            } catch {
                kill(process.processIdentifier, SIGKILL)
                try await Stack.waitFor("redis to exit", timeout: .seconds(10)) { !process.isRunning }
            }
        }
        try await Task.sleep(for: downFor)
        let process = try Stack.launchRedis(port: redisPort, directory: directory)
        redis.withLock { $0 = process }
        helpers.withLock { $0["redis"] = process }
        try await Stack.waitFor("redis to answer") { Stack.redisAnswers(port: self.redisPort) }
    }

    static func redisAnswers(port: Int) -> Bool {
        redisCommand(port: port, "PING")?.hasPrefix("+PONG") ?? false
    }

    /// Sends one inline command and returns the first reply bytes (nil: no connection).
    static func redisCommand(port: Int, _ command: String) -> String? {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0
            }
        }
        guard connected else { return nil }
        let line = Array("\(command)\r\n".utf8)
        guard write(fd, line, line.count) == line.count else { return nil }
        var buffer = [UInt8](repeating: 0, count: 64)
        let n = read(fd, &buffer, buffer.count)
        return n > 0 ? String(decoding: buffer[..<n], as: UTF8.self) : ""
    }

    /// The exit status of a service that has stopped.
    public func exitStatus(_ service: Service) -> Int32? {
        processes.withLock { p in p[service].flatMap { $0.isRunning ? nil : $0.terminationStatus } }
    }

    public func isRunning(_ service: Service) -> Bool {
        processes.withLock { $0[service]?.isRunning ?? false }
    }

    public func log(_ service: Service) -> String {
        (try? String(contentsOfFile: "\(directory)/\(service.rawValue).log", encoding: .utf8)) ?? ""
    }

    // MARK: Fake providers

    public func received(_ provider: String) async throws -> [ReceivedPush] {
        let response = try await HTTP.send("GET", "\(controlURL)/\(provider)/received", body: nil, maxBytes: 1 << 30)
        return try JSONDecoder().decode([ReceivedPush].self, from: Data(response.body))
    }

    public func unregister(_ provider: String, token: String) async throws {
        _ = try await HTTP.send("POST", "\(controlURL)/\(provider)/unregistered", json: ["token": .string(token)])
    }

    public func inject(_ provider: String, status: Int, reason: String, retryAfter: Int?, count: Int) async throws {
        var body: [String: JSONValue] = [
            "status": .int(Int64(status)), "reason": .string(reason), "count": .int(Int64(count)),
        ]
        if let retryAfter { body["retry_after"] = .int(Int64(retryAfter)) }
        _ = try await HTTP.send("POST", "\(controlURL)/\(provider)/inject", json: .object(body))
    }

    /// A provider's bad window: every request answers `status` (with `Retry-After` when
    /// given) for `seconds` from now.
    public func brownout(_ provider: String, status: Int, reason: String, retryAfter: Int?, seconds: Int) async throws {
        var body: [String: JSONValue] = [
            "status": .int(Int64(status)), "reason": .string(reason), "count": 1, "seconds": .int(Int64(seconds)),
        ]
        if let retryAfter { body["retry_after"] = .int(Int64(retryAfter)) }
        _ = try await HTTP.send("POST", "\(controlURL)/\(provider)/inject", json: .object(body))
    }

    /// A slow provider: every answer waits `delay` for `seconds` from now.
    public func slow(_ provider: String, delay: Duration, seconds: Int) async throws {
        let body: JSONValue = [
            "status": 200, "reason": "", "count": 1, "seconds": .int(Int64(seconds)),
            "delay_ms": .int(RetrySchedule.milliseconds(delay)),
        ]
        _ = try await HTTP.send("POST", "\(controlURL)/\(provider)/inject", json: body)
    }

    /// Takes every dev-broker broker down (`up: false`) or back up: a broker outage.
    public func setBrokers(up: Bool) throws {
        guard let broker = helpers.withLock({ $0["devbroker"] }), broker.isRunning else {
            throw StackError("the dev broker is not running")
        }
        kill(broker.processIdentifier, up ? SIGUSR2 : SIGUSR1)
    }

    /// The resident memory of a service now (kB), from /proc.
    public func residentKB(_ service: Service) -> Int? {
        guard let process = processes.withLock({ $0[service] }),
            let status = try? String(contentsOfFile: "/proc/\(process.processIdentifier)/status", encoding: .utf8)
        else { return nil }
        for line in status.split(separator: "\n") where line.hasPrefix("VmRSS:") {
            return line.split(whereSeparator: { $0 == " " || $0 == "\t" }).dropFirst().first.flatMap { Int($0) }
        }
        return nil
    }

    /// What the stack's processes said that a failed wait should show (CI keeps only the
    /// test output, not the stack's directory): per log, its last lines above `info`,
    /// then its last lines, each cut to 300 characters.
    public func logDigest(warnings: Int = 6, lastLines: Int = 3) -> String {
        let logs = ((try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? [])
            .filter { $0.hasSuffix(".log") }.sorted()
        var digest: [String] = []
        for name in logs {
            // Bytes, not strict UTF-8: a line being written may end mid-character.
            guard let data = FileManager.default.contents(atPath: "\(directory)/\(name)") else { continue }
            let text = String(decoding: data, as: UTF8.self)
            let lines = text.split(separator: "\n")
            // swift-log's text lines: `<timestamp> <level> <label>: …`.
            let notable = lines.filter { line in
                let level = line.split(separator: " ", maxSplits: 2).dropFirst().first ?? ""
                return ["notice", "warning", "error", "critical"].contains(level)
            }
            digest.append("-- \(name): \(lines.count) lines, \(notable.count) above info")
            let last = lines.suffix(lastLines)
            let quoted = notable.suffix(warnings).filter { line in !last.contains { $0.startIndex == line.startIndex } }
            for line in quoted + last { digest.append("  \(line.prefix(300))") }
        }
        return digest.joined(separator: "\n")
    }

    /// Waits until `condition` holds for the pushes a fake received.
    public func waitForPushes(
        _ provider: String, timeout: Duration = .seconds(60), _ condition: ([ReceivedPush]) -> Bool
    ) async throws -> [ReceivedPush] {
        let deadline = ContinuousClock.now + timeout
        while true {
            let pushes = try await received(provider)
            if condition(pushes) { return pushes }
            if ContinuousClock.now > deadline {
                throw StackError("timed out waiting for \(provider) pushes; have \(pushes.count)\n\(logDigest())")
            }
            try await Task.sleep(for: .milliseconds(100))
        }
    }
}

/// A push as the fakes' control API reports it.
public typealias ReceivedPush = FakeProviders.ReceivedPush

/// A minimal JSON-over-HTTP client for the tests.
public enum HTTP {
    public struct Reply: Sendable {
        public var status: Int
        public var body: [UInt8]
        public var headers: [(String, String)]

        public init(status: Int, body: [UInt8], headers: [(String, String)]) {
            self.status = status
            self.body = body
            self.headers = headers
        }

        public var json: JSONValue { (try? JSONDecoder().decode(JSONValue.self, from: Data(body))) ?? .null }
        public var code: String? { json["code"]?.stringValue }
    }

    public static func get(_ url: String, auth: (String, String)? = nil, timeout: Duration = .seconds(30))
        async throws -> Reply
    {
        try await send("GET", url, body: nil, auth: auth, timeout: timeout)
    }

    public static func send(
        _ method: String, _ url: String, json: JSONValue, auth: (String, String)? = nil,
        headers: [(String, String)] = [], client: HTTPClient = .shared
    ) async throws -> Reply {
        try await send(
            method, url, body: Wire.canonical(json), contentType: "application/json", auth: auth, headers: headers,
            client: client)
    }

    public static func send(
        _ method: String, _ url: String, body: [UInt8]?, contentType: String = "application/json",
        auth: (String, String)? = nil, headers: [(String, String)] = [], maxBytes: Int = 16 << 20,
        client: HTTPClient = .shared, timeout: Duration = .seconds(30)
    ) async throws -> Reply {
        var request = HTTPClientRequest(url: url)
        request.method = .init(rawValue: method)
        for (name, value) in headers { request.headers.add(name: name, value: value) }
        if let body {
            request.body = .bytes(ByteBuffer(bytes: body))
            request.headers.add(name: "content-type", value: contentType)
        }
        if let (user, password) = auth {
            request.headers.add(
                name: "authorization", value: "Basic \(Data("\(user):\(password)".utf8).base64EncodedString())")
        }
        let response = try await client.execute(request, timeout: .init(timeout))
        let bytes = try await response.body.collect(upTo: maxBytes)
        return Reply(
            status: Int(response.status.code), body: Array(bytes.readableBytesView),
            headers: response.headers.map { ($0.name, $0.value) })
    }
}

extension Stack {
    /// Every record of `topic` as it stands now, read without joining a consumer group.
    public func records(_ topic: String) throws -> [KafkaRecord] {
        let reader = try KafkaTopicReader(
            configuration: KafkaConfiguration(bootstrapServers: kafkaBrokers, clientID: "pushrelay-tests"),
            logger: Logger(label: "pushrelay-tests"))
        var records: [KafkaRecord] = []
        try reader.read(TopicRange(topic: topic)) {
            records.append($0)
            return true
        }
        return records
    }

    /// Waits until `topic` holds records satisfying `condition` (re-reading the topic).
    public func waitForRecords(
        _ topic: String, timeout: Duration = .seconds(60), _ condition: ([KafkaRecord]) -> Bool
    ) async throws -> [KafkaRecord] {
        let deadline = ContinuousClock.now + timeout
        while true {
            let records = try self.records(topic)
            if condition(records) { return records }
            if ContinuousClock.now > deadline {
                throw StackError("timed out waiting for records on \(topic)\n\(logDigest())")
            }
            try await Task.sleep(for: .milliseconds(250))
        }
    }

    /// Runs one of the built tools (e.g. `pushrelay`) against this stack, with the stages'
    /// settings (brokers, Redis, key files) plus `extra`.
    public func runTool(_ name: String, _ arguments: [String], environment extra: [String: String] = [:])
        async throws -> (status: Int32, output: String, errors: String)
    {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "\(binDirectory)/\(name)")
        process.arguments = arguments
        var env = ProcessInfo.processInfo.environment
        env.merge(environment(for: .encryptor)) { _, new in new }
        env.merge(redisEnvironment) { _, new in new }
        env.merge(extra) { _, new in new }
        process.environment = env
        let out = Pipe()
        let err = Pipe()
        process.standardOutput = out
        process.standardError = err
        try process.run()
        // Read while it runs, so a large output never blocks it on a full pipe.
        async let output = Task.detached { out.fileHandleForReading.readDataToEndOfFile() }.value
        async let errors = Task.detached { err.fileHandleForReading.readDataToEndOfFile() }.value
        let (o, e) = await (output, errors)
        process.waitUntilExit()
        return (process.terminationStatus, String(decoding: o, as: UTF8.self), String(decoding: e, as: UTF8.self))
    }
}
