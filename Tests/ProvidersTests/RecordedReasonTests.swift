import Providers
import PushModels
import Testing

/// A reason read back from a record's `last_error` is typed as the relay's own when it
/// names one, so checks on it (an interrupted send) hold after a retry topic too.
@Suite struct RecordedReasonTests {
    @Test func theRelaysOwnNamesReadBackTyped() {
        for reason in StageReason.allCases {
            #expect(ProviderReason(recorded: reason.rawValue) == .relay(reason))
        }
        #expect(ProviderReason(recorded: "Unregistered") == .unknown("Unregistered"))
        #expect(ProviderReason(recorded: "Unregistered").name == "Unregistered")
    }

    /// Every name of every reason vocabulary, by vocabulary: the relay's, the devices'
    /// preferences and each provider's closed sets.
    static let vocabularies: [(String, [String])] = [
        ("StageReason", StageReason.allCases.map(\.rawValue)),
        ("PreferenceReason", PreferenceReason.allCases.map(\.rawValue)),
        ("APNsReason", APNsReason.allCases.map(\.rawValue)),
        ("FCMErrorCode", FCMErrorCode.allCases.map(\.rawValue)),
        ("HMSResultCode", HMSResultCode.allCases.map(\.rawValue)),
        ("WNSNotificationStatus", WNSNotificationStatus.allCases.map(\.rawValue)),
    ]

    /// A name in two vocabularies would read back (from `push.deliveries`, from
    /// `last_error`) as whichever is tried first: each name is declared once.
    @Test func everyReasonNameIsDeclaredOnce() {
        var seen: [String: String] = [:]
        for (vocabulary, names) in Self.vocabularies {
            for name in names {
                if let other = seen.updateValue(vocabulary, forKey: name) {
                    Issue.record("\"\(name)\" is declared in \(other) and in \(vocabulary)")
                }
            }
        }
    }

    /// Name → reason → name, for every case: what a record carries reads back as the case
    /// it names and is written again byte for byte.
    @Test func everyKnownNameRoundTrips() {
        for reason in StageReason.allCases {
            #expect(OutcomeReason(name: reason.rawValue) == .stage(reason))
            #expect(ProviderReason.relay(reason).name == reason.rawValue)
        }
        for reason in PreferenceReason.allCases {
            #expect(OutcomeReason(name: reason.rawValue) == .preference(reason))
        }
        for reason in APNsReason.allCases {
            #expect(Named<APNsReason>(reason.rawValue) == .known(reason))
            #expect(ProviderReason.apns(.known(reason)).name == reason.rawValue)
            #expect(OutcomeReason(name: reason.rawValue) == .provider(reason.rawValue))
        }
        for code in FCMErrorCode.allCases {
            #expect(Named<FCMErrorCode>(code.rawValue) == .known(code))
            #expect(ProviderReason.fcm(.known(code)).name == code.rawValue)
            #expect(OutcomeReason(name: code.rawValue) == .provider(code.rawValue))
        }
        for code in HMSResultCode.allCases {
            #expect(Named<HMSResultCode>(code.rawValue) == .known(code))
            #expect(ProviderReason.hms(.code(.known(code))).name == code.rawValue)
        }
        for status in WNSNotificationStatus.allCases {
            #expect(Named<WNSNotificationStatus>(status.rawValue) == .known(status))
            #expect(ProviderReason.wns(.notificationStatus(status)).name == status.rawValue)
        }
        for outcome in DeliveryOutcome.allCases {
            #expect(DeliveryOutcome(rawValue: outcome.rawValue) == outcome)
        }
        // The names made from an HTTP status, as records have always carried them.
        #expect(ProviderReason.webPush(status: 410).name == "webpush_410")
        #expect(ProviderReason.hms(.httpStatus(502)).name == "hms_502")
        #expect(ProviderReason.wns(.httpStatus(404)).name == "wns_404")
        #expect(ProviderReason.wns(.errorDescription("The channel expired")).name == "The channel expired")
    }
}
