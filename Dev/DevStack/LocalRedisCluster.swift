import Foundation
import Glibc
import Synchronization

/// A Redis Cluster on loopback for tests and the dev stack: `masters` redis-server
/// processes (Debian's, with `cluster-enabled yes`), each with `replicas` replicas,
/// joined with `redis-cli --cluster create`, which spreads the 16,384 slots evenly.
public final class LocalRedisCluster: Sendable {
    public let ports: [Int]
    public let directory: String
    /// TLS only (the cluster bus and replication too), and an ACL user: a managed cluster.
    public let tls: RedisTestTLS?
    public let acl: RedisTestACL?
    private let processes: Mutex<[Int: Process]>

    private init(ports: [Int], directory: String, processes: [Int: Process], tls: RedisTestTLS?, acl: RedisTestACL?) {
        self.ports = ports
        self.directory = directory
        self.processes = Mutex(processes)
        self.tls = tls
        self.acl = acl
    }

    /// `PUSHRELAY_REDIS_*` for services that use this cluster.
    public var environment: [String: String] {
        var env = [
            "PUSHRELAY_REDIS_CLUSTER": "true", "PUSHRELAY_REDIS_HOST": "127.0.0.1",
            "PUSHRELAY_REDIS_PORT": "\(ports[0])",
            "PUSHRELAY_REDIS_CLUSTER_SEEDS": ports.dropFirst().map { "127.0.0.1:\($0)" }.joined(separator: ","),
        ]
        if let tls { env.merge(tls.serviceEnvironment) { _, new in new } }
        if let acl { env.merge(acl.serviceEnvironment) { _, new in new } }
        return env
    }

    /// A node answers PING (over TLS, as the ACL user, when the cluster has them).
    func answers(port: Int) -> Bool {
        guard tls != nil || acl != nil else { return Stack.redisAnswers(port: port) }
        return RedisCLI.run(port: port, tls: tls, acl: acl, ["PING"])?.hasPrefix("PONG") ?? false
    }

    public static func start(
        masters: Int = 3, replicas: Int = 0, directory: String, tls: RedisTestTLS? = nil, acl: RedisTestACL? = nil
    ) async throws -> LocalRedisCluster {
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
            var security: [String] = []
            if let tls {
                security += tls.serverArguments(port: port) + ["--tls-cluster", "yes", "--tls-replication", "yes"]
            }
            if let acl {
                security += ["--aclfile", acl.aclFile]
                // A replica logs in to its master as the ACL user (the test's own Redis).
                if replicas > 0 { security += ["--masteruser", RedisTestACL.username, "--masterauth", acl.password] }
            }
            processes[port] = try Stack.launch(
                server,
                (tls == nil ? ["--port", "\(port)"] : []) + security + [
                    "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                    "--cluster-enabled", "yes", "--cluster-port", "\(busPort)",
                    "--cluster-config-file", "\(nodeDirectory)/nodes.conf",
                    "--cluster-node-timeout", "\(nodeTimeout)", "--dir", nodeDirectory, "--daemonize", "no",
                ], environment: [:], log: "\(nodeDirectory)/redis.log")
            ports.append(port)
        }
        let cluster = LocalRedisCluster(ports: ports, directory: directory, processes: processes, tls: tls, acl: acl)
        for port in ports {
            try await Stack.waitFor("redis on \(port)") { cluster.answers(port: port) }
        }
        let log = "\(directory)/cluster-create.log"
        let create = try Stack.launch(
            cli,
            Array(RedisCLI.connectionArguments(port: ports[0], tls: tls, acl: acl).dropFirst(4))
                + ["--cluster", "create"] + ports.map { "127.0.0.1:\($0)" } + [
                    "--cluster-replicas", "\(replicas)", "--cluster-yes",
                ],
            environment: acl.map { ["REDISCLI_AUTH": $0.password] } ?? [:], log: log)
        create.waitUntilExit()
        guard create.terminationStatus == 0 else {
            cluster.stop()
            throw StackError("redis-cli --cluster create failed; see \(log)")
        }
        // Every node must agree before the first command: the slots are all served.
        for port in ports {
            try await Stack.waitFor("cluster state ok on \(port)", timeout: .seconds(30)) {
                cluster.clusterCommand(port: port, "INFO")?.contains("cluster_state:ok") ?? false
            }
        }
        return cluster
    }

    /// The ports of the nodes that are masters now (`CLUSTER NODES`, asked of any live node).
    public func masterPorts() -> [Int] {
        for port in ports where processes.withLock({ $0[port]?.isRunning ?? false }) {
            guard let nodes = clusterCommand(port: port, "NODES") else { continue }
            return nodes.split(separator: "\n").compactMap { line -> Int? in
                let fields = line.split(separator: " ")
                guard fields.count > 2, fields[2].contains("master"), !fields[2].contains("fail") else { return nil }
                return fields[1].split(separator: ":").last.flatMap { Int($0.split(separator: "@").first ?? "") }
            }
        }
        return []
    }

    /// `CLUSTER <subcommand>` as one node answers it (redis-cli: the answer is longer than a line).
    func clusterCommand(port: Int, _ subcommand: String) -> String? {
        RedisCLI.run(port: port, tls: tls, acl: acl, ["CLUSTER", subcommand])
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
