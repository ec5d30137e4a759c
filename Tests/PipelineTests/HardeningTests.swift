import DevStack
import FakeProviders
import Foundation
import PushCrypto
import ServiceKit
import Synchronization
import PushModels
import Testing

#if canImport(Glibc)
    import Glibc
#endif

extension StackTests {
    /// Regression tests for the findings of the hardening review (issue 8), one per
    /// finding, against the real services.
    @Suite(.serialized) struct HardeningTests {
        /// An extra ingest with the per-address limits, short timeouts and closed
        /// registration that the shared one cannot have (every test shares 127.0.0.1).
        static let strict = Mutex<Task<(api: String, ops: String), any Error>?>(nil)

        static func strictIngest(_ stack: Stack) async throws -> (api: String, ops: String) {
            let task = strict.withLock { task in
                if let task { return task }
                let new = Task {
                    try await stack.launchExtraIngest(
                        [
                            "PUSHRELAY_AUTH_FAILURES_MAX": "5",
                            "PUSHRELAY_SERVER_REGISTRATIONS_MAX": "3",
                            "PUSHRELAY_SERVER_REGISTRATION": "closed",
                            "PUSHRELAY_HTTP_CLIENT_IP_HEADER": "X-Test-Client",
                            "PUSHRELAY_HTTP_HEADER_TIMEOUT_MS": "1000",
                            "PUSHRELAY_HTTP_BODY_TIMEOUT_MS": "1000",
                        ], name: "strict")
                }
                task = new
                return new
            }
            return try await task.value
        }

        static func randomAddress() -> String {
            "10.\(UInt8.random(in: 0...255)).\(UInt8.random(in: 0...255)).\(UInt8.random(in: 1...254))"
        }

        // MARK: the remote crash

        @Test func registrationTimestampsAtTheEdgesAreRefusedNotFatal() async throws {
            let stack = try await Stack.get()
            let realm = try await RealmClient.registered(stack)
            let now = Int64(Date().timeIntervalSince1970)
            let hostile: [Int64] = [.min, .min + 1, -1, 0, now - 25 * 3600, now + 3600, .max]
            for timestamp in hostile {
                let sealed = try realm.sealedRegistration(
                    kind: "fcm", token: RealmClient.fcmToken(), appID: nil, timestamp: timestamp)
                let bouncer = try await HTTP.send(
                    "POST", "\(stack.ingestURL)/api/v1/remotes/push/e2ee/register",
                    json: [
                        "realm_uuid": .string(realm.realmUUID), "push_account_id": 1,
                        "encrypted_push_registration": .string(sealed),
                        "bouncer_public_key": .string(stack.bouncerPublicKey),
                    ], auth: realm.auth)
                #expect(bouncer.status == 400, "timestamp \(timestamp)")
                #expect(bouncer.code == (timestamp < now ? "REQUEST_EXPIRED" : "BAD_REQUEST"))
                let native = try await HTTP.send(
                    "POST", "\(stack.ingestURL)/v1/devices",
                    json: [
                        "realm_uuid": .string(realm.realmUUID), "user_id": 1,
                        "encrypted_push_registration": .string(sealed),
                        "bouncer_public_key": .string(stack.bouncerPublicKey),
                        "push_key": .string(try RealmClient.pushKey().base64),
                        "push_key_id": 1,
                    ], auth: realm.auth)
                #expect(native.status == 400, "timestamp \(timestamp)")
                #expect(stack.isRunning(.ingest))
            }
            // Within the window (a little clock skew included) it is accepted.
            for timestamp in [now - 23 * 3600, now + 60] {
                let sealed = try realm.sealedRegistration(
                    kind: "fcm", token: RealmClient.fcmToken(), appID: nil, timestamp: timestamp)
                let reply = try await HTTP.send(
                    "POST", "\(stack.ingestURL)/api/v1/remotes/push/e2ee/register",
                    json: [
                        "realm_uuid": .string(realm.realmUUID), "push_account_id": 2,
                        "encrypted_push_registration": .string(sealed),
                        "bouncer_public_key": .string(stack.bouncerPublicKey),
                    ], auth: realm.auth)
                #expect(reply.status == 200, "timestamp \(timestamp): \(reply.code ?? "")")
            }
        }

        // MARK: arithmetic on outside numbers

