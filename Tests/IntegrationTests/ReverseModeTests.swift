// Reverse mode as a transparent HTTP cache in front of a configured origin: every method passes through with its body
// and fields, every status comes back with its own body, request fields are forwarded as nginx does, and an unsafe
// method's success invalidates what is stored (RFC 9111 4.4). Real daemon, real libcurl, a local origin.

import Foundation
import Synchronization
import Testing
import ImageCacheStatus
import ImageCacheConfig
import ImageCacheHTTP
import ImageCacheServer
@testable import ImageCacheOps
import ImageCacheUpstream
import ImageCacheCore
import ImageCacheTestSupport
import ImageCacheSystem

@Suite("Reverse mode: every method and status passes through a configured origin", .timeLimit(.minutes(2)))
struct ReverseModeTests {
    static let png = Fixtures.png(size: 3000)

    static func image(_ extra: [(String, String)] = []) -> Reply {
        Reply(status: 200, headers: [("Content-Type", "image/png"), ("Cache-Control", "max-age=600")] + extra, body: png)
    }

    /// One request with a body on a new connection.
    static func send(_ harness: ProxyHarness, _ method: String, _ target: String, headers: [(String, String)] = [],
                     body: [UInt8] = []) async throws -> TestResponse {
        let client = try harness.connect()
        var head = "\(method) \(target) HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        for (name, value) in headers { head += "\(name): \(value)\r\n" }
        if !body.isEmpty || ["POST", "PUT", "PATCH"].contains(method) { head += "Content-Length: \(body.count)\r\n" }
        try client.send(Array((head + "\r\n").utf8) + body)
        return try await client.response(forHEAD: method == "HEAD")
    }

    @Test("a 304 that answers no conditional request is passed on as the origin's status, uncached and labelled PASS; fetch mode answers 502 with the reason")
    func unconditional304() async throws {
        // Given an origin that answers 304 to a request carrying no validator (the cache holds no copy of the URL)
        let harness = try ProxyHarness()
        harness.origin.route("/odd.png") { _ in
            Reply(status: 304, headers: [("ETag", "\"v1\""), ("Cache-Control", "max-age=600")], body: [])
        }
        // When
        let first = try await harness.get("/odd.png")
        let second = try await harness.get("/odd.png")
        let fetched = try await harness.get(harness.fetchTarget("/odd.png"))
        // Then reverse mode passes the origin's status on: nothing was revalidated, nothing kept
        #expect(first.status == 304 && second.status == 304)
        #expect(first.header("X-Cache") == "PASS" && second.header("X-Cache") == "PASS")
        #expect(first.header("Cache-Status")?.contains("fwd-status=304") == true)
        #expect(first.header("Cache-Status")?.contains("stored") == false)
        // And fetch mode refuses it with the reason
        #expect(fetched.status == 502)
        #expect(fetched.text.contains("upstream answered 304 Not Modified to a request that was not conditional"), "\(fetched.text)")
        // And every request reached the origin, none of them conditional
        let seen = harness.origin.requests("/odd.png")
        #expect(seen.count == 3)
        #expect(seen.allSatisfy { $0.header("If-None-Match") == nil && $0.header("If-Modified-Since") == nil })
    }

    @Test("an unsafe method reaches the origin with its body and end-to-end fields; the origin's answer comes back as it is, counted as PASS",
          arguments: ["POST", "PUT", "PATCH", "DELETE", "REPORT"])
    func methodsPassThrough(method: String) async throws {
        // Given
        let harness = try ProxyHarness()
        harness.origin.route("/doc") { request in
            Reply(status: 201, headers: [("Content-Type", "application/json"), ("Location", "/doc/7"), ("X-Origin", "1")],
                  body: Array("{\"made\":\"\(request.method)\",\"bytes\":\(request.body.count)}".utf8))
        }
        let body = Array(repeating: UInt8(ascii: "x"), count: 70_000)
        let passed = DispatchSemaphore(value: 0)
        harness.waiters.onPassFinished = { passed.signal() }
        // When
        let response = try await Self.send(harness, method, "/doc", headers: [
            ("Content-Type", "application/octet-stream"), ("If-Match", "\"v3\""), ("Authorization", "Bearer abc"),
            ("Cookie", "s=1"), ("Referer", "http://app.test/"), ("X-Request-Id", "r-9"), ("Via", "1.1 edge"),
            ("Connection", "keep-alive, X-Hop"), ("X-Hop", "secret"), ("Keep-Alive", "timeout=5"),
        ], body: body)
        // Then the client has the origin's response
        #expect(response.status == 201)
        #expect(response.text == "{\"made\":\"\(method)\",\"bytes\":70000}")
        #expect(response.header("Location") == "/doc/7" && response.header("X-Origin") == "1")
        #expect(response.header("X-Cache") == "PASS")
        #expect(response.header("Cache-Status") == "imagecached; fwd=method; fwd-status=201")
        // And the origin had the request as the client sent it, hop-by-hop fields aside
        let seen = try #require(harness.origin.requests("/doc").first)
        #expect(seen.method == method && seen.body == body)
        for name in ["Content-Type", "If-Match", "Authorization", "Cookie", "Referer", "X-Request-Id"] {
            #expect(seen.header(name) != nil, "\(name) was not forwarded")
        }
        #expect(seen.header("X-Hop") == nil && seen.header("Keep-Alive") == nil)
        #expect(seen.header("Via") == "1.1 edge, " + harness.daemon.loopGuard.viaValue)
        #expect(seen.header("Host") == "127.0.0.1:\(harness.origin.port)")
        // And, once the transfer has ended (the client may have the last byte before), it is counted
        #expect(await wait(passed))
        let stats = try await OperationsTests.stats(harness)
        #expect(stats.requests["pass"] == 1)
        #expect(stats.upstream.transfers["ok"] == 1)
    }

