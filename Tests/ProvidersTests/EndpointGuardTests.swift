import Foundation
import Logging
import PushModels
import Testing

@testable import Providers

/// The guard in front of every endpoint a device chose (Web Push, simple push, WNS): it
/// resolves the host itself, refuses non-public addresses unless the host is allowed,
/// and pins the connection to the address it checked.
@Suite struct EndpointGuardTests {
    static func endpoints(
        allowed: Set<String> = [], answers: [String: [[UInt8]]]
    ) -> OutboundEndpoints {
        OutboundEndpoints(
            settings: .init(allowedHosts: allowed), logger: Logger(label: "test"),
            resolver: { host, _ in
                guard let found = answers[host] else { throw EndpointRefusal(.endpointUnresolvable, "NXDOMAIN") }
                return found
            })
    }

    static func v6(_ text: String) -> [UInt8] {
        var address = in6_addr()
        precondition(inet_pton(AF_INET6, text, &address) == 1)
        return withUnsafeBytes(of: address) { Array($0) }
    }

    func refusal(_ endpoints: OutboundEndpoints, _ url: String) async throws -> EndpointRefusal? {
        let result = await endpoints.client(for: try PushEndpoint(url, field: "token"))
        defer { Task { await endpoints.shutdown() } }
        if case .failure(let refusal) = result { return refusal }
        return nil
    }

    @Test func loopbackAndPrivateAddressesAreRefused() async throws {
        let literals = [
            "https://127.0.0.1/push", "https://10.1.2.3/push", "https://172.16.0.1/push", "https://192.168.1.1/push",
            "https://169.254.169.254/latest/meta-data", "https://100.64.0.1/push", "https://0.0.0.0/push",
            "https://224.0.0.1/push",
        ]
        for url in literals {
            let endpoint = try PushEndpoint(url, field: "token")
            let endpoints = Self.endpoints(answers: [
                endpoint.host: [endpoint.host.split(separator: ".").map { UInt8($0) ?? 0 }]
            ])
            #expect(try await refusal(endpoints, url)?.reason == .endpointRefused, "\(url)")
        }
    }

    @Test func ipv6LoopbackLinkLocalUniqueLocalAndMappedAreRefused() async throws {
        for (host, address) in [
            ("[::1]", "::1"), ("[fe80::1]", "fe80::1"), ("[fd00::1]", "fd00::1"),
            ("[::ffff:127.0.0.1]", "::ffff:127.0.0.1"),
            ("[::ffff:10.0.0.1]", "::ffff:10.0.0.1"), ("[64:ff9b::a00:1]", "64:ff9b::a00:1"), ("[ff02::1]", "ff02::1"),
        ] {
            let url = "https://\(host)/push"
            let endpoint = try PushEndpoint(url, field: "token")
            let endpoints = Self.endpoints(answers: [endpoint.host: [Self.v6(address)]])
            #expect(try await refusal(endpoints, url)?.reason == .endpointRefused, "\(url)")
        }
        #expect(AddressClass.isPublic(Self.v6("2606:4700::1111")))
        #expect(!AddressClass.isPublic(Self.v6("::")))
    }

    @Test func aNameThatResolvesPrivatelyIsRefused() async throws {
        // A public-looking name whose DNS answers a private address (or one private among public ones).
        let endpoints = Self.endpoints(answers: [
            "push.attacker.example": [[10, 0, 0, 5]],
            "mixed.attacker.example": [[93, 184, 216, 34], [127, 0, 0, 1]],
            "v6.attacker.example": [Self.v6("fd12:3456::1")],
            "fine.example": [[93, 184, 216, 34]],
        ])
        for host in ["push.attacker.example", "mixed.attacker.example", "v6.attacker.example"] {
            let refused = try await refusal(endpoints, "https://\(host)/wp/x")
            #expect(refused?.reason == .endpointRefused, "\(host)")
            #expect(refused?.result == .failed(reason: .relay(.endpointRefused), status: nil))
        }
        #expect(try await refusal(endpoints, "https://fine.example/wp/x") == nil)
        // A name that does not resolve is retried later, not failed.
        let unresolvable = try await refusal(endpoints, "https://nowhere.example/wp/x")
        #expect(unresolvable?.reason == .endpointUnresolvable)
        if case .retry = unresolvable?.result {} else { Issue.record("unresolvable must be retried") }
    }

    @Test func allowedHostsMayBeLocal() async throws {
        let endpoints = Self.endpoints(
            allowed: ["localhost"], answers: ["localhost": [[127, 0, 0, 1]], "other": [[127, 0, 0, 1]]])
        #expect(try await refusal(endpoints, "https://localhost:8446/wp/x") == nil)
        #expect(try await refusal(endpoints, "https://other/wp/x")?.reason == .endpointRefused)
    }

    @Test func onlyHTTPSEndpointsWithoutCredentialsParse() {
        for url in [
            "http://push.example/x", "ftp://push.example/x", "https://user:pw@push.example/x", "https:///x",
            "https://push.example/" + String(repeating: "a", count: 3000), "javascript:alert(1)",
        ] {
            #expect(throws: (any Error).self, "\(url)") { try PushEndpoint(url, field: "token") }
        }
    }

    @Test func webPushAnswersMapToOutcomes() {
        #expect(
            WebPushClient.result(status: 201, location: "https://p/m/1", retryAfter: nil)
                == .sent(status: 201, providerMessageID: "https://p/m/1"))
        for status in [404, 410] {
            guard case .invalidToken = WebPushClient.result(status: status, location: nil, retryAfter: nil) else {
                Issue.record("\(status) must invalidate")
                continue
            }
        }
        #expect(
            WebPushClient.result(status: 413, location: nil, retryAfter: nil)
                == .failed(reason: .relay(.payloadTooLarge), status: 413))
        #expect(
            WebPushClient.result(status: 301, location: nil, retryAfter: nil)
                == .failed(reason: .relay(.endpointRedirected), status: 301))
        #expect(
            WebPushClient.result(status: 429, location: nil, retryAfter: .seconds(30))
                == .retry(reason: .webPush(status: 429), status: 429, retryAfter: .seconds(30)))
        #expect(
            WebPushClient.result(status: 503, location: nil, retryAfter: nil)
                == .retry(reason: .webPush(status: 503), status: 503, retryAfter: nil))
        #expect(WebPushClient.topic("abc_DEF-123") == "abc_DEF-123")
        #expect(WebPushClient.topic("has space") == nil)
        #expect(WebPushClient.topic(String(repeating: "a", count: 33)) == nil)
    }
}
