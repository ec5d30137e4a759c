import DeviceState
import Foundation
import HTTPTypes
import Hummingbird
import NIOCore
import PushCrypto
import PushModels
import RedisClient
import ServiceKit

/// gorush's API settings (README, "Replace gorush").
public struct GorushSettings: Sendable {
    /// Most `notifications[]` entries in one call (gorush's `core.max_notification`).
    public var maxNotifications: Int
    /// Most tokens in one call, over all its notifications.
    public var maxTokens: Int
    /// The APNs topic (bundle id) of iOS notifications that give no `topic`.
    public var apnsTopic: String
    /// Answer only when every push has its outcome (gorush's `core.sync`), unless the call
    /// says `?sync=false`; otherwise only when a call says `?sync=true`.
    public var sync: Bool
    public var syncTimeout: Duration

    public init(reader: SettingsReader) throws {
        maxNotifications = try reader.int("pushrelay.gorush.max.notifications", default: 100)
        maxTokens = try reader.int("pushrelay.gorush.max.tokens", default: 1000)
        apnsTopic = try reader.string("pushrelay.gorush.apns.topic", default: "")
        sync = try reader.bool("pushrelay.gorush.sync", default: false)
        syncTimeout = try reader.milliseconds("pushrelay.gorush.sync.timeout.ms", default: 30_000)
    }
}

/// The gorush-compatible API: `POST /api/push` and gorush's status endpoints. Unlike
/// gorush, callers authenticate (the server's API key as HTTP Basic), the tokens they give
/// are registered under the server (so feedback and replay work for them), and a
/// notification is accepted once it is on Kafka: the answer comes before delivery unless
/// sync mode is asked for.
extension IngestAPI {
    static let gorushVersion = "pushrelay-1.0"
    // swift-format-ignore: NeverForceUnwrap
    static let versionHeader = HTTPField.Name("X-GORUSH-VERSION")!
    // swift-format-ignore: NeverForceUnwrap
    static let notificationIDsHeader = HTTPField.Name("X-PushRelay-Notification-Ids")!

    func addGorushRoutes(to router: Router<IngestContext>) {
        router.post("/api/push") { request, context in
            await gorushAnswer(request, context) { try await gorushPush(request, context: context) }
        }
        router.get("/api/stat/app") { request, context in
            await gorushAnswer(request, context) { try await gorushAppStats(request, context: context) }
        }
        router.get("/api/stat/go") { request, context in
            await gorushAnswer(request, context) {
                _ = try await authenticator.authenticate(request, context: context, api: .native)
                return jsonResponse(.ok, Self.runtimeStats())
            }
        }
        router.get("/api/config") { request, context in
            await gorushAnswer(request, context) { try await gorushConfig(request, context: context) }
        }
        router.put("/api/feedback-hook") { request, context in
            await gorushAnswer(request, context) { try await setFeedbackHook(request, context: context) }
        }
        router.get("/api/feedback-hook") { request, context in
            await gorushAnswer(request, context) { try await feedbackHook(request, context: context) }
        }
        router.delete("/api/feedback-hook") { request, context in
            await gorushAnswer(request, context) {
                let server = try await authenticator.authenticate(request, context: context, api: .native)
                try await servers.redis.command("DEL", RedisArgument(servers.keys.gorushHook(server: server)))
                return jsonResponse(.ok, ["url": .null])
            }
        }
        router.get("/healthz") { _, _ in Response(status: .ok) }
        router.head("/healthz") { _, _ in Response(status: .ok) }
        router.get("/version") { _, _ in
            jsonResponse(
                .ok, ["source": "https://github.com/pushrelay/pushrelay", "version": .string(Self.gorushVersion)])
        }
    }

    /// gorush's error shape, `{"code": <status>, "message": "…"}`, plus our machine-readable
    /// `error` code and the field at fault, for every failure.
    func gorushAnswer(_ request: Request, _ context: IngestContext, _ body: () async throws -> Response) async
        -> Response
    {
        var response: Response
        do {
            response = try await body()
        } catch {
            let error = ErrorMiddleware<IngestContext>.apiError(
                error, request: request, context: context,
                routes: RouteMethods([Router<IngestContext>.RouteDescription]()))
            var fields: [String: JSONValue] = [
                "code": .int(Int64(error.status.code)), "message": .string(error.message), "error": .string(error.code),
            ]
            if let field = error.field { fields["field"] = .string(field) }
            response = jsonResponse(error.status, .object(fields))
            response.headers.append(contentsOf: error.headers)
        }
        response.headers[Self.versionHeader] = Self.gorushVersion
        return response
    }