        @Test func settingsThatMakeNoSenseStopTheServiceAtStart() async throws {
            let stack = try await Stack.get()
            let checked = SettingsCatalog.check([
                "PUSHRELAY_RATELIMIT_WINDOW_SECONDS": "0", "PUSHRELAY_REDIS_PORT": "70000",
                "PUSHRELAY_RETRY_DELAYS": "5x", "PUSHRELAY_RETRY_JITTER": "nan", "PUSHRELAY_HTTP_PORT": "8080",
            ])
            #expect(checked.errors.count == 4)
            #expect(checked.errors.contains { $0.hasPrefix("PUSHRELAY_RATELIMIT_WINDOW_SECONDS=0") })
            // The real binary exits non-zero, naming the variable, instead of serving with a default.
            var environment = stack.environment(for: .ingest)
            environment["PUSHRELAY_HTTP_PORT"] = "\(try Stack.freePort())"
            environment["PUSHRELAY_OPS_PORT"] = "\(try Stack.freePort())"
            environment["PUSHRELAY_RATELIMIT_WINDOW_SECONDS"] = "0"
            let log = "\(stack.directory)/ingest-badconfig.log"
            let process = try Stack.launch("\(stack.binDirectory)/ingest", [], environment: environment, log: log)
            try await Stack.waitFor("the misconfigured ingest to exit", timeout: .seconds(30)) { !process.isRunning }
            #expect(process.terminationStatus != 0)
            let text = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
            #expect(text.contains("PUSHRELAY_RATELIMIT_WINDOW_SECONDS"))
        }

        @Test func hugeRetryAfterIsClampedNotFatal() {
            let schedule = RetrySchedule(delays: [.seconds(1), .seconds(60)], maxAttempts: 6)
            let now = Wire.nowMillis()
            for retryAfter: Duration in [.seconds(Int64.max), .seconds(-5), .seconds(86_400 * 365)] {
                let plan = schedule.plan(afterAttempt: Int.max, retryAfter: retryAfter, nowMs: now, random: 1)
                #expect(plan.dueAtMs <= now + 86_400_000 + 60_000 * 2)
                #expect(plan.dueAtMs >= now)
            }
            let late = schedule.plan(afterAttempt: 1, retryAfter: nil, nowMs: .max, random: 1)
            #expect(late.dueAtMs == .max)
            #expect(Duration.seconds(Int64.max).saturatingMilliseconds == .max)
            #expect(Int64.min.saturatingSubtract(1) == .min)
        }

        // MARK: amplification

        @Test func notifyFanOutIsBoundedAndDuplicatesCollapse() async throws {
            let stack = try await Stack.get()
            let realm = try await RealmClient.registered(stack)
            let token = RealmClient.fcmToken()
            let device = try await realm.device(userID: 5, kind: "fcm", token: token, key: try RealmClient.pushKey())
            let payload = realm.messagePayload(userID: 5, messageID: 9)

            let tooMany = try await realm.notify(userID: 5, payload: payload, deviceIDs: Array(1...101))
            #expect(tooMany.status == 413)
            #expect(tooMany.code == "TOO_MANY_DEVICES")
            let huge = try await realm.notify(userID: 5, payload: payload, deviceIDs: Array(1...20_000))
            #expect(huge.status == 413)

            // 2,000 copies of one id plus an unknown id repeated: one push, one listed id.
            let unknown: Int64 = 9_000_000_000
            let ids = Array(repeating: device, count: 60) + [unknown, unknown]
            let reply = try await realm.notify(userID: 5, payload: payload, deviceIDs: ids)
            #expect(reply.status == 202)
            #expect(reply.json["device_count"] == 1)
            #expect(reply.json["delete_device_ids"] == .array([.int(unknown)]))
            let flood = try await realm.notify(
                userID: 5, payload: payload, deviceIDs: Array(repeating: device, count: 2000))
            #expect(flood.status == 202, "the limit counts distinct devices")
            #expect(flood.json["device_count"] == 1)

            // Two notifications accepted, each naming the device many times: two pushes.
            _ = try await stack.waitForPushes("fcm") { $0.filter { $0.token == token }.count >= 2 }
            try await Task.sleep(for: .seconds(1))
            let all = try await stack.received("fcm").filter { $0.token == token }
            #expect(all.count == 2, "each notification reaches the device once, however often it is named")

            // The bouncer API collapses repeated device ids the same way.
            let bouncerItems: [JSONValue] = Array(
                repeating: ["device_id": .int(device), "payload": ["push_key_id": 1, "encrypted_data": "AAAA"]],
                count: 3)
            let bouncer = try await HTTP.send(
                "POST", "\(stack.ingestURL)/api/v1/remotes/push/e2ee/notify",
                json: ["realm_uuid": .string(realm.realmUUID), "push_requests": .array(bouncerItems)], auth: realm.auth)
            #expect(bouncer.status == 200)
            #expect(bouncer.json["android_successfully_sent_count"] == 1)
        }

        // MARK: slow clients

