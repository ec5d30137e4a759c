import Foundation
import GRPCCore
import GRPCNIOTransportHTTP2
import Hummingbird
import NIOCore
import PushModels
import ServiceLifecycle
import Synchronization

/// A small OTLP trace receiver for the tests: `POST /v1/traces` (OTLP/HTTP) and the
/// gRPC method `opentelemetry.proto.collector.trace.v1.TraceService/Export` (OTLP/gRPC,
/// `grpcServer(port:)`) take an `ExportTraceServiceRequest` in binary protobuf and keep
/// each span with its service's name and how it came; `GET /traces?trace_id=…` lists them. It reads only the
/// fields the tests look at (opentelemetry-proto: trace/v1/trace.proto,
/// common/v1/common.proto) and skips every other field by its wire type.
public final class FakeOTLP: Sendable {
    /// One span as received.
    public struct ReceivedSpan: Codable, Sendable, Equatable {
        public var service: String
        public var name: String
        public var traceID: String
        public var spanID: String
        public var parentSpanID: String
        public var attributes: [String: String]
        /// `http` or `grpc`: the OTLP transport it came over.
        public var via: String

        enum CodingKeys: String, CodingKey {
            case service, name, attributes, via
            case traceID = "trace_id"
            case spanID = "span_id"
            case parentSpanID = "parent_span_id"
        }
    }

    private let spans = Mutex<[ReceivedSpan]>([])
    /// The most spans kept: the oldest go first.
    static let capacity = 20_000

    public init() {}

    public var received: [ReceivedSpan] { spans.withLock { $0 } }

    func keep(_ new: [ReceivedSpan]) {
        spans.withLock { spans in
            spans += new
            if spans.count > Self.capacity { spans.removeFirst(spans.count - Self.capacity) }
        }
    }

    func addRoutes(to router: Router<BasicRequestContext>) {
        router.post("/v1/traces") { request, _ in
            var request = request
            let body = try await request.collectBody(upTo: 16 * 1024 * 1024)
            guard request.headers[.contentType]?.hasPrefix("application/x-protobuf") == true else {
                throw HTTPError(.unsupportedMediaType, message: "this receiver takes application/x-protobuf")
            }
            do {
                self.keep(try Self.spans(in: Array(body.readableBytesView), via: "http"))
            } catch {
                throw HTTPError(.badRequest, message: "not an ExportTraceServiceRequest: \(error)")
            }
            // An empty ExportTraceServiceResponse: everything accepted.
            return Response(status: .ok, headers: [.contentType: "application/x-protobuf"], body: .init())
        }
        router.get("/traces") { request, _ in
            var spans = self.received
            if let trace = request.uri.queryParameters.get("trace_id") {
                spans = spans.filter { $0.traceID == String(trace) }
            }
            return try FakeServers.json(spans)
        }
    }

    /// The OTLP/gRPC receiver on `127.0.0.1:port` (plaintext HTTP/2), as a service.
    public func grpcServer(port: Int) -> some Service {
        GRPCReceiver(otlp: self, port: port)
    }

    struct GRPCReceiver: Service {
        let otlp: FakeOTLP
        let port: Int

        func run() async throws {
            var router = RPCRouter<HTTP2ServerTransport.Posix>()
            let otlp = self.otlp
            router.registerHandler(
                forMethod: MethodDescriptor(
                    fullyQualifiedService: "opentelemetry.proto.collector.trace.v1.TraceService", method: "Export"),
                deserializer: RawMessage(), serializer: RawMessage()
            ) { request, _ in
                for try await message in request.messages {
                    do {
                        otlp.keep(try FakeOTLP.spans(in: message, via: "grpc"))
                    } catch {
                        throw RPCError(code: .invalidArgument, message: "not an ExportTraceServiceRequest")
                    }
                }
                // An empty ExportTraceServiceResponse: everything accepted.
                return StreamingServerResponse(single: ServerResponse(message: []))
            }
            let server = GRPCServer(
                transport: HTTP2ServerTransport.Posix(
                    address: .ipv4(host: "127.0.0.1", port: port), transportSecurity: .plaintext),
                router: router)
            try await withGracefulShutdownHandler {
                try await server.serve()
            } onGracefulShutdown: {
                server.beginGracefulShutdown()
            }
        }
    }

    /// A gRPC message as its bytes: parsed by `spans(in:via:)`, answered empty.
    struct RawMessage: MessageSerializer, MessageDeserializer {
        func serialize<Bytes: GRPCContiguousBytes>(_ message: [UInt8]) throws -> Bytes { Bytes(message) }
        func deserialize<Bytes: GRPCContiguousBytes>(_ bytes: Bytes) throws -> [UInt8] {
            bytes.withUnsafeBytes { Array($0) }
        }
    }

    // MARK: Protobuf, as far as the tests need it

    struct MalformedProtobuf: Error {}

