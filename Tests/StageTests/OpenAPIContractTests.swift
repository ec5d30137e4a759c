import APIContract
import Foundation
import HTTPTypes
import Hummingbird
import PushModels
import Testing

@testable import IngestCore
@testable import StageTestSupport

/// docs/api/openapi.json against the router: every route documented, nothing documented
/// that the router lacks, and ingest serving the document as it is in docs.
@Suite struct OpenAPIContractTests {
    static func document() throws -> JSONValue {
        try Wire.decode(JSONValue.self, from: OpenAPIDocument.json)
    }

    /// `METHOD /path` of each operation (parameters `{name}`, as the router describes its routes too).
    static func documented() throws -> Set<String> {
        let methods = ["get", "put", "post", "delete", "patch", "head", "options"]
        var found: Set<String> = []
        for (path, item) in try #require(try document()["paths"]?.objectValue) {
            for method in methods where item[method] != nil { found.insert("\(method.uppercased()) \(path)") }
        }
        return found
    }

    @Test func everyRouteIsDocumentedAndEveryDocumentedRouteExists() async throws {
        let fixture = try await RouterFixture.make()
        let routed = Set(fixture.api.router().routes.map { "\($0.method) \($0.path)" })
        #expect(routed.count > 30)
        let documented = try Self.documented()
        #expect(routed.subtracting(documented).sorted() == [], "routes missing from docs/api/openapi.json")
        #expect(documented.subtracting(routed).sorted() == [], "documented, not routed")
    }

    @Test func theDocumentIsOpenAPI31WithAnOperationIdAndAnswersForEachOperation() throws {
        let document = try Self.document()
        #expect(document["openapi"]?.stringValue?.hasPrefix("3.1") == true)
        var ids: [String] = []
        for (path, item) in try #require(document["paths"]?.objectValue) {
            for (method, operation) in try #require(item.objectValue)
            where ["get", "put", "post", "delete"].contains(method) {
                let id = try #require(operation["operationId"]?.stringValue, "\(method) \(path)")
                ids.append(id)
                #expect(operation["responses"]?.objectValue?.isEmpty == false, "\(method) \(path)")
            }
        }
        #expect(Set(ids).count == ids.count, "operation ids are unique")
    }

    @Test func ingestServesTheDocument() async throws {
        let fixture = try await RouterFixture.make()
        try await fixture.run { client in
            let reply = try await client.send(.get, "/openapi.json")
            #expect(reply.status == 200)
            #expect(reply.headers[.contentType] == "application/json")
            #expect(reply.body == OpenAPIDocument.json)
        }
    }

    /// The document in docs is the one ingest embeds (scripts/openapi-embed.py).
    @Test func theEmbeddedDocumentIsDocsOpenAPIJSON() throws {
        var directory = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        while !FileManager.default.fileExists(atPath: directory.appendingPathComponent("Package.swift").path) {
            directory.deleteLastPathComponent()
            try #require(directory.path != "/")
        }
        let source = try Data(contentsOf: directory.appendingPathComponent("docs/api/openapi.json"))
        #expect(try Wire.decode(JSONValue.self, from: Array(source)) == Self.document())
    }
}
