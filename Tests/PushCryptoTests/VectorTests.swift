import Foundation
import PushModels
import Testing

@testable import PushCrypto

/// The vectors of docs/protocols.md §1, reproduced byte for byte.
@Suite struct VectorTests {
    let pushKey = "MTaUDJDMWypQ1WufZ1NRTHSSvgYtXh1qVNSjN3aBiEFt"
    let plaintext =
        #"{"message_ids":[31,32],"realm_name":"Zulip Dev","realm_url":"http://zulip.testserver","type":"remove","user_id":10}"#
    let expected =
        "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXICiWcdjb1Pq2BDJ1WyziubJirRl57uf2teCcV8LDMG5J1Uv67OETvYtWT1VFi1gm8G4Xx11sHBbq81oC+yjV+eswvD6M0obWjexUR5tmL3Yh/LgAE3P0Du+Ua17Zrr74ibpgGxSpzvx/3TFKmjG2k2xcOa1fT2nJgGW7lVebnnn21iQ="

    @Test func secretboxVector() throws {
        let key = try PushKey(base64: pushKey)
        let nonce = (0..<24).map { UInt8($0) }
        let encrypted = try key.encrypt(Array(plaintext.utf8), nonce: nonce)
        #expect(encrypted == expected)
        #expect(try key.decrypt(expected) == Array(plaintext.utf8))
    }

    @Test func secretboxUsesFreshNonces() throws {
        let key = try PushKey(base64: pushKey)
        let a = try key.encrypt(Array(plaintext.utf8))
        let b = try key.encrypt(Array(plaintext.utf8))
        #expect(a != b)
        #expect(try key.decrypt(a) == Array(plaintext.utf8))
    }

    @Test func tamperedCiphertextIsRejected() throws {
        let key = try PushKey(base64: pushKey)
        var bytes = Array(Data(base64Encoded: expected)!)
        bytes[30] ^= 0x01
        #expect(throws: CryptoError.self) { try key.decrypt(Data(bytes).base64EncodedString()) }
    }

    @Test func sealedBoxVectorOpens() throws {
        let pair = try BoxKeyPair(secretKey: [UInt8](repeating: 7, count: 32))
        #expect(Data(pair.publicKey).base64EncodedString() == "E75P6uryBMf9M1j8nAByGIHRdCeBKCJ+xnTzf3/pe20=")
        let sealed = Array(
            Data(
                base64Encoded:
                    "vlbpW+EVclzqwgwFmDmXAtTXOe/7ZXGdbRjr8YUH1AHWNvdICVaje1GC1gkQc0F8j31Hn/HeawT5Y8tv3ieTj1mWBprgZZj3QRlsMDzodCwC7kKyXhMSe6+v5bOaYfJPry2mOvJH2lS1n+PmJJVi7xMSu/3uOA0pGVeYbEFGF8T1Uk0LKU8CJcrU4zFigIXAGg4lrcAURvFvvj7rljyZ5FGksA=="
            )!)
        #expect(try SealedBox.open(sealed, keyPair: pair) == Array(plaintext.utf8))
    }

    @Test func sealedBoxRoundTripAndWrongKey() throws {
        let pair = try BoxKeyPair.generate()
        let other = try BoxKeyPair.generate()
        let sealed = try SealedBox.seal(Array("hello".utf8), to: pair.publicKey)
        #expect(try SealedBox.open(sealed, keyPair: pair) == Array("hello".utf8))
        #expect(throws: CryptoError.self) { try SealedBox.open(sealed, keyPair: other) }
    }

    @Test(arguments: [
        "MTaUDJDMWypQ1WufZ1NRTHSSvgYtXh1qVNSjN3aBiE",  // 31 bytes after decoding
        "MjaUDJDMWypQ1WufZ1NRTHSSvgYtXh1qVNSjN3aBiEFt",  // tag 0x32
        "not base64!",
    ])
    func badPushKeysAreRejected(_ text: String) {
        #expect(throws: PayloadValidationError.self) { try PushKey(base64: text) }
    }

    @Test func pipelineKeyringRotates() throws {
        let oldLine = PipelineKeyring.generateLine(id: "k1")
        let newLine = PipelineKeyring.generateLine(id: "k2")
        let old = try PipelineKeyring(fileContents: oldLine)
        let rotated = try PipelineKeyring(fileContents: "\(newLine)\n\(oldLine)\n")
        let binding = SealBinding.payload(notificationID: "n1", realmUUID: "r", userID: 1)
        let sealedByOld = try old.seal(Array("secret".utf8), binding: binding)
        #expect(sealedByOld.keyID == "k1")
        #expect(try rotated.open(sealedByOld, binding: binding) == Array("secret".utf8))
        #expect(try rotated.seal([1], binding: binding).keyID == "k2")
        #expect(!sealedByOld.box.contains("secret"))
        #expect(throws: CryptoError.self) { try old.open(rotated.seal([1], binding: binding), binding: binding) }
    }
}

@Suite struct FingerprintTests {
    @Test func sha256HexMatchesTheStandardVector() {
        #expect(Fingerprint.sha256Hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        #expect(Fingerprint.hex([0x00, 0x0f, 0xa0, 0xff]) == "000fa0ff")
        #expect(Fingerprint.token("abc") == "ba7816bf8f01cfea")
    }
}
