import ArgumentParser
import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1
import PushModels

/// `pushrelay send-test`: a test notification through the real pipeline, as the server
/// would send it (its credentials, `POST /v1/notify`), then each device's outcome from
/// the delivery status API (`GET /v1/notifications/{id}`).
struct SendTest: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "send-test",
        abstract:
            "Send a test notification to a user's devices through the pipeline, and report each device's outcome.",
        discussion: """
            The server's API key is read from --api-key-file (- for stdin) or $PUSHRELAY_API_KEY,
            never from the command line. The test notification is Zulip's "test" type: the
            app shows it as a test. Exit status: 0 sent to every device (or, without --wait,
            accepted); 3 some device was not sent to, or the user has none; 4 --wait timed out
            before every device had a final outcome; 1 the API refused or could not be reached.
            """)

    @Option(help: "The relay's API (ingest) base URL; default $PUSHRELAY_API_URL or http://127.0.0.1:8080.")
    var url: String?
    @Option(help: "The server's uuid (its API user).") var server: String
    @Option(help: "A file holding the server's API key; - reads stdin (default $PUSHRELAY_API_KEY).")
    var apiKeyFile: String?
    @Option(help: "The realm's uuid.") var realm: String
    @Option(help: "The user's id in the realm.") var user: Int64
    @Option(name: .customLong("device"), help: "Only this device id (repeatable); default every device of the user.")
    var devices: [Int64] = []
    @Flag(help: "Wait until every device has a final outcome, and print it.") var wait = false
    @Option(help: "How long --wait waits, in seconds.") var timeoutSeconds = 30
    @OptionGroup var output: OutputOptions

    func validate() throws {
        guard (1...3600).contains(timeoutSeconds) else { throw ValidationError("--timeout-seconds: 1 to 3600") }
        guard user >= 0 else { throw ValidationError("--user: not negative") }
        guard devices.allSatisfy({ $0 > 0 }), devices.count <= 100 else {
            throw ValidationError("--device: positive ids, at most 100")
        }
    }

    func run() async throws {
        let api = StatusClient(
            base: try baseURL(), server: try canonicalUUID(server, "--server"), apiKey: try apiKey())
        let realm = try canonicalUUID(realm, "--realm")
        let now = Wire.nowMillis()
        var body: [String: JSONValue] = [
            "realm_uuid": .string(realm), "user_id": .int(user),
            "payload": [
                "type": "test", "realm_url": "https://pushrelay.invalid", "realm_name": "pushrelay send-test",
                "user_id": .int(user), "time": .int(now / 1000),
            ],
        ]
        if !devices.isEmpty { body["device_ids"] = .array(devices.map { .int($0) }) }
        let accepted = try await api.send("POST", "/v1/notify", body: .object(body))
        guard accepted.status == 202, let id = accepted.json["notification_id"]?.stringValue else {
            throw CLIError("the relay refused the notification: HTTP \(accepted.status) \(accepted.text)")
        }
        let count = accepted.json["device_count"]?.intValue ?? 0
        if !wait {
            if output.json {
                output.print(["notification_id": .string(id), "device_count": .int(count)])
            } else {
                print("notification \(id) accepted for \(count) devices")
            }
            if count == 0 { throw Exit.unmet }
            return
        }
        if !output.json { print("notification \(id) accepted for \(count) devices; waiting for their outcomes") }
        let (status, complete) = try await awaitOutcomes(api, id: id, count: count)
        report(id: id, status: status, complete: complete)
        if !complete { throw Exit.timedOut }
        let devices = status?["devices"]?.arrayValue ?? []
        if count == 0 || devices.contains(where: { $0["state"]?.stringValue != "sent" }) { throw Exit.unmet }
    }

    /// Polls the status until every device has a final state, or the time is up.
    func awaitOutcomes(_ api: StatusClient, id: String, count: Int64) async throws -> (JSONValue?, Bool) {
        let deadline = ContinuousClock.now + .seconds(timeoutSeconds)
        var last: JSONValue?
        while true {
            let reply = try await api.send("GET", "/v1/notifications/\(id)", body: nil)
            if reply.status == 200 {
                last = reply.json
                let devices = reply.json["devices"]?.arrayValue ?? []
                let final = devices.filter { Self.finalStates.contains($0["state"]?.stringValue ?? "") }
                if Int64(devices.count) >= count && final.count == devices.count { return (last, true) }
            } else if reply.status != 404 {
                throw CLIError("the status API answered HTTP \(reply.status) \(reply.text)")
            }
            guard ContinuousClock.now < deadline else { return (last, false) }
            try await Task.sleep(for: .milliseconds(200))
        }
    }

    static let finalStates: Set<String> = [
        "sent", "skipped", "invalid_token", "expired", "failed", "dead_lettered",
    ]

    func report(id: String, status: JSONValue?, complete: Bool) {
        if output.json {
            output.print(["notification_id": .string(id), "complete": .bool(complete), "status": status ?? .null])
            return
        }
        guard let status else {
            print("no status after \(timeoutSeconds) s (is PUSHRELAY_DELIVERY_STATUS_ENABLED off, or feedback down?)")
            return
        }
        let accepted = status["accepted_at_ms"]?.intValue
        for device in status["devices"]?.arrayValue ?? [] {
            var fields = [
                "device \(device["device_id"]?.intValue.map(String.init) ?? "?")",
                device["state"]?.stringValue ?? "?",
            ]
            for key in ["provider", "provider_message_id", "reason"] {
                if let value = device[key]?.stringValue { fields.append(value) }
            }
            if let code = device["http_status"]?.intValue { fields.append("HTTP \(code)") }
            if let attempts = device["attempts"]?.intValue, attempts > 1 { fields.append("\(attempts) attempts") }
            if let at = device["at_ms"]?.intValue, let accepted {
                fields.append("+\(at.saturatingSubtract(accepted)) ms")
            }
            print("  " + fields.joined(separator: "  "))
        }
        if !complete { print("timed out after \(timeoutSeconds) s: not every device has a final outcome yet") }
    }

    func baseURL() throws -> String {
        let text = url ?? ProcessInfo.processInfo.environment["PUSHRELAY_API_URL"] ?? "http://127.0.0.1:8080"
        guard let parsed = URL(string: text), ["http", "https"].contains(parsed.scheme ?? ""), parsed.host != nil else {
            throw ValidationError("--url: an http(s) URL")
        }
        return text.hasSuffix("/") ? String(text.dropLast()) : text
    }

    func apiKey() throws -> String {
        if let apiKeyFile { return try readSecret(apiKeyFile) }
        guard let key = ProcessInfo.processInfo.environment["PUSHRELAY_API_KEY"], !key.isEmpty else {
            throw ValidationError("the server's API key: give --api-key-file or set PUSHRELAY_API_KEY")
        }
        return key
    }
}

