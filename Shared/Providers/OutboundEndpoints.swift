import AsyncHTTPClient
import Foundation
import LogKeys
import Logging
import NIOCore
import PushModels
import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Why the relay will not call a device-chosen endpoint.
public struct EndpointRefusal: Error, Sendable, Equatable, CustomStringConvertible {
    public var reason: StageReason
    public var detail: String

    public init(_ reason: StageReason, _ detail: String) {
        self.reason = reason
        self.detail = detail
    }

    public var description: String { "\(reason.rawValue): \(detail)" }

    /// What the dispatcher does with it: DNS may recover, a refused address will not.
    public var result: SendResult {
        reason == .endpointUnresolvable
            ? .retry(reason: .relay(reason), status: nil, retryAfter: .seconds(60))
            : .failed(reason: .relay(reason), status: nil)
    }
}

/// Where a provider client gets an HTTP client for a device-chosen endpoint.
public protocol EndpointClientSource: Sendable {
    func client(for endpoint: PushEndpoint) async -> Result<HTTPClient, EndpointRefusal>
    /// Closes the clients; the clients sharing a source each call it, so it must be
    /// safe to call more than once.
    func shutdown() async
}

/// HTTP clients for endpoints that devices chose (Web Push, simple push, WNS channels),
/// which are untrusted input: a registration could point the relay at its own network.
///
/// - The host is resolved here, and refused when any address is loopback, private,
///   link-local, shared (CGNAT), multicast, reserved or unspecified, unless the host is
///   in `allowedHosts` (`PUSHRELAY_PUSH_ENDPOINT_ALLOWED_HOSTS`, for local services and tests).
/// - The client connects to the address checked, never to a second resolution (the host
///   name still goes in SNI and `Host`, and the certificate must match it), so a name
///   that answers differently a moment later (DNS rebinding) cannot move the connection.
/// - One client per origin, with its own connection limit; redirects are not followed;
///   callers bound the time and the response size. Clients unused longest are closed when
///   there are more than `maxOrigins`, and a client is re-resolved after `pinFor`.
public final class OutboundEndpoints: EndpointClientSource {
    public struct Settings: Sendable {
        /// Hosts (lower-case names or IP literals) that may resolve to non-public addresses.
        public var allowedHosts: Set<String>
        /// Trust roots instead of the system's (the dev stack's fake CA).
        public var caFile: String?
        public var connectTimeout: Duration
        public var readTimeout: Duration
        public var maxConnectionsPerOrigin: Int
        public var maxOrigins: Int
        public var pinFor: Duration

        public init(
            allowedHosts: Set<String> = [], caFile: String? = nil, connectTimeout: Duration = .seconds(5),
            readTimeout: Duration = .seconds(15), maxConnectionsPerOrigin: Int = 4, maxOrigins: Int = 512,
            pinFor: Duration = .seconds(300)
        ) {
            self.allowedHosts = Set(allowedHosts.map { $0.lowercased() })
            self.caFile = caFile
            self.connectTimeout = connectTimeout
            self.readTimeout = readTimeout
            self.maxConnectionsPerOrigin = max(1, maxConnectionsPerOrigin)
            self.maxOrigins = max(1, maxOrigins)
            self.pinFor = pinFor
        }
    }

    /// Resolves a host to its addresses (4 or 16 bytes each); replaceable in tests.
    public typealias Resolver = @Sendable (_ host: String, _ port: Int) async throws -> [[UInt8]]

    private struct Entry {
        var client: HTTPClient
        var pinnedUntil: ContinuousClock.Instant
        var lastUsed: ContinuousClock.Instant
    }

    private let settings: Settings
    private let resolve: Resolver
    private let logger: Logger
    private let entries = Mutex<[String: Entry]>([:])

    public init(settings: Settings, logger: Logger, resolver: Resolver? = nil) {
        self.settings = settings
        self.logger = logger
        self.resolve = resolver ?? { host, port in try await OutboundEndpoints.systemResolve(host, port: port) }
    }

