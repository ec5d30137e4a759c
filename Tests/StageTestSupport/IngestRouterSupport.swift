import Configuration
import DevStack
import DeviceState
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import IngestCore
import Kafka
import Logging
import NIOCore
import PushCrypto
import PushModels
import RedisClient
import ServiceKit
import Synchronization
import Testing

// Helpers of IngestRouterTests: ingest's router (IngestCore) on in-memory stores
// (MemoryStores.swift) with an in-memory publisher in place of Kafka: no Redis, no broker,
// no child process. The rate-lease tests run the same router on the dev stack's real
// Redis (`.redis`), under its own key prefix.

/// The publisher ingest's handlers get: it keeps what they publish, and fails on demand
/// (as a broker that does not acknowledge within the bound would).
final class RouterRecordingPublisher: RecordPublisher {
    struct Refused: Error {}

    private let state = Mutex<(records: [KafkaOutgoing], failing: Bool, calls: Int)>(([], false, 0))

    func publish(_ records: [KafkaOutgoing]) async throws {
        try state.withLock { state in
            state.calls += 1
            if state.failing { throw Refused() }
            state.records.append(contentsOf: records)
        }
    }

    /// Every record acknowledged so far, in order.
    var records: [KafkaOutgoing] { state.withLock { $0.records } }
    /// Publish calls, failed ones included.
    var calls: Int { state.withLock { $0.calls } }

    func fail(_ failing: Bool) { state.withLock { $0.failing = failing } }
}

/// One ingest router with its own secrets (in a temp directory), its own stores (in
/// memory, or under its own Redis key prefix), and a recording publisher.
struct RouterFixture: Sendable {
    /// Where the router keeps its state: in memory (`StageTests`, the unit tier), or on
    /// the test stack's Redis (`StageIntegrationTests`).
    enum Backend: Sendable {
        case memory
        case redis
    }

    private(set) var api: IngestAPI
    let publisher: RouterRecordingPublisher
    let prefix: String
    /// The stores in memory (`.memory`), nil on Redis.
    let memory: MemoryIngestStores?
    /// The Redis client (`.redis`), nil in memory.
    let redis: RedisClient?
    let pipelineKeys: PipelineKeyring
    let storageKeys: StorageKeyring
    let bouncerPublicKey: String
    let configuration: IngestConfiguration

