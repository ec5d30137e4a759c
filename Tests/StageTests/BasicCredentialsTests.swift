import Foundation
@testable import IngestCore
import PushModels
import Testing
@testable import StageTestSupport

/// HTTP Basic credentials as ingest reads them (RFC 7617): the scheme in any case, one
/// space, optional blanks around the token, `uuid:key` inside; a uuid in any case comes
/// back lowercase; anything else is not a credential.
@Suite struct BasicCredentialsTests {
    static let uuid = "6DBCDD60-06DA-45B6-8F37-867CF905469A"

    static func read(_ header: String) -> (uuid: ServerID, key: String)? {
        var header = header
        return header.withUTF8 { ServerAuthenticator.credentials(basic: $0) }
    }

    static func token(_ text: String) -> String { Data(text.utf8).base64EncodedString() }

    @Test func wellFormedHeadersRead() throws {
        let token = Self.token("\(Self.uuid):s3cret-KEY_~!")
        for header in ["Basic \(token)", "basic \(token)", "BASIC \(token)", "Basic  \t\(token) \t"] {
            let credentials = try #require(Self.read(header), "\(header)")
            #expect(credentials.uuid == ServerID(Self.uuid.lowercased()))
            #expect(credentials.key == "s3cret-KEY_~!")
        }
        // The key may hold a colon: only the first one separates.
        #expect(Self.read("Basic \(Self.token("\(Self.uuid):a:b"))")?.key == "a:b")
        #expect(Self.read("Basic \(Self.token("\(Self.uuid):\(String(repeating: "k", count: 256))"))") != nil)
    }

    @Test func anythingElseIsNotACredential() {
        let good = Self.token("\(Self.uuid):key")
        let refused = [
            "", "Basic", "Basic ", "Basic  ", "Bearer \(good)", "Basic\t\(good)", "Basicx\(good)", "Basic\0\(good)",
            "Basic \(good)!", "Basic \(Self.token("\(Self.uuid)key"))", "Basic \(Self.token("\(Self.uuid):"))",
            "Basic \(Self.token("not-a-uuid:key"))", "Basic \(Self.token("\(Self.uuid):has space"))",
            "Basic \(Self.token("\(Self.uuid):caf\u{e9}"))", "Basic \(Self.token("\(Self.uuid):\u{7f}"))",
            "Basic \(Self.token("\(Self.uuid):\(String(repeating: "k", count: 257))"))",
            "Basic " + String(repeating: "A", count: 1020),
        ]
        for header in refused { #expect(Self.read(header) == nil, "\(header.prefix(60))") }
    }
}
