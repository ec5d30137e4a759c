import DeviceState
import Foundation
import LogKeys
import Logging
import Metrics
import PushCrypto
import PushModels
import ServiceKit
import ServiceLifecycle
import StatusPush
import SwiftProtobuf

/// The Status push server where Status clients talk: over Waku, through a node's REST
/// API (docs/api/status.md, "Over Waku"). It subscribes to the pubsub topic, reads the
/// node's message cache every `pollInterval`, and takes the messages on its topics:
/// registrations on its personal topic, notification requests on its partitioned topic,
/// queries on the query topic of each registered key. Each is decrypted, its frame's and
/// envelope's signatures checked, and answered by the same logic as the HTTP endpoints;
/// the answer goes back signed and encrypted to the envelope's signer, on that key's
/// partitioned topic. A message is handled once over every ingest (its Waku hash is
/// claimed in Redis); a malformed or unsigned one is dropped and counted, never answered.
struct StatusWakuTransport: Service {
    let controller: StatusController
    let server: StatusServer
    let node: any WakuNode
    let settings: WakuSettings
    /// The hashed keys with registrations (their query topics are listened on).
    let registeredKeys: @Sendable () async throws -> [String]
    let logger: Logger
    /// How long a message's hash is remembered across ingests.
    static let claimSeconds = 86_400
    /// How often the registered keys are read again (another ingest may have registered some).
    static let keysRefresh: Duration = .seconds(60)

    /// The topics this server listens on, and the symmetric key of each query topic.
    struct Topics {
        let personal: String
        let partitioned: String
        var queries: [String: [[UInt8]]] = [:]
        var known: Set<String> = []

        /// Adds a hashed key's query topic (its PBKDF2 key is slow: computed once).
        mutating func add(hashedKey: String) {
            guard known.insert(hashedKey).inserted, let bytes = Fingerprint.bytes(fromHex: hashedKey) else { return }
            let (topic, key) = WakuStatus.queryTopic(hashedKey: bytes)
            queries[topic, default: []].append(key)
        }
    }

    func run() async throws {
        var topics = Topics(
            personal: WakuStatus.personalTopic(server.publicKey),
            partitioned: WakuStatus.partitionedTopic(server.publicKey))
        var subscribed = false
        var refreshedAt: ContinuousClock.Instant?
        logger.info(
            "Status push server on Waku",
            metadata: [LogKey.address: "\(node.base)", LogKey.topic: "\(settings.pubsubTopic)"])
        while !Task.isCancelled && !Task.isShuttingDownGracefully {
            do {
                if !subscribed {
                    _ = try await server.reserveRealm(controller.realms)
                    try await node.subscribe(settings.pubsubTopic)
                    subscribed = true
                    logger.info("subscribed on the Waku node", metadata: [LogKey.topic: "\(settings.pubsubTopic)"])
                }
                if refreshedAt.map({ ContinuousClock.now - $0 > Self.keysRefresh }) ?? true {
                    for key in try await registeredKeys() { topics.add(hashedKey: key) }
                    refreshedAt = .now
                }
                // nil: the node lost the subscription (it restarted): subscribe again.
                if let messages = try await node.messages(settings.pubsubTopic) {
                    for message in messages {
                        if let registered = await handle(message, topics: topics) { topics.add(hashedKey: registered) }
                    }
                } else {
                    subscribed = false
                    continue
                }
            } catch {
                subscribed = false
                logger.warning("the Waku node cannot be used", metadata: [LogKey.error: "\(error)"])
            }
            try? await cancelWhenGracefulShutdown { try await Task.sleep(for: settings.pollInterval) }
        }
    }