    @Test("a non-error answer to an unsafe method removes the stored target, Location and Content-Location on the same origin; an error answer, a safe method and another origin's URL remove nothing")
    func invalidation() async throws {
        // Given five stored images
        let harness = try ProxyHarness()
        for name in ["a", "b", "c", "d", "e"] { harness.origin.route("/\(name).png") { _ in Self.image() } }
        let other = "http://127.0.0.2:\(harness.origin.port)", base = harness.origin.baseURL
        harness.origin.route("/a.png?edit") { _ in
            Reply(status: 303, headers: [("Location", "/b.png"), ("Content-Location", base + "/c.png")])
        }
        harness.origin.route("/d.png?edit") { _ in Reply(status: 500, body: Array("failed".utf8)) }
        harness.origin.route("/e.png?edit") { _ in Reply(status: 200, headers: [("Location", other + "/e.png")]) }
        for name in ["a", "b", "c", "d", "e"] {
            _ = try await harness.get("/\(name).png")
            #expect(try await harness.get("/\(name).png").header("X-Cache") == "HIT")
        }
        // When
        let invalidating = try await Self.send(harness, "POST", "/a.png?edit", body: Array("w=1".utf8))
        let failing = try await Self.send(harness, "PUT", "/d.png?edit", body: Array("w=2".utf8))
        let elsewhere = try await Self.send(harness, "PATCH", "/e.png?edit", body: Array("w=3".utf8))
        let options = try await Self.send(harness, "OPTIONS", "/e.png")
        // Then
        #expect(invalidating.status == 303 && failing.status == 500 && elsewhere.status == 200 && options.status == 200)
        #expect(failing.text == "failed")
        // The POST's target is /a.png?edit: its own URL (nothing stored), Location /b.png, Content-Location /c.png
        for name in ["b", "c"] {
            #expect(try await harness.get("/\(name).png").header("X-Cache") == "MISS", "/\(name).png was not invalidated")
        }
        for name in ["a", "d", "e"] {
            #expect(try await harness.get("/\(name).png").header("X-Cache") == "HIT", "/\(name).png was invalidated")
        }
        // A non-error answer to the target URI itself removes it
        harness.origin.route("/a.png") { request in request.method == "DELETE" ? Reply(status: 204) : Self.image() }
        #expect(try await Self.send(harness, "DELETE", "/a.png").status == 204)
        #expect(try await harness.get("/a.png").header("X-Cache") == "MISS")
    }

