import AsyncHTTPClient
import Crypto
import Foundation
import LogKeys
import Logging
import NIOCore
import NIOHTTP1
import PushCrypto
import PushModels
import ServiceKit
import ServiceLifecycle
import StatusPush

/// The Waku transport's settings (`PUSHRELAY_STATUS_WAKU_*`).
public struct WakuSettings: Sendable {
    public var url: String
    public var pubsubTopic: String
    public var pollInterval: Duration
    /// Answers through lightpush (`/lightpush/v1/message`) instead of the node's relay.
    public var lightpush: Bool
    /// Messages per sender key per window (`PUSHRELAY_STATUS_REQUESTS_WINDOW_SECONDS`).
    public var maxMessages: Int
}

/// One message as nwaku's REST API carries it (`RelayWakuMessage`).
struct WakuMessage: Sendable, Equatable {
    var payload: [UInt8]
    var contentTopic: String
    var version: Int64
    /// Nanoseconds since the epoch.
    var timestamp: Int64
    var meta: [UInt8]

    init(payload: [UInt8], contentTopic: String, version: Int64 = 1, timestamp: Int64, meta: [UInt8] = []) {
        self.payload = payload
        self.contentTopic = contentTopic
        self.version = version
        self.timestamp = timestamp
        self.meta = meta
    }

    /// nil when a required field is missing or not what nwaku writes.
    init?(json: JSONValue) {
        guard let text = json["payload"]?.stringValue, let payload = Data(base64Encoded: text),
            let topic = json["contentTopic"]?.stringValue, !topic.isEmpty
        else { return nil }
        self.init(
            payload: Array(payload), contentTopic: topic, version: json["version"]?.intValue ?? 0,
            timestamp: json["timestamp"]?.intValue ?? 0,
            meta: json["meta"]?.stringValue.flatMap { Data(base64Encoded: $0) }.map(Array.init) ?? [])
    }

    var json: JSONValue {
        [
            "payload": .string(Data(payload).base64EncodedString()), "contentTopic": .string(contentTopic),
            "version": .int(version), "timestamp": .int(timestamp), "ephemeral": false,
        ]
    }

    /// Waku's message hash, SHA-256(pubsub topic ‖ payload ‖ content topic ‖ meta ‖
    /// timestamp, 8 bytes big-endian): the same message relayed twice has the same one.
    func hash(pubsubTopic: String) -> [UInt8] {
        var input = Array(pubsubTopic.utf8) + payload + Array(contentTopic.utf8) + meta
        for shift in stride(from: 56, through: 0, by: -8) {
            input.append(UInt8(truncatingIfNeeded: timestamp >> shift))
        }
        return Array(SHA256.hash(data: input))
    }
}

/// What the transport needs of a Waku node.
protocol WakuNode: Sendable {
    /// Where it is, for the logs.
    var base: String { get }
    func subscribe(_ pubsubTopic: String) async throws
    /// The messages cached since the last call; nil when the node lost the subscription.
    func messages(_ pubsubTopic: String) async throws -> [WakuMessage]?
    func publish(_ message: WakuMessage, pubsubTopic: String, lightpush: Bool) async throws
}

/// A Waku node's REST API (nwaku's `/relay/v1/…`, `/lightpush/v1/message`): errors are
/// plain text, as nwaku answers them.
struct WakuNodeClient: WakuNode {
    let base: String
    let client: HTTPClient

    struct Failure: Error, CustomStringConvertible {
        let status: Int
        let text: String
        var description: String { "HTTP \(status): \(text)" }
    }

    static func path(_ topic: String) -> String {
        topic.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? topic
    }

    func subscribe(_ pubsubTopic: String) async throws {
        _ = try await send(.POST, "/relay/v1/subscriptions", body: [.string(pubsubTopic)])
    }

    /// The cached messages of the topic, taken from the node's cache (nwaku drains it);
    /// nil when the node does not know the subscription (it restarted, or lost it).
    func messages(_ pubsubTopic: String) async throws -> [WakuMessage]? {
        do {
            let bytes = try await send(.GET, "/relay/v1/messages/" + Self.path(pubsubTopic), body: nil)
            let list = (try? Wire.decode(JSONValue.self, from: bytes))?.arrayValue ?? []
            return list.compactMap(WakuMessage.init(json:))
        } catch let failure as Failure where failure.status == 404 {
            return nil
        }
    }

    func publish(_ message: WakuMessage, pubsubTopic: String, lightpush: Bool) async throws {
        if lightpush {
            _ = try await send(
                .POST, "/lightpush/v1/message", body: ["pubsubTopic": .string(pubsubTopic), "message": message.json])
        } else {
            _ = try await send(.POST, "/relay/v1/messages/" + Self.path(pubsubTopic), body: message.json)
        }
    }

    func send(_ method: HTTPMethod, _ path: String, body: JSONValue?) async throws -> [UInt8] {
        var request = HTTPClientRequest(url: base + path)
        request.method = method
        if let body {
            request.headers.add(name: "Content-Type", value: "application/json")
            request.body = .bytes(ByteBuffer(bytes: Wire.canonical(body)))
        }
        let response = try await client.execute(request, timeout: .seconds(10))
        let bytes = Array(buffer: try await response.body.collect(upTo: 64 << 20))
        guard (200..<300).contains(Int(response.status.code)) else {
            throw Failure(status: Int(response.status.code), text: String(decoding: bytes.prefix(200), as: UTF8.self))
        }
        return bytes
    }
}