    /// `settings` are extra `pushrelay.*` settings (values as text, as the environment gives them).
    /// `providers`: what the dispatchers announce (in memory; none by default);
    /// `transferFetcher`: the Zulip registration transfer's fetch (HTTPS by default).
    static func make(
        _ settings: [String: String] = [:], on backend: Backend = .memory,
        providers: (any ProviderDirectory)? = nil, transferFetcher: (any TransferChallengeFetcher)? = nil
    ) async throws -> RouterFixture {
        let redisPort = backend == .redis ? try await Stack.get().redisPort : 1
        let directory = FileManager.default.temporaryDirectory
            .appendingPathComponent("pushrelay-router-\(UUID().uuidString.lowercased())").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let pipelineLine = PipelineKeyring.generateLine(id: "router1")
        let storageLine = StorageKeyring.generateLine(id: "router1")
        let bouncerLine = try BouncerKeyring.generateLine()
        try pipelineLine.write(toFile: "\(directory)/pipeline-keys", atomically: true, encoding: .utf8)
        try storageLine.write(toFile: "\(directory)/storage-keys", atomically: true, encoding: .utf8)
        try bouncerLine.write(toFile: "\(directory)/bouncer-keys", atomically: true, encoding: .utf8)
        try APIKeyPepper.generateLine().write(toFile: "\(directory)/apikey-pepper", atomically: true, encoding: .utf8)

        let prefix = "router-\(UUID().uuidString.prefix(13).lowercased()):"
        var values: [String: String] = [
            "pushrelay.redis.port": "\(redisPort)",
            "pushrelay.redis.prefix": prefix,
            "pushrelay.kafka.brokers": "unused:9092",
            "pushrelay.pipeline.keys.file": "\(directory)/pipeline-keys",
            "pushrelay.storage.keys.file": "\(directory)/storage-keys",
            "pushrelay.bouncer.keys.file": "\(directory)/bouncer-keys",
            "pushrelay.apikey.pepper.file": "\(directory)/apikey-pepper",
            "pushrelay.http.max.body.bytes": "\(RouterFixture.maxBodyBytes)",
        ]
        values.merge(settings) { _, new in new }
        var provided: [AbsoluteConfigKey: ConfigValue] = [:]
        for (key, value) in values {
            provided[AbsoluteConfigKey(ConfigKey(key))] = ConfigValue(.string(value), isSecret: false)
        }
        let reader = SettingsReader(ConfigReader(provider: InMemoryProvider(values: provided)))
        let configuration = try IngestConfiguration(reader: reader)
        // The secrets are read; the files are not needed any more.
        try? FileManager.default.removeItem(atPath: directory)

        let publisher = RouterRecordingPublisher()
        var memory: MemoryIngestStores?
        var redis: RedisClient?
        let stores: IngestStores
        switch backend {
        case .memory:
            let inMemory = MemoryIngestStores(pepper: configuration.pepper)
            inMemory.devices.maxStoredKeys = configuration.limits.maxStoredKeys
            var inMemoryStores = inMemory.ingestStores
            if let providers { inMemoryStores.providers = providers }
            stores = inMemoryStores
            memory = inMemory
        case .redis:
            let client = RedisClient(configuration: configuration.common.redis)
            stores = .redis(client, configuration: configuration)
            redis = client
        }
        let api = try IngestAPI(
            configuration: configuration, stores: stores, publisher: publisher,
            logger: Logger(label: "ingest-router-tests"), transferFetcher: transferFetcher)
        return RouterFixture(
            api: api, publisher: publisher, prefix: configuration.common.redisPrefix, memory: memory, redis: redis,
            pipelineKeys: try PipelineKeyring(fileContents: pipelineLine),
            storageKeys: try StorageKeyring(fileContents: storageLine),
            bouncerPublicKey: try BouncerKeyring(fileContents: bouncerLine).publicKeysBase64[0],
            configuration: configuration)
    }

    /// A second ingest instance on the same settings, stores and publisher.
    func twin() throws -> RouterFixture {
        var twin = self
        let stores: IngestStores
        if let memory {
            stores = memory.ingestStores
        } else if let redis {
            stores = .redis(redis, configuration: configuration)
        } else {
            throw MemoryFailure(what: "a fixture without stores")
        }
        twin.api = try IngestAPI(
            configuration: configuration, stores: stores, publisher: publisher,
            logger: Logger(label: "ingest-router-tests-twin"))
        return twin
    }

    /// The body limit the fixtures run with (`pushrelay.http.max.body.bytes`).
    static let maxBodyBytes = 16_384

    /// Runs `test` against the router through Hummingbird's router test framework.
    @discardableResult
    func run<Value: Sendable>(_ test: @Sendable (RouterClient) async throws -> Value) async throws -> Value {
        let app = Application(router: api.router())
        return try await app.test(.router) { client in try await test(RouterClient(client: client)) }
    }

    /// The published records, each as the next stage reads it.
    func published() throws -> [RouterPublished] {
        try publisher.records.map { try RouterPublished($0) }
    }

    /// A registration sealed to this relay's bouncer key, as a realm's app makes one.
    func sealedRegistration(kind: String, token: String, appID: String?, timestamp: Int64? = nil) throws -> String {
        let fields: [String: JSONValue] = [
            "token": .string(token), "token_kind": .string(kind),
            "timestamp": .int(timestamp ?? Int64(Date().timeIntervalSince1970)),
            "ios_app_id": appID.map { .string($0) } ?? .null,
        ]
        let publicKey = Array(Data(base64Encoded: bouncerPublicKey) ?? Data())
        return Data(try SealedBox.seal(Wire.canonical(.object(fields)), to: publicKey)).base64EncodedString()
    }
}

