import Foundation
import PushCrypto
import PushModels
import StatusPush
import Testing

/// Status's messages over Waku, checked against vectors built from status-go's and
/// go-waku's layering (Fixtures/vector_*.json; docs/protocols.md §11): keys 0x11… (client),
/// 0x22… (server), 0x55… (the client's one-time key); fixed ECIES keys, IVs and padding
/// where status-go uses random ones.
@Suite struct WakuVectorTests {
    static let fixtures = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Fixtures")
    let client = try! Secp256k1.PrivateKey(bytes: [UInt8](repeating: 0x11, count: 32))
    let server = try! Secp256k1.PrivateKey(bytes: [UInt8](repeating: 0x22, count: 32))
    let ephemeral = try! Secp256k1.PrivateKey(bytes: [UInt8](repeating: 0x55, count: 32))

    static func vector(_ name: String) throws -> JSONValue {
        try Wire.decode(JSONValue.self, from: Array(try Data(contentsOf: fixtures.appendingPathComponent(name))))
    }

    static func bytes(_ vector: JSONValue, _ key: String) throws -> [UInt8] {
        let text = try #require(vector[key]?.stringValue, "\(key)")
        return try #require(Fingerprint.bytes(fromHex: text), "\(key)")
    }

    @Test func topicsAreStatusGosPartitionedAndPersonalOnes() throws {
        #expect(WakuStatus.contentTopic("contact-discovery") == "/waku/1/0xf8946aac/rfc26", "Status's discovery topic")
        let serverKey = try server.publicKey()
        #expect(WakuStatus.partitionedTopic(serverKey) == "/waku/1/0xdba691a3/rfc26")
        #expect(WakuStatus.personalTopic(serverKey) == "/waku/1/0x4cb25b77/rfc26")
        #expect(WakuStatus.partitionedTopic(try client.publicKey()) == "/waku/1/0xf607cdc6/rfc26")
        #expect(WakuStatus.partitionedTopic(try ephemeral.publicKey()) == "/waku/1/0x9c63741c/rfc26")
    }

    /// A client's registration as it reaches the server's personal topic.
    @Test func aRegistrationOpensToItsEnvelopeAndSigner() throws {
        let vector = try Self.vector("vector_registration_waku.json")
        let envelope = try Self.bytes(vector, "app_envelope_hex")
        let frame = try Self.bytes(vector, "waku_v1_plaintext_hex")
        let sealed = try Self.bytes(vector, "ecies_ciphertext_hex")
        #expect(vector["content_topic"]?.stringValue == WakuStatus.personalTopic(try server.publicKey()))
        #expect(try WakuStatus.decrypt(sealed, with: server) == frame)
        let opened = try WakuStatus.openFrame(frame)
        let clientKey = try client.publicKey()
        #expect(opened.data == envelope && opened.signer == clientKey)
        // Built again from its parts, byte for byte.
        let padding = Array(frame[(1 + Int(frame[0] & 3) + envelope.count)..<(frame.count - 65)])
        #expect(try WakuStatus.frame(envelope, signedBy: client, padding: padding) == frame)
        let sealedAgain = try WakuStatus.encrypt(
            frame, to: server.publicKey(), ephemeral: Secp256k1.PrivateKey(bytes: [UInt8](repeating: 0x44, count: 32)),
            iv: [UInt8](repeating: 0x55, count: 16))
        #expect(sealedAgain == sealed)
        // Tampering anywhere fails the MAC; another key cannot open it.
        var tampered = sealed
        tampered[100] ^= 1
        #expect(throws: WakuStatus.Problem.undecryptable) { try WakuStatus.decrypt(tampered, with: server) }
        #expect(throws: WakuStatus.Problem.undecryptable) { try WakuStatus.decrypt(sealed, with: client) }
    }

    /// The server's answer, as status-go's client reads it on its partitioned topic.
    @Test func aRegistrationResponseIsBuiltAsStatusGoBuildsIt() throws {
        let vector = try Self.vector("vector_registration_response_waku.json")
        let envelope = try Self.bytes(vector, "app_envelope_hex")
        let frame = try Self.bytes(vector, "waku_v1_plaintext_hex")
        let padding = Array(frame[(1 + Int(frame[0] & 3) + envelope.count)..<(frame.count - 65)])
        #expect(try WakuStatus.frame(envelope, signedBy: server, padding: padding) == frame)
        let sealed = try WakuStatus.encrypt(
            frame, to: client.publicKey(), ephemeral: Secp256k1.PrivateKey(bytes: [UInt8](repeating: 0x66, count: 32)),
            iv: [UInt8](repeating: 0x77, count: 16))
        let expected = try Self.bytes(vector, "ecies_ciphertext_hex")
        #expect(sealed == expected)
        #expect(vector["content_topic"]?.stringValue == WakuStatus.partitionedTopic(try client.publicKey()))
        // With random padding and keys, it still opens to the same envelope.
        let random = try WakuStatus.encrypt(try WakuStatus.frame(envelope, signedBy: server), to: client.publicKey())
        let opened = try WakuStatus.openFrame(try WakuStatus.decrypt(random, with: client))
        let serverKey = try server.publicKey()
        #expect(opened.data == envelope && opened.signer == serverKey)
        let frameLength = try WakuStatus.decrypt(random, with: client).count
        #expect(frameLength % 256 == 0)
    }

    /// A query, on the symmetric topic of the client's hashed key.
    @Test func aQueryOpensWithTheKeyOfItsTopic() throws {
        let vector = try Self.vector("vector_query_waku.json")
        let hashed = StatusCrypto.hashedPublicKey(try client.publicKey())
        let (topic, key) = WakuStatus.queryTopic(hashedKey: hashed)
        #expect(topic == vector["content_topic"]?.stringValue)
        let symKey = try Self.bytes(vector, "sym_key_hex")
        #expect(key == symKey)
        let frame = try WakuStatus.decryptSymmetric(try Self.bytes(vector, "waku_payload_hex"), key: key)
        let expectedFrame = try Self.bytes(vector, "waku_v1_plaintext_hex")
        #expect(frame == expectedFrame)
        let opened = try WakuStatus.openFrame(frame)
        let appEnvelope = try Self.bytes(vector, "app_envelope_hex")
        #expect(opened.data == appEnvelope)
        let envelope = try StatusEnvelope(bytes: opened.data, expected: .pushNotificationQuery)
        let ephemeralKey = try ephemeral.publicKey()
        #expect(envelope.signer == ephemeralKey, "the app layer is signed by the one-time key")
        let messageID = try Self.bytes(vector, "message_id_hex")
        #expect(envelope.messageID == messageID)
        let again = try WakuStatus.encryptSymmetric(frame, key: key)
        #expect(try WakuStatus.decryptSymmetric(again, key: key) == frame)
    }

    @Test func framesThatAreNotSignedOrWholeAreRefused() throws {
        let frame = try WakuStatus.frame([1, 2, 3], signedBy: client)
        #expect(frame.count == 256)
        var unsigned = frame
        unsigned[0] &= ~0x04
        #expect(throws: WakuStatus.Problem.unsigned) { try WakuStatus.openFrame(unsigned) }
        #expect(throws: WakuStatus.Problem.malformed) { try WakuStatus.openFrame([0x05]) }
        var lying = frame
        lying[1] = 0xFF
        #expect(throws: (any Error).self) { try WakuStatus.openFrame(lying) }
        for length in [0, 255, 256, 70_000] {
            let data = [UInt8](repeating: 7, count: length)
            let opened = try WakuStatus.openFrame(try WakuStatus.frame(data, signedBy: server))
            #expect(opened.data == data)
        }
    }
}
