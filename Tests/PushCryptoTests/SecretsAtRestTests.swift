import Foundation
import PushCrypto
import PushModels
import Testing

/// Tokens and push keys in Redis, the pipeline seal's binding, API key hashing, and
/// tokens on the topics.
@Suite struct StorageKeyringTests {
    let token = "fcm-token:APA91bSecretTokenValue"

    /// Values already in Redis were sealed with these associated data bytes:
    /// "pushrelay.storage.v1", then the record and the field, each after its 4-byte length.
    @Test func aValueSealedWithTheSlotsBytesOpens() throws {
        let key = [UInt8](repeating: 9, count: 32)
        let keyring = try StorageKeyring(fileContents: "s1:\(Data(key).base64EncodedString())")
        let associatedData =
            Array("pushrelay.storage.v1".utf8) + [0, 0, 0, 8] + Array("device:7".utf8)
            + [0, 0, 0, 5] + Array("token".utf8)
        let sealed = try XChaCha20Poly1305.seal(Array(token.utf8), key: key, associatedData: associatedData)
        let stored = "v1:s1:\(Data(sealed).base64EncodedString())"
        #expect(try keyring.openString(stored, slot: .deviceToken(7)) == token)
    }

    @Test func aStoredValueOpensOnlyInItsOwnSlot() throws {
        let keyring = try StorageKeyring(fileContents: StorageKeyring.generateLine(id: "s1"))
        let stored = try keyring.sealString(token, slot: .deviceToken(7))
        #expect(stored.hasPrefix("v1:s1:"))
        #expect(!stored.contains(token) && !stored.contains("APA91b"))
        #expect(try keyring.openString(stored, slot: .deviceToken(7)) == token)
        // Moved to another device, or into another field of the same device: refused.
        #expect(throws: CryptoError(.authenticationFailed, "AEAD tag did not verify (wrong key or moved ciphertext)")) {
            try keyring.openString(stored, slot: .deviceToken(8))
        }
        #expect(throws: CryptoError.self) { try keyring.open(stored, slot: .devicePushKey(7, keyID: 1)) }
        // Two seals of one value differ (fresh nonce), both open.
        let again = try keyring.sealString(token, slot: .deviceToken(7))
        #expect(again != stored)
        #expect(try keyring.openString(again, slot: .deviceToken(7)) == token)
    }

    @Test func aMalformedStoredValueIsRefusedSayingWhy() throws {
        let keyring = try StorageKeyring(fileContents: StorageKeyring.generateLine(id: "s1"))
        let slot = StorageSlot.deviceToken(7)
        let cases: [(String, CryptoError)] = [
            ("s1:AAAA", CryptoError(.invalidCiphertext, "stored value is not encrypted")),
            ("v1", CryptoError(.invalidCiphertext, "stored value is not encrypted")),
            ("v1:s1", CryptoError(.invalidCiphertext, "stored value is not v1:key_id:base64")),
            ("v1:zz:AAAA", CryptoError(.invalidKey, "unknown storage key id 'zz'")),
            ("v1::AAAA", CryptoError(.invalidKey, "unknown storage key id ''")),
            ("v1:s1:not base64!", CryptoError(.invalidCiphertext, "stored value is not base64")),
            ("v1:s1:AAAA", CryptoError(.invalidCiphertext, "AEAD ciphertext is too short")),
        ]
        for (stored, error) in cases {
            #expect(throws: error, "\(stored)") { try keyring.open(stored, slot: slot) }
        }
        // The key id ends at the first colon; the base64 may not hold one.
        let sealed = try keyring.seal(Array("x".utf8), slot: slot)
        #expect(try keyring.open(sealed, slot: slot) == Array("x".utf8))
        #expect(throws: CryptoError(.invalidCiphertext, "stored value is not base64")) {
            try keyring.open(sealed + ":", slot: slot)
        }
    }

    @Test func theFirstCleartextFormReadsAsItself() throws {
        let keyring = try StorageKeyring(fileContents: StorageKeyring.generateLine(id: "s1"))
        #expect(!StorageKeyring.isSealed(token))
        #expect(try keyring.openString(token, slot: .deviceToken(7)) == token)
    }

    @Test func aRotatedKeyringOpensValuesStoredUnderTheOldKey() throws {
        let oldLine = StorageKeyring.generateLine(id: "s1")
        let old = try StorageKeyring(fileContents: oldLine)
        let rotated = try StorageKeyring(
            fileContents: "# rotated\n\(StorageKeyring.generateLine(id: "s2"))\n\(oldLine)\n")
        let stored = try old.sealString(token, slot: .deviceToken(1))
        #expect(try rotated.openString(stored, slot: .deviceToken(1)) == token)
        let restored = try rotated.sealString(token, slot: .deviceToken(1))
        #expect(restored.hasPrefix("v1:s2:"))
        #expect(throws: CryptoError.self) { try old.openString(restored, slot: .deviceToken(1)) }
        // The token index: one digest per key, current first, so older entries are still found.
        #expect(rotated.tokenDigests(token).count == 2)
        #expect(rotated.tokenDigests(token)[1] == old.tokenDigests(token)[0])
        #expect(rotated.tokenDigests(token)[0] != old.tokenDigests(token)[0])
        #expect(old.tokenDigests(token)[0] != Fingerprint.sha256Hex(token), "the index is keyed")
        #expect(try StorageKeyring(fileContents: oldLine).tokenDigests(token) == old.tokenDigests(token))
    }

    @Test(arguments: [
        "",
        "# only a comment\n",
        "s1:not base64!",
        "s1:\(Data(repeating: 1, count: 31).base64EncodedString())",
        "bad id:\(Data(repeating: 1, count: 32).base64EncodedString())",
        "s1:\(Data(repeating: 1, count: 32).base64EncodedString())\ns1:\(Data(repeating: 2, count: 32).base64EncodedString())",
    ])
    func malformedStorageKeyFilesAreRefused(_ contents: String) {
        #expect(throws: CryptoError.self) { try StorageKeyring(fileContents: contents) }
    }
}

