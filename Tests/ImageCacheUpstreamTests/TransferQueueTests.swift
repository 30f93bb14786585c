import Testing
@testable import ImageCacheUpstream

@Suite("TransferQueue", .timeLimit(.minutes(1)))
struct TransferQueueTests {
    typealias Queue = TransferQueue<Int>
    let t0 = ContinuousClock.now

    /// Submits 1...n into a queue with `cap` slots, then finishes the running ones one by one and returns the start order.
    static func startOrder(cap: Int, order: UpstreamSettings.QueueOrder, submitted n: Int, priorities: [Int: Int] = [:]) -> [Int] {
        var queue = Queue(maxConcurrent: cap, order: order, timeout: .seconds(30))
        var started: [Int] = []
        var running: [Int] = []
        let now = ContinuousClock.now
        for id in 1...n where queue.submit(id, priority: priorities[id] ?? 0, now: now) == .start {
            started.append(id)
            running.append(id)
        }
        while !running.isEmpty {
            let next = queue.finish(running.removeFirst())
            started += next
            running += next
        }
        return started
    }

    struct OrderCase: Sendable, CustomTestStringConvertible {
        var cap: Int
        var order: UpstreamSettings.QueueOrder
        var submitted: Int
        var priorities: [Int: Int] = [:]
        var expected: [Int]
        var testDescription: String { "cap \(cap) \(order) \(priorities) -> \(expected)" }
    }

    @Test("starts waiting transfers in the configured order, higher priority first", arguments: [
        OrderCase(cap: 1, order: .fifo, submitted: 4, expected: [1, 2, 3, 4]),
        OrderCase(cap: 1, order: .lifo, submitted: 4, expected: [1, 4, 3, 2]),
        OrderCase(cap: 2, order: .fifo, submitted: 5, expected: [1, 2, 3, 4, 5]),
        OrderCase(cap: 2, order: .lifo, submitted: 5, expected: [1, 2, 5, 4, 3]),
        OrderCase(cap: 1, order: .fifo, submitted: 4, priorities: [3: 5], expected: [1, 3, 2, 4]),
        OrderCase(cap: 1, order: .lifo, submitted: 4, priorities: [2: 5], expected: [1, 2, 4, 3]),
    ])
    func order(_ c: OrderCase) {
        // Given / When
        let started = Self.startOrder(cap: c.cap, order: c.order, submitted: c.submitted, priorities: c.priorities)
        // Then
        #expect(started == c.expected)
    }

    @Test("never runs more than the cap")
    func capRespected() {
        // Given
        var queue = Queue(maxConcurrent: 3, order: .fifo, timeout: .seconds(30))
        // When
        let admissions = (1...5).map { queue.submit($0, now: t0) }
        // Then
        #expect(admissions == [.start, .start, .start, .wait, .wait])
        #expect(queue.runningCount == 3)
        #expect(queue.waitingCount == 2)
        #expect(queue.finish(2) == [4])
        #expect(queue.runningCount == 3)
        #expect(queue.finish(99) == [], "finishing an unknown transfer changes nothing")
    }

    @Test("cancelling a waiting transfer removes it; cancelling a running one frees its slot")
    func cancel() {
        // Given
        var queue = Queue(maxConcurrent: 1, order: .fifo, timeout: .seconds(30))
        _ = queue.submit(1, now: t0)
        _ = queue.submit(2, now: t0)
        _ = queue.submit(3, now: t0)
        // When / Then
        #expect(queue.cancel(2) == .removedWaiting)
        #expect(queue.waitingCount == 1)
        #expect(queue.cancel(1) == .removedRunning(next: [3]))
        #expect(queue.cancel(1) == .unknown)
        #expect(queue.finish(3) == [])
        #expect(queue.runningCount == 0 && queue.waitingCount == 0)
    }

    @Test("a transfer waiting past the timeout expires; earlier ones stay")
    func timeout() {
        // Given
        var queue = Queue(maxConcurrent: 1, order: .lifo, timeout: .seconds(30))
        _ = queue.submit(1, now: t0)
        _ = queue.submit(2, now: t0)
        _ = queue.submit(3, now: t0 + .seconds(10))
        // When / Then
        #expect(queue.nextDeadline == t0 + .seconds(30))
        #expect(queue.expire(now: t0 + .seconds(29)) == [])
        #expect(queue.expire(now: t0 + .seconds(30)) == [2])
        #expect(queue.nextDeadline == t0 + .seconds(40))
        #expect(queue.expire(now: t0 + .seconds(100)) == [3])
        #expect(queue.nextDeadline == nil)
        #expect(queue.runningCount == 1, "running transfers never expire")
        #expect(queue.cancel(2) == .unknown)
    }
}
