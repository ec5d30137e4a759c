import AsyncHTTPClient
import Foundation
@_spi(Dev) import Kafka
import Logging
import NIOCore
import PushCrypto
import PushModels
import Synchronization

/// An end-to-end load run against a stack: realms with users and devices (APNs and FCM
/// alternating), native notifies at a fixed rate or flat out over keep-alive
/// connections, phase by phase. For each phase it measures the accepted rate, the
/// delivered rate, latency from ingest acceptance to the provider's answer (from
/// `push.deliveries`: `completed_at_ms − accepted_at_ms`), consumer lag per stage,
/// and each process's peak RSS and CPU time.
public struct LoadRun: Sendable {
    public struct Phase: Sendable, Codable {
        public var name: String
        /// Notifications per second offered; 0 is flat out.
        public var rate: Int
        public var seconds: Int
        public init(name: String, rate: Int, seconds: Int) {
            self.name = name
            self.rate = rate
            self.seconds = seconds
        }
    }

    public struct Settings: Sendable {
        public var realms = 10
        public var users = 1000
        public var devicesPerUser = 2
        public var connections = 64
        public var phases = [
            Phase(name: "flat out", rate: 0, seconds: 60), Phase(name: "2000/s", rate: 2000, seconds: 60),
        ]
        /// After a phase, how long to wait for the backlog to drain.
        public var drainTimeout: Duration = .seconds(180)
        public init() {}
    }

    public struct Latency: Sendable, Codable {
        public var count = 0
        public var p50 = 0.0, p95 = 0.0, p99 = 0.0, max = 0.0, mean = 0.0

        init(_ values: [Int64]) {
            guard !values.isEmpty else { return }
            let sorted = values.sorted()
            func at(_ q: Double) -> Double {
                Double(sorted[Swift.min(sorted.count - 1, Int(Double(sorted.count) * q))])
            }
            count = sorted.count
            p50 = at(0.50)
            p95 = at(0.95)
            p99 = at(0.99)
            max = Double(sorted.last ?? 0)
            mean = Double(sorted.reduce(0, +)) / Double(sorted.count)
        }
    }

    public struct PhaseReport: Sendable, Codable {
        public var phase: Phase
        public var offered = 0
        public var accepted = 0
        public var rejected = 0
        public var acceptedPerSecond = 0.0
        /// Pushes (notification × device) expected from the accepted notifications.
        public var pushesExpected = 0
        /// Outcomes recorded on `push.deliveries` during the phase window, and in total.
        public var pushesDoneInWindow = 0
        public var pushesDone = 0
        public var outcomes: [String: Int] = [:]
        /// Notifications per second delivered end to end within the phase window.
        public var deliveredPerSecond = 0.0
        /// Time after the phase's end until every expected push had an outcome.
        public var drainSeconds = 0.0
        /// Acceptance → provider answer, ms, for pushes sent.
        public var latencyMs = Latency([])
        public var maxLag: [String: Int64] = [:]
        public var peakRSSMiB: [String: Double] = [:]
        public var cpuSeconds: [String: Double] = [:]
        /// Growth over the phase, per push with an outcome: Redis's `used_memory`, and the
        /// send ledger's keys as `MEMORY USAGE` counts them (nil when Redis did not answer).
        public var redisBytesPerPush: Double?
        public var ledgerBytesPerPush: Double?
    }

    let stack: Stack
    let settings: Settings
    let log: @Sendable (String) -> Void

    public init(stack: Stack, settings: Settings, log: @escaping @Sendable (String) -> Void = { print($0) }) {
        self.stack = stack
        self.settings = settings
        self.log = log
    }

    public func run() async throws -> [PhaseReport] {
        var pool = HTTPClient.Configuration()
        pool.connectionPool = .init(
            idleTimeout: .minutes(10), concurrentHTTP1ConnectionsPerHostSoftLimit: settings.connections)
        let client = HTTPClient(eventLoopGroupProvider: .singleton, configuration: pool)
        do {
            let reports = try await run(client: client)
            try? await client.shutdown()
            return reports
        } catch {
            try? await client.shutdown()
            throw error
        }
    }

