import NIOCore
import NIOSSL

/// The credentials a connection presents first (`AUTH [username] password`): a password
/// (`requirepass`), or an ACL user and its password. The password never appears in a
/// description, a log line or an error.
public struct RedisCredentials: Sendable, CustomStringConvertible {
    /// The ACL user; nil sends the one-argument `AUTH password` (the `default` user).
    public var username: String?
    let password: [UInt8]

    public init(username: String?, password: String) {
        self.username = username.flatMap { $0.isEmpty ? nil : $0 }
        self.password = Array(password.utf8)
    }

    /// The AUTH command, pipelined ahead of a new connection's first commands.
    var command: [[UInt8]] {
        if let username { return [Array("AUTH".utf8), Array(username.utf8), password] }
        return [Array("AUTH".utf8), password]
    }

    public var description: String { "user \(username ?? "default"), password <redacted>" }
}

/// TLS to Redis: the trust roots (a CA file, or the system's), an optional client
/// certificate, and the name the server's certificate must carry. Verification is on
/// unless turned off. The context is made once, so a missing or malformed file stops
/// the service at start, and every connection (each node of a cluster too) reuses it.
public struct RedisTLS: Sendable {
    let context: NIOSSLContext
    /// The name checked against the certificate and sent as SNI; nil: the node's host.
    public let serverName: String?
    public let verify: Bool

    /// `caFile` nil or empty: the system's trust store.
    public init(caFile: String?, certificateFile: String?, keyFile: String?, serverName: String?, verify: Bool)
        throws(RedisError)
    {
        var tls = TLSConfiguration.makeClientConfiguration()
        tls.minimumTLSVersion = .tlsv12
        tls.certificateVerification = verify ? .fullVerification : .none
        do {
            if let caFile, !caFile.isEmpty { tls.trustRoots = .file(caFile) }
            switch (certificateFile.flatMap { $0.isEmpty ? nil : $0 }, keyFile.flatMap { $0.isEmpty ? nil : $0 }) {
            case (let certificate?, let key?):
                tls.certificateChain = try NIOSSLCertificate.fromPEMFile(certificate).map { .certificate($0) }
                tls.privateKey = .privateKey(try NIOSSLPrivateKey(file: key, format: .pem))
            case (nil, nil):
                break
            default:
                throw RedisError(code: .tls, message: "a client certificate needs both its certificate and key files")
            }
            context = try NIOSSLContext(configuration: tls)
        } catch let error as RedisError {
            throw error
        } catch {
            throw RedisError(code: .tls, message: "cannot load the TLS files: \(error)")
        }
        self.serverName = serverName.flatMap { $0.isEmpty ? nil : $0 }
        self.verify = verify
    }

    /// The handler that runs TLS on a connection to `host`. A host given as an IP address
    /// is checked against the certificate's IP addresses (SNI carries names only).
    func handler(host: String) throws -> NIOSSLClientHandler {
        let name = serverName ?? host
        let isAddress = (try? SocketAddress(ipAddress: name, port: 0)) != nil
        return try NIOSSLClientHandler(context: context, serverHostname: isAddress ? nil : name)
    }
}

extension RedisError {
    /// What a connection's first failure most likely means, for the message a service
    /// stops with at start: names the setting to look at. Never quotes a secret.
    public func startupHint(tls: Bool) -> String {
        let text = message.lowercased()
        switch code {
        case .auth:
            if text.contains("wrongpass") || text.contains("invalid password") || text.contains("invalid username") {
                return "the password or ACL user was refused (PUSHRELAY_REDIS_USERNAME, PUSHRELAY_REDIS_PASSWORD_FILE)"
            }
            return "authentication failed (PUSHRELAY_REDIS_USERNAME, PUSHRELAY_REDIS_PASSWORD_FILE)"
        case .authRequired:
            return "the server requires a password (set PUSHRELAY_REDIS_PASSWORD_FILE, and PUSHRELAY_REDIS_USERNAME "
                + "for an ACL user)"
        case .tls:
            if text.contains("hostname") || text.contains("host name") || text.contains("subject") {
                return "the server's certificate does not name this host (PUSHRELAY_REDIS_TLS_SERVER_NAME)"
            }
            if text.contains("certificate") || text.contains("verify") || text.contains("unknown ca") {
                return "the server's certificate is not trusted (PUSHRELAY_REDIS_TLS_CA_FILE)"
            }
            if text.contains("did not complete") || text.contains("wrong version") || text.contains("wrong_version")
                || text.contains("eof") || text.contains("record")
            {
                return "the TLS handshake failed: is this a plaintext port? (PUSHRELAY_REDIS_TLS, PUSHRELAY_REDIS_PORT)"
            }
            return "the TLS handshake failed (PUSHRELAY_REDIS_TLS_*)"
        case .io where !tls && (text.contains("connection closed") || text.contains("reset by peer")):
            return "the server closed the connection unanswered: is this a TLS port? (set PUSHRELAY_REDIS_TLS=true)"
        case .io where text.contains("no answer") && !tls:
            return "no answer: is this a TLS port? (set PUSHRELAY_REDIS_TLS=true)"
        case .connect:
            return "cannot connect (PUSHRELAY_REDIS_HOST, PUSHRELAY_REDIS_PORT)"
        default:
            return "Redis did not answer PING"
        }
    }
}