/// A record that reached the publisher: decoded as the encryptor decodes it (so it must be
/// readable), and its wire JSON (`push.requests` is a flat object; `kind` says which fields).
struct RouterPublished: Sendable {
    let outgoing: KafkaOutgoing
    let record: PushRequestRecord
    let json: JSONValue

    init(_ outgoing: KafkaOutgoing) throws {
        self.outgoing = outgoing
        record = try Wire.decode(PushRequestRecord.self, from: outgoing.value)
        json = try Wire.decode(JSONValue.self, from: outgoing.value)
    }

    var deviceIDs: [Int64]? { json["device_ids"]?.arrayValue?.compactMap(\.intValue) }
    var items: [JSONValue] { json["items"]?.arrayValue ?? [] }

    /// The sealed payload, as the wire carries it.
    func sealedPayload() throws -> SealedBlob {
        let value = try #require(json["sealed_payload"], "the record carries a sealed payload: \(json)")
        return try Wire.decode(SealedBlob.self, from: Wire.canonical(value))
    }
}

/// An answer of the router, its body read as JSON.
struct RouterReply: Sendable {
    let status: Int
    let headers: HTTPFields
    let body: [UInt8]

    var json: JSONValue { (try? Wire.decode(JSONValue.self, from: body)) ?? .null }
    var code: String? { json["code"]?.stringValue }
    var text: String { String(decoding: body, as: UTF8.self) }
}

/// Request bodies as realms send them.
enum RouterBody: Sendable {
    case none
    case json(JSONValue)
    /// `application/x-www-form-urlencoded`, as Python's requests writes a dict.
    case form([(String, String)])
    case raw([UInt8], contentType: String)
}

/// The router test client, with ingest's request shapes.
struct RouterClient: Sendable {
    let client: any TestClientProtocol

    func send(
        _ method: HTTPRequest.Method, _ uri: String, auth: (String, String)? = nil, _ body: RouterBody = .none,
        headers extra: HTTPFields = [:]
    ) async throws -> RouterReply {
        var headers = extra
        if let auth { headers[.authorization] = routerBasic(auth.0, auth.1) }
        var buffer: ByteBuffer?
        switch body {
        case .none: break
        case .json(let value):
            headers[.contentType] = "application/json"
            buffer = ByteBuffer(bytes: Wire.canonical(value))
        case .form(let fields):
            headers[.contentType] = "application/x-www-form-urlencoded"
            buffer = ByteBuffer(bytes: routerForm(fields))
        case .raw(let bytes, let contentType):
            headers[.contentType] = contentType
            buffer = ByteBuffer(bytes: bytes)
        }
        return try await client.execute(uri: uri, method: method, headers: headers, body: buffer) { response in
            RouterReply(
                status: Int(response.status.code), headers: response.headers,
                body: Array(response.body.readableBytesView))
        }
    }

    /// Registers `server` through `remotes/server/register` (as `manage.py register_server`
    /// does: a form, no Basic auth).
    func register(_ server: RouterServer) async throws -> RouterReply {
        try await send(
            .post, "/api/v1/remotes/server/register",
            .form([
                ("zulip_org_id", server.uuid), ("zulip_org_key", server.key), ("hostname", server.hostname),
                ("contact_email", "admin@\(server.hostname)"),
            ]))
    }

    /// A registered server that owns `realms` (registered with `POST /v1/realms`).
    func registeredServer(realms: [String] = []) async throws -> RouterServer {
        let server = RouterServer()
        let reply = try await register(server)
        try #require(reply.status == 200, "server registration: \(reply.status) \(reply.text)")
        for realm in realms {
            let owned = try await send(.post, "/v1/realms", auth: server.auth, .json(["realm_uuid": .string(realm)]))
            try #require(owned.status == 201, "realm registration: \(owned.status) \(owned.text)")
        }
        return server
    }
}

