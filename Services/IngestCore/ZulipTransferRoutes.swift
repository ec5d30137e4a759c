import AsyncHTTPClient
import DeviceState
import Foundation
import Hummingbird
import Logging
import NIOHTTP1
import NIOCore
import Providers
import PushCrypto
import PushModels
import ServiceKit

/// Settings of Zulip's registration transfer (docs/api/zulip.md: the `register/transfer` row, and §3.5).
public struct RegistrationTransferSettings: Sendable {
    /// Verifications per day, from anyone (Zulip's bouncer allows 30).
    public var verificationsPerDay: Int
    /// Hosts that may resolve to non-public addresses (tests and local servers only).
    public var allowedHosts: Set<String>
    /// Trust roots instead of the system's (the dev stack's fake CA).
    public var caFile: String?

    /// How long the host has to connect and to answer (Zulip's bouncer allows 5 s).
    public var timeout: Duration = .seconds(5)

    public init(verificationsPerDay: Int = 30, allowedHosts: Set<String> = [], caFile: String? = nil) {
        self.verificationsPerDay = verificationsPerDay
        self.allowedHosts = allowedHosts
        self.caFile = caFile
    }

    public init(reader: SettingsReader) throws {
        verificationsPerDay = try reader.int("pushrelay.zulip.transfer.verifications.per.day", default: 30)
        allowedHosts = Set(try reader.list("pushrelay.zulip.transfer.allowed.hosts"))
        let ca = try reader.string("pushrelay.zulip.transfer.ca.file", default: "")
        caFile = ca.isEmpty ? nil : ca
    }
}

/// What a Zulip server's verification URL answered.
public enum TransferChallengeAnswer: Sendable, Equatable {
    case secret(String)
    /// 400 `REMOTE_SERVER_VERIFICATION_SECRET_NOT_PREPARED`: nothing kept for that token.
    case notPrepared
    /// Any other answer that is not a 2xx.
    case status(Int)
    case tls
    case connection
    case timeout
    /// Anything else: a refused address, an answer without a secret.
    case other
}

/// Fetches `https://{hostname}/api/v1/zulip-services/verify/{access_token}/`, where a
/// Zulip server running `register_server --registration-transfer` serves the secret.
public protocol TransferChallengeFetcher: Sendable {
    func fetch(hostname: String, accessToken: String) async -> TransferChallengeAnswer
    func shutdown() async
}

/// The fetch over HTTPS, through the same address guard as device-chosen endpoints
/// (Zulip's bouncer goes through its outgoing proxy for the same reason): a hostname
/// that resolves to a private address is refused unless allowed.
public final class HTTPTransferChallengeFetcher: TransferChallengeFetcher {
    let endpoints: OutboundEndpoints
    let timeout: Duration

    public init(settings: RegistrationTransferSettings, logger: Logger) {
        timeout = settings.timeout
        endpoints = OutboundEndpoints(
            settings: .init(
                allowedHosts: settings.allowedHosts, caFile: settings.caFile, connectTimeout: settings.timeout,
                readTimeout: settings.timeout, maxConnectionsPerOrigin: 1, maxOrigins: 16,
                // Resolved afresh each time: a server that just moved is fetched at its new address.
                pinFor: .zero),
            logger: logger)
    }

