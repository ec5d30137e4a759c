import DevStack
import FakeProviders
import Foundation
import Kafka
import PushCrypto
import PushModels
import RedisClient
import Synchronization
import Testing

/// Fault drills (issue 29, short form; `make drills` runs them at full length): a
/// provider's brownout, a slow provider, a broker outage. Each prints its figures —
/// accepted, lost, duplicates (marked or not), answers during the fault, recovery — and
/// checks that nothing accepted is lost and no duplicate goes unmarked.
extension StackTests {
    @Suite struct DrillTests {
        /// `PUSHRELAY_DRILL_SCALE` stretches every fault window (`make drills`: the issue's
        /// lengths); 1 in `make test`.
        static let scale = max(1, ProcessInfo.processInfo.environment["PUSHRELAY_DRILL_SCALE"].flatMap { Int($0) } ?? 1)

        /// One user's phone with an APNs and an FCM device, both under one push key.
        struct Phone {
            let realm: RealmClient
            let key: PushKey
            let userID: Int64
            let apns: String
            let fcm: String
            let apnsDevice: Int64
            let fcmDevice: Int64

            /// `moreAPNs`: more APNs devices of the user (each notification goes to all of
            /// them), so a slow provider has many requests waiting at once.
            static func make(_ stack: Stack, userID: Int64, moreAPNs: Int = 0) async throws -> Phone {
                let realm = try await RealmClient.registered(stack)
                let key = try RealmClient.pushKey()
                let (apns, fcm) = (RealmClient.apnsToken(), RealmClient.fcmToken())
                let apnsDevice = try await realm.device(userID: userID, kind: "apns", token: apns, key: key)
                let fcmDevice = try await realm.device(userID: userID, kind: "fcm", token: fcm, key: key)
                for _ in 0..<moreAPNs {
                    _ = try await realm.device(userID: userID, kind: "apns", token: RealmClient.apnsToken(), key: key)
                }
                // Warm: one notification through to both phones before the fault, so a stack
                // that just started (groups joining, connections opening) is not measured.
                let warm = try await realm.notify(
                    userID: userID, payload: realm.messagePayload(userID: userID, messageID: 1))
                #expect(warm.status == 202)
                _ = try await stack.waitForPushes("fcm") { $0.contains { $0.token == fcm } }
                _ = try await stack.waitForPushes("apns") { $0.contains { $0.token == apns } }
                return Phone(
                    realm: realm, key: key, userID: userID, apns: apns, fcm: fcm, apnsDevice: apnsDevice,
                    fcmDevice: fcmDevice)
            }
        }

        /// What one drill came to, printed and checked.
        struct Figures: CustomStringConvertible {
            var name: String
            var accepted = 0
            var refused = 0
            var slowestAnswerMs = 0
            var lost = 0
            var duplicates = 0
            var markedDuplicates = 0
            var deadLettered = 0
            var recoveryMs: Int?
            var extra: [String] = []

            var description: String {
                "drill \(name): accepted \(accepted), refused \(refused) (slowest answer \(slowestAnswerMs) ms), "
                    + "lost \(lost), duplicates \(duplicates) (marked \(markedDuplicates), unmarked "
                    + "\(duplicates - markedDuplicates)), dead-lettered \(deadLettered)"
                    + (recoveryMs.map { ", recovered in \($0) ms" } ?? "")
                    + extra.map { ", \($0)" }.joined()
            }
        }

        /// Every delivery outcome of `device` on `push.deliveries`, by notification id.
        static func outcomes(_ stack: Stack, device: Int64) throws -> [String: [DeliveryRecord]] {
            var found: [String: [DeliveryRecord]] = [:]
            for record in try stack.records("push.deliveries") {
                guard let delivery = try? Wire.decode(DeliveryRecord.self, from: record.value),
                    delivery.deviceID?.rawValue == device
                else { continue }
                found[delivery.notificationID.rawValue, default: []].append(delivery)
            }
            return found
        }

        /// Sends notification `messageID` to the phone; its answer, its id and how long it took.
        static func notify(_ phone: Phone, messageID: Int64) async throws -> (status: Int, id: String?, ms: Int) {
            let start = ContinuousClock.now
            let reply = try await phone.realm.notify(
                userID: phone.userID, payload: phone.realm.messagePayload(userID: phone.userID, messageID: messageID))
            let elapsed = ContinuousClock.now - start
            return (
                reply.status, reply.json["notification_id"]?.stringValue,
                Int(elapsed.components.seconds * 1000 + elapsed.components.attoseconds / 1_000_000_000_000_000)
            )
        }

