import Foundation
import Glibc
import Synchronization

/// TLS files for a test Redis, made with the `openssl` command: a CA, a server
/// certificate for the name `localhost` only signed by it (no IP address: swift-nio-ssl
/// accepts a certificate that names the address it connected to, whatever the name), a client certificate, and a
/// second CA that signed nothing (a trust store the server's certificate fails).
public struct RedisTestTLS: Sendable {
    public let directory: String
    public var caFile: String { "\(directory)/ca.pem" }
    public var serverCertificate: String { "\(directory)/server.pem" }
    public var serverKey: String { "\(directory)/server.key" }
    public var clientCertificate: String { "\(directory)/client.pem" }
    public var clientKey: String { "\(directory)/client.key" }
    public var otherCAFile: String { "\(directory)/other-ca.pem" }

    public static func make(directory: String) throws -> RedisTestTLS {
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let files = RedisTestTLS(directory: directory)
        let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
        for ca in ["ca", "other-ca"] {
            try openssl(
                ["req", "-x509"] + ec + [
                    "-keyout", "\(directory)/\(ca).key", "-out", "\(directory)/\(ca).pem", "-days", "2",
                    "-subj", "/CN=PushRelay test \(ca)",
                ])
        }
        for (name, extensions) in [
            ("server", "subjectAltName=DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n"),
            ("client", "extendedKeyUsage=clientAuth\n"),
        ] {
            try openssl(
                ["req", "-new"] + ec + [
                    "-keyout", "\(directory)/\(name).key", "-out", "\(directory)/\(name).csr", "-subj", "/CN=\(name)",
                ])
            try extensions.write(toFile: "\(directory)/\(name).ext", atomically: true, encoding: .utf8)
            try openssl([
                "x509", "-req", "-in", "\(directory)/\(name).csr", "-CA", files.caFile, "-CAkey", "\(directory)/ca.key",
                "-CAcreateserial", "-out", "\(directory)/\(name).pem", "-days", "2", "-extfile",
                "\(directory)/\(name).ext",
            ])
        }
        return files
    }

    private static func openssl(_ arguments: [String]) throws {
        guard let path = Stack.which("openssl") else { throw StackError("openssl is not installed") }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: path)
        process.arguments = arguments
        process.standardOutput = FileHandle.nullDevice
        let errors = Pipe()
        process.standardError = errors
        try process.run()
        let message = errors.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else {
            throw StackError("openssl \(arguments.first ?? ""): \(String(decoding: message, as: UTF8.self))")
        }
    }

    /// The settings a service reaches a Redis with these files by, verification on.
    public var serviceEnvironment: [String: String] {
        [
            "PUSHRELAY_REDIS_TLS": "true", "PUSHRELAY_REDIS_TLS_CA_FILE": caFile,
            "PUSHRELAY_REDIS_TLS_SERVER_NAME": "localhost",
        ]
    }

    /// `redis-server` arguments for TLS only (no plaintext port); clients' certificates
    /// optional, or required.
    func serverArguments(port: Int, clientCertificates: Bool = false) -> [String] {
        [
            "--port", "0", "--tls-port", "\(port)", "--tls-cert-file", serverCertificate, "--tls-key-file", serverKey,
            "--tls-ca-cert-file", caFile, "--tls-auth-clients", clientCertificates ? "yes" : "optional",
        ]
    }
}

/// The ACL a test Redis runs with: the `default` user off, and one user, `relay`, with a
/// random password, allowed every command and key.
public struct RedisTestACL: Sendable {
    public static let username = "relay"
    public let password: String
    public let passwordFile: String
    public let aclFile: String

    public static func make(directory: String) throws -> RedisTestACL {
        let password = (0..<24).map { _ in String(format: "%02x", UInt8.random(in: 0...255)) }.joined()
        let acl = RedisTestACL(
            password: password, passwordFile: "\(directory)/redis-password", aclFile: "\(directory)/users.acl")
        try "\(password)\n".write(toFile: acl.passwordFile, atomically: true, encoding: .utf8)
        try "user default off\nuser \(username) on >\(password) ~* &* +@all\n".write(
            toFile: acl.aclFile, atomically: true, encoding: .utf8)
        return acl
    }

