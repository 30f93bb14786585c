// Scheduling of upstream transfers: at most `maxConcurrent` run at once, the rest wait.
//
// Data model: `running` is the set of transfer IDs holding a slot; `waiting` is the list of IDs without one,
// in arrival order (so the oldest, the first to time out, is always first). A free slot goes to the waiting
// transfer with the highest priority; among equal priorities the oldest (fifo) or the newest (lifo).
// A transfer that waited `timeout` or longer is expired by `expire(now:)` and fails with `.queueTimeout`.
// Pure value type with an injected time (`now`): no clock, no lock, no I/O. Its owner (CurlOrigin) keeps it
// under its lock and performs the starts and failures the methods return.

/// Decides which upstream transfers run and which wait.
public struct TransferQueue<ID: Hashable & Sendable>: Sendable {
    public typealias Instant = ContinuousClock.Instant

    /// What to do with a submitted transfer.
    public enum Admission: Sendable, Equatable {
        /// A slot is free: start it now.
        case start
        /// Every slot is busy: it waits.
        case wait
    }

    /// What cancelling a transfer changed.
    public enum Cancellation: Sendable, Equatable {
        /// It was waiting and is gone; nothing to stop.
        case removedWaiting
        /// It was running: stop it; the freed slot starts `next`.
        case removedRunning(next: [ID])
        /// Not known (already finished, expired or cancelled).
        case unknown
    }

    private struct Waiter: Sendable {
        var id: ID
        var priority: Int
        var deadline: Instant
    }

    public let maxConcurrent: Int
    public let order: UpstreamSettings.QueueOrder
    public let timeout: Duration

    private var running: Set<ID> = []
    private var waiting: [Waiter] = []

    public init(maxConcurrent: Int, order: UpstreamSettings.QueueOrder, timeout: Duration) {
        precondition(maxConcurrent > 0, "maxConcurrent must be positive")
        self.maxConcurrent = maxConcurrent
        self.order = order
        self.timeout = timeout
    }

    public var runningCount: Int { running.count }
    public var waitingCount: Int { waiting.count }

    /// When the oldest waiting transfer times out, or nil when none waits.
    public var nextDeadline: Instant? { waiting.first?.deadline }

    /// Admits `id`: it starts at once when a slot is free, else it waits.
    public mutating func submit(_ id: ID, priority: Int = 0, now: Instant) -> Admission {
        precondition(!running.contains(id) && !waiting.contains { $0.id == id }, "transfer submitted twice")
        if running.count < maxConcurrent {
            running.insert(id)
            return .start
        }
        waiting.append(Waiter(id: id, priority: priority, deadline: now + timeout))
        return .wait
    }

    /// `id` ended (completed or failed): frees its slot. Returns the transfers to start now.
    public mutating func finish(_ id: ID) -> [ID] {
        guard running.remove(id) != nil else { return [] }
        return fillSlots()
    }

    /// Removes `id` wherever it is.
    public mutating func cancel(_ id: ID) -> Cancellation {
        if let index = waiting.firstIndex(where: { $0.id == id }) {
            waiting.remove(at: index)
            return .removedWaiting
        }
        if running.remove(id) != nil {
            return .removedRunning(next: fillSlots())
        }
        return .unknown
    }

    /// Removes and returns the waiting transfers whose deadline is at or before `now`, oldest first.
    public mutating func expire(now: Instant) -> [ID] {
        var expired: [ID] = []
        while let first = waiting.first, first.deadline <= now {
            expired.append(first.id)
            waiting.removeFirst()
        }
        return expired
    }

    /// Removes everything; returns the waiting then the running IDs.
    public mutating func removeAll() -> (waiting: [ID], running: [ID]) {
        defer {
            waiting = []
            running = []
        }
        return (waiting.map(\.id), Array(running))
    }

    private mutating func fillSlots() -> [ID] {
        var started: [ID] = []
        while running.count < maxConcurrent, let index = nextWaiterIndex() {
            let id = waiting.remove(at: index).id
            running.insert(id)
            started.append(id)
        }
        return started
    }

    private func nextWaiterIndex() -> Int? {
        guard let top = waiting.map(\.priority).max() else { return nil }
        switch order {
        case .fifo: return waiting.firstIndex { $0.priority == top }
        case .lifo: return waiting.lastIndex { $0.priority == top }
        }
    }
}
