import Crypto
import Foundation
import Hummingbird
import NIOCore
import PushModels
import Synchronization

/// A Waku node's REST API as nwaku serves it (docs/protocols.md §11, read from nwaku's
/// handlers): relay subscriptions by pubsub topic, one message cache shared by every
/// subscription (bounded, the oldest timestamp evicted first, drained by each GET, the
/// node's own messages included), relay and lightpush publishing, health and info.
/// Errors are plain text, as nwaku's. Tests and the demo stand for the network through
/// `/test/v1/…`: they inject what clients publish, read what the node published, and
/// restart the node (it forgets its subscriptions and cache).
public final class FakeWaku: Sendable {
    struct State {
        var subscriptions: Set<String> = []
        /// Cached messages with their pubsub topic, in arrival order.
        var cache: [(topic: String, message: JSONValue, hash: [UInt8])] = []
        var published: [JSONValue] = []
        var seen: Set<[UInt8]> = []
    }

    private let state = Mutex(State())
    /// nwaku's `--rest-relay-cache-capacity` (its default is 50).
    let capacity: Int
    /// nwaku's `--max-msg-size` default, 150 KiB.
    static let maxMessageBytes = 153_600

    public init(capacity: Int = 50) {
        self.capacity = max(1, capacity)
    }

    static func text(_ status: HTTPResponse.Status, _ text: String) -> Response {
        Response(
            status: status, headers: [.contentType: "text/plain; charset=utf-8"],
            body: .init(byteBuffer: ByteBuffer(string: text)))
    }

    static func json(_ value: JSONValue) -> Response {
        Response(
            status: .ok, headers: [.contentType: "application/json"],
            body: .init(byteBuffer: ByteBuffer(bytes: Wire.canonical(value))))
    }

    /// A pubsub topic as nwaku parses one: `/waku/2/rs/{cluster}/{shard}`.
    static func isPubsubTopic(_ topic: String) -> Bool {
        let parts = topic.split(separator: "/", omittingEmptySubsequences: false)
        return parts.count == 6 && parts[0].isEmpty && parts[1] == "waku" && parts[2] == "2" && parts[3] == "rs"
            && UInt16(parts[4]) != nil && UInt16(parts[5]) != nil
    }

    /// The request's JSON body, or nwaku's answer for a body it does not take.
    static func body(_ request: Request) async -> Result<JSONValue, Refusal> {
        let type = request.headers[.contentType] ?? ""
        guard type.hasPrefix("application/json") || type.hasPrefix("text/plain") else {
            return .failure(Refusal(text: "Wrong Content-Type, expected application/json or text/plain"))
        }
        var request = request
        guard let buffer = try? await request.collectBody(upTo: 1 << 20),
            let json = try? Wire.decode(JSONValue.self, from: Array(buffer.readableBytesView))
        else { return .failure(Refusal(text: "Invalid content body, could not decode")) }
        return .success(json)
    }

    /// A 400 with nwaku's text.
    struct Refusal: Error {
        let text: String
        var response: Response { FakeWaku.text(.badRequest, text) }
    }

    /// A message as nwaku reads one: payload (base64, not empty) and content topic required.
    static func message(_ json: JSONValue) -> (JSONValue, [UInt8])? {
        guard let payload = json["payload"]?.stringValue, let bytes = Data(base64Encoded: payload), !bytes.isEmpty,
            let topic = json["contentTopic"]?.stringValue, !topic.isEmpty
        else { return nil }
        var message: [String: JSONValue] = [
            "payload": .string(payload), "contentTopic": .string(topic),
            "version": .int(json["version"]?.intValue ?? 0),
            "timestamp": .int(json["timestamp"]?.intValue ?? Int64(Date().timeIntervalSince1970 * 1e9)),
            "ephemeral": .bool(json["ephemeral"] == true), "proof": "",
        ]
        if let meta = json["meta"]?.stringValue, !meta.isEmpty { message["meta"] = .string(meta) }
        return (.object(message), Array(bytes))
    }

    /// Puts a message in the cache when its topic is subscribed (a duplicate is ignored).
    func receive(_ message: JSONValue, topic: String) {
        let hash = Array(SHA256.hash(data: Array(topic.utf8) + Wire.canonical(message)))
        state.withLock { state in
            guard state.subscriptions.contains(topic), state.seen.insert(hash).inserted else { return }
            state.cache.append((topic, message, hash))
            while state.cache.count > capacity {
                // The oldest timestamp goes first.
                let oldest = state.cache.indices.min {
                    (state.cache[$0].message["timestamp"]?.intValue ?? 0)
                        < (state.cache[$1].message["timestamp"]?.intValue ?? 0)
                }
                if let oldest { state.cache.remove(at: oldest) }
            }
        }
    }

