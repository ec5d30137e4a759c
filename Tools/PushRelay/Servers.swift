import ArgumentParser
import DeviceState
import Foundation
import PushCrypto
import PushModels
import ReplayKit
import ServiceKit

/// `pushrelay servers …`: the realm-hosting servers in the relay's Redis.
struct Servers: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "servers", abstract: "List, show, register and deactivate realm-hosting servers.",
        subcommands: [
            ListServers.self, ShowServer.self, RegisterServer.self, DeactivateServer.self, IndexHostnames.self,
        ]
    )
}

extension ServerSummary {
    var json: JSONValue {
        [
            "server_uuid": .string(uuid.rawValue), "hostname": hostname.map(JSONValue.string) ?? .null,
            "contact_email": contactEmail.map(JSONValue.string) ?? .null, "created_at_ms": Time.json(createdMs),
            "updated_at_ms": Time.json(updatedMs), "deactivated_at_ms": Time.json(deactivatedMs),
            "active": .bool(isActive), "realms": .int(realmCount), "devices": .int(deviceCount),
        ]
    }

    var line: String {
        [
            uuid.rawValue, hostname ?? "-", isActive ? "active" : "deactivated", "\(realmCount) realms",
            "\(deviceCount) devices", "created \(Time.text(createdMs))",
        ].joined(separator: "\t")
    }
}

struct ListServers: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "list", abstract: "Every server: uuid, hostname, active or not, realms and devices.")

    @OptionGroup var output: OutputOptions

    func run() async throws {
        let relay = try Operator.fromEnvironment()
        let store = try relay.servers()
        let ids = try await store.serverIDs()
        var summaries: [ServerSummary] = []
        for id in ids {
            if let summary = try await store.summary(id) { summaries.append(summary) }
        }
        if output.json {
            output.print(["servers": .array(summaries.map(\.json))])
        } else {
            for summary in summaries { print(summary.line) }
            print("\(summaries.count) servers")
        }
    }
}

struct ShowServer: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "show", abstract: "One server: its facts, never its key. Exit status 2 when there is none.")

    @Argument(help: "The server's uuid.") var server: String
    @OptionGroup var output: OutputOptions

    func run() async throws {
        let uuid = ServerID(try canonicalUUID(server, "server"))
        let relay = try Operator.fromEnvironment()
        guard let summary = try await relay.servers().summary(uuid) else {
            FileHandle.standardError.write(Data("no server \(uuid)\n".utf8))
            throw Exit.notFound
        }
        if output.json {
            output.print(summary.json)
            return
        }
        print("server      \(summary.uuid)")
        print("hostname    \(summary.hostname ?? "-")")
        print("contact     \(summary.contactEmail ?? "-")")
        print("state       \(summary.isActive ? "active" : "deactivated \(Time.text(summary.deactivatedMs))")")
        print("created     \(Time.text(summary.createdMs))")
        print("updated     \(Time.text(summary.updatedMs))")
        print("realms      \(summary.realmCount)")
        print("devices     \(summary.deviceCount)")
    }
}

struct DeactivateServer: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "deactivate",
        abstract: "Refuse every request of a server from now on (Zulip's server deactivation); nothing is deleted.")

    @Argument(help: "The server's uuid.") var server: String
    @OptionGroup var output: OutputOptions

    func run() async throws {
        let uuid = ServerID(try canonicalUUID(server, "server"))
        let store = try Operator.fromEnvironment().servers()
        guard let before = try await store.summary(uuid) else {
            FileHandle.standardError.write(Data("no server \(uuid)\n".utf8))
            throw Exit.notFound
        }
        if before.isActive { try await store.deactivate(uuid: uuid) }
        let after = try await store.summary(uuid) ?? before
        if output.json {
            output.print(["server_uuid": .string(uuid.rawValue), "deactivated_at_ms": Time.json(after.deactivatedMs)])
        } else {
            print(
                before.isActive
                    ? "deactivated \(uuid)" : "\(uuid) was already deactivated (\(Time.text(before.deactivatedMs)))")
        }
    }
}

