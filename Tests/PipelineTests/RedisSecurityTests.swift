import Configuration
import FakeProviders
import Foundation
import Logging
import PushModels
import Synchronization
import Testing

@testable import DevStack
@testable import RedisClient
@testable import ServiceKit

extension StackTests {
    /// Redis reached as a managed Redis asks: TLS only (`--port 0 --tls-port`), an ACL user
    /// with a password, optionally a client certificate; on one server and on a Cluster.
    /// Each wrong setting stops a service at start with a message that names it.
    @Suite(.serialized) struct RedisSecurityTests {
        /// One TLS-only Redis with an ACL user per test process.
        enum Shared {
            private static let shared = Mutex<Task<SecureRedis, any Error>?>(nil)

            static func get() async throws -> SecureRedis {
                let task = shared.withLock { task in
                    if let task { return task }
                    let new = Task { try await SecureRedis.start(directory: directory("secure-redis")) }
                    task = new
                    return new
                }
                return try await task.value
            }
        }

        static func directory(_ name: String) -> String {
            let path = FileManager.default.temporaryDirectory.appendingPathComponent("pushrelay-\(name)-\(getpid())")
                .path
            try? FileManager.default.removeItem(atPath: path)
            return path
        }

        /// The settings a service would read from its environment.
        static func settings(_ values: [String: String]) throws -> CommonSettings {
            var keyed: [AbsoluteConfigKey: ConfigValue] = [:]
            for (name, value) in values {
                let key = name.dropFirst("PUSHRELAY_".count).lowercased().replacingOccurrences(of: "_", with: ".")
                keyed[AbsoluteConfigKey(stringLiteral: "pushrelay.\(key)")] = .init(.string(value), isSecret: false)
            }
            return try CommonSettings(
                service: "test", defaultPort: 0,
                reader: SettingsReader(ConfigReader(provider: InMemoryProvider(values: keyed))))
        }

        /// What `connectRedis` says for these settings: nil when it connects.
        static func startupFailure(_ values: [String: String]) async throws -> (message: String?, seconds: Double) {
            let settings = try settings(values)
            let start = ContinuousClock.now
            var message: String?
            do {
                let client = try await settings.connectRedis(logger: Logger(label: "test"))
                #expect(try await client.command("PING").string == "PONG")
            } catch {
                message = "\(error)"
            }
            let elapsed = ContinuousClock.now - start
            return (message, Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18)
        }

        @Test func aTLSOnlyRedisWithAnACLUserIsReachedAndItsPasswordNeverShown() async throws {
            let redis = try await Shared.get()
            let settings = try Self.settings(redis.environment)
            #expect(settings.redis.tls != nil)
            #expect(settings.redis.credentials?.username == RedisTestACL.username)
            #expect(!"\(settings.redis.credentials.map { "\($0)" } ?? "")".contains(redis.acl.password))
            let client = try await settings.connectRedis(logger: Logger(label: "test"))
            try await client.command("SET", "pr:tls-test", "over TLS")
            #expect(try await client.command("GET", "pr:tls-test").string == "over TLS")
            // The server has no plaintext port: the answer came over TLS, as the ACL user.
            #expect(try await client.command("ACL", "WHOAMI").string == RedisTestACL.username)
        }

        @Test func aWrongPasswordStopsTheStartNamingIt() async throws {
            let redis = try await Shared.get()
            var env = redis.environment
            let wrong = "not-the-password-\(UInt32.random(in: 0...UInt32.max))"
            env["PUSHRELAY_REDIS_PASSWORD_FILE"] = nil
            env["PUSHRELAY_REDIS_PASSWORD"] = wrong
            let (message, seconds) = try await Self.startupFailure(env)
            let text = try #require(message)
            #expect(text.contains("the password or ACL user was refused"), "\(text)")
            #expect(text.contains("WRONGPASS"))
            #expect(!text.contains(wrong) && !text.contains(redis.acl.password))
            #expect(seconds < 15)
        }

        @Test func noPasswordWhereOneIsRequiredStopsTheStart() async throws {
            let redis = try await Shared.get()
            var env = redis.environment
            env["PUSHRELAY_REDIS_USERNAME"] = nil
            env["PUSHRELAY_REDIS_PASSWORD_FILE"] = nil
            let (message, _) = try await Self.startupFailure(env)
            #expect(message?.contains("requires a password") == true, "\(message ?? "connected")")
        }

