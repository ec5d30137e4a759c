import Configuration
import Foundation

/// Reads settings through swift-configuration, each value checked against its entry in
/// `SettingsCatalog` as it is read: a value that makes no sense throws a `SettingsError`
/// naming the environment variable, never a silent default. Reading a key the catalog
/// does not list is a programming error and throws too.
public struct SettingsReader: Sendable {
    public let config: ConfigReader
    /// What may be read: the services' catalog, plus the entries of a dev tool's own
    /// settings (the dev broker's and the provider fakes' live with them in `Dev/`).
    let entries: [String: SettingsCatalog.Kind]

    public init(_ config: ConfigReader, extraEntries: [String: SettingsCatalog.Kind] = [:]) {
        self.config = config
        self.entries = SettingsCatalog.entries.merging(extraEntries) { catalogued, _ in catalogued }
    }

    /// The process environment, the services' one source of settings, after every
    /// `PUSHRELAY_` variable in it was checked (settings this executable does not read
    /// too, and unknown names, which are likely typos, are logged by the caller).
    /// `extraEntries`: a dev tool's own settings.
    public static func environment(extraEntries: [String: SettingsCatalog.Kind] = [:]) throws -> SettingsReader {
        try SettingsCatalog.validateEnvironment()
        return SettingsReader(.environment, extraEntries: extraEntries)
    }

    /// The value as given, after its check; nil when unset.
    public func raw(_ key: String) throws -> String? {
        guard let kind = entries[key] else {
            throw SettingsError("\(key) is read but not listed in SettingsCatalog")
        }
        guard let value = config.string(forKey: ConfigKey(key)) else { return nil }
        if let problem = SettingsCatalog.problem(value, kind) {
            throw SettingsError(
                "\(SettingsCatalog.environmentName(key))=\(SettingsCatalog.shown(value, kind)): \(problem)")
        }
        return value
    }

    public func string(_ key: String, default value: String) throws -> String {
        try raw(key) ?? value
    }

    /// A setting that has no default: unset or empty stops the process at start.
    public func required(_ key: String, _ why: String) throws -> String {
        guard let value = try raw(key), !value.isEmpty else {
            throw SettingsError("\(SettingsCatalog.environmentName(key)) is not set: \(why)")
        }
        return value
    }

    /// A comma-separated list, blanks dropped; empty when unset.
    public func list(_ key: String) throws -> [String] {
        Self.list(try raw(key) ?? "")
    }

    public static func list(_ text: String) -> [String] {
        text.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
    }

    public func int(_ key: String, default value: Int) throws -> Int {
        // Checked by `raw` against the catalog's range, so the conversion succeeds.
        try raw(key).flatMap { Int($0) } ?? value
    }

    public func bool(_ key: String, default value: Bool) throws -> Bool {
        // Checked by `raw` against the catalog: true, false, 1 or 0.
        try raw(key).map { ["true", "1"].contains($0.lowercased()) } ?? value
    }

    public func double(_ key: String, default value: Double) throws -> Double {
        try raw(key).flatMap { Double($0) } ?? value
    }

    public func milliseconds(_ key: String, default value: Int) throws -> Duration {
        .milliseconds(try int(key, default: value))
    }

    public func seconds(_ key: String, default value: Int) throws -> Duration {
        .seconds(try int(key, default: value))
    }

    /// The contents of the secret file a required setting names.
    public func secretFile(_ key: String, _ what: String) throws -> String {
        let path = try required(key, "the file holding \(what)")
        do {
            return try String(contentsOfFile: path, encoding: .utf8)
        } catch {
            throw SettingsError("cannot read \(path) (\(SettingsCatalog.environmentName(key))): \(error)")
        }
    }
}
