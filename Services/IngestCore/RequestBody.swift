import Foundation
import Hummingbird
import PushModels
import ServiceKit

/// A request body read as JSON or as an HTML form, with typed field access that
/// answers 400 naming the field.
struct RequestFields {
    let json: JSONValue
    let reader: FieldReader
    /// The body as received (for the idempotency fingerprint).
    var bytes: [UInt8] = []
    /// Form bodies carry every value as text, so integer fields accept decimal strings.
    var isForm = false

    /// Reads the body (bounded by `limit`) as JSON, or as a form when the content type says so.
    static func read(_ request: Request, limit: Int) async throws -> RequestFields {
        var request = request
        let buffer = try await request.collectBody(within: limit)
        let bytes = Array(buffer.readableBytesView)
        let contentType = request.headers.value(.contentType)?.lowercased() ?? ""
        let json: JSONValue
        if contentType.hasPrefix("application/x-www-form-urlencoded") {
            json = .object(parseForm(String(decoding: bytes, as: UTF8.self)))
        } else {
            guard let decoded = try? Wire.decode(JSONValue.self, from: bytes) else {
                throw APIError.badRequest("Request body is not valid JSON", code: "MALFORMED_JSON")
            }
            json = decoded
        }
        guard case .object = json else { throw APIError.badRequest("Request body must be a JSON object") }
        return RequestFields(
            json: json, reader: FieldReader(json: json, path: ""), bytes: bytes,
            isForm: contentType.hasPrefix("application/x-www-form-urlencoded"))
    }

    /// Form values are strings; integer fields accept their decimal text.
    static func parseForm(_ text: String) -> [String: JSONValue] {
        var fields: [String: JSONValue] = [:]
        for pair in text.split(separator: "&") {
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            func decode(_ s: Substring) -> String {
                String(s).replacingOccurrences(of: "+", with: " ").removingPercentEncoding ?? String(s)
            }
            let key = decode(parts[0])
            let value = parts.count > 1 ? decode(parts[1]) : ""
            fields[key] = .string(value)
        }
        return fields
    }

    func has(_ key: String) -> Bool { reader.has(key) }

    func string(_ key: String) throws -> String {
        do { return try reader.string(key) } catch { throw APIError.invalid(error) }
    }

    func optionalString(_ key: String) throws -> String? {
        has(key) ? try string(key) : nil
    }

    /// An integer: a JSON number, or decimal text in a form body.
    func int(_ key: String) throws -> Int64 {
        if isForm, case .string(let text)? = json[key], let value = Syntax.canonicalInt64(Substring(text)) {
            return value
        }
        do { return try reader.int(key) } catch { throw APIError.invalid(error) }
    }

    func optionalInt(_ key: String) throws -> Int64? {
        has(key) ? try int(key) : nil
    }

    func uuid(_ key: String) throws -> String {
        let text = try string(key)
        guard let uuid = Syntax.canonicalUUID(text) else {
            throw APIError.badRequest("\(key): must be a UUID", field: key)
        }
        return uuid
    }
}

extension Request {
    /// The body, at most `limit` bytes. A `Content-Length` over the limit is refused before
    /// anything is read, and a body without one as soon as the count passes it (413
    /// `REQUEST_TOO_LARGE` with `Connection: close`; the error middleware maps the count's
    /// `NIOTooManyBytesError`).
    mutating func collectBody(within limit: Int) async throws -> ByteBuffer {
        if let declared = headers.value(.contentLength).flatMap({ Int($0) }), declared > limit {
            throw APIError.requestTooLarge
        }
        return try await collectBody(upTo: limit)
    }
}