    @Test("statuses pass through with their own bodies and fields: a redirect is not followed, an error page is not replaced (and says nosniff), 204 and 206 as sent; nothing is stored")
    func statusesPassThrough() async throws {
        let harness = try ProxyHarness { $0.negativeTTLSeconds = 0 }
        let page = Array("<html><body>no such image</body></html>".utf8)
        harness.origin.route("/moved.png") { _ in Reply(status: 301, headers: [("Location", "/new.png")], body: Array("moved".utf8)) }
        harness.origin.route("/new.png") { _ in Self.image() }
        harness.origin.route("/gone.png") { _ in Reply(status: 404, headers: [("Content-Type", "text/html"), ("X-Origin", "1")], body: page) }
        harness.origin.route("/down.png") { _ in Reply(status: 503, headers: [("Content-Type", "text/html"), ("Retry-After", "5")], body: page) }
        harness.origin.route("/empty.png") { _ in Reply(status: 204, headers: [("X-Origin", "1")]) }
        harness.origin.route("/part.png") { _ in
            Reply(status: 206, headers: [("Content-Type", "image/png"), ("Content-Range", "bytes 0-9/3000")], body: Array(Self.png.prefix(10)))
        }
        for _ in 0..<2 {
            let moved = try await harness.get("/moved.png")
            #expect(moved.status == 301 && moved.header("Location") == "/new.png" && moved.text == "moved")
            let gone = try await harness.get("/gone.png")
            #expect(gone.status == 404 && gone.body == page && gone.header("Content-Type") == "text/html")
            #expect(gone.header("X-Origin") == "1" && gone.header("X-Content-Type-Options") == "nosniff")
            let down = try await harness.get("/down.png")
            #expect(down.status == 503 && down.body == page && down.header("Retry-After") == "5")
            let empty = try await harness.get("/empty.png")
            #expect(empty.status == 204 && empty.body.isEmpty && empty.header("X-Origin") == "1")
            let part = try await harness.get("/part.png")
            #expect(part.status == 206 && part.body == Array(Self.png.prefix(10)) && part.header("Content-Range") == "bytes 0-9/3000")
            let head = try await harness.get("/gone.png", method: "HEAD")
            #expect(head.status == 404 && head.header("Content-Type") == "text/html")
        }
        #expect(harness.origin.requestCount("/new.png") == 0, "a redirect was followed")
        // HEAD is fetched with GET: each /gone.png round is a GET and a HEAD, every one upstream (nothing stored)
        for (path, count) in [("/moved.png", 2), ("/gone.png", 4), ("/down.png", 2), ("/empty.png", 2), ("/part.png", 2)] {
            #expect(harness.origin.requestCount(path) == count, "\(path) was answered from the cache")
        }
    }

    @Test("a missing image (404) is answered from the cache for negative-ttl, then asked again; 20 clients at once make one origin request; a stored 404 answers If-None-Match, Range and HEAD with itself; it survives a restart on disk")
    func negativeCaching() async throws {
        // Given an origin that answers 404 with its page, held until 20 clients wait
        let harness = try ProxyHarness()
        let page = Array("<html>no such thumbnail</html>".utf8)
        let gate = Gate()
        harness.origin.route("/thumb.png") { _ in
            var reply = Reply(status: 404, headers: [("Content-Type", "text/html"), ("ETag", "\"p1\"")], body: page)
            reply.gate = gate
            return reply
        }
        harness.waiters.expect(20)
        let clients = try (0..<20).map { _ in try harness.connect() }
        for client in clients { try client.request("/thumb.png") }
        #expect(await harness.waiters.wait(), "20 clients never waited on one fetch")
        // When
        gate.open()
        let first = try await readAll(clients)
        // Then one origin request answered all of them, and the 404 is stored
        #expect(first.allSatisfy { $0.status == 404 && $0.body == page && $0.header("X-Content-Type-Options") == "nosniff" })
        #expect(first.filter { $0.header("X-Cache") == "COALESCED" }.count == 19)
        #expect(harness.origin.requestCount("/thumb.png") == 1)
        let hit = try await harness.get("/thumb.png")
        #expect(hit.status == 404 && hit.header("X-Cache") == "HIT" && hit.body == page)
        #expect(hit.header("X-Content-Type-Options") == "nosniff")
        let conditional = try await harness.get("/thumb.png", headers: [("If-None-Match", "\"p1\"")])
        let ranged = try await harness.get("/thumb.png", headers: [("Range", "bytes=0-3")])
        let head = try await harness.get("/thumb.png", method: "HEAD")
        #expect(conditional.status == 404 && conditional.body == page, "a 304 is for a 2xx")
        #expect(ranged.status == 404 && ranged.body == page, "a 206 is for a 200")
        #expect(head.status == 404 && head.header("X-Cache") == "HIT")
        // A restart keeps it (the status is in the disk entry)
        await harness.flushDisk()
        try harness.restart()
        let fromDisk = try await harness.get("/thumb.png")
        #expect(fromDisk.status == 404 && fromDisk.body == page && fromDisk.header("Cache-Status")?.contains("detail=disk") == true)
        #expect(harness.origin.requestCount("/thumb.png") == 1)
        // Past negative-ttl (10 s) the origin is asked again, conditionally (the stored 404 has an ETag)
        harness.clock.advance(11)
        let again = try await harness.get("/thumb.png")
        #expect(again.status == 404 && again.body == page)
        #expect(harness.origin.requestCount("/thumb.png") == 2)
        #expect(harness.origin.requests("/thumb.png").last?.header("If-None-Match") == "\"p1\"")
    }

