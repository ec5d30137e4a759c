import Foundation
import PushModels
import Testing

/// docs/compatibility.md, enforced: every record form ever written still decodes (backward),
/// what today's writers write satisfies the previous release's readers (forward), and the
/// readers' rules change over two releases, never in one.
@Suite struct WireCompatibilityTests {
    /// Names today's readers accept and its writers must not write yet, as "key:name" (say
    /// `provider:mqtt`): accepted in one release, written in the next. Unlist a name once
    /// the previous release's rules know it.
    static let acceptedNotYetWritten: Set<String> = []

    static let fixtures = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Fixtures")
    /// Each fixture directory's record, by its name in the rules, and today's schema.
    static let topics: [String: (record: String, schema: Int)] = [
        "push.requests": ("PushRequestRecord", PushRequestRecord.currentSchema),
        "push.outbound": ("OutboundRecord", OutboundRecord.currentSchema),
        "push.deadletter": ("DeadLetterRecord", DeadLetterRecord.currentSchema),
        "push.feedback": ("FeedbackRecord", FeedbackRecord.currentSchema),
        "push.deliveries": ("DeliveryRecord", DeliveryRecord.currentSchema),
        "push.hooks": ("HookDeliveryRecord", HookDeliveryRecord.currentSchema),
    ]
    /// Added to the forward and two-step failures.
    static let twoSteps = """
        A change the previous release cannot read takes two minor releases (docs/compatibility.md): \
        to drop a required key, stop requiring it (still written, `default=`), then stop writing it; \
        to require a key, write it always first, then require it; a new name is accepted first \
        (listed in acceptedNotYetWritten), then written.
        """

    @Test func everyRecordFormEverWrittenStillDecodes() throws {
        let corpus = try Self.corpus()
        var schemas: [String: Set<Int>] = [:]
        for fixture in corpus {
            let schema = try Int(Wire.decode(JSONValue.self, from: fixture.bytes)["schema"]?.intValue ?? 0)
            schemas[fixture.topic, default: []].insert(schema)
            let newest = Self.topics[fixture.topic]?.schema ?? 0
            #expect(schema >= 1 && schema <= newest, "\(fixture.path): schema \(schema), today's is \(newest)")
            do {
                let stable = try Self.reencode(fixture).stable
                #expect(stable, "\(fixture.path) reads back differently once re-encoded")
            } catch {
                Issue.record("\(fixture.path) no longer decodes (\(error)): readers read every form ever written")
            }
        }
        for (topic, record) in Self.topics {
            #expect(schemas[topic] == Set(1...record.schema), "\(topic): a fixture for each schema, at least")
        }
        var written: Set<String> = []  // "key:value" for each string in the corpus
        for fixture in corpus { try Self.strings(in: Wire.decode(JSONValue.self, from: fixture.bytes), into: &written) }
        let names = try Self.names(Self.rules("current")).subtracting(Self.acceptedNotYetWritten)
        #expect(names.subtracting(written).isEmpty, "names written today, in no fixture: add one for each")
        let provenance = Self.fixtures.appendingPathComponent("records/provenance.json")
        let writers = try JSONDecoder().decode([String: String].self, from: Data(contentsOf: provenance))
        #expect(Set(writers.keys) == Set(corpus.map(\.path)), "provenance.json names each fixture's writer")
    }

