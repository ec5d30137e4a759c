import Foundation
import Logging
import Providers
import PushCrypto
import PushModels
import RedisClient
import ServiceKit
import Synchronization

@testable import DeviceState
@testable import Kafka

// In-memory implementations of the stage seams (ServiceKit/Seams.swift and
// `PushProviderClient`), for driving the encryptor, dispatcher and feedback stages
// without Kafka, Redis or HTTP. Every type is prefixed `Memory` so it cannot clash with
// other files of this test target.

/// The error every `Memory…` fake throws when told to fail.
struct MemoryFailure: Error, CustomStringConvertible, Equatable {
    var what: String
    var description: String { "injected failure: \(what)" }
}

/// Records what was published (per successful `publish` call) and can be told to fail
/// the next N calls, as a broker that does not acknowledge would.
final class MemoryPublisher: RecordPublisher, Sendable {
    private struct State {
        var batches: [[KafkaOutgoing]] = []
        var calls = 0
        var failuresLeft = 0
    }

    private let state = Mutex(State())

    init() {}

    /// The next `count` calls to `publish` throw and publish nothing.
    func failNext(_ count: Int) {
        state.withLock { $0.failuresLeft = count }
    }

    func publish(_ records: [KafkaOutgoing]) async throws {
        try state.withLock { s throws(MemoryFailure) in
            s.calls += 1
            if s.failuresLeft > 0 {
                s.failuresLeft -= 1
                throw MemoryFailure(what: "publish")
            }
            s.batches.append(records)
        }
    }

    /// Every call to `publish`, failed ones included.
    var calls: Int { state.withLock { $0.calls } }
    /// The record lists of the successful calls, in order.
    var batches: [[KafkaOutgoing]] { state.withLock { $0.batches } }
    /// Every record acknowledged, in order.
    var records: [KafkaOutgoing] { batches.flatMap { $0 } }

    func records(on topic: String) -> [KafkaOutgoing] {
        records.filter { $0.topic == topic }
    }

    /// The topics of everything published, in order.
    var topics: [String] { records.map(\.topic) }

    func decoded<T: Decodable>(_ type: T.Type, on topic: String) throws -> [T] {
        try records(on: topic).map { try Wire.decode(type, from: $0.value) }
    }
}

extension KafkaOutgoing {
    /// The values of header `name`, as text.
    func headerTexts(_ name: String) -> [String] {
        headers.filter { $0.name == name }.map { String(decoding: $0.value, as: UTF8.self) }
    }

    /// The value as a JSON document, to check which fields are (not) on the topic.
    func valueJSON() throws -> JSONValue {
        try Wire.decode(JSONValue.self, from: value)
    }

    var valueText: String { String(decoding: value, as: UTF8.self) }
    var keyString: String? { key.map { String(decoding: $0, as: UTF8.self) } }
}

/// A clock that stands still until told to move.
final class MemoryClock: WallClock, Sendable {
    private let now: Mutex<Int64>

    init(_ nowMs: Int64) {
        now = Mutex(nowMs)
    }

    func nowMillis() -> Int64 { now.withLock { $0 } }

    func advance(byMs delta: Int64) {
        now.withLock { $0 += delta }
    }

    func set(_ nowMs: Int64) {
        now.withLock { $0 = nowMs }
    }
}

/// The encryptor's device look-ups on a dictionary. Like `DeviceStore`, a user's device
/// set may name ids whose record is gone; `devices(_:)` returns only the ones that exist.
final class MemoryDeviceDirectory: DeviceDirectory, Sendable {
    private struct State {
        var records: [DeviceID: DeviceRecord] = [:]
        var members: [String: Set<DeviceID>] = [:]
        var failuresLeft = 0
        var failure: any Error & Sendable = MemoryFailure(what: "directory")
        var calls = 0
    }

    private let state = Mutex(State())

    init(_ devices: [DeviceRecord] = []) {
        for device in devices { add(device) }
    }

    private static func member(_ realm: RealmID, _ userID: Int64) -> String { "\(realm)|\(userID)" }