        @Test func slowClientsAreCutAndCounted() async throws {
            let stack = try await Stack.get()
            let strict = try await Self.strictIngest(stack)
            let port = try #require(URL(string: strict.api)?.port)
            let start = ContinuousClock.now
            // Headers that never end: the header timeout (1 s here) from the connection's start closes it.
            let trickle = try RawConnection(port: port)
            try trickle.send("POST /v1/notify HTTP/1.1\r\nHost: x\r\n")
            #expect(trickle.waitForClose(timeout: .seconds(10)), "header timeout closes the connection")
            let headerClosed = ContinuousClock.now - start
            #expect(headerClosed >= .milliseconds(900), "closed after \(headerClosed), before the header timeout")
            // A body that never arrives: the body timeout (1 s here) from the head closes it.
            let bodyStart = ContinuousClock.now
            let stalled = try RawConnection(port: port)
            try stalled.send(
                "POST /v1/notify HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"a\""
            )
            #expect(stalled.waitForClose(timeout: .seconds(10)), "body timeout closes the connection")
            let bodyClosed = ContinuousClock.now - bodyStart
            #expect(bodyClosed >= .milliseconds(900), "closed after \(bodyClosed), before the body timeout")
            #expect(ContinuousClock.now - start < .seconds(15))
            let metrics = String(decoding: try await HTTP.get("\(strict.ops)/metrics").body, as: UTF8.self)
            #expect(metrics.contains("pushrelay_http_slow_clients_total"))
            #expect(metrics.contains(#"phase="header""#))
            #expect(metrics.contains(#"phase="body""#))
        }

        // MARK: bodies over the limit

