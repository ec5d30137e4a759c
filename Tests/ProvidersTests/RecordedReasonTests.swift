import Providers
import Testing

/// A reason read back from a record's `last_error` is typed as the relay's own when it
/// names one, so checks on it (an interrupted send) hold after a retry topic too.
@Suite struct RecordedReasonTests {
    @Test func theRelaysOwnNamesReadBackTyped() {
        for reason in RelayReason.allCases {
            #expect(ProviderReason(recorded: reason.rawValue) == .relay(reason))
        }
        #expect(ProviderReason(recorded: "Unregistered") == .unknown("Unregistered"))
        #expect(ProviderReason(recorded: "Unregistered").name == "Unregistered")
    }
}
