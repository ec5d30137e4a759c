import Metrics
import Providers
import PushModels
import ServiceKit

/// The meters every sent push touches, made once per configured provider: looking one up
/// by label and dimensions hashes them, three times a push (it showed in the profile).
/// Other answers, rarer, take `RelayMetrics`'s way.
struct DispatchMeters: Sendable {
    struct Provider: Sendable {
        let sendDuration: Timer
        let sent: Counter
        let endToEnd: Timer

        init(_ provider: PushModels.Provider) {
            sendDuration = RelayMetrics.sendDuration(provider: provider.rawValue)
            sent = RelayMetrics.sendAttempts(provider: provider.rawValue, result: "sent", reason: "")
            endToEnd = RelayMetrics.endToEnd(provider: provider.rawValue)
        }
    }

    private let byProvider: [PushModels.Provider: Provider]

    init(providers: some Sequence<PushModels.Provider>) {
        byProvider = Dictionary(uniqueKeysWithValues: providers.map { ($0, Provider($0)) })
    }

    func sendDuration(_ provider: PushModels.Provider) -> Timer {
        byProvider[provider]?.sendDuration ?? RelayMetrics.sendDuration(provider: provider.rawValue)
    }

    func endToEnd(_ provider: PushModels.Provider) -> Timer {
        byProvider[provider]?.endToEnd ?? RelayMetrics.endToEnd(provider: provider.rawValue)
    }

    /// One provider answer, by its result and reason.
    func attempt(_ provider: PushModels.Provider, _ result: SendResult, label: String) -> Counter {
        if case .sent = result, let meters = byProvider[provider] { return meters.sent }
        return RelayMetrics.sendAttempts(
            provider: provider.rawValue, result: label,
            reason: result.reason.map { RelayMetrics.labelValue($0.name) } ?? "")
    }
}