        /// A body over the limit is answered 413 at once and the connection closed: the server
        /// neither waits for the rest (the body timeout is 30 s on the shared ingest) nor reads it.
        @Test func aBodyOverTheLimitIsAnsweredAtOnceAndTheConnectionClosed() async throws {
            let stack = try await Stack.get()
            let realm = try await RealmClient.registered(stack)
            let port = try #require(URL(string: stack.ingestURL)?.port)
            let credentials = Data("\(realm.serverUUID):\(realm.apiKey)".utf8).base64EncodedString()
            func head(_ framing: String) -> String {
                "POST /api/v1/remotes/push/e2ee/register HTTP/1.1\r\nHost: x\r\nAuthorization: Basic \(credentials)\r\n"
                    + "Content-Type: application/json\r\n\(framing)\r\n\r\n"
            }
            func expectRefused(_ connection: RawConnection, since start: ContinuousClock.Instant, _ what: String) {
                let answer = Self.parseAnswer(connection.readAll(timeout: .seconds(5)))
                let took = ContinuousClock.now - start
                print("413 for \(what) after \(took)")
                #expect(answer.status == "413", "\(what)")
                #expect(answer.json?["result"] == "error", "\(what)")
                #expect(answer.json?["code"] == "REQUEST_TOO_LARGE", "\(what)")
                #expect(answer.json?["msg"]?.stringValue?.isEmpty == false, "\(what)")
                #expect(answer.headers["connection"] == "close", "\(what)")
                #expect(took < .seconds(1), "\(what): answered after \(took)")
                // A client that stops sending is closed 2 s (the linger) after its last byte; one
                // that sends the whole body it declared, right after it (the fuzz tests' client).
                #expect(connection.waitForClose(timeout: .seconds(3)), "\(what): the connection closes")
            }
            // A declared length over the 256 KiB limit, and 1 KiB of the body sent.
            let declared = try RawConnection(port: port)
            let declaredStart = ContinuousClock.now
            try declared.send(
                head("Content-Length: 10000000") + #"{"realm_uuid":""# + String(repeating: "a", count: 1024))
            expectRefused(declared, since: declaredStart, "Content-Length over the limit")
            // No length (chunked): refused once the count passes the limit; the final chunk never comes.
            let chunked = try RawConnection(port: port)
            let chunk = String(repeating: "a", count: 300 * 1024)
            let chunkedStart = ContinuousClock.now
            try chunked.send(
                head("Transfer-Encoding: chunked") + "\(String(chunk.utf8.count, radix: 16))\r\n\(chunk)\r\n")
            expectRefused(chunked, since: chunkedStart, "a chunked body over the limit")
            #expect(stack.isRunning(.ingest))
        }

        /// Status code, header fields (lowercased names) and JSON body of a raw HTTP answer.
        static func parseAnswer(_ text: String) -> (status: String, headers: [String: String], json: JSONValue?) {
            let parts = text.components(separatedBy: "\r\n\r\n")
            let lines = (parts.first ?? "").components(separatedBy: "\r\n")
            let status = lines.first?.split(separator: " ").dropFirst().first.map(String.init) ?? ""
            var headers: [String: String] = [:]
            for line in lines.dropFirst() {
                guard let colon = line.firstIndex(of: ":") else { continue }
                let value = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
                headers[line[..<colon].lowercased()] = value
            }
            let body = parts.dropFirst().joined(separator: "\r\n\r\n")
            return (status, headers, try? Wire.decode(JSONValue.self, from: Array(body.utf8)))
        }

        @Test func bytesThatAreNotHTTPGetAJSONError() async throws {
            let stack = try await Stack.get()
            let port = try #require(URL(string: stack.ingestURL)?.port)
            for raw in [
                "FUZZ /v1/notify HTTP/1.1\r\nHost: x\r\n\r\n", "\u{0}\u{1}\u{2}garbage\r\n\r\n",
                "GET /v1/devices HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n",
            ] {
                let connection = try RawConnection(port: port)
                try connection.send(raw)
                let answer = connection.readAll(timeout: .seconds(5))
                let status = answer.split(separator: " ").dropFirst().first.map(String.init) ?? ""
                #expect(status.hasPrefix("4"), "\(raw.debugDescription): \(answer.prefix(80).debugDescription)")
                let body = answer.components(separatedBy: "\r\n\r\n").dropFirst().joined(separator: "\r\n\r\n")
                let json = try? Wire.decode(JSONValue.self, from: Array(body.utf8))
                #expect(json?["result"] == "error", "\(raw.debugDescription): \(answer.debugDescription)")
                #expect(json?["code"]?.stringValue != nil)
            }
            // A response to CONNECT carries no body (RFC 9110 §9.3.6; NIO frames it so): 405 and close.
            let connect = try RawConnection(port: port)
            try connect.send("CONNECT /v1/devices HTTP/1.1\r\nHost: x\r\n\r\n")
            #expect(connect.readAll(timeout: .seconds(5)).hasPrefix("HTTP/1.1 405"))
            #expect(stack.isRunning(.ingest))
        }

        // MARK: authentication and registration throttles

        @Test func failedAuthenticationIsLimitedPerAddressAndAnsweredAlike() async throws {
            let stack = try await Stack.get()
            let strict = try await Self.strictIngest(stack)
            let realm = try await RealmClient.registered(stack)
            let address = Self.randomAddress()
            let url = "\(strict.api)/v1/feedback?realm_uuid=\(realm.realmUUID)"
            func get(_ auth: (String, String)?, from client: String, raw: String? = nil) async throws -> HTTP.Reply {
                var headers = [("X-Test-Client", client)]
                if let raw { headers.append(("Authorization", raw)) }
                return try await HTTP.send("GET", url, body: nil, auth: auth, headers: headers)
            }
            let wrongKey = try await get((realm.serverUUID, String(repeating: "x", count: 64)), from: address)
            let unknownServer = try await get((UUID().uuidString, realm.apiKey), from: address)
            let malformed = try await get(nil, from: address, raw: "Basic !!!")
            let missing = try await get(nil, from: address)
            for reply in [wrongKey, unknownServer, malformed, missing] {
                #expect(reply.status == 401)
                #expect(reply.body == wrongKey.body, "every failure is answered alike")
            }
            _ = try await get((realm.serverUUID, "y"), from: address)
            let locked = try await get(realm.auth, from: address)
            #expect(locked.status == 429, "past the limit even the right key waits")
            #expect(locked.code == "TOO_MANY_FAILED_AUTHENTICATIONS")
            #expect(locked.headers.contains { $0.0.lowercased() == "retry-after" })
            let other = try await get(realm.auth, from: Self.randomAddress())
            #expect(other.status == 200, "other addresses are not affected")
        }

        @Test func parallelGuessesCannotSlipPastTheLimit() async throws {
            let stack = try await Stack.get()
            let strict = try await Self.strictIngest(stack)
            let realm = try await RealmClient.registered(stack)
            let address = Self.randomAddress()
            let replies = try await withThrowingTaskGroup(of: Int.self) { group in
                for i in 0..<30 {
                    group.addTask {
                        try await HTTP.send(
                            "GET", "\(strict.api)/v1/feedback?realm_uuid=\(realm.realmUUID)", body: nil,
                            auth: (realm.serverUUID, String(repeating: "g", count: 63) + "\(i % 10)"),
                            headers: [("X-Test-Client", address)]
                        ).status
                    }
                }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            #expect(replies.filter { $0 == 401 }.count <= 5, "at most the limit is checked: \(replies.sorted())")
            #expect(replies.filter { $0 == 429 }.count >= 25)
        }

        @Test func serverRegistrationIsThrottledAndCanBeClosed() async throws {
            let stack = try await Stack.get()
            let strict = try await Self.strictIngest(stack)
            let address = Self.randomAddress()
            let existing = try await RealmClient.registered(stack)
            func register(_ client: RealmClient) async throws -> HTTP.Reply {
                let form =
                    "zulip_org_id=\(client.serverUUID)&zulip_org_key=\(client.apiKey)&hostname=zulip.example.com&contact_email=admin%40example.com"
                return try await HTTP.send(
                    "POST", "\(strict.api)/api/v1/remotes/server/register", body: Array(form.utf8),
                    contentType: "application/x-www-form-urlencoded", headers: [("X-Test-Client", address)])
            }
            let closed = try await register(RealmClient(stack: stack))
            #expect(closed.status == 403)
            #expect(closed.code == "REGISTRATION_CLOSED")
            let update = try await register(existing)
            #expect(update.status == 200, "a known server may still update itself")
            _ = try await register(RealmClient(stack: stack))
            let throttled = try await register(RealmClient(stack: stack))
            #expect(throttled.status == 429)
            #expect(throttled.code == "TOO_MANY_REGISTRATIONS")
        }

        @Test func adminRegistersServersAndRealmsByHand() async throws {
            let stack = try await Stack.get()
            let strict = try await Self.strictIngest(stack)
            func admin(_ arguments: [String]) throws -> (status: Int32, output: String) {
                let process = Process()
                process.executableURL = URL(fileURLWithPath: "\(stack.binDirectory)/pushrelay")
                process.arguments = arguments
                process.environment = ProcessInfo.processInfo.environment.merging(stack.environment(for: .ingest)) {
                    _, new in new
                }
                let pipe = Pipe()
                process.standardOutput = pipe
                process.standardError = pipe
                try process.run()
                let data = pipe.fileHandleForReading.readDataToEndOfFile()
                process.waitUntilExit()
                return (process.terminationStatus, String(decoding: data, as: UTF8.self))
            }
            let created = try admin([
                "servers", "register", "--hostname", "chat.example.com", "--contact-email", "ops@example.com",
            ])
            #expect(created.status == 0, "\(created.output)")
            var values: [String: String] = [:]
            for line in created.output.split(separator: "\n") {
                let parts = line.split(separator: "=", maxSplits: 1)
                if parts.count == 2 { values[String(parts[0])] = String(parts[1]) }
            }
            let server = try #require(values["server_uuid"])
            let key = try #require(values["api_key"])
            #expect(key.utf8.count == 64)
            let realm = UUID().uuidString.lowercased()
            #expect(try admin(["realms", "register", "--server", server, "--realm", realm]).status == 0)
            #expect(try admin(["realms", "register", "--server", UUID().uuidString, "--realm", realm]).status != 0)
            let reply = try await HTTP.send(
                "GET", "\(strict.api)/v1/feedback?realm_uuid=\(realm)", body: nil, auth: (server, key),
                headers: [("X-Test-Client", Self.randomAddress())])
            #expect(reply.status == 200, "a server registered by hand works where registration is closed")
            #expect(
                try admin(["servers", "register", "--hostname", "bad host", "--contact-email", "x@y.z"]).status == 64)

            // The operator's view: listed, shown without its key, deactivated.
            let listed = try admin(["servers", "list", "--output", "json"])
            let servers = try Wire.decode(JSONValue.self, from: Array(listed.output.utf8))["servers"]?.arrayValue ?? []
            let mine = try #require(servers.first { $0["server_uuid"]?.stringValue == server }, "\(listed.output)")
            #expect(mine["hostname"] == "chat.example.com" && mine["active"] == true && mine["realms"] == 1)
            let shown = try admin(["servers", "show", server])
            #expect(
                shown.status == 0 && shown.output.contains("chat.example.com") && shown.output.contains("realms      1")
            )
            #expect(!shown.output.contains(key) && !listed.output.contains(key), "never the key")
            #expect(try admin(["servers", "show", UUID().uuidString]).status == 2, "no such server: 2")
            #expect(try admin(["servers", "deactivate", server]).status == 0)
            // Every instance stops taking it within a lease (1 s).
            try await Stack.waitFor("the deactivated server to be refused", timeout: .seconds(10)) {
                (try? await HTTP.send(
                    "GET", "\(strict.api)/v1/feedback?realm_uuid=\(realm)", body: nil, auth: (server, key),
                    headers: [("X-Test-Client", Self.randomAddress())]))?.status == 401
            }
            let after = try admin(["servers", "show", server, "--output", "json"])
            #expect(try Wire.decode(JSONValue.self, from: Array(after.output.utf8))["active"] == false)
            let indexed = try admin(["servers", "index-hostnames", "--quiet"])
            #expect(indexed.status == 0 && indexed.output.hasPrefix("indexed "), "\(indexed.output)")
            // Shell completion, from ArgumentParser: every subcommand is offered.
            let completion = try admin(["--generate-completion-script", "bash"])
            #expect(completion.status == 0)
            for command in ["servers", "devices", "send-test", "topics", "deadletter", "trace", "replay"] {
                #expect(completion.output.contains(command), "completion offers \(command)")
            }
        }

