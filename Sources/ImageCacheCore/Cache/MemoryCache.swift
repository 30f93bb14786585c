// Data model and ownership (cf. Varnish cache_hash.c):
//
//   MemoryCache ──owns── Mutex<State>            one lock, held for O(1) work only
//     State.map     [CacheKey: Int]              key -> index of its node
//     State.nodes   [Node]                       array-backed doubly linked LRU list; `head` is the most recently
//                                                used, `tail` the least; free slots are chained through `free`
//     State.totalCost, evictionCount, limits
//
//   Entries are immutable `CacheEntry` values: a lookup hands out a copy (the body buffer is shared, not copied),
//   so no one outside the lock ever touches State. Entries leaving the cache (evicted, replaced, removed) are
//   returned out of the critical section and released after the lock is dropped, so freeing a large body never
//   happens under the lock.
//
// Why array-backed nodes rather than `final class` nodes: no allocation per insert once slots are reused, no
// retain/release traffic while relinking, no weak back-pointers, and the nodes sit together in memory. Indices are
// only meaningful inside State, which never leaves the lock.
//
// Policy: LRU bounded by total cost (bytes) and optionally by count (0 = unbounded). An entry costing more than
// the per-object limit or the whole budget is refused (and any old entry under its key removed). Inserting
// evicts least-recently-used entries until both limits hold again; `setLimits` does so at once.

import Synchronization

/// NSCache-like LRU of `CacheEntry` values bounded by total cost and count; safe to use from any thread.
public final class MemoryCache: Sendable {
    // MARK: shared, guarded by state's lock
    private let state: Mutex<State>

    public init(limitBytes: Int, countLimit: Int = 0, objectLimitBytes: Int) {
        precondition(limitBytes >= 0 && countLimit >= 0 && objectLimitBytes >= 0, "MemoryCache limits must not be negative")
        state = Mutex(State(limitBytes: limitBytes, countLimit: countLimit, objectLimitBytes: objectLimitBytes))
    }

    /// The entry stored under `key`, marked most recently used.
    public func lookup(_ key: CacheKey) -> CacheEntry? {
        state.withLock { state in
            guard let index = state.map[key] else { return nil }
            state.moveToFront(index)
            return state.nodes[index].entry
        }
    }

    /// Stores `entry`, replacing any entry under its key, then evicts least-recently-used entries until within the
    /// limits. False (and any old entry under the key removed) when the entry alone is over the object or total limit.
    @discardableResult
    public func insert(_ entry: CacheEntry) -> Bool { store(entry, keepingNewer: false) }

    /// Stores an entry read back from the disk tier, unless the key already holds one received at the same time or
    /// later (an upstream fetch may have stored a newer response while the file was read). Limits as `insert`.
    @discardableResult
    public func promote(_ entry: CacheEntry) -> Bool { store(entry, keepingNewer: true) }

    /// `insert` and `promote`: with `keepingNewer`, an entry under the key received at the same time or later stays.
    private func store(_ entry: CacheEntry, keepingNewer: Bool) -> Bool {
        let (stored, released) = state.withLock { state -> (Bool, [CacheEntry]) in
            var released: [CacheEntry] = []
            if let old = state.map[entry.key] {
                if keepingNewer, let stored = state.nodes[old].entry, stored.responseTime >= entry.responseTime { return (false, []) }
                released.append(state.release(old))
            }
            guard entry.cost <= state.objectLimitBytes, entry.cost <= state.limitBytes else { return (false, released) }
            state.insertAtFront(entry)
            state._trim(into: &released)
            return (true, released)
        }
        _ = released  // dropped here, outside the lock
        return stored
    }

    /// Removes and returns the entry under `key`.
    @discardableResult
    public func remove(_ key: CacheKey) -> CacheEntry? {
        state.withLock { state in
            state.map[key].map { state.release($0) }
        }
    }

    public func removeAll() {
        let released = state.withLock { state -> [Node] in
            let nodes = state.nodes
            state.removeAll()
            return nodes
        }
        _ = released
    }

    /// New limits; evicts down to them at once (configuration reload).
    public func setLimits(bytes: Int, count: Int, objectLimitBytes: Int) {
        precondition(bytes >= 0 && count >= 0 && objectLimitBytes >= 0, "MemoryCache limits must not be negative")
        let released = state.withLock { state -> [CacheEntry] in
            state.limitBytes = bytes
            state.countLimit = count
            state.objectLimitBytes = objectLimitBytes
            var released: [CacheEntry] = []
            // Entries now over the per-object limit go first, then LRU order.
            var index = state.tail
            while index != State.none {
                let previous = state.nodes[index].prev
                if let cost = state.nodes[index].entry?.cost, cost > objectLimitBytes {
                    released.append(state.release(index))
                    state.evictionCount += 1
                }
                index = previous
            }
            state._trim(into: &released)
            return released
        }
        _ = released
    }