    /// Handles one message from the node; the hashed key it registered, if any.
    func handle(_ message: WakuMessage, topics: Topics) async -> String? {
        let isPersonal = message.contentTopic == topics.personal
        let isPartitioned = message.contentTopic == topics.partitioned
        let queryKeys = topics.queries[message.contentTopic] ?? []
        // The shard carries every Status message: only this server's topics are read.
        guard isPersonal || isPartitioned || !queryKeys.isEmpty else { return nil }
        let hash = Fingerprint.hex(message.hash(pubsubTopic: settings.pubsubTopic))
        guard (try? await controller.store.claimMessage("waku:" + hash, pendingSeconds: Self.claimSeconds)) == .claimed
        else {
            RelayMetrics.statusWaku("duplicate").increment()
            return nil
        }
        let opened: (data: [UInt8], signer: Secp256k1.PublicKey)
        do {
            opened = try WakuStatus.openFrame(
                queryKeys.isEmpty
                    ? try WakuStatus.decrypt(message.payload, with: server.key)
                    : try Self.decryptSymmetric(message.payload, keys: queryKeys))
        } catch {
            RelayMetrics.statusWaku(error == .unsigned ? "unsigned" : "undecryptable").increment()
            return nil
        }
        guard message.version == 1, let type = Self.type(of: opened.data),
            let envelope = try? StatusEnvelope(bytes: opened.data, expected: type),
            Self.expected(type, personal: isPersonal, partitioned: isPartitioned, query: !queryKeys.isEmpty)
        else {
            RelayMetrics.statusWaku("malformed").increment()
            return nil
        }
        return await answer(envelope, sender: opened.signer)
    }

    /// Answers a checked envelope within the sender's limit, and publishes the answer.
    func answer(_ envelope: StatusEnvelope, sender: Secp256k1.PublicKey) async -> String? {
        let client = "waku:" + Fingerprint.hex(StatusCrypto.hashedPublicKey(sender).prefix(16))
        let count =
            (try? await controller.store.countRequest(
                client: client, nowMs: Wire.nowMillis(), windowSeconds: server.windowSeconds)) ?? 0
        guard count <= Int64(settings.maxMessages) else {
            RelayMetrics.statusWaku("rate_limited").increment()
            return nil
        }
        var registered: String?
        let bytes: [UInt8]?
        do {
            switch envelope.type {
            case .pushNotificationRegistration:
                bytes = try await controller.answerRegistration(envelope, server: server)
                if let bytes, Self.succeeded(bytes) {
                    registered = Fingerprint.hex(StatusCrypto.hashedPublicKey(envelope.signer))
                }
            case .pushNotificationQuery: bytes = try await controller.answerQuery(envelope, server: server)
            default: bytes = try await controller.answerNotification(envelope, server: server)
            }
        } catch {
            RelayMetrics.statusWaku("failed").increment()
            logger.warning("a Status message over Waku was not answered", metadata: [LogKey.error: "\(error)"])
            return nil
        }
        // A registration that does not decrypt is discarded, as the spec says.
        guard let bytes else {
            RelayMetrics.statusWaku("undecryptable").increment()
            return nil
        }
        do {
            let reply = WakuMessage(
                payload: try WakuStatus.encrypt(try WakuStatus.frame(bytes, signedBy: server.key), to: envelope.signer),
                contentTopic: WakuStatus.partitionedTopic(envelope.signer),
                timestamp: Int64(Date().timeIntervalSince1970 * 1_000_000_000))
            try await node.publish(reply, pubsubTopic: settings.pubsubTopic, lightpush: settings.lightpush)
            RelayMetrics.statusWaku("answered").increment()
        } catch {
            RelayMetrics.statusWaku("publish_failed").increment()
            logger.warning("a Status answer could not be published on Waku", metadata: [LogKey.error: "\(error)"])
        }
        return registered
    }

    /// Which topic carries which message: registrations to the personal topic (older
    /// clients: the partitioned one), requests to the partitioned one, queries to a query topic.
    static func expected(_ type: StatusEnvelope.MessageType, personal: Bool, partitioned: Bool, query: Bool) -> Bool {
        switch type {
        case .pushNotificationRegistration: personal || partitioned
        case .pushNotificationRequest: partitioned
        case .pushNotificationQuery: query
        default: false
        }
    }

    static func type(of bytes: [UInt8]) -> StatusEnvelope.MessageType? {
        (try? StatusEnvelopeMessage(serializedBytes: bytes))?.type
    }

    /// A registration answer that says success (its key's query topic is listened on from now).
    static func succeeded(_ answer: [UInt8]) -> Bool {
        guard let envelope = try? StatusEnvelope(bytes: answer, expected: .pushNotificationRegistrationResponse) else {
            return false
        }
        return (try? StatusRegistrationResponse(serializedBytes: envelope.payload))?.success ?? false
    }

    /// Topics are 4 bytes: several keys may share one; the first that opens it wins.
    static func decryptSymmetric(_ payload: [UInt8], keys: [[UInt8]]) throws(WakuStatus.Problem) -> [UInt8] {
        for key in keys {
            if let frame = try? WakuStatus.decryptSymmetric(payload, key: key) { return frame }
        }
        throw .undecryptable
    }
}