        // MARK: realm ownership

        @Test func realmsBelongToServersOnlyByRegistration() async throws {
            let stack = try await Stack.get()
            let alice = try await RealmClient.registered(stack)
            let mallory = try await RealmClient.registered(stack)
            let fresh = UUID().uuidString.lowercased()
            // First use no longer claims a realm.
            let squat = try await HTTP.send(
                "POST", "\(stack.ingestURL)/v1/notify",
                json: [
                    "realm_uuid": .string(fresh), "user_id": 1,
                    "payload": mallory.messagePayload(userID: 1, messageID: 1),
                ],
                auth: mallory.auth)
            #expect(squat.status == 404)
            #expect(squat.code == "REALM_NOT_FOUND")
            let claimed = try await alice.registerRealm(fresh)
            #expect(claimed.status == 201)
            #expect(try await alice.registerRealm(fresh).status == 200)
            let taken = try await mallory.registerRealm(fresh)
            #expect(taken.status == 409)
            let other = try await HTTP.send(
                "POST", "\(stack.ingestURL)/v1/notify",
                json: [
                    "realm_uuid": .string(fresh), "user_id": 1,
                    "payload": mallory.messagePayload(userID: 1, messageID: 1),
                ],
                auth: mallory.auth)
            #expect(other.status == squat.status)
            #expect(other.body == squat.body, "not yours and not found answer the same")

            // Zulip: the realm arrives with the server's analytics upload; before it, MISSING_REMOTE_REALM.
            let zulipRealm = UUID().uuidString.lowercased()
            let sealed = try alice.sealedRegistration(kind: "fcm", token: RealmClient.fcmToken(), appID: nil)
            func register() async throws -> HTTP.Reply {
                try await HTTP.send(
                    "POST", "\(stack.ingestURL)/api/v1/remotes/push/e2ee/register",
                    json: [
                        "realm_uuid": .string(zulipRealm), "push_account_id": 7,
                        "encrypted_push_registration": .string(sealed),
                        "bouncer_public_key": .string(stack.bouncerPublicKey),
                    ], auth: alice.auth)
            }
            #expect(try await register().code == "MISSING_REMOTE_REALM")
            let realmsJSON = String(
                decoding: Wire.canonical([["uuid": .string(zulipRealm), "host": "chat.example.com"]]), as: UTF8.self)
            let upload = try await HTTP.send(
                "POST", "\(stack.ingestURL)/api/v1/remotes/server/analytics",
                body: Array(
                    "realm_counts=%5B%5D&installation_counts=%5B%5D&realms=\(realmsJSON.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? "")"
                        .utf8),
                contentType: "application/x-www-form-urlencoded", auth: alice.auth)
            #expect(upload.status == 200)
            #expect(upload.json["realms"]?[zulipRealm]?["can_push"] == true)
            #expect(try await register().status == 200)
        }

