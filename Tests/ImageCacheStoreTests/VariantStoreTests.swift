// Several variants per URL (RFC 9111 section 4.1) in each tier: selection by the request's fields, the per-URL bound
// with least recently used eviction among variants, a change of Vary names, removal of every variant, and on disk
// the file names, the restart (indexed and before the index is loaded) and the purge of files the index does not know.

import Foundation
import ImageCacheTestSupport
import Synchronization
@testable import ImageCacheHTTP
@testable import ImageCacheStore
import Testing
import ImageCacheStatus
import ImageCacheSystem

enum VariantFixture {
    static let key = Fixture.key("http://origin.test/photo")

    /// A response with `Vary: <vary>` stored for a request with `Accept: <accept>`.
    static func entry(accept: String, vary: String = "Accept", body: UInt8 = 1, key: CacheKey = VariantFixture.key,
                      time: Date = Fixture.t0) -> CacheEntry {
        Fixture.entry([("Content-Type", "image/png"), ("Vary", vary), ("ETag", "\"\(accept)\"")], key: key,
                      body: Array(repeating: body, count: 100), requestTime: time, responseTime: time,
                      requestHeaders: ["Accept": accept])
    }

    static func accept(_ value: String) -> HTTPHeaders { ["Accept": value] }
}

@Suite("Variants in the memory tier", .timeLimit(.minutes(1)))
struct MemoryVariantTests {
    @Test("two Accept values are two entries under one URL; each request selects its own, a third none")
    func twoVariants() {
        let cache = MemoryCache(limitBytes: 1 << 20, objectLimitBytes: 1 << 20)
        cache.insert(VariantFixture.entry(accept: "image/webp", body: 1))
        cache.insert(VariantFixture.entry(accept: "image/png", body: 2))
        #expect(cache.count == 2 && cache.urlCount == 1)
        #expect(cache.lookup(VariantFixture.key, requestFields: VariantFixture.accept("image/webp"))?.body.first == 1)
        #expect(cache.lookup(VariantFixture.key, requestFields: VariantFixture.accept("image/png"))?.body.first == 2)
        // Normalised as RFC 9111 4.1 allows: white space does not make another variant.
        #expect(cache.lookup(VariantFixture.key, requestFields: VariantFixture.accept("  image/png "))?.body.first == 2)
        var removals: UInt64 = 0
        let other = cache.lookup(VariantFixture.key, requestFields: VariantFixture.accept("image/avif"), removals: &removals)
        #expect(other.entry == nil && other.otherVariants)
        let none = cache.lookup(Fixture.key("http://origin.test/none"), requestFields: [:], removals: &removals)
        #expect(none.entry == nil && !none.otherVariants)
        // Vary: * is never selected (RFC 9111 4.1).
        let star = Fixture.entry([("Vary", "*")], key: Fixture.key("http://origin.test/star"))
        cache.insert(star)
        #expect(cache.lookup(star.key, requestFields: [:], removals: &removals).otherVariants)
        #expect(cache.checkInvariants())
    }

    @Test("a variant's cost counts its Vary values: a client's long Accept cannot make entries cheaper than they are")
    func costCountsVaryValues() {
        let long = String(repeating: "x", count: 4000)
        func entry(_ accept: String) -> CacheEntry {
            Fixture.entry([("Content-Type", "image/png"), ("Vary", "Accept")], key: VariantFixture.key,
                          requestHeaders: VariantFixture.accept(accept))
        }
        // Same head and body: the difference is the id ("accept:" + value) and the key's value, each held once.
        #expect(entry(long).cost - entry("a").cost == 2 * (long.utf8.count - 1))
    }

    @Test("storing a variant again replaces it; the per-URL bound evicts the least recently used variant")
    func boundEvictsLeastRecentlyUsedVariant() {
        let cache = MemoryCache(limitBytes: 1 << 20, objectLimitBytes: 1 << 20, variantLimit: 2)
        cache.insert(VariantFixture.entry(accept: "a", body: 1))
        cache.insert(VariantFixture.entry(accept: "b", body: 2))
        cache.insert(VariantFixture.entry(accept: "b", body: 3))   // replaces b
        #expect(cache.count == 2 && cache.evictionCount == 0)
        // a is used, so b is the least recently used variant when c comes.
        #expect(cache.lookup(VariantFixture.key, requestFields: VariantFixture.accept("a")) != nil)
        cache.insert(VariantFixture.entry(accept: "c", body: 4))
        #expect(cache.count == 2 && cache.evictionCount == 1)
        #expect(cache.variants(VariantFixture.key).map(\.variantID) == ["accept:c", "accept:a"])
        #expect(cache.lookup(VariantFixture.key, requestFields: VariantFixture.accept("b")) == nil)
        // Other URLs' entries are not touched by one URL's bound.
        cache.insert(VariantFixture.entry(accept: "a", key: Fixture.key("http://origin.test/other")))
        #expect(cache.count == 3)
        #expect(cache.checkInvariants())
    }