struct RegisterServer: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "register",
        abstract: "Create a server (or update one whose key is given) and print its credentials.",
        discussion: """
            For a relay whose open registration is closed (PUSHRELAY_SERVER_REGISTRATION=closed).
            A key of your own is read from a file (--api-key-file, - for stdin), never from the
            command line; without one a random key is made and printed once.
            """)

    @Option(help: "The server's uuid (Zulip's zulip_org_id); a new one when omitted.") var uuid: String?
    @Option(help: "A file holding its API key (64 ASCII letters and digits); - reads stdin.") var apiKeyFile: String?
    @Option(help: "Its host name.") var hostname: String
    @Option(help: "An address to reach its operator.") var contactEmail: String
    @OptionGroup var output: OutputOptions

    func run() async throws {
        let uuid = ServerID(try uuid.map { try canonicalUUID($0, "--uuid") } ?? UUID().uuidString.lowercased())
        let key = try apiKeyFile.map(readSecret) ?? Self.randomKey()
        guard Syntax.isAPIKey(key) else { throw ValidationError("the API key must be 64 ASCII letters and digits") }
        guard Syntax.isHostname(hostname) else { throw ValidationError("--hostname: not a host name") }
        guard Syntax.isEmail(contactEmail) else { throw ValidationError("--contact-email: not an email address") }
        let store = try Operator.fromEnvironment().servers()
        let created: Bool
        do {
            created = try await store.register(
                uuid: uuid, apiKey: key, hostname: hostname, contactEmail: contactEmail, newAPIKey: nil)
        } catch ServerRegistrationError.keyMismatch {
            throw CLIError("server \(uuid) exists with another key; give its current key with --api-key-file")
        }
        if output.json {
            output.print(["server_uuid": .string(uuid.rawValue), "api_key": .string(key), "created": .bool(created)])
        } else {
            print("server_uuid=\(uuid)")
            print("api_key=\(key)")
            print(created ? "created" : "updated")
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

/// A secret read from a file (or stdin for `-`), its surrounding blanks dropped.
func readSecret(_ path: String) throws -> String {
    let data: Data?
    if path == "-" {
        data = FileHandle.standardInput.readDataToEndOfFile()
    } else {
        data = FileManager.default.contents(atPath: path)
    }
    guard let data, data.count <= 4096 else { throw ValidationError("cannot read a key from \(path)") }
    return String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
}

struct IndexHostnames: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "index-hostnames",
        abstract:
            "Index every server's hostname for Zulip's registration transfer (once, after upgrading from a relay without the index)."
    )

    @Flag(help: "No progress on stderr.") var quiet = false

    func run() async throws {
        let relay = try Operator.fromEnvironment()
        var bar = ProgressBar("servers", quiet: quiet)
        let indexed = try await relay.servers().indexHostnames {
            bar.update(done: $0, of: $1)
        }
        print("indexed \(indexed) hostnames")
    }
}

/// `pushrelay realms register`: a realm made a server's by hand.
struct Realms: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "realms", abstract: "Make a realm belong to a server.", subcommands: [RegisterRealm.self])
}

struct RegisterRealm: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "register", abstract: "Make a realm belong to a server (for good).")

    @Option(help: "The server's uuid.") var server: String
    @Option(help: "The realm's uuid.") var realm: String

    func run() async throws {
        let server = ServerID(try canonicalUUID(server, "--server"))
        let realm = RealmID(try canonicalUUID(realm, "--realm"))
        let relay = try Operator.fromEnvironment()
        let realms = RealmDirectory(redis: relay.redis, keys: relay.settings.redisKeys)
        let maxRealms = try relay.reader.int("pushrelay.server.max.realms", default: 10_000)
        switch try await realms.register(realm, to: server, maxRealms: maxRealms) {
        case .registered: print("registered \(realm) to \(server)")
        case .alreadyYours: print("\(realm) already belongs to \(server)")
        case .taken: throw CLIError("realm \(realm) belongs to another server")
        case .quotaExceeded: throw CLIError("server \(server) holds as many realms as it may")
        }
    }
}
