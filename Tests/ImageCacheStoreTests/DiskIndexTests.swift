import Foundation
@testable import ImageCacheSystem
@testable import ImageCacheHTTP
@testable import ImageCacheStore
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// The disk index's parts and rules as pure values: no files, no queues, no lock.
@Suite("DiskIndex", .timeLimit(.minutes(1)))
struct DiskIndexTests {
    static func identity(inode: UInt64 = 1, size: Int = 10, ctime: Int = 100, nanoseconds: Int = 0) -> FileIdentity {
        FileIdentity(device: 1, inode: inode, size: size, changeSeconds: ctime, changeNanoseconds: nanoseconds)
    }

    static let head = DiskIndex.Head(DiskCacheTests.entry("h", bytes: 0))

    static func version(_ identity: FileIdentity = identity(), head: DiskIndex.Head? = head, checkedAt: Double = 0)
        -> DiskIndex.VerifiedVersion
    {
        DiskIndex.VerifiedVersion(identity: identity, head: head, bodyOffset: 0, bodyLength: 10, file: nil, checkedAt: checkedAt)
    }

    // MARK: - What a lookup checks

    enum Expected { case trusted, header, headerAndBody }

    @Test("a lookup reads nothing of the version verified before while its head is kept, the header once the head was dropped, and checks everything of any other version",
          arguments: [
              (identity(), Optional(version()), Expected.trusted),
              (identity(), version(head: nil), .header),
              (identity(inode: 2), version(), .headerAndBody),
              (identity(size: 11), version(), .headerAndBody),
              (identity(nanoseconds: 1), version(), .headerAndBody),
              (identity(), nil, .headerAndBody),
          ])
    func lookupCheck(opened: FileIdentity, before: DiskIndex.VerifiedVersion?, expected: Expected) {
        // When a lookup opens `opened` and the record holds `before`
        let check = DiskIndex.VerifiedVersion.check(opened: opened, verifiedBefore: before)
        // Then it checks what the version verified before does not vouch for
        switch (check, expected) {
        case let (.trusted(version), .trusted): #expect(version.identity == opened && version.head === Self.head)
        case (.header, .header), (.headerAndBody, .headerAndBody): break
        default: Issue.record("\(check) instead of \(expected)")
        }
    }

    @Test("a verified version is kept for later lookups only once its ctime is a second old, stamped with the time it was checked")
    func settledVersion() {
        // Given a version whose ctime is 100 s
        let version = Self.version(Self.identity(ctime: 100))
        // When a lookup checked it half a second, then a second, after that ctime
        let early = version.settled(file: nil, checkedAt: Date(timeIntervalSince1970: 100.5))
        let settled = version.settled(file: nil, checkedAt: Date(timeIntervalSince1970: 101))
        // Then the early one is not kept, and the settled one is, checked at that time
        #expect(early == nil)
        #expect(settled?.checkedAt == 101 && settled?.identity == version.identity)
    }

    // MARK: - Parts

    /// A descriptor that is no file (a pipe's read end; the write end is closed): the index never reads it.
    static func descriptor() -> FileBody {
        var ends: [Int32] = [0, 0]
        precondition(pipe(&ends) == 0)
        close(ends[1])
        return FileBody(descriptor: ends[0], offset: 0, length: 0)
    }

    /// A primary name (64 hex digits) and the variant names of its URL (`<primary>-<16 hex digits>`).
    static func primary(_ digit: Character) -> String { String(repeating: digit, count: 64) }
    static func variant(_ digit: Character, _ n: Int) -> String {
        primary(digit) + "-" + String(repeating: "0", count: 15) + String(n, radix: 16)
    }

