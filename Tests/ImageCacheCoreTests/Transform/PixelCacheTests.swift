import Foundation
import Testing
@testable import ImageCacheTransform

@Suite("PixelCache: decoded levels of PNG sources, least recently used out, within its bytes", .timeLimit(.minutes(1)))
struct PixelCacheTests {
    static let fixture = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("IntegrationTests/Fixtures/bordered.png")

    /// A shareable level of the 300x300 RGB fixture, box-shrunk by 2^level.
    static func level(_ level: Int) throws -> VipsImage {
        try VipsRuntime.start(threadsPerImage: 1, allowSVG: false)
        let bytes = try [UInt8](Data(contentsOf: fixture))
        return try bytes.withUnsafeBytes { raw in
            try VipsImage.load(raw, deadline: Deadline(seconds: 10)).shrink(by: 1 << level).shareable()
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
        // Given levels of 150x150 (67,500 bytes) and 75x75 (16,875 bytes), and a cache that holds 100,000 bytes
        let big = try Self.level(1), small = try Self.level(2)
        #expect(big.pixelBytes == 67_500 && small.pixelBytes == 16_875)
        let cache = PixelCache(limitBytes: 100_000)
        let a = PixelCache.Key(digest: "a", level: 2), b = PixelCache.Key(digest: "b", level: 2), c = PixelCache.Key(digest: "c", level: 1)
        // When two small ones go in, the first is used again, then a big one needs room
        cache.insert(a, small)
        cache.insert(b, small)
        #expect(cache.lookup(a) != nil)
        cache.insert(c, big)
        // Then the least recently used (b) went; the total stays within the limit
        #expect(cache.lookup(b) == nil)
        #expect(cache.lookup(a) != nil && cache.lookup(c) != nil)
        #expect(cache.stats == .init(bytes: 84_375, entries: 2, hits: 3, misses: 1, evictions: 1))
        // ... exactly at the limit an entry is kept; one byte over, not at all
        let exact = PixelCache(limitBytes: 67_500), under = PixelCache(limitBytes: 67_499)
        exact.insert(c, big)
        under.insert(c, big)
        #expect(exact.stats.entries == 1 && under.stats.entries == 0 && under.stats.bytes == 0)
        // ... and a cache of 0 bytes keeps nothing
        let off = PixelCache(limitBytes: 0)
        off.insert(a, small)
        #expect(off.lookup(a) == nil)
    }
}
