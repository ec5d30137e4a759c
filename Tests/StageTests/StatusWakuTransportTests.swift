import Foundation
import Logging
import PushCrypto
import PushModels
import StatusPush
import SwiftProtobuf
import Synchronization
import Testing

@testable import IngestCore
@testable import StageTestSupport

/// A Waku node in memory: what the transport published.
final class MemoryWakuNode: WakuNode {
    let base = "memory"
    let published = Mutex<[WakuMessage]>([])
    func subscribe(_ pubsubTopic: String) async throws {}
    func messages(_ pubsubTopic: String) async throws -> [WakuMessage]? { [] }
    func publish(_ message: WakuMessage, pubsubTopic: String, lightpush: Bool) async throws {
        published.withLock { $0.append(message) }
    }
}

/// The Waku transport's handling of one message, on in-memory stores: each answered
/// once, a flood from one sender key cut at its limit, what does not open dropped.
@Suite struct StatusWakuTransportTests {
    func transport(maxMessages: Int) async throws -> (StatusWakuTransport, MemoryWakuNode, RouterFixture) {
        let (fixture, _) = try await IngestRouterStatusTests.fixture([
            "pushrelay.status.waku.url": "http://127.0.0.1:1",
            "pushrelay.status.waku.requests.max": "\(maxMessages)",
        ])
        let node = MemoryWakuNode()
        let server = try #require(fixture.api.status.server)
        let settings = try #require(fixture.configuration.status.waku)
        let transport = StatusWakuTransport(
            controller: fixture.api.status, server: server, node: node, settings: settings, registeredKeys: { [] },
            logger: .init(label: "waku-test"))
        return (transport, node, fixture)
    }

    /// A notification request from a one-time key, framed and signed by `identity`, to the server.
    static func request(_ identity: Secp256k1.PrivateKey, server: Secp256k1.PublicKey, at timestamp: Int64) throws
        -> WakuMessage
    {
        var request = StatusNotificationRequest()
        request.messageID = Data((0..<32).map { _ in UInt8.random(in: 0...255) })
        let envelope = try StatusEnvelope.seal(
            try request.serializedBytes(), type: .pushNotificationRequest, key: try Secp256k1.PrivateKey.generate())
        return WakuMessage(
            payload: try WakuStatus.encrypt(try WakuStatus.frame(envelope, signedBy: identity), to: server),
            contentTopic: WakuStatus.partitionedTopic(server), timestamp: timestamp)
    }

    @Test func aFloodFromOneSenderIsCutAtItsLimitAndOthersGoOn() async throws {
        let (transport, node, _) = try await transport(maxMessages: 2)
        let topics = StatusWakuTransport.Topics(
            personal: WakuStatus.personalTopic(transport.server.publicKey),
            partitioned: WakuStatus.partitionedTopic(transport.server.publicKey))
        let flooder = try Secp256k1.PrivateKey.generate()
        for n in 0..<5 {
            _ = await transport.handle(
                try Self.request(flooder, server: transport.server.publicKey, at: Int64(n)), topics: topics)
        }
        #expect(node.published.withLock { $0.count } == 2, "the first two of one sender key, no more")
        let other = try Secp256k1.PrivateKey.generate()
        _ = await transport.handle(try Self.request(other, server: transport.server.publicKey, at: 99), topics: topics)
        #expect(node.published.withLock { $0.count } == 3, "another sender is not held back")
    }

    @Test func aMessageSeenTwiceIsAnsweredOnceAndJunkIsDropped() async throws {
        let (transport, node, _) = try await transport(maxMessages: 100)
        let topics = StatusWakuTransport.Topics(
            personal: WakuStatus.personalTopic(transport.server.publicKey),
            partitioned: WakuStatus.partitionedTopic(transport.server.publicKey))
        let message = try Self.request(try Secp256k1.PrivateKey.generate(), server: transport.server.publicKey, at: 7)
        _ = await transport.handle(message, topics: topics)
        _ = await transport.handle(message, topics: topics)
        #expect(node.published.withLock { $0.count } == 1)
        let reply = try #require(node.published.withLock { $0.first })
        #expect(reply.version == 1 && reply.contentTopic.hasPrefix("/waku/1/0x"))
        // Junk on the server's topic, and a message on a topic that is not the server's.
        var junk = message
        junk.payload = Array("junk".utf8)
        junk.timestamp = 8
        _ = await transport.handle(junk, topics: topics)
        var elsewhere = message
        elsewhere.contentTopic = WakuStatus.contentTopic("somewhere-else")
        _ = await transport.handle(elsewhere, topics: topics)
        #expect(node.published.withLock { $0.count } == 1)
    }
}
