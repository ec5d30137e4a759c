import DeviceState
import Foundation
import Hummingbird
import NIOCore
import PushCrypto
import PushModels

/// gorush's status endpoints: `/api/stat/app`, `/api/stat/go`, `/api/config` and the
/// feedback hook.
extension GorushController {
    /// gorush's `/api/stat/app`, for the calling server: what it submitted, and the
    /// outcomes of its gorush tokens per platform.
    func appStats(_ request: Request, context: IngestContext) async throws -> Response {
        let server = try await authenticator.authenticate(request, context: context, api: .native)
        let counters = try await store.counters(server: server, realm: realm(server: server))
        let mine = counters.submitted
        let outcomes = counters.outcomes
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
        body["version"] = .string(Self.version)
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
    func config(_ request: Request, context: IngestContext) async throws -> Response {
        let server = try await authenticator.authenticate(request, context: context, api: .native)
        let hook = try await store.hookURL(server: server)
        func quoted(_ text: String) -> String {
            String(decoding: Wire.canonical(.string(text)), as: UTF8.self)
        }
        let yaml = """
            core:
              enabled: true
              max_notification: \(settings.maxNotifications)
              max_tokens: \(settings.maxTokens)
              sync: \(settings.sync)
              sync_timeout_ms: \(RetrySchedule.milliseconds(settings.syncTimeout))
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
              gorush_realm_uuid: \(quoted(realm(server: server).rawValue))
            ios:
              enabled: true
              topic: \(quoted(settings.apnsTopic))
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
        let sealed = try storage.sealString(secret, slot: .hookSecret(server: server))
        try await store.setHook(server: server, GorushHook(url: url, sealedSecret: sealed))
        return jsonResponse(.ok, ["url": .string(url), "secret": .string(secret)])
    }

    func feedbackHook(_ request: Request, context: IngestContext) async throws -> Response {
        let server = try await authenticator.authenticate(request, context: context, api: .native)
        let url = try await store.hookURL(server: server)
        return jsonResponse(.ok, ["url": url.map { .string($0) } ?? .null])
    }
}
