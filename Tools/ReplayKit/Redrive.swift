import Foundation
import Kafka
import PushModels

/// `--into`: how a selected record goes back onto a topic.
public enum Redrive {
    /// The (notification, device) pair a record would push, when it is a push.
    public static func pair(of e: TopicEntry) -> (
        notificationID: NotificationID, deviceID: DeviceID, acceptedAtMs: Int64
    )? {
        guard let push = e.push, let n = push[RecordHeader.notificationID]?.stringValue,
            let d = push["device_id"]?.intValue, let accepted = push["accepted_at_ms"]?.intValue
        else { return nil }
        return (NotificationID(n), DeviceID(d), accepted)
    }

    /// The record to produce: the same value, key and headers, marked as a replay. A dead
    /// letter or a parked retry goes back as a fresh push (attempts and due time cleared).
    public static func message(for e: TopicEntry, into topic: String, force: Bool, nowMs: Int64) -> KafkaOutgoing {
        var value = e.raw
        var key = e.key
        if e.kind == .deadLetter || e.kind == .retry, var push = e.push?.objectValue {
            push["attempts"] = nil
            push["last_error"] = nil
            push["not_before_ms"] = nil
            value = Wire.canonical(.object(push))
            if let device = push["device_id"]?.intValue { key = "\(device)" }
        }
        var headers = e.headers.filter { $0.name != RecordHeader.due && $0.name != RecordHeader.replay }
        if !headers.contains(where: { $0.name == RecordHeader.notificationID }), let n = e.notificationID {
            headers.append((RecordHeader.notificationID, Array(n.utf8)))
        }
        headers.append((RecordHeader.replay, Array((force ? "force" : ISOTime.format(nowMs)).utf8)))
        return KafkaOutgoing(topic: topic, key: key, value: value, headers: headers)
    }
}