/// The relay's API with a server's credentials (HTTP Basic).
struct StatusClient {
    let base: String
    let authorization: String

    init(base: String, server: String, apiKey: String) {
        self.base = base
        authorization = "Basic " + Data("\(server):\(apiKey)".utf8).base64EncodedString()
    }

    struct Reply {
        let status: Int
        let json: JSONValue
        let text: String
    }

    func send(_ method: String, _ path: String, body: JSONValue?) async throws -> Reply {
        var request = HTTPClientRequest(url: base + path)
        request.method = .RAW(value: method)
        request.headers.add(name: "Authorization", value: authorization)
        if let body {
            request.headers.add(name: "Content-Type", value: "application/json")
            request.body = .bytes(ByteBuffer(bytes: Wire.canonical(body)))
        }
        let response: HTTPClientResponse
        do {
            response = try await HTTPClient.shared.execute(request, timeout: .seconds(15))
        } catch {
            throw CLIError("cannot reach the relay's API at \(base): \(error)")
        }
        let bytes = Array(buffer: try await response.body.collect(upTo: 1 << 20))
        let json = (try? Wire.decode(JSONValue.self, from: bytes)) ?? .null
        return Reply(
            status: Int(response.status.code), json: json, text: String(decoding: bytes.prefix(500), as: UTF8.self))
    }
}
