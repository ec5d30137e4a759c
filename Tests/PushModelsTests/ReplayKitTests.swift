import Foundation
import Kafka
import PushModels
import ReplayKit
import Testing

/// The replay tool's reading, filtering, redaction, summary, trace and re-drive rules.
@Suite struct ReplayKitTests {
    static let token = "a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f9"

    func outbound(attempts: Int? = nil) -> JSONValue {
        var fields: [String: JSONValue] = [
            "schema": 2, "notification_id": "n1", "device_id": 31, "realm_uuid": "realm-a", "provider": "apns",
            "token": .string(Self.token), "body": ["encrypted_data": "c2VjcmV0", "push_key_id": 4],
            "accepted_at_ms": 1_000,
        ]
        if let attempts {
            fields["attempts"] = .int(Int64(attempts))
            fields["last_error"] = "TooManyRequests"
            fields["not_before_ms"] = 5_000
        }
        return .object(fields)
    }

    func delivery(_ outcome: String, provider: String = "apns", reason: String? = nil, at: Int64) -> TopicEntry {
        var fields: [String: JSONValue] = [
            "schema": 1, "notification_id": "n1", "realm_uuid": "realm-a", "device_id": 31,
            "provider": .string(provider), "outcome": .string(outcome), "attempts": 1, "accepted_at_ms": 1_000,
            "completed_at_ms": .int(at),
        ]
        if let reason { fields["reason"] = .string(reason) }
        return TopicEntry(topic: "push.deliveries", timestampMs: at, value: .object(fields))
    }

    @Test func recordsAreRecognisedByTopicOrByShape() {
        #expect(TopicEntry(topic: "push.outbound", timestampMs: 0, value: outbound()).kind == .outbound)
        #expect(TopicEntry(topic: "push.retry.2", timestampMs: 0, value: outbound(attempts: 1)).kind == .retry)
        #expect(TopicEntry(topic: "renamed.topic", timestampMs: 0, value: outbound(attempts: 1)).kind == .retry)
        #expect(delivery("sent", at: 0).kind == .delivery)
        let dead = TopicEntry(
            topic: "push.deadletter", timestampMs: 0,
            value: ["schema": 1, "cause": "expired", "attempts": 2, "dead_at_ms": 9, "record": outbound(attempts: 2)])
        #expect(dead.kind == .deadLetter)
        #expect(dead.deviceID == 31 && dead.notificationID == "n1" && dead.provider == "apns")
        #expect(dead.outcome == "dead_letter" && dead.reason == "TooManyRequests")
        // A schema 1 push (before retry fields existed) reads the same way.
        var v1 = outbound().objectValue ?? [:]
        v1["schema"] = 1
        let old = TopicEntry(topic: "push.outbound", timestampMs: 0, value: .object(v1))
        #expect(old.kind == .outbound && old.deviceID == 31 && old.reason == nil)
        #expect(EntryFilter(device: 31, provider: "apns").matches(old))
        // A feedback hook's record: by topic, and by shape under another name.
        let failed = delivery("invalid_token", reason: "Unregistered", at: 7).value
        for topic in ["push.hooks", "renamed.hooks"] {
            let hook = TopicEntry(
                topic: topic, timestampMs: 8, value: ["schema": 1, "server_uuid": "server-1", "delivery": failed])
            #expect(hook.kind == .hook, "\(topic)")
            #expect(hook.notificationID == "n1" && hook.deviceID == 31 && hook.realmUUID == "realm-a")
            #expect(hook.outcome == "hook" && hook.reason == "Unregistered")
            #expect(Trace.render(notificationID: "n1", entries: [hook]).contains("feedback hook of server server-1"))
        }
    }