        /// Waits for every accepted notification at the phone's FCM device; the slowest
        /// one's time from sending to the fake (ms).
        static func slowestFCM(
            _ stack: Stack, _ phone: Phone, accepted: [String: Int64], sentAt: [Int64: Int64]
        ) async throws -> Int64 {
            let fcm = try await stack.waitForPushes("fcm") { pushes in
                Set(pushes.filter { $0.token == phone.fcm }.compactMap { $0.messageID(with: phone.key) })
                    .isSuperset(of: Set(accepted.values))
            }.filter { $0.token == phone.fcm && $0.status == 200 }
            var slowest: Int64 = 0
            for push in fcm {
                if let id = push.messageID(with: phone.key), let sent = sentAt[id] {
                    slowest = max(slowest, push.receivedAtMs - sent)
                }
            }
            return slowest
        }

        /// `account` for the phone's FCM and APNs devices.
        static func accountBoth(
            _ stack: Stack, _ phone: Phone, accepted: [String: Int64], figures: inout Figures
        ) async throws {
            try await account(
                stack, phone, provider: "fcm", token: phone.fcm, device: phone.fcmDevice, accepted: accepted,
                figures: &figures)
            try await account(
                stack, phone, provider: "apns", token: phone.apns, device: phone.apnsDevice, accepted: accepted,
                figures: &figures)
        }

        /// Waits until every accepted notification has an outcome for `device`, then counts
        /// what was lost (no `sent` and no dead letter), duplicates and their marks, by the
        /// pushes the fake received (decrypted message ids).
        static func account(
            _ stack: Stack, _ phone: Phone, provider: String, token: String, device: Int64,
            accepted: [String: Int64], figures: inout Figures
        ) async throws {
            let deadline = ContinuousClock.now + .seconds(180)
            var byNotification: [String: [DeliveryRecord]] = [:]
            while ContinuousClock.now < deadline {
                byNotification = try outcomes(stack, device: device)
                if accepted.keys.allSatisfy({ byNotification[$0] != nil }) { break }
                try await Task.sleep(for: .milliseconds(500))
            }
            let pushes = try await stack.received(provider).filter { $0.token == token && $0.status == 200 }
            var receivedCount: [Int64: Int] = [:]
            for push in pushes { if let id = push.messageID(with: phone.key) { receivedCount[id, default: 0] += 1 } }
            for (notification, messageID) in accepted {
                let records = byNotification[notification] ?? []
                let sent = records.contains { $0.outcome == .sent || $0.outcome == .alreadySent }
                let dead = records.contains { $0.outcome == .failed || $0.outcome == .expired }
                if dead && !sent { figures.deadLettered += 1 }
                if !sent && !dead { figures.lost += 1 }
                if sent && (receivedCount[messageID] ?? 0) == 0 { figures.lost += 1 }
                let copies = receivedCount[messageID] ?? 0
                if copies > 1 {
                    figures.duplicates += copies - 1
                    let marked = records.filter { $0.reason?.name == StageReason.resentAfterInterruptedSend.rawValue }
                    figures.markedDuplicates += min(copies - 1, marked.count)
                }
            }
        }

        /// APNs answers 503 for a while (with `Retry-After`, then without) while FCM is
        /// healthy: FCM pushes keep their latency; APNs pushes are retried and end sent or
        /// dead-lettered by the schedule; none is lost.
        @Test func providerBrownout() async throws {
            let stack = try await Stack.get()
            let phone = try await Phone.make(stack, userID: 2901)
            let window = 3 * Self.scale
            try await stack.brownout("apns", status: 503, reason: "ServiceUnavailable", retryAfter: 1, seconds: window)
            try await stack.brownout(
                "apns", status: 503, reason: "ServiceUnavailable", retryAfter: nil, seconds: 2 * window)
            var figures = Figures(name: "provider brownout (\(2 * window) s)")
            var accepted: [String: Int64] = [:]
            var sentAt: [Int64: Int64] = [:]
            for index in 0..<(10 * Self.scale) {
                let messageID = Int64(290_000 + index)
                sentAt[messageID] = Wire.nowMillis()
                let answer = try await Self.notify(phone, messageID: messageID)
                figures.slowestAnswerMs = max(figures.slowestAnswerMs, answer.ms)
                if answer.status == 202, let id = answer.id { accepted[id] = messageID } else { figures.refused += 1 }
                try await Task.sleep(for: .milliseconds(200))
            }
            figures.accepted = accepted.count
            // FCM's latency, measured at the fake, while APNs is failing.
            let slowestFCM = try await Self.slowestFCM(stack, phone, accepted: accepted, sentAt: sentAt)
            figures.extra.append("FCM's slowest push \(slowestFCM) ms")
            try await Self.account(
                stack, phone, provider: "apns", token: phone.apns, device: phone.apnsDevice, accepted: accepted,
                figures: &figures)
            print(figures)
            #expect(figures.refused == 0 && figures.lost == 0, "\(figures)")
            #expect(figures.duplicates == figures.markedDuplicates, "\(figures)")
            #expect(slowestFCM < 3000, "FCM kept its latency: \(figures)")
        }