    /// Stores a device and, when it has a user, adds it to that user's set.
    func add(_ device: DeviceRecord) {
        state.withLock { s in
            s.records[device.id] = device
            if let userID = device.userID {
                s.members[Self.member(device.realmUUID, userID), default: []].insert(device.id)
            }
        }
    }

    /// Adds an id to a user's set without any record (a device deleted under a reader).
    func addMembership(realm: RealmID, userID: Int64, id: DeviceID) {
        state.withLock { _ = $0.members[Self.member(realm, userID), default: []].insert(id) }
    }

    /// The next `count` look-ups throw `error` (by default: Redis unavailable).
    func failNext(_ count: Int, with error: (any Error & Sendable)? = nil) {
        state.withLock {
            $0.failuresLeft = count
            $0.failure = error ?? MemoryFailure(what: "directory")
        }
    }

    var calls: Int { state.withLock { $0.calls } }

    private func enter(_ what: String) throws {
        try state.withLock { s throws in
            s.calls += 1
            if s.failuresLeft > 0 {
                s.failuresLeft -= 1
                throw s.failure
            }
        }
    }

    func deviceIDs(realm: RealmID, userID: Int64) async throws -> [DeviceID] {
        try enter("deviceIDs")
        return state.withLock { Array($0.members[Self.member(realm, userID)] ?? []).sorted() }
    }

    func devices(_ ids: [DeviceID]) async throws -> [DeviceID: DeviceRecord] {
        try enter("devices")
        return state.withLock { s in
            var found: [DeviceID: DeviceRecord] = [:]
            for id in ids { found[id] = s.records[id] }
            return found
        }
    }
}

/// The delivery ledger on a dictionary, with `RedisDeliveryLedger`'s semantics: `claim`
/// answers `sent`, or an earlier claim's time, or makes the claim; `recordSent` marks the
/// pair sent; `release` drops a claim (never a mark). Pairs are told apart as the Redis
/// ledger tells them: by notification and device (`acceptedAtMs` only picks its bucket).
final class MemoryLedger: DeliveryLedger, Sendable {
    private struct State {
        var values: [String: LedgerState] = [:]
        var claims = 0
        var sentWrites = 0
        var releases = 0
    }

    private let state = Mutex(State())

    init() {}

    private static func key(_ notificationID: NotificationID, _ deviceID: DeviceID) -> String {
        "\(notificationID):\(deviceID)"
    }

    func claim(_ pair: SendPair, nowMs: Int64) async throws -> LedgerState {
        state.withLock { s in
            s.claims += 1
            let key = pair.description
            let previous = s.values[key] ?? .unknown
            if previous == .unknown { s.values[key] = .claimed(atMs: nowMs) }
            return previous
        }
    }

    func recordSent(_ pair: SendPair) async throws {
        state.withLock { s in
            s.sentWrites += 1
            s.values[pair.description] = .sent
        }
    }

    func release(_ pair: SendPair) async throws {
        state.withLock { s in
            s.releases += 1
            if case .claimed = s.values[pair.description] { s.values[pair.description] = nil }
        }
    }

    /// Puts a claim in place, as an earlier (possibly interrupted) dispatcher left it.
    func seedClaimed(notificationID: NotificationID, deviceID: DeviceID, atMs: Int64) {
        state.withLock { $0.values[Self.key(notificationID, deviceID)] = .claimed(atMs: atMs) }
    }

    func seedSent(notificationID: NotificationID, deviceID: DeviceID) {
        state.withLock { $0.values[Self.key(notificationID, deviceID)] = .sent }
    }

    func state(notificationID: NotificationID, deviceID: DeviceID) -> LedgerState {
        state.withLock { $0.values[Self.key(notificationID, deviceID)] } ?? .unknown
    }

    var claims: Int { state.withLock { $0.claims } }
    var sentWrites: Int { state.withLock { $0.sentWrites } }
    var releases: Int { state.withLock { $0.releases } }
}

/// Feedback's device changes on dictionaries, with `DeviceStore.invalidate`'s rules: a
/// report is ignored when the device is gone or already invalid, when its token's
/// fingerprint differs, or when it registered after the provider's timestamp.
final class MemoryDeviceInvalidations: DeviceInvalidations, Sendable {
    struct Invalidation: Equatable {
        var deviceID: DeviceID
        var reason: OutcomeReason
        var atMs: Int64
    }