    @Test("the entry table's bytes are the sum of its records' sizes through new names, replaced records, removals and emptying")
    func entryBytes() {
        // Given an empty table
        var entries = DiskIndex.Entries()
        // When records are stored, replaced and removed
        entries.put("a", entries.newRecord(size: 100, lastUsed: 1, persistedUse: 1, vary: nil))
        entries.put("b", DiskIndex.Record(size: 50, lastUsed: 1, persistedUse: 1, sequence: 0))
        #expect(entries.bytes == 150)
        let replaced = entries.put("a", entries.newRecord(size: 30, lastUsed: 2, persistedUse: 2, vary: nil))
        #expect(replaced?.size == 100 && entries.bytes == 80)
        #expect(entries.remove("b")?.size == 50 && entries.bytes == 30)
        #expect(entries.remove("b") == nil && entries.bytes == 30)
        // Then emptying hands back what it held and leaves nothing counted
        #expect(entries.removeAll().keys.sorted() == ["a"])
        #expect(entries.bytes == 0 && entries.records.isEmpty)
    }

    @Test("each new record and each use orders after every earlier one, and a use never moves the last use back")
    func entrySequences() {
        // Given two records written one after the other
        var entries = DiskIndex.Entries()
        entries.put("a", entries.newRecord(size: 1, lastUsed: 10, persistedUse: 10, vary: nil))
        entries.put("b", entries.newRecord(size: 1, lastUsed: 10, persistedUse: 10, vary: nil))
        let a = entries.records["a"]!, b = entries.records["b"]!
        #expect(a.created < b.created && a.sequence < b.sequence && b.sequence < entries.nextSequence)
        // When "a" is used with an earlier time than its last use (a lookup that started before the write)
        entries.recordUse(at: entries.records.index(forKey: "a")!, lastUsed: 5, persistedUse: 7)
        // Then it orders after "b", its times stay, and it is still the record it was
        let used = entries.records["a"]!
        #expect(used.sequence > b.sequence && used.sequence < entries.nextSequence)
        #expect(used.lastUsed == 10 && used.persistedUse == 10 && used.created == a.created)
        // And a later use moves both times forward
        entries.recordUse(at: entries.records.index(forKey: "a")!, lastUsed: 20, persistedUse: 15)
        #expect(entries.records["a"]!.lastUsed == 20 && entries.records["a"]!.persistedUse == 15)
    }

    @Test("a URL lists each of its variant names once, never its primary name, and goes with its last variant")
    func variantNames() {
        // Given the names of two variants of one URL, that URL's own name, and a variant of another URL
        var variants = DiskIndex.VariantNames()
        let (p, v1, v2, other) = (Self.primary("a"), Self.variant("a", 1), Self.variant("a", 2), Self.variant("b", 1))
        // When each is listed, one of them twice
        for name in [v1, p, v2, v1, other] { variants.insert(name) }
        // Then each URL lists its variants once, in the order they came
        #expect(variants[p] == [v1, v2] && variants[Self.primary("b")] == [other])
        // And a URL whose last variant goes is not listed at all
        variants.remove(v1)
        variants.remove(p)
        #expect(variants[p] == [v2])
        variants.remove(v2)
        #expect(variants.byURL.keys.sorted() == [Self.primary("b")])
    }

    @Test("a request selects the most recently stored variant its fields match, before the URL's response without Vary")
    func variantSelection() {
        // Given a URL stored without Vary, then as two variants on Accept
        var index = DiskIndex()
        let p = Self.primary("c")
        func vary(_ accept: String) -> VaryKey { VaryKey(fields: [.init(name: "accept", value: accept)], matchesNothing: false) }
        index.insert(p, size: 1, lastUsed: 1, persistedUse: 1)
        index.insert(Self.variant("c", 1), size: 1, lastUsed: 1, persistedUse: 1, vary: vary("image/webp"))
        index.insert(Self.variant("c", 2), size: 1, lastUsed: 1, persistedUse: 1, vary: vary("image/avif"))
        // Then each request selects the variant its field matches, and one matching none the response without Vary
        #expect(index.selectedName(p, fields: ["Accept": "image/webp"]) == Self.variant("c", 1))
        #expect(index.selectedName(p, fields: ["Accept": "image/avif"]) == Self.variant("c", 2))
        #expect(index.selectedName(p, fields: ["Accept": "image/png"]) == p)
        // And once the URL's own response goes, a request matching no variant selects nothing
        index.remove(p)
        #expect(index.selectedName(p, fields: ["Accept": "image/png"]) == nil)
    }

