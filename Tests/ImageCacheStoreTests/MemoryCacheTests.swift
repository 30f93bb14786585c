import Foundation
import ImageCacheTestSupport
import Dispatch
@testable import ImageCacheStore
import Testing

@Suite("MemoryCache", .timeLimit(.minutes(1)))
struct MemoryCacheTests {
    static func entry(_ name: String, bytes: Int = 100) -> CacheEntry {
        Fixture.entry([], key: Fixture.key("http://origin.test/\(name)"), body: Array(repeating: 7, count: bytes))
    }
    static func key(_ name: String) -> CacheKey { Fixture.key("http://origin.test/\(name)") }
    static let unit = entry("x").cost  // cost of a 100-byte entry

    @Test("lookup marks an entry most recently used")
    func lruOrder() {
        // Given
        let cache = MemoryCache(limitBytes: 1 << 20, objectLimitBytes: 1 << 20)
        for name in ["a", "b", "c"] { cache.insert(Self.entry(name)) }
        // When
        _ = cache.lookup(Self.key("a"))
        // Then
        #expect(cache.keysByRecency == ["a", "c", "b"].map(Self.key))
        #expect(cache.lookup(Self.key("missing")) == nil)
    }

    @Test("inserting beyond the byte limit evicts least recently used entries")
    func byteLimit() {
        // Given room for three entries
        let cache = MemoryCache(limitBytes: 3 * Self.unit, objectLimitBytes: 3 * Self.unit)
        for name in ["a", "b", "c"] { cache.insert(Self.entry(name)) }
        _ = cache.lookup(Self.key("a"))
        // When
        #expect(cache.insert(Self.entry("d")))
        // Then
        #expect(cache.lookup(Self.key("b")) == nil)
        #expect(cache.keysByRecency == ["d", "a", "c"].map(Self.key))
        #expect(cache.totalCost == 3 * Self.unit)
        #expect(cache.evictionCount == 1)
    }

    @Test("one large insert evicts as many entries as it needs")
    func largeInsertEvictsMany() {
        let cache = MemoryCache(limitBytes: 4 * Self.unit, objectLimitBytes: 4 * Self.unit)
        for name in ["a", "b", "c", "d"] { cache.insert(Self.entry(name)) }
        // When an entry costing about two and a half units arrives
        #expect(cache.insert(Self.entry("big", bytes: 2 * Self.unit + 100)))
        // Then
        #expect(cache.keysByRecency == ["big", "d"].map(Self.key))
        #expect(cache.evictionCount == 3)
    }

    @Test("the count limit evicts the least recently used entry")
    func countLimit() {
        let cache = MemoryCache(limitBytes: 1 << 20, countLimit: 2, objectLimitBytes: 1 << 20)
        for name in ["a", "b", "c"] { cache.insert(Self.entry(name)) }
        #expect(cache.count == 2)
        #expect(cache.keysByRecency == ["c", "b"].map(Self.key))
        #expect(cache.evictionCount == 1)
    }

    @Test("an entry over the object or total limit is refused and its old version removed", arguments: [
        (10 * unit, unit + 50),  // object limit
        (unit + 50, 10 * unit),  // total limit
    ])
    func objectLimit(limit: Int, objectLimit: Int) {
        // Given a small entry stored under the key
        let cache = MemoryCache(limitBytes: limit, objectLimitBytes: objectLimit)
        cache.insert(Self.entry("a"))
        cache.insert(Self.entry("b"))
        // When a too large version arrives
        let stored = cache.insert(Self.entry("a", bytes: 200))
        // Then
        #expect(!stored)
        #expect(cache.lookup(Self.key("a")) == nil)
        #expect(cache.keysByRecency == [Self.key("b")])
        #expect(cache.totalCost == Self.unit)
    }

