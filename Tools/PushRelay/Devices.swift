import ArgumentParser
import DeviceState
import Foundation
import Kafka
import PushModels
import ReplayKit
import ServiceKit

/// `pushrelay devices inspect <id>`: one device as the relay holds it, and its last
/// outcomes on `push.deliveries`, never its token or keys.
struct Devices: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "devices", abstract: "Inspect a device.", subcommands: [InspectDevice.self])
}

struct InspectDevice: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "inspect",
        abstract: "A device's owner, platform, status and last outcomes; never its token or keys.",
        discussion: "Exit status 2 when there is no such device.")

    @Argument(help: "The device id.") var device: Int64
    @Option(help: "Read outcomes of this many last minutes of push.deliveries (0: none).") var minutes = 60
    @Option(help: "Show at most this many last outcomes.") var last = 10
    @OptionGroup var kafka: KafkaOptions
    @OptionGroup var output: OutputOptions

    func validate() throws {
        guard device > 0 else { throw ValidationError("device: a positive id") }
        guard (0...10_080).contains(minutes) else { throw ValidationError("--minutes: 0 to 10080 (a week)") }
        guard (1...1000).contains(last) else { throw ValidationError("--last: 1 to 1000") }
    }

    func run() async throws {
        let relay = try Operator.fromEnvironment()
        let store = DeviceStore(
            redis: relay.redis, keys: relay.settings.redisKeys, storage: try relay.reader.storageKeyring())
        guard let record = try await store.device(DeviceID(device)) else {
            FileHandle.standardError.write(Data("no device \(device)\n".utf8))
            throw Exit.notFound
        }
        let owners = try await RealmDirectory(redis: relay.redis, keys: relay.settings.redisKeys).owners([
            record.realmUUID
        ])
        var outcomes: [TopicEntry] = []
        if minutes > 0 {
            let scanner = try TopicScanner(kafka)
            var filter = EntryFilter()
            filter.device = device
            let since = Wire.nowMillis().saturatingSubtract(Int64(minutes) * 60_000)
            try scanner.read(TopicRange(topic: scanner.topics.deliveries, fromTimeMs: since), filter: filter) {
                outcomes.append($0)
                if outcomes.count > last { outcomes.removeFirst() }
            }
        }
        let facts = Facts(record: record, server: owners.first ?? nil)
        if output.json {
            var json = facts.json
            json["last_outcomes"] = .array(outcomes.map(Self.outcome))
            output.print(.object(json))
        } else {
            for (name, value) in facts.lines { print(name.padding(toLength: 14, withPad: " ", startingAt: 0) + value) }
            print(minutes > 0 ? "last outcomes (\(minutes) min):" : "last outcomes: not read (--minutes 0)")
            for e in outcomes {
                let text: [String] = [
                    ISOTime.format(e.timestampMs), e.notificationID ?? "-", e.outcome ?? "?", e.reason,
                ].compactMap { $0 }
                print("  " + text.joined(separator: "  "))
            }
            if minutes > 0 && outcomes.isEmpty { print("  none") }
        }
    }

    static func outcome(_ e: TopicEntry) -> JSONValue {
        [
            "at_ms": .int(e.timestampMs), "notification_id": e.notificationID.map(JSONValue.string) ?? .null,
            "outcome": e.outcome.map(JSONValue.string) ?? .null, "reason": e.reason.map(JSONValue.string) ?? .null,
            "http_status": e.value["http_status"] ?? .null,
        ]
    }

    /// What may be shown of a device: no token, no key material.
    struct Facts {
        let record: DeviceRecord
        let server: ServerID?

        var status: String {
            switch record.status {
            case .active: "active"
            case .invalid(let reason, let atMs):
                "invalid since \(ISOTime.format(atMs)) (\(reason?.description ?? "no reason"))"
            }
        }

        var owner: String {
            switch record.owner {
            case .native(let userID): "native API, user \(userID)"
            case .zulipE2EE: "Zulip E2EE"
            case .zulipLegacy(let owner): "Zulip legacy, server \(owner.server)"
            case .gorush: "gorush API"
            case .status: "Status push server"
            case .unrecorded: "not recorded"
            }
        }

        var lines: [(String, String)] {
            [
                ("device", "\(record.id)"), ("realm", record.realmUUID.rawValue),
                ("server", server?.rawValue ?? "-"), ("registered by", owner),
                ("provider", record.provider.rawValue), ("app", record.appID ?? "-"),
                ("push account", record.pushAccountID.map(String.init) ?? "-"),
                ("push keys", record.keys.keys.sorted().map(String.init).joined(separator: ",")),
                ("current key", record.currentKeyID.map(String.init) ?? "-"), ("status", status),
                ("registered", ISOTime.format(record.registeredAtMs)), ("created", ISOTime.format(record.createdAtMs)),
            ]
        }

        var json: [String: JSONValue] {
            var invalid: JSONValue = .null
            if case .invalid(let reason, let atMs) = record.status {
                invalid = ["reason": reason.map { .string($0.description) } ?? .null, "at_ms": .int(atMs)]
            }
            return [
                "device_id": .int(record.id.rawValue), "realm_uuid": .string(record.realmUUID.rawValue),
                "server_uuid": server.map { .string($0.rawValue) } ?? .null, "registered_by": .string(owner),
                "user_id": record.userID.map(JSONValue.int) ?? .null, "provider": .string(record.provider.rawValue),
                "app_id": record.appID.map(JSONValue.string) ?? .null,
                "push_account_id": record.pushAccountID.map(JSONValue.int) ?? .null,
                "push_key_ids": .array(record.keys.keys.sorted().map { .int(Int64($0)) }),
                "current_push_key_id": record.currentKeyID.map { .int(Int64($0)) } ?? .null,
                "status": .string(record.status.name), "invalid": invalid,
                "registered_at_ms": .int(record.registeredAtMs), "created_at_ms": .int(record.createdAtMs),
            ]
        }
    }
}