/// A self-hosted server's identity.
struct RouterServer: Sendable {
    let uuid = UUID().uuidString.lowercased()
    let key = String(
        (0..<64).map { _ in "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789".randomElement()! })
    let hostname = "zulip-\(UUID().uuidString.prefix(8).lowercased()).example.org"

    var auth: (String, String) { (uuid, key) }
}

func routerBasic(_ user: String, _ password: String) -> String {
    "Basic " + Data("\(user):\(password)".utf8).base64EncodedString()
}

func routerForm(_ fields: [(String, String)]) -> [UInt8] { formURLEncoded(fields) }

/// Form values that are JSON text (Zulip's analytics upload).
func routerJSONText(_ value: JSONValue) -> String { String(decoding: Wire.canonical(value), as: UTF8.self) }

func routerAPNsToken() -> String { (0..<32).map { _ in String(format: "%02x", UInt8.random(in: 0...255)) }.joined() }
func routerFCMToken() -> String { "fcm:" + UUID().uuidString + UUID().uuidString }
func routerPushKey() throws -> PushKey { try PushKey(tagged: [0x31] + (0..<32).map { _ in UInt8.random(in: 0...255) }) }
func routerCiphertext() -> String { Data((0..<80).map { _ in UInt8.random(in: 0...255) }).base64EncodedString() }

/// A Zulip channel-message notification (the native API's plaintext).
func routerMessagePayload(userID: Int64, messageID: Int64, content: String) -> JSONValue {
    [
        "channel_id": 10, "channel_name": "Denmark", "content": .string(content), "message_id": .int(messageID),
        "realm_name": "Zulip Dev", "realm_url": "http://zulip.testserver", "recipient_type": "channel",
        "sender_avatar_url": "https://secure.gravatar.com/avatar/x?d=identicon&version=1",
        "sender_full_name": "aaron", "sender_id": 6, "time": 1_754_385_395, "topic": "test", "type": "message",
        "user_id": .int(userID),
    ]
}

/// Whether `needle` occurs in `haystack` as bytes.
func routerContains(_ haystack: [UInt8], _ needle: String) -> Bool {
    let bytes = Array(needle.utf8)
    guard !bytes.isEmpty, haystack.count >= bytes.count else { return false }
    for start in 0...(haystack.count - bytes.count) where haystack[start..<(start + bytes.count)].elementsEqual(bytes) {
        return true
    }
    return false
}

/// Checks the relay's error shape: status, `result: error`, the code, a message.
func expectRouterError(
    _ reply: RouterReply, _ status: Int, _ code: String, msg: String? = nil, _ what: String,
    sourceLocation: SourceLocation = #_sourceLocation
) {
    #expect(reply.status == status, "\(what): \(reply.status) \(reply.text)", sourceLocation: sourceLocation)
    #expect(reply.json["result"] == "error", "\(what): \(reply.text)", sourceLocation: sourceLocation)
    #expect(reply.code == code, "\(what): \(reply.text)", sourceLocation: sourceLocation)
    #expect(
        reply.headers[.contentType] == "application/json", "\(what): the error is JSON", sourceLocation: sourceLocation)
    if let msg {
        #expect(reply.json["msg"]?.stringValue == msg, "\(what): \(reply.text)", sourceLocation: sourceLocation)
    } else {
        #expect(
            reply.json["msg"]?.stringValue?.isEmpty == false, "\(what): \(reply.text)", sourceLocation: sourceLocation)
    }
}

/// Checks Zulip's success shape (`result: success`, `msg: ""`) and the status.
func expectRouterSuccess(
    _ reply: RouterReply, status: Int = 200, _ what: String, sourceLocation: SourceLocation = #_sourceLocation
) {
    #expect(reply.status == status, "\(what): \(reply.status) \(reply.text)", sourceLocation: sourceLocation)
    #expect(reply.json["result"] == "success", "\(what): \(reply.text)", sourceLocation: sourceLocation)
    #expect(reply.json["msg"] == "", "\(what): \(reply.text)", sourceLocation: sourceLocation)
}