    private func run(client: HTTPClient) async throws -> [PhaseReport] {
        var realms: [RealmClient] = []
        for _ in 0..<max(1, settings.realms) { realms.append(try await RealmClient.registered(stack, client: client)) }
        log("registering \(settings.users * settings.devicesPerUser) devices in \(realms.count) realms")
        let key = try RealmClient.pushKey()
        try await withThrowingTaskGroup(of: Void.self) { group in
            let next = Counter()
            for _ in 0..<16 {
                group.addTask { [realms, settings] in
                    while true {
                        let user = next.next() + 1
                        if user > settings.users { return }
                        let realm = realms[user % realms.count]
                        for n in 0..<settings.devicesPerUser {
                            let apns = n % 2 == 0
                            _ = try await realm.device(
                                userID: Int64(user), kind: apns ? "apns" : "fcm",
                                token: apns ? RealmClient.apnsToken() : RealmClient.fcmToken(), key: key)
                        }
                    }
                }
            }
            try await group.waitForAll()
        }

        var reports: [PhaseReport] = []
        for phase in settings.phases {
            log("phase \(phase.name): \(phase.rate == 0 ? "flat out" : "\(phase.rate)/s") for \(phase.seconds) s")
            reports.append(try await run(phase, realms: realms))
        }
        return reports
    }

    private func run(_ phase: Phase, realms: [RealmClient]) async throws -> PhaseReport {
        let realmIDs = Set(realms.map(\.realmUUID))
        let deliveries = try DeliveryFollower(brokers: stack.kafkaBrokers, realms: realmIDs)
        deliveries.start()
        defer { deliveries.stop() }
        let sampler = ResourceSampler(stack: stack)
        let redisBefore = RedisFootprint.read(port: stack.redisPort)
        let cpuBefore = sampler.cpuSeconds()
        let samplerTask = Task { await sampler.run() }

        let accepted = Counter()
        let rejected = Counter()
        let offered = Counter()
        let slots = Counter()
        let start = ContinuousClock.now
        let startMs = Wire.nowMillis()
        let end = start + .seconds(phase.seconds)
        let interval: Duration? = phase.rate > 0 ? .seconds(1) / phase.rate : nil
        let users = settings.users
        try await withThrowingTaskGroup(of: Void.self) { group in
            for _ in 0..<settings.connections {
                group.addTask {
                    while true {
                        let n = slots.next()
                        if let interval {
                            let due = start + interval * n
                            if due >= end { return }
                            if due > .now { try await Task.sleep(until: due) }
                        }
                        // A phase ends on time: what a saturated stack could not take in
                        // time is not offered (offered < rate × seconds shows it).
                        if ContinuousClock.now >= end { return }
                        let user = Int64.random(in: 1...Int64(users))
                        let realm = realms[Int(user) % realms.count]
                        let payload = realm.messagePayload(userID: user, messageID: Int64(n), content: "load \(n)")
                        let reply = try? await realm.notify(userID: user, payload: payload)
                        _ = offered.next()
                        if reply?.status == 202 { _ = accepted.next() } else { _ = rejected.next() }
                    }
                }
            }
            try await group.waitForAll()
        }
        let endMs = Wire.nowMillis()
        let elapsed = Double(endMs - startMs) / 1000
        var report = PhaseReport(phase: phase)
        report.accepted = accepted.value
        report.rejected = rejected.value
        report.offered = report.accepted + report.rejected
        report.acceptedPerSecond = Double(report.accepted) / elapsed
        report.pushesExpected = report.accepted * settings.devicesPerUser

        // Drain: until every expected push has an outcome, or no progress for 30 s.
        var lastCount = -1
        var lastProgress = ContinuousClock.now
        let drainStart = ContinuousClock.now
        while true {
            let done = deliveries.count
            if done >= report.pushesExpected { break }
            if done != lastCount {
                lastCount = done
                lastProgress = .now
            }
            if ContinuousClock.now - lastProgress > .seconds(30)
                || ContinuousClock.now - drainStart > settings.drainTimeout
            {
                log("drain stopped with \(report.pushesExpected - done) pushes without an outcome")
                break
            }
            try await Task.sleep(for: .milliseconds(200))
        }
        report.drainSeconds = Double(max(0, deliveries.lastCompletedMs - endMs)) / 1000
        samplerTask.cancel()
        _ = await samplerTask.value
        deliveries.stop()

        let snapshot = deliveries.snapshot()
        report.pushesDone = snapshot.latencies.count + snapshot.unsent
        report.pushesDoneInWindow = snapshot.completedAt.filter { $0 <= endMs }.count
        report.outcomes = snapshot.outcomes
        report.deliveredPerSecond = Double(report.pushesDoneInWindow) / Double(settings.devicesPerUser) / elapsed
        report.latencyMs = Latency(snapshot.latencies)
        report.maxLag = sampler.maxLag()
        report.peakRSSMiB = sampler.peakRSS().mapValues { Double($0) / 1024 }
        let cpuAfter = sampler.cpuSeconds()
        report.cpuSeconds = cpuAfter.reduce(into: [:]) { $0[$1.key] = $1.value - (cpuBefore[$1.key] ?? 0) }
        if let before = redisBefore, let after = RedisFootprint.read(port: stack.redisPort), report.pushesDone > 0 {
            report.redisBytesPerPush = Double(after.usedMemory - before.usedMemory) / Double(report.pushesDone)
            report.ledgerBytesPerPush = Double(after.ledgerBytes - before.ledgerBytes) / Double(report.pushesDone)
        }
        return report
    }