    @Test("a URL stays queued until every write queued for it has run, and a queued removeAll queues every URL")
    func queuedWrites() {
        // Given two writes of one URL queued
        var writes = DiskIndex.QueuedWrites()
        writes.queued("a")
        writes.queued("a")
        // Then it is queued until both have run, and other URLs are not
        #expect(writes.isQueued("a") && !writes.isQueued("b"))
        writes.done("a")
        #expect(writes.isQueued("a"))
        writes.done("a")
        #expect(!writes.isQueued("a") && writes.isEmpty)
        // When a removeAll is queued, every URL is queued until it has run
        writes.queued(nil)
        #expect(writes.isQueued("b") && !writes.isEmpty)
        writes.done(nil)
        #expect(!writes.isQueued("b") && writes.isEmpty)
    }

    @Test("the loader scans the shard directories in ascending order, skipping other names, then finishes with the time it took, once")
    func loaderSteps() {
        // Given a cache root holding three shard directories and other names
        var load = DiskIndex.LoadState.waiting
        let start = ContinuousClock.now
        let listed = ["ab", "00", "AB", "tmp", "0a", "abc", "x1"]
        // When the loader steps until it finishes
        var steps: [DiskIndex.LoadState.Step] = []
        for n in 0..<4 { steps.append(load.next(listed: n == 0 ? listed : nil, now: start + .seconds(n))) }
        // Then it scanned the shards in order, and reports the time since its first step
        #expect(steps == [.scan("00"), .scan("0a"), .scan("ab"), .finish(seconds: 3)])
        #expect(!load.isLoaded && load.seconds == nil)
        // And once marked loaded it stays so, with nothing more to do
        load.finish(seconds: 3)
        #expect(load.isLoaded && load.seconds == 3)
        #expect(load.next(listed: listed, now: start + .seconds(9)) == .none)
    }