    @Test("promote stores a disk entry unless the key already holds one received at the same time or later")
    func promote() {
        let cache = MemoryCache(limitBytes: 1 << 20, objectLimitBytes: 1 << 20)
        let key = Self.key("p")
        let older = Fixture.entry([], key: key, body: [1], responseTime: Fixture.t0)
        let newer = Fixture.entry([], key: key, body: [2], responseTime: Fixture.t0.addingTimeInterval(10))
        // An empty key takes it
        #expect(cache.promote(older, removalsSeen: cache.removals))
        #expect(cache.lookup(key)?.body == [1])
        // A newer one replaces it
        #expect(cache.promote(newer, removalsSeen: cache.removals))
        #expect(cache.lookup(key)?.body == [2])
        // An older (or equally old) disk copy does not replace what an upstream fetch stored meanwhile
        #expect(!cache.promote(older, removalsSeen: cache.removals))
        #expect(!cache.promote(Fixture.entry([], key: key, body: [3], responseTime: Fixture.t0.addingTimeInterval(10)), removalsSeen: cache.removals))
        #expect(cache.lookup(key)?.body == [2])
        #expect(cache.totalCost == newer.cost)
    }

    @Test("a promotion started before a purge (remove or removeAll) does not bring the entry back")
    func promoteAfterPurge() {
        let cache = MemoryCache(limitBytes: 1 << 20, objectLimitBytes: 1 << 20)
        let seen = cache.removals               // read by a disk hit before it looks on disk
        cache.remove(Self.key("p"))             // a purge of the key (nothing in memory) while the file is read
        #expect(!cache.promote(Self.entry("p"), removalsSeen: seen))
        #expect(cache.lookup(Self.key("p")) == nil)
        let seenAgain = cache.removals
        cache.removeAll()
        #expect(!cache.promote(Self.entry("p"), removalsSeen: seenAgain))
        #expect(cache.promote(Self.entry("p"), removalsSeen: cache.removals))   // a lookup after the purge may
    }

