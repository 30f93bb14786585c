import ImageCacheTestSupport
import ImageCacheHTTP
import ImageCacheStore
import Testing

@Suite("Storability", .timeLimit(.minutes(1)))
struct StorabilityTests {
    static let fresh: [(String, String)] = [("Cache-Control", "max-age=60")]

    @Test("stores only what a shared cache may store", arguments: [
        ("GET", [], 200, fresh, StoreDecision.store),
        ("GET", [], 203, fresh, .store),
        ("GET", [], 200, [("Expires", "Thu, 01 Jan 2099 00:00:00 GMT")], .store),
        ("GET", [], 200, [("ETag", "\"v1\"")], .store),
        ("GET", [], 200, [("Last-Modified", "Thu, 01 Jan 2015 00:00:00 GMT")], .store),
        ("GET", [], 200, [("Cache-Control", "no-cache"), ("ETag", "\"v1\"")], .store),
        ("GET", [], 200, [("Content-Type", "image/png")], .dontStore(reason: "no freshness information and no validator")),
        ("HEAD", [], 200, fresh, .dontStore(reason: "method HEAD is not cached")),
        ("POST", [], 200, fresh, .dontStore(reason: "method POST is not cached")),
        ("GET", [("Cache-Control", "no-store")], 200, fresh, .dontStore(reason: "request no-store")),
        ("GET", [], 206, fresh, .dontStore(reason: "status 206 is not cached")),
        ("GET", [], 404, fresh, .dontStore(reason: "status 404 is not cached")),
        ("GET", [], 304, fresh, .dontStore(reason: "status 304 is not cached")),
        ("GET", [], 200, [("Cache-Control", "max-age=60, no-store")], .dontStore(reason: "response no-store")),
        ("GET", [], 200, [("Cache-Control", "max-age=60, private")], .dontStore(reason: "response private")),
        ("GET", [], 200, [("Cache-Control", "max-age=60, private=\"X\"")], .store),
        ("GET", [], 200, [("Cache-Control", "max-age=60, private=\"\"")], .dontStore(reason: "response private")),
        ("GET", [], 200, [("Cache-Control", "max-age=60, private, private=\"X\"")], .dontStore(reason: "response private")),
        ("GET", [], 200, fresh + [("Cache-Control", "private=\"Set-Cookie\""), ("Set-Cookie", "a=b")], .store),
        ("GET", [], 200, fresh + [("Vary", "Accept, *")], .dontStore(reason: "Vary: *")),
        ("GET", [], 200, fresh + [("Vary", "Accept")], .store),
        ("GET", [], 200, fresh + [("Set-Cookie", "a=b")], .dontStore(reason: "response sets a cookie")),
        ("GET", [("Authorization", "Basic x")], 200, fresh,
         .dontStore(reason: "request has Authorization and the response is not public")),
        ("GET", [("Authorization", "Basic x")], 200, [("Cache-Control", "public, max-age=60")], .store),
        ("GET", [("Authorization", "Basic x")], 200, [("Cache-Control", "s-maxage=60")], .store),
        ("GET", [("Authorization", "Basic x")], 200, [("Cache-Control", "must-revalidate"), ("ETag", "\"x\"")], .store),
    ] as [(String, [(String, String)], Int, [(String, String)], StoreDecision)])
    func decide(method: String, requestFields: [(String, String)], status: Int, responseFields: [(String, String)],
                expected: StoreDecision) {
        // Given
        let request = HTTPRequestHead(method: method, target: "/a.png", headers: HTTPHeaders(requestFields))
        let response = Fixture.head(status, responseFields)
        // When
        let decision = Storability.decide(request: request, requestCacheControl: CacheControl(request.headers),
                                          response: response, responseCacheControl: CacheControl(response.headers))
        // Then
        #expect(decision == expected)
    }

    @Test("from a configured origin every status RFC 9111 3 allows is stored: heuristically cacheable ones as a 200, others only when explicitly fresh or public; never 206, 304 or 1xx; a 404/410 with negative-ttl needs nothing more", arguments: [
        (301, [("Location", "/b"), ("ETag", "\"x\"")], 0.0, StoreDecision.store),
        (308, fresh, 0, .store),
        (204, fresh, 0, .store),
        (405, [("Last-Modified", "Thu, 01 Jan 2015 00:00:00 GMT")], 0, .store),
        (404, [], 10, .store),
        (410, [("Content-Type", "text/html")], 10, .store),
        (404, [], 0, .dontStore(reason: "no freshness information and no validator")),
        (302, fresh, 0, .store),
        (500, [("Expires", "Thu, 01 Jan 2099 00:00:00 GMT")], 0, .store),
        (403, [("Cache-Control", "public"), ("ETag", "\"x\"")], 0, .store),
        (302, [("ETag", "\"x\"")], 0, .dontStore(reason: "status 302 is not cached")),
        (500, [], 10, .dontStore(reason: "status 500 is not cached")),
        (206, fresh, 0, .dontStore(reason: "status 206 is not cached")),
        (304, fresh, 0, .dontStore(reason: "status 304 is not cached")),
        (103, fresh, 0, .dontStore(reason: "status 103 is not cached")),
        (404, [("Cache-Control", "no-store")], 10, .dontStore(reason: "response no-store")),
    ] as [(Int, [(String, String)], Double, StoreDecision)])
    func decideAllStatuses(status: Int, responseFields: [(String, String)], negativeTTL: Double, expected: StoreDecision) {
        let request = HTTPRequestHead(method: "GET", target: "/a.png", headers: HTTPHeaders())
        let response = Fixture.head(status, responseFields)
        #expect(Storability.decide(request: request, requestCacheControl: CacheControl(), response: response,
                                   responseCacheControl: CacheControl(response.headers), allStatuses: true,
                                   negativeTTL: negativeTTL) == expected)
        // Forward and fetch modes store 200 and 203 only
        #expect(Storability.decide(request: request, requestCacheControl: CacheControl(), response: response,
                                   responseCacheControl: CacheControl(response.headers), negativeTTL: negativeTTL)
                == .dontStore(reason: "status \(status) is not cached"))
    }

    @Test("a fetched response is shared with waiting clients unless it is personal", arguments: [
        ([("Cache-Control", "max-age=60")], true),
        ([("Cache-Control", "no-cache")], true),
        ([("Vary", "Accept")], true),
        ([("Cache-Control", "private")], false),
        ([("Cache-Control", "no-store")], false),
        ([("Set-Cookie", "a=b")], false),
        ([("Vary", "*")], false),
    ] as [([(String, String)], Bool)])
    func shareable(fields: [(String, String)], expected: Bool) {
        let head = Fixture.head(200, fields)
        #expect(Storability.isShareable(head, cacheControl: CacheControl(head.headers)) == expected)
    }
}