@Suite struct PipelineBindingTests {
    let keyring: PipelineKeyring
    let plaintext = Array(#"{"content":"secret plan"}"#.utf8)
    let binding = SealBinding.payload(notificationID: "n1", realmUUID: "realm-a", userID: 10)

    init() throws {
        keyring = try PipelineKeyring(fileContents: PipelineKeyring.generateLine(id: "p1"))
    }

    @Test func aBoundSealOpensForItsOwnRecord() throws {
        let sealed = try keyring.seal(plaintext, binding: binding)
        #expect(sealed.alg == .xchacha20poly1305)
        #expect(try keyring.open(sealed, binding: binding) == plaintext)
    }

    @Test func aSealedPayloadMovedToAnotherRecordDoesNotOpen() throws {
        let sealed = try keyring.seal(plaintext, binding: binding)
        let elsewhere: [SealBinding] = [
            .payload(notificationID: "n2", realmUUID: "realm-a", userID: 10),
            .payload(notificationID: "n1", realmUUID: "realm-b", userID: 10),
            .payload(notificationID: "n1", realmUUID: "realm-a", userID: 11),
            .payload(notificationID: "n1", realmUUID: "realm-a", userID: nil),
            SealBinding(purpose: .token, notificationID: "n1", realmUUID: "realm-a", userID: 10, deviceID: nil),
        ]
        for other in elsewhere {
            #expect(throws: CryptoError.self) { try keyring.open(sealed, binding: other) }
        }
    }

    @Test func aSealedTokenMovedToAnotherDeviceOrNotificationDoesNotOpen() throws {
        let tokenBinding = SealBinding.token(notificationID: "n1", realmUUID: "realm-a", deviceID: 31)
        let sealed = try keyring.seal(Array("tok".utf8), binding: tokenBinding)
        #expect(try keyring.open(sealed, binding: tokenBinding) == Array("tok".utf8))
        #expect(throws: CryptoError.self) {
            try keyring.open(sealed, binding: .token(notificationID: "n1", realmUUID: "realm-a", deviceID: 32))
        }
        #expect(throws: CryptoError.self) {
            try keyring.open(sealed, binding: .token(notificationID: "n2", realmUUID: "realm-a", deviceID: 31))
        }
    }

    /// The bytes records already on the topics were sealed with: a change here would
    /// leave them unopenable (docs/design.md, "Topics: the seal binds the record").
    @Test func theBindingEncodesAsItAlwaysDid() {
        let payload = SealBinding.payload(notificationID: "n1", realmUUID: "realm-a", userID: 10)
        let token = SealBinding.token(notificationID: "n1", realmUUID: "realm-a", deviceID: 31)
        let label = "7075736872656c61792e706970656c696e652e7632"
        let payloadFields = [
            "000000077061796c6f6164", "000000026e31", "000000077265616c6d2d61", "000000023130", "00000000",
        ]
        let tokenFields = ["00000005746f6b656e", "000000026e31", "000000077265616c6d2d61", "00000000", "000000023331"]
        #expect(Fingerprint.hex(payload.associatedData) == label + payloadFields.joined())
        #expect(Fingerprint.hex(token.associatedData) == label + tokenFields.joined())
        let body = SealBinding.body(notificationID: "n1", realmUUID: "realm-a", deviceID: 31)
        #expect(
            Fingerprint.hex(body.associatedData) == label + (["00000004626f6479"] + tokenFields.dropFirst()).joined())
    }

    @Test func fieldBoundariesAreUnambiguous() {
        let a = SealBinding.payload(notificationID: "n1", realmUUID: "2", userID: 3).associatedData
        let b = SealBinding.payload(notificationID: "n", realmUUID: "12", userID: 3).associatedData
        #expect(a != b)
    }

    @Test func theFirstUnboundFormStillOpens() throws {
        // Sealed as the first version did: secretbox with the pipeline key, no binding.
        let key = Array(repeating: UInt8(7), count: 32)
        let keyring = try PipelineKeyring(keys: [("p1", key)])
        let old = SealedBlob(keyID: "p1", box: Data(try SecretBox.seal(plaintext, key: key)).base64EncodedString())
        #expect(old.alg == nil)
        #expect(try keyring.open(old, binding: binding) == plaintext)
        // Its JSON has no `alg`, as records written before the binding.
        #expect(!String(decoding: try Wire.encode(old), as: UTF8.self).contains("alg"))
        let decoded = try Wire.decode(SealedBlob.self, from: Array(#"{"box":"\#(old.box)","key_id":"p1"}"#.utf8))
        #expect(try keyring.open(decoded, binding: binding) == plaintext)
    }

    @Test func anUnknownAlgorithmDecodesButDoesNotOpen() throws {
        var sealed = try keyring.seal(plaintext, binding: binding)
        sealed.alg = SealedBlob.Algorithm(rawValue: "future")
        let decoded = try Wire.decode(SealedBlob.self, from: Wire.encode(sealed))
        #expect(decoded.alg?.rawValue == "future")
        #expect(throws: CryptoError.self) { try keyring.open(decoded, binding: binding) }
    }
}

@Suite struct APIKeyPepperTests {
    @Test func apiKeysAreHMACedUnderThePepper() throws {
        let pepper = try APIKeyPepper(fileContents: APIKeyPepper.generateLine() + "\n")
        let other = try APIKeyPepper(fileContents: APIKeyPepper.generateLine())
        let key = String(repeating: "k", count: 64)
        let stored = pepper.hmacHex(key)
        #expect(stored.count == 64)
        #expect(stored != Fingerprint.sha256Hex(key))
        #expect(stored != other.hmacHex(key))
        #expect(pepper.verify(key, hmacHex: stored))
        #expect(!pepper.verify(key + "x", hmacHex: stored))
        #expect(!other.verify(key, hmacHex: stored))
        #expect(!pepper.verify(key, hmacHex: "zz"))
    }

    @Test(arguments: ["", "not base64!", Data(repeating: 1, count: 16).base64EncodedString(), "a\nb"])
    func malformedPepperFilesAreRefused(_ contents: String) {
        #expect(throws: CryptoError.self) { try APIKeyPepper(fileContents: contents) }
    }
}

@Suite struct SealedTokenRecordTests {
    let token = "d6a1f0c2b3e4d5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e"

    func record(sealedBy keyring: PipelineKeyring) throws -> OutboundRecord {
        OutboundRecord(
            notificationID: "n1", deviceID: 31, realmUUID: "realm-a", provider: .apns, token: token,
            appID: "org.zulip.Zulip", delivery: DeliveryClass(.message), body: ["encrypted_data": "c2VjcmV0"],
            acceptedAtMs: 5,
            sealedToken: try keyring.seal(
                Array(token.utf8), binding: .token(notificationID: "n1", realmUUID: "realm-a", deviceID: 31)))
    }

    @Test func anOutboundRecordWithASealedTokenDoesNotCarryTheToken() throws {
        let keyring = try PipelineKeyring(fileContents: PipelineKeyring.generateLine(id: "p1"))
        let outbound = try record(sealedBy: keyring)
        let bytes = try Wire.encode(outbound)
        let text = String(decoding: bytes, as: UTF8.self)
        #expect(!text.contains(token) && !text.contains(String(token.prefix(12))))
        #expect(!text.contains(#""token""#) && text.contains(#""sealed_token""#))
        // The fast encoder and JSONEncoder agree on the new shape too.
        #expect(bytes == Array(try Wire.encoder().encode(outbound)))
        // A dead letter embeds the push the same way.
        let dead = DeadLetterRecord(
            cause: .expired, lastError: nil, httpStatus: nil, attempts: 1, deadAtMs: 9, record: outbound)
        #expect(!String(decoding: try Wire.encode(dead), as: UTF8.self).contains(token))

        let decoded = try Wire.decode(OutboundRecord.self, from: bytes)
        #expect(decoded.token == "")
        #expect(decoded.schema == OutboundRecord.currentSchema)
        let sealed = try #require(decoded.sealedToken)
        let opened = try keyring.open(sealed, binding: .token(notificationID: "n1", realmUUID: "realm-a", deviceID: 31))
        #expect(String(decoding: opened, as: UTF8.self) == token)
    }

    @Test func aSealedBodyIsNeverWrittenInTheClearAndOpensOnlyForItsRecord() throws {
        let keyring = try PipelineKeyring(fileContents: PipelineKeyring.generateLine(id: "p1"))
        var outbound = try record(sealedBy: keyring)
        let body: JSONValue = ["aps": ["alert": ["body": "legacy secret words"]], "zulip": ["event": "message"]]
        let binding = SealBinding.body(notificationID: "n1", realmUUID: "realm-a", deviceID: 31)
        outbound.body = Wire.canonical(body)
        outbound.sealedBody = try keyring.seal(Wire.canonical(body), binding: binding)
        let bytes = try Wire.encode(outbound)
        let text = String(decoding: bytes, as: UTF8.self)
        #expect(!text.contains("legacy secret words"))
        #expect(!text.contains(#""body""#) && !text.contains(#""body_json""#) && text.contains(#""sealed_body""#))
        let decoded = try Wire.decode(OutboundRecord.self, from: bytes)
        #expect(decoded.body.isEmpty)
        let sealed = try #require(decoded.sealedBody)
        #expect(try Wire.decode(JSONValue.self, from: try keyring.open(sealed, binding: binding)) == body)
        // Bound to its record: not another device's, and not a token.
        #expect(throws: (any Error).self) {
            try keyring.open(sealed, binding: .body(notificationID: "n1", realmUUID: "realm-a", deviceID: 32))
        }
        #expect(throws: (any Error).self) {
            try keyring.open(sealed, binding: .token(notificationID: "n1", realmUUID: "realm-a", deviceID: 31))
        }
    }

    @Test func recordsWithTheTokenInTheClearStillDecode() throws {
        let old = #"""
            {"accepted_at_ms":5,"body":{},"delivery":{"apns_priority":10,"apns_push_type":"alert","fcm_priority":"high"},\#
            "device_id":31,"notification_id":"n1","provider":"apns","realm_uuid":"realm-a","schema":2,"token":"abc"}
            """#
        let record = try Wire.decode(OutboundRecord.self, from: Array(old.utf8))
        #expect(record.token == "abc" && record.sealedToken == nil)
        #expect(String(decoding: try Wire.encode(record), as: UTF8.self).contains(#""token":"abc""#))
        // Neither form: not a push.
        let neither = old.replacingOccurrences(of: #","token":"abc""#, with: "")
        #expect(throws: (any Error).self) { try Wire.decode(OutboundRecord.self, from: Array(neither.utf8)) }
    }
}

/// The AEAD that tokens, push keys and pipeline seals use, at its edges: an empty
/// plaintext, each byte of the frame changed, and frames too short to hold a tag.
@Suite struct XChaCha20Poly1305Tests {
    let key = [UInt8](repeating: 3, count: 32)
    let associatedData = Array("slot".utf8)

    /// The code `body` fails with, or nil when it does not fail.
    func failure(_ body: () throws(CryptoError) -> [UInt8]) -> CryptoError.Code? {
        do {
            _ = try body()
            return nil
        } catch {
            return error.code
        }
    }

    @Test(arguments: [0, 1, 17, 1000])
    func aSealOpensWithItsKeyAndAssociatedData(_ length: Int) throws {
        let plaintext = (0..<length).map { UInt8(truncatingIfNeeded: $0 &* 31) }
        let sealed = try XChaCha20Poly1305.seal(plaintext, key: key, associatedData: associatedData)
        #expect(sealed.count == XChaCha20Poly1305.nonceLength + length + XChaCha20Poly1305.macLength)
        #expect(try XChaCha20Poly1305.open(sealed, key: key, associatedData: associatedData) == plaintext)
        let otherData = failure { () throws(CryptoError) in
            try XChaCha20Poly1305.open(sealed, key: key, associatedData: Array("other".utf8))
        }
        #expect(otherData == .authenticationFailed)
        let otherKey = failure { () throws(CryptoError) in
            try XChaCha20Poly1305.open(sealed, key: [UInt8](repeating: 4, count: 32), associatedData: associatedData)
        }
        #expect(otherKey == .authenticationFailed)
    }

    @Test func anyChangedByteIsRefused() throws {
        let sealed = try XChaCha20Poly1305.seal(Array("token".utf8), key: key, associatedData: associatedData)
        for index in sealed.indices {
            var changed = sealed
            changed[index] ^= 0x01
            let code = failure { () throws(CryptoError) in
                try XChaCha20Poly1305.open(changed, key: key, associatedData: associatedData)
            }
            #expect(code == .authenticationFailed, "byte \(index)")
        }
    }

    @Test(arguments: [0, 1, 39])
    func aFrameTooShortForNonceAndTagIsRefused(_ length: Int) {
        let code = failure { () throws(CryptoError) in
            try XChaCha20Poly1305.open([UInt8](repeating: 0, count: length), key: key, associatedData: [])
        }
        #expect(code == .invalidCiphertext)
    }

    /// Nonce and tag only: an empty plaintext whose tag does not verify.
    @Test func anEmptyBoxWithAWrongTagIsRefused() {
        let code = failure { () throws(CryptoError) in
            try XChaCha20Poly1305.open([UInt8](repeating: 0, count: 40), key: key, associatedData: [])
        }
        #expect(code == .authenticationFailed)
    }
}
