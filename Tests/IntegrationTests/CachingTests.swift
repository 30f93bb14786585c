// End-to-end caching behaviour: the real daemon (port 0) in front of a scripted origin on 127.0.0.1.
// Every test asserts on what the client received and on what the origin saw.

import Foundation
import Logging
import Synchronization
import Testing
@testable import ImageCacheConfig
@testable import ImageCacheUpstream
@testable import ImageCacheOps
import ImageCacheTestSupport
import ImageCacheSystem

@Suite("Serving and caching end to end", .timeLimit(.minutes(2)))
struct CachingTests {
    static let png = Fixtures.png(size: 30_000)

    static func image(_ body: [UInt8] = png, cacheControl: String = "max-age=60", etag: String? = "\"v1\"",
                      extra: [(String, String)] = []) -> Reply {
        var headers = [("Content-Type", "image/png"), ("Cache-Control", cacheControl)]
        if let etag { headers.append(("ETag", etag)) }
        return Reply(status: 200, headers: headers + extra, body: body)
    }

    @Test("each way in returns the origin's exact bytes, and all three share one cache entry")
    func threeWaysIn() async throws {
        // Given
        let harness = try ProxyHarness()
        harness.origin.route("/a.png") { _ in CachingTests.image() }
        // When: reverse proxy, then forward proxy (absolute-form target), then /fetch?url=
        let reverse = try await harness.get("/a.png")
        let forward = try await harness.get(harness.origin.baseURL + "/a.png")
        let encoded = (harness.origin.baseURL + "/a.png").addingPercentEncoding(withAllowedCharacters: .alphanumerics)!
        let fetch = try await harness.get("/fetch?url=" + encoded)
        // Then
        for response in [reverse, forward, fetch] {
            #expect(response.status == 200)
            expectSameBytes(response.body, CachingTests.png)
            #expect(response.complete)
        }
        #expect(reverse.header("X-Cache") == "MISS")
        #expect(forward.header("X-Cache") == "HIT")
        #expect(fetch.header("X-Cache") == "HIT")
        #expect(harness.origin.requestCount("/a.png") == 1)
    }

    @Test("a second request is a hit: the origin sees nothing, and Age and Cache-Status are sent")
    func secondRequestHits() async throws {
        let harness = try ProxyHarness()
        harness.origin.route("/b.png") { _ in CachingTests.image() }
        let first = try await harness.get("/b.png")
        harness.clock.advance(5)
        let second = try await harness.get("/b.png")
        #expect(first.header("Cache-Status") == "imagecached; fwd=uri-miss; fwd-status=200; stored")
        #expect(second.header("Cache-Status") == "imagecached; hit; ttl=55")
        #expect(second.header("Age") == "5")
        expectSameBytes(second.body, CachingTests.png)
        #expect(harness.origin.requestCount("/b.png") == 1)
    }

    @Test("50 concurrent requests for one new URL reach the origin once and get 50 identical bodies")
    func coalescing() async throws {
        // Given an origin that holds the body until every client waits
        let harness = try ProxyHarness()
        let gate = Gate()
        harness.origin.route("/c.png") { _ in var reply = CachingTests.image(); reply.gate = gate; return reply }
        harness.waiters.expect(50)
        // When
        var connections: [TestConnection] = []
        for _ in 0..<50 {
            let connection = try harness.connect()
            try connection.request("/c.png")
            connections.append(connection)
        }
        #expect(await harness.waiters.wait(), "50 clients never waited on one fetch")
        gate.open()
        let responses = try await readAll(connections)
        // Then
        #expect(harness.origin.requestCount("/c.png") == 1)
        #expect(responses.allSatisfy { $0.status == 200 && $0.complete && $0.body == CachingTests.png })
        #expect(responses.filter { $0.header("X-Cache") == "COALESCED" }.count == 49)
        #expect(responses.filter { $0.header("Cache-Status")?.hasSuffix("collapsed") == true }.count == 49)
    }

    @Test("with a slow origin every waiter receives body bytes before the origin has finished")
    func streaming() async throws {
        // Given an origin that sends 8 KB of a 300 KB image and then stalls until the gate opens
        let harness = try ProxyHarness()
        let gate = Gate()
        let big = Fixtures.png(size: 300_000)
        harness.origin.route("/slow.png") { _ in
            var reply = CachingTests.image(big)
            reply.gate = gate
            reply.gateAfterBytes = 8192
            return reply
        }
        harness.waiters.expect(2)
        let first = try harness.connect()
        try first.request("/slow.png")
        let second = try harness.connect()
        try second.request("/slow.png")
        #expect(await harness.waiters.wait())
        // When: both read their head and first bytes while the origin is still stalled
        let heads = [try await first.head(), try await second.head()]
        let early = [await first.raw(atLeast: 8192), await second.raw(atLeast: 8192)]
        #expect(!gate.isOpen)
        gate.open()
        // Then
        #expect(heads.allSatisfy { $0.status == 200 })
        #expect(early.allSatisfy { $0.count >= 8192 && Array($0.prefix(8192)) == Array(big.prefix(8192)) })
        let rest = [await first.raw(atLeast: big.count - early[0].count), await second.raw(atLeast: big.count - early[1].count)]
        expectSameBytes(early[0] + rest[0], big)
        expectSameBytes(early[1] + rest[1], big)
        #expect(harness.origin.requestCount("/slow.png") == 1)
    }

