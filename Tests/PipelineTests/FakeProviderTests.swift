import DevStack
import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1
import NIOSSL
import PushModels
import Testing

extension StackTests {
    /// The fakes refuse what Apple and Google refuse, with their error bodies.
    @Suite struct FakeProviderTests {
        func client(_ stack: Stack) throws -> HTTPClient {
            var configuration = HTTPClient.Configuration()
            var tls = TLSConfiguration.makeClientConfiguration()
            tls.trustRoots = .file(stack.dispatcherEnvironment["PUSHRELAY_APNS_CA_FILE"] ?? "")
            configuration.tlsConfiguration = tls
            return HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
        }

        func post(
            _ client: HTTPClient, _ url: String, headers: [(String, String)], body: String
        ) async throws -> (Int, JSONValue) {
            var request = HTTPClientRequest(url: url)
            request.method = .POST
            for (name, value) in headers { request.headers.add(name: name, value: value) }
            request.body = .bytes(ByteBuffer(string: body))
            let response = try await client.execute(request, timeout: .seconds(10))
            let bytes = try await response.body.collect(upTo: 1 << 20)
            let json = (try? JSONDecoder().decode(JSONValue.self, from: Data(bytes.readableBytesView))) ?? .null
            return (Int(response.status.code), json)
        }

        @Test func fakeAPNsChecksTheProviderToken() async throws {
            let stack = try await Stack.get()
            let client = try client(stack)
            defer { _ = client.shutdown() }
            let url = "\(stack.dispatcherEnvironment["PUSHRELAY_APNS_URL"] ?? "")/3/device/\(RealmClient.apnsToken())"
            let headers = [("apns-topic", "org.zulip.Zulip"), ("apns-push-type", "alert")]
            let (missing, missingBody) = try await post(client, url, headers: headers, body: #"{"aps":{}}"#)
            #expect(missing == 403)
            #expect(missingBody == ["reason": "MissingProviderToken"])
            // A token signed by someone else's key (here: no valid signature at all).
            let forged = "eyJhbGciOiJFUzI1NiIsImtpZCI6IkFCQyJ9.eyJpc3MiOiJURUFNIiwiaWF0IjoxfQ.c2lnbmF0dXJl"
            let (bad, badBody) = try await post(
                client, url, headers: headers + [("authorization", "bearer \(forged)")], body: #"{"aps":{}}"#)
            #expect(bad == 403)
            #expect(badBody == ["reason": "InvalidProviderToken"])
        }

        @Test func fakeFCMChecksBearerTokensAndAssertions() async throws {
            let stack = try await Stack.get()
            let client = try client(stack)
            defer { _ = client.shutdown() }
            let base = stack.dispatcherEnvironment["PUSHRELAY_FCM_URL"] ?? ""
            let project = "pushrelay-fake"
            let body = #"{"message":{"token":"t","data":{"n":1}}}"#
            let (unauthenticated, error) = try await post(
                client, "\(base)/v1/projects/\(project)/messages:send",
                headers: [("authorization", "Bearer not-a-token"), ("content-type", "application/json")], body: body)
            #expect(unauthenticated == 401)
            #expect(error["error"]?["status"] == "UNAUTHENTICATED")
            // A forged assertion gets no access token.
            let (grant, grantBody) = try await post(
                client, "\(base)/token", headers: [("content-type", "application/x-www-form-urlencoded")],
                body: "grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer&assertion=a.b.c")
            #expect(grant == 400)
            #expect(grantBody["error"] == "invalid_grant")
        }
    }
}
