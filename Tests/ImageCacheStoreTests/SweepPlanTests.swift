@testable import ImageCacheStore
import Testing

/// The sweep's choice as a pure value over a snapshot of the entry table: no files, no queue.
@Suite("SweepPlan", .timeLimit(.minutes(1)))
struct SweepPlanTests {
    static func record(size: Int = 100, lastUsed: Double, sequence: UInt64 = 0) -> DiskIndex.Record {
        DiskIndex.Record(size: size, lastUsed: lastUsed, persistedUse: lastUsed, sequence: sequence)
    }

    static func plan(_ records: [String: DiskIndex.Record], now: Double = 1000, maxAge: Double = 60, limit: Int,
                     target: Int) -> SweepPlan {
        SweepPlan(records: records, bytes: records.values.reduce(0) { $0 + $1.size }, now: now, maxAgeSeconds: maxAge,
                  limitBytes: limit, targetBytes: target)
    }

    @Test("a sweep expires every entry unused for more than the max age, and evicts nothing within the limit")
    func expiresByAge() {
        // Given entries last used long ago, exactly the max age ago, and just now, within the limit
        let records = ["old": Self.record(lastUsed: 0), "edge": Self.record(lastUsed: 940), "new": Self.record(lastUsed: 1000)]
        // When a sweep is planned at 1000 with a max age of 60 s
        let plan = Self.plan(records, limit: 1000, target: 900)
        // Then only the one unused for more than 60 s expires
        #expect(plan.expiring.map(\.name) == ["old"])
        #expect(plan.evicting.isEmpty)
    }

    @Test("over the limit, a sweep evicts least recently used first, equal times by use sequence, down to the low-water mark")
    func evictsLeastRecentlyUsed() {
        // Given 400 bytes of recent entries (two used at the same time) and one expired entry, over a limit of 350
        let records = [
            "expired": Self.record(lastUsed: 0),
            "z": Self.record(lastUsed: 995, sequence: 9),
            "y": Self.record(lastUsed: 997, sequence: 1),
            "x": Self.record(lastUsed: 997, sequence: 3),
            "w": Self.record(lastUsed: 999),
        ]
        // When a sweep is planned with a low-water mark of 200 bytes
        let plan = Self.plan(records, limit: 350, target: 200)
        // Then the expired entry goes, and the least recently used go until 200 bytes are left
        #expect(plan.expiring.map(\.name) == ["expired"])
        #expect(plan.evicting.map(\.name) == ["z", "y"])
    }

    @Test("a sweep counts the expired bytes first: when they bring the total within the limit, nothing is evicted")
    func expiredBytesCountFirst() {
        // Given 500 bytes, 100 of them expired, and a limit of 450
        let records = ["expired": Self.record(lastUsed: 0), "a": Self.record(lastUsed: 990), "b": Self.record(lastUsed: 991),
                       "c": Self.record(lastUsed: 992), "d": Self.record(lastUsed: 993)]
        // When a sweep is planned
        let plan = Self.plan(records, limit: 450, target: 100)
        // Then only the expired entry goes
        #expect(plan.expiring.map(\.name) == ["expired"])
        #expect(plan.evicting.isEmpty)
    }

    @Test("the index keeps a chosen record that a lookup used after the snapshot the sweep chose it from")
    func keepsRecordsUsedSinceTheSnapshot() {
        // Given an index of two entries and a plan that evicts both
        var index = DiskIndex()
        index.load = .loaded(seconds: 0)
        index.insert("a", size: 100, lastUsed: 1, persistedUse: 1)
        index.insert("b", size: 100, lastUsed: 2, persistedUse: 2)
        let plan = Self.plan(index.entries.records, now: 2, limit: 150, target: 0)
        #expect(plan.evicting.map(\.name) == ["a", "b"])
        // When "b" is hit before the index drops the chosen records
        index.markUsed("b", size: 100, lastUsed: 3, persistedUse: 2, verified: nil, createdSeen: index.entries.records["b"]?.created)
        let removed = index.removeUnused(since: plan.evicting)
        // Then only "a" is removed, and the bytes count what is left
        #expect(removed.map(\.name) == ["a"])
        #expect(index.entries.records.keys.sorted() == ["b"] && index.entries.bytes == 100)
    }
}