        // MARK: bad input answered 400, never 500

        @Test func feedbackCursorsAndLimitsAreValidated() async throws {
            let stack = try await Stack.get()
            let realm = try await RealmClient.registered(stack)
            for after in [
                "-1-2", "1--2", "%D9%A1-1", "99999999999999999999999-1", "1-", "-", "1-2-3", "%2B1-2", "",
                "18446744073709551615-18446744073709551615",
            ] {
                let reply = try await HTTP.get(
                    "\(stack.ingestURL)/v1/feedback?realm_uuid=\(realm.realmUUID)&after=\(after)", auth: realm.auth)
                #expect(reply.status == 400, "after=\(after)")
                #expect(reply.code == "BAD_REQUEST")
            }
            for limit in ["0", "-1", "1001", "abc", "99999999999999999999"] {
                let reply = try await HTTP.get(
                    "\(stack.ingestURL)/v1/feedback?realm_uuid=\(realm.realmUUID)&limit=\(limit)", auth: realm.auth)
                #expect(reply.status == 400, "limit=\(limit)")
            }
            #expect(try await realm.feedback(after: "0-0").status == 200)
        }

        @Test func hostileFieldValuesAreRefused() async throws {
            let stack = try await Stack.get()
            let realm = try await RealmClient.registered(stack)
            func registerServer(hostname: String) async throws -> HTTP.Reply {
                try await HTTP.send(
                    "POST", "\(stack.ingestURL)/api/v1/remotes/server/register",
                    json: [
                        "zulip_org_id": .string(realm.serverUUID), "zulip_org_key": .string(realm.apiKey),
                        "hostname": .string(hostname), "contact_email": "admin@example.com",
                    ])
            }
            let marks = "a" + String(repeating: "\u{0301}", count: 200)
            for hostname in ["chat\u{0}.example.com", "chat.example.com\r\nX-Evil: 1", marks, "chat example.com", ""] {
                let reply = try await registerServer(hostname: hostname)
                #expect(reply.status == 400, "hostname \(hostname.debugDescription.prefix(40))")
                #expect(reply.json["field"] == "hostname")
            }
            #expect(try await registerServer(hostname: "chat.example.com:8443").status == 200)

            func device(token: String, kind: String, appID: String?) async throws -> HTTP.Reply {
                try await realm.registerDevice(
                    userID: 3, kind: kind, token: token, appID: appID, key: try RealmClient.pushKey(), keyID: 1)
            }
            let apns = RealmClient.apnsToken()
            for appID in [
                "org.zulip\r\nx", "org.zulip.Zulip\u{0}", "Zulip", "org..zulip", "org.zulip.Zulip/../x",
                String(repeating: "a.", count: 100) + "b",
            ] {
                let reply = try await device(token: apns, kind: "apns", appID: appID)
                #expect(reply.status == 400, "ios_app_id \(appID.debugDescription.prefix(40))")
                #expect(reply.code == "INVALID_APP_ID")
            }
            for (kind, token) in [
                ("fcm", "abc\u{0}def"), ("fcm", "abc\r\ndef"), ("fcm", marks), ("apns", "abcd"),
                ("apns", String(repeating: "ab", count: 101)),
            ] {
                let reply = try await device(token: token, kind: kind, appID: kind == "apns" ? "org.zulip.Zulip" : nil)
                #expect(reply.status == 400, "\(kind) token \(token.debugDescription.prefix(40))")
                #expect(reply.code == "INVALID_TOKEN")
            }
            // Pass-through payloads: base64 ciphertext and a 32-bit key id, nothing else.
            for payload: JSONValue in [
                ["push_key_id": 1, "encrypted_data": "AAAA\u{0}"], ["push_key_id": -1, "encrypted_data": "AAAA"],
                ["push_key_id": 4_294_967_296, "encrypted_data": "AAAA"], ["push_key_id": 1, "encrypted_data": ""],
            ] {
                let reply = try await HTTP.send(
                    "POST", "\(stack.ingestURL)/api/v1/remotes/push/e2ee/notify",
                    json: [
                        "realm_uuid": .string(realm.realmUUID),
                        "push_requests": [["device_id": 1, "payload": payload]],
                    ],
                    auth: realm.auth)
                #expect(reply.status == 400, "\(payload)")
            }
            // API keys with control characters never authenticate (and never reach Redis).
            let nul = try await HTTP.get(
                "\(stack.ingestURL)/v1/feedback?realm_uuid=\(realm.realmUUID)",
                auth: (realm.serverUUID, realm.apiKey + "\u{0}"))
            #expect(nul.status == 401)
            #expect(stack.isRunning(.ingest))
        }

