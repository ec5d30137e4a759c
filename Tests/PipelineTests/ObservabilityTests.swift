import DevStack
import FakeProviders
import Foundation
import PushModels
import Testing

extension StackTests {
    /// Tracing across the four services, as an operator's collector receives it: the
    /// stack exports OTLP (binary protobuf over HTTP) to the fakes' receiver, sampling
    /// only requests whose own `traceparent` is sampled.
    @Suite struct ObservabilityTests {
        /// A random id of `bytes` bytes in lowercase hex (W3C trace and span ids).
        static func randomHex(bytes: Int) -> String {
            (0..<bytes).map { _ in String(format: "%02x", UInt8.random(in: 0...255)) }.joined()
        }

        /// Spans of `traceID` the receiver has, once `condition` holds for them.
        static func spans(
            _ stack: Stack, traceID: String, until condition: ([FakeOTLP.ReceivedSpan]) -> Bool
        ) async throws -> [FakeOTLP.ReceivedSpan] {
            var spans: [FakeOTLP.ReceivedSpan] = []
            try await Stack.waitFor("the trace's spans", timeout: .seconds(60)) {
                guard let reply = try? await HTTP.get("\(stack.controlURL)/traces?trace_id=\(traceID)"),
                    let received = try? JSONDecoder().decode([FakeOTLP.ReceivedSpan].self, from: Data(reply.body))
                else { return false }
                spans = received
                return condition(spans)
            }
            return spans
        }

        /// CI keeps only the test output: a wait that times out quotes the stack's logs.
        @Test func aWaitThatTimesOutSaysWhatTheStackLogged() async throws {
            let stack = try await Stack.get()
            let error = await #expect(throws: StackError.self) {
                _ = try await stack.waitForPushes("fcm", timeout: .milliseconds(1)) { _ in false }
            }
            let text = error?.description ?? ""
            #expect(text.hasPrefix("timed out waiting for fcm pushes"))
            for service in ["ingest", "encryptor", "dispatcher", "feedback", "fakes", "devbroker"] {
                #expect(text.contains("-- \(service).log: "), "\(service) in \(text.prefix(2000))")
            }
            // Each log's last lines are quoted, cut to 300 characters.
            let quoted = text.split(separator: "\n").filter { $0.hasPrefix("  ") }
            #expect(!quoted.isEmpty)
            #expect(quoted.allSatisfy { $0.count <= 302 })
        }