    @Test("a stale entry is revalidated with If-None-Match; the origin's 304 refreshes it and the client gets the whole image")
    func revalidation() async throws {
        let harness = try ProxyHarness()
        harness.origin.route("/r.png") { request in
            if request.header("If-None-Match") == "\"v1\"" {
                return Reply(status: 304, headers: [("ETag", "\"v1\""), ("Cache-Control", "max-age=60")])
            }
            return CachingTests.image()
        }
        _ = try await harness.get("/r.png")
        harness.clock.advance(120)
        // When
        let revalidated = try await harness.get("/r.png")
        let after = try await harness.get("/r.png")
        // Then
        #expect(revalidated.status == 200)
        expectSameBytes(revalidated.body, CachingTests.png)
        #expect(revalidated.header("X-Cache") == "REVALIDATED")
        #expect(revalidated.header("Cache-Status") == "imagecached; fwd=stale; fwd-status=304; stored")
        #expect(harness.origin.requests("/r.png").count == 2)
        #expect(harness.origin.requests("/r.png").last?.header("If-None-Match") == "\"v1\"")
        #expect(after.header("X-Cache") == "HIT")
    }

    @Test("stale-while-revalidate (RFC 5861): within the window the stale image is answered at once while one background revalidation, which no client waits for, refreshes it")
    func staleWhileRevalidate() async throws {
        let harness = try ProxyHarness()
        let gate = Gate()
        defer { gate.open() }
        harness.origin.route("/swr.png") { request in
            if request.header("If-None-Match") == "\"v1\"" {
                gate.wait()   // the revalidation is held until the test has its stale answers
                return Reply(status: 304, headers: [("ETag", "\"v1\""), ("Cache-Control", "max-age=10, stale-while-revalidate=60")])
            }
            return CachingTests.image(cacheControl: "max-age=10, stale-while-revalidate=60")
        }
        _ = try await harness.get("/swr.png")
        harness.clock.advance(20)
        // When two clients ask while the origin holds the revalidation
        let first = try await harness.get("/swr.png")
        let second = try await harness.get("/swr.png")
        // Then both have the stale image, and one conditional request is upstream
        for stale in [first, second] {
            #expect(stale.status == 200 && stale.body == CachingTests.png)
            #expect(stale.header("X-Cache") == "STALE")
            #expect(stale.header("Cache-Status") == "imagecached; hit; ttl=-10; detail=stale-while-revalidate")
        }
        // When the origin confirms the image, it is fresh again
        let finished = DispatchSemaphore(value: 0)
        harness.waiters.onFinished = { finished.signal() }
        gate.open()
        #expect(await wait(finished))
        let after = try await harness.get("/swr.png")
        #expect(after.header("X-Cache") == "HIT")
        #expect(harness.origin.requests("/swr.png").count == 2)
        #expect(harness.origin.requests("/swr.png").last?.header("If-None-Match") == "\"v1\"")
        // Past the window the client waits for the revalidation, as without the directive
        harness.clock.advance(100)
        let late = try await harness.get("/swr.png")
        #expect(late.header("X-Cache") == "REVALIDATED")
    }

    @Test("the configured stale-while-revalidate serves a response that names none stale at once while one background revalidation refreshes it; never an s-maxage or must-revalidate response")
    func configuredStaleWhileRevalidate() async throws {
        // Given the operator's window of 60 s and responses that name no stale-while-revalidate
        let harness = try ProxyHarness { $0.staleWhileRevalidateSeconds = 60 }
        let gate = Gate()
        defer { gate.open() }
        for (path, cacheControl) in [("/grace.png", "max-age=10"), ("/shared.png", "s-maxage=10"),
                                     ("/strict.png", "max-age=10, must-revalidate")] {
            harness.origin.route(path) { request in
                if request.header("If-None-Match") == "\"v1\"" {
                    if path == "/grace.png" { gate.wait() }   // held until the test has its stale answer
                    return Reply(status: 304, headers: [("ETag", "\"v1\""), ("Cache-Control", cacheControl)])
                }
                return CachingTests.image(cacheControl: cacheControl)
            }
            _ = try await harness.get(path)
        }
        harness.clock.advance(20)
        // When a client asks while the origin holds the revalidation
        let grace = try await harness.get("/grace.png")
        // Then it is served stale at once
        #expect(grace.status == 200 && grace.header("X-Cache") == "STALE")
        #expect(grace.header("Cache-Status") == "imagecached; hit; ttl=-10; detail=stale-while-revalidate")
        expectSameBytes(grace.body, CachingTests.png)
        // And the background revalidation makes it fresh again
        let finished = DispatchSemaphore(value: 0)
        harness.waiters.onFinished = { finished.signal() }
        gate.open()
        #expect(await wait(finished))
        #expect(try await harness.get("/grace.png").header("X-Cache") == "HIT")
        #expect(harness.origin.requests("/grace.png").count == 2)
        // And the s-maxage and must-revalidate responses, as stale, made their clients wait for the revalidation
        #expect(try await harness.get("/shared.png").header("X-Cache") == "REVALIDATED")
        #expect(try await harness.get("/strict.png").header("X-Cache") == "REVALIDATED")
        // Past the window the client waits, as without the key
        harness.clock.advance(100)
        #expect(try await harness.get("/grace.png").header("X-Cache") == "REVALIDATED")
    }