        /// APNs answers after 5 s for a while: the dispatcher's concurrency and memory stay
        /// bounded, FCM is unaffected, and every APNs push is delivered.
        @Test func slowProvider() async throws {
            let stack = try await Stack.get()
            let phone = try await Phone.make(stack, userID: 2902, moreAPNs: 9)
            let before = stack.residentKB(.dispatcher) ?? 0
            try await stack.slow("apns", delay: .seconds(5), seconds: 6 * Self.scale)
            var figures = Figures(name: "slow provider (5 s answers for \(6 * Self.scale) s)")
            var accepted: [String: Int64] = [:]
            var sentAt: [Int64: Int64] = [:]
            for index in 0..<(20 * Self.scale) {
                let messageID = Int64(291_000 + index)
                sentAt[messageID] = Wire.nowMillis()
                let answer = try await Self.notify(phone, messageID: messageID)
                figures.slowestAnswerMs = max(figures.slowestAnswerMs, answer.ms)
                if answer.status == 202, let id = answer.id { accepted[id] = messageID } else { figures.refused += 1 }
                try await Task.sleep(for: .milliseconds(100))
            }
            figures.accepted = accepted.count
            let slowestFCM = try await Self.slowestFCM(stack, phone, accepted: accepted, sentAt: sentAt)
            let during = stack.residentKB(.dispatcher) ?? 0
            try await Self.account(
                stack, phone, provider: "apns", token: phone.apns, device: phone.apnsDevice, accepted: accepted,
                figures: &figures)
            figures.extra.append("FCM's slowest push \(slowestFCM) ms")
            figures.extra.append("dispatcher RSS \(before / 1024) → \(during / 1024) MiB")
            print(figures)
            #expect(figures.refused == 0 && figures.lost == 0, "\(figures)")
            #expect(figures.duplicates == figures.markedDuplicates, "\(figures)")
            #expect(slowestFCM < 3000, "FCM unaffected: \(figures)")
            #expect(during < before + 64 * 1024, "the dispatcher's memory stays bounded: \(figures)")
        }

        /// Every broker of the dev broker goes down under load and comes back: ingest
        /// answers 503 within its bound meanwhile, nothing accepted is lost, and the stages
        /// resume by themselves.
        @Test func brokerOutage() async throws {
            let stack = try await Stack.get()
            let phone = try await Phone.make(stack, userID: 2903)
            var figures = Figures(name: "broker outage (\(5 * Self.scale) s)")
            var accepted: [String: Int64] = [:]
            var messageID: Int64 = 292_000
            func send(for duration: Duration) async throws {
                let end = ContinuousClock.now + duration
                while ContinuousClock.now < end {
                    messageID += 1
                    let answer = try await Self.notify(phone, messageID: messageID)
                    figures.slowestAnswerMs = max(figures.slowestAnswerMs, answer.ms)
                    if answer.status == 202, let id = answer.id {
                        accepted[id] = messageID
                    } else {
                        #expect(answer.status == 503, "refused as unavailable, not failed: \(answer.status)")
                        figures.refused += 1
                    }
                    try await Task.sleep(for: .milliseconds(100))
                }
            }
            try await send(for: .seconds(2))
            try stack.setBrokers(up: false)
            do {
                try await send(for: .seconds(5 * Self.scale))
            } catch {
                try stack.setBrokers(up: true)
                throw error
            }
            try stack.setBrokers(up: true)
            let upAt = Wire.nowMillis()
            let lastBefore = messageID
            try await send(for: .seconds(3))
            figures.accepted = accepted.count
            // Recovery: the first notification sent after the brokers came back, delivered.
            let firstAfter = accepted.values.filter { $0 > lastBefore }.min()
            if let firstAfter {
                let pushes = try await stack.waitForPushes("fcm", timeout: .seconds(180)) { pushes in
                    pushes.contains { $0.token == phone.fcm && $0.messageID(with: phone.key) == firstAfter }
                }
                if let arrival = pushes.first(where: {
                    $0.token == phone.fcm && $0.messageID(with: phone.key) == firstAfter
                }) {
                    figures.recoveryMs = Int(arrival.receivedAtMs - upAt)
                }
            }
            try await Self.account(
                stack, phone, provider: "fcm", token: phone.fcm, device: phone.fcmDevice, accepted: accepted,
                figures: &figures)
            print(figures)
            #expect(firstAfter != nil, "notifications were accepted after the brokers came back: \(figures)")
            #expect(figures.recoveryMs.map { $0 < 60_000 } == true, "the stages resumed by themselves: \(figures)")
            #expect(figures.lost == 0, "\(figures)")
            #expect(figures.duplicates == figures.markedDuplicates, "\(figures)")
            #expect(figures.refused > 0, "the outage was felt at ingest: \(figures)")
            #expect(figures.slowestAnswerMs < 8000, "ingest answers within its bound (5 s): \(figures)")
        }

