import DeviceState
import Foundation
import Hummingbird
import NIOCore
import PushCrypto
import PushModels

/// gorush's status endpoints: `/api/stat/app`, `/api/stat/go`, `/api/config` and the
/// feedback hook.
extension GorushController {
    /// What `/api/stat/app` and `/metrics` report for the calling server.
    struct AppFigures {
        var success: [GorushNotification.Platform: Int64] = [:]
        var error: [GorushNotification.Platform: Int64] = [:]
        var succeeded: Int64 = 0
        var failed: Int64 = 0
        var submitted: Int64 = 0
        var total: Int64 = 0
    }

    /// The calling server's figures: what it submitted, and the outcomes of its gorush
    /// tokens per platform.
    func appFigures(_ request: Request, context: IngestContext) async throws -> AppFigures {
        let server = try await authenticator.authenticate(request, context: context, api: .native)
        let counters = try await store.counters(server: server, realm: realm(server: server))
        let outcomes = counters.outcomes
        var figures = AppFigures()
        for platform in GorushNotification.Platform.allCases {
            let provider = platform.provider.rawValue
            let success = (outcomes["\(provider):sent"] ?? 0).saturatingAdd(outcomes["\(provider):already_sent"] ?? 0)
            var error: Int64 = 0
            for outcome in DeliveryOutcome.allCases where outcome != .sent && outcome != .alreadySent {
                error = error.saturatingAdd(outcomes["\(provider):\(outcome.rawValue)"] ?? 0)
            }
            figures.success[platform] = success
            figures.error[platform] = error
            figures.succeeded = figures.succeeded.saturatingAdd(success)
            figures.failed = figures.failed.saturatingAdd(error)
        }
        figures.submitted = counters.submitted["submitted_tasks"] ?? 0
        figures.total = counters.submitted["total_count"] ?? 0
        return figures
    }

    /// gorush's `/api/stat/app`, for the calling server.
    func appStats(_ request: Request, context: IngestContext) async throws -> Response {
        let figures = try await appFigures(request, context: context)
        var body: [String: JSONValue] = [:]
        for platform in GorushNotification.Platform.allCases {
            body[platform.name] = [
                "push_success": .int(figures.success[platform] ?? 0), "push_error": .int(figures.error[platform] ?? 0),
            ]
        }
        body["version"] = .string(Self.version)
        body["busy_workers"] = 0
        body["success_tasks"] = .int(figures.succeeded)
        body["failure_tasks"] = .int(figures.failed)
        body["submitted_tasks"] = .int(figures.submitted)
        body["total_count"] = .int(figures.total)
        return jsonResponse(.ok, .object(body))
    }