    @Test("an s-maxage entry is never served stale when the origin fails (it carries proxy-revalidate): not by the response's stale-if-error, the request's, nor the configured one")
    func sMaxAgeNotStaleOnError() async throws {
        // Given stored s-maxage and max-age responses, both saying stale-if-error, and a generous offline window
        let harness = try ProxyHarness { $0.staleIfErrorSeconds = 3600 }
        let failing = Locked(false)
        for (path, cacheControl) in [("/s.png", "s-maxage=10, stale-if-error=600"), ("/m.png", "max-age=10, stale-if-error=600")] {
            harness.origin.route(path) { _ in
                if failing.withLock({ $0 }) { return Reply(status: 503, headers: [("Content-Type", "text/plain")], body: Array("down".utf8)) }
                return CachingTests.image(cacheControl: cacheControl)
            }
            _ = try await harness.get(path)
        }
        failing.withLock { $0 = true }
        harness.clock.advance(60)
        // When the origin fails
        let shared = try await harness.get("/s.png", headers: [("Cache-Control", "stale-if-error=600")])
        let plain = try await harness.get("/m.png")
        // Then the s-maxage entry's client gets the error, the other the stale copy
        #expect(shared.status == 503, "\(shared.status) \(shared.header("Cache-Status") ?? "")")
        #expect(shared.header("Cache-Status")?.contains("stale-if-error") != true)
        #expect(plain.status == 200 && plain.header("Cache-Status")?.contains("detail=stale-if-error") == true)
    }

    @Test("a client's own conditional fields against the stored image: a weak If-None-Match gets 304; If-Match and If-Unmodified-Since are the origin's (RFC 9111 4.3.2), never a cached 412")
    func clientPreconditions() async throws {
        let harness = try ProxyHarness()
        let modified = "Tue, 01 Jan 2030 00:00:00 GMT"
        harness.origin.route("/p.png") { _ in CachingTests.image(extra: [("Last-Modified", modified)]) }
        _ = try await harness.get("/p.png")
        let wrongTag = try await harness.get("/p.png", headers: [("If-Match", "\"v2\"")])
        let unmodifiedSince = try await harness.get("/p.png", headers: [("If-Unmodified-Since", "Mon, 31 Dec 2029 00:00:00 GMT")])
        let weak = try await harness.get("/p.png", headers: [("If-None-Match", "W/\"v1\"")])
        let since = try await harness.get("/p.png", headers: [("If-Modified-Since", modified)])
        #expect(wrongTag.status == 200 && wrongTag.body == CachingTests.png)
        #expect(unmodifiedSince.status == 200 && unmodifiedSince.body == CachingTests.png)
        #expect(weak.status == 304 && weak.body.isEmpty && weak.header("ETag") == "\"v1\"")
        #expect(since.status == 304)
        #expect(harness.origin.requests("/p.png").count == 1, "every answer came from the cache")
    }

