import FakeProviders
import Foundation
import Kafka
import Logging
import PushCrypto
import PushModels
import Synchronization

/// A fault drill: pushes notifications through a running stack while killing and
/// restarting stages, then accounts for every accepted notification per device from
/// the provider fakes (what reached a "phone") and `push.deliveries` (what the relay says).
public struct ChaosRun: Sendable {
    public struct Settings: Sendable {
        public var notifications = 20_000
        public var users = 500
        /// Realms (each with its own server credentials) the users are spread over.
        public var realms = 1
        /// Devices per user, alternating APNs and FCM.
        public var devicesPerUser = 2
        /// Notifications per second offered (0: as fast as the workers go).
        public var rate = 400
        public var concurrency = 32
        /// Share of devices whose token the fake provider reports dead.
        public var deadTokenShare = 0.02
        /// Faults, each at a share of the notifications sent.
        public var faults: [Fault] = Fault.standard
        /// How long to wait after the load for outcomes to settle.
        public var settleTimeout: Duration = .seconds(300)
        /// Every this many notifications, one goes through gorush's API instead (iOS, no
        /// priority given, to the user's own gorush token); 0: none.
        public var gorushEvery = 0
        /// The load stops this long after the last fault ends (`notifications` is then
        /// only an upper bound); nil: it sends `notifications`.
        public var loadEndsAfterFaults: Duration?
        public init() {}
    }

    public enum Fault: Sendable, CustomStringConvertible {
        case kill(Stack.Service, at: Double)
        case restartRedis(at: Double)
        /// Anything else done to the stack (the rolling upgrade's roll), under its name.
        case step(String, at: Double, @Sendable (Stack) async throws -> Void)

        public static let standard: [Fault] = [
            .kill(.ingest, at: 0.15), .kill(.encryptor, at: 0.30), .kill(.dispatcher, at: 0.45),
            .kill(.feedback, at: 0.60), .restartRedis(at: 0.75),
        ]

        var at: Double {
            switch self {
            case .kill(_, let at), .restartRedis(let at), .step(_, let at, _): at
            }
        }

        public var description: String {
            switch self {
            case .kill(let service, _): "SIGKILL \(service.rawValue), restart"
            case .restartRedis: "restart Redis"
            case .step(let name, _, _): name
            }
        }
    }

    public struct AnswerTimes: Sendable, Codable {
        public var p50 = 0, p99 = 0, max = 0, count = 0

        init() {}
        init(_ ms: [Int]) {
            let sorted = ms.sorted()
            guard let last = sorted.last else { return }
            (p50, p99, max, count) = (sorted[sorted.count / 2], sorted[sorted.count * 99 / 100], last, sorted.count)
        }
    }

    public struct GorushCount: Sendable, Codable {
        public var offered = 0, accepted = 0, delivered = 0, duplicates = 0, lost = 0
        /// Of the duplicates, those the relay marked as re-sent after an interrupted send
        /// (counted by realm: a gorush push's notification id is not known to its sender,
        /// so marks outside the native realms are taken as the gorush pushes').
        public var markedDuplicates = 0
    }

    /// The accounting, per (notification, device) pair unless named otherwise.
    public struct Report: Sendable, Codable {
        public var notificationsOffered = 0
        /// Notifications ingest answered 202.
        public var notificationsAccepted = 0
        /// Refused or unanswered (ingest down, Redis down): the realm would retry these.
        public var notificationsNotAccepted = 0
        public var pairsExpected = 0
        public var delivered = 0
        public var invalid = 0
        public var failed = 0
        public var lost = 0
        /// Extra 200s at the providers for a pair already delivered.
        public var duplicates = 0
        /// Of those, re-sends of a send interrupted by a SIGKILL between the request and
        /// the provider's answer (the relay cannot know whether the provider had it; APNs
        /// collapses them on the phone by apns-collapse-id).
        public var duplicatesAfterInterruptedSend = 0
        /// Pairs the dispatcher re-sent because an earlier send was interrupted.
        public var interruptedSendsResent = 0
        /// Pairs that arrived more than once (a pair re-sent after two interruptions, a kill
        /// and a Redis restart say, arrives three times: two duplicates, one pair).
        public var duplicatedPairs = 0
        public var unexplainedDuplicates: Int { duplicates - duplicatesAfterInterruptedSend }
        /// Duplicates per provider (APNs ones carry one apns-collapse-id: the phone shows one).
        public var duplicatesByProvider: [String: Int] = [:]
        /// Delivered pairs with no sent/already_sent record on `push.deliveries`.
        public var deliveredUnrecorded = 0
        /// Pairs of notifications the client saw fail that reached a device anyway.
        public var deliveredUnacknowledged = 0
        public var faults: [String] = []
        public var loadSeconds = 0.0
        public var settleSeconds = 0.0
        public var lostSamples: [String] = []
        /// Some duplicated pairs with the times (ms) the provider saw each copy.
        public var duplicateSamples: [String] = []
        /// Ingest's answers by status ("none": no answer), notify and gorush alike.
        public var answers: [String: Int] = [:]
        public var serverErrors: Int { answers.filter { $0.key.hasPrefix("5") }.values.reduce(0, +) }
        /// Answer times (ms) of the requests sent while a fault was under way: p50, p99, max.
        public var answerMsDuringFaults = AnswerTimes()
        /// gorush pushes (`Settings.gorushEvery`): offered, accepted (200), arrived at the
        /// APNs fake, arrived more than once, and accepted but never arrived.
        public var gorush = GorushCount()
        /// `push.deliveries` records saying a stage could not read a record (any realm).
        public var malformedRecords = 0

