// Data model and ownership (cf. Varnish cache_hash.c):
//
//   MemoryCache ──owns── Locked<State>            one lock, held for O(variants of one URL) work only
//     State.map     [CacheKey: Int]              URL -> index of its most recently used variant's node
//     State.nodes   [Node]                       array-backed doubly linked LRU list of every variant; `head` is
//                                                the most recently used, `tail` the least; free slots are chained
//                                                through `free`. Each node also links to the next variant of its
//                                                URL (`nextVariant`), most recently used first.
//     State.totalCost, entryCount, evictionCount, limits
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
// Variants (RFC 9111 section 4.1): a URL holds up to `variantLimit` stored responses, one per `variantID` (the
// request field values its Vary names; "" without Vary). A lookup walks the URL's chain in recency order and takes
// the first variant whose Vary fields match the request (the request's fields are asked for only when a variant has a
// Vary); a URL with variants but none matching is reported as such (`otherVariants`: the decision says vary-miss).
// Storing a variant replaces the one with the same id; storing one past the bound evicts the URL's least recently
// used variant; a response whose Vary names differ from the stored variants' replaces all of them (the origin
// changed what it varies on, and the old ones would shadow it). A removal of the URL removes every variant.
//
// Policy: LRU bounded by total cost (bytes) and optionally by count of variants (0 = unbounded). An entry costing more than
// the per-object limit or the whole budget is refused (and the old variant with its id removed). Inserting
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

public import ImageCacheHTTP
public import ImageCacheStatus
import Synchronization
internal import ImageCacheSystem

/// NSCache-like LRU of `CacheEntry` values bounded by total cost and count, several variants per URL; safe to use
/// from any thread.
public final class MemoryCache: Sendable {
    // MARK: shared, guarded by state's lock
    private let state: Locked<State>

    /// Variants kept per URL by default (`max-variants`).
    public static let defaultVariantLimit = 16

    public init(limitBytes: Int, countLimit: Int = 0, objectLimitBytes: Int, variantLimit: Int = MemoryCache.defaultVariantLimit) {
        precondition(limitBytes >= 0 && countLimit >= 0 && objectLimitBytes >= 0, "MemoryCache limits must not be negative")
        precondition(variantLimit >= 1, "MemoryCache keeps at least one variant per URL")
        state = Locked(State(limitBytes: limitBytes, countLimit: countLimit, objectLimitBytes: objectLimitBytes,
                            variantLimit: variantLimit))
    }

    /// Counters of the admission sketch for a byte budget: one per 4 KiB of budget, 4096 to 1 Mi.
    static func sketchWidth(limitBytes: Int) -> Int { min(max(limitBytes >> 12, 4096), 1 << 20) }

    /// What a lookup found for a request.
    public struct Found {
        /// The variant selected for the request (its Vary fields match), marked most recently used; nil: none.
        public var entry: CacheEntry?
        /// No variant matched, but the URL has some (the request wants another variant).
        public var otherVariants = false
    }

    /// The variant stored under `key` that `requestFields` select, marked most recently used. Counts the access (hit
    /// or miss) for admission.
    public func lookup(_ key: CacheKey, requestFields: HTTPHeaders = HTTPHeaders()) -> CacheEntry? {
        var removals: UInt64 = 0
        return find(key, requestFields: requestFields, counting: true, removals: &removals).entry
    }

    /// As `lookup`, without counting an access for admission (a second look for a request already counted).
    public func peek(_ key: CacheKey, requestFields: @autoclosure () -> HTTPHeaders = HTTPHeaders()) -> Found {
        var removals: UInt64 = 0
        return find(key, requestFields: requestFields(), counting: false, removals: &removals)
    }

    /// As `lookup`, and reads `removals` under the same lock (for a disk lookup after a miss). `requestFields` is
    /// asked for only when a stored variant has a Vary (a hit of a response without one never builds it).
    public func lookup(_ key: CacheKey, requestFields: @autoclosure () -> HTTPHeaders, removals: inout UInt64) -> Found {
        find(key, requestFields: requestFields(), counting: true, removals: &removals)
    }