    /// A table of the phases, one column each.
    public static func table(_ reports: [PhaseReport]) -> String {
        var rows: [(String, [String])] = []
        func row(_ name: String, _ f: (PhaseReport) -> String) { rows.append((name, reports.map(f))) }
        func n(_ x: Double) -> String { String(format: x >= 100 ? "%.0f" : "%.1f", x) }
        row("phase") { $0.phase.name }
        row("offered rate") { $0.phase.rate == 0 ? "flat out" : "\($0.phase.rate)/s" }
        row("duration (s)") { "\($0.phase.seconds)" }
        row("accepted (202)") { "\($0.accepted)" }
        row("rejected / errors") { "\($0.rejected)" }
        row("accepted notifications/s") { n($0.acceptedPerSecond) }
        row("delivered notifications/s (in window)") { n($0.deliveredPerSecond) }
        row("pushes expected / with outcome") { "\($0.pushesExpected) / \($0.pushesDone)" }
        row("drain after the phase (s)") { n($0.drainSeconds) }
        row("latency p50 (ms)") { n($0.latencyMs.p50) }
        row("latency p95 (ms)") { n($0.latencyMs.p95) }
        row("latency p99 (ms)") { n($0.latencyMs.p99) }
        row("latency max (ms)") { n($0.latencyMs.max) }
        for stage in ["encryptor", "dispatcher", "feedback"] {
            row("max lag \(stage) (records)") { "\($0.maxLag[stage] ?? 0)" }
        }
        let processes = Set(reports.flatMap { $0.peakRSSMiB.keys }).sorted()
        for p in processes { row("peak RSS \(p) (MiB)") { n($0.peakRSSMiB[p] ?? 0) } }
        for p in processes { row("CPU \(p) (s)") { n($0.cpuSeconds[p] ?? 0) } }
        row("dev broker share of all CPU (%)") { r in
            let total = r.cpuSeconds.values.reduce(0, +)
            return total > 0 ? n(100 * (r.cpuSeconds["devbroker"] ?? 0) / total) : "-"
        }
        row("Redis used_memory growth per push (B)") { $0.redisBytesPerPush.map(n) ?? "-" }
        row("send ledger per push (B)") { $0.ledgerBytesPerPush.map(n) ?? "-" }
        let width = rows.map(\.0.count).max() ?? 0
        let columns = reports.indices.map { i in rows.map { $0.1[i].count }.max() ?? 0 }
        return rows.map { name, values in
            name.padding(toLength: width, withPad: " ", startingAt: 0) + "  "
                + zip(values, columns).map { v, w in String(repeating: " ", count: max(0, w - v.count)) + v }
                .joined(separator: "   ")
        }.joined(separator: "\n")
    }
}

/// Progress lines for the tools, unbuffered so they reach a log file as they happen.
@Sendable public func progress(_ line: String) {
    FileHandle.standardOutput.write(Data((line + "\n").utf8))
}