        /// A Redis Cluster master (three masters, one replica each) killed under load: its
        /// replica takes over, the relay follows the new map without a restart, and
        /// nothing accepted is lost.
        @Test func redisClusterFailover() async throws {
            var options = Stack.Options.tests
            options.redisClusterMasters = 3
            options.redisClusterReplicas = 1
            options.name = "failover"
            let stack = try await Stack.start(options: options)
            let cluster = try #require(stack.redisCluster)
            let phone = try await Phone.make(stack, userID: 2904)
            var figures = Figures(name: "Redis Cluster failover")
            var accepted: [String: Int64] = [:]
            var messageID: Int64 = 293_000
            func send(for duration: Duration) async throws {
                let end = ContinuousClock.now + duration
                while ContinuousClock.now < end {
                    messageID += 1
                    let answer = try await Self.notify(phone, messageID: messageID)
                    figures.slowestAnswerMs = max(figures.slowestAnswerMs, answer.ms)
                    if answer.status == 202, let id = answer.id {
                        accepted[id] = messageID
                    } else {
                        figures.refused += 1
                    }
                    try await Task.sleep(for: .milliseconds(100))
                }
            }
            try await send(for: .seconds(2))
            let masters = cluster.masterPorts()
            let victim = try #require(masters.first, "the cluster's masters: \(masters)")
            let killedAt = Wire.nowMillis()
            cluster.kill(port: victim)
            var promotedMs: Int?
            let end = ContinuousClock.now + .seconds(10 * Self.scale)
            while ContinuousClock.now < end {
                try await send(for: .seconds(1))
                let now = cluster.masterPorts()
                if promotedMs == nil, now.count == masters.count, !now.contains(victim) {
                    promotedMs = Int(Wire.nowMillis() - killedAt)
                }
            }
            figures.accepted = accepted.count
            figures.extra.append("replica promoted after \(promotedMs.map { "\($0) ms" } ?? "no promotion seen")")
            try await Self.accountBoth(stack, phone, accepted: accepted, figures: &figures)
            print(figures)
            #expect(promotedMs != nil, "the replica took over: \(figures)")
            #expect(figures.lost == 0, "\(figures)")
            #expect(figures.duplicates == figures.markedDuplicates, "\(figures)")
        }

