import APIContract
import HTTPTypes
import Hummingbird
import NIOCore

/// `GET /openapi.json`: the HTTP API's contract (docs/api/openapi.json), no credentials.
/// `OpenAPIContractTests` keeps its paths and the router's routes the same.
enum OpenAPIRoute {
    static func routes() -> RouteCollection<IngestContext> {
        let router = RouteCollection(context: IngestContext.self)
        router.get("/openapi.json") { _, _ in
            Response(
                status: .ok, headers: [.contentType: "application/json"],
                body: ResponseBody(byteBuffer: ByteBuffer(bytes: OpenAPIDocument.json)))
        }
        return router
    }
}
