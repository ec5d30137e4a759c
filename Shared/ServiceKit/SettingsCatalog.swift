import Foundation
import LogKeys
import Logging
import PushModels

/// Every setting the services read, with the values that make sense for it. Each
/// executable checks its environment against this table before it reads anything, so
/// a value that makes no sense stops the process at start with a message naming the
/// variable, instead of being replaced by a default without a word.
///
/// swift-configuration's `config.int(forKey:default:)` answers the default for a value
/// it cannot read; after this check every value it reads is known to be valid.
public enum SettingsCatalog {
    public enum Kind: Sendable {
        case int(ClosedRange<Int>)
        case double(ClosedRange<Double>)
        /// Free text of at most 4,096 bytes without control characters.
        case text
        /// Text that is a secret (a password): checked like `text`, never quoted in a message.
        case secret
        /// A file path (read where used; a missing file fails there, at start).
        case path
        case oneOf([String])
        /// A duration list such as `5s,1m,10m`.
        case delays
        /// A Kafka topic name or prefix: ASCII letters, digits, `.`, `_`, `-`; 1 to 200 bytes.
        case topic
        case bool
        /// An HTTP header field name (RFC 9110 token), or empty.
        case headerName
    }

    /// One setting: its key, the values that make sense for it, and its row in
    /// docs/configuration.md (the default as stated there, and who reads it for what).
    public struct Setting: Sendable {
        /// As written in code; the environment variable is the key upper-cased with `.` as `_`.
        public let key: String
        public let kind: Kind
        /// Markdown: the default as the services apply it (or "unset", "required").
        public let defaultValue: String
        /// Markdown: the stages that read it, and what it does.
        public let about: String

        init(_ key: String, _ kind: Kind, default defaultValue: String, _ about: String) {
            self.key = key
            self.kind = kind
            self.defaultValue = defaultValue
            self.about = about
        }
    }

    /// A titled group of settings: one table of docs/configuration.md.
    public struct Section: Sendable {
        public let title: String
        public let summary: String
        public let settings: [Setting]

        init(_ title: String, _ summary: String, _ settings: [Setting]) {
            self.title = title
            self.summary = summary
            self.settings = settings
        }
    }

    /// Every setting the services read, grouped as docs/configuration.md shows them
    /// (`SettingsCatalogPlatform.swift`, `SettingsCatalogStages.swift`).
    public static let sections: [Section] = [
        kafka, redis, topics, process, keys, ingest, encryptor, dispatcher, providers, feedback, compat,
    ]

    /// Each setting's kind by key. A key listed twice is a programming error that the
    /// catalog's tests catch; the later entry wins here.
    public static let entries: [String: Kind] = Dictionary(
        sections.flatMap(\.settings).map { ($0.key, $0.kind) }, uniquingKeysWith: { _, later in later })

    /// Variables that belong to the dev tools and the test harness, not to a service.
    static let toolPrefixes = ["PUSHRELAY_FAKES_", "PUSHRELAY_DEVBROKER_", "PUSHRELAY_FUZZ_", "PUSHRELAY_BENCH_"]
    /// Not settings: the harness's, and the image's build revision (`BuildInfo`).
    static let toolVariables: Set<String> = [
        "PUSHRELAY_BIN_DIR", "PUSHRELAY_BUILD_REVISION",
    ]

    public static func environmentName(_ key: String) -> String {
        key.uppercased().replacingOccurrences(of: ".", with: "_")
    }

    /// Problems with the given environment: one line per variable whose value makes no
    /// sense. Unknown `PUSHRELAY_` variables are returned separately (likely typos).
    public static func check(_ environment: [String: String]) -> (errors: [String], unknown: [String]) {
        var byName: [String: (String, Kind)] = [:]
        for (key, kind) in entries { byName[environmentName(key)] = (key, kind) }
        var errors: [String] = []
        var unknown: [String] = []
        for (name, value) in environment.sorted(by: { $0.key < $1.key }) where name.hasPrefix("PUSHRELAY_") {
            guard let (_, kind) = byName[name] else {
                if !toolVariables.contains(name) && !toolPrefixes.contains(where: name.hasPrefix) {
                    unknown.append(name)
                }
                continue
            }
            if let problem = problem(value, kind) { errors.append("\(name)=\(shown(value, kind)): \(problem)") }
        }
        return (errors, unknown)
    }

    /// Checks the process environment; throws a `SettingsError` listing every bad value.
    public static func validateEnvironment(logger: Logger? = nil) throws {
        let (errors, unknown) = check(ProcessInfo.processInfo.environment)
        for name in unknown {
            logger?.warning("unknown setting ignored (a typo?)", metadata: [LogKey.variable: "\(name)"])
        }
        guard errors.isEmpty else {
            throw SettingsError("invalid configuration:\n  " + errors.joined(separator: "\n  "))
        }
    }

    public static func problem(_ value: String, _ kind: Kind) -> String? {
        // Checked as given, unvalue: swift-configuration reads "5 " as no number at all
        // and would fall back to its default.
        switch kind {
        case .headerName:
            let token = Set("!#$%&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz".utf8)
            return value.utf8.count <= 256 && value.utf8.allSatisfy(token.contains)
                ? nil : "must be an HTTP header name (letters, digits and !#$%&'*+-.^_`|~)"
        case .int(let range):
            guard let n = Int(value) else { return "must be a whole number" }
            return range.contains(n) ? nil : "must be between \(range.lowerBound) and \(range.upperBound)"
        case .double(let range):
            guard let d = Double(value), d.isFinite else { return "must be a number" }
            return range.contains(d) ? nil : "must be between \(range.lowerBound) and \(range.upperBound)"
        case .text, .path, .secret:
            guard value.utf8.count <= 4096 else { return "is longer than 4096 bytes" }
            return value.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7f })
                ? "must not contain control characters" : nil
        case .oneOf(let allowed):
            return allowed.contains(value) ? nil : "must be one of \(allowed.joined(separator: ", "))"
        case .delays:
            do { _ = try RetrySchedule.parseDelays(value) } catch { return "\(error)" }
            return nil
        case .topic:
            let ok =
                !value.isEmpty && value.utf8.count <= 200
                && value.utf8.allSatisfy { b in
                    (0x30...0x39).contains(b) || (0x41...0x5a).contains(b) || (0x61...0x7a).contains(b)
                        || b == UInt8(ascii: ".") || b == UInt8(ascii: "_") || b == UInt8(ascii: "-")
                        || b == UInt8(ascii: ":")
                }
            return ok ? nil : "must be 1 to 200 ASCII letters, digits, '.', '_', '-' or ':'"
        case .bool:
            return ["true", "false", "1", "0"].contains(value.lowercased()) ? nil : "must be true or false"
        }
    }

    /// A value as an error message may quote it: a secret never.
    static func shown(_ value: String, _ kind: Kind) -> String {
        if case .secret = kind { return "<redacted>" }
        return value.utf8.count > 40 ? "\(value.prefix(40))…" : value
    }
}
