// Data model and ownership (cf. Varnish cache_hash.c):
//
//   MemoryCache ──owns── Mutex<State>            one lock, held for O(1) work only
//     State.map     [CacheKey: Int]              key -> index of its node
//     State.nodes   [Node]                       array-backed doubly linked LRU list; `head` is the most recently
//                                                used, `tail` the least; free slots are chained through `free`
//     State.totalCost, evictionCount, limits
//     State.sketch  FrequencySketch             recent accesses by key hash (every lookup, hit or miss)
//     State.removals                            remove/removeAll calls so far (a purge's mark)
//
//   Entries are immutable `CacheEntry` objects: a lookup hands out a reference (one retain; the body is never copied),
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
//
// Admission of copies read back from the disk tier (`promote`): LRU alone thrashes when the working set is larger
// than memory and is scanned in a cycle (every disk hit would evict an entry needed soon, and none would ever be hit
// in memory). A promotion that needs an eviction is admitted only when the candidate was asked for more often lately
// than the entry it would evict first (TinyLFU, see FrequencySketch.swift); ties keep the resident entry, so a scan
// settles on a stable resident set instead of rotating through it. A promotion that fits without evicting is always
// admitted. A refused promotion is not an error: the disk tier serves the entry from its file. `insert` (a response
// just received from the origin) always admits, as plain LRU.
//
// Purges: `remove` and `removeAll` count removals. A disk hit notes the count before it looks on disk and promotes
// with it; a purge in between makes the promotion a no-op, so a purged entry never comes back into memory from a
// read that started before the purge (the purge queues the disk removal first, then empties memory).

import Synchronization

/// NSCache-like LRU of `CacheEntry` values bounded by total cost and count; safe to use from any thread.
public final class MemoryCache: Sendable {
    // MARK: shared, guarded by state's lock
    private let state: Mutex<State>

    public init(limitBytes: Int, countLimit: Int = 0, objectLimitBytes: Int) {
        precondition(limitBytes >= 0 && countLimit >= 0 && objectLimitBytes >= 0, "MemoryCache limits must not be negative")
        state = Mutex(State(limitBytes: limitBytes, countLimit: countLimit, objectLimitBytes: objectLimitBytes))
    }

    /// Counters of the admission sketch for a byte budget: one per 4 KiB of budget, 4096 to 1 Mi.
    static func sketchWidth(limitBytes: Int) -> Int { min(max(limitBytes >> 12, 4096), 1 << 20) }

    /// The entry stored under `key`, marked most recently used. Counts the access (hit or miss) for admission.
    public func lookup(_ key: CacheKey) -> CacheEntry? {
        var removals: UInt64 = 0
        return lookup(key, removals: &removals)
    }

    /// As `lookup`, without counting an access for admission (a second look for a request already counted).
    public func peek(_ key: CacheKey) -> CacheEntry? {
        var removals: UInt64 = 0
        return find(key, counting: false, removals: &removals)
    }

    /// As `lookup`, and reads `removals` under the same lock (for a disk lookup after a miss).
    public func lookup(_ key: CacheKey, removals: inout UInt64) -> CacheEntry? {
        find(key, counting: true, removals: &removals)
    }

    private func find(_ key: CacheKey, counting: Bool, removals: inout UInt64) -> CacheEntry? {
        let hash = counting ? key.hashValue : 0
        return state.withLock { state in
            if counting { state.sketch.increment(hash) }
            removals = state.removals
            guard let index = state.map[key] else { return nil }
            state.moveToFront(index)
            return state.nodes[index].entry
        }
    }

    /// Stores `entry`, replacing any entry under its key, then evicts least-recently-used entries until within the
    /// limits. False (and any old entry under the key removed) when the entry alone is over the object or total limit.
    @discardableResult
    public func insert(_ entry: CacheEntry) -> Bool { store(entry) }

    /// Stores an entry read back from the disk tier, if admitted (see the policy at the top) and unless the key already
    /// holds one received at the same time or later (an upstream fetch may have stored a newer response while the
    /// file was read), or a removal came after `removalsSeen` (the `removals` count read before the disk lookup).
    @discardableResult
    public func promote(_ entry: CacheEntry, removalsSeen: UInt64) -> Bool {
        store(entry, promotion: removalsSeen)
    }

    /// Whether `promote` would admit an entry of `cost` bytes under `key` now (the disk tier asks before it reads a
    /// body into memory; a refused one is sent from its file instead).
    public func admits(_ key: CacheKey, cost: Int) -> Bool {
        let hash = key.hashValue
        return state.withLock { $0.admits(hash: hash, cost: cost, replacing: $0.map[key]) }
    }

    /// `remove` and `removeAll` calls so far: read before a disk lookup, handed to `promote`.
    public var removals: UInt64 { state.withLock { $0.removals } }

    /// `insert` and `promote` (`promotion`: the removals seen): a promotion keeps an entry under the key received at
    /// the same time or later, and is subject to admission.
    private func store(_ entry: CacheEntry, promotion removalsSeen: UInt64? = nil) -> Bool {
        let hash = removalsSeen == nil ? 0 : entry.key.hashValue
        let (stored, released) = state.withLock { state -> (Bool, [CacheEntry]) in
            var released: [CacheEntry] = []
            let old = state.map[entry.key]
            if let removalsSeen {
                guard removalsSeen == state.removals else { return (false, []) }
                if let old, let stored = state.nodes[old].entry, stored.responseTime >= entry.responseTime { return (false, []) }
                guard state.admits(hash: hash, cost: entry.cost, replacing: old) else { return (false, []) }
            }
            if let old { released.append(state.release(old)) }
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
            state.removals += 1
            return state.map[key].map { state.release($0) }
        }
    }

    public func removeAll() {
        let released = state.withLock { state -> [Node] in
            let nodes = state.nodes
            state.removeAll()
            state.removals += 1
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
            let width = MemoryCache.sketchWidth(limitBytes: bytes)
            if width != state.sketch.width { state.sketch = FrequencySketch(width: width) }
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
        var sketch: FrequencySketch
        var removals: UInt64 = 0

        init(limitBytes: Int, countLimit: Int, objectLimitBytes: Int) {
            self.limitBytes = limitBytes
            self.countLimit = countLimit
            self.objectLimitBytes = objectLimitBytes
            sketch = FrequencySketch(width: MemoryCache.sketchWidth(limitBytes: limitBytes))
        }

        /// Admission of a promotion of `cost` bytes (key hash `hash`; `replacing`: the node it would replace): within
        /// the limits after the replacement, or asked for more often lately than the first entry it would evict.
        func admits(hash: Int, cost: Int, replacing: Int?) -> Bool {
            guard cost <= objectLimitBytes, cost <= limitBytes else { return false }
            let freed = replacing.flatMap { nodes[$0].entry?.cost } ?? 0
            let count = map.count + (replacing == nil ? 1 : 0)
            if totalCost - freed + cost <= limitBytes, countLimit == 0 || count <= countLimit { return true }
            var victim = tail
            if victim == replacing, victim != State.none { victim = nodes[victim].prev }
            guard victim != State.none, let victimKey = nodes[victim].entry?.key else { return true }
            return sketch.estimate(hash) > sketch.estimate(victimKey.hashValue)
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