        @Test func aDeviceKeepsAtMostThreePushKeys() async throws {
            let stack = try await Stack.get()
            let realm = try await RealmClient.registered(stack)
            let token = RealmClient.fcmToken()
            var device: Int64 = 0
            for keyID in Int64(1)...8 {
                device = try await realm.device(
                    userID: 14, kind: "fcm", token: token, key: try RealmClient.pushKey(), keyID: keyID)
            }
            let listed = try await HTTP.get(
                "\(stack.ingestURL)/v1/devices?realm_uuid=\(realm.realmUUID)&user_id=14", auth: realm.auth)
            let entry = try #require(listed.json["devices"]?.arrayValue?.first)
            #expect(entry["device_id"]?.intValue == device)
            #expect(entry["push_key_ids"] == [6, 7, 8])
            #expect(entry["current_push_key_id"] == 8)
        }

        // MARK: Kafka down, idempotency, ops port

        @Test func notifyAnswers503WithinTheBoundWhenKafkaIsUnreachable() async throws {
            let stack = try await Stack.get()
            let realm = try await RealmClient.registered(stack)
            _ = try await realm.device(
                userID: 8, kind: "fcm", token: RealmClient.fcmToken(), key: try RealmClient.pushKey())
            let noKafka = try await stack.launchExtraIngest(
                [
                    "PUSHRELAY_KAFKA_BROKERS": "127.0.0.1:\(try Stack.freePort())",
                    "PUSHRELAY_NOTIFY_PUBLISH_TIMEOUT_MS": "2000",
                ],
                name: "nokafka", ready: false)
            let start = ContinuousClock.now
            let reply = try await HTTP.send(
                "POST", "\(noKafka.api)/v1/notify",
                json: [
                    "realm_uuid": .string(realm.realmUUID), "user_id": 8,
                    "payload": realm.messagePayload(userID: 8, messageID: 1),
                ],
                auth: realm.auth)
            let took = ContinuousClock.now - start
            #expect(reply.status == 503)
            #expect(reply.code == "SERVICE_UNAVAILABLE")
            #expect(took < .seconds(5), "answered in \(took)")
        }

        @Test func idempotencyKeyGivesTheFirstAnswerAndOnePush() async throws {
            let stack = try await Stack.get()
            let realm = try await RealmClient.registered(stack)
            let token = RealmClient.fcmToken()
            _ = try await realm.device(userID: 12, kind: "fcm", token: token, key: try RealmClient.pushKey())
            let body: JSONValue = [
                "realm_uuid": .string(realm.realmUUID), "user_id": 12,
                "payload": realm.messagePayload(userID: 12, messageID: 77),
            ]
            let key = UUID().uuidString
            let first = try await HTTP.send(
                "POST", "\(stack.ingestURL)/v1/notify", json: body, auth: realm.auth,
                headers: [("Idempotency-Key", key)])
            let again = try await HTTP.send(
                "POST", "\(stack.ingestURL)/v1/notify", json: body, auth: realm.auth,
                headers: [("Idempotency-Key", key)])
            #expect(first.status == 202)
            #expect(again.status == 202)
            #expect(again.json["notification_id"] == first.json["notification_id"])
            let changed: JSONValue = [
                "realm_uuid": .string(realm.realmUUID), "user_id": 12,
                "payload": realm.messagePayload(userID: 12, messageID: 78),
            ]
            let reused = try await HTTP.send(
                "POST", "\(stack.ingestURL)/v1/notify", json: changed, auth: realm.auth,
                headers: [("Idempotency-Key", key)]
            )
            #expect(reused.status == 422)
            #expect(reused.code == "IDEMPOTENCY_KEY_REUSED")
            let bad = try await HTTP.send(
                "POST", "\(stack.ingestURL)/v1/notify", json: body, auth: realm.auth,
                headers: [("Idempotency-Key", "a b")])
            #expect(bad.status == 400)
            _ = try await stack.waitForPushes("fcm") { $0.contains { $0.token == token } }
            try await Task.sleep(for: .seconds(1))
            #expect(try await stack.received("fcm").filter { $0.token == token }.count == 1)
        }