    enum Operation: String, Sendable {
        case device, invalidate, removeLegacy, countDevice
    }

    private struct State {
        var devices: [DeviceID: DeviceRecord] = [:]
        var counts: [ServerID: Int64] = [:]
        /// What `GET /v1/feedback` would list: one entry per applied invalidation.
        var invalidations: [Invalidation] = []
        /// Failures still to inject, per operation.
        var failures: [Operation: Int] = [:]
        var calls: [Operation: Int] = [:]
    }

    private let state = Mutex(State())
    private let clock: MemoryClock

    init(_ devices: [DeviceRecord] = [], counts: [ServerID: Int64] = [:], clock: MemoryClock = MemoryClock(0)) {
        self.clock = clock
        state.withLock { s in
            for device in devices { s.devices[device.id] = device }
            s.counts = counts
        }
    }

    /// The next `count` calls of `operation` throw (Redis unavailable) and change nothing.
    func failNext(_ count: Int, _ operation: Operation) {
        state.withLock { $0.failures[operation] = count }
    }

    private func enter(_ operation: Operation) throws(MemoryFailure) {
        try state.withLock { s throws(MemoryFailure) in
            s.calls[operation, default: 0] += 1
            if let left = s.failures[operation], left > 0 {
                s.failures[operation] = left - 1
                throw MemoryFailure(what: operation.rawValue)
            }
        }
    }

    func device(_ id: DeviceID) async throws -> DeviceRecord? {
        try enter(.device)
        return state.withLock { $0.devices[id] }
    }

    func invalidate(
        deviceID: DeviceID, tokenFingerprint: String, reason: OutcomeReason, providerTimestampMs: Int64?
    ) async throws -> Bool {
        try enter(.invalidate)
        let now = clock.nowMillis()
        return state.withLock { s in
            guard var device = s.devices[deviceID], device.status == .active,
                Fingerprint.token(device.token) == tokenFingerprint
            else { return false }
            if let ts = providerTimestampMs, ts >= 0, device.registeredAtMs > ts { return false }
            device.status = .invalid(reason: reason, atMs: now)
            s.devices[deviceID] = device
            s.invalidations.append(Invalidation(deviceID: deviceID, reason: reason, atMs: now))
            return true
        }
    }

    func removeLegacy(_ device: DeviceRecord) async throws -> Bool {
        try enter(.removeLegacy)
        guard device.zulipLegacyOwner != nil else { return false }
        return state.withLock { $0.devices.removeValue(forKey: device.id) != nil }
    }

    func countDevice(server: ServerID, by delta: Int64) async throws {
        try enter(.countDevice)
        state.withLock { $0.counts[server, default: 0] += delta }
    }

    func stored(_ id: DeviceID) -> DeviceRecord? { state.withLock { $0.devices[id] } }
    func count(server: ServerID) -> Int64 { state.withLock { $0.counts[server] ?? 0 } }
    var invalidations: [Invalidation] { state.withLock { $0.invalidations } }
    func calls(_ operation: Operation) -> Int { state.withLock { $0.calls[operation] ?? 0 } }
}

/// A provider client that answers from a script (then `.sent` with a numbered id once
/// the script is used up) and records every push it was given.
final class MemoryProviderClient: PushProviderClient, Sendable {
    let provider: Provider
    private struct State {
        var script: [SendResult] = []
        var sent: [ProviderPush] = []
        var shutdowns = 0
    }

    private let state = Mutex(State())

    init(_ provider: Provider, answers: [SendResult] = []) {
        self.provider = provider
        state.withLock { $0.script = answers }
    }

    func enqueue(_ answers: SendResult...) {
        state.withLock { $0.script += answers }
    }

    func send(_ push: ProviderPush) async -> SendResult {
        state.withLock { s in
            s.sent.append(push)
            return s.script.isEmpty
                ? .sent(status: 200, providerMessageID: "\(provider.rawValue)-\(s.sent.count)") : s.script.removeFirst()
        }
    }

