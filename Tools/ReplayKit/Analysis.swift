import Foundation
import PushModels

/// `--summary`: counts by outcome, provider and reason, overall and per minute.
public struct Summary: Sendable {
    public private(set) var total = 0
    public private(set) var byOutcome: [String: Int] = [:]
    public private(set) var byProvider: [String: Int] = [:]
    public private(set) var byReason: [String: Int] = [:]
    /// Minute start (ms) → outcome → count.
    public private(set) var perMinute: [Int64: [String: Int]] = [:]
    public private(set) var first: Int64?
    public private(set) var last: Int64?

    public init() {}

    public mutating func add(_ e: TopicEntry) {
        total += 1
        let outcome = e.outcome ?? e.kind.rawValue
        byOutcome[outcome, default: 0] += 1
        byProvider[e.provider ?? "-", default: 0] += 1
        if let reason = e.reason { byReason[reason, default: 0] += 1 }
        perMinute[e.timestampMs / 60_000 * 60_000, default: [:]][outcome, default: 0] += 1
        first = min(first ?? e.timestampMs, e.timestampMs)
        last = max(last ?? e.timestampMs, e.timestampMs)
    }

    public var text: String {
        var lines: [String] = []
        let span = first.map { f in "\(ISOTime.format(f)) → \(ISOTime.format(last ?? f))" } ?? "no records"
        lines.append("records: \(total)  (\(span))")
        func section(_ title: String, _ counts: [String: Int]) {
            guard !counts.isEmpty else { return }
            lines.append("\(title):")
            for (name, count) in counts.sorted(by: { ($0.value, $1.key) > ($1.value, $0.key) }) {
                lines.append(
                    "  " + name.padding(toLength: max(24, name.count), withPad: " ", startingAt: 0) + " \(count)")
            }
        }
        section("by outcome", byOutcome)
        section("by provider", byProvider)
        section("by reason", byReason)
        if !perMinute.isEmpty {
            let outcomes = byOutcome.keys.sorted()
            lines.append("per minute:")
            lines.append(
                "  " + "minute (UTC)".padding(toLength: 18, withPad: " ", startingAt: 0)
                    + outcomes.map { $0.padding(toLength: max(8, $0.count + 1), withPad: " ", startingAt: 0) }.joined())
            for (minute, counts) in perMinute.sorted(by: { $0.key < $1.key }) {
                let label = String(ISOTime.format(minute).prefix(16))
                lines.append(
                    "  " + label.padding(toLength: 18, withPad: " ", startingAt: 0)
                        + outcomes.map {
                            "\(counts[$0] ?? 0)".padding(toLength: max(8, $0.count + 1), withPad: " ", startingAt: 0)
                        }.joined())
            }
        }
        return lines.joined(separator: "\n")
    }

    public var json: JSONValue {
        func object(_ d: [String: Int]) -> JSONValue { .object(d.mapValues { .int(Int64($0)) }) }
        return .object([
            "total": .int(Int64(total)), "by_outcome": object(byOutcome), "by_provider": object(byProvider),
            "by_reason": object(byReason),
            "per_minute": .object(
                Dictionary(uniqueKeysWithValues: perMinute.map { (ISOTime.format($0.key), object($0.value)) })),
        ])
    }
}

/// `--trace`: one notification's path through every topic, stage by stage.
public enum Trace {
    /// Topic order within one millisecond: the order the stages run in.
    static func stageRank(_ kind: TopicEntry.Kind) -> Int {
        switch kind {
        case .request: 0
        case .outbound: 1
        case .retry: 2
        case .deadLetter: 3
        case .feedback: 4
        case .delivery: 5
        case .hook: 6
        case .unknown: 7
        }
    }

    public static func render(notificationID: String, entries: [TopicEntry]) -> String {
        guard !entries.isEmpty else { return "notification \(notificationID): no records in the range read" }
        let sorted = entries.sorted {
            ($0.timestampMs, stageRank($0.kind), $0.offset) < ($1.timestampMs, stageRank($1.kind), $1.offset)
        }
        let accepted = sorted.compactMap {
            $0.value["accepted_at_ms"]?.intValue ?? $0.push?["accepted_at_ms"]?.intValue
        }.first
        let origin = accepted ?? sorted[0].timestampMs
        var lines = ["notification \(notificationID)"]
        if let realm = sorted.compactMap(\.realmUUID).first { lines[0] += "  realm \(realm)" }
        lines.append("accepted \(ISOTime.format(origin))")
        let width = sorted.map { "\($0.topic)[\($0.partition)]@\($0.offset)".count }.max() ?? 0
        for e in sorted {
            let delta = "+\(max(0, e.timestampMs.saturatingSubtract(origin))) ms".padding(
                toLength: 10, withPad: " ", startingAt: 0)
            let place = "\(e.topic)[\(e.partition)]@\(e.offset)".padding(toLength: width, withPad: " ", startingAt: 0)
            lines.append("  \(delta) \(place)  \(describe(e))")
        }
        let outcomes = sorted.filter { $0.kind == .delivery }.compactMap { e in
            e.deviceID.map { "device \($0): \(e.outcome ?? "?")" }
        }
        lines.append("final: " + (outcomes.isEmpty ? "no outcome recorded" : outcomes.joined(separator: ", ")))
        return lines.joined(separator: "\n")
    }

    static func describe(_ e: TopicEntry) -> String {
        let v = e.value
        func device() -> String {
            [e.deviceID.map { "device \($0)" }, e.provider].compactMap { $0 }.joined(separator: " ")
        }
        switch e.kind {
        case .request:
            let kind = v["kind"]?.stringValue ?? "?"
            let who = e.userID.map { "user \($0)" } ?? "realm"
            let devices =
                e.deviceIDs.isEmpty ? "all devices" : "devices \(e.deviceIDs.map(String.init).joined(separator: ","))"
            return "accepted by ingest: \(kind) for \(who), \(devices)"
        case .outbound:
            let attempts = v["attempts"]?.intValue.map { ", after \($0) attempts" } ?? ""
            return "encrypted for \(device())\(attempts)"
        case .retry:
            let attempts = v["attempts"]?.intValue ?? 0
            let due = v["not_before_ms"]?.intValue.map { " due +\($0 - e.timestampMs) ms" } ?? ""
            return "parked for retry: \(device()) attempt \(attempts) failed (\(e.reason ?? "?"))\(due)"
        case .deadLetter:
            return
                "dead-lettered: \(device()) \(v["cause"]?.stringValue ?? "?") (\(e.reason ?? "?")) after \(v["attempts"]?.intValue ?? 0) attempts"
        case .feedback:
            return "token invalidated: \(device()) (\(e.reason ?? "?"))"
        case .delivery:
            var text = "outcome \(e.outcome ?? "?"): \(device())"
            if let reason = e.reason { text += " (\(reason))" }
            if let status = v["http_status"]?.intValue { text += " status \(status)" }
            if let attempts = v["attempts"]?.intValue { text += " attempts \(attempts)" }
            return text
        case .hook:
            let failed = e.hookedDelivery?["outcome"]?.stringValue ?? "?"
            return
                "queued for the feedback hook of server \(v["server_uuid"]?.stringValue ?? "?"): \(device()) \(failed)"
        case .unknown:
            return "unrecognised record"
        }
    }
}