    /// gorush's `/api/stat/go` (fukata/golang-stats-api-handler's fields), filled with
    /// what this process can honestly say, from `/proc/self/status`: anonymous resident
    /// memory (`RssAnon`) as the heap in use, the data mapping (`VmData`) as the heap held,
    /// all resident memory (`VmRSS`) as `memory_sys`, the stack, the threads (in
    /// `goroutine_num`), and `uptime_sec` beside them. A Swift process has no garbage
    /// collector, cgo calls or malloc counters: those read 0 (docs/api/gorush.md, "Replace gorush").
    static func runtimeStats(uptime: Double) -> JSONValue {
        var status: [String: Int64] = [:]
        if let text = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8) {
            for line in text.split(separator: "\n") {
                // `Name:\t  value [kB]`
                let parts = line.split(whereSeparator: { $0 == " " || $0 == "\t" })
                guard parts.count >= 2, parts[0].hasSuffix(":"), let value = Int64(parts[1]) else { continue }
                status[String(parts[0].dropLast())] = value
            }
        }
        func kib(_ key: String) -> Int64 { (status[key] ?? 0).saturatingMultiply(1024) }
        // Anonymous resident memory is the heap's (and the stacks'); VmData what is mapped for it.
        let inUse = kib("RssAnon")
        let held = kib("VmData")
        #if arch(arm64)
            let arch = "arm64"
        #else
            let arch = "amd64"
        #endif
        let cpus = Int64(ProcessInfo.processInfo.activeProcessorCount)
        return [
            "time": .int(Int64(Date().timeIntervalSince1970 * 1_000_000_000)), "go_version": "swift",
            "go_os": "linux", "go_arch": .string(arch), "cpu_num": .int(cpus),
            "goroutine_num": .int(status["Threads"] ?? 0), "gomaxprocs": .int(cpus), "cgo_call_num": 0,
            "memory_alloc": .int(inUse), "memory_total_alloc": 0, "memory_sys": .int(kib("VmRSS")),
            "memory_lookups": 0, "memory_mallocs": 0, "memory_frees": 0, "memory_stack": .int(kib("VmStk")),
            "heap_alloc": .int(inUse), "heap_sys": .int(held),
            "heap_idle": .int(max(0, held.saturatingSubtract(inUse))),
            "heap_inuse": .int(inUse), "heap_released": 0, "heap_objects": 0, "gc_next": 0, "gc_last": 0,
            "gc_num": 0, "gc_per_second": 0, "gc_pause_per_second": 0, "gc_pause": [],
            "uptime_sec": .double(uptime),
        ]
    }

    /// gorush's `/metrics` (its collector's eleven series), for the calling server: the
    /// same figures as `/api/stat/app`. The relay's own metrics are on the ops port.
    func metrics(_ request: Request, context: IngestContext) async throws -> Response {
        let stats = try await appFigures(request, context: context)
        let series: [(name: String, type: String, help: String, value: Int64)] = [
            ("gorush_total_push_count", "counter", "Number of push count", stats.total),
            ("gorush_ios_success", "counter", "Number of iOS success count", stats.success[.ios] ?? 0),
            ("gorush_ios_error", "counter", "Number of iOS fail count", stats.error[.ios] ?? 0),
            ("gorush_android_success", "counter", "Number of android success count", stats.success[.android] ?? 0),
            ("gorush_android_fail", "counter", "Number of android fail count", stats.error[.android] ?? 0),
            ("gorush_huawei_success", "counter", "Number of huawei success count", stats.success[.huawei] ?? 0),
            ("gorush_huawei_fail", "counter", "Number of huawei fail count", stats.error[.huawei] ?? 0),
            ("gorush_busy_workers", "gauge", "Length of busy workers", 0),
            ("gorush_success_tasks", "counter", "Length of Success Tasks", stats.succeeded),
            ("gorush_failure_tasks", "counter", "Length of Failure Tasks", stats.failed),
            ("gorush_submitted_tasks", "counter", "Length of Submitted Tasks", stats.submitted),
        ]
        var text = ""
        for metric in series {
            text += "# HELP \(metric.name) \(metric.help)\n# TYPE \(metric.name) \(metric.type)\n"
            text += "\(metric.name) \(metric.value)\n"
        }
        return Response(
            status: .ok, headers: [.contentType: "text/plain; version=0.0.4; charset=utf-8"],
            body: .init(byteBuffer: ByteBuffer(string: text)))
    }

    /// gorush's `/api/config`: YAML, with what applies to the calling server; the feedback
    /// hook's secret is `[REDACTED]` as gorush redacts its secrets.
    func config(_ request: Request, context: IngestContext) async throws -> Response {
        let server = try await authenticator.authenticate(request, context: context, api: .native)
        let hook = try await store.hookURL(server: server)
        // What the dispatchers announce; while none has, every platform is taken.
        let enabled = try await providers.enabledProviders()
        func on(_ platform: GorushNotification.Platform) -> Bool { enabled?.contains(platform.provider) ?? true }
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
              server_uuid: \(quoted(server.rawValue))
              api_key: "[REDACTED]"
            pushrelay:
              gorush_realm_uuid: \(quoted(realm(server: server).rawValue))
            ios:
              enabled: \(on(.ios))
              topic: \(quoted(settings.apnsTopic))
            android:
              enabled: \(on(.android))
            huawei:
              enabled: \(on(.huawei))

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
