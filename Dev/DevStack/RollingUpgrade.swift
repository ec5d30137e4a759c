import Foundation
import Synchronization

/// The rolling-upgrade drill: a stack whose four stages run one build's binaries (the
/// previous release's), several instances each, under load; then each stage's instances
/// are replaced one by one by another build's (HEAD's), the way the deployment rolls
/// (deploy/base: `maxSurge: 25%`, `maxUnavailable: 0`, a preStop pause): a new instance
/// starts and becomes ready, the old one leaves ingest's rotation, pauses, gets SIGTERM
/// and drains. The load (ChaosRun: native notifies to an APNs and an FCM device per user,
/// and gorush pushes without a priority) is accounted for per device at the fakes and on
/// `push.deliveries`.
public struct RollingUpgrade: Sendable {
    /// Which stages are replaced first.
    public enum Order: String, Sendable, CaseIterable {
        /// ingest, encryptor, dispatcher, feedback: new writers while old readers read their records.
        case producersFirst = "producers first"
        /// feedback, dispatcher, encryptor, ingest: new readers of old writers' records.
        case consumersFirst = "consumers first"

        public var stages: [Stack.Service] {
            switch self {
            case .producersFirst: [.ingest, .encryptor, .dispatcher, .feedback]
            case .consumersFirst: [.feedback, .dispatcher, .encryptor, .ingest]
            }
        }
    }

    public struct Settings: Sendable {
        /// The binaries the stack starts on, and those it is upgraded to.
        public var from: String
        public var to: String
        public var order: Order
        /// Instances of each stage.
        public var instances = 2
        /// Notifications offered per second, before, during and after the roll.
        public var rate = 200
        /// Load before the roll begins, and after it ends.
        public var lead: Duration = .seconds(5)
        public var tail: Duration = .seconds(5)
        /// Between leaving the rotation and SIGTERM (the deployment's preStop sleep).
        public var preStop: Duration = .seconds(1)
        /// What to call the two builds (a tag, a commit) beside the version they report.
        public var fromName: String?
        public var toName: String?

        public init(from: String, to: String, order: Order) {
            self.from = from
            self.to = to
            self.order = order
        }
    }

    public struct Report: Sendable, CustomStringConvertible {
        public var from: String
        public var to: String
        public var order: Order
        public var instances: Int
        public var rate: Int
        public var load: ChaosRun.Report
        /// "undecodable record skipped" lines in every instance's log.
        public var recordsRefusedInLogs: Int
        /// Instances that did not exit 0 after SIGTERM, with their status.
        public var uncleanExits: [String]
        public var rollSeconds: Double

        /// Accepted (notification, device) pairs and gorush pushes with no outcome.
        public var lost: Int { load.lost + load.gorush.lost }
        /// Copies at the providers not marked as a re-send after an interrupted send.
        public var unmarkedDuplicates: Int {
            load.unexplainedDuplicates + load.gorush.duplicates - load.gorush.markedDuplicates
        }
        /// Each refused record is logged and, when it names its push, also published as a
        /// `malformed_*` outcome: the larger count, not their sum.
        public var recordsRefused: Int { max(recordsRefusedInLogs, load.malformedRecords) }
        /// Pairs that ended failed, expired or with an unknown device: with no dead token and
        /// no injected error, each one is a reader's or a writer's fault.
        public var failed: Int { load.failed }
        public var serverErrors: Int { load.serverErrors }
        public var unanswered: Int { load.answers["none"] ?? 0 }
        public var p99DuringRollMs: Int { load.answerMsDuringFaults.p99 }

        public var description: String {
            "rolling upgrade \(from) → \(to), \(order.rawValue), \(instances) instances a stage at \(rate)/s: "
                + "lost \(lost), failed \(failed), unmarked duplicates \(unmarkedDuplicates), records refused by a reader "
                + "\(recordsRefused), 5xx at ingest \(serverErrors) (unanswered \(unanswered)), p99 during the roll "
                + "\(p99DuringRollMs) ms (p50 \(load.answerMsDuringFaults.p50), max \(load.answerMsDuringFaults.max), "
                + "\(load.answerMsDuringFaults.count) requests); roll \(Int(rollSeconds)) s; "
                + "\(load.notificationsAccepted) notifications and \(load.gorush.accepted) gorush pushes accepted, "
                + "\(load.delivered) pairs delivered, \(load.duplicates) duplicates "
                + "(\(load.duplicatesAfterInterruptedSend) marked), \(load.gorush.duplicates) gorush duplicates "
                + "(\(load.gorush.markedDuplicates) marked); unclean exits: "
                + (uncleanExits.isEmpty ? "none" : uncleanExits.joined(separator: ", "))
        }
    }