    /// Today's writer writes every form the corpus holds (each name included, as checked
    /// above), and rewrites records of any schema (retries, dead letters, replays).
    @Test func todaysRecordsSatisfyThePreviousReleasesReaders() throws {
        let (version, previous) = try Self.previousRules()
        for fixture in try Self.corpus() {
            let value = try Wire.decode(JSONValue.self, from: Self.reencode(fixture).encoded)
            let found = Self.violations(of: value, as: Self.topics[fixture.topic]?.record ?? "", in: previous, at: "")
            #expect(
                found.isEmpty,
                "release \(version) cannot read \(fixture.path) as written today: \(found)\n\(Self.twoSteps)")
        }
    }

    @Test func theRulesChangeOverTwoReleases() throws {
        let (version, previous) = try Self.previousRules()
        let found = Self.violations(previous: previous, current: try Self.rules("current"))
        #expect(found.isEmpty, "against release \(version):\n\(found.joined(separator: "\n"))\n\(Self.twoSteps)")
        let known = Self.names(previous).intersection(Self.acceptedNotYetWritten)
        #expect(known.isEmpty, "release \(version) reads \(known.sorted()): write them, unlist them")
    }

    /// The checks fail on one-step changes: tried on altered copies of the rules and a record.
    @Test func oneStepChangesFail() throws {
        let base = try Self.rules("current")
        func broken(_ previous: Rules, _ current: Rules, _ accepted: Set<String> = []) -> Int {
            Self.violations(previous: previous, current: current, acceptedNotYetWritten: accepted).count
        }
        var relaxed = base  // A removal, first release: written still (`default=`), not required.
        relaxed.records["FeedbackRecord"]?.keys["reason"]?.required = false
        var removed = relaxed  // Second release: not written.
        removed.records["FeedbackRecord"]?.keys["reason"] = nil
        #expect(broken(base, base) == 0 && broken(base, relaxed) == 0 && broken(relaxed, removed) == 0)
        #expect(broken(base, removed) == 1, "a required key dropped in one release")
        var sometimes = base
        sometimes.records["OutboundRecord"]?.keys["token"]?.written = "maybe"
        #expect(broken(base, sometimes) == 1, "a required key written only sometimes")

        var written = base  // An addition, first release: written always, not required.
        written.records["FeedbackRecord"]?.keys["region"] = KeyRule(
            type: "string", required: false, unless: nil, ignoredWith: nil, written: "always", writtenUnless: nil)
        var mandatory = written  // Second release: required.
        mandatory.records["FeedbackRecord"]?.keys["region"]?.required = true
        #expect(broken(base, written) == 0 && broken(written, mandatory) == 0)
        #expect(broken(base, mandatory) == 1, "a new key required in one release")
        mandatory = base
        mandatory.records["OutboundRecord"]?.keys["collapse_id"]?.required = true
        #expect(broken(base, mandatory) == 1, "an optional key required in one release")
        var named = base
        named.records["FeedbackRecord"]?.keys["provider"]?.names?.append("mqtt")
        #expect(broken(base, named) == 1 && broken(base, named, ["provider:mqtt"]) == 0, "a new name")

        let feedback = FeedbackRecord(
            deviceID: 9, realmUUID: "r", provider: .apns, tokenFingerprint: "ab12cd34ef560789",
            reason: .provider("Unregistered"),
            providerTimestampMs: nil, notificationID: "n", observedAtMs: 1)
        let value = try Wire.decode(JSONValue.self, from: Wire.encode(feedback))
        var fields = value.objectValue ?? [:]
        fields["reason"] = nil
        fields["provider"] = "mqtt"
        fields["device_id"] = "9"
        #expect(Self.violations(of: value, as: "FeedbackRecord", in: base, at: "f").isEmpty)
        #expect(Self.violations(of: .object(fields), as: "FeedbackRecord", in: base, at: "f").count == 3)
    }

    // MARK: - Rules (Fixtures/rules/*.json, printed by `scripts/wiregen.py --rules`)

    /// One key's rule; scripts/wiregen.py (`# MARK: - Rules`) says what each field means.
    struct KeyRule: Decodable, Equatable {
        var type: String, required: Bool, unless: [String]?, ignoredWith: [String]?
        var written: String, writtenUnless: [String]?
        var names: [String]?, elements: String?, record: String?
    }

    struct RecordRules: Decodable, Equatable {
        struct Union: Decodable, Equatable {
            var key: String
            var cases: [String: [String: KeyRule]]
        }
        var keys: [String: KeyRule]
        var union: Union?
    }

    struct Rules: Decodable, Equatable {
        var records: [String: RecordRules]
    }

    static func rules(_ name: String) throws -> Rules {
        try JSONDecoder().decode(
            Rules.self, from: Data(contentsOf: fixtures.appendingPathComponent("rules/\(name).json")))
    }

    /// The previous release: the newest `rules/X.Y.Z.json` before VERSION, or VERSION's own
    /// once the tree has changed its rules since that release (or when it is the only one).
    static func previousRules() throws -> (version: String, rules: Rules) {
        let root = fixtures.deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let version = try String(contentsOf: root.appendingPathComponent("VERSION"), encoding: .utf8)
            .trimmingCharacters(in: .whitespacesAndNewlines)
        let number = { (text: String) in text.split(separator: ".").map { Int($0) ?? 0 } }
        let releases = try FileManager.default.contentsOfDirectory(atPath: fixtures.path + "/rules")
            .filter { $0.hasSuffix(".json") && $0 != "current.json" }.map { String($0.dropLast(5)) }
            .sorted { number($0).lexicographicallyPrecedes(number($1)) }
        var previous = releases.last { number($0).lexicographicallyPrecedes(number(version)) } ?? releases.last ?? ""
        if releases.contains(version), try rules(version) != rules("current") {
            previous = version
        }
        return (previous, try rules(previous))
    }

    /// Every name a `named` key accepts, as "key:name".
    static func names(_ rules: Rules) -> Set<String> {
        var found: Set<String> = []
        for keys in rules.records.values.flatMap({ scopes($0).values }) {
            for (key, rule) in keys { found.formUnion((rule.names ?? []).map { "\(key):\($0)" }) }
        }
        return found
    }

    /// Each string of `value`, anywhere in it, as "key:string".
    static func strings(in value: JSONValue, into found: inout Set<String>) {
        for item in value.arrayValue ?? [] { strings(in: item, into: &found) }
        for (key, item) in value.objectValue ?? [:] {
            if let text = item.stringValue { found.insert("\(key):\(text)") }
            strings(in: item, into: &found)
        }
    }

    /// A record's keys, per union case (`[kind=native]`) when it has one.
    static func scopes(_ record: RecordRules) -> [String: [String: KeyRule]] {
        guard let union = record.union else { return ["": record.keys] }
        return Dictionary(
            uniqueKeysWithValues: union.cases.map { tag, keys in
                ("[\(union.key)=\(tag)]", record.keys.merging(keys) { _, inCase in inCase })
            })
    }

    /// Whether `key`, or one of `unless`, is written in every record `keys` describes.
    static func covered(_ key: String, unless: [String]?, by keys: [String: KeyRule]) -> Bool {
        let allowed = Set([key] + (unless ?? []))
        return allowed.contains { candidate in
            keys[candidate]?.written == "always" && allowed.isSuperset(of: keys[candidate]?.writtenUnless ?? [])
        }
    }

    /// What breaks a rolling upgrade between the previous release and this tree: a key its
    /// readers require that today's writers may leave out, a key today's readers require that
    /// its writers may have left out, a type changed, a name its readers refuse.
    static func violations(
        previous: Rules, current: Rules,
        acceptedNotYetWritten: Set<String> = WireCompatibilityTests.acceptedNotYetWritten
    ) -> [String] {
        var found: [String] = []
        for (record, old) in previous.records {
            guard let new = current.records[record] else { continue }  // neither read nor written now
            let newScopes = scopes(new)
            for (scope, oldKeys) in scopes(old) {
                guard let newKeys = newScopes[scope] else { continue }  // a kind no longer written
                for (key, was) in oldKeys {
                    let at = "\(record)\(scope).\(key)"
                    if was.required && !covered(key, unless: was.unless, by: newKeys) {
                        found.append("\(at): the previous release requires it, today's writers may leave it out")
                    }
                    guard let now = newKeys[key] else { continue }
                    if was.type != "any" && now.type != was.type {
                        found.append("\(at): the previous release reads a \(was.type), today's writers a \(now.type)")
                    }
                    for name in Set(now.names ?? []).subtracting(was.names ?? now.names ?? []).sorted()
                    where !acceptedNotYetWritten.contains("\(key):\(name)") {
                        found.append("\(at): the previous release refuses \"\(name)\" (not in acceptedNotYetWritten)")
                    }
                }
                for (key, now) in newKeys where now.required && !covered(key, unless: now.unless, by: oldKeys) {
                    found.append("\(record)\(scope).\(key): required now, the previous release may not write it")
                }
            }
        }
        return found.sorted()
    }

    /// Where `value`, a `name` record, fails the reader `rules` describe.
    static func violations(of value: JSONValue, as name: String, in rules: Rules, at path: String) -> [String] {
        guard let fields = value.objectValue, let record = rules.records[name] else {
            return ["\(path): not a \(name) the rules know"]
        }
        var keys = record.keys
        if let union = record.union, let tag = fields[union.key]?.stringValue, let cases = union.cases[tag] {
            keys.merge(cases) { $1 }
        }
        let present = { (key: String) in fields[key].map { $0 != .null } ?? false }
        var found: [String] = []
        for (key, rule) in keys where !(rule.ignoredWith ?? []).contains(where: present) {
            guard let value = fields[key], value != .null || rule.type == "any" else {
                if rule.required && !(rule.unless ?? []).contains(where: present) {
                    found.append("\(path).\(key): missing, and required")
                }
                continue
            }
            let type = value.typeName == "integer" ? "int" : value.typeName  // as the rules name them
            let elements = rule.elements == nil || (value.arrayValue ?? []).allSatisfy { $0.intValue != nil }
            guard elements, rule.type == "any" || rule.type == type else {
                found.append("\(path).\(key): a \(value.typeName), read as \(rule.type)")
                continue
            }
            if let names = rule.names, let text = value.stringValue, !names.contains(text) {
                found.append("\(path).\(key): \"\(text)\" is no name the reader knows")
            }
            for item in rule.record == nil ? [] : value.arrayValue ?? [value] {
                found += violations(of: item, as: rule.record ?? "", in: rules, at: "\(path).\(key)")
            }
        }
        return found.sorted()
    }

    // MARK: - Records

    struct Fixture {
        var topic: String, path: String, bytes: [UInt8]
    }

    /// Every fixture: Fixtures/records/<topic>/<name>.json.
    static func corpus() throws -> [Fixture] {
        let root = fixtures.appendingPathComponent("records")
        var found: [Fixture] = []
        for topic in try FileManager.default.contentsOfDirectory(atPath: root.path).sorted()
        where !topic.hasSuffix(".json") {
            for file in try FileManager.default.contentsOfDirectory(atPath: root.path + "/" + topic).sorted()
            where file.hasSuffix(".json") {
                let bytes = try Data(contentsOf: root.appendingPathComponent(topic).appendingPathComponent(file))
                found.append(Fixture(topic: topic, path: "\(topic)/\(file)", bytes: Array(bytes)))
            }
        }
        return found
    }

    /// A fixture read by today's reader of its topic and written again by today's writer.
    static func reencode(_ fixture: Fixture) throws -> (encoded: [UInt8], stable: Bool) {
        func roundTrip<R: WireObject & Equatable>(_: R.Type) throws -> (encoded: [UInt8], stable: Bool) {
            let record = try Wire.decode(R.self, from: fixture.bytes)
            let encoded = try Wire.encode(record)
            let again = try Wire.decode(R.self, from: encoded)
            return (encoded, again == record)
        }
        switch fixture.topic {
        case "push.requests": return try roundTrip(PushRequestRecord.self)
        case "push.outbound": return try roundTrip(OutboundRecord.self)
        case "push.deadletter": return try roundTrip(DeadLetterRecord.self)
        case "push.feedback": return try roundTrip(FeedbackRecord.self)
        case "push.deliveries": return try roundTrip(DeliveryRecord.self)
        case "push.hooks": return try roundTrip(HookDeliveryRecord.self)
        default: throw CocoaError(.fileReadUnknown)  // a directory that names no topic
        }
    }
}
