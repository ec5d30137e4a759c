import DeviceState
import Foundation
import HTTPTypes
import Kafka
import PushCrypto
import PushModels
import Testing

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
                message: "Number of tokens(3) over limit(2)", "3 tokens over a limit of 2")
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
            let stored = try #require(try await fixture.memory?.gorush.hook(server: server.uuid))
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
}
