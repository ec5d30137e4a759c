import DevStack
import FakeProviders
import Foundation
import Kafka
import Logging
import PushCrypto
import PushModels
import Testing

extension KafkaRecord {
    var json: JSONValue { (try? Wire.decode(JSONValue.self, from: value)) ?? .null }
    var notificationID: String? {
        header(RecordHeader.notificationID).map { String(decoding: $0, as: UTF8.self) }
    }
}

/// Retries through retry topics, dead letters, dedupe, Redis persistence and the replay
/// tool, with the real services (test stack: retry delays 1 s, 2 s, 3 s; 4 attempts).
extension StackTests {
    @Suite struct GuaranteeTests {
        @Test func retriesWaitOnRetryTopicsWithoutHoldingAnyoneElse() async throws {
            let stack = try await Stack.get()
            let realm = try await RealmClient.registered(stack)
            let key = try RealmClient.pushKey()
            let slowToken = RealmClient.apnsToken()
            let otherAPNs = RealmClient.apnsToken()
            let fcmToken = RealmClient.fcmToken()
            _ = try await realm.device(userID: 81, kind: "apns", token: slowToken, key: key)
            _ = try await realm.device(userID: 82, kind: "apns", token: otherAPNs, key: key)
            _ = try await realm.device(userID: 83, kind: "fcm", token: fcmToken, key: key)

            // APNs throttles the first two pushes and asks for 2 s.
            try await stack.inject("apns", status: 429, reason: "TooManyRequests", retryAfter: 2, count: 2)
            var slowIDs: [String] = []
            for id in [1, 2] as [Int64] {
                let reply = try await realm.notify(userID: 81, payload: realm.messagePayload(userID: 81, messageID: id))
                slowIDs.append(try #require(reply.json["notification_id"]?.stringValue))
            }
            _ = try await stack.waitForPushes("apns") {
                $0.filter { $0.token == slowToken && $0.status == 429 }.count == 2
            }
            // Behind them: another APNs device of the same topic, and an FCM device.
            _ = try await realm.notify(userID: 82, payload: realm.messagePayload(userID: 82, messageID: 3))
            _ = try await realm.notify(userID: 83, payload: realm.messagePayload(userID: 83, messageID: 4))

            let apns = try await stack.waitForPushes("apns") {
                $0.filter { $0.token == slowToken && $0.status == 200 }.count == 2
            }
            let fcm = try await stack.received("fcm").filter { $0.token == fcmToken && $0.status == 200 }
            let other = apns.filter { $0.token == otherAPNs && $0.status == 200 }
            let firstRetried = try #require(
                apns.filter { $0.token == slowToken && $0.status == 200 }.map(\.receivedAtMs).min())
            let firstRefused = try #require(
                apns.filter { $0.token == slowToken && $0.status == 429 }.map(\.receivedAtMs).min())
            #expect(fcm.count == 1 && other.count == 1)
            #expect(try #require(fcm.first?.receivedAtMs) < firstRetried, "FCM never waits for APNs retries")
            #expect(try #require(other.first?.receivedAtMs) < firstRetried, "the main stream never waits for a retry")
            #expect(firstRetried - firstRefused >= 2000, "Retry-After is a floor")

