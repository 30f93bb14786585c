import Testing
@testable import ImageCacheHTTP
@testable import ImageCacheConfig
@testable import ImageCacheStore
@testable import ImageCacheStatus
@testable import ImageCacheCore

@Suite("Routing: three ways in, one cache key", .timeLimit(.minutes(1)))
struct RouteTests {
    private func route(_ target: String, method: String = "GET", origins: [OriginMapping] = []) -> Route {
        Route.resolve(HTTPRequestHead(method: method, target: target, headers: ["Host": "x"]), origins: origins)
    }

    private func key(_ route: Route) -> String? {
        if case let .upstream(url, _, _) = route { return CacheKey(url).description }
        return nil
    }

    @Test("a forward request and a fetch request for one URL share one cache key")
    func sameKey() {
        let forward = route("http://Images.Example.com:80/a.jpg")
        let fetch = route("/fetch?url=http%3A%2F%2Fimages.example.com%2Fa.jpg")
        let reverse = route("/a.jpg", origins: [OriginMapping(prefix: "/", url: "http://images.example.com")])
        #expect(key(forward) == "http://images.example.com/a.jpg")
        #expect(key(fetch) == key(forward))
        #expect(key(reverse) == key(forward))
    }

    @Test("reverse proxy picks the longest matching prefix and keeps the query")
    func longestPrefix() {
        let origins = [OriginMapping(prefix: "/", url: "https://a.example/base/"), OriginMapping(prefix: "/img", url: "https://b.example/x")]
        #expect(key(route("/img/p.png?w=1", origins: origins)) == "https://b.example/x/p.png?w=1")
        #expect(key(route("/images/p.png", origins: origins)) == "https://a.example/base/images/p.png")
    }

    @Test("reverse routes are trusted, forward and fetch routes are not")
    func trust() {
        if case let .upstream(_, mode, trusted) = route("/a.png", origins: [OriginMapping(prefix: "/", url: "http://o")]) {
            #expect(mode == .reverse && trusted)
        } else { Issue.record("not routed upstream") }
        if case let .upstream(_, mode, trusted) = route("/fetch?url=http%3A%2F%2Fo%2Fa.png") {
            #expect(mode == .fetch && !trusted)
        } else { Issue.record("not routed upstream") }
    }

    @Test("errors have a status and a reason", arguments: [
        ("/fetch", "GET", 400, "missing url parameter"),
        ("/fetch?url=ftp%3A%2F%2Fh%2Fa", "GET", 400, "unsupported scheme"),
        ("/fetch?url=%zz", "GET", 400, "percent-encoding"),
        ("/a.jpg", "GET", 400, "not a proxy request"),
        ("h:443", "CONNECT", 400, "must not have a body"),   // routing sees a CONNECT only for its body decision
    ])
    func errors(target: String, method: String, status: Int, reason: String) {
        guard case let .error(gotStatus, gotReason) = route(target, method: method) else {
            Issue.record("expected an error for \(target)")
            return
        }
        #expect(gotStatus == status)
        #expect(gotReason.contains(reason))
    }

    @Test("/_imagecached/ is reserved even with an origin on /")
    func reserved() {
        #expect(route("/_imagecached/health", origins: [OriginMapping(prefix: "/", url: "http://o")]) == .admin(path: "/_imagecached/health", query: nil))
    }

    @Test("routing decides on the normalised path: escapes and dot segments go where the plain path goes", arguments: [
        ("/img/%70rivate/x.png", "http://private.example/x.png"),
        ("/img/./private/x.png", "http://private.example/x.png"),
        ("/img/x/../private/x.png", "http://private.example/x.png"),
        ("/img/%2E/private/x.png", "http://private.example/x.png"),
        ("/img/other/x.png", "http://img.example/other/x.png"),
        ("/img/x/..%2Fprivate/x.png", "http://img.example/x/..%2Fprivate/x.png"),
    ])
    func normalisedRouting(target: String, expected: String) {
        let origins = [OriginMapping(prefix: "/img", url: "http://img.example"),
                       OriginMapping(prefix: "/img/private", url: "http://private.example")]
        guard case let .upstream(url, mode, _) = route(target, origins: origins) else {
            Issue.record("\(target) was not routed upstream")
            return
        }
        #expect(mode == .reverse)
        #expect(url.string == expected)
    }