    @Test("Range requests on an image in memory: 206 with Content-Range on a miss (from the stored entry) and on hits, If-Range that holds or not, a HEAD ignores Range")
    func rangesFromMemory() async throws {
        let harness = try ProxyHarness()
        harness.origin.route("/r.png") { _ in CachingTests.image() }
        let miss = try await harness.get("/r.png", headers: [("Range", "bytes=0-3")])
        let part = try await harness.get("/r.png", headers: [("Range", "bytes=0-3")])
        let holds = try await harness.get("/r.png", headers: [("Range", "bytes=4-"), ("If-Range", "\"v1\"")])
        let changed = try await harness.get("/r.png", headers: [("Range", "bytes=4-"), ("If-Range", "\"v0\"")])
        let head = try await harness.get("/r.png", method: "HEAD", headers: [("Range", "bytes=0-3")])
        let count = CachingTests.png.count
        #expect(miss.status == 206 && miss.body == Array(CachingTests.png[0...3]) && miss.header("X-Cache") == "MISS",
                "a miss is fetched whole, stored, and the range cut from it")
        #expect(part.status == 206 && part.body == Array(CachingTests.png[0...3]) && part.header("X-Cache") == "HIT")
        #expect(part.header("Content-Range") == "bytes 0-3/\(count)" && part.header("Content-Length") == "4")
        #expect(part.header("Accept-Ranges") == "bytes")
        #expect(holds.status == 206 && holds.body == Array(CachingTests.png[4...]))
        #expect(changed.status == 200 && changed.body == CachingTests.png)
        #expect(head.status == 200 && head.header("Content-Length") == String(count))
        #expect(harness.origin.requests("/r.png").count == 1)
    }

    @Test("targeted cache control (RFC 9213): CDN-Cache-Control governs a configured origin's response over Cache-Control, which clients still get; fetch mode ignores it; stripping is configured")
    func targetedCacheControl() async throws {
        for strip in [false, true] {
            let harness = try ProxyHarness { $0.stripTargetedCacheControl = strip }
            for path in ["/t.png", "/u.png"] {
                harness.origin.route(path) { _ in
                    CachingTests.image(cacheControl: "no-store", extra: [("CDN-Cache-Control", "max-age=60")])
                }
            }
            let first = try await harness.get("/t.png")
            let second = try await harness.get("/t.png")
            #expect(first.header("X-Cache") == "MISS" && second.header("X-Cache") == "HIT", "strip \(strip)")
            #expect(second.header("Cache-Control") == "no-store" && second.body == CachingTests.png)
            #expect((second.header("CDN-Cache-Control") == nil) == strip && (first.header("CDN-Cache-Control") == nil) == strip)
            // Through fetch mode (an origin that is not configured) Cache-Control's no-store holds (another URL: the
            // three ways in share entries).
            let url = (harness.origin.baseURL + "/u.png").addingPercentEncoding(withAllowedCharacters: .alphanumerics)!
            let fetched = [try await harness.get("/fetch?url=" + url), try await harness.get("/fetch?url=" + url)]
            #expect(fetched.allSatisfy { $0.status == 200 && $0.header("X-Cache") != "HIT" }, "\(fetched.map { $0.header("X-Cache") })")
        }
    }

    @Test("a stale entry with only Last-Modified is revalidated with If-Modified-Since")
    func revalidationByDate() async throws {
        let harness = try ProxyHarness()
        let modified = "Tue, 01 Jan 2030 00:00:00 GMT"
        harness.origin.route("/lm.png") { request in
            if request.header("If-Modified-Since") == modified { return Reply(status: 304, headers: []) }
            return CachingTests.image(cacheControl: "max-age=10", etag: nil, extra: [("Last-Modified", modified)])
        }
        _ = try await harness.get("/lm.png")
        harness.clock.advance(11)
        let second = try await harness.get("/lm.png")
        #expect(second.header("X-Cache") == "REVALIDATED")
        expectSameBytes(second.body, CachingTests.png)
        #expect(harness.origin.requests("/lm.png").last?.header("If-Modified-Since") == modified)
    }

    @Test("a changed ETag replaces the entry")
    func changedETagReplaces() async throws {
        let harness = try ProxyHarness()
        let version = Locked(1)
        let v2 = Fixtures.png(size: 12_345)
        harness.origin.route("/v.png") { _ in
            version.withLock { $0 } == 1 ? CachingTests.image() : CachingTests.image(v2, etag: "\"v2\"")
        }
        _ = try await harness.get("/v.png")
        version.withLock { $0 = 2 }
        harness.clock.advance(120)
        let changed = try await harness.get("/v.png")
        let after = try await harness.get("/v.png")
        expectSameBytes(changed.body, v2)
        #expect(changed.header("ETag") == "\"v2\"")
        #expect(changed.header("X-Cache") == "EXPIRED")
        expectSameBytes(after.body, v2)
        #expect(after.header("X-Cache") == "HIT")
        #expect(harness.origin.requestCount("/v.png") == 2)
    }

    @Test("a no-store response is served but not kept")
    func noStore() async throws {
        let harness = try ProxyHarness()
        harness.origin.route("/ns.png") { _ in CachingTests.image(cacheControl: "no-store") }
        let first = try await harness.get("/ns.png")
        let second = try await harness.get("/ns.png")
        #expect(first.body == CachingTests.png && second.body == CachingTests.png)
        #expect(second.header("X-Cache") == "MISS")
        #expect(harness.origin.requestCount("/ns.png") == 2)
    }

    @Test("a non-image is refused with a reason naming what came back, and not kept")
    func nonImage() async throws {
        let harness = try ProxyHarness()
        harness.origin.route("/page") { _ in
            Reply(status: 200, headers: [("Content-Type", "text/html"), ("Cache-Control", "max-age=60")], body: Array("<html></html>".utf8))
        }
        let first = try await harness.get("/page")
        let second = try await harness.get("/page")
        #expect(first.status == 502)
        #expect(first.text == "upstream sent text/html, not an image\n")
        #expect(second.status == 502)
        #expect(harness.origin.requestCount("/page") == 2)
    }

    @Test("an image whose bytes do not match its declared type is refused")
    func signatureMismatch() async throws {
        let harness = try ProxyHarness()
        harness.origin.route("/fake.png") { _ in CachingTests.image(Array("<html>not a png</html>".utf8)) }
        let response = try await harness.get("/fake.png")
        #expect(response.status == 502)
        #expect(response.text.contains("not a PNG"))
    }

    @Test("--content-types */* turns the image checks off")
    func anyType() async throws {
        let harness = try ProxyHarness { $0.contentTypes = ["*/*"] }
        harness.origin.route("/data.json") { _ in
            Reply(status: 200, headers: [("Content-Type", "application/json"), ("Cache-Control", "max-age=60")], body: Array("{}".utf8))
        }
        #expect(try await harness.get("/data.json").text == "{}")
        #expect(try await harness.get("/data.json").header("X-Cache") == "HIT")
    }

    @Test("an object over --max-object-size is refused and not kept", arguments: [false, true])
    func oversized(chunked: Bool) async throws {
        let harness = try ProxyHarness { $0.maxObjectSizeBytes = 10_000 }
        harness.origin.route("/big.png") { _ in
            var reply = CachingTests.image(Fixtures.png(size: 50_000))
            reply.chunked = chunked
            return reply
        }
        let first = try await harness.get("/big.png")
        let second = try await harness.get("/big.png")
        if chunked {
            // The head went out before the size was known: the client sees a broken response, never a complete one.
            #expect(first.status == 502 || !first.complete)
        } else {
            #expect(first.status == 502)
            #expect(first.text.contains("larger than the 10000-byte limit"))
        }
        #expect(second.status == 502 || !second.complete)
        #expect(harness.origin.requestCount("/big.png") == 2)
    }

    @Test("an upstream reset mid-body leaves the client a broken response, and the next request fetches again")
    func resetMidBody() async throws {
        let harness = try ProxyHarness()
        let attempts = Locked(0)
        let reset = Gate()
        harness.origin.route("/reset.png") { _ in
            var reply = CachingTests.image()
            if attempts.withLock({ $0 += 1; return $0 }) == 1 {
                reply.resetAfterBytes = 10_000
                reply.resetGate = reset
            }
            return reply
        }
        // The origin resets the connection once the client has the head (and the first bytes are on their way)
        let client = try harness.connect()
        try client.request("/reset.png")
        let (status, head) = try await client.head()
        reset.open()
        let broken = try await client.body(status: status, headers: head)
        let retried = try await harness.get("/reset.png")
        #expect(!broken.complete)
        #expect(broken.body.count < CachingTests.png.count)
        #expect(retried.complete && retried.body == CachingTests.png)
        #expect(retried.header("X-Cache") == "MISS")
        #expect(harness.origin.requestCount("/reset.png") == 2)
    }

    @Test("a failed transfer fails every waiter with the same error and is tried again next time")
    func connectFailure() async throws {
        // Given an origin on a port nobody listens on
        let harness = try ProxyHarness { $0.origins = [OriginMapping(prefix: "/", url: "http://127.0.0.1:9")] }
        let first = try await harness.get("/x.png")
        let second = try await harness.get("/x.png")
        #expect(first.status == 502)
        #expect(first.text.hasPrefix("could not connect to upstream"))
        #expect(second.status == 502)
        #expect(second.header("Cache-Control") == "no-store")
    }

    @Test("forward and fetch requests to a private address are refused with 403; the origin sees nothing")
    func privateDestinationRefused() async throws {
        let harness = try ProxyHarness { $0.allowPrivateNetworks = false }
        harness.origin.route("/p.png") { _ in CachingTests.image() }
        let forward = try await harness.get(harness.origin.baseURL + "/p.png")
        let fetch = try await harness.get("/fetch?url=" + (harness.origin.baseURL + "/p.png").addingPercentEncoding(withAllowedCharacters: .alphanumerics)!)
        let reverse = try await harness.get("/p.png")
        #expect(forward.status == 403)
        #expect(forward.text.contains("127.0.0.1 is on a private or reserved network"))
        #expect(fetch.status == 403)
        #expect(reverse.status == 200, "configured origins are trusted")
        #expect(harness.origin.requestCount("/p.png") == 1)
    }

    @Test("a malformed request gets 400 and an oversized header 431, and the daemon goes on serving")
    func badRequests() async throws {
        let harness = try ProxyHarness()
        harness.origin.route("/ok.png") { _ in CachingTests.image() }
        let garbage = try harness.connect()
        try garbage.send("THIS IS NOT HTTP\r\n\r\n")
        #expect(try await garbage.response().status == 400)
        let huge = try harness.connect()
        try huge.send("GET /ok.png HTTP/1.1\r\nHost: x\r\nX-Big: " + String(repeating: "a", count: 40_000) + "\r\n\r\n")
        #expect(try await huge.response().status == 431)
        // A CONNECT to a port outside connect-ports is refused (tunnels: TunnelTests)
        let connect = try await harness.get("127.0.0.1:25", method: "CONNECT")
        #expect(connect.status == 403)
        #expect(connect.text.contains("connect-ports"))
        let delete = try await harness.get(harness.fetchTarget("/ok.png"), method: "DELETE")
        #expect(delete.status == 501, "fetch mode takes GET and HEAD only")
        #expect(try await harness.get("/fetch").status == 400)
        #expect(try await harness.get("/ok.png").status == 200)
    }

    @Test("HEAD on a miss fills the cache; the following GET is a hit")
    func headFillsCache() async throws {
        let harness = try ProxyHarness()
        harness.origin.route("/h.png") { _ in CachingTests.image() }
        let head = try await harness.get("/h.png", method: "HEAD")
        #expect(head.status == 200)
        #expect(head.header("Content-Length") == String(CachingTests.png.count))
        #expect(head.body.isEmpty)
        let get = try await harness.get("/h.png")
        expectSameBytes(get.body, CachingTests.png)
        #expect(harness.origin.requestCount("/h.png") == 1)
        #expect(harness.origin.requests("/h.png").first?.method == "GET")
    }

    @Test("client cache policies: only-if-cached, max-stale, no-cache, and the client's own If-None-Match")
    func clientDirectives() async throws {
        let harness = try ProxyHarness()
        harness.origin.route("/d.png") { request in
            if request.header("If-None-Match") == "\"v1\"" { return Reply(status: 304, headers: [("ETag", "\"v1\"")]) }
            return CachingTests.image()
        }
        // only-if-cached before anything is stored: 504 (the offline case)
        let offline = try await harness.get("/d.png", headers: [("Cache-Control", "only-if-cached")])
        #expect(offline.status == 504)
        #expect(harness.origin.requestCount("/d.png") == 0)
        _ = try await harness.get("/d.png")
        #expect(try await harness.get("/d.png", headers: [("Cache-Control", "only-if-cached")]).header("X-Cache") == "HIT")
        // stale: max-stale serves it without the origin; only-if-cached refuses it
        harness.clock.advance(100)
        let stale = try await harness.get("/d.png", headers: [("Cache-Control", "max-stale")])
        #expect(stale.header("X-Cache") == "STALE")
        expectSameBytes(stale.body, CachingTests.png)
        #expect(try await harness.get("/d.png", headers: [("Cache-Control", "only-if-cached")]).status == 504)
        #expect(harness.origin.requestCount("/d.png") == 1)
        // no-cache: reload through revalidation, even though the entry is fresh again afterwards
        _ = try await harness.get("/d.png")
        let reload = try await harness.get("/d.png", headers: [("Cache-Control", "no-cache")])
        #expect(reload.header("Cache-Status")?.contains("fwd=request") == true)
        #expect(harness.origin.requestCount("/d.png") == 3)
        // the client's own validator matches the stored ETag: 304, no body
        let conditional = try await harness.get("/d.png", headers: [("If-None-Match", "\"v1\"")])
        #expect(conditional.status == 304)
        #expect(conditional.header("ETag") == "\"v1\"")
    }

    @Test("when every waiting client has gone the upstream transfer is cancelled and nothing is stored")
    func cancellation() async throws {
        let finished = DispatchSemaphore(value: 0)
        let gate = Gate()
        let harness = try ProxyHarness()
        harness.origin.route("/gone.png") { _ in var reply = CachingTests.image(); reply.gate = gate; return reply }
        harness.waiters.expect(1)
        harness.waiters.onFinished = { finished.signal() }
        let client = try harness.connect()
        try client.request("/gone.png")
        #expect(await harness.waiters.wait())
        try await harness.origin.waitForRequests("/gone.png", count: 1)  // the transfer is under way
        client.close()
        #expect(await wait(finished), "the fetch was not cancelled")
        gate.open()
        let again = try await harness.get("/gone.png")
        #expect(again.header("X-Cache") == "MISS")
        #expect(harness.origin.requestCount("/gone.png") == 2)
    }

    @Test("a response that may not be shared (Set-Cookie) is not handed to other waiters: they go upstream on their own")
    func notShareable() async throws {
        let harness = try ProxyHarness()
        let gate = Gate()
        let served = Locked(0)
        harness.origin.route("/cookie.png") { _ in
            let n = served.withLock { $0 += 1; return $0 }
            var reply = CachingTests.image(extra: [("Set-Cookie", "session=\(n)")])
            reply.gate = gate
            return reply
        }
        harness.waiters.expect(1)
        let first = try harness.connect()
        try first.request("/cookie.png")
        #expect(await harness.waiters.wait())
        let others = try (0..<2).map { _ in try harness.connect() }
        for connection in others { try connection.request("/cookie.png") }
        // Each of the others is split off (at once, or when the head shows Set-Cookie) and asks on its own.
        try await harness.origin.waitForRequests("/cookie.png", count: 3)
        gate.open()
        let responses = try await readAll([first] + others)
        #expect(responses.allSatisfy { $0.status == 200 && $0.body == CachingTests.png })
        #expect(harness.origin.requestCount("/cookie.png") == 3)
        // No client ever sees another client's cookie.
        #expect(Set(responses.compactMap { $0.header("Set-Cookie") }).count == 3)
    }

    @Test("waiters whose request does not match the response's Vary fetch their own variant, which is stored beside the first")
    func varyMismatch() async throws {
        let harness = try ProxyHarness()
        let gate = Gate()
        harness.origin.route("/vary.png") { _ in
            var reply = CachingTests.image(extra: [("Vary", "Accept")])
            reply.gate = gate
            return reply
        }
        harness.waiters.expect(1)
        let a = try harness.connect()
        try a.request("/vary.png", headers: [("Accept", "image/webp")])
        #expect(await harness.waiters.wait())
        // The second client asks while the first fetch is held at the gate: it is split off (at once, or when the
        // head shows Vary: Accept) and makes its own request.
        let b = try harness.connect()
        try b.request("/vary.png", headers: [("Accept", "image/png")])
        try await harness.origin.waitForRequests("/vary.png", count: 2)
        gate.open()
        expectSameBytes(try await a.response().body, CachingTests.png)
        expectSameBytes(try await b.response().body, CachingTests.png)
        #expect(harness.origin.requestCount("/vary.png") == 2)
        #expect(Set(harness.origin.requests("/vary.png").compactMap { $0.header("Accept") }) == ["image/webp", "image/png"])
        // Both variants were stored: both are hits now.
        for accept in ["image/webp", "image/png"] {
            #expect(try await harness.get("/vary.png", headers: [("Accept", accept)]).header("X-Cache") == "HIT", "\(accept)")
        }
        #expect(harness.origin.requestCount("/vary.png") == 2)
    }
}

