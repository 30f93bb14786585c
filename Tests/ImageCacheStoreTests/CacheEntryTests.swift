import Foundation
import ImageCacheHTTP
import ImageCacheStore
import Testing
import ImageCacheTestSupport

@Suite("CacheEntry", .timeLimit(.minutes(1)))
struct CacheEntryTests {
    static let t0 = Fixture.t0

    static func stored() -> CacheEntry {
        Fixture.entry([
            ("Date", Fixture.date(0)), ("Cache-Control", "max-age=60"), ("ETag", "\"v1\""),
            ("Last-Modified", Fixture.date(-3600)), ("Content-Type", "image/png"), ("Content-Length", "3"),
            ("Age", "10"), ("X-Old", "a"), ("X-Both", "old"),
        ], body: [1, 2, 3])
    }

    @Test("derives cache control, lifetime, age and validators once when stored")
    func derived() {
        // Given / When
        let entry = CacheEntryTests.stored()
        // Then
        #expect(entry.cacheControl.maxAge == 60)
        #expect(entry.freshnessLifetime == 60)
        #expect(entry.correctedInitialAge == 10)
        #expect(entry.etag == "\"v1\"")
        #expect(entry.lastModified == Fixture.date(-3600))
        #expect(entry.vary == nil)
        #expect(entry.cost > 3 + CacheEntry.fixedOverheadBytes)
    }

    @Test("keeps the Vary key of the request it was fetched with")
    func vary() {
        let entry = Fixture.entry([("Vary", "Accept"), ("Cache-Control", "max-age=5")], requestHeaders: ["Accept": "image/webp"])
        #expect(entry.vary?.matches(["Accept": "image/webp"]) == true)
        #expect(entry.vary?.matches(["Accept": "image/avif"]) == false)
    }

    @Test("a 304 refreshes fields and times but keeps the stored body and its framing")
    func refreshedAfter304() {
        // Given an entry stored at t0, revalidated at t0+100
        let entry = CacheEntryTests.stored()
        let notModified = Fixture.head(304, [
            ("Date", Fixture.date(100)), ("Cache-Control", "max-age=300"), ("ETag", "\"v1\""),
            ("Content-Length", "0"), ("Content-Type", "text/html"), ("X-New", "b"), ("X-Both", "new"),
            ("Connection", "close"),
        ])
        // When
        let refreshed = entry.refreshed(with: notModified, requestTime: CacheEntryTests.t0.addingTimeInterval(99),
                                        responseTime: CacheEntryTests.t0.addingTimeInterval(100), policy: FreshnessPolicy())
        // Then
        let h = refreshed.head.headers
        #expect(refreshed.head.status == 200)
        expectSameBytes(refreshed.body, [1, 2, 3])
        #expect(h["Cache-Control"] == "max-age=300")
        #expect(h["Content-Type"] == "image/png")
        #expect(h["Content-Length"] == "3")
        #expect(h["X-Old"] == "a")
        #expect(h["X-New"] == "b")
        #expect(h.values("X-Both") == ["new"])
        #expect(h["Age"] == nil)
        #expect(h["Connection"] == nil)
        #expect(h["Date"] == Fixture.date(100))
        #expect(refreshed.freshnessLifetime == 300)
        #expect(refreshed.correctedInitialAge == 1)
        #expect(refreshed.responseTime == CacheEntryTests.t0.addingTimeInterval(100))
        #expect(Freshness.use(refreshed, request: CacheControl(), now: CacheEntryTests.t0.addingTimeInterval(150), defaultStaleWhileRevalidate: 0) == .fresh(ttl: 249))
    }

    @Test("a 304 without Date is dated at its receipt")
    func refreshedWithoutDate() {
        let entry = CacheEntryTests.stored()
        let refreshed = entry.refreshed(with: Fixture.head(304, []), requestTime: CacheEntryTests.t0.addingTimeInterval(500),
                                        responseTime: CacheEntryTests.t0.addingTimeInterval(500), policy: FreshnessPolicy())
        #expect(refreshed.head.headers["Date"] == Fixture.date(500))
        #expect(refreshed.correctedInitialAge == 0)
        #expect(Freshness.use(refreshed, request: CacheControl(), now: CacheEntryTests.t0.addingTimeInterval(510), defaultStaleWhileRevalidate: 0) == .fresh(ttl: 50))
    }

    @Test("a 304 naming a validator selects the stored response only when it matches; a bare 304 answers our own conditional", arguments: [
        ([("ETag", "\"v1\"")], true),
        ([("ETag", "W/\"v1\"")], true),
        ([("ETag", "\"v2\"")], false),
        ([("Last-Modified", Fixture.date(-3600))], true),
        ([("Last-Modified", Fixture.date(-1))], false),
        ([], true),
    ] as [([(String, String)], Bool)])
    func selection(fields: [(String, String)], selected: Bool) {
        #expect(CacheEntryTests.stored().isSelected(by: Fixture.head(304, fields)) == selected)
    }

    @Test("conditional headers carry the stored validators")
    func conditionalHeaders() {
        let headers = CacheEntryTests.stored().conditionalHeaders
        #expect(headers["If-None-Match"] == "\"v1\"")
        #expect(headers["If-Modified-Since"] == Fixture.date(-3600))
        #expect(Fixture.entry([("Cache-Control", "max-age=1")]).conditionalHeaders.isEmpty)
    }
}