    @Test("a kept file answers a lookup only while its last check is recent, its touch not due, and it has a head and a descriptor",
          arguments: [
              (59.0, 599.0, true, true, true),
              (60.0, 0.0, true, true, false),      // opened too long ago: open the name again
              (0.0, 600.0, true, true, false),     // the mtime touch is due
              (0.0, 0.0, false, true, false),      // head dropped
              (0.0, 0.0, true, false, false),      // body read whole: no descriptor kept
          ])
    func keptFile(sinceCheck: Double, sincePersisted: Double, hasHead: Bool, hasFile: Bool, answers: Bool) {
        // Given a record whose verified version was checked `sinceCheck` s ago, last touched `sincePersisted` s ago
        let now = 10_000.0
        var version = Self.version(head: hasHead ? Self.head : nil, checkedAt: now - sinceCheck)
        version.file = hasFile ? Self.descriptor() : nil
        let record = DiskIndex.Record(size: 10, lastUsed: now - 1, persistedUse: now - sincePersisted, sequence: 1,
                                      verified: version)
        // When a lookup asks for the kept file now
        let kept = record.keptFile(now: now)
        // Then it is there exactly when all of it holds
        #expect((kept != nil) == answers)
        if let kept { #expect(kept.0 === Self.head && kept.1 === version.file && kept.2 == version.identity) }
    }

    @Test("the head budget hands out its oldest slots only while over the budget, and compacts taken slots away")
    func headBudget() {
        // Given a budget of two heads holding three
        var heads = DiskIndex.KeptHeads()
        heads.limitCount = 2
        let tickets = ["a", "b", "c"].map { heads.keep($0, cost: 10) }
        #expect(tickets == tickets.sorted() && Set(tickets).count == 3 && heads.count == 3 && heads.bytes == 30)
        // When the oldest slot is taken and its head forgotten
        #expect(heads.takeOldestOverBudget() == .init(name: "a", ticket: tickets[0]))
        heads.forget(cost: 10, file: nil)
        // Then the budget holds, and no more slots are handed out
        #expect(heads.count == 2 && heads.bytes == 20 && heads.takeOldestOverBudget() == nil)
        // And once taken slots pass 1024 and half the queue, compaction drops them and keeps the rest in order
        for n in 0..<1100 {
            _ = heads.keep("n\(n)", cost: 10)
            _ = heads.takeOldestOverBudget()
            heads.forget(cost: 10, file: nil)
        }
        heads.compact { _ in true }
        #expect(heads.start == 0 && heads.queue.map(\.name) == ["n1098", "n1099"])
        // And stale slots (one name's head dropped and kept again, over and over) go once they pass 1024 and twice
        // the heads kept, the live ones staying in order
        var last: UInt64 = 0
        for _ in 0..<1100 {
            heads.forget(cost: 10, file: nil)
            last = heads.keep("s", cost: 10)
        }
        heads.compact { $0.name == "n1099" || $0.ticket == last }
        #expect(heads.queue.map(\.name) == ["n1099", "s"] && heads.queue.last?.ticket == last && heads.count == 2)
    }

    @Test("descriptors the index lets go are handed to the caller once, to be closed after unlocking")
    func releasedDescriptors() {
        // Given a record holding a head and a kept descriptor
        var index = DiskIndex()
        index.insert("a", size: 10, lastUsed: 1, persistedUse: 1)
        var version = Self.version()
        version.file = Self.descriptor()
        index.markUsed("a", size: 10, lastUsed: 2, persistedUse: 1, verified: version,
                       createdSeen: index.entries.records["a"]?.created)
        #expect(index.heads.released.isEmpty)
        // When a new file replaces it
        index.insert("a", size: 10, lastUsed: 3, persistedUse: 3)
        // Then its descriptor is released, handed over once, and the head uncounted
        #expect(index.heads.takeReleased().map { $0 === version.file } == [true])
        #expect(index.heads.takeReleased().isEmpty && index.heads.count == 0)
    }

    @Test("a lookup goes after a queued write of its URL, is a miss without a file call for a name the loaded index lacks, and reads otherwise")
    func lookupRoute() {
        // Given an index still loading that holds one URL
        var index = DiskIndex()
        let (held, missing) = (Self.primary("d"), Self.primary("e"))
        index.insert(held, size: 10, lastUsed: 1, persistedUse: 1)
        // Then while loading both are read (a name not indexed yet is searched for)
        #expect(index.routeKeeping(held, fields: [:], now: 2).route == .read)
        #expect(index.routeKeeping(missing, fields: [:], now: 2).route == .read)
        // When loaded, the missing one is absent; and a queued write of either sends its lookup after the write
        index.load = .loaded(seconds: 0)
        #expect(index.routeKeeping(missing, fields: [:], now: 2).route == .absent)
        #expect(index.knownAbsent(missing) && index.seen(missing) == nil && index.seen(held)?.created != nil)
        index.writes.queued(missing)
        #expect(index.routeKeeping(missing, fields: [:], now: 2).route == .afterWrites)
        #expect(index.routeKeeping(held, fields: [:], now: 2).route == .read)
    }

    // MARK: - The whole index

    /// SplitMix64: the same sequence on every run.
    struct Generator {
        var state: UInt64
        mutating func below(_ n: Int) -> Int {
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return Int((z ^ (z >> 31)) % UInt64(n))
        }
    }

    /// The invariants the parts state, and those that span two, that `index` breaks (empty: none).
    static func brokenInvariants(_ index: DiskIndex) -> [String] {
        var broken: [String] = []
        let records = index.entries.records
        if index.entries.bytes != records.values.reduce(0, { $0 + $1.size }) { broken.append("bytes") }
        if !records.values.allSatisfy({ max($0.sequence, $0.created) < index.entries.nextSequence }) { broken.append("sequence") }
        var variants: [String: Set<String>] = [:]
        for name in records.keys where DiskEntryFormat.isVariantName(name) {
            variants[DiskEntryFormat.primaryName(of: name), default: []].insert(name)
        }
        if index.variants.byURL.mapValues(Set.init) != variants { broken.append("variant names") }
        if !index.variants.byURL.values.allSatisfy({ !$0.isEmpty && Set($0).count == $0.count }) { broken.append("variant lists") }
        let withHead = records.filter { $0.value.verified?.head != nil }
        if index.heads.count != withHead.count { broken.append("head count") }
        if index.heads.bytes != withHead.values.reduce(0, { $0 + $1.verified!.head!.entry.cost }) { broken.append("head bytes") }
        if index.heads.count > index.heads.limitCount { broken.append("head budget") }
        var slots: [DiskIndex.KeptHeads.Slot: Int] = [:]
        for slot in index.heads.queue[index.heads.start...] { slots[slot, default: 0] += 1 }
        for (name, record) in withHead where slots[.init(name: name, ticket: record.verified!.headTicket)] != 1 {
            broken.append("slot of \(name)")
        }
        return broken
    }

    @Test("every mutation keeps the index's parts in step: bytes, sequences, variant lists and the head budget (3000 seeded random steps)")
    func randomSteps() {
        // Given an index with a small head budget, names of three URLs and their variants, and two head sizes
        var index = DiskIndex()
        index.heads.limitCount = 4
        let names = ["a", "b", "c"].flatMap { url in [Self.primary(url)] + (1...3).map { Self.variant(url, $0) } }
        let heads = [Self.head, DiskIndex.Head(DiskCacheTests.entry("a-longer-name", bytes: 0))]
        var random = Generator(state: 28)
        var time = 0.0
        // When inserts, loader records, hits (same version, new version, no head, a stale record), removals, routed
        // lookups, sweeps and purges follow one another
        for step in 0..<3000 {
            time += 1
            let name = names[random.below(names.count)]
            switch random.below(20) {
            case 0..<5:
                index.insert(name, size: 1 + random.below(100), lastUsed: time, persistedUse: time)
            case 5:
                if !index.load.isLoaded, index.entries.records[name] == nil {
                    index.add(name, DiskIndex.Record(size: 1 + random.below(100), lastUsed: time, persistedUse: time, sequence: 0))
                }
            case 6..<13:
                let created = random.below(8) == 0 ? 999_999 : index.entries.records[name]?.created
                let head = random.below(4) == 0 ? nil : heads[random.below(2)]
                let verified = Self.version(Self.identity(inode: UInt64(random.below(3))), head: head, checkedAt: time)
                index.markUsed(name, size: 10, lastUsed: time, persistedUse: time, verified: verified, createdSeen: created)
            case 13..<16:
                index.remove(name)
            case 16:
                _ = index.routeKeeping(DiskEntryFormat.primaryName(of: name), fields: [:], now: time)
            case 17..<19:
                let plan = SweepPlan(records: index.entries.records, bytes: index.entries.bytes, now: time, maxAgeSeconds: 30,
                                     limitBytes: 300, targetBytes: 200)
                _ = index.removeUnused(since: plan.expiring + plan.evicting)
            default:
                if random.below(10) == 0 { index.removeAllRecords() }
                if step == 1500 { index.load = .loaded(seconds: 1) }
            }
            // Then after every step the parts agree
            let broken = Self.brokenInvariants(index)
            #expect(broken.isEmpty, "after step \(step)")
            if !broken.isEmpty { break }
            _ = index.heads.takeReleased()
        }
    }
}