    func shutdown() async {
        state.withLock { $0.shutdowns += 1 }
    }

    /// The pushes this client was asked to send, in order.
    var sent: [ProviderPush] { state.withLock { $0.sent } }
}

/// Shared values and builders for the stage tests.
enum MemoryFixtures {
    /// A fixed instant (whole seconds, so ms → s conversions are exact).
    static let now: Int64 = 1_750_000_000_000
    static let realm: RealmID = "5c6d0e2a-0000-4000-8000-00000000aaaa"
    static let otherRealm: RealmID = "5c6d0e2a-0000-4000-8000-00000000bbbb"
    static let server: ServerID = "7f1e9c4b-0000-4000-8000-0000000000cc"
    static let topics = TopicNames()

    /// Logs go nowhere: the tests assert on records, not on log lines.
    static let logger = Logger(label: "stage-tests") { _ in SwiftLogNoOpLogHandler() }

    static func randomBytes(_ count: Int) -> [UInt8] {
        (0..<count).map { _ in UInt8.random(in: 0...255) }
    }

    static func pipelineKeyring(id: String = "k1") throws -> PipelineKeyring {
        try PipelineKeyring(fileContents: "\(id):\(Data(randomBytes(32)).base64EncodedString())")
    }

    /// A device push key as a Zulip app generates it (secretbox tag + 32 random bytes).
    static func pushKey() throws -> PushKey {
        try PushKey(tagged: [PushKey.secretboxTag] + randomBytes(32))
    }

    /// What the app does with `encrypted_data`: base64-decode, then libsodium
    /// `crypto_secretbox_open_easy` (nonce || MAC || ciphertext) with its key.
    static func deviceOpens(_ encryptedData: String, with key: PushKey) throws -> [UInt8] {
        guard let data = Data(base64Encoded: encryptedData) else { throw MemoryFailure(what: "not base64") }
        return try SecretBox.open(Array(data), key: key.keyBytes)
    }

    /// A push's provider body (the exact bytes the provider gets) read as JSON; nil when
    /// the record carries none in the clear (sealed, not opened yet).
    static func body(of record: OutboundRecord) throws -> JSONValue? {
        record.body.isEmpty ? nil : try Wire.decode(JSONValue.self, from: record.body)
    }

    static func device(
        _ id: DeviceID, provider: Provider = .apns, realm: RealmID = realm, userID: Int64? = 10,
        token: String? = nil, appID: String? = nil, key: (id: UInt32, key: PushKey)? = nil,
        status: DeviceStatus = .active, registeredAtMs: Int64 = now - 86_400_000,
        legacyOwner: String? = nil
    ) -> DeviceRecord {
        DeviceRecord(
            id: id, realmUUID: realm, userID: userID, provider: provider,
            token: token ?? "\(provider.rawValue)-token-\(id)",
            appID: appID ?? (provider == .apns ? "org.zulip.Zulip" : nil), pushAccountID: nil,
            currentKeyID: key?.id, keys: key.map { [$0.id: $0.key] } ?? [:], status: status,
            registeredAtMs: registeredAtMs, createdAtMs: registeredAtMs,
            zulipLegacyOwner: legacyOwner.flatMap(ZulipLegacyOwner.init(stored:)))
    }

    /// A consumed record, as the Kafka consumer hands it to a stage.
    static func consumedBytes(
        _ value: [UInt8], topic: String, offset: Int64 = 0, headers: [(name: String, value: [UInt8])] = []
    ) -> KafkaRecord {
        KafkaRecord(
            topic: topic, partition: 0, offset: offset, key: nil, value: value, headers: headers, timestampMs: now)
    }

    static func consumed<T: Encodable>(
        _ record: T, topic: String, headers: [(name: String, value: [UInt8])] = []
    ) throws -> KafkaRecord {
        consumedBytes(try Wire.encode(record), topic: topic, headers: headers)
    }

    static func header(_ name: String, _ value: String) -> (name: String, value: [UInt8]) {
        (name, Array(value.utf8))
    }
}
