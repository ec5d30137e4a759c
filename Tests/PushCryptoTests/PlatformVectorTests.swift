import Crypto
import Foundation
import PushModels
import Testing

@testable import PushCrypto

/// The Web Push and MTProto vectors of docs/protocols.md §4.3 and §5, byte for byte, and
/// the checks a receiver makes.
@Suite struct PlatformVectorTests {
    // RFC 8291 Appendix A.
    let plaintext = "When I grow up, I want to be a watermelon"
    let asPrivate = "yfWPiYE-n46HLnH0KqZOF1fJJU3MYrct3AELtAQ-oRw"
    let uaPublic = "BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4"
    let uaPrivate = "q1dXpw3UpT5VOmu_cf_v6ih07Aems3njxI-JWgLcM94"
    let auth = "BTBZMqHH6r4Tts7J_aSIgg"
    let salt = "DGv6ra1nlYgDCS1FRnbzlw"
    let body =
        "DGv6ra1nlYgDCS1FRnbzlwAAEABBBP4z9KsN6nGRTbVYI_c7VJSPQTBtkgcy27mlmlMoZIIgDll6e3vCYLocInmYWAmS6TlzAC8wEqKK6PBru3jl7A_yl95bQpu6cVPTpK4Mqgkf1CXztLVBSt2Ks3oZwbuwXPXLWyouBWLVWGNWQexSgSxsj_Qulcy4a-fN"

    func subscription() throws -> WebPushSubscription {
        try WebPushSubscription(
            endpoint: try PushEndpoint("https://push.example.net/push/JzLQ3raZJfFBR0aqvOMsLrt54w4rJUsV", field: "e"),
            p256dh: try #require(Base64URL.decode(uaPublic)), auth: try #require(Base64URL.decode(auth)))
    }

    @Test func webPushRFC8291Vector() throws {
        let serverKey = try P256.KeyAgreement.PrivateKey(rawRepresentation: try #require(Base64URL.decode(asPrivate)))
        let saltBytes: [UInt8] = try #require(Base64URL.decode(salt))
        let encrypted = try WebPushEncryption.encrypt(
            Array(plaintext.utf8), to: try subscription(), serverKey: serverKey, salt: saltBytes)
        #expect(Base64URL.encode(encrypted) == body)
    }

    @Test func webPushUserAgentDecryptsTheVectorAndFreshMessages() throws {
        let device = try P256.KeyAgreement.PrivateKey(rawRepresentation: try #require(Base64URL.decode(uaPrivate)))
        let secret = try #require(Base64URL.decode(auth))
        #expect(
            try WebPushEncryption.decrypt(try #require(Base64URL.decode(body)), privateKey: device, auth: secret)
                == Array(plaintext.utf8))
        let fresh = try WebPushEncryption.encrypt(Array("hello".utf8), to: try subscription())
        let again = try WebPushEncryption.encrypt(Array("hello".utf8), to: try subscription())
        #expect(fresh != again)
        #expect(try WebPushEncryption.decrypt(fresh, privateKey: device, auth: secret) == Array("hello".utf8))
        let header = try WebPushEncryption.header(fresh)
        #expect(header.recordSize == 4096)
        #expect(header.keyID.count == 65)
    }

    @Test func webPushRefusesOversizeAndTamperedMessages() throws {
        #expect(throws: PushCrypto.CryptoError.self) {
            try WebPushEncryption.encrypt([UInt8](repeating: 1, count: 3994), to: try subscription())
        }
        #expect(try WebPushEncryption.encrypt([UInt8](repeating: 1, count: 3993), to: try subscription()).count == 4096)
        let device = try P256.KeyAgreement.PrivateKey(rawRepresentation: try #require(Base64URL.decode(uaPrivate)))
        var tampered = try #require(Base64URL.decode(body))
        tampered[tampered.count - 20] ^= 1
        #expect(throws: PushCrypto.CryptoError.self) {
            try WebPushEncryption.decrypt(tampered, privateKey: device, auth: try #require(Base64URL.decode(auth)))
        }
        for short in [[UInt8](), [UInt8](repeating: 0, count: 40)] {
            #expect(throws: PushCrypto.CryptoError.self) { try WebPushEncryption.header(short) }
        }
    }

    // docs/protocols.md §5.
    let authKey = (0...255).map { UInt8($0) }
    let json = #"{"loc_key":"MESSAGE_TEXT","loc_args":["A","hi"],"user_id":1,"custom":{"from_id":"2","msg_id":"3"}}"#
    let p =
        "MtFYbqRX38hx6oVUFqqzTOlzUV2cLGzXgNz5EgHO9ghtLrE2gw05JxWBpWv_etBHlfohCq8J0E0sf-PWhtbNW-BFiRLHiF38-VxaDBu0aN6fT7Z6pYjgCjeLv-ppiwCq8iVNWiwIbTNZgnEdes9rYZCLrDJ4Qk_l_BiAbWaTTHkWIjEj85r7qOofe3R7kSNB16Qt283FB4k"

    @Test func mtprotoVector() throws {
        let blob = try MTProtoPush.encrypt(
            Array(json.utf8), authKey: authKey, padding: [UInt8](repeating: 0xAB, count: 26))
        #expect(Fingerprint.hex(MTProtoPush.authKeyID(authKey)) == "32d1586ea457dfc8")
        #expect(Fingerprint.hex(blob[8..<24]) == "71ea855416aab34ce973515d9c2c6cd7")
        #expect(Base64URL.encode(blob) == p)
        #expect(Base64URL.decode(p + "=") == blob)
    }

    @Test func mtprotoDeviceSideDecryptsAndChecks() throws {
        let blob = try #require(Base64URL.decode(p))
        #expect(try MTProtoPush.decrypt(blob, authKey: authKey) == Array(json.utf8))
        let fresh = try MTProtoPush.encrypt(Array(json.utf8), authKey: authKey)
        #expect(fresh.count % 16 == 8)
        #expect(try MTProtoPush.decrypt(fresh, authKey: authKey) == Array(json.utf8))
        var tampered = blob
        tampered[40] ^= 1
        #expect(throws: PushCrypto.CryptoError.self) { try MTProtoPush.decrypt(tampered, authKey: authKey) }
        var otherKey = authKey
        otherKey[0] = 1
        #expect(throws: PushCrypto.CryptoError.self) { try MTProtoPush.decrypt(blob, authKey: otherKey) }
        #expect(throws: PushCrypto.CryptoError.self) { try MTProtoPush.encrypt([1], authKey: [1, 2, 3]) }
    }

    /// OpenSSL's published AES-128-IGE vector (test/igetest.c, the first one): the IGE
    /// routine itself, apart from MTProto's key derivation.
    @Test func aesIGEKnownAnswer() {
        let key = (0..<16).map { UInt8($0) }
        let iv = (0..<32).map { UInt8($0) }
        let plain = [UInt8](repeating: 0, count: 32)
        let expected = "1a8519a6557be652e9da8e43da4ef4453cf456b4ca488aa383c79c98b34797cb"
        let encrypted = MTProtoPush.ige(plain, key: key, iv: iv, encrypt: true)
        #expect(Fingerprint.hex(encrypted) == expected)
        #expect(MTProtoPush.ige(encrypted, key: key, iv: iv, encrypt: false) == plain)
    }
}
