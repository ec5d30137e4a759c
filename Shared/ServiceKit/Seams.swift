import Kafka
import PushModels
import RedisClient

// The plumbing seams each stage's logic is written against: publishing records and the
// clock. The device-state seams (`DeviceDirectory`, `DeliveryLedger`,
// `DeviceInvalidations`) live with their Redis stores in DeviceState (`StageSeams.swift`);
// the provider client is `PushProviderClient` in Providers. Production wires Kafka,
// Redis and HTTP/2; the stage unit tests wire in-memory ones.

/// Puts records on their topics and returns once every one is acknowledged.
public protocol RecordPublisher: Sendable {
    func publish(_ records: [KafkaOutgoing]) async throws
}

/// Wall-clock time in milliseconds since the epoch: acceptance, expiry, due times.
public protocol WallClock: Sendable {
    func nowMillis() -> Int64
}

/// The system clock.
public struct SystemClock: WallClock {
    public init() {}
    public func nowMillis() -> Int64 { Wire.nowMillis() }
}

extension KafkaProducer: RecordPublisher {}
