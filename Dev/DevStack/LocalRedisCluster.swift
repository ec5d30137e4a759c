import Foundation
import Synchronization

/// A Redis Cluster on loopback for tests and the dev stack: `masters` redis-server
/// processes (Debian's, with `cluster-enabled yes`, no replicas), joined with
/// `redis-cli --cluster create`, which spreads the 16,384 slots evenly.
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

    public static func start(masters: Int = 3, directory: String) async throws -> LocalRedisCluster {
        guard let server = Stack.which("redis-server") else { throw StackError("redis-server is not installed") }
        guard let cli = Stack.which("redis-cli") else { throw StackError("redis-cli is not installed") }
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        var processes: [Int: Process] = [:]
        var ports: [Int] = []
        for _ in 0..<max(3, masters) {
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
                    "--cluster-node-timeout", "5000", "--dir", nodeDirectory, "--daemonize", "no",
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
            ["--cluster", "create"] + ports.map { "127.0.0.1:\($0)" } + ["--cluster-replicas", "0", "--cluster-yes"],
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

    /// Stops every node (SIGKILL: a signal sent to a child started from a test thread
    /// may arrive blocked, and these nodes keep nothing).
    public func stop() {
        for process in processes.withLock({ Array($0.values) }) where process.isRunning {
            kill(process.processIdentifier, SIGKILL)
        }
    }
}