    @Test("admission: a promotion that fits is admitted; a full cache keeps its entries against a cyclic scan and takes a key asked for more often than its LRU victim")
    func admission() {
        // Room for exactly 4 entries.
        let cache = MemoryCache(limitBytes: 4 * Self.unit, objectLimitBytes: 1 << 20)
        let resident = ["r0", "r1", "r2", "r3"]
        for name in resident {
            _ = cache.lookup(Self.key(name))    // the miss that made the disk hit
            #expect(cache.admits(Self.key(name), cost: Self.unit))
            #expect(cache.promote(Self.entry(name), removalsSeen: cache.removals))
        }
        // A scan over 12 other keys, 3 rounds, as a client rotating over a set larger than memory: each is asked for
        // as often as the residents, so none displaces them (plain LRU would evict on every miss and never hit).
        for _ in 0..<3 {
            for name in resident { #expect(cache.lookup(Self.key(name)) != nil) }
            for index in 0..<12 {
                let name = "s\(index)"
                _ = cache.lookup(Self.key(name))
                #expect(!cache.admits(Self.key(name), cost: Self.unit))
                #expect(!cache.promote(Self.entry(name), removalsSeen: cache.removals))
            }
        }
        #expect(Set(cache.keysByRecency) == Set(resident.map(Self.key)))
        #expect(cache.evictionCount == 0)
        // A second look (peek, as the proxy queue's re-check) does not count: 6 peeks do not beat the residents' 4 looks.
        for _ in 0..<6 { _ = cache.peek(Self.key("peeked")) }
        #expect(!cache.admits(Self.key("peeked"), cost: Self.unit))
        // A key asked for more often than the least recently used resident is admitted and evicts it.
        for _ in 0..<6 { _ = cache.lookup(Self.key("hot")) }
        let victim = cache.keysByRecency.last!
        #expect(cache.admits(Self.key("hot"), cost: Self.unit))
        #expect(cache.promote(Self.entry("hot"), removalsSeen: cache.removals))
        #expect(cache.lookup(Self.key("hot")) != nil)
        #expect(!cache.keysByRecency.contains(victim))
        // insert (a response from the origin) is plain LRU: always stored.
        #expect(cache.insert(Self.entry("fetched")))
        #expect(cache.checkInvariants())
    }

    @Test("replacing an entry updates the total cost")
    func replace() {
        let cache = MemoryCache(limitBytes: 1 << 20, objectLimitBytes: 1 << 20)
        cache.insert(Self.entry("a", bytes: 100))
        cache.insert(Self.entry("b", bytes: 100))
        // When
        let bigger = Self.entry("a", bytes: 5000)
        cache.insert(bigger)
        // Then
        #expect(cache.count == 2)
        #expect(cache.totalCost == bigger.cost + Self.unit)
        #expect(cache.lookup(Self.key("a"))?.body.count == 5000)
        #expect(cache.keysByRecency.first == Self.key("a"))
        #expect(cache.evictionCount == 0)
    }

    @Test("remove and removeAll release entries and their cost")
    func removal() {
        let cache = MemoryCache(limitBytes: 1 << 20, objectLimitBytes: 1 << 20)
        for name in ["a", "b", "c"] { cache.insert(Self.entry(name)) }
        #expect(cache.remove(Self.key("b"))?.key == Self.key("b"))
        #expect(cache.remove(Self.key("b")) == nil)
        #expect(cache.totalCost == 2 * Self.unit)
        #expect(cache.keysByRecency == ["c", "a"].map(Self.key))
        cache.removeAll()
        #expect(cache.count == 0 && cache.totalCost == 0)
        #expect(cache.insert(Self.entry("d")))
        #expect(cache.keysByRecency == [Self.key("d")])
        #expect(cache.checkInvariants())
    }

    @Test("setLimits evicts down to the new limits at once")
    func setLimits() {
        // Given five entries, one large
        let cache = MemoryCache(limitBytes: 1 << 20, objectLimitBytes: 1 << 20)
        cache.insert(Self.entry("big", bytes: 4000))
        for name in ["a", "b", "c", "d"] { cache.insert(Self.entry(name)) }
        // When the object limit drops below the large one
        cache.setLimits(bytes: 1 << 20, count: 0, objectLimitBytes: 2 * Self.unit)
        // Then
        #expect(cache.lookup(Self.key("big")) == nil)
        #expect(cache.count == 4)
        // When the byte and count limits shrink
        cache.setLimits(bytes: 3 * Self.unit, count: 2, objectLimitBytes: 2 * Self.unit)
        // Then
        #expect(cache.keysByRecency == ["d", "c"].map(Self.key))
        #expect(cache.evictionCount == 3)
        #expect(cache.checkInvariants())
    }

    @Test("concurrent inserts, lookups and removals keep the books consistent")
    func concurrency() {
        // Given a cache that must evict often
        let cache = MemoryCache(limitBytes: 40 * Self.unit, countLimit: 30, objectLimitBytes: 8 * Self.unit)
        let entries = (0..<64).map { Self.entry("k\($0)", bytes: 50 + ($0 % 9) * 150) }
        // When many threads hammer it
        DispatchQueue.concurrentPerform(iterations: 8) { thread in
            var seed = UInt64(thread + 1) &* 0x9E37_79B9_7F4A_7C15
            for _ in 0..<5000 {
                seed = seed &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
                let entry = entries[Int(seed >> 33) % entries.count]
                switch (seed >> 20) % 10 {
                case 0..<5: _ = cache.lookup(entry.key)
                case 5..<9: cache.insert(entry)
                default: cache.remove(entry.key)
                }
            }
        }
        // Then
        #expect(cache.checkInvariants())
        #expect(cache.totalCost <= 40 * Self.unit)
        #expect(cache.count <= 30)
        let keys = cache.keysByRecency
        #expect(cache.totalCost == keys.reduce(0) { sum, key in sum + entries.first { $0.key == key }!.cost })
    }
}
