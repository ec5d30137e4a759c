import Configuration
import Foundation
import Testing

@testable import ServiceKit

/// The README's configuration table and `SettingsCatalog` name the same variables, and
/// every executable reads only catalogued settings.
@Suite struct ReadmeConfigurationTests {
    static func readme() throws -> String {
        var directory = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        while directory.path != "/" {
            let candidate = directory.appendingPathComponent("README.md")
            if FileManager.default.fileExists(atPath: candidate.path),
                FileManager.default.fileExists(atPath: directory.appendingPathComponent("Package.swift").path)
            {
                return try String(contentsOf: candidate, encoding: .utf8)
            }
            directory.deleteLastPathComponent()
        }
        throw CocoaError(.fileNoSuchFile)
    }

    @Test func theTableListsExactlyTheCatalogue() throws {
        let readme = try Self.readme()
        let start = try #require(readme.range(of: "## Configuration"))
        let end = try #require(readme.range(of: "\n## ", range: start.upperBound..<readme.endIndex))
        var listed: Set<String> = []
        for line in readme[start.upperBound..<end.lowerBound].split(separator: "\n")
        where line.hasPrefix("| `PUSHRELAY_") {
            let name = line.dropFirst(3).prefix { $0 != "`" }
            listed.insert(String(name))
        }
        let catalogued = Set(SettingsCatalog.entries.keys.map(SettingsCatalog.environmentName))
        #expect(listed.count > 50)
        #expect(listed.subtracting(catalogued).sorted() == [], "in the README, not in SettingsCatalog")
        #expect(catalogued.subtracting(listed).sorted() == [], "in SettingsCatalog, not in the README")
    }

    @Test func aBadValueStopsTheReadNamingTheVariable() throws {
        let reader = SettingsReader(
            .init(provider: InMemoryProvider(values: ["pushrelay.redis.port": "70000", "pushrelay.retry.jitter": "x"])))
        #expect(throws: SettingsError.self) { try reader.int("pushrelay.redis.port", default: 1) }
        #expect(throws: SettingsError.self) { try reader.double("pushrelay.retry.jitter", default: 0.1) }
        #expect(try reader.int("pushrelay.redis.connections", default: 4) == 4)
        do {
            _ = try reader.int("pushrelay.redis.port", default: 1)
        } catch {
            #expect("\(error)".contains("PUSHRELAY_REDIS_PORT"))
        }
        // A key nobody catalogued is a programming error, not a silent default.
        #expect(throws: SettingsError.self) { try reader.string("pushrelay.not.a.setting", default: "") }
        // Required settings have no default.
        #expect(throws: SettingsError.self) { try reader.pipelineKeyring() }
    }
}
