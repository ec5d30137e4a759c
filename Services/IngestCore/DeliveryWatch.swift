import Foundation
import Kafka
import PushModels
import ServiceKit
import Synchronization

/// Outcomes of the notifications a sync-mode call waits for (gorush's `core.sync`):
/// ingest follows `push.deliveries` from its end (a `KafkaTopicTail`: no consumer group,
/// so every instance sees every outcome), and keeps those of the notifications it was
/// asked to wait for. A record of a notification nobody waits for is dropped on its
/// header, undecoded. The tail fetches only while sync calls come (and a minute after):
/// reading every outcome of every notification cost ingest ~20 µs of CPU a notification
/// and the broker as much again, for calls that few deployments make.
public final class DeliveryWatch: Sendable {
    struct Pending {
        var devices: Set<DeviceID>
        var outcomes: [DeviceID: DeliveryRecord] = [:]
        var since = ContinuousClock.now
    }

    /// Notifications waited for at once, at most; past it a call answers without waiting.
    static let maxPending = 10_000
    /// An entry nobody waits for any more (its call failed before waiting) is dropped after this.
    static let abandonAfter: Duration = .seconds(600)
    private let pending = Mutex<[NotificationID: Pending]>([:])
    /// Starts (or keeps) reading outcomes; returns once every later outcome will be seen.
    private let follower = Mutex<(@Sendable () async throws -> Void)?>(nil)

    public init() {}

    /// What `ready()` runs: the tail's `follow()`. Without one, records come by `take`.
    public func attach(follow: @escaping @Sendable () async throws -> Void) {
        follower.withLock { $0 = follow }
    }

    /// Call after `expect` and before publishing: returns once every outcome from now
    /// on reaches `take`. Throws when outcomes cannot be read (the brokers are out of reach).
    func ready() async throws {
        if let follow = follower.withLock({ $0 }) { try await follow() }
    }

    /// True while some call waits for outcomes.
    public var isWaiting: Bool { pending.withLock { !$0.isEmpty } }

    /// Starts keeping the outcomes of `id` (call before publishing it).
    func expect(_ id: NotificationID, devices: [DeviceID]) {
        pending.withLock { pending in
            if pending.count >= Self.maxPending / 2 {
                let cutoff = ContinuousClock.now - Self.abandonAfter
                pending = pending.filter { $0.value.since > cutoff }
            }
            guard pending.count < Self.maxPending else { return }
            pending[id] = Pending(devices: Set(devices))
        }
    }

    func isWaited(_ id: NotificationID) -> Bool { pending.withLock { $0[id] != nil } }

    /// Stops keeping `id` (its call failed before it was published).
    func forget(_ id: NotificationID) { _ = pending.withLock { $0.removeValue(forKey: id) } }

    /// One record of `push.deliveries`.
    public func record(_ delivery: DeliveryRecord) {
        pending.withLock { pending in
            guard var entry = pending[delivery.notificationID] else { return }
            if let device = delivery.deviceID {
                entry.outcomes[device] = delivery
            } else {
                // An outcome for the whole notification (it could not be read): every device.
                for device in entry.devices where entry.outcomes[device] == nil { entry.outcomes[device] = delivery }
            }
            pending[delivery.notificationID] = entry
        }
    }

    /// The outcomes of `id` once every device has one, or what there is at `deadline`.
    func wait(_ id: NotificationID, until deadline: ContinuousClock.Instant) async -> [DeviceID: DeliveryRecord] {
        while true {
            let (done, outcomes) = pending.withLock { pending -> (Bool, [DeviceID: DeliveryRecord]) in
                guard let entry = pending[id] else { return (true, [:]) }
                let done = entry.devices.isSubset(of: entry.outcomes.keys)
                if done || ContinuousClock.now >= deadline { pending[id] = nil }
                return (done, entry.outcomes)
            }
            if done || ContinuousClock.now >= deadline { return outcomes }
            try? await Task.sleep(for: .milliseconds(20))
        }
    }

    /// Records of `push.deliveries`, as the tail read them.
    public func take(_ records: [KafkaRecord]) {
        for record in records {
            guard let header = record.header(RecordHeader.notificationID),
                isWaited(NotificationID(String(decoding: header, as: UTF8.self))),
                let delivery = try? Wire.decode(DeliveryRecord.self, from: record.value)
            else { continue }
            self.record(delivery)
        }
    }
}
