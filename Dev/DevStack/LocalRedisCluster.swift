import Foundation
import Glibc
import Synchronization

/// A Redis Cluster on loopback for tests and the dev stack: `masters` redis-server
/// processes (Debian's, with `cluster-enabled yes`), each with `replicas` replicas,
/// joined with `redis-cli --cluster create`, which spreads the 16,384 slots evenly.
public final class LocalRedisCluster: Sendable {
    public let ports: [Int]
    public let directory: String
    private let processes: Mutex<[Int: Process]>

    private init(ports: [Int], directory: String, processes: [Int: Process]) {
        self.ports = ports
        self.directory = directory
        self.processes = Mutex(processes)
    }

    /// `PUSHRELAY_REDIS_*` for services that use this cluster.
    public var environment: [String: String] {
        [
            "PUSHRELAY_REDIS_CLUSTER": "true", "PUSHRELAY_REDIS_HOST": "127.0.0.1",
            "PUSHRELAY_REDIS_PORT": "\(ports[0])",
            "PUSHRELAY_REDIS_CLUSTER_SEEDS": ports.dropFirst().map { "127.0.0.1:\($0)" }.joined(separator: ","),
        ]
    }

    public static func start(masters: Int = 3, replicas: Int = 0, directory: String) async throws
        -> LocalRedisCluster
    {
        guard let server = Stack.which("redis-server") else { throw StackError("redis-server is not installed") }
        guard let cli = Stack.which("redis-cli") else { throw StackError("redis-cli is not installed") }
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        var processes: [Int: Process] = [:]
        var ports: [Int] = []
        let replicas = max(0, min(replicas, 2))
        // With replicas, a failed master is replaced within a few seconds.
        let nodeTimeout = replicas > 0 ? 2000 : 5000
        for _ in 0..<(max(3, masters) * (1 + replicas)) {
            // The cluster bus listens on a port of its own (by default the port + 10,000,
            // which an ephemeral port may push past 65,535).
            let port = try Stack.freePort()
            let busPort = try Stack.freePort()
            let nodeDirectory = "\(directory)/\(port)"
            try FileManager.default.createDirectory(atPath: nodeDirectory, withIntermediateDirectories: true)
            processes[port] = try Stack.launch(
                server,
                [
                    "--port", "\(port)", "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                    "--cluster-enabled", "yes", "--cluster-port", "\(busPort)",
                    "--cluster-config-file", "\(nodeDirectory)/nodes.conf",
                    "--cluster-node-timeout", "\(nodeTimeout)", "--dir", nodeDirectory, "--daemonize", "no",
                ], environment: [:], log: "\(nodeDirectory)/redis.log")
            ports.append(port)
        }
        let cluster = LocalRedisCluster(ports: ports, directory: directory, processes: processes)
        for port in ports {
            try await Stack.waitFor("redis on \(port)") { Stack.redisAnswers(port: port) }
        }
        let log = "\(directory)/cluster-create.log"
        let create = try Stack.launch(
            cli,
            ["--cluster", "create"] + ports.map { "127.0.0.1:\($0)" } + [
                "--cluster-replicas", "\(replicas)", "--cluster-yes",
            ],
            environment: [:], log: log)
        create.waitUntilExit()
        guard create.terminationStatus == 0 else {
            cluster.stop()
            throw StackError("redis-cli --cluster create failed; see \(log)")
        }
        // Every node must agree before the first command: the slots are all served.
        for port in ports {
            try await Stack.waitFor("cluster state ok on \(port)", timeout: .seconds(30)) {
                Stack.redisCommand(port: port, "CLUSTER INFO")?.contains("cluster_state:ok") ?? false
            }
        }
        return cluster
    }

    /// The ports of the nodes that are masters now (`CLUSTER NODES`, asked of any live node).
    public func masterPorts() -> [Int] {
        for port in ports where processes.withLock({ $0[port]?.isRunning ?? false }) {
            guard let nodes = Self.clusterNodes(port: port) else { continue }
            return nodes.split(separator: "\n").compactMap { line -> Int? in
                let fields = line.split(separator: " ")
                guard fields.count > 2, fields[2].contains("master"), !fields[2].contains("fail") else { return nil }
                return fields[1].split(separator: ":").last.flatMap { Int($0.split(separator: "@").first ?? "") }
            }
        }
        return []
    }

    /// `CLUSTER NODES` as one node answers it (redis-cli: the answer is longer than a line).
    static func clusterNodes(port: Int) -> String? {
        guard let cli = Stack.which("redis-cli") else { return nil }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: cli)
        process.arguments = ["-p", "\(port)", "CLUSTER", "NODES"]
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = FileHandle.nullDevice
        guard (try? process.run()) != nil else { return nil }
        let data = pipe.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else { return nil }
        return String(decoding: data, as: UTF8.self)
    }

    /// Kills one node (SIGKILL): a master lost without warning.
    public func kill(port: Int) {
        guard let process = processes.withLock({ $0[port] }), process.isRunning else { return }
        Glibc.kill(process.processIdentifier, SIGKILL)
    }

    /// Stops every node (SIGKILL: a signal sent to a child started from a test thread
    /// may arrive blocked, and these nodes keep nothing).
    public func stop() {
        for process in processes.withLock({ Array($0.values) }) where process.isRunning {
            Glibc.kill(process.processIdentifier, SIGKILL)
        }
    }
}