    @Test func filtersMatchEveryCriterion() {
        let sent = delivery("sent", at: 10)
        #expect(
            EntryFilter(realm: "realm-a", device: 31, notification: "n1", provider: "apns", outcome: "sent").matches(
                sent))
        #expect(!EntryFilter(realm: "realm-b").matches(sent))
        #expect(!EntryFilter(device: 32).matches(sent))
        #expect(!EntryFilter(outcome: "failed").matches(sent))
        #expect(!EntryFilter(reason: "Unregistered").matches(sent))
        #expect(EntryFilter(reason: "Unregistered").matches(delivery("invalid_token", reason: "Unregistered", at: 1)))
        let request = TopicEntry(
            topic: "push.requests", timestampMs: 0,
            value: [
                "schema": 1, "kind": "native", "notification_id": "n1", "server_uuid": "s", "realm_uuid": "realm-a",
                "user_id": 10, "device_ids": [31, 32], "accepted_at_ms": 1_000,
            ])
        #expect(EntryFilter(user: 10, device: 32).matches(request))
        #expect(!EntryFilter(user: 11).matches(request))
    }

    @Test func tokensAndCiphertextAreRedactedUnlessAsked() {
        let entry = TopicEntry(topic: "push.outbound", timestampMs: 0, value: outbound())
        let redacted = entry.jsonLine(showSecrets: false)
        #expect(!redacted.contains(Self.token))
        #expect(!redacted.contains("c2VjcmV0"))
        #expect(redacted.contains("a1b2…e8f9"))
        #expect(redacted.contains("[redacted 8 chars]"))
        let shown = entry.jsonLine(showSecrets: true)
        #expect(shown.contains(Self.token) && shown.contains("c2VjcmV0"))
    }

    @Test func summaryCountsByOutcomeProviderReasonAndMinute() {
        var summary = Summary()
        summary.add(delivery("sent", at: 60_000))
        summary.add(delivery("sent", provider: "fcm", at: 61_000))
        summary.add(delivery("invalid_token", reason: "Unregistered", at: 125_000))
        #expect(summary.total == 3)
        #expect(summary.byOutcome == ["sent": 2, "invalid_token": 1])
        #expect(summary.byProvider == ["apns": 2, "fcm": 1])
        #expect(summary.byReason == ["Unregistered": 1])
        #expect(summary.perMinute == [60_000: ["sent": 2], 120_000: ["invalid_token": 1]])
        #expect(summary.text.contains("1970-01-01T00:01"))
    }

    @Test func traceListsStagesInOrderWithTheirDelays() {
        let entries = [
            delivery("sent", at: 6_100),
            TopicEntry(topic: "push.retry.1", offset: 3, timestampMs: 1_050, value: outbound(attempts: 1)),
            TopicEntry(topic: "push.outbound", offset: 8, timestampMs: 1_020, value: outbound()),
            TopicEntry(
                topic: "push.requests", offset: 2, timestampMs: 1_001,
                value: [
                    "schema": 1, "kind": "native", "notification_id": "n1", "server_uuid": "s",
                    "realm_uuid": "realm-a", "user_id": 10, "accepted_at_ms": 1_000,
                ]),
        ]
        let text = Trace.render(notificationID: "n1", entries: entries)
        let lines = text.split(separator: "\n").map(String.init)
        #expect(lines[0] == "notification n1  realm realm-a")
        #expect(lines[2].contains("+1 ms") && lines[2].contains("accepted by ingest: native for user 10"))
        #expect(lines[3].contains("+20 ms") && lines[3].contains("encrypted for device 31 apns"))
        #expect(
            lines[4].contains("parked for retry") && lines[4].contains("TooManyRequests")
                && lines[4].contains("due +3950 ms"))
        #expect(lines[5].contains("+5100 ms") && lines[5].contains("outcome sent"))
        #expect(lines.last == "final: device 31: sent")
        #expect(!text.contains(Self.token))
    }

    @Test func aDeadLetterIsRedrivenAsAFreshMarkedPush() throws {
        let dead = TopicEntry(
            topic: "push.deadletter", timestampMs: 0,
            value: [
                "schema": 1, "cause": "attempts_exhausted", "attempts": 6, "dead_at_ms": 9,
                "record": outbound(attempts: 6),
            ])
        let message = Redrive.message(for: dead, into: "push.outbound", force: false, nowMs: 0)
        #expect(message.topic == "push.outbound")
        #expect(message.key == Array("31".utf8))
        let value = try Wire.decode(JSONValue.self, from: message.value)
        #expect(value["attempts"] == nil && value["not_before_ms"] == nil && value["last_error"] == nil)
        #expect(value["token"] == .string(Self.token), "the re-driven push is complete")
        #expect(
            message.headers.contains {
                $0.name == RecordHeader.replay && $0.value == Array("1970-01-01T00:00:00.000Z".utf8)
            })
        #expect(message.headers.contains { $0.name == RecordHeader.notificationID && $0.value == Array("n1".utf8) })
        let forced = Redrive.message(for: dead, into: "push.outbound", force: true, nowMs: 0)
        #expect(forced.headers.contains { $0.name == RecordHeader.replay && $0.value == Array("force".utf8) })
        #expect(Redrive.pair(of: dead)! == ("n1", 31, 1_000))
    }

    @Test func isoTimesParseWithAndWithoutFractions() {
        #expect(ISOTime.parse("2026-11-22T10:00:00Z") == 1_795_341_600_000)
        #expect(ISOTime.parse("2026-11-22T10:00:00.250Z") == 1_795_341_600_250)
        #expect(ISOTime.parse("2026-11-22T11:00:00+01:00") == 1_795_341_600_000)
        #expect(ISOTime.parse("yesterday") == nil)
        #expect(ISOTime.format(1_795_341_600_250) == "2026-11-22T10:00:00.250Z")
    }
}