@Suite("Serving and caching end to end, more", .timeLimit(.minutes(2)))
struct CachingMoreTests {
    @Test("the private-network check runs on the resolved address: a host name that resolves to loopback is refused")
    func dnsAnswerRefused() async throws {
        let harness = try ProxyHarness { $0.allowPrivateNetworks = false }
        harness.origin.route("/n.png") { _ in CachingTests.image() }
        let response = try await harness.get("http://localhost:\(harness.origin.port)/n.png")
        #expect(response.status == 403)
        #expect(response.text.contains("private or reserved network"))
        #expect(harness.origin.requestCount("/n.png") == 0)
    }

    @Test("with complete-abandoned-fetches a transfer every client left still fills the cache")
    func completeAbandoned() async throws {
        let finished = DispatchSemaphore(value: 0)
        let gate = Gate()
        let harness = try ProxyHarness { $0.completeAbandonedFetches = true }
        harness.origin.route("/keep.png") { _ in var reply = CachingTests.image(); reply.gate = gate; return reply }
        harness.waiters.expect(1)
        harness.waiters.onFinished = { finished.signal() }
        let client = try harness.connect()
        try client.request("/keep.png")
        #expect(await harness.waiters.wait())
        try await harness.origin.waitForRequests("/keep.png", count: 1)  // the transfer is under way
        client.close()  // the only client leaves
        gate.open()
        #expect(await wait(finished))
        let again = try await harness.get("/keep.png")
        #expect(again.header("X-Cache") == "HIT")
        expectSameBytes(again.body, CachingTests.png)
        #expect(harness.origin.requestCount("/keep.png") == 1)
    }