    public func client(for endpoint: PushEndpoint) async -> Result<HTTPClient, EndpointRefusal> {
        let now = ContinuousClock.now
        let cached = entries.withLock { entries -> HTTPClient? in
            guard var entry = entries[endpoint.origin], entry.pinnedUntil > now else { return nil }
            entry.lastUsed = now
            entries[endpoint.origin] = entry
            return entry.client
        }
        if let cached { return .success(cached) }
        let address: String
        switch await checkedAddress(endpoint) {
        case .success(let checked): address = checked
        case .failure(let refusal):
            logger.warning(
                "push endpoint refused",
                metadata: [LogKey.origin: "\(endpoint.origin)", LogKey.reason: "\(refusal.reason.rawValue)"])
            return .failure(refusal)
        }
        let client: HTTPClient
        do {
            client = try makeClient(for: endpoint, address: address)
        } catch {
            return .failure(EndpointRefusal(.endpointRefused, "cannot set up TLS: \(error)"))
        }
        var retired: [HTTPClient] = []
        let chosen = entries.withLock { entries -> HTTPClient in
            if let old = entries[endpoint.origin] { retired.append(old.client) }
            entries[endpoint.origin] = Entry(client: client, pinnedUntil: now + settings.pinFor, lastUsed: now)
            while entries.count > settings.maxOrigins,
                let oldest = entries.min(by: { $0.value.lastUsed < $1.value.lastUsed })
            {
                retired.append(oldest.value.client)
                entries[oldest.key] = nil
            }
            return client
        }
        retire(retired)
        return .success(chosen)
    }

    /// Closes every client.
    public func shutdown() async {
        let all = entries.withLock { entries in
            defer { entries.removeAll() }
            return entries.values.map(\.client)
        }
        for client in all { try? await client.shutdown() }
    }

    /// Clients replaced or evicted may still carry requests: closed once those are done.
    private func retire(_ clients: [HTTPClient]) {
        guard !clients.isEmpty else { return }
        let grace = settings.connectTimeout + settings.readTimeout + .seconds(1)
        Task {
            try? await Task.sleep(for: grace)
            for client in clients { try? await client.shutdown() }
        }
    }

    /// The address to connect to: the first one resolved, once every one is allowed.
    func checkedAddress(_ endpoint: PushEndpoint) async -> Result<String, EndpointRefusal> {
        let addresses: [[UInt8]]
        do {
            addresses = try await resolve(endpoint.host, endpoint.port)
        } catch {
            return .failure(EndpointRefusal(.endpointUnresolvable, "\(endpoint.host) does not resolve"))
        }
        guard let first = addresses.first else {
            return .failure(EndpointRefusal(.endpointUnresolvable, "\(endpoint.host) has no address"))
        }
        if !settings.allowedHosts.contains(endpoint.host) {
            for address in addresses where !AddressClass.isPublic(address) {
                return .failure(
                    EndpointRefusal(
                        .endpointRefused,
                        "\(endpoint.host) resolves to \(AddressClass.text(address)), which is not a public address"))
            }
        }
        return .success(AddressClass.text(first))
    }

    private func makeClient(for endpoint: PushEndpoint, address: String) throws -> HTTPClient {
        var configuration = HTTPClient.Configuration()
        configuration.tlsConfiguration = try makeTLSConfiguration(caFile: settings.caFile)
        configuration.httpVersion = .automatic
        configuration.redirectConfiguration = .disallow
        configuration.timeout = .init(
            connect: .milliseconds(Int64(RetrySchedule.milliseconds(settings.connectTimeout))),
            read: .milliseconds(Int64(RetrySchedule.milliseconds(settings.readTimeout))))
        configuration.connectionPool = .init(
            idleTimeout: .seconds(60), concurrentHTTP1ConnectionsPerHostSoftLimit: settings.maxConnectionsPerOrigin)
        configuration.maximumUsesPerConnection = nil
        // Connect to the checked address; the URL's host (both spellings) still names the server.
        if address != endpoint.host {
            var override = [endpoint.host: address]
            if let raw = URLComponents(string: endpoint.url)?.host { override[raw] = address }
            configuration.dnsOverride = override
        }
        // No spans of its own: the relay's span of the push (or hook) covers its requests,
        // and a request outside any (a token refresh) must not start a trace.
        configuration.tracing.tracer = nil
        return HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
    }