    public func fetch(hostname: String, accessToken: String) async -> TransferChallengeAnswer {
        let url = "https://\(hostname)/api/v1/zulip-services/verify/\(accessToken)/"
        guard let endpoint = try? PushEndpoint(url, field: "hostname") else { return .other }
        let client: HTTPClient
        switch await endpoints.client(for: endpoint) {
        case .success(let found): client = found
        case .failure: return .connection
        }
        var request = HTTPClientRequest(url: url)
        request.method = .GET
        do {
            let response = try await client.execute(request, timeout: .init(timeout))
            let body = try await response.body.collect(upTo: 64 * 1024)
            let json = try? Wire.decode(JSONValue.self, from: Array(body.readableBytesView))
            guard (200..<300).contains(response.status.code) else {
                if response.status.code == 400,
                    json?["code"]?.stringValue == "REMOTE_SERVER_VERIFICATION_SECRET_NOT_PREPARED"
                {
                    return .notPrepared
                }
                return .status(Int(response.status.code))
            }
            guard let secret = json?["verification_secret"]?.stringValue else { return .other }
            return .secret(secret)
        } catch let error as HTTPClientError where error == .deadlineExceeded || error == .readTimeout {
            return .timeout
        } catch let error as HTTPClientError where error == .connectTimeout {
            return .timeout
        } catch {
            let text = String(describing: error)
            if text.contains("SSL") || text.contains("TLS") || text.contains("handshake")
                || text.contains("certificate")
            {
                return .tls
            }
            return .connection
        }
    }

    public func shutdown() async { await endpoints.shutdown() }
}

/// Zulip's registration transfer (`manage.py register_server --registration-transfer`,
/// Zulip 10.0, feature level 345): a server that moved, or lost its key, proves it
/// controls its registered hostname and gets a new key for the same uuid.
struct RegistrationTransfers: Sendable {
    let servers: any ServerRegistry
    let clients: any ClientCounters
    let fetcher: any TransferChallengeFetcher
    let pepper: APIKeyPepper
    let settings: RegistrationTransferSettings
    /// How long a verification secret holds (Zulip's: 10 seconds).
    static let secretSeconds: Int64 = 10
    /// How far apart two ingest replicas' clocks may be.
    static let clockSkewSeconds: Int64 = 5

    /// `PUSHRELAY_ZULIP_TRANSFER_VERIFICATIONS_PER_DAY=0`: the operator turned transfers off.
    func checkEnabled() throws {
        guard settings.verificationsPerDay > 0 else {
            throw APIError(
                status: .forbidden, code: "TRANSFER_DISABLED",
                message: "Registration transfers are turned off on this relay; ask its operator")
        }
    }

    /// `POST /api/v1/remotes/server/register/transfer` (`hostname`): a secret for the
    /// server to serve at its verification URL. Nothing is stored: the secret is the
    /// hostname and the time, signed.
    func begin(_ request: Request) async throws -> Response {
        try checkEnabled()
        let body = try await RequestFields.read(request, limit: 16 * 1024)
        let hostname = try Self.checkedHostname(try body.string("hostname"))
        guard try await servers.server(hostname: hostname) != nil else {
            throw APIError.badRequest("\(hostname) not yet registered")
        }
        return success(["verification_secret": .string(secret(hostname: hostname, atSeconds: Self.now()))])
    }

    /// `POST /api/v1/remotes/server/register/verify_challenge` (`hostname`,
    /// `access_token`): fetches the secret from the server's hostname, and when it is
    /// this relay's, fresh and for that hostname, answers the registration's uuid and a
    /// new key (the old one stops working).
    func verify(_ request: Request) async throws -> Response {
        try checkEnabled()
        let body = try await RequestFields.read(request, limit: 16 * 1024)
        let window = Self.now() / 86_400
        if try await clients.countTransferVerification(window: window, windowSeconds: 86_400)
            > Int64(settings.verificationsPerDay)
        {
            throw APIError(
                status: .tooManyRequests, code: "RATE_LIMIT_HIT",
                message:
                    "The global limits on recent usage of this endpoint have been reached. Please try again later or reach out to the relay's operator for assistance."
            )
        }
        let hostname = try body.string("hostname")
        let token = try body.string("access_token")
        guard Syntax.isHostname(hostname), let uuid = try await servers.server(hostname: hostname) else {
            throw APIError.badRequest("Registration not found for this hostname")
        }
        // `secrets.token_urlsafe(32)`: it goes in a URL path, so nothing else is sent.
        guard !token.isEmpty, token.utf8.count <= 256,
            token.utf8.allSatisfy(Self.urlSafeBytes.contains)
        else {
            throw APIError.badRequest("access_token: must be URL-safe base64", field: "access_token")
        }
        let secret: String
        switch await fetcher.fetch(hostname: hostname, accessToken: token) {
        case .secret(let found): secret = found
        case .notPrepared: throw APIError.badRequest("The host reported it has no verification secret.")
        case .status(let status): throw APIError.badRequest("Error response received from the host: \(status)")
        case .tls: throw APIError.badRequest("SSL error occurred while communicating with the host.")
        case .connection: throw APIError.badRequest("Connection error occurred while communicating with the host.")
        case .timeout: throw APIError.badRequest("The request timed out while communicating with the host.")
        case .other: throw APIError.badRequest("An error occurred while communicating with the host.")
        }
        try check(secret, hostname: hostname, nowSeconds: Self.now())
        let key = Self.newAPIKey()
        try await servers.replaceKey(uuid: uuid, newAPIKey: key, nowMs: Wire.nowMillis())
        return success(["zulip_org_id": .string(uuid.rawValue), "zulip_org_key": .string(key)])
    }