    /// The realm a server's gorush tokens live in: a UUID derived from the server's under
    /// the API-key pepper (so no other server can predict and claim it first), registered
    /// to it on first use.
    func gorushRealm(server: String) -> RealmID {
        let digest = Fingerprint.bytes(fromHex: pepper.hmacHex("pushrelay-gorush-realm:\(server)")) ?? []
        guard digest.count >= 16 else { return RealmID(UUID().uuidString.lowercased()) }
        var bytes = Array(digest.prefix(16))
        bytes[6] = (bytes[6] & 0x0f) | 0x80  // version 8 (RFC 9562: custom)
        bytes[8] = (bytes[8] & 0x3f) | 0x80
        let uuid = UUID(
            uuid: (
                bytes[0], bytes[1], bytes[2], bytes[3], bytes[4], bytes[5], bytes[6], bytes[7], bytes[8], bytes[9],
                bytes[10], bytes[11], bytes[12], bytes[13], bytes[14], bytes[15]
            ))
        return RealmID(uuid.uuidString.lowercased())
    }

    func ensureGorushRealm(server: String) async throws -> RealmID {
        let realm = gorushRealm(server: server)
        switch try await realms.register(realm.rawValue, to: server, maxRealms: limits.maxRealmsPerServer) {
        case .registered, .alreadyYours: return realm
        case .quotaExceeded: throw APIError.realmQuotaExceeded(limit: limits.maxRealmsPerServer)
        case .taken: throw APIError.internalError
        }
    }

    /// One entry of gorush's `logs`.
    static func gorushLog(_ notification: GorushNotification, token: String, error: String) -> JSONValue {
        var entry: [String: JSONValue] = [
            "type": "failed-push", "platform": .string(notification.platform.name),
            "token": .string(GorushNotification.maskedToken(token)), "message": .string(notification.message),
            "error": .string(error),
        ]
        if let id = notification.notificationID, !id.isEmpty { entry["notif_id"] = .string(id) }
        return .object(entry)
    }

