import DeviceState
import Foundation
import HTTPTypes
import Hummingbird
import LogKeys
import Logging
import NIOCore
import PushCrypto
import PushModels
import ServiceKit

/// gorush's API settings (docs/api/gorush.md, "Replace gorush").
public struct GorushSettings: Sendable {
    /// Most `notifications[]` entries in one call (gorush's `core.max_notification`).
    public var maxNotifications: Int
    /// Most tokens in one call, over all its notifications; 0: no limit but the body's
    /// size (gorush has none).
    public var maxTokens: Int
    /// Largest `POST /api/push` body: large sends are what gorush callers do.
    public var maxBodyBytes: Int
    /// The APNs topic (bundle id) of iOS notifications that give no `topic`.
    public var apnsTopic: String
    /// Answer only when every push has its outcome (gorush's `core.sync`), unless the call
    /// says `?sync=false`; otherwise only when a call says `?sync=true`.
    public var sync: Bool
    public var syncTimeout: Duration

    public init(reader: SettingsReader) throws {
        maxNotifications = try reader.int("pushrelay.gorush.max.notifications", default: 100)
        maxTokens = try reader.int("pushrelay.gorush.max.tokens", default: 0)
        maxBodyBytes = try reader.int("pushrelay.gorush.max.body.bytes", default: 8 * 1024 * 1024)
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
struct GorushController: Sendable {
    let authenticator: ServerAuthenticator
    let registrar: DeviceRegistrar
    let realms: any RealmRegistry
    let store: any GorushStore
    /// Seals the feedback hooks' signing secrets at rest.
    let storage: StorageKeyring
    let acceptor: Acceptor
    let sealer: PayloadSealer
    let settings: GorushSettings
    let limits: Limits
    /// Keys the gorush realms' derivation, so no other server can predict and take one.
    let pepper: APIKeyPepper
    /// Outcomes for gorush's sync mode; nil when this process does not read them.
    let deliveryWatch: DeliveryWatch?
    /// The providers some dispatcher can send to: gorush's enabled platforms.
    let providers: CachedProviderDirectory
    /// Bodies over the relay's usual limit in memory at once, over every call.
    let largeBodies: ByteBudget
    /// The response counters of `/sys/stats`.
    let responseStats: ResponseStats

    static let version = "pushrelay-1.0"
    // swift-format-ignore: NeverForceUnwrap
    static let versionHeader = HTTPField.Name("X-GORUSH-VERSION")!
    /// How long a caller's `notif_id` is kept for the feedback hook.
    static let callerIDSeconds = 7 * 86_400
    /// Most devices in one record on `push.requests`: a larger send becomes several
    /// records under one notification id, each well under Kafka's message size.
    static let devicesPerRecord = 1000
    /// Registrations of one call under way at once: a large send is quick without
    /// taking Redis from other callers.
    static let registrationConcurrency = 32

    func routes() -> RouteCollection<IngestContext> {
        let router = RouteCollection(context: IngestContext.self)
        router.post("/api/push") { request, context in
            await answer(request, context) { try await push(request, context: context) }
        }
        router.get("/api/stat/app") { request, context in
            await answer(request, context) { try await appStats(request, context: context) }
        }
        router.get("/api/stat/go") { request, context in
            await answer(request, context) {
                _ = try await authenticator.authenticate(request, context: context, api: .native)
                return jsonResponse(.ok, Self.runtimeStats(uptime: Date().timeIntervalSince(responseStats.started)))
            }
        }
        router.get("/api/config") { request, context in
            await answer(request, context) { try await config(request, context: context) }
        }
        router.put("/api/feedback-hook") { request, context in
            await answer(request, context) { try await setFeedbackHook(request, context: context) }
        }
        router.get("/api/feedback-hook") { request, context in
            await answer(request, context) { try await feedbackHook(request, context: context) }
        }
        router.delete("/api/feedback-hook") { request, context in
            await answer(request, context) {
                let server = try await authenticator.authenticate(request, context: context, api: .native)
                try await store.deleteHook(server: server)
                return jsonResponse(.ok, ["url": .null])
            }
        }
        router.get("/") { _, _ in
            // gorush's exact bytes.
            Response(
                status: .ok, headers: [.contentType: "application/json; charset=utf-8"],
                body: .init(byteBuffer: ByteBuffer(string: #"{"text":"Welcome to notification server."}"#)))
        }
        router.get("/sys/stats") { request, context in
            await answer(request, context) {
                _ = try await authenticator.authenticate(request, context: context, api: .native)
                return jsonResponse(.ok, responseStats.data())
            }
        }
        router.get("/metrics") { request, context in
            await answer(request, context) { try await metrics(request, context: context) }
        }
        router.get("/healthz") { _, _ in Response(status: .ok) }
        router.head("/healthz") { _, _ in Response(status: .ok) }
        router.get("/version") { _, _ in
            jsonResponse(.ok, ["source": "https://github.com/pushrelay/pushrelay", "version": .string(Self.version)])
        }
        return router
    }

    /// gorush's error shape, `{"code": <status>, "message": "…"}`, plus our machine-readable
    /// `error` code and the field at fault, for every failure.
    func answer(_ request: Request, _ context: IngestContext, _ body: () async throws -> Response) async -> Response {
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
        // `X-GORUSH-VERSION` comes from `GorushHeadersMiddleware`, on every answer.
        return response
    }

    /// The realm a server's gorush tokens live in: a UUID derived from the server's under
    /// the API-key pepper (so no other server can predict and claim it first), registered
    /// to it on first use.
    func realm(server: ServerID) -> RealmID {
        let digest = Fingerprint.bytes(fromHex: pepper.hmacHex("pushrelay-gorush-realm:\(server)")) ?? []
        guard digest.count >= 16 else { return RealmID(UUID().uuidString.lowercased()) }
        var bytes = Array(digest.prefix(16))
        bytes[6] = (bytes[6] & 0x0f) | 0x80  // version 8 (RFC 9562: custom)
        bytes[8] = (bytes[8] & 0x3f) | 0x80
        return RealmID(bytes.withUnsafeBytes(UUID.lowercaseText))
    }

    func ensureRealm(server: ServerID) async throws -> RealmID {
        let realm = self.realm(server: server)
        switch try await realms.register(realm, to: server, maxRealms: limits.maxRealmsPerServer) {
        case .registered, .alreadyYours: return realm
        case .quotaExceeded: throw APIError.realmQuotaExceeded(limit: limits.maxRealmsPerServer)
        case .taken: throw APIError.internalError
        }
    }

    /// Most tokens in one sync-mode call: its answer waits for every outcome, and lists
    /// every failure.
    static let maxSyncTokens = 10_000
    /// Largest notification without its tokens (what travels sealed in each of its
    /// records): far over any provider's payload limit, well under Kafka's message size.
    static let maxNotificationBytes = 64 * 1024

    /// `POST /api/push`: every notification checked and its tokens registered, then all
    /// published together, so a failure accepts none of them and a retry sends none twice.
    /// A body over the relay's usual limit (a large send) holds its share of
    /// `largeBodies` until the answer, so large sends together hold bounded memory.
    func push(_ request: Request, context: IngestContext) async throws -> Response {
        let server = try await authenticator.authenticate(request, context: context, api: .native)
        let body = try await readBody(request)
        do {
            let response = try await push(body.bytes, request: request, server: server)
            if body.share > 0 { await largeBodies.release(body.share) }
            return response
        } catch {
            if body.share > 0 { await largeBodies.release(body.share) }
            throw error
        }
    }

    func push(_ bytes: [UInt8], request: Request, server: ServerID) async throws -> Response {
        let notifications = try parseNotifications(bytes)
        let tokenCount = notifications.reduce(0) { $0 + $1.tokens.count }
        guard settings.maxTokens == 0 || tokenCount <= settings.maxTokens else {
            throw APIError.badRequest(
                "Number of tokens(\(tokenCount)) over limit(\(settings.maxTokens))", code: "TOO_MANY_TOKENS",
                field: "notifications")
        }
        let dryRun = try Self.isDryRun(request)
        let sync: Bool
        switch request.uri.queryParameters.get("sync") {
        case "true", "1": sync = true
        case "false", "0": sync = false
        default: sync = settings.sync
        }
        if sync, tokenCount > Self.maxSyncTokens {
            throw APIError.badRequest(
                "Number of tokens(\(tokenCount)) over limit(\(Self.maxSyncTokens)) for sync mode: send it with ?sync=false",
                code: "TOO_MANY_TOKENS", field: "notifications")
        }
        // The rate limit counts a large send as one request per started 1,000 tokens.
        try await authenticator.charge(request, server: server, units: max(0, tokenCount - 1) / 1000)
        try await checkEnabled(notifications)
        if dryRun { return self.dryRun(notifications) }
        let realm = try await ensureRealm(server: server)
        var batch = GorushBatch()
        for notification in notifications {
            try await batch.add(notification, controller: self, server: server, realm: realm)
        }
        try await store.rememberCallerIDs(batch.callerIDs, ttlSeconds: Self.callerIDSeconds)
        let watch = sync ? deliveryWatch : nil
        for accepted in batch.accepted { watch?.expect(accepted.id, devices: Array(accepted.targets.keys)) }
        do {
            try await watch?.ready()
        } catch {
            for accepted in batch.accepted { deliveryWatch?.forget(accepted.id) }
            acceptor.logger.error("sync mode: cannot read outcomes", metadata: [LogKey.error: "\(error)"])
            throw APIError.unavailable
        }
        do {
            try await acceptor.publish(batch.records)
        } catch {
            for accepted in batch.accepted { deliveryWatch?.forget(accepted.id) }
            throw error
        }
        // gorush's counts: the tokens given, and a topic as one more.
        let counts = notifications.reduce(0) { $0 + $1.counted }
        try? await store.countSubmitted(server: server, tokens: counts, notifications: notifications.count)
        if let watch { batch.logs += await syncLogs(batch.accepted, watch: watch) }
        var response = Self.pushAnswer(counts: counts, logs: batch.logs)
        // The relay's ids of what was accepted, in request order: for replay and the feedback hook.
        response.headers[NotificationStatusController.notificationIDsHeader] = batch.accepted.map(\.id.rawValue).joined(
            separator: ",")
        return response
    }

    /// A platform no dispatcher can send to is refused, before anything is registered
    /// (gorush drops it silently; here the caller is told). While no dispatcher has said
    /// what it can send to, every platform is taken.
    func checkEnabled(_ notifications: [GorushNotification]) async throws {
        guard let enabled = try await providers.enabledProviders() else { return }
        for (index, notification) in notifications.enumerated() where !enabled.contains(notification.platform.provider)
        {
            throw APIError.badRequest(
                "notifications[\(index)].platform: \(notification.platform.name) (\(notification.platform.rawValue)) is not enabled on this relay (no dispatcher has \(notification.platform.provider.rawValue) credentials)",
                code: "PLATFORM_NOT_ENABLED", field: "notifications[\(index)].platform")
        }
    }

    /// The body, up to `settings.maxBodyBytes`, and the share of `largeBodies` it holds:
    /// none while it is within the relay's usual limit, so small calls never wait; a body
    /// that grows past it waits for its share before reading on. A declared length over
    /// the limit is refused before anything is read.
    func readBody(_ request: Request) async throws -> (bytes: [UInt8], share: Int) {
        let tooLarge = APIError.requestTooLarge
        let declared = request.headers.value(.contentLength).flatMap { Int($0) }
        if let declared, declared > settings.maxBodyBytes { throw tooLarge }
        var bytes: [UInt8] = []
        var share = 0
        do {
            for try await chunk in request.body {
                let total = bytes.count + chunk.readableBytes
                guard total <= settings.maxBodyBytes else { throw tooLarge }
                if share == 0, total > limits.maxBodyBytes {
                    share = min(declared ?? settings.maxBodyBytes, settings.maxBodyBytes)
                    await largeBodies.acquire(share)
                }
                bytes.append(contentsOf: chunk.readableBytesView)
            }
        } catch {
            if share > 0 { await largeBodies.release(share) }
            throw error
        }
        return (bytes, share)
    }

    /// The body's `notifications`, each checked, within the call's limits.
    func parseNotifications(_ bytes: [UInt8]) throws -> [GorushNotification] {
        guard let json = try? Wire.decode(JSONValue.self, from: bytes), let list = json["notifications"]?.arrayValue
        else {
            throw APIError.badRequest(
                "Missing notifications field.", code: "MISSING_NOTIFICATIONS", field: "notifications")
        }
        guard !list.isEmpty else {
            throw APIError.badRequest(
                "Notifications field is empty.", code: "EMPTY_NOTIFICATIONS", field: "notifications")
        }
        guard list.count <= settings.maxNotifications else {
            throw APIError.badRequest(
                "Number of notifications(\(list.count)) over limit(\(settings.maxNotifications))",
                code: "TOO_MANY_NOTIFICATIONS", field: "notifications")
        }
        var notifications: [GorushNotification] = []
        for (index, entry) in list.enumerated() {
            do {
                let notification = try GorushNotification(validating: entry, path: "notifications[\(index)]")
                guard notification.sealedForm.count <= Self.maxNotificationBytes else {
                    throw PayloadValidationError(
                        field: "notifications[\(index)]",
                        problem: "is over \(Self.maxNotificationBytes) bytes without its tokens")
                }
                if notification.platform == .ios, notification.topic == nil, settings.apnsTopic.isEmpty {
                    throw PayloadValidationError(
                        field: "notifications[\(index)].topic",
                        problem: "is required for iOS: your app's bundle id (apns-topic)")
                }
                notifications.append(notification)
            } catch let error as PayloadValidationError {
                throw APIError.invalid(error, code: "INVALID_NOTIFICATION")
            }
        }
        return notifications
    }

    /// Sync mode: the failed pushes' log entries once every outcome is in (or the wait ends).
    func syncLogs(_ accepted: [GorushBatch.Accepted], watch: DeliveryWatch) async -> [JSONValue] {
        var logs: [JSONValue] = []
        let deadline = ContinuousClock.now + settings.syncTimeout
        for accepted in accepted {
            let outcomes = await watch.wait(accepted.id, until: deadline)
            for (device, token) in accepted.targets.sorted(by: { $0.key < $1.key }) {
                guard let outcome = outcomes[device] else {
                    logs.append(
                        Self.log(accepted.notification, token: token, error: "no outcome yet (sync timeout)"))
                    continue
                }
                if outcome.outcome != .sent && outcome.outcome != .alreadySent {
                    logs.append(
                        Self.log(
                            accepted.notification, token: token, error: outcome.reason?.name ?? outcome.outcome.rawValue
                        )
                    )
                }
            }
        }
        return logs
    }

    /// One entry of gorush's `logs`.
    static func log(_ notification: GorushNotification, token: String, error: String) -> JSONValue {
        var entry: [String: JSONValue] = [
            "type": "failed-push", "platform": .string(notification.platform.name),
            "token": .string(GorushNotification.maskedToken(token)), "message": .string(notification.message),
            "error": .string(error),
        ]
        if let id = notification.notificationID, !id.isEmpty { entry["notif_id"] = .string(id) }
        return .object(entry)
    }

    /// gorush's bytes: the answer's keys sorted (gin's map), each log entry's in the
    /// order of gorush's LogPushEntry (notif_id, type, platform, token, message, error).
    static func pushAnswer(counts: Int, logs: [JSONValue]) -> Response {
        var body = Array(#"{"counts":\#(counts),"logs":["#.utf8)
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
        return Response(
            status: .ok, headers: [.contentType: "application/json; charset=utf-8"],
            body: .init(byteBuffer: ByteBuffer(bytes: body)))
    }
}

extension GorushController {
    /// Registers the devices, `registrationConcurrency` at a time; their ids in order.
    func register(_ registrations: [DeviceRegistration], server: ServerID) async throws -> [DeviceID] {
        var ids = [DeviceID?](repeating: nil, count: registrations.count)
        let registrar = self.registrar
        try await withThrowingTaskGroup(of: (Int, DeviceID).self) { group in
            var next = 0
            func start(_ index: Int) {
                let registration = registrations[index]
                group.addTask {
                    (index, try await registrar.registerWithinQuota(registration, server: server).id)
                }
            }
            while next < min(Self.registrationConcurrency, registrations.count) {
                start(next)
                next += 1
            }
            while let (index, id) = try await group.next() {
                ids[index] = id
                if next < registrations.count {
                    start(next)
                    next += 1
                }
            }
        }
        return ids.compactMap { $0 }
    }
}
