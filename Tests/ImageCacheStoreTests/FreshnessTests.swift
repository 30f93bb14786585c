import Foundation
import ImageCacheTestSupport
import ImageCacheHTTP
import ImageCacheStore
import Testing

@Suite("Freshness", .timeLimit(.minutes(1)))
struct FreshnessTests {
    static let t0 = Fixture.t0

    @Test("lifetime follows s-maxage, max-age, Expires, negative-ttl (404, 410), heuristic, in that order", arguments: [
        (200, [("Cache-Control", "s-maxage=300, max-age=60"), ("Expires", Fixture.date(1000))], 300.0),
        (200, [("Cache-Control", "max-age=60"), ("Expires", Fixture.date(1000))], 60),
        (200, [("Cache-Control", "max-age=0"), ("Last-Modified", Fixture.date(-100_000))], 0),
        (200, [("Cache-Control", "max-age=bogus")], 0),
        (200, [("Date", Fixture.date(0)), ("Expires", Fixture.date(100))], 100),
        (200, [("Date", Fixture.date(-50)), ("Expires", Fixture.date(100))], 150),
        (200, [("Expires", Fixture.date(40))], 40),  // no Date: time of receipt
        (200, [("Date", Fixture.date(0)), ("Expires", Fixture.date(-10))], 0),
        (200, [("Date", Fixture.date(0)), ("Expires", "0"), ("Last-Modified", Fixture.date(-1000))], 0),
        (200, [("Date", Fixture.date(0)), ("Last-Modified", Fixture.date(-1000))], 100),
        (404, [("Date", Fixture.date(0)), ("Last-Modified", Fixture.date(-1000))], 10),   // negative-ttl: the operator's word
        (410, [], 10),
        (404, [("Cache-Control", "max-age=60")], 60),
        (405, [("Date", Fixture.date(0)), ("Last-Modified", Fixture.date(-1000))], 100),
        (302, [("Cache-Control", "public"), ("Date", Fixture.date(0)), ("Last-Modified", Fixture.date(-1000))], 100),
        (200, [("Date", Fixture.date(0)), ("Last-Modified", Fixture.date(-10_000_000))], 86_400),
        (200, [("Date", Fixture.date(0)), ("Last-Modified", Fixture.date(1000))], 0),
        (200, [("Date", Fixture.date(0)), ("Last-Modified", "garbage")], 0),
        (302, [("Date", Fixture.date(0)), ("Last-Modified", Fixture.date(-1000))], 0),
        (200, [("Date", Fixture.date(0))], 0),
        (200, [("Cache-Control", "public")], 0),
    ] as [(Int, [(String, String)], Double)])
    func lifetime(status: Int, fields: [(String, String)], expected: Double) {
        // Given
        let head = Fixture.head(status, fields)
        // When
        let lifetime = Freshness.lifetime(of: head, cacheControl: CacheControl(head.headers), responseTime: FreshnessTests.t0,
                                          policy: FreshnessPolicy())
        // Then
        #expect(lifetime == expected)
    }

    @Test("without negative-ttl a 404 has the heuristic lifetime, or none")
    func noNegativeTTL() {
        let policy = FreshnessPolicy(negativeTTLSeconds: 0)
        let dated = Fixture.head(404, [("Date", Fixture.date(0)), ("Last-Modified", Fixture.date(-1000))])
        let bare = Fixture.head(404, [])
        #expect(Freshness.lifetime(of: dated, cacheControl: CacheControl(dated.headers), responseTime: Self.t0, policy: policy) == 100)
        #expect(Freshness.lifetime(of: bare, cacheControl: CacheControl(bare.headers), responseTime: Self.t0, policy: policy) == 0)
    }