    /// Zulip's hostname rule: a host, with an optional port, and nothing after it.
    static func checkedHostname(_ hostname: String) throws -> String {
        if hostname.contains(where: { $0 == "/" || $0 == "?" || $0 == "#" }) {
            throw APIError.badRequest("\(hostname) contains invalid components (e.g., path, query, fragment).")
        }
        guard Syntax.isHostname(hostname), !hostname.hasPrefix("."), !hostname.hasPrefix("-"),
            !hostname.hasPrefix(":")
        else {
            throw APIError.badRequest("\(hostname) is not a valid hostname")
        }
        return hostname
    }

    /// `hex("{hostname}:{unix seconds}:{HMAC under the pepper}")`, upper case, as
    /// Zulip's (a signed hostname and time, in base 16).
    func secret(hostname: String, atSeconds: Int64) -> String {
        let signed =
            "\(hostname):\(atSeconds):\(pepper.hmacHex("zulip-registration-transfer:\(hostname):\(atSeconds)"))"
        return signed.utf8.map { String(format: "%02X", $0) }.joined()
    }

    /// Zulip's checks of an echoed secret, with its messages.
    func check(_ secret: String, hostname: String, nowSeconds: Int64) throws {
        guard secret.utf8.count % 2 == 0, secret.utf8.count <= 2048,
            let bytes = Fingerprint.bytes(fromHex: secret.lowercased()),
            let text = String(bytes: bytes, encoding: .utf8)
        else { throw APIError.badRequest("The verification secret is malformed") }
        // The hostname may hold a colon (a port): the time and the signature are the last two parts.
        let parts = text.split(separator: ":", omittingEmptySubsequences: false)
        guard parts.count >= 3, let at = Int64(parts[parts.count - 2]) else {
            throw APIError.badRequest("The verification secret is invalid")
        }
        let signedHost = parts.dropLast(2).joined(separator: ":")
        guard
            pepper.verify(
                "zulip-registration-transfer:\(signedHost):\(at)", hmacHex: String(parts[parts.count - 1]))
        else { throw APIError.badRequest("The verification secret is invalid") }
        // Signed, so not a forger's; a few seconds ahead is another replica's clock.
        let age = nowSeconds.saturatingSubtract(at)
        guard age >= -Self.clockSkewSeconds, age <= Self.secretSeconds else {
            throw APIError.badRequest("The verification secret has expired")
        }
        guard signedHost == hostname else {
            throw APIError.badRequest("The verification secret is for a different hostname")
        }
    }

    /// 64 letters and digits, as Zulip's `get_random_string(64)`.
    static func newAPIKey() -> String {
        let alphabet = Array("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789".utf8)
        var generator = SystemRandomNumberGenerator()
        return String(
            decoding: (0..<64).map { _ in alphabet[Int(generator.next(upperBound: UInt64(alphabet.count)))] },
            as: UTF8.self)
    }

    static let urlSafeBytes = Set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_".utf8)

    static func now() -> Int64 { Int64(Date().timeIntervalSince1970) }
}
