import Foundation
import Kafka
import PushModels
import ServiceKit

/// Outcomes of the notifications a sync-mode call waits for (gorush's `core.sync`):
/// ingest reads `push.deliveries` from its end in a group of its own, so every instance
/// sees every outcome, and keeps those of the notifications it was asked to wait for.
public actor DeliveryWatch {
    struct Pending {
        var devices: Set<DeviceID>
        var outcomes: [DeviceID: DeliveryRecord] = [:]
    }

    /// Notifications waited for at once, at most; past it a call answers without waiting.
    static let maxPending = 10_000
    private var pending: [NotificationID: Pending] = [:]

    public init() {}

    /// Starts keeping the outcomes of `id` (call before publishing it).
    func expect(_ id: NotificationID, devices: [DeviceID]) {
        guard pending.count < Self.maxPending else { return }
        pending[id] = Pending(devices: Set(devices))
    }

    /// One record of `push.deliveries`.
    public func record(_ delivery: DeliveryRecord) {
        guard var entry = pending[delivery.notificationID] else { return }
        if let device = delivery.deviceID {
            entry.outcomes[device] = delivery
        } else {
            // An outcome for the whole notification (it could not be read): every device.
            for device in entry.devices where entry.outcomes[device] == nil { entry.outcomes[device] = delivery }
        }
        pending[delivery.notificationID] = entry
    }

    private func state(_ id: NotificationID) -> (done: Bool, outcomes: [DeviceID: DeliveryRecord]) {
        guard let entry = pending[id] else { return (true, [:]) }
        return (entry.devices.isSubset(of: entry.outcomes.keys), entry.outcomes)
    }

    /// The outcomes of `id` once every device has one, or what there is at `deadline`.
    func wait(_ id: NotificationID, until deadline: ContinuousClock.Instant) async -> [DeviceID: DeliveryRecord] {
        while true {
            let (done, outcomes) = state(id)
            if done || ContinuousClock.now >= deadline {
                pending[id] = nil
                return outcomes
            }
            try? await Task.sleep(for: .milliseconds(20))
        }
    }

    /// The handler of the `push.deliveries` consumer.
    public static func handler(_ watch: DeliveryWatch) -> @Sendable (KafkaRecord) async -> RecordDisposition {
        { record in
            if let delivery = try? Wire.decode(DeliveryRecord.self, from: record.value) {
                await watch.record(delivery)
            }
            return .done
        }
    }
}
