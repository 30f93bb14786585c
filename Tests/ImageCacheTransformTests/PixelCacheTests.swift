import Foundation
import Synchronization
import Testing
import ImageCacheStatus
import ImageCacheTestSupport
@testable import ImageCacheTransform
import ImageCacheSystem

@Suite("PixelCache: decoded levels of JPEG and PNG sources, least recently used out, within its bytes", .timeLimit(.minutes(1)))
struct PixelCacheTests {
    static let fixture = RepositoryPath.fixtures.appendingPathComponent("bordered.png")

    /// A shareable level of the 300x300 RGB fixture, box-shrunk by 2^level.
    static func level(_ level: Int) throws -> VipsImage {
        try VipsRuntime.start(threadsPerImage: 1, allowSVG: false)
        let bytes = try [UInt8](Data(contentsOf: fixture))
        return try bytes.withUnsafeBytes { raw in
            let deadline = Deadline(seconds: 10)
            return try VipsImage.load(raw, deadline: deadline).shrink(by: 1 << level, deadline: deadline).shareable()
        }
    }

    @Test("the level: the largest reduction that leaves twice the pixels the result needs in each direction, none under 1024 px on the longer side (but 1)", arguments: [
        (300, 300, 0.5, 0.5, 0), (300, 300, 0.26, 0.26, 0), (300, 300, 0.25, 0.25, 1), (300, 300, 0.2133, 0.2133, 1),
        (300, 300, 0.1067, 0.1067, 1), (4000, 3000, 0.08, 0.08, 1), (4000, 3000, 0.2, 0.2, 1), (4000, 3000, 0.001, 0.001, 1),
        (8192, 6000, 0.02, 0.02, 3), (8192, 6000, 0.1, 0.1, 2), (4095, 100, 0.01, 0.01, 1), (4096, 100, 0.01, 0.01, 2),
        (300, 300, 0.1, 0.24, 1), (300, 300, 0.24, 0.1, 1), (1, 300, 0.01, 0.01, 0), (40, 40, 0.01, 0.01, 1),
    ] as [(Int, Int, Double, Double, Int)])
    func level(width: Int, height: Int, scaleX: Double, scaleY: Double, expected: Int) {
        #expect(PixelCache.level(sourceWidth: width, sourceHeight: height, scaleX: scaleX, scaleY: scaleY) == expected)
    }

    @Test("a JPEG's levels stop at 8 (libjpeg's smallest scale), a box average's at 16")
    func maximumLevels() {
        #expect(PixelCache.level(sourceWidth: 40_000, sourceHeight: 30_000, scaleX: 0.001, scaleY: 0.001, kind: .shrinkOnLoad) == 3)
        #expect(PixelCache.level(sourceWidth: 40_000, sourceHeight: 30_000, scaleX: 0.001, scaleY: 0.001, kind: .boxAverage) == 4)
    }

    @Test("entries are kept within the byte limit, the least recently used evicted first; one larger than the limit is not kept")
    func eviction() throws {
        // Given levels of 150x150 (67,500 bytes of pixels) and 75x75 (16,875), each counted with its metadata and
        // the entry's overhead, and a cache that holds two small ones and a big one, not three
        let big = try Self.level(1), small = try Self.level(2)
        #expect(big.pixelBytes == 67_500 && small.pixelBytes == 16_875)
        let s = small.retainedBytes + PixelCache.entryOverheadBytes, b = big.retainedBytes + PixelCache.entryOverheadBytes
        #expect(s >= 16_875 + 16_384 && b >= 67_500 + 16_384)
        let cache = PixelCache(limitBytes: s + b + s / 2)
        let a = PixelCache.Key(digest: "a", level: 2), bKey = PixelCache.Key(digest: "b", level: 2), c = PixelCache.Key(digest: "c", level: 1)
        // When two small ones go in, the first is used again, then a big one needs room
        cache.insert(a, small)
        cache.insert(bKey, small)
        #expect(cache.lookup(a) != nil)
        cache.insert(c, big)
        // Then the least recently used (b) went; the total stays within the limit
        #expect(cache.lookup(bKey) == nil)
        #expect(cache.lookup(a) != nil && cache.lookup(c) != nil)
        #expect(cache.stats == .init(bytes: s + b, limitBytes: s + b + s / 2, entries: 2, hits: 3, misses: 1, evictions: 1))
        // ... exactly at the limit an entry is kept; one byte over, not at all
        let exact = PixelCache(limitBytes: b), under = PixelCache(limitBytes: b - 1)
        exact.insert(c, big)
        under.insert(c, big)
        #expect(exact.stats.entries == 1 && under.stats.entries == 0 && under.stats.bytes == 0)
        // ... and a cache of 0 bytes keeps nothing
        let off = PixelCache(limitBytes: 0)
        off.insert(a, small)
        #expect(off.lookup(a) == nil)
    }