    @Test("a configured origin's 301, 410, 204 with max-age and 500 with Expires are stored; a 302 or 500 without freshness is not")
    func storedStatuses() async throws {
        let harness = try ProxyHarness()
        let future = "Thu, 01 Jan 2099 00:00:00 GMT"
        let routes: [(String, Reply, Bool)] = [
            ("/perm", Reply(status: 301, headers: [("Location", "/new"), ("Cache-Control", "max-age=60")], body: Array("moved".utf8)), true),
            ("/gone", Reply(status: 410, headers: [("Content-Type", "text/plain")], body: Array("gone".utf8)), true),
            ("/none", Reply(status: 204, headers: [("Cache-Control", "max-age=60")]), true),
            ("/fail", Reply(status: 500, headers: [("Expires", future)], body: Array("down".utf8)), true),
            ("/temp", Reply(status: 302, headers: [("Location", "/new")], body: Array("moved".utf8)), false),
            ("/oops", Reply(status: 500, body: Array("down".utf8)), false),
        ]
        for (path, reply, _) in routes { harness.origin.route(path) { _ in reply } }
        for (path, reply, stored) in routes {
            let first = try await harness.get(path)
            let second = try await harness.get(path)
            #expect(first.status == reply.status && second.status == reply.status && second.body == reply.body)
            #expect(second.header("X-Cache") == (stored ? "HIT" : "MISS"), "\(path)")
            #expect(harness.origin.requestCount(path) == (stored ? 1 : 2), "\(path)")
        }
    }

    @Test("every end-to-end request field reaches the origin on a cached GET, but not the client's preconditions, Range or Accept-Encoding; drop-request-fields removes the named ones")
    func requestFields() async throws {
        let harness = try ProxyHarness { $0.dropRequestFields = ["X-Debug"] }
        harness.origin.route("/f.png") { _ in Self.image([("ETag", "\"v1\"")]) }
        _ = try await harness.get("/f.png", headers: [
            ("Accept", "image/avif"), ("Cookie", "s=1"), ("Referer", "http://app.test/"), ("X-Tenant", "t1"),
            ("X-Debug", "1"), ("If-None-Match", "\"v0\""), ("If-Modified-Since", "Tue, 01 Jan 2030 00:00:00 GMT"),
            ("Range", "bytes=0-9"), ("Accept-Encoding", "gzip"), ("Connection", "X-Hop"), ("X-Hop", "1"),
        ])
        let seen = try #require(harness.origin.requests("/f.png").first)
        #expect(seen.header("Accept") == "image/avif" && seen.header("Cookie") == "s=1")
        #expect(seen.header("Referer") == "http://app.test/" && seen.header("X-Tenant") == "t1")
        for name in ["X-Debug", "If-None-Match", "If-Modified-Since", "Range", "Accept-Encoding", "X-Hop"] {
            #expect(seen.header(name) == nil, "\(name) was forwarded")
        }
    }

    @Test("reverse mode varies on any forwarded field: one variant per X-Tenant value, its value normalised (white space, field lines combined); a dropped field cannot split the cache")
    func varyOnAnyField() async throws {
        let harness = try ProxyHarness { $0.dropRequestFields = ["X-Debug"] }
        harness.origin.route("/t.png") { request in
            Self.image([("Vary", "X-Tenant, X-Debug"), ("X-Served-For", request.header("X-Tenant") ?? "-")])
        }
        let a1 = try await harness.get("/t.png", headers: [("X-Tenant", "a, b")])
        let b1 = try await harness.get("/t.png", headers: [("X-Tenant", "c")])
        let a2 = try await harness.get("/t.png", headers: [("X-Tenant", "a"), ("X-Tenant", " b"), ("X-Debug", "1")])
        let b2 = try await harness.get("/t.png", headers: [("X-Tenant", "c"), ("X-Debug", "2")])
        #expect([a1, b1].map { $0.header("X-Cache") } == ["MISS", "MISS"])
        #expect([a2, b2].map { $0.header("X-Cache") } == ["HIT", "HIT"])
        #expect(a2.header("X-Served-For") == "a, b" && b2.header("X-Served-For") == "c")
        #expect(harness.origin.requestCount("/t.png") == 2)
    }