    @Test("a response that varies on other fields, or on none, replaces every variant of the URL")
    func changedVaryReplacesAll() {
        let cache = MemoryCache(limitBytes: 1 << 20, objectLimitBytes: 1 << 20)
        cache.insert(VariantFixture.entry(accept: "a"))
        cache.insert(VariantFixture.entry(accept: "b"))
        cache.insert(VariantFixture.entry(accept: "a", vary: "Accept, User-Agent", body: 5))
        #expect(cache.variants(VariantFixture.key).map(\.variantID) == ["accept:a\nuser-agent"])
        cache.insert(Fixture.entry([("Content-Type", "image/png")], key: VariantFixture.key, body: [9]))
        #expect(cache.variants(VariantFixture.key).map(\.variantID) == [""])
        #expect(cache.lookup(VariantFixture.key, requestFields: VariantFixture.accept("anything"))?.body == [9])
        #expect(cache.checkInvariants())
    }

    @Test("remove takes every variant of the URL; eviction by bytes takes single variants")
    func removeAndEvict() {
        let unit = VariantFixture.entry(accept: "a").cost
        let cache = MemoryCache(limitBytes: 3 * unit, objectLimitBytes: 3 * unit)
        for accept in ["a", "b", "c"] { cache.insert(VariantFixture.entry(accept: accept)) }
        #expect(cache.lookup(VariantFixture.key, requestFields: VariantFixture.accept("a")) != nil)
        cache.insert(VariantFixture.entry(accept: "x", key: Fixture.key("http://origin.test/other")))
        // b was the least recently used entry of all.
        #expect(cache.variants(VariantFixture.key).map(\.variantID) == ["accept:a", "accept:c"])
        #expect(cache.checkInvariants())
        #expect(cache.remove(VariantFixture.key) != nil)
        #expect(cache.variants(VariantFixture.key).isEmpty && cache.count == 1)
        #expect(cache.checkInvariants())
    }

    @Test("a promotion keeps a variant received later, and admits another variant beside it")
    func promotionPerVariant() {
        let cache = MemoryCache(limitBytes: 1 << 20, objectLimitBytes: 1 << 20)
        let newer = VariantFixture.entry(accept: "a", body: 2, time: Fixture.t0.addingTimeInterval(10))
        cache.insert(newer)
        let removals = cache.removals
        #expect(!cache.promote(VariantFixture.entry(accept: "a", body: 1), removalsSeen: removals))
        #expect(cache.promote(VariantFixture.entry(accept: "b", body: 3), removalsSeen: removals))
        #expect(cache.count == 2)
        #expect(cache.lookup(VariantFixture.key, requestFields: VariantFixture.accept("a"))?.body.first == 2)
        // A copy that varies on other fields (an older file) never replaces what the origin sent since.
        let older = Fixture.entry([("Content-Type", "image/png")], key: VariantFixture.key, body: [9])
        #expect(!cache.promote(older, removalsSeen: cache.removals))
        #expect(cache.count == 2)
        // One variant can go alone (the origin outdated it); the others stay.
        #expect(cache.remove(VariantFixture.key, variant: "accept:a") != nil)
        #expect(cache.variants(VariantFixture.key).map(\.variantID) == ["accept:b"])
        #expect(cache.checkInvariants())
    }
}

@Suite("Variants in the disk tier", .timeLimit(.minutes(1)))
struct DiskVariantTests {
    static func makeCache(_ directory: DiskTestDirectory, clock: DiskTestClock = DiskTestClock(), variantLimit: Int = 16,
                          loader: Bool = true, limit: Int = 10 << 30) throws -> DiskCache {
        var configuration = DiskCache.Configuration(directory: directory.path, limitBytes: limit)
        configuration.variantLimit = variantLimit
        configuration.startsIndexLoader = loader
        return try DiskCache(configuration: configuration, logger: DiskTestLog().logger, now: clock.now)
    }

    /// A cache directory holding variants a (body 1) and b (body 2) of the fixture URL, written by a cache since gone.
    static func directoryWithTwoVariants() throws -> DiskTestDirectory {
        let directory = DiskTestDirectory()
        let cache = try makeCache(directory)
        cache.insert(VariantFixture.entry(accept: "a", body: 1))
        cache.insert(VariantFixture.entry(accept: "b", body: 2))
        cache.flush()
        return directory
    }

    static func body(_ cache: DiskCache, accept: String) -> UInt8? {
        cache.lookupNow(VariantFixture.key, requestFields: VariantFixture.accept(accept))?.entry?.body.first
    }

