import Synchronization
import Testing

@testable import IngestCore
@testable import StageTestSupport

/// The budget large gorush bodies share: takers past it wait, in turn, until bytes come back.
@Suite struct ByteBudgetTests {
    final class Order: Sendable {
        let seen = Mutex<[Int]>([])
        func add(_ taker: Int) { seen.withLock { $0.append(taker) } }
        var list: [Int] { seen.withLock { $0 } }
    }

    /// Yields until `condition` holds (a taker queued), a million times at most.
    static func until(_ condition: () async -> Bool) async throws {
        for _ in 0..<1_000_000 {
            if await condition() { return }
            await Task.yield()
        }
        throw CancellationError()
    }

    @Test func takersPastTheBudgetWaitInTurnUntilBytesComeBack() async throws {
        let budget = ByteBudget(capacity: 100)
        await budget.acquire(60)
        await budget.acquire(40)
        let order = Order()
        let second = Task {
            await budget.acquire(50)
            order.add(2)
        }
        // Queued behind the 50: a small taker does not jump the line.
        try await Self.until { await budget.waitingCount == 1 }
        let third = Task {
            await budget.acquire(20)
            order.add(3)
        }
        try await Self.until { await budget.waitingCount == 2 }
        #expect(order.list.isEmpty, "nothing fits while 100 of 100 are taken")
        await budget.release(60)
        await second.value
        #expect(await budget.waitingCount == 1)
        #expect(order.list == [2], "40 + 50 taken: the 20 waits")
        await budget.release(40)
        await third.value
        #expect(order.list == [2, 3])
        // More than the capacity is taken as the whole budget, never waited on for ever.
        await budget.release(50)
        await budget.release(20)
        await budget.acquire(1_000)
        await budget.release(1_000)
        await budget.acquire(100)
    }
}
