import Benchmark
import Crypto
import Foundation
import Providers
import PushCrypto
import PushModels
import StatusPush

// Micro benchmarks of the hot paths (google/swift-benchmark): run with
//   swift run -c release microbench
// Each benchmark's time is per iteration (one push unless named otherwise).

let key = try! PushKey(tagged: [0x31] + (0..<32).map { _ in UInt8.random(in: 0...255) })
let payload500 = Array(String(repeating: "x", count: 500).utf8)
let sampleCiphertext = try! key.encrypt(payload500)

let outbound = OutboundRecord(
    notificationID: NotificationID(UUID().uuidString.lowercased()), deviceID: 123_456,
    realmUUID: RealmID(UUID().uuidString.lowercased()),
    provider: .apns, token: String(repeating: "ab", count: 32), appID: "org.zulip.Zulip",
    delivery: DeliveryClass(.message),
    body: ProviderBody.encrypted(provider: .apns, pushKeyID: 7, encryptedData: sampleCiphertext, type: .message),
    expiresAt: 1_800_000_000, acceptedAtMs: 1_795_000_000_000, registeredAtMs: 1_795_000_000_000)
let outboundBytes = try! Wire.encode(outbound)

/// The outbound record as it was read and written before `WireObject`: synthesized
/// `Codable` through `JSONValue` (the same keys and values), for the "before" rows.
struct CodableOutbound: Codable {
    struct Delivery: Codable {
        var apnsPriority: Int
        var apnsPushType: String
        var fcmPriority: String
        enum CodingKeys: String, CodingKey {
            case apnsPriority = "apns_priority"
            case apnsPushType = "apns_push_type"
            case fcmPriority = "fcm_priority"
        }
    }
    var schema: Int
    var notificationID: String
    var deviceID: Int64
    var realmUUID: String
    var provider: String
    var token: String
    var appID: String?
    var delivery: Delivery
    var bodyJSON: String
    var expiresAt: Int64?
    var collapseID: String?
    var acceptedAtMs: Int64
    var registeredAtMs: Int64?
    var attempts: Int?
    var lastError: String?
    var notBeforeMs: Int64?

    enum CodingKeys: String, CodingKey {
        case schema, provider, token, delivery, attempts
        case bodyJSON = "body_json"
        case lastError = "last_error"
        case notBeforeMs = "not_before_ms"
        case notificationID = "notification_id"
        case deviceID = "device_id"
        case realmUUID = "realm_uuid"
        case appID = "app_id"
        case expiresAt = "expires_at"
        case collapseID = "collapse_id"
        case acceptedAtMs = "accepted_at_ms"
        case registeredAtMs = "registered_at_ms"
    }
}
let codableOutbound = try! Wire.decode(CodableOutbound.self, from: outboundBytes)

let signingKey = P256.Signing.PrivateKey()
let apnsConfiguration = APNsConfiguration(
    baseURL: "https://localhost", teamID: "TEAM123456", keyID: "KEY1234567", privateKeyPEM: signingKey.pemRepresentation
)
let cachedSigner = APNsTokenSigner(configuration: apnsConfiguration)
var freshConfiguration = apnsConfiguration
freshConfiguration.tokenRefreshInterval = .zero
let freshSigner = APNsTokenSigner(configuration: freshConfiguration)

/// Runs an async operation to completion from the benchmark's synchronous closure.
func blocking<T: Sendable>(_ operation: @escaping @Sendable () async throws -> T) -> T {
    let box = ResultBox<T>()
    let done = DispatchSemaphore(value: 0)
    Task {
        box.value = try? await operation()
        done.signal()
    }
    done.wait()
    return box.value!
}

/// Keeps a result alive so the optimizer cannot drop the work that made it.
@inline(never) func blackHole<T>(_ value: T) {
    withExtendedLifetime(value) {}
}

final class ResultBox<T>: @unchecked Sendable {
    var value: T?
}

benchmark("secretbox encrypt 500 B payload") {
    blackHole(try! key.encrypt(payload500))
}
benchmark("secretbox decrypt 500 B payload") {
    blackHole(try! key.decrypt(sampleCiphertext))
}
benchmark("outbound envelope encode (Wire.encode)") {
    blackHole(try! Wire.encode(outbound))
}
benchmark("outbound envelope encode (Codable through JSONValue, before)") {
    blackHole(try! Wire.encode(codableOutbound))
}
benchmark("outbound envelope decode (Wire.decode)") {
    blackHole(try! Wire.decode(OutboundRecord.self, from: outboundBytes))
}
benchmark("outbound envelope decode (Codable through JSONValue, before)") {
    blackHole(try! Wire.decode(CodableOutbound.self, from: outboundBytes))
}
benchmark("provider body build + canonical bytes (APNs)") {
    let body = ProviderBody.encrypted(provider: .apns, pushKeyID: 7, encryptedData: sampleCiphertext, type: .message)
    blackHole(Wire.canonical(body))
}
benchmark("provider body build + canonical bytes (APNs, JSONEncoder, before)") {
    let body = ProviderBody.encrypted(provider: .apns, pushKeyID: 7, encryptedData: sampleCiphertext, type: .message)
    blackHole(try! Wire.encoder().encode(body))
}
benchmark("provider body build + canonical bytes (FCM)") {
    let body = ProviderBody.encrypted(provider: .fcm, pushKeyID: 7, encryptedData: sampleCiphertext, type: .message)
    blackHole(Wire.canonical(body))
}
// The signer is an actor: one iteration is 100 calls in one task, so the task hop of
// the harness is not what is measured.
benchmark("APNs provider token ×100, cached (reused JWT)") {
    blackHole(
        blocking {
            for _ in 0..<99 { _ = try await cachedSigner.token() }; return try await cachedSigner.token()
        })
}
benchmark("APNs provider token ×100, signed fresh (ES256)") {
    blackHole(
        blocking {
            for _ in 0..<99 { _ = try await freshSigner.token() }; return try await freshSigner.token()
        })
}

// Status: the hand-written Keccak sponge (Keccak-256 has no kept library here) beside
// swift-crypto's SHA3-256 (BoringSSL/XKCP) over the same 1 KiB, and what one signed
// Status request costs (key recovery, ECDH) through libsecp256k1.
let kib = Array(repeating: UInt8(0x61), count: 1024)
let statusKey = try! Secp256k1.PrivateKey.generate()
let statusPeer = try! Secp256k1.PrivateKey.generate().publicKey()
let statusHash = Keccak.keccak256(kib)
let statusSignature = try! statusKey.sign(hash: statusHash)
benchmark("Keccak-256 of 1 KiB (hand-written sponge)") { blackHole(Keccak.keccak256(kib)) }
benchmark("SHA3-256 of 1 KiB (swift-crypto, same permutation)") { blackHole(SHA3_256.hash(data: kib)) }
benchmark("SHAKE-256 of 1 KiB, 64 bytes (OpenSSL)") { blackHole(Shake256.hash(kib)) }
benchmark("secp256k1 recover public key (libsecp256k1)") {
    blackHole(try Secp256k1.PublicKey.recover(signature: statusSignature, hash: statusHash))
}
benchmark("secp256k1 ECDH (libsecp256k1)") { blackHole(try statusKey.sharedSecret(with: statusPeer)) }

Benchmark.main()