        @Test func plaintextToTheTLSPortStopsTheStart() async throws {
            let redis = try await Shared.get()
            var env = redis.environment
            env = env.filter { !$0.key.hasPrefix("PUSHRELAY_REDIS_TLS") }
            let (message, seconds) = try await Self.startupFailure(env)
            let text = try #require(message)
            #expect(text.contains("is this a TLS port?"), "\(text)")
            #expect(seconds < 15)
        }

        @Test func tlsToAPlaintextPortStopsTheStart() async throws {
            let redis = try await Shared.get()
            let directory = Self.directory("plain-redis")
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            let port = try Stack.freePort()
            let plain = try Stack.launchRedis(port: port, directory: directory)
            defer { kill(plain.processIdentifier, SIGKILL) }
            try await Stack.waitFor("plain redis") { Stack.redisAnswers(port: port) }
            var env = redis.environment
            env["PUSHRELAY_REDIS_PORT"] = "\(port)"
            let (message, seconds) = try await Self.startupFailure(env)
            let text = try #require(message)
            #expect(text.contains("plaintext port"), "\(text)")
            #expect(seconds < 15)
        }

        @Test func anUntrustedCertificateStopsTheStart() async throws {
            let redis = try await Shared.get()
            var env = redis.environment
            env["PUSHRELAY_REDIS_TLS_CA_FILE"] = redis.tls.otherCAFile
            let (message, _) = try await Self.startupFailure(env)
            let text = try #require(message)
            #expect(text.contains("not trusted (PUSHRELAY_REDIS_TLS_CA_FILE)"), "\(text)")
        }

        @Test func aCertificateForAnotherNameStopsTheStart() async throws {
            let redis = try await Shared.get()
            var env = redis.environment
            env["PUSHRELAY_REDIS_TLS_SERVER_NAME"] = "redis.other.example"
            let (message, _) = try await Self.startupFailure(env)
            let text = try #require(message)
            #expect(text.contains("does not name this host (PUSHRELAY_REDIS_TLS_SERVER_NAME)"), "\(text)")
            // The certificate names localhost: that name passes.
            env["PUSHRELAY_REDIS_TLS_SERVER_NAME"] = "localhost"
            #expect(try await Self.startupFailure(env).message == nil)
        }

        @Test func nothingListeningYetStartsNotReady() async throws {
            let settings = try Self.settings(["PUSHRELAY_REDIS_PORT": "\(try Stack.freePort())"])
            let start = ContinuousClock.now
            // A Redis that comes later is waited for by readiness, not a stop.
            let client = try await settings.connectRedis(logger: Logger(label: "test"))
            #expect(ContinuousClock.now - start < .seconds(10))
            #expect(await client.ping() == false)
        }

        @Test func aClientCertificateIsShownWhenTheServerRequiresOne() async throws {
            let redis = try await SecureRedis.start(directory: Self.directory("mtls-redis"), clientCertificates: true)
            defer { redis.stop() }
            var env = redis.environment
            #expect(try await Self.startupFailure(env).message?.contains("TLS") == true, "no certificate: refused")
            env["PUSHRELAY_REDIS_TLS_CERT_FILE"] = redis.tls.clientCertificate
            env["PUSHRELAY_REDIS_TLS_KEY_FILE"] = redis.tls.clientKey
            let (message, _) = try await Self.startupFailure(env)
            #expect(message == nil, "\(message ?? "")")
            env["PUSHRELAY_REDIS_TLS_KEY_FILE"] = nil
            #expect(throws: SettingsError.self) { try Self.settings(env) }
        }