        public var table: String {
            let rows: [(String, String)] = [
                ("notifications offered", "\(notificationsOffered)"),
                ("notifications accepted (202)", "\(notificationsAccepted)"),
                ("notifications not accepted", "\(notificationsNotAccepted)"),
                ("pairs expected (accepted × devices)", "\(pairsExpected)"),
                ("delivered", "\(delivered)"),
                ("invalid token", "\(invalid)"),
                ("failed / expired", "\(failed)"),
                ("lost", "\(lost)"),
                ("duplicates at providers", "\(duplicates)"),
                ("  of which re-sends after an interrupted send", "\(duplicatesAfterInterruptedSend)"),
                ("  unexplained", "\(unexplainedDuplicates)"),
                ("  at APNs / at FCM", "\(duplicatesByProvider["apns"] ?? 0) / \(duplicatesByProvider["fcm"] ?? 0)"),
                ("interrupted sends re-sent", "\(interruptedSendsResent)"),
                ("delivered, not on push.deliveries", "\(deliveredUnrecorded)"),
                ("delivered, not acknowledged to client", "\(deliveredUnacknowledged)"),
                (
                    "ingest's answers",
                    answers.sorted { $0.key < $1.key }.map { "\($0.key): \($0.value)" }.joined(separator: ", ")
                ),
                ("  5xx", "\(serverErrors)"),
                (
                    "answer ms during faults p50/p99/max (n)",
                    "\(answerMsDuringFaults.p50) / \(answerMsDuringFaults.p99) / \(answerMsDuringFaults.max) "
                        + "(\(answerMsDuringFaults.count))"
                ),
                (
                    "gorush offered/accepted/delivered/lost/duplicates (marked)",
                    "\(gorush.offered) / \(gorush.accepted) / \(gorush.delivered) / \(gorush.lost) / \(gorush.duplicates) "
                        + "(\(gorush.markedDuplicates))"
                ),
                ("records a stage could not read", "\(malformedRecords)"),
                ("load time (s)", String(format: "%.1f", loadSeconds)),
                ("settle time (s)", String(format: "%.1f", settleSeconds)),
            ]
            let width = rows.map(\.0.count).max() ?? 0
            var text = rows.map { $0.0.padding(toLength: width, withPad: " ", startingAt: 0) + "  " + $0.1 }
                .joined(separator: "\n")
            text += "\nfaults: " + faults.joined(separator: "; ")
            return text
        }
    }

    /// Shared by the load workers and the fault task.
    final class LoadState: Sendable {
        let accepted = Mutex<[Int64: Accepted]>([:])  // message id → user, notification id
        let refused = Mutex<[Int64: Int64]>([:])
        let sent = Atomic<Int>(0)
        let next = Atomic<Int>(0)
        let faultLog = Mutex<[String]>([])
        /// When each fault began and ended (ms since the epoch).
        let faultWindows = Mutex<[ClosedRange<Int64>]>([])
        /// Each request's start (ms since the epoch) and answer time (ms).
        let answerTimes = Mutex<[(startMs: Int64, ms: Int)]>([])
        let answers = Mutex<[String: Int]>([:])
        let gorushAccepted = Mutex<[Int64: Int64]>([:])  // message id → user
        let gorushOffered = Atomic<Int>(0)
        let faultsDone = Mutex<ContinuousClock.Instant?>(nil)