    private func find(_ key: CacheKey, requestFields: @autoclosure () -> HTTPHeaders, counting: Bool,
                      removals: inout UInt64) -> Found {
        let hash = counting ? key.hashValue : 0
        return state.withLock { state in
            if counting { state.sketch.increment(hash) }
            removals = state.removals
            guard let first = state.map[key] else { return Found() }
            var fields: HTTPHeaders?
            var index = first
            var previous = State.none
            while index != State.none {
                let entry = state.nodes[index].entry!
                let selected: Bool
                if let vary = entry.vary {
                    if fields == nil { fields = requestFields() }
                    selected = vary.matches(fields!)
                } else {
                    selected = true
                }
                if selected {
                    state.moveToFront(index)
                    if previous != State.none {   // most recently used variant first in its URL's chain
                        state.nodes[previous].nextVariant = state.nodes[index].nextVariant
                        state.nodes[index].nextVariant = first
                        state.map[key] = index
                    }
                    return Found(entry: entry)
                }
                previous = index
                index = state.nodes[index].nextVariant
            }
            return Found(otherVariants: true)
        }
    }

    /// Stores `entry`, replacing the variant with its id under its key (and, when its Vary names differ, every other
    /// variant of the key), then evicts the key's least recently used variant past the per-URL bound and least
    /// recently used entries until within the limits. False (and any old variant with its id removed) when the entry
    /// alone is over the object or total limit.
    @discardableResult
    public func insert(_ entry: CacheEntry) -> Bool { store(entry) }

    /// Stores an entry read back from the disk tier, if admitted (see the policy at the top) and unless the key already
    /// holds a variant with its id received at the same time or later (an upstream fetch may have stored a newer
    /// response while the file was read), or variants that vary on other fields (a copy never replaces them: they came
    /// from the origin since), or a removal came after `removalsSeen` (the `removals` count read before the disk lookup).
    @discardableResult
    public func promote(_ entry: CacheEntry, removalsSeen: UInt64) -> Bool {
        store(entry, promotion: removalsSeen)
    }

    /// Whether `promote` would admit an entry of `cost` bytes under `key` now (the disk tier asks before it reads a
    /// body into memory; a refused one is sent from its file instead).
    public func admits(_ key: CacheKey, cost: Int) -> Bool {
        let hash = key.hashValue
        return state.withLock { $0.admits(hash: hash, cost: cost, replacing: nil) }
    }

    /// `remove` and `removeAll` calls so far: read before a disk lookup, handed to `promote`.
    public var removals: UInt64 { state.withLock { $0.removals } }

    /// `insert` and `promote` (`promotion`: the removals seen): a promotion keeps a variant received at the same time
    /// or later, and is subject to admission.
    private func store(_ entry: CacheEntry, promotion removalsSeen: UInt64? = nil) -> Bool {
        let hash = removalsSeen == nil ? 0 : entry.key.hashValue
        let (stored, released) = state.withLock { state -> (Bool, [CacheEntry]) in
            var released: [CacheEntry] = []
            let old = state.variant(entry.key, id: entry.variantID)
            if let removalsSeen {
                guard removalsSeen == state.removals else { return (false, []) }
                if let old, let stored = state.nodes[old].entry, stored.responseTime >= entry.responseTime { return (false, []) }
                guard !state.hasVariants(of: entry.key, otherThanNamed: entry.vary?.names ?? []) else { return (false, []) }
                guard state.admits(hash: hash, cost: entry.cost, replacing: old) else { return (false, []) }
            }
            if let old { released.append(state.release(old)) }
            guard entry.cost <= state.objectLimitBytes, entry.cost <= state.limitBytes else { return (false, released) }
            state.releaseVariants(of: entry.key, unlessNamed: entry.vary?.names ?? [], into: &released)
            state.insertAtFront(entry)
            state.trimVariants(of: entry.key, into: &released)
            state._trim(into: &released)
            return (true, released)
        }
        _ = released  // dropped here, outside the lock
        return stored
    }

    /// Removes `key`'s variant `id`; returns it (nil: none).
    @discardableResult
    public func remove(_ key: CacheKey, variant id: String) -> CacheEntry? {
        state.withLock { state in
            state.removals += 1
            return state.variant(key, id: id).map { state.release($0) }
        }
    }

    /// Removes every variant under `key`; returns the most recently used one (nil: none).
    @discardableResult
    public func remove(_ key: CacheKey) -> CacheEntry? {
        let released = state.withLock { state -> [CacheEntry] in
            state.removals += 1
            var released: [CacheEntry] = []
            while let first = state.map[key] { released.append(state.release(first)) }
            return released
        }
        return released.first
    }