        @Test func aServiceStopsWithTheMessage() async throws {
            let redis = try await Shared.get()
            let stack = try await Stack.get()
            var env = stack.environment(for: .encryptor)
            env.merge(redis.environment) { _, new in new }
            env["PUSHRELAY_REDIS_PASSWORD_FILE"] = nil
            env["PUSHRELAY_REDIS_PASSWORD"] = "wrong-\(UInt32.random(in: 0...UInt32.max))"
            env["PUSHRELAY_HTTP_PORT"] = "0"
            let log = "\(Self.directory("encryptor-wrongpass")).log"
            let process = try Stack.launch("\(stack.binDirectory)/encryptor", [], environment: env, log: log)
            try await Stack.waitFor("the encryptor to stop", timeout: .seconds(20)) { !process.isRunning }
            #expect(process.terminationStatus == 78)
            let output = try String(contentsOfFile: log, encoding: .utf8)
            #expect(output.contains("the password or ACL user was refused"), "\(output.suffix(600))")
            #expect(!output.contains(env["PUSHRELAY_REDIS_PASSWORD"] ?? "?"))
        }

        @Test func theWholePipelineRunsOnATLSOnlyRedisWithAnACLUser() async throws {
            var options = Stack.Options.tests
            options.secureRedis = try await Shared.get()
            options.name = "secure-redis"
            let stack = try await Stack.start(options: options)
            try await Self.deliverOne(on: stack, userID: 41)
            // The devices are in that Redis, under the relay's prefix.
            let client = try await Self.settings(try #require(options.secureRedis).environment).connectRedis(
                logger: Logger(label: "test"))
            let keys = try await client.command("KEYS", "pr:*").array
            #expect(!keys.isEmpty)
        }

        /// A Redis Cluster that takes TLS only (the cluster bus too) and the ACL user. The
        /// client is seeded with one node and learns the others: each MOVED to a node it has
        /// not met yet goes over TLS with the same credentials (there is no plaintext port to
        /// fall back to). In process, beside the suite's stacks: the whole pipeline on a TLS
        /// Redis is the test above; the cluster's own client path is this one.
        @Test func aClientReachesEveryMasterOfARedisClusterOverTLS() async throws {
            let directory = Self.directory("secure-cluster")
            let cluster = try await LocalRedisCluster.start(
                masters: 3, directory: "\(directory)/nodes", tls: try RedisTestTLS.make(directory: "\(directory)/tls"),
                acl: try RedisTestACL.make(directory: directory))
            defer { cluster.stop() }
            let settings = try Self.settings(cluster.environment.merging(["PUSHRELAY_REDIS_CLUSTER_SEEDS": ""]) { $1 })
            #expect(settings.redis.cluster && settings.redis.tls != nil && settings.redis.credentials != nil)
            let client = try await settings.connectRedis(logger: Logger(label: "test"))
            for n in 0..<64 { try await client.command("SET", "pr:{tls\(n)}", "\(n)") }
            for n in 0..<64 { #expect(try await client.command("GET", "pr:{tls\(n)}").string == "\(n)") }
            #expect(try await client.masters().count == 3)
            // Every master holds some of the keys: each was reached, over TLS, as the ACL user.
            for port in cluster.ports {
                var node = settings.redis
                node.cluster = false
                node.port = port
                let size = try await RedisClient(configuration: node).command("DBSIZE").int ?? 0
                #expect(size > 0, "node \(port) holds none of the keys")
            }
            // A wrong password is refused by the cluster too, naming the setting.
            var env = cluster.environment
            env["PUSHRELAY_REDIS_PASSWORD_FILE"] = nil
            env["PUSHRELAY_REDIS_PASSWORD"] = "wrong-\(UInt32.random(in: 0...UInt32.max))"
            let (message, _) = try await Self.startupFailure(env)
            #expect(message?.contains("the password or ACL user was refused") == true, "\(message ?? "connected")")
        }

        /// A realm registers a device and notifies it; the push arrives and decrypts.
        static func deliverOne(on stack: Stack, userID: Int64) async throws {
            let realm = try await RealmClient.registered(stack)
            let token = RealmClient.fcmToken()
            let key = try RealmClient.pushKey()
            _ = try await realm.device(userID: userID, kind: "fcm", token: token, key: key, keyID: 4)
            let payload = realm.messagePayload(userID: userID, messageID: 7, content: "over TLS")
            #expect(try await realm.notify(userID: userID, payload: payload).status == 202)
            let push = try #require(
                try await stack.waitForPushes("fcm") { $0.contains { $0.token == token } }.first { $0.token == token })
            #expect(try push.decrypt(with: key) == Wire.canonical(payload))
        }
    }
}