    public let settings: Settings
    let log: @Sendable (String) -> Void

    public init(settings: Settings, log: @escaping @Sendable (String) -> Void = { print($0) }) {
        self.settings = settings
        self.log = log
    }

    /// `<name> <version> (<revision>)` of a build's ingest, as `--version` prints it.
    public static func version(of binDirectory: String) -> String {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "\(binDirectory)/ingest")
        process.arguments = ["--version"]
        let pipe = Pipe()
        process.standardOutput = pipe
        guard (try? process.run()) != nil else { return "?" }
        process.waitUntilExit()
        let output = String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        return output.trimmingCharacters(in: .whitespacesAndNewlines).replacingOccurrences(of: "ingest ", with: "")
    }

    public func run() async throws -> Report {
        var options = Stack.Options.tests
        // One load over a few servers: no per-server limit in the way.
        options.environment["PUSHRELAY_RATELIMIT_REQUESTS"] = "1000000"
        options.serviceBinDirectory = settings.from
        options.name = "upgrade-\(settings.order == .producersFirst ? "producers" : "consumers")"
        let stack = try await Stack.start(options: options)
        let fleet = Fleet(stack: stack)
        defer {
            fleet.stopEverything()
            stack.stopEverything()
        }
        for service in Stack.Service.allCases {
            for index in 1..<max(1, settings.instances) {
                try await fleet.launch(service, from: settings.from, name: "\(service.rawValue)-old\(index)")
            }
        }
        log("\(settings.instances) instances a stage on \(Self.version(of: settings.from))")

        let roll = Mutex<(seconds: Double, exits: [String])>((0, []))
        var load = ChaosRun.Settings()
        load.users = 100
        load.realms = 4
        load.rate = settings.rate
        load.concurrency = 32
        load.deadTokenShare = 0
        load.gorushEvery = 10
        load.settleTimeout = .seconds(240)
        // An upper bound: the load ends `tail` after the roll does.
        load.notifications = settings.rate * 900
        load.loadEndsAfterFaults = settings.tail
        let leadShare = Double(settings.rate) * seconds(settings.lead) / Double(load.notifications)
        load.faults = [
            .step("roll \(settings.order.rawValue)", at: leadShare) { [settings, log] _ in
                let started = ContinuousClock.now
                let exits = try await fleet.roll(settings, log: log)
                roll.withLock { $0 = (seconds(ContinuousClock.now - started), exits) }
            }
        ]
        let report = try await ChaosRun(stack: stack, settings: load, log: log).run()
        var refusedInLogs = 0
        for file in (try? FileManager.default.contentsOfDirectory(atPath: stack.directory)) ?? []
        where file.hasSuffix(".log") {
            let text = (try? String(contentsOfFile: "\(stack.directory)/\(file)", encoding: .utf8)) ?? ""
            refusedInLogs += text.components(separatedBy: "undecodable record skipped").count - 1
        }
        let (rollSeconds, exits) = roll.withLock { $0 }
        return Report(
            from: Self.version(of: settings.from) + (settings.fromName.map { " [\($0)]" } ?? ""),
            to: Self.version(of: settings.to) + (settings.toName.map { " [\($0)]" } ?? ""), order: settings.order,
            instances: settings.instances, rate: settings.rate, load: report, recordsRefusedInLogs: refusedInLogs,
            uncleanExits: exits, rollSeconds: rollSeconds)
    }
}

/// The instances of each stage of a stack, started from any build's binaries.
final class Fleet: Sendable {
    struct Instance: Sendable {
        var name: String
        var service: Stack.Service
        var ops: String
        /// Ingest's API.
        var api: String?
    }

    let stack: Stack
    let instances = Mutex<[Instance]>([])
    let processes = Mutex<[String: Process]>([:])