    func publish(_ json: JSONValue, topic: String) -> Response {
        guard let (message, payload) = Self.message(json) else {
            return Self.text(.badRequest, "Invalid content body, could not decode: payload and contentTopic required")
        }
        guard payload.count <= Self.maxMessageBytes else {
            return Self.text(
                .badRequest, "Failed to publish: Message size exceeded maximum of \(Self.maxMessageBytes) bytes")
        }
        guard state.withLock({ $0.subscriptions.contains(topic) }) else {
            return Self.text(.badRequest, "Failed to publish: Node not subscribed to topic: \(topic)")
        }
        state.withLock { $0.published.append(["pubsubTopic": .string(topic), "message": message]) }
        receive(message, topic: topic)  // the node's own messages reach its cache too
        return Self.text(.ok, "OK")
    }

    public func addRoutes(to router: Router<BasicRequestContext>) {
        router.post("/relay/v1/subscriptions") { request, _ in await self.subscriptions(request, add: true) }
        router.delete("/relay/v1/subscriptions") { request, _ in await self.subscriptions(request, add: false) }
        router.get("/relay/v1/messages/:topic") { _, context in
            let topic = Self.topic(context.parameters.get("topic"))
            return self.state.withLock { state -> Response in
                // An unknown subscription: 404 with an empty body.
                guard state.subscriptions.contains(topic) else { return Self.text(.notFound, "") }
                let taken = state.cache.filter { $0.topic == topic }.map(\.message)
                state.cache.removeAll { $0.topic == topic }
                return Self.json(.array(taken))
            }
        }
        router.post("/relay/v1/messages/:topic") { request, context in
            switch await Self.body(request) {
            case .failure(let refusal): return refusal.response
            case .success(let json): return self.publish(json, topic: Self.topic(context.parameters.get("topic")))
            }
        }
        router.post("/lightpush/v1/message") { request, _ in
            switch await Self.body(request) {
            case .failure(let refusal): return refusal.response
            case .success(let json):
                let topic = json["pubsubTopic"]?.stringValue ?? ""
                guard Self.isPubsubTopic(topic), let message = json["message"] else {
                    return Self.text(.badRequest, "Invalid message: pubsubTopic and message required")
                }
                return self.publish(message, topic: topic)
            }
        }
        router.get("/health") { _, _ in
            Self.json(["nodeHealth": "READY", "protocolsHealth": [["Relay": "READY"], ["Lightpush": "READY"]]])
        }
        router.get("/info") { _, _ in
            Self.json(["listenAddresses": ["/ip4/127.0.0.1/tcp/60000"], "enrUri": "enr:-fake-waku-node"])
        }
        addTestRoutes(to: router)
    }

    func subscriptions(_ request: Request, add: Bool) async -> Response {
        switch await Self.body(request) {
        case .failure(let refusal): return refusal.response
        case .success(let json):
            let topics = json.arrayValue?.compactMap(\.stringValue) ?? []
            let invalid = topics.filter { !Self.isPubsubTopic($0) }
            guard json.arrayValue != nil, invalid.isEmpty else {
                return Self.text(.badRequest, "Invalid pubsub topic(s): \(invalid.joined(separator: ", "))")
            }
            state.withLock { state in
                for topic in topics {
                    if add {
                        state.subscriptions.insert(topic)
                    } else {
                        state.subscriptions.remove(topic)
                        state.cache.removeAll { $0.topic == topic }
                    }
                }
            }
            return Self.text(.ok, "OK")
        }
    }

    /// The network, for tests and the demo.
    func addTestRoutes(to router: Router<BasicRequestContext>) {
        // A client's message arriving from the network on `topic`.
        router.post("/test/v1/messages/:topic") { request, context in
            switch await Self.body(request) {
            case .failure(let refusal): return refusal.response
            case .success(let json):
                guard let (message, _) = Self.message(json) else { return Self.text(.badRequest, "not a message") }
                self.receive(message, topic: Self.topic(context.parameters.get("topic")))
                return Self.text(.ok, "OK")
            }
        }
        // The pubsub topics subscribed now.
        router.get("/test/v1/subscriptions") { _, _ in
            Self.json(.array(self.state.withLock { $0.subscriptions.sorted().map { .string($0) } }))
        }
        // What the node published (relay and lightpush), oldest first.
        router.get("/test/v1/published") { _, _ in Self.json(.array(self.state.withLock { $0.published })) }
        // A restart: subscriptions and cache are gone; what was published is kept for the test.
        router.post("/test/v1/restart") { _, _ in
            self.state.withLock { state in
                state.subscriptions = []
                state.cache = []
                state.seen = []
            }
            return Self.text(.ok, "OK")
        }
    }

    static func topic(_ parameter: String?) -> String {
        let raw = parameter ?? ""
        return raw.removingPercentEncoding ?? raw
    }
}