        /// The pipeline and storage keys rotated under load, as docs/security.md says:
        /// first the new key as a later line everywhere (every service restarted), then
        /// first (restarted again). Nothing accepted is lost or fails, devices stored under
        /// the old key still work, and a device registered after it is stored under the new.
        @Test func keyRotationUnderLoad() async throws {
            let stack = try await Stack.get()
            let phone = try await Phone.make(stack, userID: 2905)
            final class Load: Sendable {
                let state = Mutex<(accepted: [String: Int64], refused: Int, slowest: Int)>(([:], 0, 0))
            }
            let load = Load()
            let sender = Task {
                var messageID: Int64 = 294_000
                while !Task.isCancelled {
                    messageID += 1
                    do {
                        let answer = try await Self.notify(phone, messageID: messageID)
                        load.state.withLock { state in
                            state.slowest = max(state.slowest, answer.ms)
                            if answer.status == 202, let id = answer.id {
                                state.accepted[id] = messageID
                            } else {
                                state.refused += 1
                            }
                        }
                    } catch {
                        // Ingest restarting: the realm sees a connection error and retries.
                        load.state.withLock { $0.refused += 1 }
                    }
                    try? await Task.sleep(for: .milliseconds(100))
                }
            }
            defer { sender.cancel() }
            func restartAll() async throws {
                for service in [Stack.Service.encryptor, .dispatcher, .feedback, .ingest] {
                    try await stack.stop(service, signal: SIGTERM)
                    try stack.start(service)
                    try await stack.waitReady(service)
                }
            }
            let tag = UUID().uuidString.prefix(6).lowercased()
            let files = ["\(stack.directory)/pipeline-keys", "\(stack.directory)/storage-keys"]
            let old = try files.map { try String(contentsOfFile: $0, encoding: .utf8) }
            let new = [PipelineKeyring.generateLine(id: "p\(tag)"), StorageKeyring.generateLine(id: "s\(tag)")]
            func write(_ lines: [[String]]) throws {
                for (file, content) in zip(files, lines) {
                    try content.map { $0.trimmingCharacters(in: .whitespacesAndNewlines) }.joined(separator: "\n")
                        .appending("\n").write(toFile: file, atomically: true, encoding: .utf8)
                }
            }
            try await Task.sleep(for: .seconds(1))
            try write([[old[0], new[0]], [old[1], new[1]]])  // rollout 1: readable everywhere
            try await restartAll()
            try write([[new[0], old[0]], [new[1], old[1]]])  // rollout 2: the new keys seal
            try await restartAll()
            // The APNs provider key: the team's second key, a rolling restart of the dispatcher.
            var second: [String: String] = [:]
            for line in try String(contentsOfFile: "\(stack.directory)/fakes/apns-second.env", encoding: .utf8)
                .split(separator: "\n")
            {
                let parts = line.split(separator: "=", maxSplits: 1)
                if parts.count == 2 { second[String(parts[0])] = String(parts[1]) }
            }
            #expect(second["PUSHRELAY_APNS_KEY_ID"]?.isEmpty == false)
            stack.overrideDispatcher(second)
            try await stack.stop(.dispatcher, signal: SIGTERM)
            try stack.start(.dispatcher)
            try await stack.waitReady(.dispatcher)
            let rotatedAt = Wire.nowMillis()
            try await Task.sleep(for: .seconds(1))
            sender.cancel()
            _ = await sender.value
            // A device registered now is stored under the new storage key, and reached.
            let token = RealmClient.fcmToken()
            let device = try await phone.realm.device(userID: 2906, kind: "fcm", token: token, key: phone.key)
            let redis = RedisClient(configuration: RedisConfiguration(port: stack.redisPort, connections: 1))
            let stored = try await redis.command("HGET", RedisArgument("pr:dev:\(device)"), "token").string ?? ""
            #expect(stored.contains(":s\(tag):"), "stored under the new key: \(stored.prefix(40))")
            let reply = try await phone.realm.notify(
                userID: 2906, payload: phone.realm.messagePayload(userID: 2906, messageID: 1))
            #expect(reply.status == 202)
            _ = try await stack.waitForPushes("fcm") { $0.contains { $0.token == token && $0.status == 200 } }

            var figures = Figures(name: "key rotation (pipeline and storage keys, two rollouts; APNs provider key)")
            let (accepted, refused, slowest) = load.state.withLock { ($0.accepted, $0.refused, $0.slowest) }
            figures.accepted = accepted.count
            figures.refused = refused
            figures.slowestAnswerMs = slowest
            try await Self.accountBoth(stack, phone, accepted: accepted, figures: &figures)
            // APNs pushes after the restart are signed with the second key.
            let signed = try await stack.received("apns").filter {
                $0.token == phone.apns && $0.receivedAtMs > rotatedAt
            }
            #expect(
                !signed.isEmpty
                    && signed.allSatisfy { $0.headers["provider-token-kid"] == second["PUSHRELAY_APNS_KEY_ID"] })
            print(figures)
            #expect(figures.lost == 0 && figures.deadLettered == 0, "\(figures)")
            #expect(figures.duplicates == figures.markedDuplicates, "\(figures)")
        }
    }
}