    /// Removes every rendition of `url` (keys naming it with a rendition); how many went. One dictionary look-up
    /// when it has none (`State.renditions`).
    @discardableResult
    public func removeRenditions(of url: UpstreamURL) -> Int {
        let released = state.withLock { state -> [CacheEntry] in
            // Counted even when none is held: a disk read of one that began before must not promote it afterwards.
            state.removals += 1
            guard let texts = state.renditions[url] else { return [] }
            let keys = texts.map { CacheKey(url, rendition: $0) }
            var released: [CacheEntry] = []
            for key in keys { while let first = state.map[key] { released.append(state.release(first)) } }
            return released
        }
        return released.count
    }

    /// The renditions of `url` held now (not counted as uses).
    public func renditions(of url: UpstreamURL) -> [CacheEntry] {
        state.withLock { state in
            guard let texts = state.renditions[url] else { return [] }
            return texts.compactMap { state.map[CacheKey(url, rendition: $0)].flatMap { state.nodes[$0].entry } }
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
    /// Stored entries (every variant counts).
    public var count: Int { state.withLock { $0.entryCount } }
    /// URLs with at least one stored variant.
    public var urlCount: Int { state.withLock { $0.map.count } }
    /// Entries evicted to respect the limits since creation, the per-URL variant bound included (replacements and
    /// removals not counted).
    public var evictionCount: Int { state.withLock { $0.evictionCount } }
    /// The tier's counters, read at once, as the stats document carries them.
    public var stats: MemoryCacheStats {
        state.withLock { MemoryCacheStats(bytes: $0.totalCost, entries: $0.entryCount, limitBytes: $0.limitBytes, evictions: $0.evictionCount) }
    }

    /// Keys from most to least recently used, once per stored variant (tests and diagnostics; O(n) under the lock).
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

    /// The variants stored under `key`, most recently used first (tests and diagnostics).
    public func variants(_ key: CacheKey) -> [CacheEntry] {
        state.withLock { state in
            var entries: [CacheEntry] = []
            var index = state.map[key] ?? State.none
            while index != State.none {
                entries.append(state.nodes[index].entry!)
                index = state.nodes[index].nextVariant
            }
            return entries
        }
    }

    /// Checks the internal invariants (tests; O(n) under the lock): list, chains and map agree, costs add up.
    func checkInvariants() -> Bool {
        state.withLock { $0.isConsistent() }
    }

    // MARK: - State (only ever touched inside the lock)

    fileprivate struct Node {
        var entry: CacheEntry?
        var prev: Int
        var next: Int
        /// The next (less recently used) variant of the same URL.
        var nextVariant: Int
    }

    private struct State {
        static let none = -1

        var map: [CacheKey: Int] = [:]
        /// The renditions stored per URL (CacheKey.rendition texts), so a purge of the URL finds them without a scan.
        var renditions: [UpstreamURL: Set<String>] = [:]
        var nodes: [Node] = []
        var free: [Int] = []
        var head = State.none
        var tail = State.none
        var totalCost = 0
        var entryCount = 0
        var evictionCount = 0
        var limitBytes: Int
        var countLimit: Int
        var objectLimitBytes: Int
        let variantLimit: Int
        var sketch: FrequencySketch
        var removals: UInt64 = 0

        init(limitBytes: Int, countLimit: Int, objectLimitBytes: Int, variantLimit: Int) {
            self.limitBytes = limitBytes
            self.countLimit = countLimit
            self.objectLimitBytes = objectLimitBytes
            self.variantLimit = variantLimit
            sketch = FrequencySketch(width: MemoryCache.sketchWidth(limitBytes: limitBytes))
        }

        /// The node of `key`'s variant `id`, if stored.
        func variant(_ key: CacheKey, id: String) -> Int? {
            var index = map[key] ?? State.none
            while index != State.none {
                if nodes[index].entry!.variantID == id { return index }
                index = nodes[index].nextVariant
            }
            return nil
        }

        /// Admission of a promotion of `cost` bytes (key hash `hash`; `replacing`: the node it would replace): within
        /// the limits after the replacement, or asked for more often lately than the first entry it would evict.
        func admits(hash: Int, cost: Int, replacing: Int?) -> Bool {
            guard cost <= objectLimitBytes, cost <= limitBytes else { return false }
            let freed = replacing.flatMap { nodes[$0].entry?.cost } ?? 0
            let count = entryCount + (replacing == nil ? 1 : 0)
            if totalCost - freed + cost <= limitBytes, countLimit == 0 || count <= countLimit { return true }
            var victim = tail
            if victim == replacing, victim != State.none { victim = nodes[victim].prev }
            guard victim != State.none, let victimKey = nodes[victim].entry?.key else { return true }
            return sketch.estimate(hash) > sketch.estimate(victimKey.hashValue)
        }

        /// Links `entry` in front of the LRU list and of its URL's chain.
        mutating func insertAtFront(_ entry: CacheEntry) {
            let index: Int
            let node = Node(entry: entry, prev: State.none, next: State.none, nextVariant: map[entry.key] ?? State.none)
            if let reused = free.popLast() {
                index = reused
                nodes[index] = node
            } else {
                index = nodes.count
                nodes.append(node)
            }
            if entry.key.isRendition && map[entry.key] == nil { renditions[entry.key.url, default: []].insert(entry.key.rendition) }
            map[entry.key] = index
            totalCost += entry.cost
            entryCount += 1
            linkAtFront(index)
        }

        /// Unlinks and frees the node (from the LRU list and its URL's chain); returns its entry for release outside
        /// the lock.
        mutating func release(_ index: Int) -> CacheEntry {
            unlink(index)
            let entry = nodes[index].entry!
            let next = nodes[index].nextVariant
            if let first = map[entry.key], first == index {
                map[entry.key] = next == State.none ? nil : next
                if next == State.none, entry.key.isRendition {
                    renditions[entry.key.url]?.remove(entry.key.rendition)
                    if renditions[entry.key.url]?.isEmpty == true { renditions[entry.key.url] = nil }
                }
            } else {
                var previous = map[entry.key] ?? State.none
                while previous != State.none, nodes[previous].nextVariant != index { previous = nodes[previous].nextVariant }
                if previous != State.none { nodes[previous].nextVariant = next }
            }
            nodes[index].entry = nil
            nodes[index].nextVariant = State.none
            free.append(index)
            totalCost -= entry.cost
            entryCount -= 1
            return entry
        }

        /// Whether `key` holds a variant whose Vary names are not `names`.
        func hasVariants(of key: CacheKey, otherThanNamed names: [String]) -> Bool {
            var index = map[key] ?? State.none
            while index != State.none {
                if (nodes[index].entry!.vary?.names ?? []) != names { return true }
                index = nodes[index].nextVariant
            }
            return false
        }

        /// Releases `key`'s variants whose Vary names are not `names` (a response that varies on other fields, or on
        /// none, replaces them all).
        mutating func releaseVariants(of key: CacheKey, unlessNamed names: [String], into released: inout [CacheEntry]) {
            var index = map[key] ?? State.none
            while index != State.none {
                let next = nodes[index].nextVariant
                if (nodes[index].entry!.vary?.names ?? []) != names { released.append(release(index)) }
                index = next
            }
        }

        /// Evicts `key`'s least recently used variants past `variantLimit`.
        mutating func trimVariants(of key: CacheKey, into released: inout [CacheEntry]) {
            var index = map[key] ?? State.none
            var count = 0
            while index != State.none {
                count += 1
                let next = nodes[index].nextVariant
                if count > variantLimit {
                    released.append(release(index))
                    evictionCount += 1
                }
                index = next
            }
        }

        mutating func moveToFront(_ index: Int) {
            guard head != index else { return }
            unlink(index)
            linkAtFront(index)
        }

        /// Evicts from the LRU end until within the limits. Caller holds the lock.
        mutating func _trim(into released: inout [CacheEntry]) {
            while tail != State.none, totalCost > limitBytes || (countLimit > 0 && entryCount > countLimit) {
                released.append(release(tail))
                evictionCount += 1
            }
        }

        mutating func removeAll() {
            map = [:]
            renditions = [:]
            nodes = []
            free = []
            head = State.none
            tail = State.none
            totalCost = 0
            entryCount = 0
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
                guard nodes[index].entry != nil, nodes[index].prev == previous else { return false }
                seen += 1
                cost += nodes[index].entry!.cost
                previous = index
                index = nodes[index].next
            }
            // Every chain holds nodes of its key only, within the bound; together they hold every node once.
            var chained = 0
            for (key, first) in map {
                var index = first
                var count = 0
                while index != State.none {
                    guard let entry = nodes[index].entry, entry.key == key else { return false }
                    count += 1
                    guard count <= variantLimit else { return false }   // also ends a chain that loops
                    index = nodes[index].nextVariant
                }
                guard count >= 1 else { return false }
                chained += count
            }
            return previous == tail && seen == entryCount && chained == entryCount && cost == totalCost
                && seen + free.count == nodes.count
        }
    }
}
