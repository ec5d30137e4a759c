import PushModels
import Testing

/// The one reason type of `push.deliveries`: every name reads back as the case it names,
/// and any other name (a provider's answer) is kept as it was, so records written by any
/// version read and write byte for byte.
@Suite struct OutcomeReasonTests {
    @Test func everyNameReadsBackAsItsCase() {
        for reason in StageReason.allCases {
            #expect(OutcomeReason(name: reason.rawValue) == .stage(reason))
            #expect(OutcomeReason(name: reason.rawValue).name == reason.rawValue)
        }
        for reason in PreferenceReason.allCases {
            #expect(OutcomeReason(name: reason.rawValue) == .preference(reason))
        }
        for name in ["Unregistered", "BadDeviceToken", "UNREGISTERED", "webpush_410", "80300007", "SOMETHING_NEW", ""] {
            #expect(OutcomeReason(name: name) == .provider(name))
            #expect(OutcomeReason(name: name).name == name)
        }
        // The wire names records have always carried.
        #expect(StageReason.unknownDevice.rawValue == "unknown_device")
        #expect(StageReason.transportError.rawValue == "TransportError")
        #expect(StageReason.resentAfterInterruptedSend.rawValue == "resent_after_interrupted_send")
        #expect(PreferenceReason.mentionNotAllowed.rawValue == "mention_not_allowed")
    }

    @Test func aDeliveryRecordKeepsItsReasonByteForByte() throws {
        for name in ["unknown_device", "blocked_chat", "Unregistered", "SOMETHING_NEW"] {
            let json =
                #"{"accepted_at_ms":1,"attempts":0,"completed_at_ms":2,"notification_id":"n","outcome":"failed","#
                + #""realm_uuid":"r","reason":"\#(name)","schema":1}"#
            let record = try Wire.decode(DeliveryRecord.self, from: Array(json.utf8))
            #expect(record.reason?.name == name)
            #expect(String(decoding: try Wire.encode(record), as: UTF8.self) == json)
        }
    }
}
