import ArgumentParser
import Configuration
import DeviceState
import Foundation
import PushCrypto
import PushModels
import RedisClient
import ServiceKit

/// `pushrelay-admin`: operator commands that act on the relay's Redis directly, for a
/// relay whose open server registration is closed (`PUSHRELAY_SERVER_REGISTRATION=closed`),
/// and on its Kafka topics (`topics`). It reads the same settings as the services
/// (`PUSHRELAY_REDIS_*`, `PUSHRELAY_KAFKA_*`, the API-key pepper file).
@main
struct Admin: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "pushrelay-admin",
        abstract: "Register servers and realms by hand; create the pipeline's topics; list the settings.",
        version: BuildInfo.line("pushrelay-admin"),
        subcommands: [RegisterServer.self, RegisterRealm.self, IndexHostnames.self, Topics.self, Settings.self])
}

/// Every setting with its default and meaning: docs/configuration.md as Markdown.
struct Settings: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Print every setting with its default and meaning (docs/configuration.md).")

    func run() {
        print(SettingsCatalog.markdown(), terminator: "")
    }
}

/// The stores, built from the environment like a service builds them.
struct Directory {
    let servers: ServerStore
    let realms: RealmDirectory
    let maxRealms: Int

    static func fromEnvironment() throws -> Directory {
        let reader = try SettingsReader.environment()
        let settings = try CommonSettings(service: "admin", defaultPort: 0, reader: reader)
        let redis = RedisClient(configuration: settings.redis)
        let keys = settings.redisKeys
        return Directory(
            servers: ServerStore(redis: redis, keys: keys, pepper: try reader.apiKeyPepper()),
            realms: RealmDirectory(redis: redis, keys: keys),
            maxRealms: try reader.int("pushrelay.server.max.realms", default: 10_000))
    }
}

struct RegisterServer: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "register-server",
        abstract: "Create a server (or update one whose key is given) and print its credentials.")

    @Option(help: "The server's uuid (Zulip's zulip_org_id); a new one when omitted.") var uuid: String?
    @Option(help: "Its API key (64 ASCII letters and digits); a new random one when omitted.") var apiKey: String?
    @Option(help: "Its host name.") var hostname: String
    @Option(help: "An address to reach its operator.") var contactEmail: String

    func run() async throws {
        let uuid = ServerID(
            try uuid.map { text in
                guard let parsed = UUID(uuidString: text) else { throw ValidationError("--uuid: must be a UUID") }
                return parsed.uuidString.lowercased()
            } ?? UUID().uuidString.lowercased())
        let key = apiKey ?? Self.randomKey()
        guard Syntax.isAPIKey(key) else { throw ValidationError("--api-key: must be 64 ASCII letters and digits") }
        guard Syntax.isHostname(hostname) else { throw ValidationError("--hostname: not a host name") }
        guard Syntax.isEmail(contactEmail) else { throw ValidationError("--contact-email: not an email address") }
        let directory = try Directory.fromEnvironment()
        do {
            let created = try await directory.servers.register(
                uuid: uuid, apiKey: key, hostname: hostname, contactEmail: contactEmail, newAPIKey: nil)
            print("server_uuid=\(uuid)")
            print("api_key=\(key)")
            print(created ? "created" : "updated")
        } catch ServerRegistrationError.keyMismatch {
            throw ValidationError("server \(uuid) exists with another key; give its current key with --api-key")
        }
    }

    /// 64 letters and digits from the system's cryptographic generator (getrandom on Linux).
    static func randomKey() -> String {
        let alphabet = Array("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789".utf8)
        var generator = SystemRandomNumberGenerator()
        let bytes = (0..<64).map { _ in alphabet[Int.random(in: 0..<alphabet.count, using: &generator)] }
        return String(decoding: bytes, as: UTF8.self)
    }
}

struct RegisterRealm: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "register-realm", abstract: "Make a realm belong to a server.")

    @Option(help: "The server's uuid.") var server: String
    @Option(help: "The realm's uuid.") var realm: String

    func run() async throws {
        guard let server = UUID(uuidString: server).map({ ServerID($0.uuidString.lowercased()) }) else {
            throw ValidationError("--server: must be a UUID")
        }
        guard let realm = UUID(uuidString: realm).map({ RealmID($0.uuidString.lowercased()) }) else {
            throw ValidationError("--realm: must be a UUID")
        }
        let directory = try Directory.fromEnvironment()
        switch try await directory.realms.register(realm, to: server, maxRealms: directory.maxRealms) {
        case .registered: print("registered \(realm) to \(server)")
        case .alreadyYours: print("\(realm) already belongs to \(server)")
        case .taken: throw ValidationError("realm \(realm) belongs to another server")
        case .quotaExceeded: throw ValidationError("server \(server) holds as many realms as it may")
        }
    }
}

struct IndexHostnames: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "index-hostnames",
        abstract:
            "Index every server's hostname for Zulip's registration transfer (once, after upgrading from a relay without the index)."
    )

    func run() async throws {
        let reader = try SettingsReader.environment()
        let settings = try CommonSettings(service: "admin", defaultPort: 0, reader: reader)
        let redis = RedisClient(configuration: settings.redis)
        let store = ServerStore(redis: redis, keys: settings.redisKeys, pepper: try reader.apiKeyPepper())
        // SCAN is per node: one client for each master, alone.
        var nodes: [RedisClient] = []
        for master in try await redis.masters() {
            var single = settings.redis
            single.cluster = false
            single.host = master.host
            single.port = master.port
            nodes.append(RedisClient(configuration: single))
        }
        print("indexed \(try await store.indexHostnames(nodes: nodes)) hostnames")
    }
}