    @Test("the access log writes one line per request with status and cache outcome")
    func accessLog() async throws {
        let lines = LogCapture()
        let finished = DispatchSemaphore(value: 0)
        let harness = try ProxyHarness(logCapture: lines) { $0.accessLog = true }
        harness.waiters.onFinished = { finished.signal() }
        harness.origin.route("/log.png") { _ in CachingTests.image() }
        _ = try await harness.get("/log.png")
        #expect(await wait(finished))  // the fetch logs its line as it ends, just after the client has its bytes
        _ = try await harness.get("/log.png")
        let access = lines.messages.filter { $0.contains("GET /log.png") }
        #expect(access.count == 2)
        #expect(access.first?.contains("200 MISS") == true)
        #expect(access.last?.contains("200 HIT") == true)
        let structured = lines.metadataOfMessages.filter { $0["target"] == "/log.png" }
        #expect(structured.map { $0["cache"] } == ["MISS", "HIT"])
        #expect(structured.allSatisfy { $0["status"] == "200" && $0["method"] == "GET" && $0["bytes"] == "\(CachingTests.png.count)" })
    }

    @Test("fetch mode: upstream requests carry Accept and User-Agent but no hop-by-hop fields or cookies")
    func forwardedHeaders() async throws {
        let harness = try ProxyHarness()
        harness.origin.route("/hdr.png") { _ in CachingTests.image() }
        _ = try await harness.get(harness.fetchTarget("/hdr.png"), headers: [
            ("Accept", "image/avif,image/webp"), ("User-Agent", "thumbnailer/2"), ("Cookie", "a=b"),
            ("Connection", "keep-alive, X-Private"), ("X-Private", "secret"), ("Keep-Alive", "timeout=5"),
        ])
        let seen = try #require(harness.origin.requests("/hdr.png").first)
        #expect(seen.header("Accept") == "image/avif,image/webp")
        #expect(seen.header("User-Agent") == "thumbnailer/2")
        #expect(seen.header("Cookie") == nil)
        #expect(seen.header("X-Private") == nil)
        #expect(seen.header("Keep-Alive") == nil)
        #expect(seen.header("Via") == harness.daemon.loopGuard.viaValue)
        #expect(seen.header("Via")?.hasPrefix("1.1 imagecached-") == true)
    }