    enum Maker: CaseIterable { case succeeds, fails, passesItsDeadline }

    @Test("a job that wants a level another is making waits for it and shares its level, or its failure; when the maker's own deadline passed, the waiter makes it", arguments: Maker.allCases)
    func waitersShareOneMake(maker: Maker) throws {
        // Given a cache that tells when a job starts waiting, and a level to be made
        let waiting = DispatchSemaphore(value: 0)
        let cache = PixelCache(limitBytes: 1 << 20, waiting: { waiting.signal() })
        let key = PixelCache.Key(digest: "new", level: 1)
        let made = try Self.level(1), other = try Self.level(1)
        struct Unreadable: Error {}
        let second = Locked<Result<VipsImage, any Error>?>(nil)
        let secondDone = DispatchSemaphore(value: 0)
        // When a job starts making it, and a second job asks for it while the first is still at it
        let makerDeadline = Deadline(seconds: maker == .passesItsDeadline ? 0.000_001 : 10)
        let first = Result { try cache.level(key, deadline: makerDeadline) { () throws -> VipsImage in
            Thread.detachNewThread {
                let result = Result { try cache.level(key, deadline: Deadline(seconds: 10)) { other } }
                second.withLock { $0 = result }
                secondDone.signal()
            }
            #expect(waiting.wait(timeout: .now() + 10) == .success, "the second job never waited")
            if maker == .succeeds { return made }
            throw Unreadable()
        } }
        #expect(secondDone.wait(timeout: .now() + 10) == .success)
        let got = try #require(second.withLock { $0 })
        switch maker {
        case .succeeds:
            // Then the second gets the first's level, counted as a hit; one make in all
            #expect(try first.get() === made && got.get() === made)
            #expect(cache.stats.misses == 1 && cache.stats.hits == 1 && cache.stats.entries == 1)
        case .fails:
            // ... or the first's failure (the same bytes would fail it the same way), without making it again
            #expect(throws: Unreadable.self) { try got.get() }
            #expect(cache.stats.misses == 1 && cache.stats.hits == 0 && cache.stats.entries == 0)
        case .passesItsDeadline:
            // ... or, the first having failed past its own time limit, makes its own (a second miss) and keeps it
            #expect(throws: Unreadable.self) { try first.get() }
            #expect(try got.get() === other)
            #expect(cache.stats.misses == 2 && cache.stats.hits == 0 && cache.stats.entries == 1)
        }
    }

