import PushModels

/// What a provider said about one push, reduced to what the dispatcher must do next.
public enum SendResult: Sendable, Equatable {
    /// Accepted by the provider.
    case sent(status: Int, providerMessageID: String?)
    /// The token is dead: invalidate the device. `timestampMs` is APNs' 410 timestamp.
    case invalidToken(reason: String, status: Int, timestampMs: Int64?)
    /// Try again later, not before `retryAfter` when the provider said so.
    case retry(reason: String, status: Int?, retryAfter: Duration?)
    /// Will never succeed as sent (bad payload, bad topic, credentials): record it failed.
    case failed(reason: String, status: Int?)
}

/// A push provider: one client per platform, all behind this small protocol, so new
/// platforms (Web Push, HMS, WNS) plug in without touching the dispatcher.
public protocol PushProviderClient: Sendable {
    var provider: Provider { get }
    /// Sends one push. Never throws: transport errors come back as `.retry`.
    func send(_ record: OutboundRecord) async -> SendResult
    func shutdown() async
}

/// Errors setting up a provider client (bad key files, bad configuration).
public struct ProviderSetupError: Error, CustomStringConvertible, Sendable {
    public var description: String
    public init(_ description: String) { self.description = description }
}