    @Test("hop-by-hop fields from the origin do not reach the client")
    func responseHopByHop() async throws {
        let harness = try ProxyHarness()
        harness.origin.route("/hop.png") { _ in
            CachingTests.image(extra: [("Connection", "X-Origin-Secret"), ("X-Origin-Secret", "1"), ("Keep-Alive", "timeout=5")])
        }
        for _ in 0..<2 {
            let response = try await harness.get("/hop.png")
            #expect(response.header("X-Origin-Secret") == nil)
            #expect(response.header("Keep-Alive") == nil)
            expectSameBytes(response.body, CachingTests.png)
        }
    }

    @Test("an HTTP/1.0 client of a streamed body that breaks upstream gets a reset, not a clean end")
    func closeDelimitedAbortResets() async throws {
        let harness = try ProxyHarness()
        let gate = Gate(), reset = Gate()
        harness.origin.route("/drip.png") { _ in
            var reply = CachingTests.image()
            reply.chunked = true      // no Content-Length: the HTTP/1.0 client gets a close-delimited body
            reply.resetAfterBytes = 5000
            reply.resetGate = reset
            reply.gate = gate
            return reply
        }
        let client = try harness.connect()
        try client.send("GET /drip.png HTTP/1.0\r\n\r\n")
        gate.open()
        // The origin resets its connection once the client has the head (5,000 body bytes are on their way)
        let (status, head) = try await client.head()
        reset.open()
        let response = try await client.body(status: status, headers: head)
        #expect(status == 200 && response.header("Content-Length") == nil)
        #expect(!response.complete, "a broken close-delimited body must not end with a clean close")
        #expect(client.resetByPeer && !client.timedOut)
    }