    @Test("the daemon's own paths are recognised in any spelling, with an origin on /", arguments: [
        ("/%5Fimagecached/health", Route.admin(path: "/_imagecached/health", query: nil)),
        ("/_imagecached/%63ache?url=x", .admin(path: "/_imagecached/cache", query: "url=x")),
        ("/x/../_imagecached/stats", .admin(path: "/_imagecached/stats", query: nil)),
    ])
    func reservedSpellings(target: String, expected: Route) {
        #expect(route(target, origins: [OriginMapping(prefix: "/", url: "http://o")]) == expected)
    }

    @Test("/%66etch?url= is the fetch endpoint, not a path on the origin")
    func fetchSpelling() {
        guard case let .upstream(url, mode, trusted) = route("/%66etch?url=http%3A%2F%2Fimg.example%2Fa.png",
                                                             origins: [OriginMapping(prefix: "/", url: "http://o")]) else {
            Issue.record("not routed")
            return
        }
        #expect(mode == .fetch && !trusted)
        #expect(url.string == "http://img.example/a.png")
    }

    @Test("Cache-Status values follow RFC 9211")
    func cacheStatus() {
        #expect(CacheOutcome.hit(ttl: 12.7).cacheStatus == "imagecached; hit; ttl=12")
        #expect(CacheOutcome(forward: .stale, forwardStatus: 304, revalidated: true, stored: true).cacheStatus == "imagecached; fwd=stale; fwd-status=304; stored")
        #expect(CacheOutcome(forward: .stale, forwardStatus: 304, revalidated: true, stored: true).xCache == "REVALIDATED")
        #expect(CacheOutcome(forward: .miss, forwardStatus: 200, collapsed: true).xCache == "COALESCED")
        var headers: HTTPHeaders = ["Cache-Status": "cdn; hit"]
        CacheOutcome.hit(ttl: 5).apply(to: &headers)
        #expect(headers["Cache-Status"] == "cdn; hit, imagecached; hit; ttl=5")
    }

    @Test("one outcome value gives the X-Cache word and the metrics label together, for every kind of answer")
    func outcomeLabels() {
        let cases: [(CacheOutcome, String, ServedOutcome)] = [
            (.hit(ttl: 5), "HIT", .hit),
            (.hit(ttl: 5, detail: "disk"), "HIT", .diskHit),
            (.hit(ttl: -3), "STALE", .stale),
            (.hit(ttl: -3, detail: "disk"), "STALE", .stale),
            (.hit(ttl: -3, detail: "stale-if-error"), "STALE", .stale),
            (CacheOutcome(forward: .miss, forwardStatus: 200, stored: true), "MISS", .miss),
            (CacheOutcome(forward: .miss, forwardStatus: 200, collapsed: true), "COALESCED", .coalesced),
            (CacheOutcome(forward: .stale, forwardStatus: 304, revalidated: true, stored: true), "REVALIDATED", .revalidated),
            (CacheOutcome(forward: .stale, forwardStatus: 200, stored: true), "EXPIRED", .expired),
            (CacheOutcome(forward: .request, forwardStatus: 304, revalidated: true), "REVALIDATED", .revalidated),
            // A 304 that answered no conditional request (reverse mode passes it on): nothing was revalidated.
            (CacheOutcome(forward: .miss, forwardStatus: 304), "PASS", .pass),
            (CacheOutcome(forward: .request, forwardStatus: 200), "MISS", .miss),
            (CacheOutcome(forward: .varyMiss, forwardStatus: 200), "MISS", .miss),
            (CacheOutcome(forward: .bypass, forwardStatus: 200), "BYPASS", .bypass),
        ]
        for (outcome, xCache, served) in cases {
            #expect(outcome.xCache == xCache && outcome.served == served, "\(outcome.cacheStatus)")
        }
    }

    @Test("a reverse-proxy target cannot name another host or climb out of the origin's base path (a target whose dot segments leave the prefix is routed where it lands: no origin there, 404)", arguments: [
        "/img/.attacker.net/a.jpg", "/img?.attacker.net/a.jpg", "/img/:22/x", "/img/../x", "/img/%2e%2e/x",
    ])
    func prefixEscapes(target: String) {
        let origins = [OriginMapping(prefix: "/img/", url: "https://cdn.example.com/images")]
        switch route(target, origins: origins) {
        case let .upstream(url, _, _):
            #expect(url.host == "cdn.example.com")
            #expect(url.port == nil)
            #expect(url.pathAndQuery.hasPrefix("/images/") || url.pathAndQuery.hasPrefix("/images?"), "\(url)")
        case let .error(status, _):
            #expect(status == 400 || status == 404)
        case .admin:
            Issue.record("routed to admin")
        case .transform:
            Issue.record("routed to a transform")
        }
    }
}