/// Writes a tool's report as pretty, sorted JSON, creating the directory.
public func writeReport(_ report: some Encodable, to path: String) throws {
    let encoder = JSONEncoder()
    encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
    let url = URL(fileURLWithPath: path)
    try FileManager.default.createDirectory(at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
    try encoder.encode(report).write(to: url)
}

/// A shared counter for worker tasks.
final class Counter: Sendable {
    private let atomic = Atomic<Int>(0)
    func next() -> Int { atomic.add(1, ordering: .relaxed).oldValue }
    var value: Int { atomic.load(ordering: .relaxed) }
}

/// Follows `push.deliveries` from its current end on a thread of its own, keeping the
/// outcomes of the given realms' pushes (the broker keeps only a few MiB per partition,
/// so the outcomes are read as they come rather than after the run).
final class DeliveryFollower: Sendable {
    struct Snapshot: Sendable {
        var latencies: [Int64] = []
        var completedAt: [Int64] = []
        var outcomes: [String: Int] = [:]
        var unsent = 0
        var lastCompletedMs: Int64 = 0
    }

    private let brokers: String
    private let realms: Set<String>
    private let state = Mutex(Snapshot())
    private let running = Atomic<Bool>(false)
    private let finished = DispatchSemaphore(value: 0)
    private let origin: [Int32: Int64]

    init(brokers: String, realms: Set<String>) throws {
        self.brokers = brokers
        self.realms = realms
        let reader = try KafkaTopicReader(
            configuration: KafkaConfiguration(bootstrapServers: brokers, clientID: "pushrelay-load"),
            logger: Logger(label: "pushrelay-load"))
        // Follow from where the topic ends now.
        origin = try reader.endOffsets(of: "push.deliveries")
    }

    var count: Int { state.withLock { $0.latencies.count + $0.unsent } }
    var lastCompletedMs: Int64 { state.withLock { $0.lastCompletedMs } }
    func snapshot() -> Snapshot { state.withLock { $0 } }

    func start() {
        running.store(true, ordering: .relaxed)
        let thread = Thread { [self] in
            defer { finished.signal() }
            guard
                let reader = try? KafkaTopicReader(
                    configuration: KafkaConfiguration(bootstrapServers: brokers, clientID: "pushrelay-load"),
                    logger: Logger(label: "pushrelay-load"))
            else { return }
            var positions = origin
            while running.load(ordering: .relaxed) {
                var batch: [DeliveryRecord] = []
                if let next = try? reader.read(
                    TopicRange(topic: "push.deliveries", startOffsets: positions),
                    each: { record in
                        if let d = try? Wire.decode(DeliveryRecord.self, from: record.value),
                            realms.contains(d.realmUUID.rawValue)
                        {
                            batch.append(d)
                        }
                        return true
                    })
                {
                    positions = next
                }
                if !batch.isEmpty {
                    state.withLock { s in
                        for d in batch {
                            s.outcomes[d.outcome.rawValue, default: 0] += 1
                            s.completedAt.append(d.completedAtMs)
                            s.lastCompletedMs = max(s.lastCompletedMs, d.completedAtMs)
                            if d.outcome == .sent {
                                s.latencies.append(d.completedAtMs - d.acceptedAtMs)
                            } else {
                                s.unsent += 1
                            }
                        }
                    }
                }
                Thread.sleep(forTimeInterval: 0.2)
            }
        }
        thread.name = "deliveries-follower"
        thread.start()
    }

    func stop() {
        if running.exchange(false, ordering: .relaxed) { finished.wait() }
    }
}

/// Samples each stack process's RSS (from /proc) and each stage's consumer lag once a second.
final class ResourceSampler: Sendable {
    private let stack: Stack
    private let rss = Mutex<[String: Int]>([:])  // KiB, peak
    private let lag = Mutex<[String: Int64]>([:])  // records, peak

    init(stack: Stack) {
        self.stack = stack
    }

    func run() async {
        let groups: [(stage: String, group: String, topic: String)] = [
            ("encryptor", "pushrelay-encryptor", "push.requests"),
            ("dispatcher", "pushrelay-dispatcher", "push.outbound"),
            ("feedback", "pushrelay-feedback", "push.feedback"),
        ]
        let configuration = KafkaConfiguration(bootstrapServers: stack.kafkaBrokers, clientID: "pushrelay-load")
        let probes = groups.compactMap { g in
            (try? KafkaGroupLag(configuration: configuration, group: g.group)).map { (g, $0) }
        }
        let reader = try? KafkaTopicReader(configuration: configuration, logger: Logger(label: "pushrelay-load"))
        var partitions: [String: [Int32]] = [:]
        for g in groups { partitions[g.topic] = (try? reader?.partitions(of: g.topic)) ?? [] }
        while !Task.isCancelled {
            for (name, pid) in stack.pids() {
                if let kib = Self.status(pid: pid, field: "VmRSS:") {
                    rss.withLock { $0[name] = max($0[name] ?? 0, kib) }
                }
            }
            for (g, probe) in probes {
                if let value = try? probe.lag(topic: g.topic, partitions: partitions[g.topic] ?? []) {
                    lag.withLock { $0[g.stage] = max($0[g.stage] ?? 0, value) }
                }
            }
            try? await Task.sleep(for: .seconds(1))
        }
    }

    func peakRSS() -> [String: Int] { rss.withLock { $0 } }
    func maxLag() -> [String: Int64] { lag.withLock { $0 } }

    /// User + system CPU seconds of each process so far.
    func cpuSeconds() -> [String: Double] {
        let ticks = Double(sysconf(Int32(_SC_CLK_TCK)))
        var result: [String: Double] = [:]
        for (name, pid) in stack.pids() {
            guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
                let close = stat.lastIndex(of: ")")
            else { continue }
            let fields = stat[stat.index(after: close)...].split(separator: " ")
            // After the command: state is field 0, utime field 11, stime field 12.
            if fields.count > 12, let user = Double(fields[11]), let system = Double(fields[12]) {
                result[name] = (user + system) / ticks
            }
        }
        return result
    }

    static func status(pid: Int32, field: String) -> Int? {
        guard let text = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8) else { return nil }
        for line in text.split(separator: "\n") where line.hasPrefix(field) {
            return Int(
                line.dropFirst(field.count).trimmingCharacters(in: .whitespaces).split(separator: " ").first ?? "")
        }
        return nil
    }
}