    @Test("fields a cache must not store or must update: a chunked response is stored without Transfer-Encoding (hits framed by Content-Length, from disk too); the origin's Age counts toward freshness; a 304 updates fields but not Content-Length or Content-Type")
    func storedFields() async throws {
        let harness = try ProxyHarness()
        let revalidations = Locked(0)
        harness.origin.route("/c.png") { request in
            if request.header("If-None-Match") == "\"v1\"" {
                revalidations.withLock { $0 += 1 }
                return Reply(status: 304, headers: [("ETag", "\"v1\""), ("Cache-Control", "max-age=120"), ("X-Version", "2"),
                                                    ("Content-Type", "text/html"), ("Content-Length", "5")])
            }
            return Reply(status: 200, headers: [("Content-Type", "image/png"), ("Cache-Control", "max-age=120"), ("Age", "100"),
                                                ("ETag", "\"v1\""), ("X-Version", "1")], body: Self.png, chunked: true)
        }
        let first = try await harness.get("/c.png")
        let hit = try await harness.get("/c.png")
        #expect(first.body == Self.png && hit.header("X-Cache") == "HIT")
        #expect(hit.header("Transfer-Encoding") == nil && hit.header("Content-Length") == String(Self.png.count))
        #expect(Int(hit.header("Age") ?? "") ?? 0 >= 100, "the origin's Age is part of the entry's age")
        // 21 s later the entry is 121 s old: stale (max-age=120), although it has been stored for only 21 s
        harness.clock.advance(21)
        let refreshed = try await harness.get("/c.png")
        #expect(refreshed.header("X-Cache") == "REVALIDATED" && revalidations.withLock { $0 } == 1)
        #expect(refreshed.header("X-Version") == "2", "a 304 updates the stored fields")
        #expect(refreshed.header("Content-Type") == "image/png" && refreshed.body == Self.png)
        #expect(refreshed.header("Content-Length") == String(Self.png.count))
        await harness.flushDisk()
        try harness.restart()
        let fromDisk = try await harness.get("/c.png")
        #expect(fromDisk.header("Transfer-Encoding") == nil && fromDisk.body == Self.png && fromDisk.header("X-Version") == "2")
    }

    @Test("private=\"X-User, Set-Cookie\": the first client gets those fields, a client that joined the fetch and every later hit get the response without them (RFC 9111 5.2.2.7)")
    func qualifiedPrivate() async throws {
        let harness = try ProxyHarness()
        let gate = Gate()
        harness.origin.route("/me.png") { _ in
            var reply = Self.image([("Cache-Control", "max-age=60, private=\"X-User, Set-Cookie\""), ("X-User", "alice"),
                                    ("Set-Cookie", "s=alice")])
            reply.gate = gate
            return reply
        }
        harness.waiters.expect(2)
        let leader = try harness.connect()
        try leader.request("/me.png")
        let joined = try harness.connect()
        try joined.request("/me.png")
        #expect(await harness.waiters.wait(), "two clients never waited on one fetch")
        gate.open()
        let first = try await leader.response(), second = try await joined.response()
        let hit = try await harness.get("/me.png")
        let (own, other) = first.header("X-Cache") == "COALESCED" ? (second, first) : (first, second)
        #expect(own.header("X-User") == "alice" && own.header("Set-Cookie") == "s=alice")
        #expect(other.header("X-Cache") == "COALESCED" && other.header("X-User") == nil && other.header("Set-Cookie") == nil)
        #expect(hit.header("X-Cache") == "HIT" && hit.header("X-User") == nil && hit.header("Set-Cookie") == nil)
        #expect([own, other, hit].allSatisfy { $0.body == Self.png })
        #expect(harness.origin.requestCount("/me.png") == 1)
    }

    @Test("stale-if-error serves a stale copy that has no validator too (memory and disk), when the origin answers 503 or cannot be reached")
    func staleIfErrorWithoutValidators() async throws {
        let harness = try ProxyHarness()
        let down = Locked(false)
        harness.origin.route("/s.png") { _ in
            down.withLock { $0 } ? Reply(status: 503, body: Array("down".utf8))
                : Reply(status: 200, headers: [("Content-Type", "image/png"), ("Cache-Control", "max-age=1, stale-if-error=600")],
                        body: Self.png)
        }
        #expect(try await harness.get("/s.png").header("X-Cache") == "MISS")
        harness.clock.advance(30)
        down.withLock { $0 = true }
        let stale = try await harness.get("/s.png")
        #expect(stale.status == 200 && stale.body == Self.png)
        #expect(stale.header("Cache-Status")?.contains("detail=stale-if-error") == true)
        // From the disk tier after a restart, with the origin gone altogether
        await harness.flushDisk()
        try harness.restart()
        harness.origin.stop()
        let offline = try await harness.get("/s.png")
        #expect(offline.status == 200 && offline.body == Self.png && offline.header("X-Cache") == "STALE")
    }

