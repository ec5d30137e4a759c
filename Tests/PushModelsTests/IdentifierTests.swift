import Foundation
import PushModels
import Testing

/// The id wrappers change types, not the wire: every record still carries bare values.
@Suite struct IdentifierTests {
    @Test func idsEncodeAsTheirBareValues() throws {
        let record = DeliveryRecord(
            notificationID: NotificationID("6dbcdd60-06da-45b6-8f37-867cf905469a"), realmUUID: RealmID("realm-1"),
            deviceID: DeviceID(42), provider: .fcm, outcome: .sent, reason: nil, attempts: 1, acceptedAtMs: 1,
            completedAtMs: 2)
        let json = try #require(try Wire.decode(JSONValue.self, from: Wire.encode(record)).objectValue)
        #expect(json["notification_id"] == "6dbcdd60-06da-45b6-8f37-867cf905469a")
        #expect(json["realm_uuid"] == "realm-1")
        #expect(json["device_id"] == 42)
    }

    @Test func aRecordWrittenBeforeTheWrappersReadsTheSame() throws {
        let text = #"""
            {"schema":1,"kind":"native","notification_id":"n-1","server_uuid":"s-1","realm_uuid":"r-1",
            "user_id":7,"device_ids":[3,1],"notification_type":"message","accepted_at_ms":5,
            "sealed_payload":{"key_id":"k","box":"AA=="}}
            """#
        let record = try Wire.decode(PushRequestRecord.self, from: Array(text.utf8))
        #expect(record.notificationID == NotificationID("n-1"))
        #expect(record.serverUUID.rawValue == "s-1" && record.realmUUID.rawValue == "r-1")
        #expect(record.deviceIDs == [DeviceID(3), DeviceID(1)])
        #expect(record.partitionKey == "r-1:7")
    }

    @Test func idsCompareAndPrintByValue() {
        #expect(DeviceID(2) < DeviceID(10))
        #expect("\(DeviceID(10))" == "10" && "\(RealmID("r"))" == "r")
        #expect([DeviceID(3), 1, 2].sorted() == [1, 2, 3])
    }

    @Test func freshNotificationIDsAreLowercaseVersion4UUIDs() throws {
        var seen = Set<String>()
        for _ in 0..<200 {
            let text = NotificationID.random().rawValue
            let uuid = try #require(UUID(uuidString: text), "\(text)")
            #expect(uuid.uuidString.lowercased() == text)
            let bytes = withUnsafeBytes(of: uuid.uuid) { Array($0) }
            #expect(bytes[6] >> 4 == 4, "version 4: \(text)")
            #expect(bytes[8] >> 6 == 0b10, "RFC 4122 variant: \(text)")
            seen.insert(text)
        }
        #expect(seen.count == 200)
        let uuid = UUID.random()
        #expect(withUnsafeBytes(of: uuid.uuid) { $0[6] >> 4 } == 4)
    }
}
