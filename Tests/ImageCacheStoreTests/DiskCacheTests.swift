import Foundation
@testable import ImageCacheSystem
@testable import ImageCacheHTTP
@testable import ImageCacheStore
import Logging
import Synchronization
import Testing
import ImageCacheStatus
import ImageCacheTestSupport

@Suite("DiskCache", .timeLimit(.minutes(1)))
struct DiskCacheTests {
    static func key(_ name: String) -> CacheKey { Fixture.key("http://origin.test/\(name)") }

    static func entry(_ name: String, bytes: Int = 100, fill: UInt8 = 7, time: Date = Fixture.t0) -> CacheEntry {
        Fixture.entry([("Content-Type", "image/png"), ("ETag", "\"\(name)\"")], key: key(name),
                      body: Array(repeating: fill, count: bytes), requestTime: time, responseTime: time)
    }

    static func randomBytes(_ count: Int) -> [UInt8] {
        var generator = SystemRandomNumberGenerator()
        return (0..<count).map { _ in UInt8.random(in: 0...255, using: &generator) }
    }

    static func makeCache(_ directory: DiskTestDirectory, log: DiskTestLog = DiskTestLog(), clock: DiskTestClock = DiskTestClock(),
                          limit: Int = 1 << 30, maxAge: Double = 7 * 86_400, memoryReadLimit: Int = 1 << 20,
                          loader: Bool = true) throws -> DiskCache {
        var configuration = DiskCache.Configuration(directory: directory.path, limitBytes: limit, maxAgeSeconds: maxAge,
                                                    memoryReadLimitBytes: memoryReadLimit)
        configuration.startsIndexLoader = loader
        return try DiskCache(configuration: configuration, logger: log.logger, now: clock.now)
    }

    /// The body a lookup found, read whole or from its file (nil: a miss).
    static func body(_ found: DiskLookup?) -> [UInt8]? {
        switch found {
        case let .entry(entry): entry.body
        case let .stream(_, file): file.readAll()
        case nil: nil
        }
    }

    /// The entry a lookup found (without its body when it is sent from the file).
    static func head(_ found: DiskLookup?) -> CacheEntry? {
        switch found {
        case let .entry(entry): entry
        case let .stream(head, _): head
        case nil: nil
        }
    }

    static func fileSize(_ path: String) throws -> Int {
        try FileManager.default.attributesOfItem(atPath: path)[.size] as! Int
    }

    /// The bytes one entry of `bytes` body bytes takes on disk (header included), measured in a cache of its own.
    static func fileSize(ofEntryWith bytes: Int) throws -> Int {
        let probe = DiskTestDirectory()
        let sizer = try makeCache(probe)
        sizer.insert(entry("probe", bytes: bytes))
        sizer.flush()
        return sizer.stats.bytes
    }

    /// Overwrites one byte of a file.
    static func flipByte(in path: String, at offset: Int) throws {
        let handle = try #require(FileHandle(forUpdatingAtPath: path))
        try handle.seek(toOffset: UInt64(offset))
        let old = try #require(try handle.read(upToCount: 1)?.first)
        try handle.seek(toOffset: UInt64(offset))
        try handle.write(contentsOf: Data([old ^ 0x01]))
        try handle.close()
    }

    // MARK: - Round trips

    @Test("an inserted entry comes back equal: status, reason, fields, times, vary and body")
    func roundTrip() throws {
        // Given an entry with repeated fields, a custom reason, fractional times and a Vary key
        let directory = DiskTestDirectory()
        let cache = try Self.makeCache(directory)
        let head = HTTPResponseHead(status: 203, reason: "Non-Authoritative Infø", headers: HTTPHeaders([
            ("Content-Type", "image/webp"), ("Cache-Control", "max-age=600"), ("Vary", "Accept, Accept-Encoding"),
            ("X-Repeat", "one"), ("x-repeat", "two"), ("ETag", "W/\"v1\""), ("Empty", ""),
        ]))
        let entry = CacheEntry(key: Self.key("round.webp"), head: head, body: Self.randomBytes(5000),
                               requestTime: Date(timeIntervalSinceReferenceDate: 720_000_000.123456789),
                               responseTime: Date(timeIntervalSinceReferenceDate: 720_000_000.987654321),
                               requestHeaders: ["Accept": "image/webp,  image/*"], policy: FreshnessPolicy())
        #expect(entry.vary?.fields.count == 2)
        // When
        cache.insert(entry)
        let found = try #require(cache.lookupNow(entry.key, requestFields: ["Accept": "image/webp,image/*"])?.entry)
        // Then
        #expect(found.key == entry.key)
        #expect(found.head == entry.head)
        expectSameBytes(found.body, entry.body)
        #expect(found.requestTime == entry.requestTime)
        #expect(found.responseTime == entry.responseTime)
        #expect(found.vary == entry.vary)
        #expect(found.vary?.fields[1].value == nil)
        #expect(found.freshnessLifetime == entry.freshnessLifetime)
        #expect(found.correctedInitialAge == entry.correctedInitialAge)
        #expect(cache.stats.entries == 1)
        #expect(cache.stats.bytes > 5000)
        #expect(directory.files.count == 1)
        #expect(cache.lookupNow(Self.key("other.webp")) == nil)
    }

    @Test("an empty body and a Vary on an absent field round-trip; a Vary: * response is never selected")
    func varyStarAndEmptyBody() throws {
        let directory = DiskTestDirectory()
        let cache = try Self.makeCache(directory)
        let entry = Fixture.entry([("Vary", "X-Absent")], status: 204, key: Self.key("empty"), body: [])
        cache.insert(entry)
        let found = try #require(cache.lookupNow(entry.key)?.entry)
        #expect(found.vary == entry.vary && found.vary?.fields == [VaryKey.Field(name: "x-absent", value: nil)])
        #expect(found.body.isEmpty)
        #expect(found.head.status == 204)
        #expect(cache.lookupNow(entry.key, requestFields: ["X-Absent": ""]) == nil)

        let star = Fixture.entry([("Vary", "*")], key: Self.key("star"))
        #expect(star.vary?.matchesNothing == true)
        cache.insert(star)
        #expect(cache.lookupNow(star.key) == nil)
    }