    @Test("heuristic uses the configured fraction and cap")
    func heuristicPolicy() {
        let head = Fixture.head(200, [("Date", Fixture.date(0)), ("Last-Modified", Fixture.date(-1000))])
        let cc = CacheControl(head.headers)
        #expect(Freshness.lifetime(of: head, cacheControl: cc, responseTime: FreshnessTests.t0,
                                   policy: FreshnessPolicy(heuristicFraction: 0.5, heuristicMaxSeconds: 1e9)) == 500)
        #expect(Freshness.lifetime(of: head, cacheControl: cc, responseTime: FreshnessTests.t0,
                                   policy: FreshnessPolicy(heuristicFraction: 0.5, heuristicMaxSeconds: 60)) == 60)
    }

    @Test("corrected initial age takes Age, response delay and clock skew into account", arguments: [
        ([], 2.0),
        ([("Age", "100")], 102),
        ([("Age", "30, 40")], 32),
        ([("Age", "abc")], 2),
        ([("Age", "-5")], 2),
        ([("Date", Fixture.date(-50))], 50),  // origin clock behind or a slow path: apparent age wins
        ([("Date", Fixture.date(-50)), ("Age", "100")], 102),
        ([("Date", Fixture.date(3600))], 2),  // origin clock ahead: apparent age is 0
    ] as [([(String, String)], Double)])
    func correctedInitialAge(fields: [(String, String)], expected: Double) {
        // Given a request sent 2 seconds before the response arrived at t0
        let head = Fixture.head(200, fields)
        // When
        let age = Freshness.correctedInitialAge(of: head, requestTime: FreshnessTests.t0.addingTimeInterval(-2),
                                                responseTime: FreshnessTests.t0)
        // Then
        #expect(age == expected)
    }

    @Test("current age adds the time resident in the cache, never less than the initial age")
    func currentAge() {
        // Given an entry that was 10 seconds old when received at t0
        let entry = Fixture.entry([("Age", "10"), ("Cache-Control", "max-age=60")])
        // When / Then
        #expect(Freshness.currentAge(entry, now: FreshnessTests.t0.addingTimeInterval(5)) == 15)
        #expect(Freshness.currentAge(entry, now: FreshnessTests.t0.addingTimeInterval(-100)) == 10)
    }

    @Test("use() decides between fresh, stale-allowed and revalidate", arguments: [
        ("max-age=100", "", 10.0, CacheUse.fresh(ttl: 90)),
        ("max-age=100", "", 100, .revalidate),
        ("max-age=100", "", 150, .revalidate),
        ("max-age=100", "no-cache", 10, .revalidate),
        ("no-cache, max-age=100", "", 10, .revalidate),
        ("no-cache=\"Set-Cookie\", max-age=100", "", 10, .revalidate),
        ("max-age=100", "max-age=5", 10, .revalidate),
        ("max-age=100", "max-age=50", 10, .fresh(ttl: 90)),
        ("max-age=100", "min-fresh=95", 10, .revalidate),
        ("max-age=100", "min-fresh=50", 10, .fresh(ttl: 90)),
        ("max-age=100", "max-stale", 150, .staleAllowed(staleness: 50)),
        ("max-age=100", "max-stale=60", 150, .staleAllowed(staleness: 50)),
        ("max-age=100", "max-stale=50", 150, .staleAllowed(staleness: 50)),
        ("max-age=100", "max-stale=40", 150, .revalidate),
        ("max-age=100", "max-stale", 10, .fresh(ttl: 90)),
        ("max-age=100, must-revalidate", "max-stale", 150, .revalidate),
        ("max-age=100, proxy-revalidate", "max-stale", 150, .revalidate),
        ("s-maxage=100", "max-stale", 150, .revalidate),
        ("s-maxage=100, max-age=1", "", 50, .fresh(ttl: 50)),
        ("max-age=0", "", 0, .revalidate),
    ] as [(String, String, Double, CacheUse)])
    func use(response: String, request: String, elapsed: Double, expected: CacheUse) {
        // Given an entry stored at t0 with age 0
        let entry = Fixture.entry([("Date", Fixture.date(0)), ("Cache-Control", response)])
        let requestCC = CacheControl(request.isEmpty ? [:] : ["Cache-Control": request])
        // When
        let use = Freshness.use(entry, request: requestCC, now: FreshnessTests.t0.addingTimeInterval(elapsed), defaultStaleWhileRevalidate: 0)
        // Then
        #expect(use == expected)
    }

    @Test("a request with Pragma: no-cache revalidates")
    func pragmaNoCache() {
        let entry = Fixture.entry([("Cache-Control", "max-age=100")])
        #expect(Freshness.use(entry, request: CacheControl(["Pragma": "no-cache"]), now: FreshnessTests.t0, defaultStaleWhileRevalidate: 0) == .revalidate)
    }

    @Test("targeted cache control (RFC 9213): the first targeted field present governs a trusted response; an untrusted one keeps Cache-Control")
    func targeted() {
        let headers: HTTPHeaders = ["Cache-Control": "no-store", "CDN-Cache-Control": "max-age=60",
                                    "Imagecached-Cache-Control": "max-age=5"]
        let policy = FreshnessPolicy()
        #expect(policy.cacheControl(headers, trusted: true).maxAge == 60 && !policy.cacheControl(headers, trusted: true).noStore)
        #expect(policy.cacheControl(headers, trusted: false).noStore && policy.cacheControl(headers, trusted: false).maxAge == nil)
        let ours = FreshnessPolicy(targetedFields: ["Imagecached-Cache-Control", "CDN-Cache-Control"])
        #expect(ours.cacheControl(headers, trusted: true).maxAge == 5)
        #expect(FreshnessPolicy(targetedFields: []).cacheControl(headers, trusted: true).noStore)
        let entry = Fixture.entry([("Cache-Control", "max-age=1"), ("CDN-Cache-Control", "max-age=600")])
        #expect(entry.freshnessLifetime == 600)
    }

    @Test("a targeted field is a Structured Fields Dictionary (RFC 9213 2.1): an invalid one is ignored (the next, or Cache-Control, governs); a directive of the wrong type is ignored", arguments: [
        ("max-age=10000, &&&&&", nil as Int?, true),        // not a Dictionary: ignored, Cache-Control's no-store holds
        ("max-age = 10000", nil, true),                      // no white space around "=" in Structured Fields
        ("max-age=\"10000\"", nil, false),                  // valid, but a String where an Integer goes: no max-age
        ("max-age=10000, no-store=?0", 10000, false),        // no-store false: not set
        ("max-age=-5, s-maxage=20", nil, false),             // a negative Integer is not delta-seconds
        ("max-age=600;foo=bar, must-revalidate", 600, false), // parameters ignored
        ("max-age=600, no-store=5", 600, true),              // a restrictive directive holds whatever its value
    ] as [(String, Int?, Bool)])
    func targetedStructured(field: String, maxAge: Int?, fallsBack: Bool) {
        let headers: HTTPHeaders = ["Cache-Control": "no-store", "CDN-Cache-Control": field]
        let control = FreshnessPolicy().cacheControl(headers, trusted: true)
        #expect(control.maxAge == maxAge)
        #expect(control.noStore == fallsBack, "an invalid targeted field gives way to Cache-Control, a valid one never")
    }

    @Test("a targeted private with field names names them; a targeted no-cache with field names is no-cache")
    func targetedQualified() {
        let headers: HTTPHeaders = ["CDN-Cache-Control": "max-age=600, private=\"X-User, Set-Cookie\", no-cache=\"X-A\""]
        let control = FreshnessPolicy().cacheControl(headers, trusted: true)
        #expect(control.maxAge == 600 && !control.isPrivate && control.privateFields == ["x-user", "set-cookie"])
        #expect(control.noCache)
    }
}
