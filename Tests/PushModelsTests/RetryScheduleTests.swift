import Foundation
import PushModels
import Testing

/// Where a retryable push goes next, and records that carry it there.
@Suite struct RetryScheduleTests {
    let schedule = RetrySchedule(delays: [.seconds(5), .seconds(60), .seconds(600)], maxAttempts: 6, jitter: 0.2)

    @Test func eachAttemptMovesToTheNextStageAndStaysInTheLast() {
        let stages = (1...5).map { schedule.plan(afterAttempt: $0, retryAfter: nil, nowMs: 0, random: 0.5).stage }
        #expect(stages == [1, 2, 3, 3, 3])
        // random 0.5 is no jitter: exactly the stage's delay.
        #expect(schedule.plan(afterAttempt: 1, retryAfter: nil, nowMs: 1000, random: 0.5).dueAtMs == 6000)
        #expect(schedule.plan(afterAttempt: 2, retryAfter: nil, nowMs: 0, random: 0.5).dueAtMs == 60_000)
    }

    @Test func jitterStaysWithinItsShare() {
        #expect(schedule.plan(afterAttempt: 1, retryAfter: nil, nowMs: 0, random: 0).dueAtMs == 4000)
        #expect(schedule.plan(afterAttempt: 1, retryAfter: nil, nowMs: 0, random: 1).dueAtMs == 6000)
        for _ in 0..<200 {
            let due = schedule.plan(afterAttempt: 2, retryAfter: nil, nowMs: 0, random: .random(in: 0...1)).dueAtMs
            #expect((48_000...72_000).contains(due))
        }
    }

    @Test func retryAfterIsAFloorAndPicksAStageThatCoversIt() {
        // 30 s asked after the first attempt: the 5 s stage cannot hold it, the 60 s stage can.
        let plan = schedule.plan(afterAttempt: 1, retryAfter: .seconds(30), nowMs: 0, random: 0)
        #expect(plan.stage == 2)
        #expect(plan.dueAtMs >= 30_000)
        // 2 s asked: the 5 s stage covers it; jitter never brings it under 2 s.
        let short = schedule.plan(afterAttempt: 1, retryAfter: .seconds(2), nowMs: 0, random: 0)
        #expect(short.stage == 1 && short.dueAtMs == 4000)
        // Longer than every stage: the last stage, due no earlier than asked.
        let long = schedule.plan(afterAttempt: 1, retryAfter: .seconds(3600), nowMs: 0, random: 0.5)
        #expect(long.stage == 3 && long.dueAtMs == 3_600_000)
    }

    @Test func delaysParseWithUnitsAndRejectNonsense() throws {
        #expect(try RetrySchedule.parseDelays("5s,1m,10m") == [.seconds(5), .seconds(60), .seconds(600)])
        #expect(try RetrySchedule.parseDelays(" 250ms, 2h ") == [.milliseconds(250), .seconds(7200)])
        for bad in ["", "5", "5x", "-1s", "0s", "1s,,x"] {
            #expect(throws: RetryScheduleError.self) { try RetrySchedule.parseDelays(bad) }
        }
    }

    @Test func horizonCoversEveryAttempt() {
        // 5 + 60 + 600 × 4 = 2465 s, plus 20 % jitter.
        #expect(schedule.horizon == .seconds(2465) * 1.2)
    }

    @Test func schemaOneOutboundRecordsStillDecode() throws {
        let v1 = """
            {"accepted_at_ms":1700000000000,"body":{"aps":{}},"delivery":{"apns_priority":10,"apns_push_type":"alert","fcm_priority":"high"},\
            "device_id":7,"notification_id":"n1","provider":"apns","realm_uuid":"r","schema":1,"token":"abc"}
            """
        let record = try Wire.decode(OutboundRecord.self, from: Array(v1.utf8))
        #expect(record.schema == 1)
        #expect(record.attempts == nil && record.lastError == nil && record.notBeforeMs == nil)
        #expect(record.notificationID == "n1" && record.deviceID == 7)
    }

    @Test func deadLetterCarriesThePushAndItsLastError() throws {
        var push = OutboundRecord(
            notificationID: "n2", deviceID: 9, realmUUID: "r", provider: .fcm, token: "t", appID: nil,
            delivery: DeliveryClass(.message), body: ["encrypted_data": "x"], expiresAt: 100, acceptedAtMs: 1)
        push.attempts = 4
        push.lastError = "UNAVAILABLE"
        let dead = DeadLetterRecord(
            cause: .attemptsExhausted, lastError: "UNAVAILABLE", httpStatus: 503, attempts: 4, deadAtMs: 5, record: push
        )
        let json = try Wire.decode(JSONValue.self, from: Wire.encode(dead))
        #expect(json["cause"] == "attempts_exhausted")
        #expect(json["record"]?["last_error"] == "UNAVAILABLE")
        #expect(try Wire.decode(DeadLetterRecord.self, from: Wire.encode(dead)) == dead)
        #expect(push.isExpired(atMs: 100_999) == false)
        #expect(push.isExpired(atMs: 101_000) == true)
    }
}
