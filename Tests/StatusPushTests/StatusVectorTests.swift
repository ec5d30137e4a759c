import Crypto
import Foundation
import PushCrypto
import SwiftProtobuf
import Testing

@testable import StatusPush

func hexBytes(_ text: String) -> [UInt8] { Fingerprint.bytes(fromHex: text) ?? [] }

/// The Status vectors of docs/api/status.md §6: the hashes against published values, and a
/// registration built as a status-go client builds one (keys 0x11…, 0x22…), byte for byte.
@Suite struct StatusVectorTests {
    let clientKey = try! Secp256k1.PrivateKey(bytes: [UInt8](repeating: 0x11, count: 32))
    let serverKey = try! Secp256k1.PrivateKey(bytes: [UInt8](repeating: 0x22, count: 32))
    let accessToken = "b6ae4fde-bb65-11ea-b3de-0242ac130004"
    let installationID = "c6ae4fde-bb65-11ea-b3de-0242ac130004"

    @Test func keccak256KnownAnswers() {
        // Ethereum's Keccak-256 of "" and "abc" (not SHA3-256: the padding differs).
        #expect(
            Fingerprint.hex(Keccak.keccak256([]))
                == "c5d2460186f7233c927e7db2dcc703c0e500b653ca82273b7bfad8045d85a470")
        #expect(
            Fingerprint.hex(Keccak.keccak256(Array("abc".utf8)))
                == "4e03657aea45a94fc7d47ba826c8d667c0d1e6e33a64a036ec44f58fa12d6c45")
        // Parts are concatenated; a message longer than one 136-byte block.
        let long = [UInt8](repeating: 0x61, count: 200)
        #expect(Keccak.keccak256(Array(long[0..<7]), Array(long[7...])) == Keccak.keccak256(long))
        // With SHA3's padding the sponge is SHA3-256 (swift-crypto), at every length around a block.
        for length in [0, 1, 135, 136, 137, 272, 300] {
            let input = (0..<length).map { UInt8(truncatingIfNeeded: $0 &* 7) }
            var sponge = Keccak.Sponge(.sha3_256)
            sponge.absorb(input)
            #expect(sponge.squeeze(32) == Array(SHA3_256.hash(data: input)))
        }
    }

    @Test func shake256KnownAnswers() {
        #expect(
            Fingerprint.hex(StatusCrypto.shake256([]))
                == "46b9dd2b0ba88d13233b3feb743eeb243fcd52ea62b81b82b50c27646ed5762fd75dc4ddd8c0f200cb05019d67b592f6fc821c49479ab48640292eacb3b7c4be"
        )
        #expect(
            Fingerprint.hex(StatusCrypto.shake256(Array("status".utf8)))
                == "005fc334f5eee410f8d6e5378e437b920deab61216e7666cbcc214c9061a0e116ab9a52b0762144d94d214512960c1dda446bd83cc81d118464a84005f980ed8"
        )
        // The sponge with SHAKE's padding and rate agrees with OpenSSL's SHAKE-256.
        let input = (0..<500).map { UInt8(truncatingIfNeeded: $0) }
        var sponge = Keccak.Sponge(.shake256)
        sponge.absorb(input)
        #expect(sponge.squeeze(64) == StatusCrypto.shake256(input))
    }

    @Test func keysHashesAndSharedKey() throws {
        let client = try clientKey.publicKey()
        let server = try serverKey.publicKey()
        #expect(
            Fingerprint.hex(client.compressed) == "034f355bdcb7cc0af728ef3cceb9615d90684bb5b2ca5f859ab0f0b704075871aa")
        #expect(
            Fingerprint.hex(server.compressed) == "02466d7fcae563e5cb09a0d1870bb580344804617879a14949cf22285f1bae3f27")
        #expect(
            Fingerprint.hex(StatusCrypto.hashedPublicKey(client))
                == "07e3692e27017e63a38fa72bf5f3d9e8af0b8cd4b023fd826b43e0fc859425f9e8a7e8fb4013190a13c3133811382f35a60b0fca0c04f2c3a726c8c3c1948b6e"
        )
        let shared = try serverKey.sharedSecret(with: client)
        #expect(Fingerprint.hex(shared) == "77e0510d5042e2f5e9e59c977b81eeed590cf7d20c1c51da451a8eaa9fdc45ff")
        #expect(try clientKey.sharedSecret(with: server) == shared)
        // Both key forms parse to the same key; garbage does not.
        #expect(try Secp256k1.PublicKey(bytes: client.uncompressed) == client)
        #expect(throws: StatusCryptoError.invalidPublicKey) {
            try Secp256k1.PublicKey(bytes: [0x02] + [UInt8](repeating: 0xff, count: 32))
        }
        #expect(throws: StatusCryptoError.invalidPrivateKey) {
            try Secp256k1.PrivateKey(bytes: [UInt8](repeating: 0, count: 32))
        }
    }

    @Test func grantVector() throws {
        let client = try clientKey.publicKey()
        let server = try serverKey.publicKey()
        #expect(
            Fingerprint.hex(StatusCrypto.grantHash(client: client, server: server, accessToken: accessToken))
                == "0ec83fb073e2f20588591f6929788346fa6bd1b0f3afde8577125486baa85c68")
        let grant = try StatusCrypto.makeGrant(client: clientKey, server: server, accessToken: accessToken)
        // RFC 6979 nonces and low S: the same 65 bytes go-ethereum's crypto.Sign gives.
        #expect(
            Fingerprint.hex(grant)
                == "2e8bd31c51ba0537e6ca299ca1665b2784d45211f1ad1e778f96c45e8eaa8fec651e088572181978a04f618dea1f359a8c6cfde933888d198af2738a5b0d145301"
        )
        #expect(StatusCrypto.verifyGrant(grant, client: client, server: server, accessToken: accessToken))
        // A grant for another server, another token, or by another key is refused.
        let other = try Secp256k1.PrivateKey(bytes: [UInt8](repeating: 0x33, count: 32))
        #expect(
            !StatusCrypto.verifyGrant(grant, client: client, server: try other.publicKey(), accessToken: accessToken))
        #expect(
            !StatusCrypto.verifyGrant(
                grant, client: client, server: server, accessToken: "c6ae4fde-bb65-11ea-b3de-0242ac130004"))
        let byOther = try StatusCrypto.makeGrant(client: other, server: server, accessToken: accessToken)
        #expect(!StatusCrypto.verifyGrant(byOther, client: client, server: server, accessToken: accessToken))
        var flipped = grant
        flipped[10] ^= 1
        #expect(!StatusCrypto.verifyGrant(flipped, client: client, server: server, accessToken: accessToken))
        #expect(
            !StatusCrypto.verifyGrant(Array(grant[0..<64]), client: client, server: server, accessToken: accessToken))
    }

    /// The encrypted registration and its envelope from a status-go-style client (fixed nonce 00…0b).
    static let encryptedRegistration =
        "000102030405060708090a0b40a5c94c211798177d02283fdd97c314be3a1271abeae66cd562abfa49f5c1eb821e54d81b9e7ad25f5a654d52c6dc33626acf600fdb727217c0ccc98b15363e72fcce222e4852f3cb7f034e37476b71f7c2a414bf48642386bc5b717a13c7804cfdffdd7675b370cb469a012853e135680d3a1335545e47bbbc11f24b8dad4b73e9791a9cf7382e55239dca7bb2a51ab43428a8ab286c8e95f5a0cb48b8b9f9951fcb28f2e7efd3ebd494e5a1b5904080adb227c649577fdb696b6e3d98c2c905c4e803d5c7b4543fbc28"
    static let envelope =
        "0a414ca32ccfecd685917c6fa79a0815c4759e8b1ffe8bc4c63dcff607e73a6ea808356c10a946f0a38ee1699037fce3022266a5850e49c267a38f316c871aa40c000112d701"
        + encryptedRegistration + "1810"

    @Test func registrationVector() throws {
        let bytes = hexBytes(Self.envelope)
        let envelope = try StatusEnvelope(bytes: bytes, expected: .pushNotificationRegistration)
        #expect(envelope.signer == (try clientKey.publicKey()))
        #expect(
            Fingerprint.hex(envelope.messageID) == "a740ee11294c7f0f05a8a585e83545cc8af6c095c35e42c885deb4566985a8b8")
        #expect(envelope.payload == hexBytes(Self.encryptedRegistration))
        #expect(
            Fingerprint.hex(StatusCrypto.shake256(envelope.payload))
                == "d9962495242553e80d388d5339f15a523d154a355308989dab02664e6ef397dd440c900ea0310d3007218ba670c6a7213036ecebf343f45e88cdfd6a82a087e1"
        )
        let key = try serverKey.sharedSecret(with: envelope.signer)
        let registration = try StatusRegistration(serializedBytes: try StatusCrypto.decrypt(envelope.payload, key: key))
        #expect(registration.tokenType == .apnToken)
        #expect(registration.deviceToken == "device-token-abc")
        #expect(registration.installationID == installationID)
        #expect(registration.accessToken == accessToken)
        #expect(registration.version == 1)
        #expect(registration.apnTopic == "im.status.ethereum")
        #expect(
            StatusRegistrationRules.check(
                registration, client: envelope.signer, server: try serverKey.publicKey(), storedVersion: 0)
                == .register(registration))
        // Our own signature of the same payload is the client's, byte for byte (RFC 6979).
        #expect(
            try StatusEnvelope.seal(envelope.payload, type: .pushNotificationRegistration, key: clientKey) == bytes)
        // The envelope refuses another type, a broken signature, and non-protobuf bytes.
        #expect(throws: StatusEnvelope.Problem.wrongType(expected: .pushNotificationQuery, got: 16)) {
            try StatusEnvelope(bytes: bytes, expected: .pushNotificationQuery)
        }
        var broken = bytes
        broken[2 + 64] = 9  // v out of range
        #expect(throws: StatusEnvelope.Problem.badSignature) {
            try StatusEnvelope(bytes: broken, expected: .pushNotificationRegistration)
        }
        #expect(throws: StatusEnvelope.Problem.malformed) {
            try StatusEnvelope(bytes: [0xff, 0xff, 0xff], expected: .pushNotificationRegistration)
        }
        // Under another server's key the payload does not decrypt.
        let other = try Secp256k1.PrivateKey(bytes: [UInt8](repeating: 0x33, count: 32))
        #expect(throws: StatusCryptoError.undecryptable) {
            try StatusCrypto.decrypt(envelope.payload, key: try other.sharedSecret(with: envelope.signer))
        }
    }

    @Test func allowedKeyListTokenDecryptsForTheContact() throws {
        let contact = try Secp256k1.PrivateKey(bytes: [UInt8](repeating: 0x33, count: 32))
        let key = try contact.sharedSecret(with: try clientKey.publicKey())
        #expect(Fingerprint.hex(key) == "6fb9be77954b3865de09320cf5f772c6b3492d575da4b656622167fb316fac22")
        let entry = hexBytes(
            "aaaaaaaaaaaaaaaaaaaaaaaa9dff629365e9dc4efbea5880621058586be8b3a02e98381c58cda63c6ec132079e127450e8cf42349a0ad25ff214a74414e84f2b"
        )
        #expect(String(decoding: try StatusCrypto.decrypt(entry, key: key), as: UTF8.self) == accessToken)
    }
}