    /// Sum of the stored entries' costs, bytes.
    public var totalCost: Int { state.withLock { $0.totalCost } }
    /// The byte budget in force (changed by `setLimits`).
    public var limitBytes: Int { state.withLock { $0.limitBytes } }
    public var count: Int { state.withLock { $0.map.count } }
    /// Entries evicted to respect the limits since creation (replacements and removals not counted).
    public var evictionCount: Int { state.withLock { $0.evictionCount } }

    /// Keys from most to least recently used (tests and diagnostics; O(n) under the lock).
    public var keysByRecency: [CacheKey] {
        state.withLock { state in
            var keys: [CacheKey] = []
            var index = state.head
            while index != State.none {
                if let key = state.nodes[index].entry?.key { keys.append(key) }
                index = state.nodes[index].next
            }
            return keys
        }
    }

    /// Checks the internal invariants (tests; O(n) under the lock): list and map agree, costs add up.
    func checkInvariants() -> Bool {
        state.withLock { $0.isConsistent() }
    }

    // MARK: - State (only ever touched inside the lock)

    fileprivate struct Node {
        var entry: CacheEntry?
        var prev: Int
        var next: Int
    }

    private struct State {
        static let none = -1

        var map: [CacheKey: Int] = [:]
        var nodes: [Node] = []
        var free: [Int] = []
        var head = State.none
        var tail = State.none
        var totalCost = 0
        var evictionCount = 0
        var limitBytes: Int
        var countLimit: Int
        var objectLimitBytes: Int

        init(limitBytes: Int, countLimit: Int, objectLimitBytes: Int) {
            self.limitBytes = limitBytes
            self.countLimit = countLimit
            self.objectLimitBytes = objectLimitBytes
        }

        mutating func insertAtFront(_ entry: CacheEntry) {
            let index: Int
            if let reused = free.popLast() {
                index = reused
                nodes[index] = Node(entry: entry, prev: State.none, next: State.none)
            } else {
                index = nodes.count
                nodes.append(Node(entry: entry, prev: State.none, next: State.none))
            }
            map[entry.key] = index
            totalCost += entry.cost
            linkAtFront(index)
        }

        /// Unlinks and frees the node; returns its entry for release outside the lock.
        mutating func release(_ index: Int) -> CacheEntry {
            unlink(index)
            let entry = nodes[index].entry!
            nodes[index].entry = nil
            free.append(index)
            map[entry.key] = nil
            totalCost -= entry.cost
            return entry
        }

        mutating func moveToFront(_ index: Int) {
            guard head != index else { return }
            unlink(index)
            linkAtFront(index)
        }

        /// Evicts from the LRU end until within the limits. Caller holds the lock.
        mutating func _trim(into released: inout [CacheEntry]) {
            while tail != State.none, totalCost > limitBytes || (countLimit > 0 && map.count > countLimit) {
                released.append(release(tail))
                evictionCount += 1
            }
        }

        mutating func removeAll() {
            map = [:]
            nodes = []
            free = []
            head = State.none
            tail = State.none
            totalCost = 0
        }

        private mutating func linkAtFront(_ index: Int) {
            nodes[index].prev = State.none
            nodes[index].next = head
            if head != State.none { nodes[head].prev = index }
            head = index
            if tail == State.none { tail = index }
        }

        private mutating func unlink(_ index: Int) {
            let prev = nodes[index].prev
            let next = nodes[index].next
            if prev != State.none { nodes[prev].next = next } else { head = next }
            if next != State.none { nodes[next].prev = prev } else { tail = prev }
            nodes[index].prev = State.none
            nodes[index].next = State.none
        }

        func isConsistent() -> Bool {
            var seen = 0
            var cost = 0
            var index = head
            var previous = State.none
            while index != State.none {
                guard let entry = nodes[index].entry, map[entry.key] == index, nodes[index].prev == previous else { return false }
                seen += 1
                cost += entry.cost
                previous = index
                index = nodes[index].next
            }
            return previous == tail && seen == map.count && cost == totalCost
                && seen + free.count == nodes.count
        }
    }
}
