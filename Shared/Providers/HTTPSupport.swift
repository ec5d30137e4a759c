import AsyncHTTPClient
import Foundation
import LogKeys
import Logging
import PushModels
import NIOCore
import NIOHPACK
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

/// An HTTP client for the rare requests beside the pushes (OAuth token endpoints).
func makeHTTPClient(caFile: String?, connectTimeout: Duration) throws -> HTTPClient {
    var configuration = HTTPClient.Configuration()
    configuration.tlsConfiguration = try makeTLSConfiguration(caFile: caFile)
    configuration.httpVersion = .automatic
    configuration.timeout = .init(connect: .seconds(Int64(connectTimeout.components.seconds)), read: .seconds(30))
    configuration.redirectConfiguration = .disallow
    // No spans of its own: the relay's span of the push (or hook) covers its requests,
    // and a request outside any (a token refresh) must not start a trace.
    configuration.tracing.tracer = nil
    return HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
}

/// Parses `Retry-After` in seconds (the form APNs and Google use).
func retryAfter(_ headers: HPACKHeaders) -> Duration? {
    guard let value = headers.first(name: HTTPHeaderName.retryAfter),
        let seconds = Syntax.parseUInt64(Substring(value.trimmingCharacters(in: .whitespaces)))
    else { return nil }
    // Any number of seconds may arrive; a day is the most the retry schedule honours.
    return .seconds(Int64(min(seconds, 86_400)))
}

/// A request that got no answer: retryable. `ConnectionFailed` when the provider cannot
/// have it (nothing reached it), `TransportError` when it may (written, no answer): the
/// dispatcher keeps the ledger claim of the latter, so the re-send is marked. Logged with
/// the error's description, the token masked in case the error quotes it.
func transportFailure(_ error: any Error, token: String, logger: Logger) -> SendResult {
    let text = "\(error)".replacingOccurrences(of: token, with: DeviceToken.redact(token))
    logger.warning("provider request failed in transport", metadata: [LogKey.error: "\(text)"])
    if case PushTransportError.notSent = error {
        return .retry(reason: .relay(.connectionFailed), status: nil, retryAfter: nil)
    }
    return .retry(reason: .relay(.transportError), status: nil, retryAfter: nil)
}