        func answered(_ status: Int?, startMs: Int64) {
            let ms = Int(Wire.nowMillis() - startMs)
            answerTimes.withLock { $0.append((startMs, ms)) }
            answers.withLock { $0[status.map { "\($0)" } ?? "none", default: 0] += 1 }
        }
    }

    struct Accepted: Sendable {
        var user: Int64
        var notificationID: String
    }

    struct Device: Sendable {
        var id: Int64
        var token: String
        var provider: String
        var key: PushKey
    }

    let stack: Stack
    let settings: Settings
    let log: @Sendable (String) -> Void

    public init(stack: Stack, settings: Settings, log: @escaping @Sendable (String) -> Void = { print($0) }) {
        self.stack = stack
        self.settings = settings
        self.log = log
    }

    public func run() async throws -> Report {
        var realms: [RealmClient] = []
        for _ in 0..<max(1, settings.realms) { realms.append(try await RealmClient.registered(stack)) }
        let realmOf: @Sendable (Int64) -> RealmClient = { [realms] user in realms[Int(user) % realms.count] }
        log("registering \(settings.users * settings.devicesPerUser) devices")
        var devices: [Int64: [Device]] = [:]
        for user in 1...Int64(settings.users) {
            for n in 0..<settings.devicesPerUser {
                let apns = n % 2 == 0
                let token = apns ? RealmClient.apnsToken() : RealmClient.fcmToken()
                let key = try RealmClient.pushKey()
                let id = try await realmOf(user).device(
                    userID: user, kind: apns ? "apns" : "fcm", token: token, key: key)
                devices[user, default: []].append(
                    Device(id: id, token: token, provider: apns ? "apns" : "fcm", key: key))
            }
        }
        var gorushTokens: [Int64: String] = [:]
        if settings.gorushEvery > 0 {
            for user in 1...Int64(settings.users) { gorushTokens[user] = RealmClient.apnsToken() }
        }
        let all = devices.values.flatMap { $0 }
        let deadCount = Int(Double(all.count) * settings.deadTokenShare)
        for device in all.shuffled().prefix(deadCount) {
            try await stack.unregister(device.provider, token: device.token)
        }

        // The load, with faults injected as the sent count passes each mark.
        let state = LoadState()
        let loadStart = ContinuousClock.now
        let interval: Duration? = settings.rate > 0 ? .seconds(1) / settings.rate : nil
        try await withThrowingTaskGroup(of: Void.self) { [gorushTokens] group in
            group.addTask {
                for fault in settings.faults.sorted(by: { $0.at < $1.at }) {
                    let mark = Int(Double(settings.notifications) * fault.at)
                    while state.sent.load(ordering: .relaxed) < mark { try await Task.sleep(for: .milliseconds(20)) }
                    log("fault at \(mark): \(fault)")
                    let started = ContinuousClock.now
                    let startedMs = Wire.nowMillis()
                    switch fault {
                    case .kill(let service, _):
                        try await stack.stop(service, signal: SIGKILL)
                        try stack.start(service)
                        try await stack.waitReady(service)
                    case .restartRedis:
                        try await stack.restartRedis()
                    case .step(_, _, let body):
                        try await body(stack)
                    }
                    state.faultWindows.withLock { $0.append(startedMs...Wire.nowMillis()) }
                    let seconds = Double((ContinuousClock.now - started).components.seconds)
                    state.faultLog.withLock {
                        $0.append("\(fault) at #\(mark) (t=\(startedMs)), back in ~\(Int(seconds)) s")
                    }
                }
                state.faultsDone.withLock { $0 = .now }
            }
            for _ in 0..<settings.concurrency {
                group.addTask {
                    while true {
                        let n = state.next.add(1, ordering: .relaxed).oldValue
                        if n >= settings.notifications { return }
                        if let tail = settings.loadEndsAfterFaults, let done = state.faultsDone.withLock({ $0 }),
                            .now > done + tail
                        {
                            return
                        }
                        if let interval {
                            let due = loadStart + interval * n
                            if due > .now { try await Task.sleep(until: due) }
                        }
                        let messageID = Int64(1_000_000 + n)
                        let user = Int64(n % settings.users) + 1
                        let realm = realmOf(user)
                        let startMs = Wire.nowMillis()
                        if settings.gorushEvery > 0, n % settings.gorushEvery == settings.gorushEvery - 1,
                            let token = gorushTokens[user]
                        {
                            state.gorushOffered.add(1, ordering: .relaxed)
                            let push: JSONValue = [
                                "notifications": [
                                    [
                                        "tokens": [.string(token)], "platform": 1,
                                        "message": .string("gorush-\(messageID)"),
                                    ]
                                ]
                            ]
                            let reply = try? await HTTP.send(
                                "POST", "\(stack.ingestURL)/api/push", json: push, auth: realm.auth,
                                client: realm.client)
                            state.answered(reply?.status, startMs: startMs)
                            if reply?.status == 200 { state.gorushAccepted.withLock { $0[messageID] = user } }
                            state.sent.add(1, ordering: .relaxed)
                            continue
                        }
                        let payload = realm.messagePayload(userID: user, messageID: messageID, content: "chaos \(n)")
                        let reply = try? await realm.notify(userID: user, payload: payload)
                        state.answered(reply?.status, startMs: startMs)
                        if let reply, reply.status == 202, let id = reply.json["notification_id"]?.stringValue {
                            state.accepted.withLock { $0[messageID] = Accepted(user: user, notificationID: id) }
                        } else {
                            state.refused.withLock { $0[messageID] = user }
                        }
                        state.sent.add(1, ordering: .relaxed)
                    }
                }
            }
            try await group.waitForAll()
        }
        let loadSeconds = seconds(ContinuousClock.now - loadStart)
        let acceptedNow = state.accepted.withLock { $0 }
        let gorush = Gorush(
            tokens: gorushTokens, accepted: state.gorushAccepted.withLock { $0 },
            offered: state.gorushOffered.load(ordering: .relaxed))
        log("load done in \(String(format: "%.1f", loadSeconds)) s: \(acceptedNow.count) accepted; settling")

        // Settle: until every expected pair has an outcome, or no progress for a while.
        let settleStart = ContinuousClock.now
        var report = Report()
        var lastProgress = ContinuousClock.now
        var lastResolved = -1
        while true {
            report = try await account(
                realms: Set(realms.map(\.realmUUID)), devices: devices, accepted: acceptedNow,
                refused: state.refused.withLock { $0 }, gorush: gorush)
            let resolved = report.pairsExpected - report.lost - report.gorush.lost
            if report.lost == 0 && report.gorush.lost == 0 { break }
            if resolved != lastResolved {
                lastResolved = resolved
                lastProgress = .now
            }
            if ContinuousClock.now - lastProgress > .seconds(60)
                || ContinuousClock.now - settleStart > settings.settleTimeout
            {
                break
            }
            log("settling: \(report.lost) pairs without an outcome yet")
            try await Task.sleep(for: .seconds(2))
        }
        // Let late duplicates (if any) show up before the final count.
        try await Task.sleep(for: .seconds(3))
        report = try await account(
            realms: Set(realms.map(\.realmUUID)), devices: devices, accepted: acceptedNow,
            refused: state.refused.withLock { $0 }, gorush: gorush)
        report.notificationsOffered = state.sent.load(ordering: .relaxed) - report.gorush.offered
        report.faults = state.faultLog.withLock { $0 }
        report.loadSeconds = loadSeconds
        report.answers = state.answers.withLock { $0 }
        let windows = state.faultWindows.withLock { $0 }
        report.answerMsDuringFaults = AnswerTimes(
            state.answerTimes.withLock { $0 }.filter { time in windows.contains { $0.contains(time.startMs) } }.map(
                \.ms))
        report.settleSeconds = seconds(ContinuousClock.now - settleStart)
        return report
    }

