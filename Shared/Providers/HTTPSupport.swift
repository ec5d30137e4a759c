import AsyncHTTPClient
import Foundation
import Logging
import PushModels
import NIOCore
import NIOHTTP1
import NIOHTTP2
import NIOSSL

/// TLS for provider connections: the system roots, or a CA file (for fakes and pinning).
func makeTLSConfiguration(caFile: String?) throws -> TLSConfiguration {
    var tls = TLSConfiguration.makeClientConfiguration()
    tls.minimumTLSVersion = .tlsv12
    if let caFile, !caFile.isEmpty {
        tls.trustRoots = .file(caFile)
    }
    return tls
}

/// An HTTP client that negotiates HTTP/2 over TLS (ALPN) and keeps connections open.
func makeHTTPClient(caFile: String?, connectTimeout: Duration) throws -> HTTPClient {
    var configuration = HTTPClient.Configuration()
    configuration.tlsConfiguration = try makeTLSConfiguration(caFile: caFile)
    configuration.httpVersion = .automatic
    configuration.timeout = .init(connect: .seconds(Int64(connectTimeout.components.seconds)), read: .seconds(30))
    configuration.connectionPool = .init(idleTimeout: .minutes(60))
    configuration.redirectConfiguration = .disallow
    return HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
}

/// Parses `Retry-After` in seconds (the form APNs and Google use).
func retryAfter(_ headers: HTTPHeaders) -> Duration? {
    guard let value = headers.first(name: "retry-after"),
        let seconds = Syntax.parseUInt64(Substring(value.trimmingCharacters(in: .whitespaces)))
    else { return nil }
    // Any number of seconds may arrive; a day is the most the retry schedule honours.
    return .seconds(Int64(min(seconds, 86_400)))
}

/// True when the provider did not process the request, so sending it again cannot
/// duplicate it: HTTP/2 REFUSED_STREAM (a stream above the last-stream-id of a GOAWAY
/// that retired the connection, or one the server refused outright), or a stream the
/// client could not open because the connection was already going away.
/// (swift-nio-http2 reports the streams a received GOAWAY drops as CANCEL, which a peer's
/// reset also gives: those stay ambiguous here.)
func wasRefusedUnprocessed(_ error: any Error) -> Bool {
    if let wrapped = error as? NIOHTTP2Errors.StreamError { return wasRefusedUnprocessed(wrapped.baseError) }
    if let closed = error as? NIOHTTP2Errors.StreamClosed { return closed.errorCode == .refusedStream }
    return error is NIOHTTP2Errors.CreatedStreamAfterGoaway
}

extension HTTPClient {
    /// Requests the provider refused unprocessed are sent again at once (on another
    /// stream, another connection if this one is going away), up to `resends` times.
    /// Any other failure is thrown: after the request was written it is ambiguous.
    func executeResendingRefused(
        _ request: HTTPClientRequest, timeout: TimeAmount, resends: Int = 3, logger: Logger
    ) async throws -> HTTPClientResponse {
        var attempt = 0
        while true {
            do {
                return try await execute(request, timeout: timeout)
            } catch let error where wasRefusedUnprocessed(error) && attempt < resends {
                attempt += 1
                logger.debug("provider refused the stream unprocessed; sending again", metadata: ["error": "\(error)"])
            }
        }
    }
}

/// A request that failed below HTTP (connection, TLS, timeout): retryable. Logged with
/// the error's description, the token masked in case the error quotes the URL.
func transportFailure(_ error: any Error, token: String, logger: Logger) -> SendResult {
    let text = "\(error)".replacingOccurrences(of: token, with: DeviceToken.redact(token))
    logger.warning("provider request failed in transport", metadata: ["error": "\(text)"])
    return .retry(reason: .relay(.transportError), status: nil, retryAfter: nil)
}