    @Test("a body over the memory read limit comes back as a stream with the exact bytes")
    func largeBodyStreams() throws {
        // Given
        let directory = DiskTestDirectory()
        let cache = try Self.makeCache(directory, memoryReadLimit: 4096)
        let body = Self.randomBytes(700_001)
        let entry = Fixture.entry([("Content-Type", "image/jpeg")], key: Self.key("big.jpg"), body: body)
        cache.insert(entry)
        // When
        let found = try #require(cache.lookupNow(entry.key))
        guard case let .stream(head, file) = found else {
            Issue.record("expected a stream, got \(found)")
            return
        }
        // Then
        #expect(head.body.isEmpty)
        #expect(head.head == entry.head)
        #expect(file.length == body.count)
        #expect(file.readAll() == body)
    }

    @Test("a stream keeps reading the verified file when the entry is removed meanwhile")
    func streamSurvivesRemove() throws {
        // Given a stream handed out
        let directory = DiskTestDirectory()
        let cache = try Self.makeCache(directory, memoryReadLimit: 10)
        let body = Self.randomBytes(100_000)
        cache.insert(Fixture.entry([], key: Self.key("s"), body: body))
        guard case let .stream(_, file) = try #require(cache.lookupNow(Self.key("s"))) else {
            Issue.record("expected a stream")
            return
        }
        // When the entry is removed and replaced before the body is read
        cache.remove(Self.key("s"))
        cache.insert(Fixture.entry([], key: Self.key("s"), body: Array(repeating: 1, count: 100_000)))
        cache.flush()
        // Then the reader still delivers the bytes it verified
        #expect(file.readAll() == body)
    }

    // MARK: - Restart

    @Test("a restarted cache finds entries before its index has loaded and after")
    func restart() throws {
        // Given entries written by one cache
        let directory = DiskTestDirectory()
        do {
            let first = try Self.makeCache(directory)
            for n in 0..<20 { first.insert(Self.entry("r\(n)", bytes: 100 + n)) }
            first.flush()
        }
        // When a new cache that has not loaded its index looks them up
        let log = DiskTestLog()
        let cold = try Self.makeCache(directory, log: log, loader: false)
        #expect(cold.lookupNow(Self.key("r3"))?.entry?.body.count == 103)
        #expect(cold.lookupNow(Self.key("missing")) == nil)
        #expect(cold.stats.indexLoaded == false)
        #expect(cold.stats.entries == 1)  // the hit is indexed
        // Then after loading, it knows every entry and their bytes
        cold.startIndexLoader()
        cold.waitForIndex()
        #expect(cold.stats.entries == 20)
        #expect(cold.stats.indexLoadSeconds != nil)
        #expect(log.messages.contains { $0.contains("disk index loaded: 20 entries") })

        // And a cache started normally finds them after its loader finished
        let warm = try Self.makeCache(directory)
        warm.waitForIndex()
        #expect(warm.stats.entries == 20)
        #expect(warm.stats.bytes == cold.stats.bytes)
        for n in 0..<20 { #expect(warm.lookupNow(Self.key("r\(n)"))?.entry?.body.count == 100 + n) }
        #expect(warm.lookupNow(Self.key("missing")) == nil)
    }

    @Test("lookups, inserts and removes during the index load leave a consistent index")
    func workDuringLoad() throws {
        let directory = DiskTestDirectory()
        do {
            let first = try Self.makeCache(directory)
            for n in 0..<200 { first.insert(Self.entry("w\(n)")) }
            first.flush()
        }
        // When work is queued while the loader runs
        let cache = try Self.makeCache(directory)
        cache.remove(Self.key("w1"))
        cache.insert(Self.entry("new"))
        _ = cache.lookupNow(Self.key("w2"))
        cache.waitForIndex()
        // Then
        #expect(cache.stats.entries == 200)
        #expect(cache.lookupNow(Self.key("w1")) == nil)
        #expect(cache.lookupNow(Self.key("new")) != nil)
        let fileBytes = try directory.files.reduce(0) { sum, file in
            sum + (try FileManager.default.attributesOfItem(atPath: directory.path + "/" + file)[.size] as! Int)
        }
        #expect(cache.stats.bytes == fileBytes)
    }

    // MARK: - Corruption

    @Test("a flipped byte in the body is a miss, and the file is removed and logged")
    func flippedBodyByte() throws {
        // Given
        let directory = DiskTestDirectory()
        let log = DiskTestLog()
        let cache = try Self.makeCache(directory, log: log)
        let entry = Self.entry("flip", bytes: 1000)
        cache.insert(entry)
        cache.flush()
        let path = cache.path(of: entry.key)
        let size = try Self.fileSize(path)
        // When the 500th body byte is flipped
        try Self.flipByte(in: path, at: size - 500)
        // Then
        #expect(cache.lookupNow(entry.key) == nil)
        #expect(!FileManager.default.fileExists(atPath: path))
        #expect(cache.stats.removedCorrupt == 1)
        #expect(cache.stats.entries == 0)
        #expect(log.warnings.contains { $0.contains(path) && $0.contains("body checksum mismatch") })
    }

    @Test("a bad file is removed only while its name still holds the same inode: a good file written since stays")
    func corruptRemovalKeepsReplacement() throws {
        let directory = DiskTestDirectory()
        let cache = try Self.makeCache(directory)
        let entry = Self.entry("raced", bytes: 1000)
        cache.insert(entry)
        cache.flush()
        let path = cache.path(of: entry.key)
        let name = DiskEntryFormat.fileName(forKey: entry.key.description)
        let badInode = try #require(DiskFile.inode(atPath: path))
        // When the file is replaced by a new write before the removal of the old (bad) one runs
        cache.insert(Self.entry("raced", bytes: 1000, fill: 9))
        cache.flush()
        #expect(DiskFile.inode(atPath: path) != badInode)
        cache.queue.sync { cache._removeCorrupt(name: name, path: path, inode: badInode, why: "test") }
        // Then the new file stays and is served
        #expect(FileManager.default.fileExists(atPath: path))
        #expect(cache.lookupNow(entry.key)?.entry?.body == Array(repeating: 9, count: 1000))
        #expect(cache.stats.removedCorrupt == 0)
        // And with the same inode it goes
        let inode = DiskFile.inode(atPath: path)
        cache.queue.sync { cache._removeCorrupt(name: name, path: path, inode: inode, why: "test") }
        #expect(!FileManager.default.fileExists(atPath: path))
        #expect(cache.stats.removedCorrupt == 1 && cache.stats.entries == 0)
    }

    @Test("a lookup asked right after an insert, update or removal sees it: lookups of a written name wait for the write")
    func lookupAfterWrite() throws {
        let directory = DiskTestDirectory()
        let cache = try Self.makeCache(directory)
        cache.waitForIndex()
        let found = Locked<[String: [UInt8]]>([:])  // [] for "not found"
        // When each lookup is queued right after the write (no flush in between)
        for n in 0..<50 {
            cache.insert(Self.entry("w\(n)", bytes: 2000, fill: UInt8(n)))
            cache.lookup(Self.key("w\(n)")) { result in found.withLock { $0["w\(n)"] = result?.entry?.body ?? [] } }
        }
        cache.remove(Self.key("w7"))
        cache.lookup(Self.key("w7")) { result in found.withLock { $0["w7-removed"] = result?.entry?.body ?? [] } }
        cache.flush()
        // Then every lookup saw what was written before it
        let seen = found.withLock { $0 }
        for n in 0..<50 { #expect(seen["w\(n)"] == Array(repeating: UInt8(n), count: 2000), "w\(n)") }
        #expect(seen["w7-removed"] == [])
        #expect(cache.index.withLock { $0.writes.isEmpty })
    }

    @Test("a lookup hit keeps the indexed size and never brings back a name removed after the index loaded")
    func indexMarkUsed() {
        var index = DiskIndex()
        // While loading, a hit on a file the loader has not reached yet indexes it
        index.markUsed("a", size: 100, lastUsed: 5, persistedUse: 5, verified: nil, createdSeen: index.entries.records["a"]?.created)
        #expect(index.entries.records["a"]?.size == 100 && index.entries.bytes == 100)
        // A hit on a record an insert has just replaced keeps the new size
        index.insert("a", size: 300, lastUsed: 6, persistedUse: 6)
        index.markUsed("a", size: 100, lastUsed: 7, persistedUse: 6, verified: nil, createdSeen: index.entries.records["a"]?.created)
        #expect(index.entries.records["a"]?.size == 300 && index.entries.records["a"]?.lastUsed == 7 && index.entries.bytes == 300)
        // Once loaded, a name swept or purged meanwhile stays out
        index.load = .loaded(seconds: 0)
        index.remove("a")
        index.markUsed("a", size: 300, lastUsed: 8, persistedUse: 8, verified: nil, createdSeen: index.entries.records["a"]?.created)
        #expect(index.entries.records["a"] == nil && index.entries.bytes == 0)
        #expect(index.knownAbsent("a"))
    }

    @Test("a body is hashed once per file version: an unchanged file is not hashed again, a change in place is caught", arguments: [100, 600_000])
    func verifiedOnce(bytes: Int) throws {
        let directory = DiskTestDirectory()
        // The clock runs 5 s ahead of the files' change times, so a verified version counts as settled.
        let cache = try Self.makeCache(directory, clock: DiskTestClock(Date().addingTimeInterval(5)), memoryReadLimit: 1000)
        let entry = Self.entry("once", bytes: bytes, fill: 3)
        cache.insert(entry)
        let path = cache.path(of: entry.key)
        for round in 1...3 {   // rounds 2 and 3 use the kept header and skip the hash
            let found = cache.lookupNow(entry.key)
            #expect(Self.body(found) == entry.body, "round \(round)")
            #expect(Self.head(found)?.etag == entry.etag && Self.head(found)?.head.status == 200, "round \(round)")
        }
        #expect(cache.stats.bodiesVerified == 1)
        // A byte flipped in place (same size, same inode) moves ctime: hashed again, caught, removed. (The lookups'
        // fstat marks ctime as queried, so Linux 6.13+ file systems with fine-grained timestamps, ext4 and tmpfs
        // among them, give this write a later ctime even within the same clock tick.)
        try Self.flipByte(in: path, at: try Self.fileSize(path) - 1)
        #expect(cache.lookupNow(entry.key) == nil)
        #expect(cache.stats.bodiesVerified == 1 && cache.stats.removedCorrupt == 1)
        #expect(!FileManager.default.fileExists(atPath: path))
        // A new file under the name (tmp + rename: another inode) is hashed again too.
        cache.insert(entry)
        #expect(Self.body(cache.lookupNow(entry.key)) == entry.body)
        #expect(cache.stats.bodiesVerified == 2)
    }

    @Test("a kept descriptor answers hits at once; a change in place, a new file under the name, a purge, or 60 s without a lookup send the next hit through lookup")
    func lookupOpeneds() throws {
        let directory = DiskTestDirectory()
        let clock = DiskTestClock(Date().addingTimeInterval(5))   // versions count as settled at once
        let cache = try Self.makeCache(directory, clock: clock, memoryReadLimit: 100)
        let first = Self.entry("kept", bytes: 300_000, fill: 1)
        cache.insert(first)
        #expect(cache.lookupOpened(first.key) == nil)                 // nothing verified yet
        #expect(Self.body(cache.lookupNow(first.key)) == first.body)   // sent from its file, which is kept open
        let hit = try #require(cache.lookupOpened(first.key))
        #expect(hit.file.readAll() == first.body && hit.head.etag == first.etag)
        // lookup answers such a hit before it returns, on the caller's thread, with the kept descriptor.
        let answered = Locked<DiskLookup??>(nil)
        cache.lookup(first.key, readsWhole: { _ in false }) { found in answered.withLock { $0 = .some(found) } }
        guard case let .stream(_, file)?? = answered.withLock({ $0 }) else { Issue.record("not answered at once"); return }
        #expect(file === hit.file)
        // A new file under the name (an insert: tmp + rename) drops the kept descriptor.
        let second = Self.entry("kept", bytes: 300_000, fill: 2)
        cache.insert(second)
        cache.flush()
        #expect(cache.lookupOpened(first.key) == nil)
        #expect(Self.body(cache.lookupNow(first.key)) == second.body)
        #expect(cache.lookupOpened(first.key)?.file.readAll() == second.body)
        // 60 s after the lookup that last opened the name, the next hit opens it again.
        clock.advance(by: DiskCache.openFileValidSeconds)
        #expect(cache.lookupOpened(first.key) == nil)
        #expect(Self.body(cache.lookupNow(first.key)) == second.body)
        #expect(cache.lookupOpened(first.key) != nil)
        // A byte appended in place changes the file's version: the kept descriptor is not used, lookup catches it.
        let handle = try #require(FileHandle(forUpdatingAtPath: cache.path(of: first.key)))
        try handle.seekToEnd()
        try handle.write(contentsOf: [0x41])
        try handle.close()
        #expect(cache.lookupOpened(first.key) == nil)
        #expect(cache.lookupNow(first.key) == nil)
        // A purge drops it as well.
        cache.insert(first)
        #expect(Self.body(cache.lookupNow(first.key)) == first.body)
        #expect(cache.lookupOpened(first.key) != nil)
        cache.remove(first.key)
        cache.flush()
        #expect(cache.lookupOpened(first.key) == nil)
    }

    @Test("a file version changed less than a second ago is hashed on every lookup (coarse ctime clocks)")
    func recentVersionNotTrusted() throws {
        let directory = DiskTestDirectory()
        let clock = DiskTestClock(Date())
        let cache = try Self.makeCache(directory, clock: clock)
        let entry = Self.entry("recent", bytes: 100)
        cache.insert(entry)
        cache.flush()
        // The clock set half a second after the file's ctime: not settled, so every lookup hashes the body.
        var info = stat()
        #expect(stat(cache.path(of: entry.key), &info) == 0)
        let ctime = Double(info.st_ctim.tv_sec) + Double(info.st_ctim.tv_nsec) / 1e9
        clock.advance(by: ctime + 0.5 - clock.now().timeIntervalSince1970)
        for _ in 1...3 { #expect(Self.body(cache.lookupNow(entry.key)) == entry.body) }
        #expect(cache.stats.bodiesVerified == 3)
        // A second later it has settled: hashed once more, then trusted.
        clock.advance(by: 1)
        for _ in 1...3 { #expect(Self.body(cache.lookupNow(entry.key)) == entry.body) }
        #expect(cache.stats.bodiesVerified == 4)
    }

    @Test("decoded heads kept in the index stay within their byte budget, oldest dropped first, and leave with their records")
    func indexHeads() {
        var index = DiskIndex()
        index.load = .loaded(seconds: 0)
        index.heads.limitCount = .max
        let head = Self.entry("h", bytes: 0)
        let perHead = head.cost
        let fits = DiskIndex.KeptHeads.limitBytes / perHead
        func version(_ inode: UInt64, head: DiskIndex.Head? = DiskIndex.Head(head)) -> DiskIndex.VerifiedVersion {
            DiskIndex.VerifiedVersion(identity: FileIdentity(device: 1, inode: inode, size: 10, changeSeconds: 1, changeNanoseconds: 0),
                                      head: head, bodyOffset: 0, bodyLength: 10, file: nil, checkedAt: 0)
        }
        for n in 0..<(fits + 10) {
            index.insert("n\(n)", size: 10, lastUsed: 1, persistedUse: 1)
            index.markUsed("n\(n)", size: 10, lastUsed: 2, persistedUse: 1, verified: version(UInt64(n)),
                            createdSeen: index.entries.records["n\(n)"]?.created)
        }
        #expect(index.heads.bytes <= DiskIndex.KeptHeads.limitBytes && index.heads.count == fits)
        #expect(index.entries.records["n0"]?.verified?.head == nil && index.entries.records["n0"]?.verified?.identity.inode == 0)  // identity stays
        #expect(index.entries.records["n\(fits + 9)"]?.verified?.head != nil)
        // A hit on the same version keeps its head; a new file under the name (set) or a removal drops it.
        index.markUsed("n\(fits + 9)", size: 10, lastUsed: 3, persistedUse: 1, verified: version(UInt64(fits + 9)),
                            createdSeen: index.entries.records["n\(fits + 9)"]?.created)
        #expect(index.heads.count == fits)
        index.insert("n\(fits + 9)", size: 20, lastUsed: 4, persistedUse: 4)
        index.remove("n\(fits + 8)")
        #expect(index.heads.count == fits - 2 && index.heads.bytes == (fits - 2) * perHead)
        // A head dropped and kept again many times (new versions of one name) leaves no slot that drops another
        // name's head early, and the queue stays bounded.
        index.heads.limitCount = 3   // applied at the next markUsed: the 3 newest heads stay
        index.markUsed("n0", size: 10, lastUsed: 9, persistedUse: 1, verified: version(900_000), createdSeen: index.entries.records["n0"]?.created)
        let keptNames = Set(index.entries.records.keys.filter { index.entries.records[$0]?.verified?.head != nil })
        #expect(index.heads.count == 3 && keptNames.contains("n0"))
        for round in 0..<5000 {
            index.markUsed("n0", size: 10, lastUsed: 10, persistedUse: 1, verified: version(UInt64(1_000_000 + round)),
                           createdSeen: index.entries.records["n0"]?.created)
        }
        #expect(Set(index.entries.records.keys.filter { index.entries.records[$0]?.verified?.head != nil }) == keptNames)
        #expect(index.heads.queue.count - index.heads.start <= 2 * index.heads.count + 1025)
        // A lookup that saw the record before a new file replaced it does not attach its version to the new record.
        let seen = index.entries.records["n0"]?.created
        index.insert("n0", size: 10, lastUsed: 11, persistedUse: 11)
        index.markUsed("n0", size: 10, lastUsed: 12, persistedUse: 1, verified: version(2_000_000), createdSeen: seen)
        #expect(index.entries.records["n0"]?.verified == nil)
        index.removeAllRecords()
        #expect(index.heads.count == 0 && index.heads.bytes == 0)
        // The count limit (open descriptors go with heads) holds as well.
        index.heads.limitCount = 5
        for n in 0..<8 {
            index.insert("c\(n)", size: 10, lastUsed: 1, persistedUse: 1)
            index.markUsed("c\(n)", size: 10, lastUsed: 2, persistedUse: 1, verified: version(UInt64(n)),
                            createdSeen: index.entries.records["c\(n)"]?.created)
        }
        #expect(index.heads.count == 5 && index.entries.records["c2"]?.verified?.head == nil && index.entries.records["c3"]?.verified?.head != nil)
    }

    @Test("a flipped byte in a streamed body is caught before the stream is handed out")
    func flippedStreamByte() throws {
        let directory = DiskTestDirectory()
        let cache = try Self.makeCache(directory, memoryReadLimit: 100)
        let entry = Self.entry("flipbig", bytes: 600_000)
        cache.insert(entry)
        cache.flush()
        let path = cache.path(of: entry.key)
        try Self.flipByte(in: path, at: 500_000)
        #expect(cache.lookupNow(entry.key) == nil)
        #expect(!FileManager.default.fileExists(atPath: path))
    }

    @Test("a flipped byte anywhere in the header is a miss", arguments: [0, 5, 9, 14, 40, 80, -40, -1])
    func flippedHeaderByte(offset: Int) throws {
        let directory = DiskTestDirectory()
        let cache = try Self.makeCache(directory)
        let entry = Self.entry("head", bytes: 10)
        cache.insert(entry)
        cache.flush()
        let path = cache.path(of: entry.key)
        let size = try Self.fileSize(path)
        let headerEnd = size - 10
        try Self.flipByte(in: path, at: offset >= 0 ? offset : headerEnd + offset)
        #expect(cache.lookupNow(entry.key) == nil)
        #expect(!FileManager.default.fileExists(atPath: path))
    }

    @Test("a truncated file is a miss and is removed", arguments: [1, 10, 200])
    func truncated(cut: Int) throws {
        // Given
        let directory = DiskTestDirectory()
        let log = DiskTestLog()
        let cache = try Self.makeCache(directory, log: log)
        let entry = Self.entry("cut", bytes: 150)
        cache.insert(entry)
        cache.flush()
        let path = cache.path(of: entry.key)
        // When the last bytes are cut off
        let data = try Data(contentsOf: URL(fileURLWithPath: path))
        try data.prefix(data.count - cut).write(to: URL(fileURLWithPath: path))
        // Then
        #expect(cache.lookupNow(entry.key) == nil)
        #expect(!FileManager.default.fileExists(atPath: path))
        #expect(log.warnings.contains { $0.contains(path) })
    }

    @Test("random bytes at an entry's path are a miss and are removed", arguments: [0, 3, 11, 5000])
    func foreignFile(length: Int) throws {
        // Given an indexed entry whose file is replaced by random bytes
        let directory = DiskTestDirectory()
        let cache = try Self.makeCache(directory)
        let key = Self.key("foreign")
        cache.insert(Self.entry("foreign"))
        cache.flush()
        let path = cache.path(of: key)
        try Data(Self.randomBytes(length)).write(to: URL(fileURLWithPath: path))
        // Then
        #expect(cache.lookupNow(key) == nil)
        #expect(!FileManager.default.fileExists(atPath: path))
        #expect(cache.stats.removedCorrupt == 1)
        #expect(cache.stats.entries == 0)
    }

    @Test("before the index has loaded, a lookup checks the file itself and removes a foreign one")
    func foreignFileBeforeLoad() throws {
        // Given random bytes at a key's path, and a cache that has not loaded its index
        let directory = DiskTestDirectory()
        let key = Self.key("foreign")
        let cache = try Self.makeCache(directory, loader: false)
        let path = cache.path(of: key)
        try FileManager.default.createDirectory(atPath: (path as NSString).deletingLastPathComponent,
                                                withIntermediateDirectories: true)
        try Data(Self.randomBytes(300)).write(to: URL(fileURLWithPath: path))
        // Then
        #expect(cache.lookupNow(key) == nil)
        #expect(!FileManager.default.fileExists(atPath: path))
        #expect(cache.stats.removedCorrupt == 1)
    }

    @Test("a valid entry for another key at a key's path is a miss, at lookup and at load")
    func keyMismatch() throws {
        // Given b's file copied over a's
        let directory = DiskTestDirectory()
        let log = DiskTestLog()
        let cache = try Self.makeCache(directory, log: log)
        cache.insert(Self.entry("a"))
        cache.insert(Self.entry("b"))
        cache.flush()
        let pathA = cache.path(of: Self.key("a"))
        try Data(contentsOf: URL(fileURLWithPath: cache.path(of: Self.key("b")))).write(to: URL(fileURLWithPath: pathA))
        // Then a lookup of a misses and removes it
        #expect(cache.lookupNow(Self.key("a")) == nil)
        #expect(log.warnings.contains { $0.contains(pathA) && $0.contains("another key") })
        #expect(!FileManager.default.fileExists(atPath: pathA))
        #expect(cache.lookupNow(Self.key("b")) != nil)

        // And the loader of a new cache removes such a file too (a's directory went with its file: made again)
        try FileManager.default.createDirectory(atPath: (pathA as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        try FileManager.default.copyItem(atPath: cache.path(of: Self.key("b")), toPath: pathA)
        let restarted = try Self.makeCache(directory)
        restarted.waitForIndex()
        #expect(restarted.stats.entries == 1)
        #expect(restarted.stats.removedCorrupt == 1)
        #expect(!FileManager.default.fileExists(atPath: pathA))
    }

    @Test("the loader removes leftover tmp files and corrupt entries, and leaves other files alone")
    func loaderCleansUp() throws {
        // Given a tree with a leftover tmp file, a truncated entry and an unrelated file
        let directory = DiskTestDirectory()
        do {
            let first = try Self.makeCache(directory)
            first.insert(Self.entry("keep"))
            first.insert(Self.entry("cut"))
            first.flush()
            let cut = first.path(of: Self.key("cut"))
            let data = try Data(contentsOf: URL(fileURLWithPath: cut))
            try data.prefix(data.count - 1).write(to: URL(fileURLWithPath: cut))
            try Data([1, 2, 3]).write(to: URL(fileURLWithPath: first.path(of: Self.key("keep")) + ".x1y2.tmp"))
        }
        try Data("mine".utf8).write(to: URL(fileURLWithPath: directory.path + "/README"))
        #expect(directory.files.count == 4)
        // When a cache starts on it
        let cache = try Self.makeCache(directory)
        cache.waitForIndex()
        // Then
        #expect(!directory.files.contains { $0.hasSuffix(".tmp") })
        #expect(directory.files.count == 2)
        #expect(directory.files.contains("README"))
        #expect(cache.stats.entries == 1)
        #expect(cache.stats.removedCorrupt == 1)
    }

    // MARK: - Update after 304

    @Test("update after a 304 stores the new head and times and keeps the body")
    func updateKeepsBody() throws {
        // Given a stored entry
        let directory = DiskTestDirectory()
        let clock = DiskTestClock()
        let cache = try Self.makeCache(directory, clock: clock)
        let body = Self.randomBytes(3000)
        let stored = Fixture.entry([("Content-Type", "image/png"), ("ETag", "\"v1\""), ("Cache-Control", "max-age=60")],
                                   key: Self.key("u"), body: body)
        cache.insert(stored)
        // When a 304 refreshes it, handed over without its body (as for a streamed entry)
        let t1 = Fixture.t0.addingTimeInterval(3600)
        let refreshed = stored.refreshed(with: HTTPResponseHead(status: 304, headers: ["Cache-Control": "max-age=900", "ETag": "\"v1\""]),
                                         requestTime: t1, responseTime: t1.addingTimeInterval(0.5), policy: FreshnessPolicy())
        let headOnly = CacheEntry(key: refreshed.key, head: refreshed.head, body: [], requestTime: refreshed.requestTime,
                                  responseTime: refreshed.responseTime, vary: refreshed.vary, policy: FreshnessPolicy())
        cache.update(headOnly)
        // Then
        let found = try #require(cache.lookupNow(stored.key)?.entry)
        expectSameBytes(found.body, body)
        #expect(found.head == refreshed.head)
        #expect(found.head.headers["Cache-Control"] == "max-age=900")
        #expect(found.requestTime == t1)
        #expect(found.responseTime == t1.addingTimeInterval(0.5))
        #expect(found.freshnessLifetime == 900)
        #expect(directory.files.count == 1)
        #expect(cache.stats.entries == 1)

        // And an update for a key with nothing stored writes nothing
        cache.update(Self.entry("absent"))
        cache.flush()
        #expect(directory.files.count == 1)
    }

    // MARK: - Limits

    @Test("writing well past the limit keeps the bytes within the limit plus one entry, and used entries survive")
    func lruEviction() throws {
        // Given room for about ten entries and a constant clock (recency decided by use order)
        let directory = DiskTestDirectory()
        let unit = try Self.fileSize(ofEntryWith: 1000)
        let limit = 10 * unit + unit / 2
        let cache = try Self.makeCache(directory, limit: limit)
        cache.insert(Self.entry("hot0", bytes: 1000))
        cache.insert(Self.entry("hot1", bytes: 1000))
        // When 100 more entries are written, the hot ones looked up after every write
        var maxBytes = 0
        for n in 0..<100 {
            cache.insert(Self.entry("cold\(n)", bytes: 1000))
            #expect(cache.lookupNow(Self.key("hot0")) != nil)
            #expect(cache.lookupNow(Self.key("hot1")) != nil)
            maxBytes = max(maxBytes, cache.stats.bytes)
        }
        // Then
        #expect(maxBytes <= limit + unit)
        #expect(cache.stats.bytes <= limit)
        #expect(cache.stats.evicted >= 90)
        #expect(cache.lookupNow(Self.key("cold0")) == nil)
        #expect(cache.lookupNow(Self.key("cold99")) != nil)
        let onDisk = directory.files.count
        #expect(onDisk == cache.stats.entries)
        #expect(onDisk <= 11)
    }

    @Test("an entry larger than the whole limit is not written")
    func entryOverLimit() throws {
        let directory = DiskTestDirectory()
        let cache = try Self.makeCache(directory, limit: 4096)
        cache.insert(Self.entry("huge", bytes: 5000))
        #expect(cache.lookupNow(Self.key("huge")) == nil)
        #expect(directory.files.isEmpty)
        #expect(cache.stats.writeErrors == 0)
    }

    @Test("a sweep removes entries not used for max age, fresh or not, by the injected clock")
    func maxAge() throws {
        // Given a written at t0 and b at t0+60, max age 100 s
        let directory = DiskTestDirectory()
        let clock = DiskTestClock()
        let cache = try Self.makeCache(directory, clock: clock, maxAge: 100)
        cache.insert(Self.entry("a"))
        cache.flush()
        clock.advance(by: 60)
        cache.insert(Self.entry("b"))
        // When the clock passes a's max age
        clock.advance(by: 50)
        cache.sweep()
        cache.flush()
        // Then only a is gone
        #expect(cache.stats.expired == 1)
        #expect(cache.lookupNow(Self.key("a")) == nil)
        #expect(cache.lookupNow(Self.key("b")) != nil)  // a use at t0+110

        // And a use pushes the expiry back
        clock.advance(by: 90)  // t0+200: b last used 90 s ago
        cache.sweep()
        cache.flush()
        #expect(cache.stats.entries == 1)
        clock.advance(by: 20)  // 110 s since b's last use
        cache.sweep()
        cache.flush()
        #expect(cache.stats.entries == 0)
        #expect(directory.files.isEmpty)
    }

    @Test("the last use survives a restart through the file's mtime")
    func recencyAcrossRestart() throws {
        let directory = DiskTestDirectory()
        let clock = DiskTestClock()
        do {
            let first = try Self.makeCache(directory, clock: clock, maxAge: 1000)
            first.insert(Self.entry("old"))
            first.insert(Self.entry("used"))
            first.flush()
            clock.advance(by: 800)
            _ = first.lookupNow(Self.key("used"))  // over the touch interval: mtime pushed to t0+800
        }
        clock.advance(by: 300)  // t0+1100
        let cache = try Self.makeCache(directory, clock: clock, maxAge: 1000)
        cache.waitForIndex()
        cache.sweep()
        cache.flush()
        #expect(cache.lookupNow(Self.key("old")) == nil)
        #expect(cache.lookupNow(Self.key("used")) != nil)
    }

    @Test("removeAll empties the cache and the directory tree")
    func removeAll() throws {
        let directory = DiskTestDirectory()
        let cache = try Self.makeCache(directory)
        for n in 0..<10 { cache.insert(Self.entry("e\(n)")) }
        cache.remove(Self.key("e0"))
        cache.flush()
        #expect(cache.stats.entries == 9)
        let done = Locked(false)
        cache.removeAll { _ in done.withLock { $0 = true } }
        cache.flush()
        #expect(done.withLock { $0 })
        #expect(cache.stats.entries == 0)
        #expect(cache.stats.bytes == 0)
        #expect(directory.files.isEmpty)
        #expect(directory.directories.isEmpty)
        #expect(cache.lookupNow(Self.key("e3")) == nil)
    }

    @Test("shard directories go with their last file: removal, eviction, expiry and the loader leave no empty ones")
    func emptyDirectoriesGo() throws {
        // Given entries whose files are spread over shard directories
        let directory = DiskTestDirectory()
        let clock = DiskTestClock()
        let unit = try Self.fileSize(ofEntryWith: 1000)
        let cache = try Self.makeCache(directory, clock: clock, limit: 10 * unit + unit / 2, maxAge: 100)
        func shardsInUse() -> [String] {
            Set(directory.files.flatMap { file -> [String] in
                let parts = file.split(separator: "/")
                return [String(parts[0]), parts[0] + "/" + parts[1]]
            }).sorted()
        }
        // When a removal, evictions (60 entries through room for 10) and an expiry take files away
        for n in 0..<60 { cache.insert(Self.entry("e\(n)", bytes: 1000)) }
        cache.remove(Self.key("e59"))
        cache.flush()
        #expect(cache.stats.evicted >= 45)
        #expect(!directory.files.isEmpty)
        // Then every directory left holds a file
        #expect(directory.directories == shardsInUse())
        clock.advance(by: 200)
        cache.sweep()
        cache.flush()
        #expect(cache.stats.entries == 0)
        #expect(directory.directories.isEmpty)

        // And empty shard directories left by an older daemon go when the next one loads its index
        try FileManager.default.createDirectory(atPath: directory.path + "/ab/cd", withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: directory.path + "/ef", withIntermediateDirectories: true)
        let next = try Self.makeCache(directory, clock: clock, maxAge: 100)
        next.waitForIndex()
        next.flush()
        #expect(directory.directories.isEmpty)
    }

    // MARK: - Write errors

    /// Whether this process may mount a tmpfs (root with CAP_SYS_ADMIN, not in a restricted container).
    static let canMountTmpfs: Bool = {
        let directory = DiskTestDirectory()
        defer { _ = run("/bin/umount", [directory.path]) }
        return run("/bin/mount", ["-t", "tmpfs", "-o", "size=64k", "tmpfs", directory.path])
    }()

    static func run(_ tool: String, _ arguments: [String]) -> Bool {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: tool)
        process.arguments = arguments
        process.standardError = FileHandle.nullDevice
        process.standardOutput = FileHandle.nullDevice
        guard (try? process.run()) != nil else { return false }
        process.waitUntilExit()
        return process.terminationStatus == 0
    }

    @Test("a write that fills the disk is dropped and counted, leaves no tmp file, and lookups still work",
          .enabled(if: DiskCacheTests.canMountTmpfs, "needs `mount -t tmpfs` (root with CAP_SYS_ADMIN); not permitted here"))
    func diskFull() throws {
        // Given a cache on a 1 MiB tmpfs holding one small entry
        let directory = DiskTestDirectory()
        #expect(Self.run("/bin/mount", ["-t", "tmpfs", "-o", "size=1m", "tmpfs", directory.path]))
        defer { _ = Self.run("/bin/umount", [directory.path]) }
        let log = DiskTestLog()
        let cache = try Self.makeCache(directory, log: log)
        cache.insert(Self.entry("small", bytes: 1000))
        // When a 2 MiB entry is written
        cache.insert(Self.entry("big", bytes: 2 << 20))
        cache.flush()
        // Then
        #expect(cache.stats.writeErrors == 1)
        #expect(log.messages.contains { $0.hasPrefix("error ") && $0.contains("dropped") })
        #expect(!directory.files.contains { $0.hasSuffix(".tmp") })
        #expect(directory.files.count == 1)
        #expect(cache.lookupNow(Self.key("big")) == nil)
        #expect(cache.lookupNow(Self.key("small"))?.entry?.body.count == 1000)
        // And a later write that fits succeeds
        cache.insert(Self.entry("after", bytes: 1000))
        #expect(cache.lookupNow(Self.key("after")) != nil)
        #expect(cache.stats.entries == 2)
    }

    @Test("a directory that cannot be created is reported at init")
    func badDirectory() throws {
        let directory = DiskTestDirectory()
        try Data().write(to: URL(fileURLWithPath: directory.path + "/file"))
        #expect(throws: DiskCacheError.self) {
            try DiskCache(configuration: .init(directory: directory.path + "/file/sub"), logger: DiskTestLog().logger)
        }
        #expect(throws: DiskCacheError.self) {
            try DiskCache(configuration: .init(directory: directory.path, limitBytes: 0), logger: DiskTestLog().logger)
        }
    }
}

/// Measurements, not assertions: run with `DISK_BENCH=100000 swift test --filter DiskBenchmark` (add `-c release`
/// for release numbers). Prints the insert rate, the startup index load time for N entries and the lookup rate.
@Suite("DiskBenchmark", .serialized, .enabled(if: ProcessInfo.processInfo.environment["DISK_BENCH"] != nil, "set DISK_BENCH=N to run"), .timeLimit(.minutes(10)))
struct DiskBenchmark {
    static var count: Int { Int(ProcessInfo.processInfo.environment["DISK_BENCH"] ?? "") ?? 100_000 }

    static func seconds(_ body: () -> Void) -> Double {
        let start = ContinuousClock.now
        body()
        let elapsed = ContinuousClock.now - start
        return Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
    }

    @Test("index load, insert and lookup rates for N entries")
    func indexLoad() throws {
        let n = Self.count
        let directory = ProcessInfo.processInfo.environment["DISK_BENCH_DIR"].map(DiskTestDirectory.init(keeping:)) ?? DiskTestDirectory()
        let headers: [(String, String)] = [
            ("Content-Type", "image/jpeg"), ("Cache-Control", "public, max-age=86400"), ("ETag", "\"0123456789abcdef\""),
            ("Last-Modified", Fixture.date(-86_400)), ("Date", Fixture.date(0)), ("Content-Length", "2048"),
        ]
        let body = DiskCacheTests.randomBytes(2048)
        let writer = try DiskCacheTests.makeCache(directory)
        writer.waitForIndex()
        let insertSeconds = Self.seconds {
            for i in writer.stats.entries..<n {
                writer.insert(Fixture.entry(headers, key: Fixture.key("http://img.example.com/photos/\(i).jpg"), body: body))
            }
            writer.flush()
        }
        let bytes = writer.stats.bytes
        print("disk bench: inserted \(n) entries (\(bytes) bytes) in \(insertSeconds) s: \(Double(n) / insertSeconds) entries/s")

        let reader = try DiskCacheTests.makeCache(directory)
        reader.waitForIndex()
        let stats = reader.stats
        print("disk bench: index of \(stats.entries) entries loaded in \(stats.indexLoadSeconds ?? -1) s")
        #expect(stats.entries == n)
        #expect(stats.bytes == bytes)

        let lookups = min(n, 20_000)
        let lookupSeconds = Self.seconds {
            for i in 0..<lookups { reader.lookup(Fixture.key("http://img.example.com/photos/\(i * 7919 % n).jpg")) { _ in } }
            reader.flush()
        }
        print("disk bench: \(lookups) verified lookups of 2 KiB bodies in \(lookupSeconds) s: \(Double(lookups) / lookupSeconds) /s")
    }

    @Test("throughput of the body checksum (XXH3)")
    func checksumRate() {
        let buffer = [UInt8]((0..<(4 << 20)).lazy.map { UInt8(truncatingIfNeeded: $0 &* 2_654_435_761 >> 13) })
        var digest: UInt64 = 0
        let seconds = Self.seconds { for _ in 0..<64 { digest ^= DiskEntryFormat.checksum(buffer) } }
        print("disk bench: XXH3 of 256 MiB in \(seconds) s: \(256.0 / seconds) MiB/s (\(String(digest, radix: 16)))")
    }
}

@Suite("DiskEntryFormat", .timeLimit(.minutes(1)))
struct DiskEntryFormatTests {
    static func encoded(bodyLength: Int = 5) -> [UInt8] {
        let entry = Fixture.entry([("Vary", "Accept"), ("ETag", "\"x\"")], requestHeaders: ["Accept": "image/*"])
        return DiskEntryFormat.encodeHeader(key: entry.key.description, variant: entry.variantID, head: entry.head,
                                            requestTime: entry.requestTime, responseTime: entry.responseTime, bodyLength: bodyLength,
                                            bodyChecksum: DiskEntryFormat.checksum([UInt8](repeating: 1, count: bodyLength)))
    }

    @Test("a header decodes to what was encoded, and the loader's cheap read agrees")
    func roundTrip() throws {
        let bytes = Self.encoded()
        let header = try DiskEntryFormat.decodeHeader(bytes[...])
        #expect(header.key == Fixture.key().description)
        #expect(header.bodyOffset == bytes.count)
        #expect(header.bodyLength == 5)
        #expect(header.vary?.fields == [VaryKey.Field(name: "accept", value: "image/*")])
        let fields = try DiskEntryFormat.decodeIndexFields(bytes[...])
        #expect(fields.key == header.key && fields.bodyOffset == header.bodyOffset && fields.bodyLength == 5)
        #expect(fields.variant == "accept:image/*" && header.variant == fields.variant)
        #expect(Array(bytes[0..<4]) == Array("ICD1".utf8))
    }

    @Test("every flipped header byte is refused")
    func everyByte() {
        let bytes = Self.encoded()
        for offset in bytes.indices {
            var damaged = bytes
            damaged[offset] ^= 0x80
            #expect(throws: DiskEntryFormat.Failure.self) { try DiskEntryFormat.decodeHeader(damaged[...]) }
        }
    }

    @Test("another format version (SHA-256 version 1, one-variant version 2, XXH64 version 3, or a newer one) is refused with its number", arguments: [1, 2, 3, 5])
    func otherVersion(version: UInt8) {
        var bytes = Self.encoded()
        bytes[4] = version
        #expect { try DiskEntryFormat.decodePrefix(bytes[...]) } throws: { error in
            "\(error)".contains("unsupported format version \(version)")
        }
    }

    @Test("file names are the hex SHA-256 of the key")
    func fileName() {
        // SHA-256("abc")
        #expect(DiskEntryFormat.fileName(forKey: "abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        #expect(DiskEntryFormat.isEntryName(DiskEntryFormat.fileName(forKey: "x")))
        #expect(!DiskEntryFormat.isEntryName("ba7816bf.tmp"))
    }

    @Test("a key's file name, hashed from the URL's parts, is the hash of its URL string (ports, IPv6, queries)",
          arguments: ["http://a.test/x.jpg", "https://A.test:8443/p/q.png?w=1&h=2", "http://[::1]:8080/i.gif",
                      "http://[2001:db8::7]/", "https://cdn.test:443/%7Euser/a%20b.webp?"])
    func fileNameFromParts(_ text: String) throws {
        // Given
        let key = CacheKey(try UpstreamURL.parse(text))
        // Then: the name files were stored under (and the loader checks) stays the hash of the URL string
        #expect(DiskEntryFormat.fileName(for: key) == DiskEntryFormat.fileName(forKey: key.description))
        #expect(DiskEntryFormat.isEntryName(DiskEntryFormat.fileName(for: key)))
    }
}