    /// The gorush pushes of a run: each user's token, those accepted (message id → user).
    struct Gorush {
        var tokens: [Int64: String]
        var accepted: [Int64: Int64]
        var offered: Int
    }

    private func account(
        realms: Set<String>, devices: [Int64: [Device]], accepted: [Int64: Accepted], refused: [Int64: Int64],
        gorush: Gorush
    ) async throws -> Report {
        var byToken: [String: Device] = [:]
        for device in devices.values.flatMap({ $0 }) { byToken[device.token] = device }

        // What reached the "phones": 200s at the fakes, decrypted to find the message id.
        var received: [String: Int] = [:]  // "message:device" → 200 count
        var seenAt: [String: [Int64]] = [:]
        let gorushTokens = Set(gorush.tokens.values)
        var gorushReceived: [Int64: Int] = [:]  // message id → 200 count
        var gorushSeen: [Int64: [String]] = [:]
        for provider in ["apns", "fcm"] {
            for push in try await stack.received(provider) where push.status == 200 {
                if gorushTokens.contains(push.token) {
                    if let id = Self.gorushMessageID(push.body) {
                        gorushReceived[id, default: 0] += 1
                        gorushSeen[id, default: []].append(
                            "\(push.receivedAtMs) \(push.token.prefix(8)) \(push.headers.sorted { $0.key < $1.key })")
                    }
                    continue
                }
                guard let device = byToken[push.token], let plaintext = try? push.decrypt(with: device.key),
                    let json = try? JSONDecoder().decode(JSONValue.self, from: Data(plaintext)),
                    let messageID = json["message_id"]?.intValue
                else { continue }
                received["\(messageID):\(device.id)", default: 0] += 1
                seenAt["\(messageID):\(device.id)", default: []].append(push.receivedAtMs)
            }
        }
        // What the relay recorded.
        var outcomes: [String: Set<DeliveryOutcome>] = [:]  // "notification id:device" → outcomes
        var resent: Set<String> = []
        var malformed = 0
        var resentOutside = 0
        let reader = try KafkaTopicReader(
            configuration: KafkaConfiguration(bootstrapServers: stack.kafkaBrokers, clientID: "chaos"),
            logger: Logger(label: "chaos"))
        try reader.read(TopicRange(topic: "push.deliveries")) { record in
            guard let delivery = try? Wire.decode(DeliveryRecord.self, from: record.value) else { return true }
            if delivery.reason == .stage(.malformedRecord) || delivery.reason == .stage(.malformedRequest) {
                malformed += 1
            }
            if realms.contains(delivery.realmUUID.rawValue), let device = delivery.deviceID {
                outcomes["\(delivery.notificationID):\(device)", default: []].insert(delivery.outcome)
                if delivery.reason == .stage(.resentAfterInterruptedSend) {
                    resent.insert("\(delivery.notificationID):\(device)")
                }
            } else if delivery.reason == .stage(.resentAfterInterruptedSend) {
                resentOutside += 1
            }
            return true
        }
        var report = Report()
        report.notificationsAccepted = accepted.count
        report.notificationsNotAccepted = refused.count
        report.interruptedSendsResent = resent.count
        report.malformedRecords = malformed
        report.gorush.offered = gorush.offered
        report.gorush.accepted = gorush.accepted.count
        for messageID in gorush.accepted.keys {
            let copies = gorushReceived[messageID] ?? 0
            if copies == 0 { report.gorush.lost += 1 } else { report.gorush.delivered += 1 }
            report.gorush.duplicates += max(0, copies - 1)
            if copies > 1 && report.duplicateSamples.count < 10 {
                report.duplicateSamples.append("gorush-\(messageID): \(gorushSeen[messageID] ?? [])")
            }
        }
        report.gorush.markedDuplicates = min(report.gorush.duplicates, resentOutside)
        for (messageID, notification) in accepted {
            for device in devices[notification.user] ?? [] {
                report.pairsExpected += 1
                let pair = "\(messageID):\(device.id)"
                let count = received[pair] ?? 0
                let recorded = outcomes["\(notification.notificationID):\(device.id)"] ?? []
                if count > 0 {
                    report.delivered += 1
                    report.duplicates += count - 1
                    if count > 1 {
                        report.duplicatesByProvider[device.provider, default: 0] += count - 1
                        report.duplicatedPairs += 1
                    }
                    if resent.contains("\(notification.notificationID):\(device.id)") {
                        report.duplicatesAfterInterruptedSend += count - 1
                    }
                    if count > 1 && report.duplicateSamples.count < 10 {
                        report.duplicateSamples.append("\(pair) at \(seenAt[pair] ?? [])")
                    }
                    if recorded.isDisjoint(with: [.sent, .alreadySent]) { report.deliveredUnrecorded += 1 }
                } else if recorded.contains(.invalidToken) {
                    report.invalid += 1
                } else if !recorded.isDisjoint(with: [.failed, .expired, .unknownDevice]) {
                    report.failed += 1
                } else {
                    report.lost += 1
                    if report.lostSamples.count < 10 { report.lostSamples.append(pair) }
                }
            }
        }
        for (messageID, user) in refused {
            for device in devices[user] ?? [] where (received["\(messageID):\(device.id)"] ?? 0) > 0 {
                report.deliveredUnacknowledged += 1
            }
        }
        return report
    }

    /// The message id in a gorush push's APNs body: its alert reads "gorush-<id>".
    static func gorushMessageID(_ body: JSONValue) -> Int64? {
        let alert = body["aps"]?["alert"]
        guard let text = alert?.stringValue ?? alert?["body"]?.stringValue, text.hasPrefix("gorush-") else {
            return nil
        }
        return Int64(text.dropFirst("gorush-".count))
    }

    private func seconds(_ d: Duration) -> Double {
        Double(d.components.seconds) + Double(d.components.attoseconds) / 1e18
    }
}
