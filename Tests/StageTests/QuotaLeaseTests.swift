import DeviceState
import Foundation
import HTTPTypes
@testable import IngestCore
import PushCrypto
import PushModels
import RedisClient
import Synchronization
import Testing
@testable import StageTestSupport

/// Ingest's leased rate limit and cached keys: the lease book on its own, then two ingest
/// instances on one Redis (a key rotated or a server deactivated through one stops
/// working on the other; the two together never admit more than the limit).
@Suite struct QuotaLeaseTests {
    static let start = ContinuousClock.now

    static func granted(_ count: Int, window: Int64 = 7, credential: String = "k1", deactivated: Bool = false)
        -> ServerStore.QuotaLease
    {
        ServerStore.QuotaLease(granted: count, window: window, credential: credential, deactivated: deactivated)
    }

    @Test func leasesGrowWithUseUpToTheCapAndShrinkWhenIdle() {
        var book = QuotaLeases(limit: 3200)
        #expect(book.maxLease == 100)
        let now = Self.start
        #expect(book.take(server: "s", credential: "k1", verifiedAt: now, window: 7, now: now) == .renew)
        var wants: [Int] = []
        var granted = 0
        for _ in 0..<10 {
            let (want, returning) = book.renewal(server: "s", window: 7)
            #expect(returning == 0, "a lease used up has nothing to give back")
            wants.append(want)
            book.install(server: "s", Self.granted(want), takenAt: now, now: now)
            granted += want
            while book.take(server: "s", credential: "k1", verifiedAt: now, window: 7, now: now) == .admitted {
                granted -= 1
            }
        }
        #expect(wants == [1, 2, 4, 8, 16, 32, 64, 100, 100, 100])
        #expect(granted == 0, "every request granted was taken once")

        // A lease that served 3 of its 100 before it lapsed: the 97 go back, the next asks for 6.
        book.install(server: "s", Self.granted(100), takenAt: now, now: now)
        for _ in 0..<3 {
            #expect(book.take(server: "s", credential: "k1", verifiedAt: now, window: 7, now: now) == .admitted)
        }
        let later = now + .seconds(2)
        #expect(book.take(server: "s", credential: "k1", verifiedAt: now, window: 7, now: later) == .renew)
        let (want, returning) = book.renewal(server: "s", window: 7)
        #expect(want == 6)
        #expect(returning == 97)
        // Emptied: a second renewal gives nothing back twice.
        #expect(book.renewal(server: "s", window: 7).returning == 0)
    }

    @Test func aLeaseThatArrivesLateStillHoldsForItsValidity() {
        var book = QuotaLeases(limit: 3200)
        let now = Self.start
        // Sent 2 s ago (a slow Redis): valid for a second from its arrival all the same.
        book.install(server: "s", Self.granted(1), takenAt: now - .seconds(2), now: now)
        #expect(
            book.take(server: "s", credential: "k1", verifiedAt: now - .seconds(3), window: 7, now: now) == .admitted)
    }

    @Test func leftoversOfAnEarlierWindowAreNotGivenBack() {
        var book = QuotaLeases(limit: 3200)
        book.install(server: "s", Self.granted(50, window: 7), takenAt: Self.start, now: Self.start)
        #expect(book.take(server: "s", credential: "k1", verifiedAt: Self.start, window: 8, now: Self.start) == .renew)
        #expect(book.renewal(server: "s", window: 8).returning == 0)
    }

    @Test func aUsedUpWindowIsLimitedAndAChangedKeyIsToldApartFromAnOlderLease() {
        var book = QuotaLeases(limit: 3)
        #expect(book.maxLease == 1, "small limits stay exact")
        let now = Self.start
        book.install(server: "s", Self.granted(0), takenAt: now, now: now)
        #expect(book.take(server: "s", credential: "k1", verifiedAt: now, window: 7, now: now) == .limited)

        book.install(server: "s", Self.granted(1, credential: "k2"), takenAt: now, now: now)
        // Verified before the lease was taken: the key changed since.
        #expect(
            book.take(server: "s", credential: "k1", verifiedAt: now - .seconds(1), window: 7, now: now)
                == .credentialChanged)
        // Verified after the lease was taken: the lease is the older one; renew it.
        #expect(
            book.take(server: "s", credential: "k1", verifiedAt: now + .milliseconds(1), window: 7, now: now)
                == .renew)
        #expect(book.take(server: "s", credential: "k2", verifiedAt: now, window: 7, now: now) == .admitted)

        book.install(server: "s", Self.granted(1, deactivated: true), takenAt: now, now: now)
        #expect(book.take(server: "s", credential: "k1", verifiedAt: now, window: 7, now: now) == .deactivated)
        book.removeAll()
        #expect(book.take(server: "s", credential: "k1", verifiedAt: now, window: 7, now: now) == .renew)
    }
}