    /// The spans of an `ExportTraceServiceRequest`: field 1, `ResourceSpans` (1 resource,
    /// 2 scope spans); `ScopeSpans` 2, spans; `Span` 1 trace id, 2 span id, 4 parent span
    /// id, 5 name, 9 attributes.
    static func spans(in message: [UInt8], via: String) throws -> [ReceivedSpan] {
        var result: [ReceivedSpan] = []
        for (field, resourceSpans) in try fields(message) where field == 1 {
            guard case .bytes(let resourceSpans) = resourceSpans else { continue }
            var service = ""
            var spanMessages: [[UInt8]] = []
            for (field, value) in try fields(resourceSpans) {
                guard case .bytes(let bytes) = value else { continue }
                if field == 1 {
                    // Resource: 1 attributes.
                    for (attribute, kv) in try fields(bytes) where attribute == 1 {
                        if case .bytes(let kv) = kv, let (key, value) = try keyValue(kv), key == "service.name" {
                            service = value
                        }
                    }
                } else if field == 2 {
                    for (inner, span) in try fields(bytes) where inner == 2 {
                        if case .bytes(let span) = span { spanMessages.append(span) }
                    }
                }
            }
            for span in spanMessages {
                var received = ReceivedSpan(
                    service: service, name: "", traceID: "", spanID: "", parentSpanID: "", attributes: [:], via: via)
                for (field, value) in try fields(span) {
                    guard case .bytes(let bytes) = value else { continue }
                    switch field {
                    case 1: received.traceID = hex(bytes)
                    case 2: received.spanID = hex(bytes)
                    case 4: received.parentSpanID = hex(bytes)
                    case 5: received.name = String(decoding: bytes, as: UTF8.self)
                    case 9:
                        if let (key, value) = try keyValue(bytes) { received.attributes[key] = value }
                    default: break
                    }
                }
                result.append(received)
            }
        }
        return result
    }

    /// A `KeyValue` (1 key, 2 `AnyValue`), its value as text: a string (1), bool (2),
    /// int (3) or double (4); nil for other kinds.
    static func keyValue(_ message: [UInt8]) throws -> (String, String)? {
        var key: String?
        var text: String?
        for (field, value) in try fields(message) {
            if field == 1, case .bytes(let bytes) = value { key = String(decoding: bytes, as: UTF8.self) }
            if field == 2, case .bytes(let anyValue) = value {
                for (kind, inner) in try fields(anyValue) {
                    switch (kind, inner) {
                    case (1, .bytes(let bytes)): text = String(decoding: bytes, as: UTF8.self)
                    case (2, .varint(let flag)): text = flag == 0 ? "false" : "true"
                    case (3, .varint(let number)): text = "\(Int64(bitPattern: number))"
                    case (4, .fixed64(let bits)): text = "\(Double(bitPattern: bits))"
                    default: break
                    }
                }
            }
        }
        guard let key, let text else { return nil }
        return (key, text)
    }

    enum WireValue {
        case varint(UInt64)
        case fixed64(UInt64)
        case fixed32(UInt32)
        case bytes([UInt8])
    }

    /// A message's fields in order: (field number, value). Throws on a truncated or
    /// unknown wire type.
    static func fields(_ message: [UInt8]) throws -> [(Int, WireValue)] {
        var fields: [(Int, WireValue)] = []
        var index = 0
        func varint() throws -> UInt64 {
            var result: UInt64 = 0
            var shift: UInt64 = 0
            while true {
                guard index < message.count, shift < 64 else { throw MalformedProtobuf() }
                let byte = message[index]
                index += 1
                result |= UInt64(byte & 0x7F) << shift
                if byte & 0x80 == 0 { return result }
                shift += 7
            }
        }
        func take(_ count: Int) throws -> [UInt8] {
            guard count >= 0, count <= message.count - index else { throw MalformedProtobuf() }
            defer { index += count }
            return Array(message[index..<index + count])
        }
        while index < message.count {
            let tag = try varint()
            guard let field = Int(exactly: tag >> 3), field > 0 else { throw MalformedProtobuf() }
            switch tag & 7 {
            case 0: fields.append((field, .varint(try varint())))
            case 1:
                let bytes = try take(8)
                fields.append((field, .fixed64(bytes.reversed().reduce(0) { $0 << 8 | UInt64($1) })))
            case 2:
                guard let length = Int(exactly: try varint()) else { throw MalformedProtobuf() }
                fields.append((field, .bytes(try take(length))))
            case 5:
                let bytes = try take(4)
                fields.append((field, .fixed32(bytes.reversed().reduce(0) { $0 << 8 | UInt32($1) })))
            default: throw MalformedProtobuf()
            }
        }
        return fields
    }

    static func hex(_ bytes: [UInt8]) -> String {
        bytes.map { String(format: "%02x", $0) }.joined()
    }
}
