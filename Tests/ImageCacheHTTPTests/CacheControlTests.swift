import ImageCacheHTTP
import Testing

@Suite("CacheControl", .timeLimit(.minutes(1)))
struct CacheControlTests {
    static func parse(_ values: [String], pragma: String? = nil) -> CacheControl {
        var headers = HTTPHeaders()
        for value in values { headers.add("Cache-Control", value) }
        if let pragma { headers.add("Pragma", pragma) }
        return CacheControl(headers)
    }

    static func make(_ build: (inout CacheControl) -> Void) -> CacheControl {
        var cc = CacheControl()
        build(&cc)
        return cc
    }

    @Test("parses directives into the expected value", arguments: [
        ([], CacheControl()),
        (["max-age=60"], make { $0.maxAge = 60 }),
        (["MAX-AGE=60"], make { $0.maxAge = 60 }),
        (["max-age=\"60\""], make { $0.maxAge = 60 }),
        (["max-age=abc"], make { $0.maxAge = 0 }),
        (["max-age"], make { $0.maxAge = 0 }),
        (["max-age=-5"], make { $0.maxAge = 0 }),
        (["max-age=99999999999999999999"], make { $0.maxAge = CacheControl.deltaSecondsCap }),
        (["max-age=60, max-age=10"], make { $0.maxAge = 10 }),
        (["max-age=10", "max-age=60"], make { $0.maxAge = 10 }),
        (["public, s-maxage=300, max-age=60"], make { $0.isPublic = true; $0.sMaxAge = 300; $0.maxAge = 60 }),
        (["no-cache"], make { $0.noCache = true }),
        (["no-cache=\"Set-Cookie, X-Foo\", max-age=5"], make { $0.noCache = true; $0.maxAge = 5 }),
        (["private=\"X-Foo, Set-Cookie\""], make { $0.privateFields = ["x-foo", "set-cookie"] }),
        (["private=\"\""], make { $0.isPrivate = true }),
        (["private", "private=X-Foo"], make {
            $0.isPrivate = true
            $0.privateFields = ["x-foo"]
        }),
        (["no-store", "must-revalidate,proxy-revalidate"], make { $0.noStore = true; $0.mustRevalidate = true; $0.proxyRevalidate = true }),
        (["no-transform, immutable"], make { $0.noTransform = true; $0.immutable = true }),
        (["stale-while-revalidate=30, stale-if-error=600"], make { $0.staleWhileRevalidate = 30; $0.staleIfError = 600 }),
        (["stale-while-revalidate=x"], CacheControl()),
        (["max-stale"], make { $0.maxStale = .any }),
        (["max-stale=20"], make { $0.maxStale = .seconds(20) }),
        (["max-stale, max-stale=20"], make { $0.maxStale = .seconds(20) }),
        (["max-stale=20, max-stale"], make { $0.maxStale = .seconds(20) }),
        (["min-fresh=10, min-fresh=30"], make { $0.minFresh = 30 }),
        (["only-if-cached"], make { $0.onlyIfCached = true }),
        ([" , ,max-age = 7 ,, unknown-ext=\"a,b\" , foo"], make { $0.maxAge = 7 }),
    ] as [([String], CacheControl)])
    func parses(values: [String], expected: CacheControl) {
        // Given / When
        let parsed = CacheControlTests.parse(values)
        // Then
        #expect(parsed == expected)
    }

    @Test("Pragma: no-cache counts only when there is no Cache-Control field")
    func pragma() {
        #expect(CacheControlTests.parse([], pragma: "no-cache").noCache)
        #expect(CacheControlTests.parse([], pragma: "foo, No-Cache").noCache)
        #expect(!CacheControlTests.parse(["max-age=5"], pragma: "no-cache").noCache)
        #expect(!CacheControlTests.parse([], pragma: "other").noCache)
    }
}