        @Test func oneNotificationIsOneTraceWithSpansFromAllFourServices() async throws {
            let stack = try await Stack.get()
            let realm = try await RealmClient.registered(stack)
            let key = try RealmClient.pushKey()
            let live = RealmClient.fcmToken()
            let dead = RealmClient.fcmToken()
            let liveDevice = try await realm.device(userID: 30, kind: "fcm", token: live, key: key)
            let deadDevice = try await realm.device(userID: 30, kind: "fcm", token: dead, key: key)
            try await stack.unregister("fcm", token: dead)
            let content = "trace me \(UUID().uuidString)"
            // The caller's own trace: the relay's spans join it.
            let traceID = Self.randomHex(bytes: 16)
            let callerSpan = Self.randomHex(bytes: 8)
            let reply = try await realm.notify(
                userID: 30, payload: realm.messagePayload(userID: 30, messageID: 3001, content: content),
                headers: [("traceparent", "00-\(traceID)-\(callerSpan)-01")])
            #expect(reply.status == 202)

            let services: Set<String> = [
                "pushrelay-ingest", "pushrelay-encryptor", "pushrelay-dispatcher", "pushrelay-feedback",
            ]
            // Spans are exported as they end, a parent after its children: wait for the whole tree.
            let spans = try await Self.spans(stack, traceID: traceID) { spans in
                let ids = Set(spans.map(\.spanID))
                return Set(spans.map(\.service)) == services && spans.contains { $0.name == "invalidate token" }
                    && spans.filter { $0.name == "account outcome" }.count >= 2
                    && spans.filter { $0.name == "dispatch push" }.count >= 2
                    && spans.allSatisfy { $0.parentSpanID == callerSpan || ids.contains($0.parentSpanID) }
            }
            let names = Set(spans.map(\.name))
            for expected in [
                "encrypt notification", "encrypt for device", "dispatch push", "send to fcm", "invalidate token",
                "account outcome",
            ] {
                #expect(names.contains(expected), "\(expected) in \(names.sorted())")
            }
            // One tree: the request's span is the caller's child, every other span has its parent in the trace.
            let ids = Set(spans.map(\.spanID))
            let request = try #require(spans.first { $0.service == "pushrelay-ingest" })
            #expect(request.parentSpanID == callerSpan)
            for span in spans where span.spanID != request.spanID {
                #expect(ids.contains(span.parentSpanID), "\(span.service) \(span.name) has its parent in the trace")
            }
            // Each provider request: provider, attempt, status, and the reason of a refusal.
            let sends = spans.filter { $0.name == "send to fcm" }
            #expect(sends.count == 2)
            #expect(sends.contains { $0.attributes["http.response.status_code"] == "200" })
            #expect(
                sends.contains {
                    $0.attributes["pushrelay.outcome"] == "invalid_token" && $0.attributes["pushrelay.reason"] != nil
                })
            #expect(
                sends.allSatisfy {
                    $0.attributes["pushrelay.provider"] == "fcm" && $0.attributes["pushrelay.attempt"] == "1"
                })
            let devices = Set(
                spans.filter { $0.name == "dispatch push" }.compactMap { $0.attributes["pushrelay.device_id"] })
            #expect(devices == ["\(liveDevice)", "\(deadDevice)"])
            // No token, key or content in any attribute.
            for span in spans {
                for value in span.attributes.values {
                    #expect(!value.contains(live) && !value.contains(dead) && !value.contains(content))
                    #expect(!value.contains(String(live.suffix(20))) && !value.contains(String(dead.suffix(20))))
                }
            }
            // The dispatcher's log line about the dead token carries the trace id.
            let log = try String(contentsOfFile: "\(stack.directory)/dispatcher.log", encoding: .utf8)
            #expect(
                log.split(separator: "\n").contains { $0.contains("dead token") && $0.contains("trace_id=\(traceID)") })
        }

        /// The same export over OTLP/gRPC: an ingest configured for it sends its span of a
        /// sampled request to the receiver's gRPC side.
        @Test func spansAreExportedOverGRPCToo() async throws {
            let stack = try await Stack.get()
            let extra = try await stack.launchExtraIngest(
                ["OTEL_EXPORTER_OTLP_ENDPOINT": stack.otlpGRPCURL, "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"],
                name: "otlp-grpc")
            let realm = try await RealmClient.registered(stack)
            _ = try await realm.device(
                userID: 33, kind: "fcm", token: RealmClient.fcmToken(), key: RealmClient.pushKey())
            let traceID = Self.randomHex(bytes: 16)
            let reply = try await HTTP.send(
                "POST", "\(extra.api)/v1/notify",
                json: [
                    "realm_uuid": .string(realm.realmUUID), "user_id": 33,
                    "payload": realm.messagePayload(userID: 33, messageID: 3301),
                ], auth: realm.auth, headers: [("traceparent", "00-\(traceID)-00f067aa0ba902b7-01")])
            #expect(reply.status == 202)
            let spans = try await Self.spans(stack, traceID: traceID) { spans in
                spans.contains { $0.service == "pushrelay-ingest" && $0.via == "grpc" }
                    && spans.contains { $0.name == "dispatch push" }
            }
            #expect(spans.contains { $0.service == "pushrelay-ingest" && $0.parentSpanID == "00f067aa0ba902b7" })
        }

        @Test func aRequestWithoutASampledTraceIsNotExported() async throws {
            let stack = try await Stack.get()
            let realm = try await RealmClient.registered(stack)
            let key = try RealmClient.pushKey()
            let token = RealmClient.fcmToken()
            _ = try await realm.device(userID: 31, kind: "fcm", token: token, key: key)
            let traceID = Self.randomHex(bytes: 16)
            let reply = try await realm.notify(
                userID: 31, payload: realm.messagePayload(userID: 31, messageID: 3101),
                headers: [("traceparent", "00-\(traceID)-00f067aa0ba902b7-00")])
            #expect(reply.status == 202)
            _ = try await stack.waitForPushes("fcm") { $0.contains { $0.token == token } }
            try await Task.sleep(for: .seconds(1))
            let exported = try await HTTP.get("\(stack.controlURL)/traces?trace_id=\(traceID)")
            #expect(exported.json.arrayValue?.isEmpty == true, "not sampled: nothing exported")
            // No stage starts a trace of its own: every root span is an ingest request's.
            let all = try await HTTP.get("\(stack.controlURL)/traces")
            let spans = try JSONDecoder().decode([FakeOTLP.ReceivedSpan].self, from: Data(all.body))
            let roots = spans.filter { $0.parentSpanID.isEmpty }
            #expect(
                roots.allSatisfy { $0.service == "pushrelay-ingest" }, "\(roots.map { "\($0.service) \($0.name)" })")
        }

        /// The dashboard and the alert rules read only metrics the services export: each
        /// service's `/metrics` after some traffic (a push sent, a dead token, a refused
        /// request), checked by `scripts/check-observability.sh`, which also runs
        /// `promtool check rules` and the rules' unit tests (`promtool test rules`).
        @Test func theDashboardAndTheAlertsReadOnlyExportedMetrics() async throws {
            let stack = try await Stack.get()
            let realm = try await RealmClient.registered(stack)
            let key = try RealmClient.pushKey()
            let live = RealmClient.fcmToken()
            let dead = RealmClient.fcmToken()
            _ = try await realm.device(userID: 32, kind: "fcm", token: live, key: key)
            _ = try await realm.device(userID: 32, kind: "fcm", token: dead, key: key)
            try await stack.unregister("fcm", token: dead)
            #expect(
                try await realm.notify(userID: 32, payload: realm.messagePayload(userID: 32, messageID: 3201)).status
                    == 202)
            let refused = try await HTTP.send(
                "POST", "\(stack.ingestURL)/v1/notify", body: Array("{".utf8), auth: realm.auth)
            #expect(refused.status == 400)
            _ = try await stack.waitForPushes("fcm") { $0.contains { $0.token == live } }
            // The consumer stages sample their lag every 15 s, once they hold partitions.
            var scrapes: [String] = []
            try await Stack.waitFor("every stage's metrics", timeout: .seconds(60)) {
                scrapes = []
                for service in Stack.Service.allCases {
                    guard let reply = try? await HTTP.get("\(stack.opsURL(service))/metrics") else { return false }
                    scrapes.append(String(decoding: reply.body, as: UTF8.self))
                }
                let all = scrapes.joined(separator: "\n")
                return scrapes[1...].allSatisfy { $0.contains("pushrelay_consumer_lag_records{") }
                    && all.contains("pushrelay_invalidations_total{") && all.contains("pushrelay_dependency_up{")
            }
            let file = FileManager.default.temporaryDirectory.appendingPathComponent("metrics-\(UUID().uuidString)")
            try scrapes.joined(separator: "\n").write(to: file, atomically: true, encoding: .utf8)
            defer { try? FileManager.default.removeItem(at: file) }
            let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
                .deletingLastPathComponent()
            let check = Process()
            check.executableURL = root.appendingPathComponent("scripts/check-observability.sh")
            check.arguments = [file.path]
            let output = Pipe()
            check.standardOutput = output
            check.standardError = output
            try check.run()
            let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            check.waitUntilExit()
            #expect(check.terminationStatus == 0, "\(text)")
            // The tenant counter names the calling server, and the lag gauge its group.
            let all = scrapes.joined(separator: "\n")
            #expect(all.contains("tenant=\"\(realm.serverUUID)\""))
            #expect(all.contains("group=\"pushrelay-dispatcher\""))
            // The API's request metrics, under Hummingbird's names: the accepted notify and
            // the refused one, each counted and timed with its route and status.
            let requests = all.split(separator: "\n").filter { $0.hasPrefix("hb_requests{") }
            #expect(requests.contains { $0.contains("http_route=\"/v1/notify\"") && $0.contains("code=\"202\"") })
            #expect(requests.contains { $0.contains("http_route=\"/v1/notify\"") && $0.contains("code=\"400\"") })
            #expect(all.contains("http_server_request_duration_bucket{"))
            // The SLO rules read the 5 s bucket as the services write its bound.
            #expect(all.contains("pushrelay_end_to_end_seconds_bucket{provider=\"fcm\",le=\"5.0\"}"))
        }
    }
}