    @Test("forward and fetch modes send only forward-request-fields on the requests the cache answers (and fetch mode takes GET and HEAD only)")
    func fetchModeFields() async throws {
        let harness = try ProxyHarness { $0.forwardRequestFields = ["Accept", "X-Trace"] }
        harness.origin.route("/g.png") { _ in Self.image() }
        let target = harness.fetchTarget("/g.png")
        _ = try await harness.get(target, headers: [("Accept", "image/webp"), ("X-Trace", "t"), ("User-Agent", "ua/1"),
                                                    ("Cookie", "s=1")])
        let seen = try #require(harness.origin.requests("/g.png").first)
        #expect(seen.header("Accept") == "image/webp" && seen.header("X-Trace") == "t")
        #expect(seen.header("Cookie") == nil)
        #expect(seen.header("User-Agent") == "imagecached/\(imagecachedVersion)", "not in the list: the daemon's own")
        let post = try await Self.send(harness, "POST", target, body: [1, 2, 3])
        #expect(post.status == 501 && post.text.contains("only GET and HEAD") && post.header("Allow") == "GET, HEAD",
                "refused at its head (it announced a body), with Allow as when refused whole")
    }

    @Test("a request body at server.max-request-body passes; one byte more is refused with 413 before the origin is asked")
    func requestBodyLimit() async throws {
        let harness = try ProxyHarness { $0.server.maxRequestBodyBytes = 4096 }
        harness.origin.route("/up") { request in Reply(status: 200, body: Array("\(request.body.count)".utf8)) }
        let atLimit = try await Self.send(harness, "PUT", "/up", body: Array(repeating: 1, count: 4096))
        let over = try await Self.send(harness, "PUT", "/up", body: Array(repeating: 1, count: 4097))
        #expect(atLimit.status == 200 && atLimit.text == "4096")
        #expect(over.status == 413)
        #expect(harness.origin.requestCount("/up") == 1)
    }

    @Test("an upload is streamed: the origin has the request before its client has sent the whole body, and gets every byte through many rounds of a 16 KiB window")
    func uploadStreams() async throws {
        // Given an origin that reports each request head as it arrives, and the smallest write buffer (the window)
        let harness = try ProxyHarness {
            $0.server.writeBufferBytes = 16 << 10
            $0.server.maxRequestBodyBytes = 4 << 20
        }
        let body = Fixtures.jpeg(size: 2_000_000)
        harness.origin.route("/up") { request in Reply(status: 201, body: Array("\(request.body == body)".utf8)) }
        let started = AsyncStream<String>.makeStream()
        harness.origin.onRequestHead { request in started.continuation.yield(request.method + " " + request.target) }
        // When the client sends the head and half the body
        let client = try harness.connect()
        try client.send(Array("PUT /up HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: \(body.count)\r\n\r\n".utf8) + body.prefix(1000))
        // Then the origin has the request already (read whole first, it would wait for the other half)
        var heads = started.stream.makeAsyncIterator()
        #expect(await heads.next() == "PUT /up")
        // And once the rest is sent, the origin has the body byte for byte
        try client.send(Array(body.dropFirst(1000)))
        let response = try await client.response()
        #expect(response.status == 201 && response.text == "true")
        #expect(harness.origin.requests("/up").first?.header("Content-Length") == String(body.count))
    }

    @Test("a chunked upload goes upstream chunked, whole; one that grows past server.max-request-body is answered 413 and the origin gets no complete request")
    func chunkedUpload() async throws {
        let harness = try ProxyHarness {
            $0.server.maxRequestBodyBytes = 64 << 10
            $0.server.writeBufferBytes = 16 << 10
        }
        harness.origin.route("/up") { request in Reply(status: 200, body: Array("\(request.body.count)".utf8)) }
        let part = Array(repeating: UInt8(ascii: "z"), count: 40 << 10)
        func chunk(_ bytes: [UInt8]) -> [UInt8] { Array((String(bytes.count, radix: 16) + "\r\n").utf8) + bytes + [13, 10] }
        let head = Array("POST /up HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n".utf8)
        // Within the limit
        let fits = try harness.connect()
        try fits.send(head + chunk(part) + chunk(Array(part.prefix(1000))) + Array("0\r\n\r\n".utf8))
        let ok = try await fits.response()
        #expect(ok.status == 200 && ok.text == String(part.count + 1000))
        #expect(harness.origin.requests("/up").first?.header("Transfer-Encoding") == "chunked")
        // Past it
        let grows = try harness.connect()
        try grows.send(head + chunk(part) + Array((String(part.count, radix: 16) + "\r\n").utf8))
        let refused = try await grows.response()
        #expect(refused.status == 413 && refused.text.contains("request body too large"))
        #expect(harness.origin.requestCount("/up") == 1, "the refused upload reached the origin whole")
    }

    @Test("an origin's 103 Early Hints reach HTTP/1.1 clients before the response, on a passed-through POST and a cached GET (every client waiting on the fetch); HTTP/1.0 clients get none (RFC 9110 15.2)")
    func earlyHints() async throws {
        let harness = try ProxyHarness()
        let hints: [(status: Int, headers: [(String, String)])] = [(103, [("Link", "</style.css>; rel=preload; as=style")])]
        let gate = Gate()
        harness.origin.route("/page") { _ in
            var reply = Reply(status: 200, headers: [("Content-Type", "text/plain")], body: Array("done".utf8))
            reply.interim = hints
            return reply
        }
        harness.origin.route("/hinted.png") { _ in
            var reply = Self.image()
            reply.interim = hints
            reply.gateBeforeHead = gate   // nothing until both clients wait on the fetch
            return reply
        }
        // A passed-through POST
        let post = try harness.connect()
        try post.send("POST /page HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1\r\n\r\nx")
        let early = try await post.head()
        #expect(early.status == 103 && early.headers.contains { $0.0 == "Link" && $0.1 == "</style.css>; rel=preload; as=style" })
        let final = try await post.response()
        #expect(final.status == 200 && final.text == "done")
        // A cached GET: both clients waiting on the fetch get the hint before the image
        harness.waiters.expect(2)
        let clients = try (0..<2).map { _ in try harness.connect() }
        for client in clients { try client.request("/hinted.png") }
        #expect(await harness.waiters.wait(), "two clients never waited on one fetch")
        gate.open()
        for client in clients {
            let (status, _) = try await client.head()
            #expect(status == 103)
            expectSameBytes(try await client.response().body, Self.png)
        }
        // HTTP/1.0: none (the hint goes to the fetch's clients only; a hit has none either)
        let old = try harness.connect()
        try old.send("POST /page HTTP/1.0\r\nHost: 127.0.0.1\r\nContent-Length: 1\r\n\r\nx")
        let plain = try await old.response()
        #expect(plain.status == 200 && plain.text == "done")
    }

    @Test("a 1xx goes whole only to the client whose request the origin answers; the other clients waiting on that fetch get only its Link fields")
    func interimFieldsStayWithTheirClient() async throws {
        // Given an origin whose 103 carries a cookie and a private field besides its Link, held until both clients wait
        let harness = try ProxyHarness()
        let gate = Gate()
        let upstreamAgent = Locked<String?>(nil)
        harness.origin.route("/mine.png") { request in
            upstreamAgent.withLock { $0 = request.header("User-Agent") }
            var reply = Self.image()
            reply.interim = [(103, [("Link", "</a.css>; rel=preload; as=style"), ("Set-Cookie", "session=for-the-leader"),
                                    ("X-Debug", "internal")])]
            reply.gateBeforeHead = gate
            return reply
        }
        harness.waiters.expect(2)
        let clients = try ["client-a", "client-b"].map { agent in
            let client = try harness.connect()
            try client.request("/mine.png", headers: [("User-Agent", agent)])
            return (agent, client)
        }
        #expect(await harness.waiters.wait(), "two clients never waited on one fetch")
        // When
        gate.open()
        var hints: [String: [(String, String)]] = [:]
        for (agent, client) in clients {
            let (status, headers) = try await client.head()
            #expect(status == 103)
            hints[agent] = headers
            expectSameBytes(try await client.response().body, Self.png)
        }
        // Then the leader (whose User-Agent the origin saw: it is forwarded) had the whole hint, the other its Link only
        let leader = try #require(upstreamAgent.withLock { $0 })
        for (agent, headers) in hints {
            #expect(headers.contains { $0.0 == "Link" && $0.1 == "</a.css>; rel=preload; as=style" })
            if agent == leader {
                #expect(headers.contains { $0.0 == "Set-Cookie" && $0.1 == "session=for-the-leader" })
                #expect(headers.contains { $0.0 == "X-Debug" })
            } else {
                #expect(!headers.contains { $0.0.lowercased() == "set-cookie" }, "another client's cookie reached \(agent)")
                #expect(!headers.contains { $0.0.lowercased() == "x-debug" })
            }
        }
        #expect(harness.origin.requestCount("/mine.png") == 1)
    }

    @Test("a Range request for an object over max-object-size is passed to the origin with its Range (206 from there, BYPASS); without Range the object is refused 502; forward mode refuses both")
    func rangeOverObjectLimit() async throws {
        let harness = try ProxyHarness { $0.maxObjectSizeBytes = 10_000 }
        let big = Fixtures.jpeg(size: 50_000)
        harness.origin.route("/big.jpg") { request in
            guard let range = request.header("Range") else {
                return Reply(status: 200, headers: [("Content-Type", "image/jpeg")], body: big)
            }
            #expect(range == "bytes=100-199")
            return Reply(status: 206, headers: [("Content-Type", "image/jpeg"), ("Content-Range", "bytes 100-199/50000")],
                         body: Array(big[100..<200]))
        }
        let part = try await harness.get("/big.jpg", headers: [("Range", "bytes=100-199")])
        #expect(part.status == 206 && part.body == Array(big[100..<200]))
        #expect(part.header("Content-Range") == "bytes 100-199/50000" && part.header("X-Cache") == "BYPASS")
        let whole = try await harness.get("/big.jpg")
        #expect(whole.status == 502 && whole.text.contains("max-object-size"))
        let forward = try await harness.get(harness.fetchTarget("/big.jpg"), headers: [("Range", "bytes=100-199")])
        #expect(forward.status == 502)
        #expect(harness.origin.requests("/big.jpg").compactMap { $0.header("Range") } == ["bytes=100-199"])
    }

    @Test("TRACE is 405 unless pass-trace; Max-Forwards: 0 on OPTIONS or TRACE is answered by the daemon (TRACE echoes without credentials); more is decremented")
    func traceAndMaxForwards() async throws {
        let refusing = try ProxyHarness()
        let refused = try await refusing.get("/t", method: "TRACE")
        #expect(refused.status == 405 && refused.header("Allow")?.contains("TRACE") == false)
        #expect(refused.text.contains("pass-trace"))
        #expect(refusing.origin.requestCount("/t") == 0)

        let harness = try ProxyHarness { $0.passTrace = true }
        harness.origin.route("/t") { request in Reply(status: 200, body: Array("\(request.method) mf=\(request.header("Max-Forwards") ?? "-")".utf8)) }
        let traced = try await harness.get("/t", method: "TRACE", headers: [("Max-Forwards", "3")])
        #expect(traced.status == 200 && traced.text == "TRACE mf=2")
        let options = try await harness.get("/t", method: "OPTIONS", headers: [("Max-Forwards", "1")])
        #expect(options.text == "OPTIONS mf=0")
        let deleted = try await harness.get("/t", method: "DELETE", headers: [("Max-Forwards", "0")])
        #expect(deleted.text == "DELETE mf=0", "other methods carry Max-Forwards unchanged")
        let here = try await harness.get("/t", method: "OPTIONS", headers: [("Max-Forwards", "0")])
        #expect(here.status == 200 && here.header("Allow")?.hasSuffix("OPTIONS, TRACE") == true)
        let echo = try await harness.get("/t", method: "TRACE", headers: [("Max-Forwards", "0"), ("Authorization", "Bearer s3cret"),
                                                                         ("Cookie", "s=1"), ("X-Probe", "p")])
        #expect(echo.status == 200 && echo.header("Content-Type") == "message/http")
        #expect(echo.text.hasPrefix("TRACE /t HTTP/1.1\r\n") && echo.text.contains("X-Probe: p\r\n"))
        #expect(!echo.text.contains("s3cret") && !echo.text.contains("s=1"))
        #expect(harness.origin.requestCount("/t") == 3)
    }

    @Test("a passed-through response to a client that does not read holds the origin back at the delivery window; read later, it is whole")
    func passthroughBackpressure() async throws {
        // Given a 64 KiB write buffer (the delivery window) and an origin answering a POST with 8 MiB
        let harness = try ProxyHarness { $0.server.writeBufferBytes = 64 << 10 }
        let size = 8 << 20
        harness.origin.route("/export") { _ in Reply(status: 200, headers: [("Content-Type", "application/octet-stream")],
                                                     body: Fixtures.jpeg(size: size)) }
        let client = try TestConnection(port: harness.port, receiveBuffer: 16 << 10)
        try client.send("POST /export HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2\r\n\r\ngo")
        // When the client reads nothing, the window fills
        #expect(await harness.pauses.wait(for: 1), "the transfer never held back")
        let stats = try await OperationsTests.stats(harness)
        // Then the daemon holds at most the window and one read of it (without backpressure: nearly all 8 MiB)
        #expect(stats.upstream.inFlightBytes <= 128 << 10, "\(stats.upstream.inFlightBytes) bytes in flight")
        #expect(stats.upstream.paused >= 1)
        // And read, the body is whole, and nothing stays counted
        let response = try await client.response()
        #expect(response.status == 200 && response.complete)
        expectSameBytes(response.body, Fixtures.jpeg(size: size))
        #expect((try await OperationsTests.stats(harness)).upstream.inFlightBytes == 0)
    }

    @Test("an origin that cannot be reached gives the daemon's 502 with its reason to a passed-through request")
    func unreachable() async throws {
        let harness = try ProxyHarness { $0.origins = [OriginMapping(prefix: "/", url: "http://127.0.0.1:9")] }
        let response = try await Self.send(harness, "POST", "/x", body: [1])
        #expect(response.status == 502)
        #expect(response.text.contains("could not connect to upstream"))
    }
}