    public var serviceEnvironment: [String: String] {
        ["PUSHRELAY_REDIS_USERNAME": Self.username, "PUSHRELAY_REDIS_PASSWORD_FILE": passwordFile]
    }
}

/// A `redis-server` that takes TLS only, on loopback, with the ACL above: what a managed
/// Redis asks of its clients.
public final class SecureRedis: Sendable {
    public let port: Int
    public let tls: RedisTestTLS
    public let acl: RedisTestACL
    private let process: Process

    private init(port: Int, tls: RedisTestTLS, acl: RedisTestACL, process: Process) {
        self.port = port
        self.tls = tls
        self.acl = acl
        self.process = process
    }

    /// `clientCertificates`: a client must show a certificate of the CA (mutual TLS).
    public static func start(directory: String, clientCertificates: Bool = false) async throws -> SecureRedis {
        guard let server = Stack.which("redis-server") else { throw StackError("redis-server is not installed") }
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let tls = try RedisTestTLS.make(directory: "\(directory)/tls")
        let acl = try RedisTestACL.make(directory: directory)
        for _ in 1...3 {
            let port = try Stack.freePort()
            let process = try Stack.launch(
                server,
                tls.serverArguments(port: port, clientCertificates: clientCertificates) + [
                    "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--aclfile", acl.aclFile, "--dir",
                    directory, "--daemonize", "no",
                ], environment: [:], log: "\(directory)/redis.log")
            let redis = SecureRedis(port: port, tls: tls, acl: acl, process: process)
            try await Stack.waitFor("TLS redis on \(port)") { !process.isRunning || redis.answers() }
            if process.isRunning { return redis }
        }
        throw StackError("TLS redis did not start (see \(directory)/redis.log)")
    }

    /// Every setting a service needs to reach this Redis.
    public var environment: [String: String] {
        var env = ["PUSHRELAY_REDIS_HOST": "127.0.0.1", "PUSHRELAY_REDIS_PORT": "\(port)"]
        env.merge(tls.serviceEnvironment) { _, new in new }
        env.merge(acl.serviceEnvironment) { _, new in new }
        return env
    }

    /// PING through `redis-cli` over TLS as the ACL user.
    func answers() -> Bool {
        RedisCLI.run(port: port, tls: tls, acl: acl, ["PING"])?.hasPrefix("PONG") ?? false
    }

    public func stop() {
        if process.isRunning { Glibc.kill(process.processIdentifier, SIGKILL) }
    }
}

/// `redis-cli` against a test Redis that may take TLS and an ACL user only. The password
/// goes through `REDISCLI_AUTH`, not the command line.
enum RedisCLI {
    static func run(port: Int, tls: RedisTestTLS?, acl: RedisTestACL?, _ arguments: [String]) -> String? {
        guard let cli = Stack.which("redis-cli") else { return nil }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: cli)
        process.arguments = connectionArguments(port: port, tls: tls, acl: acl) + arguments
        if let acl { process.environment = ["REDISCLI_AUTH": acl.password] }
        let output = Pipe()
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        guard (try? process.run()) != nil else { return nil }
        let data = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return process.terminationStatus == 0 ? String(decoding: data, as: UTF8.self) : nil
    }

    static func connectionArguments(port: Int, tls: RedisTestTLS?, acl: RedisTestACL?) -> [String] {
        var arguments = ["-h", "127.0.0.1", "-p", "\(port)"]
        // The client certificate too: a server that requires one gets it.
        if let tls {
            arguments += ["--tls", "--cacert", tls.caFile, "--cert", tls.clientCertificate, "--key", tls.clientKey]
        }
        if acl != nil { arguments += ["--user", RedisTestACL.username] }
        return arguments
    }
}