        @Test func concurrentRetriesWithOneIdempotencyKeyMakeOneNotification() async throws {
            let stack = try await Stack.get()
            let realm = try await RealmClient.registered(stack)
            let token = RealmClient.fcmToken()
            _ = try await realm.device(userID: 15, kind: "fcm", token: token, key: try RealmClient.pushKey())
            let body: JSONValue = [
                "realm_uuid": .string(realm.realmUUID), "user_id": 15,
                "payload": realm.messagePayload(userID: 15, messageID: 5),
            ]
            let key = UUID().uuidString
            let replies = try await withThrowingTaskGroup(of: HTTP.Reply.self) { group in
                for _ in 0..<8 {
                    group.addTask {
                        try await HTTP.send(
                            "POST", "\(stack.ingestURL)/v1/notify", json: body, auth: realm.auth,
                            headers: [("Idempotency-Key", key)])
                    }
                }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            let accepted = replies.filter { $0.status == 202 }
            #expect(!accepted.isEmpty)
            #expect(
                Set(accepted.map { $0.json["notification_id"] }).count == 1, "every 202 names the same notification")
            #expect(
                replies.allSatisfy { $0.status == 202 || ($0.status == 409 && $0.code == "IDEMPOTENCY_KEY_IN_USE") })
            _ = try await stack.waitForPushes("fcm") { $0.contains { $0.token == token } }
            try await Task.sleep(for: .seconds(1))
            #expect(try await stack.received("fcm").filter { $0.token == token }.count == 1)
        }

        @Test func metricsAndHealthLiveOnTheOpsPortOnly() async throws {
            let stack = try await Stack.get()
            // The API port's /metrics is gorush's (per server, with its key), not the relay's.
            #expect(try await HTTP.get("\(stack.ingestURL)/metrics").status == 401)
            #expect(try await HTTP.get("\(stack.ingestURL)/health/ready").status == 404)
            #expect(try await HTTP.get("\(stack.opsURL(.ingest))/metrics").status == 200)
            #expect(try await HTTP.get("\(stack.opsURL(.ingest))/health/ready").status == 200)
        }
    }
}

/// A plain TCP connection for speaking broken HTTP on purpose.
final class RawConnection {
    let fd: Int32

    init(port: Int) throws {
        fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard connected == 0 else { throw StackError("cannot connect to \(port)") }
    }

    deinit { close(fd) }

    func send(_ text: String) throws {
        let bytes = Array(text.utf8)
        guard write(fd, bytes, bytes.count) == bytes.count else { throw StackError("short write") }
    }

    /// What the peer sends until it closes the connection or `timeout` passes.
    func readAll(timeout: Duration) -> String {
        let deadline = ContinuousClock.now + timeout
        var received: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while ContinuousClock.now < deadline {
            var poller = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            guard poll(&poller, 1, 200) >= 0 else { break }
            if poller.revents != 0 {
                let n = read(fd, &buffer, buffer.count)
                if n <= 0 { break }
                received += buffer[0..<n]
                // One answer is enough: stop once a whole body by Content-Length has arrived.
                let text = String(decoding: received, as: UTF8.self)
                if let range = text.range(of: "\r\n\r\n"),
                    let lengthLine = text[..<range.lowerBound].split(separator: "\r\n").first(where: {
                        $0.lowercased().hasPrefix("content-length:")
                    }),
                    let length = Int(
                        lengthLine.dropFirst("content-length:".count).trimmingCharacters(in: .whitespaces)),
                    text[range.upperBound...].utf8.count >= length
                {
                    break
                }
            }
        }
        return String(decoding: received, as: UTF8.self)
    }

    /// True when the peer closes the connection within `timeout`.
    func waitForClose(timeout: Duration) -> Bool {
        let deadline = ContinuousClock.now + timeout
        var buffer = [UInt8](repeating: 0, count: 4096)
        while ContinuousClock.now < deadline {
            var poller = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            guard poll(&poller, 1, 200) >= 0 else { return true }
            if poller.revents != 0 {
                let n = read(fd, &buffer, buffer.count)
                if n <= 0 { return true }
            }
        }
        return false
    }
}