            // The waits happened on a retry topic (the 2 s stage: 1 s cannot honour Retry-After 2),
            // and the outcome counts both attempts.
            #expect(try stack.records("push.retry.1").filter { slowIDs.contains($0.notificationID ?? "") }.isEmpty)
            let parked = try stack.records("push.retry.2").filter { slowIDs.contains($0.notificationID ?? "") }
            #expect(parked.count == 2)
            for record in parked {
                #expect(record.json["last_error"] == "TooManyRequests")
                #expect(record.json["attempts"] == 1)
                let due = try #require(
                    record.header(RecordHeader.due).flatMap { Int64(String(decoding: $0, as: UTF8.self)) })
                #expect(due - record.timestampMs >= 1900)
            }
            let outcomes = try await stack.waitForRecords("push.deliveries") { records in
                records.filter { slowIDs.contains($0.notificationID ?? "") }.count == 2
            }.filter { slowIDs.contains($0.notificationID ?? "") }
            #expect(outcomes.allSatisfy { $0.json["outcome"] == "sent" && $0.json["attempts"] == 2 })
        }

        @Test func exhaustedPushesAreDeadLetteredAndTheReplayToolRedrivesThemOnce() async throws {
            let stack = try await Stack.get()
            let realm = try await RealmClient.registered(stack)
            let key = try RealmClient.pushKey()
            let token = RealmClient.fcmToken()
            _ = try await realm.device(userID: 84, kind: "fcm", token: token, key: key)
            try await stack.inject("fcm", status: 500, reason: "INTERNAL", retryAfter: nil, count: 4)
            let payload = realm.messagePayload(userID: 84, messageID: 8401, content: "dead letter me")
            let reply = try await realm.notify(userID: 84, payload: payload)
            let id = try #require(reply.json["notification_id"]?.stringValue)

            let dead = try #require(
                try await stack.waitForRecords("push.deadletter") { $0.contains { $0.notificationID == id } }
                    .first { $0.notificationID == id })
            #expect(dead.json["cause"] == "attempts_exhausted")
            #expect(dead.json["last_error"] == "INTERNAL")
            #expect(dead.json["attempts"] == 4)
            #expect(
                dead.json["record"]?["token"] == nil && dead.json["record"]?["sealed_token"] != nil,
                "the token travels sealed")
            #expect(!String(decoding: dead.value, as: UTF8.self).contains(token))
            let failed = try await stack.waitForRecords("push.deliveries") { $0.contains { $0.notificationID == id } }
                .filter { $0.notificationID == id }
            #expect(failed.map { $0.json["outcome"] } == ["failed"])
            #expect(failed.first?.json["reason"] == "INTERNAL")
            #expect(try await stack.received("fcm").filter { $0.token == token }.map(\.status) == [500, 500, 500, 500])

            // Re-drive it once the provider is healthy again.
            let listed = try await stack.runTool(
                "pushrelay", ["deadletter", "list", "--notification", id, "--quiet", "--output", "json"])
            let letters = try Wire.decode(JSONValue.self, from: Array(listed.output.utf8))["dead_letters"]?.arrayValue
            #expect(letters?.count == 1, "\(listed.output)")
            #expect(letters?.first?["kind"] == "dead_letter" && !listed.output.contains(token))
            let args = ["deadletter", "redrive", "--notification", id, "--quiet"]
            let redrive = try await stack.runTool("pushrelay", args)
            #expect(redrive.status == 0, "\(redrive.errors)")
            #expect(redrive.output.contains("re-drove 1 into push.outbound, skipped 0"))
            let delivered = try await stack.waitForPushes("fcm") {
                $0.contains { $0.token == token && $0.status == 200 }
            }
            #expect(
                try delivered.first { $0.token == token && $0.status == 200 }?.decrypt(with: key)
                    == Wire.canonical(payload))

            // Re-driving again is stopped by the dedupe guard; --force sends once more.
            let again = try await stack.runTool("pushrelay", args)
            #expect(again.output.contains("re-drove 0 into push.outbound, skipped 1 already delivered"))
            let forced = try await stack.runTool("pushrelay", args + ["--force"])
            #expect(forced.output.contains("re-drove 1 into push.outbound, skipped 0 already delivered (forced)"))
            _ = try await stack.waitForPushes("fcm") { $0.filter { $0.token == token && $0.status == 200 }.count == 2 }
            try await Task.sleep(for: .seconds(1))
            #expect(try await stack.received("fcm").filter { $0.token == token && $0.status == 200 }.count == 2)
        }

        @Test func aRedeliveredPushIsNotSentTwice() async throws {
            let stack = try await Stack.get()
            let realm = try await RealmClient.registered(stack)
            let key = try RealmClient.pushKey()
            let token = RealmClient.apnsToken()
            _ = try await realm.device(userID: 85, kind: "apns", token: token, key: key)
            let reply = try await realm.notify(userID: 85, payload: realm.messagePayload(userID: 85, messageID: 8501))
            let id = try #require(reply.json["notification_id"]?.stringValue)
            _ = try await stack.waitForPushes("apns") { $0.contains { $0.token == token && $0.status == 200 } }

            // What a crash before the commit, or a rebalance, looks like: the same record again.
            let original = try #require(try stack.records("push.outbound").first { $0.notificationID == id })
            let producer = try KafkaProducer(
                configuration: KafkaConfiguration(bootstrapServers: stack.kafkaBrokers), logger: Logger(label: "test"))
            defer { producer.shutdown() }
            for _ in 0..<2 {
                _ = try await producer.send(
                    KafkaOutgoing(
                        topic: "push.outbound", key: original.key.map { String(decoding: $0, as: UTF8.self) },
                        value: original.value, headers: original.headers))
            }
            let outcomes = try await stack.waitForRecords("push.deliveries") {
                $0.filter { $0.notificationID == id }.count == 3
            }.filter { $0.notificationID == id }.map { $0.json["outcome"] }
            #expect(outcomes == ["sent", "already_sent", "already_sent"])
            #expect(try await stack.received("apns").filter { $0.token == token }.count == 1)
        }

        @Test func registrationsAndSendMarkersSurviveARedisRestart() async throws {
            let stack = try await Stack.get()
            let realm = try await RealmClient.registered(stack)
            let key = try RealmClient.pushKey()
            let token = RealmClient.fcmToken()
            let device = try await realm.device(userID: 86, kind: "fcm", token: token, key: key)
            // AOF with fsync every second: after a second, even a SIGKILL keeps the write.
            try await Task.sleep(for: .milliseconds(1500))
            try await stack.restartRedis(signal: SIGKILL)
            try await stack.waitReady(.ingest)
            let listed = try await HTTP.get(
                "\(stack.ingestURL)/v1/devices?realm_uuid=\(realm.realmUUID)&user_id=86", auth: realm.auth)
            #expect(listed.json["devices"]?.arrayValue?.first?["device_id"]?.intValue == device)
            #expect(
                try await realm.notify(userID: 86, payload: realm.messagePayload(userID: 86, messageID: 8601)).status
                    == 202)
            let push = try #require(
                try await stack.waitForPushes("fcm") { $0.contains { $0.token == token } }.first { $0.token == token })
            #expect(push.messageID(with: key) == 8601)
        }

        @Test func replayToolTracesSummarisesAndRedacts() async throws {
            let stack = try await Stack.get()
            let realm = try await RealmClient.registered(stack)
            let key = try RealmClient.pushKey()
            let token = RealmClient.apnsToken()
            let fcmToken = RealmClient.fcmToken()
            _ = try await realm.device(userID: 87, kind: "apns", token: token, key: key)
            let fcmDevice = try await realm.device(userID: 87, kind: "fcm", token: fcmToken, key: key)
            try await stack.unregister("fcm", token: fcmToken)
            try await stack.inject("apns", status: 503, reason: "ServiceUnavailable", retryAfter: nil, count: 1)
            let reply = try await realm.notify(userID: 87, payload: realm.messagePayload(userID: 87, messageID: 8701))
            let id = try #require(reply.json["notification_id"]?.stringValue)
            _ = try await stack.waitForRecords("push.deliveries") { $0.filter { $0.notificationID == id }.count == 2 }

            let trace = try await stack.runTool("pushrelay", ["trace", id, "--quiet"])
            #expect(trace.status == 0, "\(trace.errors)")
            let lines = trace.output.split(separator: "\n").map(String.init)
            // The APNs device's path: accepted, encrypted, parked, sent.
            let stages = [" push.requests[", " push.outbound[", " push.retry.1[", "outcome sent"]
            let positions = stages.map { stage in lines.firstIndex { $0.contains(stage) } }
            #expect(positions.allSatisfy { $0 != nil }, "\(trace.output)")
            #expect(
                positions.compactMap { $0 } == positions.compactMap { $0 }.sorted(), "stages in order:\n\(trace.output)"
            )
            #expect(trace.output.contains("parked for retry") && trace.output.contains("ServiceUnavailable"))
            #expect(trace.output.contains("token invalidated") && trace.output.contains("UNREGISTERED"))
            #expect(lines.last?.contains("sent") == true && lines.last?.contains("invalid_token") == true)

            let traced = try await stack.runTool("pushrelay", ["trace", id, "--quiet", "--output", "json"])
            let records = try Wire.decode(JSONValue.self, from: Array(traced.output.utf8))["records"]?.arrayValue ?? []
            #expect(
                records.contains { $0["kind"] == "retry" } && records.filter { $0["kind"] == "delivery" }.count == 2)
            #expect(!traced.output.contains(token) && !traced.output.contains(fcmToken), "tokens are redacted")
            let unknown = try await stack.runTool("pushrelay", ["trace", UUID().uuidString.lowercased(), "--quiet"])
            #expect(unknown.status == 2 && unknown.output.contains("no records"))

            // The dead token's device: invalidated by feedback, its last outcome read from the topic.
            var inspected: JSONValue = .null
            try await Stack.waitFor("the device to read invalid", timeout: .seconds(20)) {
                guard
                    let run = try? await stack.runTool(
                        "pushrelay", ["devices", "inspect", "\(fcmDevice)", "--quiet", "--output", "json"]),
                    let json = try? Wire.decode(JSONValue.self, from: Array(run.output.utf8))
                else { return false }
                inspected = json
                return json["status"] == "invalid"
            }
            #expect(inspected["provider"] == "fcm" && inspected["invalid"]?["reason"] == "UNREGISTERED")
            #expect(inspected["realm_uuid"]?.stringValue == realm.realmUUID)
            let last = inspected["last_outcomes"]?.arrayValue ?? []
            #expect(last.contains { $0["notification_id"]?.stringValue == id && $0["outcome"] == "invalid_token" })
            let text = try await stack.runTool("pushrelay", ["devices", "inspect", "\(fcmDevice)", "--quiet"])
            #expect(text.status == 0 && text.output.contains("invalid since") && !text.output.contains(fcmToken))
            #expect(
                try await stack.runTool("pushrelay", ["devices", "inspect", "999999999", "--minutes", "0"]).status == 2)

            let summary = try await stack.runTool(
                "pushrelay",
                [
                    "replay", "--topic", "push.deliveries", "--realm", realm.realmUUID, "--summary", "--output", "json",
                    "--quiet",
                ])
            let counts = try Wire.decode(JSONValue.self, from: Array(summary.output.utf8))
            #expect(counts["total"] == 2)
            #expect(counts["by_outcome"] == ["sent": 1, "invalid_token": 1])
            #expect(counts["by_provider"] == ["apns": 1, "fcm": 1])

            let lines2 = try await stack.runTool(
                "pushrelay", ["replay", "--topic", "push.outbound", "--notification", id, "--quiet"])
            #expect(lines2.output.split(separator: "\n").count == 2)
            #expect(!lines2.output.contains(token) && !lines2.output.contains(fcmToken), "tokens are redacted")
            #expect(lines2.output.contains("[redacted"))
            let future = try await stack.runTool(
                "pushrelay",
                [
                    "replay", "--topic", "push.outbound", "--notification", id, "--from", "2100-01-01T00:00:00Z",
                    "--quiet",
                ])
            #expect(future.status == 0 && future.output.isEmpty, "a time range excludes records outside it")
            let bad = try await stack.runTool("pushrelay", ["replay", "--from", "yesterday"])
            #expect(bad.status == 64 && bad.errors.contains("not an ISO 8601 time"))
        }

        @Test func connectionsRetiredByGOAWAYLoseNothingAndEveryResendIsMarked() async throws {
            // Fakes that end every HTTP/2 connection after 100 requests, the abrupt way:
            // streams above the GOAWAY's last-stream-id are refused and must be sent again.
            var options = Stack.Options.tests
            // As Apple's and Google's front ends retire a connection: GOAWAY covering every
            // stream received, those still answered (some up to 1 s late), TCP closed 1 s after.
            options.fakesEnvironment = [
                "PUSHRELAY_FAKES_GOAWAY_EVERY": "100", "PUSHRELAY_FAKES_GOAWAY_GRACE_MS": "1000",
            ]
            options.name = "goaway"
            let stack = try await Stack.start(options: options)
            var settings = ChaosRun.Settings()
            settings.notifications = 600
            settings.users = 50
            settings.realms = 3
            settings.rate = 200
            settings.concurrency = 16
            settings.deadTokenShare = 0
            settings.faults = []
            settings.settleTimeout = .seconds(120)
            let report = try await ChaosRun(stack: stack, settings: settings, log: { _ in }).run()
            print(report.table)
            let stats = try await HTTP.get("\(stack.controlURL)/stats").json
            let goAways = stats["connections"]?["goaway"]?.intValue ?? 0
            #expect(goAways >= 5, "the fakes retired connections (\(goAways) GOAWAYs)")
            #expect(report.notificationsAccepted == 600)
            #expect(report.lost == 0, "lost: \(report.lostSamples)")
            #expect(report.delivered + report.failed == report.pairsExpected, "every push accounted for")
            // A request whose answer never came is counted and marked when sent again.
            #expect(report.unexplainedDuplicates == 0, "duplicates: \(report.duplicateSamples)")
            // The dispatcher's client reads the GOAWAY: the streams above its last-stream-id
            // go out again at once (the fake never processed them), so none arrives twice.
            // (The fake answers every stream up to its last-stream-id: the Hummingbird-based
            // one before it sometimes processed one it then could not answer.)
            #expect(report.duplicates == 0, "duplicates: \(report.duplicateSamples)")
            #expect(report.failed == 0)
        }

        @Test func aShortChaosRunLosesAndDuplicatesNothing() async throws {
            let stack = try await Stack.get()
            var settings = ChaosRun.Settings()
            settings.notifications = 2000
            settings.users = 100
            // Ten servers: each stays under the test stack's per-server rate limit (300 a minute).
            settings.realms = 10
            settings.rate = 250
            settings.concurrency = 16
            settings.settleTimeout = .seconds(180)
            let report = try await ChaosRun(stack: stack, settings: settings, log: { _ in }).run()
            print(report.table)
            #expect(report.faults.count == 5, "each stage killed once and Redis restarted")
            #expect(report.notificationsAccepted > 1000)
            #expect(report.pairsExpected == report.notificationsAccepted * 2)
            #expect(report.lost == 0, "lost: \(report.lostSamples)")
            // A SIGKILL between a request and the provider's answer leaves the relay unable to
            // know: it re-sends (and says so). Every duplicate must be one of those.
            #expect(report.unexplainedDuplicates == 0, "duplicates: \(report.duplicateSamples)")
            // Counted in pairs: a pair interrupted twice arrives three times, marked once per re-send.
            #expect(report.duplicatedPairs <= report.interruptedSendsResent)
            #expect(report.invalid > 0, "dead tokens were exercised")
            #expect(report.delivered + report.invalid + report.failed == report.pairsExpected)
        }
    }
}