    @Test("a job waits for another's level no longer than its own time limit")
    func waiterKeepsItsDeadline() throws {
        // Given a job making a level that will not be done before a second job's 50 ms time limit
        let waiting = DispatchSemaphore(value: 0)
        let cache = PixelCache(limitBytes: 1 << 20, waiting: { waiting.signal() })
        let key = PixelCache.Key(digest: "slow", level: 1)
        let made = try Self.level(1)
        let second = Locked<Result<VipsImage, any Error>?>(nil)
        let secondDone = DispatchSemaphore(value: 0)
        // When the second asks for it meanwhile
        let first = try cache.level(key, deadline: Deadline(seconds: 10)) { () throws -> VipsImage in
            Thread.detachNewThread {
                let short = Deadline(seconds: 0.05)
                let result = Result { try cache.level(key, deadline: short) { made } }
                second.withLock { $0 = result }
                secondDone.signal()
            }
            #expect(waiting.wait(timeout: .now() + 10) == .success)
            // (the maker goes on until the waiter has given up)
            #expect(secondDone.wait(timeout: .now() + 10) == .success)
            return made
        }
        // Then the second gave up at its time limit, and the first's level is kept
        let result = try #require(second.withLock { $0 })
        #expect(throws: VipsError.self) { try result.get() }
        #expect(first === made && cache.stats.entries == 1)
    }

    @Test("a job whose deadline has passed is killed alone: the shared level it read from serves the next job")
    func deadlineIsTheJobs() throws {
        // Given a shared level large enough that its evaluation reports progress (3000x3000), and a deadline that
        // passed while it was made
        let expired = Deadline(seconds: 0.000_001)
        let level = try Self.level(0).embed(x: 0, y: 0, width: 3000, height: 3000, background: [255, 255, 255]).shareable()
        #expect(expired.passed)
        // When a job under that deadline resizes it, then a job under a live one
        let killed = try? level.thumbnail(width: 1500, height: 1500, crop: 0, autoRotate: true, deadline: expired)
            .save(.jpeg, quality: 80, strip: true, effort: 0)
        let served = try level.thumbnail(width: 1500, height: 1500, crop: 0, autoRotate: true, deadline: Deadline(seconds: 10))
            .save(.jpeg, quality: 80, strip: true, effort: 0)
        // ... and a shrink of it (a PNG's deeper level made from its whole decode) under each
        let shrunkKilled = try? level.shrink(by: 2, deadline: expired).save(.jpeg, quality: 80, strip: true, effort: 0)
        let shrunk = try level.shrink(by: 2, deadline: Deadline(seconds: 10)).save(.jpeg, quality: 80, strip: true, effort: 0)
        // Then the first of each is killed and the second, from the same level, is whole
        #expect(killed == nil && shrunkKilled == nil)
        #expect(!shrunk.isEmpty)
        let decoded = try served.withUnsafeBytes { raw in try VipsImage.load(raw, deadline: Deadline(seconds: 10)) }
        #expect(decoded.width == 1500 && decoded.height == 1500)
    }

    @Test("a level counts the metadata it carries: a JPEG of a few pixels with a 240 KB ICC profile is counted at 240 KB, not at its pixels")
    func metadataCounts() throws {
        // Given the photo with four APP2 ICC_PROFILE segments of 60,000 bytes after its SOI marker
        try VipsRuntime.start(threadsPerImage: 1, allowSVG: false)
        let photo = try [UInt8](Data(contentsOf: Self.fixture.deletingLastPathComponent().appendingPathComponent("photo.jpg")))
        var segments: [UInt8] = []
        for sequence in 1...4 {
            let payload = Array("ICC_PROFILE".utf8) + [0, UInt8(sequence), 4] + [UInt8](repeating: 0x41, count: 60_000)
            let length = payload.count + 2
            segments += [0xFF, 0xE2, UInt8(length >> 8), UInt8(length & 0xFF)] + payload
        }
        let bytes = Array(photo.prefix(2)) + segments + photo.dropFirst(2)
        // When its smallest level is made and kept
        let level = try bytes.withUnsafeBytes { raw in try VipsImage.loadJPEG(raw, shrink: 8, deadline: Deadline(seconds: 10)).shareable() }
        let cache = PixelCache(limitBytes: 1 << 20)
        cache.insert(PixelCache.Key(digest: "icc", level: 3), level)
        // Then the profile is counted with the pixels
        #expect(level.pixelBytes == 80 * 53 * 3)
        #expect(level.retainedBytes >= 240_000 + 80 * 53 * 3)
        #expect(cache.stats.bytes == level.retainedBytes + PixelCache.entryOverheadBytes)
    }
}
