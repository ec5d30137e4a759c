import DeviceState
import Foundation
import HTTPTypes
import Kafka
import PushCrypto
import PushModels
import Testing
@testable import StageTestSupport

/// gorush's API through the router on in-memory stores: every route, its success and its
/// error paths, each error in gorush's shape (`{"code": <status>, "message": …}`, plus the
/// relay's `error` code and `field`) with the `X-GORUSH-VERSION` header on every answer.
@Suite struct IngestRouterGorushTests {
    static let versionHeader = HTTPField.Name("X-GORUSH-VERSION")!
    static let idsHeader = HTTPField.Name("X-PushRelay-Notification-Ids")!

    /// Checks gorush's error shape: status, `code` (the status), a message, the relay's code.
    func expectGorushError(
        _ reply: RouterReply, _ status: Int, _ error: String, message: String? = nil, field: String? = nil,
        _ what: String, sourceLocation: SourceLocation = #_sourceLocation
    ) {
        #expect(reply.status == status, "\(what): \(reply.status) \(reply.text)", sourceLocation: sourceLocation)
        #expect(reply.json["code"] == .int(Int64(status)), "\(what): \(reply.text)", sourceLocation: sourceLocation)
        #expect(reply.json["error"] == .string(error), "\(what): \(reply.text)", sourceLocation: sourceLocation)
        if let message {
            #expect(reply.json["message"] == .string(message), "\(what): \(reply.text)", sourceLocation: sourceLocation)
        } else {
            #expect(
                reply.json["message"]?.stringValue?.isEmpty == false, "\(what): \(reply.text)",
                sourceLocation: sourceLocation)
        }
        if let field {
            #expect(reply.json["field"] == .string(field), "\(what): \(reply.text)", sourceLocation: sourceLocation)
        }
        #expect(
            reply.headers[Self.versionHeader] == "pushrelay-1.0", "\(what): the version header",
            sourceLocation: sourceLocation)
    }

    func push(_ client: RouterClient, _ server: RouterServer, _ body: JSONValue, query: String = "") async throws
        -> RouterReply
    {
        try await client.send(.post, "/api/push\(query)", auth: server.auth, .json(body))
    }

    @Test func pushAcceptsAndLogsAsGorushDoes() async throws {
        let fixture = try await RouterFixture.make(["pushrelay.gorush.apns.topic": "org.zulip.Zulip"])
        try await fixture.run { client in
            let server = try await client.registeredServer()
            let android = routerFCMToken()
            let reply = try await push(
                client, server,
                [
                    "notifications": [
                        ["tokens": ["token_a"], "platform": 1, "message": "Hello iOS", "notif_id": "n-1"],
                        ["tokens": [.string(android), .string(android)], "platform": 2, "message": "Hello Android"],
                    ]
                ])
            #expect(reply.status == 200, "\(reply.text)")
            #expect(
                reply.text
                    == #"{"counts":3,"logs":[{"notif_id":"n-1","type":"failed-push","platform":"ios","token":"*******","message":"Hello iOS","error":"BadDeviceToken"}],"success":"ok"}"#
            )
            #expect(reply.headers[.contentType] == "application/json; charset=utf-8")
            #expect(reply.headers[Self.versionHeader] == "pushrelay-1.0")
            // One notification accepted (the iOS one had no valid token), for one device.
            let published = try fixture.published()
            try #require(published.count == 1)
            #expect(published[0].json["kind"] == "gorush")
            #expect(published[0].deviceIDs?.count == 1, "a repeated token is one device")
            #expect(reply.headers[Self.idsHeader] == published[0].record.notificationID.rawValue)
            #expect(!routerContains(published[0].outgoing.value, "Hello Android"), "the content travels sealed")
        }
    }

    /// `?dry_run=true`: gorush's answer plus what each token would get; nothing registered,
    /// counted or published, and no token in the answer but masked in gorush's log.
    @Test func aDryRunBuildsEachTokensPushAndRegistersNothing() async throws {
        let fixture = try await RouterFixture.make(["pushrelay.gorush.apns.topic": "org.zulip.Zulip"])
        try await fixture.run { client in
            let server = try await client.registeredServer()
            let apns = String(repeating: "ab", count: 32)
            let android = routerFCMToken()
            let reply = try await push(
                client, server,
                [
                    "notifications": [
                        [
                            "tokens": [.string(apns), "token_b"], "platform": 1, "message": "Hello iOS",
                            "priority": "high", "expiration": 2_000_000_000, "collapse_id": "c-1",
                        ],
                        [
                            "tokens": [.string(android)], "platform": 2, "message": "Hello Android",
                            "priority": "normal",
                        ],
                    ]
                ], query: "?dry_run=true")
            #expect(reply.status == 200, "\(reply.text)")
            #expect(reply.headers[.contentType] == "application/json; charset=utf-8")
            #expect(reply.json["dry_run"] == true && reply.json["checked"] == "local" && reply.json["success"] == "ok")
            #expect(reply.json["counts"] == 3, "gorush's counts: the tokens given")
            let notifications = reply.json["notifications"]?.arrayValue ?? []
            try #require(notifications.count == 2, "\(reply.text)")
            let ios = notifications[0]["devices"]?.arrayValue ?? []
            #expect(ios.count == 2)
            #expect(
                ios.first?["token_index"] == 0 && ios.first?["result"] == "send" && ios.first?["provider"] == "apns")
            #expect(ios.first?["push_type"] == "alert" && ios.first?["priority"] == 10)
            #expect(ios.first?["expires_at"] == 2_000_000_000 && ios.first?["collapse_id"] == "c-1")
            #expect((ios.first?["body_bytes"]?.intValue ?? 0) > 0)
            #expect(ios.last?["result"] == "fail" && ios.last?["reason"] == "BadDeviceToken")
            let fcm = notifications[1]["devices"]?.arrayValue?.first
            #expect(
                fcm?["provider"] == "fcm" && fcm?["priority"] == "normal" && fcm?["expires_at"] == .null,
                "\(reply.text)")
            #expect(reply.json["logs"]?.arrayValue?.count == 1, "gorush's failed-push entry for the bad token")
            #expect(!reply.text.contains(apns) && !reply.text.contains(android), "no token in the answer")
            #expect(try fixture.published().isEmpty, "nothing published")
            #expect(reply.headers[Self.idsHeader] == nil)
            #expect(fixture.memory?.devices.count == 0, "nothing registered")

            let bad = try await push(
                client, server, ["notifications": [["tokens": [.string(android)], "platform": 2, "message": "m"]]],
                query: "?dry_run=maybe")
            expectGorushError(bad, 400, "BAD_REQUEST", field: "dry_run", "a dry_run that is not a boolean")
        }
    }

    @Test func pushRefusesWhatGorushRefuses() async throws {
        let fixture = try await RouterFixture.make(["pushrelay.gorush.max.tokens": "2"])
        try await fixture.run { client in
            let server = try await client.registeredServer()
            expectGorushError(
                try await push(client, server, ["nothing": true]), 400, "MISSING_NOTIFICATIONS",
                message: "Missing notifications field.", field: "notifications", "no notifications field")
            expectGorushError(
                try await push(client, server, ["notifications": []]), 400, "EMPTY_NOTIFICATIONS",
                message: "Notifications field is empty.", "an empty list")
            let many = JSONValue.object([
                "notifications": .array(
                    Array(repeating: ["tokens": ["a"], "platform": 2, "message": "x"], count: 101))
            ])
            expectGorushError(
                try await push(client, server, many), 400, "TOO_MANY_NOTIFICATIONS",
                message: "Number of notifications(101) over limit(100)", "101 notifications")
            let tokens: JSONValue = [
                "notifications": [["tokens": ["a", "b", "c"], "platform": 2, "message": "x"]]
            ]
            expectGorushError(
                try await push(client, server, tokens), 400, "TOO_MANY_TOKENS",
                message: "Number of tokens(3) over limit(2)", "3 tokens over a limit of 2 (an operator's setting)")
            expectGorushError(
                try await push(client, server, ["notifications": [["tokens": ["a"], "platform": 9]]]), 400,
                "INVALID_NOTIFICATION", field: "notifications[0].platform", "an unknown platform")
            expectGorushError(
                try await push(
                    client, server, ["notifications": [["tokens": [.string(routerAPNsToken())], "platform": 1]]]),
                400, "INVALID_NOTIFICATION", field: "notifications[0].topic", "iOS without a topic")
            let anonymous = try await client.send(.post, "/api/push", .json(["notifications": []]))
            expectGorushError(anonymous, 401, "UNAUTHORIZED", "no credentials")
            let wrong = try await client.send(
                .post, "/api/push", auth: (server.uuid, RouterServer().key), .json(["notifications": []]))
            expectGorushError(wrong, 401, "UNAUTHORIZED", "a wrong key")

            fixture.publisher.fail(true)
            let down = try await push(
                client, server, ["notifications": [["tokens": [.string(routerFCMToken())], "platform": 2]]])
            expectGorushError(down, 503, "SERVICE_UNAVAILABLE", "the broker does not acknowledge")
            #expect(down.headers[.retryAfter] == "5")
        }
        #expect(fixture.publisher.records.isEmpty, "nothing was accepted")
    }

    @Test func statsConfigAndHealth() async throws {
        let fixture = try await RouterFixture.make()
        try await fixture.run { client in
            let server = try await client.registeredServer()
            _ = try await push(
                client, server,
                ["notifications": [["tokens": [.string(routerFCMToken()), .string(routerFCMToken())], "platform": 2]]])
            let app = try await client.send(.get, "/api/stat/app", auth: server.auth)
            #expect(
                app.status == 200 && app.json["total_count"] == 2 && app.json["submitted_tasks"] == 1, "\(app.text)")
            #expect(app.json["android"]?["push_success"] == 0 && app.json["version"] == "pushrelay-1.0")
            let go = try await client.send(.get, "/api/stat/go", auth: server.auth)
            #expect(go.status == 200 && go.json["go_version"] == "swift" && go.json["cpu_num"]?.intValue ?? 0 > 0)
            let config = try await client.send(.get, "/api/config", auth: server.auth)
            #expect(config.status == 200 && config.headers[.contentType] == "application/yaml; charset=utf-8")
            #expect(config.text.contains("max_notification: 100") && !config.text.contains(server.key))
            #expect(config.text.contains("server_uuid: \"\(server.uuid)\""))
            for path in ["/api/stat/app", "/api/stat/go", "/api/config", "/api/feedback-hook"] {
                expectGorushError(try await client.send(.get, path), 401, "UNAUTHORIZED", "\(path) without credentials")
            }

            let health = try await client.send(.get, "/healthz")
            #expect(health.status == 200)
            #expect(try await client.send(.head, "/healthz").status == 200)
            let version = try await client.send(.get, "/version")
            #expect(version.status == 200 && version.json["version"] == "pushrelay-1.0", "\(version.text)")
        }
    }

    @Test func feedbackHookIsSetReadAndRemoved() async throws {
        let fixture = try await RouterFixture.make()
        try await fixture.run { client in
            let server = try await client.registeredServer()
            let none = try await client.send(.get, "/api/feedback-hook", auth: server.auth)
            #expect(none.status == 200 && none.json == ["url": .null], "\(none.text)")
            expectGorushError(
                try await client.send(.put, "/api/feedback-hook", auth: server.auth, .json(["url": "ftp://x"])), 400,
                "INVALID_URL", field: "url", "a URL that is not https")
            expectGorushError(
                try await client.send(.put, "/api/feedback-hook", auth: server.auth, .json([:])), 400, "INVALID_FIELD",
                field: "url", "no url")
            let set = try await client.send(
                .put, "/api/feedback-hook", auth: server.auth, .json(["url": "https://hooks.example.org/gorush"]))
            #expect(set.status == 200 && set.json["url"] == "https://hooks.example.org/gorush", "\(set.text)")
            let secret = try #require(set.json["secret"]?.stringValue)
            #expect(Base64URL.decode(secret)?.count == 32, "a 32-byte signing secret, answered once")
            let stored = try #require(try await fixture.memory?.gorush.hook(server: ServerID(server.uuid)))
            #expect(stored.url == "https://hooks.example.org/gorush" && !stored.sealedSecret.contains(secret))
            let read = try await client.send(.get, "/api/feedback-hook", auth: server.auth)
            #expect(read.json == ["url": "https://hooks.example.org/gorush"], "the secret is not shown again")
            let config = try await client.send(.get, "/api/config", auth: server.auth)
            #expect(config.text.contains(#"feedback_secret: "[REDACTED]""#) && !config.text.contains(secret))
            let removed = try await client.send(.delete, "/api/feedback-hook", auth: server.auth)
            #expect(removed.status == 200 && removed.json == ["url": .null])
            #expect(try await client.send(.get, "/api/feedback-hook", auth: server.auth).json == ["url": .null])
        }
    }

    // MARK: Drop-in parity (issue 28), each replayed as a gorush client sends it.

    @Test func everyAnswerCarriesTheVersionAndGorushsExtraRoutesAnswer() async throws {
        let fixture = try await RouterFixture.make(["pushrelay.gorush.apns.topic": "org.zulip.Zulip"])
        try await fixture.run { client in
            let server = try await client.registeredServer()
            let root = try await client.send(.get, "/")
            #expect(root.status == 200 && root.text == #"{"text":"Welcome to notification server."}"#)
            #expect(root.headers[.contentType] == "application/json; charset=utf-8")
            for (method, path) in [
                (HTTPRequest.Method.get, "/"), (.get, "/healthz"), (.head, "/healthz"), (.get, "/version"),
                (.get, "/no/such/route"), (.post, "/api/push"), (.get, "/sys/stats"), (.get, "/metrics"),
                (.post, "/v1/notify"),
            ] {
                let reply = try await client.send(method, path)
                #expect(reply.headers[Self.versionHeader] == "pushrelay-1.0", "\(method) \(path): \(reply.status)")
            }
            // What shows anything about the relay's callers needs a server's key.
            for path in ["/sys/stats", "/metrics"] {
                expectGorushError(try await client.send(.get, path), 401, "UNAUTHORIZED", "\(path) without credentials")
            }
            let tokens: [JSONValue] = [.string(routerAPNsToken()), .string(routerAPNsToken())]
            let pushed = try await push(
                client, server, ["notifications": [["tokens": .array(tokens), "platform": 1, "message": "m"]]])
            #expect(pushed.status == 200, "\(pushed.text)")
            let stats = try await client.send(.get, "/sys/stats", auth: server.auth)
            #expect(stats.status == 200, "\(stats.text)")
            #expect(stats.json["pid"]?.intValue ?? 0 > 0 && stats.json["uptime_sec"] != nil)
            #expect(stats.json["total_status_code_count"]?["200"]?.intValue ?? 0 >= 2, "\(stats.text)")
            #expect(stats.json["total_status_code_count"]?["401"]?.intValue ?? 0 >= 2, "\(stats.text)")
            #expect((stats.json["total_count"]?.intValue ?? 0) >= 10)
            let metrics = try await client.send(.get, "/metrics", auth: server.auth)
            #expect(metrics.status == 200 && metrics.headers[.contentType]?.hasPrefix("text/plain") == true)
            #expect(metrics.text.contains("# TYPE gorush_total_push_count counter\ngorush_total_push_count 2\n"))
            #expect(
                metrics.text.contains("gorush_submitted_tasks 1\n") && metrics.text.contains("gorush_android_fail 0"))
            #expect(metrics.text.contains("# TYPE gorush_busy_workers gauge"))
            let go = try await client.send(.get, "/api/stat/go", auth: server.auth)
            #expect(go.json["goroutine_num"]?.intValue ?? 0 > 0, "threads: \(go.text)")
            #expect(go.json["memory_sys"]?.intValue ?? 0 > 0 && go.json["heap_alloc"]?.intValue ?? 0 > 0)
            #expect(go.json["uptime_sec"] != nil && go.json["gc_pause"] == [])
        }
    }

    @Test func countsAreGorushsTokensPlusTopic() async throws {
        let fixture = try await RouterFixture.make()
        try await fixture.run { client in
            let server = try await client.registeredServer()
            // iOS with two tokens and its topic: gorush counts 3. An unknown iOS priority is ignored.
            let reply = try await push(
                client, server,
                [
                    "notifications": [
                        [
                            "tokens": [.string(routerAPNsToken()), .string(routerAPNsToken())], "platform": 1,
                            "topic": "org.example.app", "message": "m", "priority": "urgent",
                        ]
                    ]
                ])
            #expect(reply.status == 200 && reply.json["counts"] == 3, "\(reply.text)")
            let published = try fixture.published()
            #expect(published.count == 1 && published[0].deviceIDs?.count == 2)
        }
    }

    @Test func largeSendsAreAcceptedInRecordsOfBoundedSize() async throws {
        let fixture = try await RouterFixture.make(["pushrelay.gorush.apns.topic": "org.zulip.Zulip"])
        try await fixture.run { client in
            let server = try await client.registeredServer()
            // 2,500 iOS tokens in one notification: over gorush's FCM cap, over the relay's
            // usual body limit (16 KiB in these fixtures), and more than one record holds.
            let tokens = (0..<2500).map { JSONValue.string(String(format: "%064x", $0 + 1)) }
            let reply = try await push(
                client, server, ["notifications": [["tokens": .array(tokens), "platform": 1, "message": "big"]]])
            #expect(reply.status == 200 && reply.json["counts"] == 2500, "\(reply.status) \(reply.text.prefix(300))")
            let published = try fixture.published()
            #expect(published.map { $0.deviceIDs?.count ?? 0 } == [1000, 1000, 500])
            #expect(Set(published.map(\.record.notificationID)).count == 1, "one notification in three records")
            #expect(reply.headers[Self.idsHeader] == published[0].record.notificationID.rawValue)
            // Android keeps gorush's 500 per notification.
            let android = (0..<501).map { _ in JSONValue.string(routerFCMToken()) }
            expectGorushError(
                try await push(client, server, ["notifications": [["tokens": .array(android), "platform": 2]]]), 400,
                "INVALID_NOTIFICATION", field: "notifications[0].tokens", "501 Android tokens")
        }
    }

    @Test func platformsNoDispatcherCanSendToAreRefused() async throws {
        let fixture = try await RouterFixture.make(
            ["pushrelay.gorush.apns.topic": "org.zulip.Zulip"], providers: FixedProviders(enabled: [.apns, .fcm]))
        try await fixture.run { client in
            let server = try await client.registeredServer()
            let huawei: JSONValue = [
                "notifications": [
                    ["tokens": [.string(routerFCMToken())], "platform": 2, "message": "m"],
                    ["tokens": [.string(routerFCMToken())], "platform": 3, "message": "m"],
                ]
            ]
            expectGorushError(
                try await push(client, server, huawei), 400, "PLATFORM_NOT_ENABLED",
                field: "notifications[1].platform", "Huawei without credentials")
            #expect(fixture.publisher.records.isEmpty, "a refused call accepts nothing")
            let config = try await client.send(.get, "/api/config", auth: server.auth)
            #expect(config.text.contains("huawei:\n  enabled: false"), "\(config.text)")
            #expect(config.text.contains("android:\n  enabled: true"))
            let android = try await push(
                client, server, ["notifications": [["tokens": [.string(routerFCMToken())], "platform": 2]]])
            #expect(android.status == 200, "\(android.text)")
        }
    }
}

/// What the dispatchers announce, fixed.
struct FixedProviders: ProviderDirectory {
    let enabled: Set<Provider>?
    var capabilities: Set<DispatcherCapability> = []
    func enabledProviders(nowMs: Int64) async throws -> Set<Provider>? { enabled }
    func everyDispatcherCan(_ capability: DispatcherCapability, nowMs: Int64) async throws -> Bool {
        capabilities.contains(capability)
    }
}