    /// Takes in the stack's own instance of each stage.
    init(stack: Stack) {
        self.stack = stack
        for service in Stack.Service.allCases {
            guard let process = stack.processes.withLock({ $0[service] }) else { continue }
            let name = "\(service.rawValue)-old0"
            let api = service == .ingest ? "http://127.0.0.1:\(stack.ports[.ingest] ?? 0)" : nil
            instances.withLock {
                $0.append(Instance(name: name, service: service, ops: stack.opsURL(service), api: api))
            }
            processes.withLock { $0[name] = process }
        }
        updateRotation()
    }

    /// Ingest's requests go to every ingest instance, in turn.
    func updateRotation() {
        let urls = instances.withLock { $0.compactMap(\.api) }
        stack.ingestRotation.withLock { $0 = (urls, 0) }
    }

    /// Starts an instance of `service` from `binDirectory` on new ports and waits until it is
    /// ready (a port taken by another process meanwhile: new ports, twice at most).
    func launch(_ service: Stack.Service, from binDirectory: String, name: String) async throws {
        for attempt in 1...3 {
            let port = try Stack.freePort()
            var environment = stack.environment(for: service)
            environment["PUSHRELAY_HTTP_PORT"] = "\(port)"
            var instance = Instance(name: name, service: service, ops: "http://127.0.0.1:\(port)", api: nil)
            if service == .ingest {
                let opsPort = try Stack.freePort()
                environment["PUSHRELAY_OPS_PORT"] = "\(opsPort)"
                instance.ops = "http://127.0.0.1:\(opsPort)"
                instance.api = "http://127.0.0.1:\(port)"
            }
            let logFile = "\(stack.directory)/\(name).log"
            let process = try Stack.launch(
                "\(binDirectory)/\(service.rawValue)", [], environment: environment, log: logFile)
            let ready = "\(instance.ops)/health/ready"
            try await Stack.waitFor("\(name) to be ready") {
                if !process.isRunning { return true }
                return (try? await HTTP.get(ready, timeout: .seconds(2)))?.status == 200
            }
            if process.isRunning {
                processes.withLock { $0[name] = process }
                instances.withLock { $0.append(instance) }
                updateRotation()
                return
            }
            let text = (try? String(contentsOfFile: logFile, encoding: .utf8)) ?? ""
            guard attempt < 3, text.contains("Address already in use") else {
                throw StackError("\(name) exited while starting:\n\(text.suffix(2000))")
            }
        }
    }

    /// Ends every instance at once (the drill is over).
    func stopEverything() {
        for process in processes.withLock({ $0.values }) where process.isRunning {
            kill(process.processIdentifier, SIGKILL)
        }
    }

    /// Leaves ingest's rotation, pauses `preStop`, SIGTERM, waits for the exit; its status.
    func retire(_ instance: Instance, preStop: Duration) async throws -> Int32 {
        instances.withLock { $0.removeAll { $0.name == instance.name } }
        updateRotation()
        try await Task.sleep(for: preStop)
        guard let process = processes.withLock({ $0.removeValue(forKey: instance.name) }) else { return 0 }
        kill(process.processIdentifier, SIGTERM)
        try await Stack.waitFor("\(instance.name) to exit", timeout: .seconds(90)) { !process.isRunning }
        return process.terminationStatus
    }

    /// Replaces every instance of each stage, in the order's turn, by one started from
    /// `settings.to`: the new one ready before the old one retires. Instances that did not
    /// exit 0, with their status.
    func roll(_ settings: RollingUpgrade.Settings, log: @Sendable (String) -> Void) async throws -> [String] {
        var unclean: [String] = []
        for service in settings.order.stages {
            let old = instances.withLock { $0.filter { $0.service == service } }
            for (index, instance) in old.enumerated() {
                try await launch(service, from: settings.to, name: "\(service.rawValue)-new\(index)")
                let status = try await retire(instance, preStop: settings.preStop)
                if status != 0 { unclean.append("\(instance.name) exited \(status)") }
                log("\(instance.name) replaced by \(service.rawValue)-new\(index) (exit \(status))")
            }
        }
        return unclean
    }
}

extension Stack {
    /// Ends every process of the stack at once (a drill's own stack, when it is done).
    public func stopEverything() {
        let all =
            Array(processes.withLock { $0.values }) + Array(helpers.withLock { $0.values })
            + [redis.withLock { $0 }].compactMap { $0 }
        for process in all where process.isRunning { kill(process.processIdentifier, SIGKILL) }
        redisCluster?.stop()
    }
}

private func seconds(_ duration: Duration) -> Double {
    Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
}