    /// getaddrinfo on a thread of its own (it blocks).
    static func systemResolve(_ host: String, port: Int) async throws -> [[UInt8]] {
        try await withCheckedThrowingContinuation { continuation in
            DispatchQueue.global().async {
                var hints = addrinfo()
                hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
                var list: UnsafeMutablePointer<addrinfo>?
                let status = getaddrinfo(host, String(port), &hints, &list)
                guard status == 0, let first = list else {
                    continuation.resume(throwing: EndpointRefusal(.endpointUnresolvable, "getaddrinfo \(status)"))
                    return
                }
                defer { freeaddrinfo(first) }
                var addresses: [[UInt8]] = []
                var cursor: UnsafeMutablePointer<addrinfo>? = first
                while let info = cursor {
                    if let sockaddr = info.pointee.ai_addr {
                        switch info.pointee.ai_family {
                        case AF_INET:
                            sockaddr.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { v4 in
                                withUnsafeBytes(of: v4.pointee.sin_addr) { addresses.append(Array($0)) }
                            }
                        case AF_INET6:
                            sockaddr.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { v6 in
                                withUnsafeBytes(of: v6.pointee.sin6_addr) { addresses.append(Array($0)) }
                            }
                        default: break
                        }
                    }
                    cursor = info.pointee.ai_next
                }
                continuation.resume(returning: addresses)
            }
        }
    }
}

/// Which addresses the relay may connect to on a device's say-so (IANA special-purpose
/// registries, RFC 6890 and successors).
public enum AddressClass {
    /// True for globally routable unicast addresses only.
    public static func isPublic(_ address: [UInt8]) -> Bool {
        switch address.count {
        case 4: return isPublicV4(address[0], address[1], address[2], address[3])
        case 16:
            let a = address
            // IPv4-mapped (::ffff:0:0/96) and NAT64 (64:ff9b::/96): judged by their IPv4 address.
            if a[0..<10].allSatisfy({ $0 == 0 }) && a[10] == 0xff && a[11] == 0xff {
                return isPublicV4(a[12], a[13], a[14], a[15])
            }
            if a[0] == 0x00 && a[1] == 0x64 && a[2] == 0xff && a[3] == 0x9b && a[4..<12].allSatisfy({ $0 == 0 }) {
                return isPublicV4(a[12], a[13], a[14], a[15])
            }
            if a[0..<15].allSatisfy({ $0 == 0 }) { return false }  // :: and ::1 (and IPv4-compatible)
            if a[0] & 0xfe == 0xfc { return false }  // fc00::/7 unique local
            if a[0] == 0xfe && a[1] & 0xc0 == 0x80 { return false }  // fe80::/10 link-local
            if a[0] == 0xfe && a[1] & 0xc0 == 0xc0 { return false }  // fec0::/10 site-local (deprecated)
            if a[0] == 0xff { return false }  // ff00::/8 multicast
            // 2001:db8::/32, documentation.
            if a[0] == 0x20 && a[1] == 0x01 && a[2] == 0x0d && a[3] == 0xb8 { return false }
            if a[0] == 0x01 && a[1..<8].allSatisfy({ $0 == 0 }) { return false }  // 100::/64 discard
            return a[0] & 0xe0 == 0x20  // 2000::/3, the global unicast space
        default:
            return false
        }
    }

    private static func isPublicV4(_ a: UInt8, _ b: UInt8, _ c: UInt8, _ d: UInt8) -> Bool {
        switch (a, b) {
        case (0, _), (10, _), (127, _): return false  // this network, private, loopback
        case (100, 64...127): return false  // shared address space (CGNAT)
        case (169, 254): return false  // link-local
        case (172, 16...31), (192, 168): return false  // private
        case (198, 18...19): return false  // benchmarking
        case (224...255, _): return false  // multicast, reserved, broadcast
        case (192, 0) where c == 0 || c == 2: return false  // IETF protocol assignments, TEST-NET-1
        case (198, 51) where c == 100, (203, 0) where c == 113: return false  // TEST-NET-2, -3
        default: return true
        }
    }

    /// The address as text (dotted quad, or RFC 5952-ish hex groups for IPv6).
    public static func text(_ address: [UInt8]) -> String {
        if address.count == 4 { return address.map(String.init).joined(separator: ".") }
        var groups: [String] = []
        var i = 0
        while i + 1 < address.count {
            groups.append(String(UInt16(address[i]) << 8 | UInt16(address[i + 1]), radix: 16))
            i += 2
        }
        return groups.joined(separator: ":")
    }
}