    @Test("fetch mode: a response reached through a temporary redirect is served but not stored; a permanent one is stored")
    func redirects() async throws {
        let harness = try ProxyHarness()
        harness.origin.route("/temp.png") { _ in Reply.redirect(302, to: "/final.png") }
        harness.origin.route("/perm.png") { _ in Reply.redirect(301, to: "/final.png") }
        harness.origin.route("/final.png") { _ in CachingTests.image() }
        let first = try await harness.get(harness.fetchTarget("/temp.png"))
        let second = try await harness.get(harness.fetchTarget("/temp.png"))
        #expect(first.body == CachingTests.png && second.body == CachingTests.png)
        #expect(second.header("X-Cache") == "MISS")
        #expect(harness.origin.requestCount("/temp.png") == 2)
        _ = try await harness.get(harness.fetchTarget("/perm.png"))
        let permanent = try await harness.get(harness.fetchTarget("/perm.png"))
        #expect(permanent.header("X-Cache") == "HIT")
        #expect(harness.origin.requestCount("/perm.png") == 1)
    }

    @Test("a fetch-mode request cannot ride on a connection a configured origin opened to a private address")
    func noReuseOfTrustedConnections() async throws {
        let harness = try ProxyHarness { $0.allowPrivateNetworks = false }
        harness.origin.route("/warm.png") { _ in CachingTests.image() }
        harness.origin.route("/secret.png") { _ in CachingTests.image() }
        // Given a warm keep-alive connection to the (trusted, loopback) origin
        #expect(try await harness.get("/warm.png").status == 200)
        // When an untrusted request names the same host and port
        let url = (harness.origin.baseURL + "/secret.png").addingPercentEncoding(withAllowedCharacters: .alphanumerics)!
        let response = try await harness.get("/fetch?url=" + url)
        // Then it is judged on a connection of its own, and refused
        #expect(response.status == 403)
        #expect(harness.origin.requestCount("/secret.png") == 0)
    }

    @Test("a configured origin's redirect, even to another private address, goes to the client as it is and is not followed")
    func trustedRedirectPassed() async throws {
        let harness = try ProxyHarness { $0.allowPrivateNetworks = false }
        let port = harness.origin.port
        harness.origin.route("/hop.png") { _ in Reply.redirect(302, to: "http://127.0.0.2:\(port)/x.png") }
        let response = try await harness.get("/hop.png")
        #expect(response.status == 302)
        #expect(response.header("Location") == "http://127.0.0.2:\(port)/x.png")
        #expect(response.text == "moved")
        #expect(harness.origin.requestCount("/x.png") == 0)
    }
}