    @Test("each variant is its own file in the URL's directory, selected by the request's fields")
    func twoVariantFiles() throws {
        let directory = DiskTestDirectory()
        let cache = try Self.makeCache(directory)
        cache.waitForIndex()
        cache.insert(VariantFixture.entry(accept: "image/webp", body: 1))
        cache.insert(VariantFixture.entry(accept: "image/png", body: 2))
        #expect(Self.body(cache, accept: "image/webp") == 1)
        #expect(Self.body(cache, accept: "image/png") == 2)
        #expect(Self.body(cache, accept: "image/avif") == nil)
        #expect(cache.stats.entries == 2)
        let primary = DiskEntryFormat.fileName(for: VariantFixture.key)
        let names = directory.files.map { String($0.split(separator: "/").last!) }.sorted()
        #expect(names.count == 2 && names.allSatisfy { DiskEntryFormat.isVariant($0, of: primary) && $0 != primary })
        #expect(Set(directory.files.map { String($0.split(separator: "/").dropLast().joined(separator: "/")) }).count == 1)
    }

    @Test("both variants come back after a restart: before the index is loaded (from the URL's directory) and after")
    func restart() throws {
        let directory = try Self.directoryWithTwoVariants()
        let unloaded = try Self.makeCache(directory, loader: false)
        #expect(Self.body(unloaded, accept: "a") == 1 && Self.body(unloaded, accept: "b") == 2)
        #expect(Self.body(unloaded, accept: "c") == nil)
        let loaded = try Self.makeCache(directory)
        loaded.waitForIndex()
        #expect(loaded.stats.entries == 2)
        #expect(Self.body(loaded, accept: "a") == 1 && Self.body(loaded, accept: "b") == 2)
    }

    @Test("the per-URL bound removes the least recently used variant's file; other Vary names replace them all")
    func bound() throws {
        let directory = DiskTestDirectory()
        let clock = DiskTestClock()
        let cache = try Self.makeCache(directory, clock: clock, variantLimit: 2)
        cache.waitForIndex()
        cache.insert(VariantFixture.entry(accept: "a", body: 1))
        clock.advance(by: 1)
        cache.insert(VariantFixture.entry(accept: "b", body: 2))
        clock.advance(by: 1)
        #expect(Self.body(cache, accept: "a") == 1)   // a used last: b goes
        clock.advance(by: 1)
        cache.insert(VariantFixture.entry(accept: "c", body: 3))
        cache.flush()
        #expect(cache.stats.entries == 2 && directory.files.count == 2)
        #expect(Self.body(cache, accept: "b") == nil)
        #expect(Self.body(cache, accept: "a") == 1 && Self.body(cache, accept: "c") == 3)
        cache.insert(Fixture.entry([("Content-Type", "image/png")], key: VariantFixture.key, body: [9]))
        cache.flush()
        #expect(directory.files.count == 1)
        #expect(Self.body(cache, accept: "a") == 9)
    }

    @Test("a response that varies on other fields outdates the URL's variants even when it is not written itself")
    func otherNamesGoEvenWhenTheWriteIsSkipped() throws {
        let directory = DiskTestDirectory()
        let cache = try Self.makeCache(directory, limit: 4096)
        cache.waitForIndex()
        cache.insert(VariantFixture.entry(accept: "a"))
        cache.insert(VariantFixture.entry(accept: "b"))
        cache.flush()
        #expect(directory.files.count == 2)
        let tooLarge = Fixture.entry([("Content-Type", "image/png")], key: VariantFixture.key, body: Array(repeating: 1, count: 8192))
        cache.insert(tooLarge)
        cache.flush()
        #expect(directory.files.isEmpty && cache.stats.entries == 0)
    }

    @Test("the loader removes a file whose Vary names differ from a variant of its URL stored since start")
    func loaderDropsOutdatedVariants() throws {
        let directory = try Self.directoryWithTwoVariants()
        let cache = try Self.makeCache(directory, loader: false)
        cache.insert(Fixture.entry([("Content-Type", "image/png")], key: VariantFixture.key, body: [9]))
        cache.startIndexLoader()
        cache.waitForIndex()
        #expect(cache.stats.entries == 1 && directory.files.count == 1)
        #expect(Self.body(cache, accept: "a") == 9)
    }

    @Test("remove takes every variant's file, also those the index has not loaded yet")
    func removeAll() throws {
        let directory = DiskTestDirectory()
        do {
            let cache = try Self.makeCache(directory)
            cache.insert(VariantFixture.entry(accept: "a"))
            cache.insert(VariantFixture.entry(accept: "b"))
            cache.insert(VariantFixture.entry(accept: "a", key: Fixture.key("http://origin.test/other")))
            cache.flush()
        }
        #expect(directory.files.count == 3)
        let cache = try Self.makeCache(directory, loader: false)
        let failure = Locked<String??>(.none)
        cache.remove(VariantFixture.key) { why in failure.withLock { $0 = .some(why) } }
        cache.flush()
        #expect(failure.withLock { $0 } == .some(nil))
        #expect(directory.files.count == 1)
        #expect(Self.body(cache, accept: "a") == nil)
    }
}