    func gorushPush(_ request: Request, context: IngestContext) async throws -> Response {
        let server = try await authenticator.authenticate(request, context: context, api: .native)
        var request = request
        let bytes = Array(try await request.collectBody(upTo: limits.maxBodyBytes).readableBytesView)
        guard let json = try? Wire.decode(JSONValue.self, from: bytes), let list = json["notifications"]?.arrayValue
        else {
            throw APIError.badRequest(
                "Missing notifications field.", code: "MISSING_NOTIFICATIONS", field: "notifications")
        }
        guard !list.isEmpty else {
            throw APIError.badRequest(
                "Notifications field is empty.", code: "EMPTY_NOTIFICATIONS", field: "notifications")
        }
        guard list.count <= gorush.maxNotifications else {
            throw APIError.badRequest(
                "Number of notifications(\(list.count)) over limit(\(gorush.maxNotifications))",
                code: "TOO_MANY_NOTIFICATIONS", field: "notifications")
        }
        var notifications: [GorushNotification] = []
        for (index, entry) in list.enumerated() {
            do {
                let notification = try GorushNotification(validating: entry, path: "notifications[\(index)]")
                if notification.platform == .ios, notification.topic == nil, gorush.apnsTopic.isEmpty {
                    throw PayloadValidationError(
                        field: "notifications[\(index)].topic",
                        problem: "is required for iOS: your app's bundle id (apns-topic)")
                }
                notifications.append(notification)
            } catch let error as PayloadValidationError {
                throw APIError.invalid(error, code: "INVALID_NOTIFICATION")
            }
        }
        let tokenCount = notifications.reduce(0) { $0 + $1.tokens.count }
        guard tokenCount <= gorush.maxTokens else {
            throw APIError.badRequest(
                "Number of tokens(\(tokenCount)) over limit(\(gorush.maxTokens))", code: "TOO_MANY_TOKENS",
                field: "notifications")
        }
        let sync: Bool
        switch request.uri.queryParameters.get("sync") {
        case "true", "1": sync = true
        case "false", "0": sync = false
        default: sync = gorush.sync
        }
        let realm = try await ensureGorushRealm(server: server)
        var logs: [JSONValue] = []
        var waits: [(GorushNotification, NotificationID, [DeviceID: String])] = []
        var records: [PushRequestRecord] = []
        var notifIDs: [[RedisArgument]] = []
        for notification in notifications {
            var targets: [DeviceID: String] = [:]
            var order: [DeviceID] = []
            for token in notification.tokens {
                let deviceToken: DeviceToken
                do {
                    deviceToken = try DeviceToken(
                        provider: notification.platform.provider, value: token,
                        rules: notification.platform == .ios ? .zulip : .strict)
                } catch {
                    // What the provider would answer for it, without asking.
                    logs.append(
                        Self.gorushLog(
                            notification, token: token,
                            error: notification.platform == .ios ? "BadDeviceToken" : "InvalidRegistration"))
                    continue
                }
                let appID = notification.platform == .ios ? notification.topic ?? gorush.apnsTopic : nil
                let (id, _) = try await registerWithinQuota(
                    DeviceRegistration(
                        realmUUID: realm, userID: nil, token: deviceToken, appID: appID, pushAccountID: nil,
                        pushKey: nil),
                    server: server)
                if targets[id] == nil { order.append(id) }
                targets[id] = token
            }
            guard !order.isEmpty else { continue }
            let notificationID = NotificationID(UUID().uuidString.lowercased())
            let sealed: SealedBlob
            do {
                sealed = try pipelineKeys.seal(
                    notification.sealedForm,
                    binding: .payload(notificationID: notificationID, realmUUID: realm, userID: nil))
            } catch { throw APIError.internalError }
            if let id = notification.notificationID, !id.isEmpty {
                notifIDs.append([
                    "SET", RedisArgument(servers.keys.gorushNotificationID(notificationID)), RedisArgument(id), "EX",
                    RedisArgument(7 * 86_400),
                ])
            }
            records.append(
                PushRequestRecord(
                    notificationID: notificationID, serverUUID: ServerID(server), realmUUID: realm,
                    acceptedAtMs: Wire.nowMillis(), request: .gorush(deviceIDs: order, sealedPayload: sealed)))
            waits.append((notification, notificationID, targets))
        }
        // Everything is checked and registered: the notifications are published together,
        // so a failure accepts none of them and a retry sends none twice.
        if !notifIDs.isEmpty { _ = try await servers.redis.checkedPipeline(notifIDs) }
        if sync, let watch = deliveryWatch {
            for (_, notificationID, targets) in waits { watch.expect(notificationID, devices: Array(targets.keys)) }
        }
        do {
            try await acceptor.publish(records)
        } catch {
            for (_, notificationID, _) in waits { deliveryWatch?.forget(notificationID) }
            throw error
        }
        let statsKey = RedisArgument(servers.keys.gorushStats(server: server))
        _ = try? await servers.redis.pipeline([
            ["HINCRBY", statsKey, "total_count", RedisArgument(Int64(tokenCount))],
            ["HINCRBY", statsKey, "submitted_tasks", RedisArgument(Int64(notifications.count))],
        ])
        if sync, let watch = deliveryWatch {
            let deadline = ContinuousClock.now + gorush.syncTimeout
            for (notification, notificationID, targets) in waits {
                let outcomes = await watch.wait(notificationID, until: deadline)
                for (device, token) in targets.sorted(by: { $0.key < $1.key }) {
                    guard let outcome = outcomes[device] else {
                        logs.append(Self.gorushLog(notification, token: token, error: "no outcome yet (sync timeout)"))
                        continue
                    }
                    if outcome.outcome != .sent && outcome.outcome != .alreadySent {
                        logs.append(
                            Self.gorushLog(
                                notification, token: token, error: outcome.reason ?? outcome.outcome.rawValue))
                    }
                }
            }
        }
        // gorush's bytes: the answer's keys sorted (gin's map), each log entry's in the
        // order of gorush's LogPushEntry (notif_id, type, platform, token, message, error).
        var body = Array(#"{"counts":\#(tokenCount),"logs":["#.utf8)
        for (index, entry) in logs.enumerated() {
            if index > 0 { body.append(UInt8(ascii: ",")) }
            body.append(UInt8(ascii: "{"))
            var first = true
            for key in ["notif_id", "type", "platform", "token", "message", "error"] {
                guard let value = entry[key] else { continue }
                if !first { body.append(UInt8(ascii: ",")) }
                first = false
                body += Wire.canonical(.string(key)) + [UInt8(ascii: ":")] + Wire.canonical(value)
            }
            body.append(UInt8(ascii: "}"))
        }
        body += Array(#"],"success":"ok"}"#.utf8)
        var response = Response(
            status: .ok, headers: [.contentType: "application/json; charset=utf-8"],
            body: .init(byteBuffer: ByteBuffer(bytes: body)))
        // The relay's ids of what was accepted, in request order: for replay and the feedback hook.
        response.headers[Self.notificationIDsHeader] = waits.map(\.1.rawValue).joined(separator: ",")
        return response
    }

    /// gorush's `/api/stat/app`, for the calling server: what it submitted, and the
    /// outcomes of its gorush tokens per platform.
    func gorushAppStats(_ request: Request, context: IngestContext) async throws -> Response {
        let server = try await authenticator.authenticate(request, context: context, api: .native)
        let realm = gorushRealm(server: server)
        let replies = try await servers.redis.pipeline([
            ["HGETALL", RedisArgument(servers.keys.gorushStats(server: server))],
            ["HGETALL", RedisArgument(servers.keys.realmStats(realm))],
        ])
        func fields(_ reply: RedisValue) -> [String: Int64] {
            var result: [String: Int64] = [:]
            let items = reply.array
            var index = 0
            while index + 1 < items.count {
                if let key = items[index].string, let value = items[index + 1].int { result[key] = value }
                index += 2
            }
            return result
        }
        let mine = fields(replies.first ?? .null)
        let outcomes = fields(replies.count > 1 ? replies[1] : .null)
        var platforms: [String: JSONValue] = [:]
        var succeeded: Int64 = 0
        var failed: Int64 = 0
        for platform in GorushNotification.Platform.allCases {
            let provider = platform.provider.rawValue
            let success = (outcomes["\(provider):sent"] ?? 0).addingReportingOverflow(
                outcomes["\(provider):already_sent"] ?? 0
            ).partialValue
            var error: Int64 = 0
            for outcome in DeliveryOutcome.allCases where outcome != .sent && outcome != .alreadySent {
                error = error.addingReportingOverflow(outcomes["\(provider):\(outcome.rawValue)"] ?? 0).partialValue
            }
            succeeded = succeeded.addingReportingOverflow(success).partialValue
            failed = failed.addingReportingOverflow(error).partialValue
            platforms[platform.name] = ["push_success": .int(success), "push_error": .int(error)]
        }
        var body = platforms
        body["version"] = .string(Self.gorushVersion)
        body["busy_workers"] = 0
        body["success_tasks"] = .int(succeeded)
        body["failure_tasks"] = .int(failed)
        body["submitted_tasks"] = .int(mine["submitted_tasks"] ?? 0)
        body["total_count"] = .int(mine["total_count"] ?? 0)
        return jsonResponse(.ok, .object(body))
    }

    /// gorush's `/api/stat/go` field names, filled with this process's figures (Swift has
    /// no goroutines or Go GC: those read 0).
    static func runtimeStats() -> JSONValue {
        var rss: Int64 = 0
        var virtual: Int64 = 0
        if let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8) {
            for line in status.split(separator: "\n") {
                let parts = line.split(separator: " ", omittingEmptySubsequences: true)
                guard parts.count >= 2, let kib = Int64(parts[1]) else { continue }
                if parts[0] == "VmRSS:" { rss = kib * 1024 }
                if parts[0] == "VmSize:" { virtual = kib * 1024 }
            }
        }
        #if arch(arm64)
            let arch = "arm64"
        #else
            let arch = "amd64"
        #endif
        let cpus = Int64(ProcessInfo.processInfo.activeProcessorCount)
        return [
            "time": .int(Int64(Date().timeIntervalSince1970 * 1_000_000_000)), "go_version": "swift",
            "go_os": "linux", "go_arch": .string(arch), "cpu_num": .int(cpus), "goroutine_num": 0,
            "gomaxprocs": .int(cpus), "cgo_call_num": 0, "memory_alloc": .int(rss), "memory_total_alloc": .int(rss),
            "memory_sys": .int(virtual), "memory_lookups": 0, "memory_mallocs": 0, "memory_frees": 0,
            "memory_stack": 0, "heap_alloc": .int(rss), "heap_sys": .int(virtual), "heap_idle": 0,
            "heap_inuse": .int(rss), "heap_released": 0, "heap_objects": 0, "gc_next": 0, "gc_last": 0, "gc_num": 0,
            "gc_per_second": 0, "gc_pause_per_second": 0, "gc_pause": [],
        ]
    }

    /// gorush's `/api/config`: YAML, with what applies to the calling server; the feedback
    /// hook's secret is `[REDACTED]` as gorush redacts its secrets.
    func gorushConfig(_ request: Request, context: IngestContext) async throws -> Response {
        let server = try await authenticator.authenticate(request, context: context, api: .native)
        let hook = try await servers.redis.command(
            "HGET", RedisArgument(servers.keys.gorushHook(server: server)), "url"
        ).string
        func quoted(_ text: String) -> String {
            String(decoding: Wire.canonical(.string(text)), as: UTF8.self)
        }
        let yaml = """
            core:
              enabled: true
              max_notification: \(gorush.maxNotifications)
              max_tokens: \(gorush.maxTokens)
              sync: \(gorush.sync)
              sync_timeout_ms: \(RetrySchedule.milliseconds(gorush.syncTimeout))
              feedback_hook_url: \(quoted(hook ?? ""))
              feedback_secret: \(hook == nil ? "\"\"" : "\"[REDACTED]\"")
            api:
              push_uri: /api/push
              stat_go_uri: /api/stat/go
              stat_app_uri: /api/stat/app
              config_uri: /api/config
              health_uri: /healthz
            auth:
              server_uuid: \(quoted(server))
              api_key: "[REDACTED]"
            pushrelay:
              gorush_realm_uuid: \(quoted(gorushRealm(server: server).rawValue))
            ios:
              enabled: true
              topic: \(quoted(gorush.apnsTopic))
            android:
              enabled: true
            huawei:
              enabled: true

            """
        return Response(
            status: .ok, headers: [.contentType: "application/yaml; charset=utf-8"],
            body: .init(byteBuffer: ByteBuffer(string: yaml)))
    }

    /// `PUT /api/feedback-hook {"url": "https://…"}`: where failed pushes of this server are
    /// POSTed (gorush's `feedback_hook_url`). Each call makes a new signing secret, answered
    /// once; deliveries carry `X-PushRelay-Signature: t=<unix>,v1=<hex HMAC-SHA256(secret,
    /// "<t>.<body>")>`.
    func setFeedbackHook(_ request: Request, context: IngestContext) async throws -> Response {
        let server = try await authenticator.authenticate(request, context: context, api: .native)
        let body = try await RequestFields.read(request, limit: 16 * 1024)
        let url = try body.string("url")
        do {
            _ = try PushEndpoint(url, field: "url")
        } catch {
            throw APIError.invalid(error, code: "INVALID_URL")
        }
        var secretBytes = [UInt8](repeating: 0, count: 32)
        for i in secretBytes.indices { secretBytes[i] = UInt8.random(in: 0...255) }
        let secret = Base64URL.encode(secretBytes)
        let sealed = try devices.storage.sealString(secret, slot: .hookSecret(server: server))
        try await servers.redis.command(
            "HSET", RedisArgument(servers.keys.gorushHook(server: server)), "url", RedisArgument(url), "secret",
            RedisArgument(sealed))
        return jsonResponse(.ok, ["url": .string(url), "secret": .string(secret)])
    }

    func feedbackHook(_ request: Request, context: IngestContext) async throws -> Response {
        let server = try await authenticator.authenticate(request, context: context, api: .native)
        let url = try await servers.redis.command(
            "HGET", RedisArgument(servers.keys.gorushHook(server: server)), "url"
        ).string
        return jsonResponse(.ok, ["url": url.map { .string($0) } ?? .null])
    }
}
