// Forward mode (absolute-form requests: `curl -x`, a program's http_proxy) passes what is not an image and every method
// through, uncached (forward-non-images pass, the default); refuse keeps 502 and 501; fetch mode refuses either way.
// proxy-allow decides who may use the forward proxy at all. The real daemon, real libcurl, curl itself as the client
// where a program's view matters, and a scripted origin on 127.0.0.1.

import Foundation
import Testing
@testable import ImageCacheHTTP
@testable import ImageCacheConfig
@testable import ImageCacheServer

@Suite("Forward mode passes non-images and other methods through", .timeLimit(.minutes(1)))
struct ForwardPassTests {
    static let page = Array("<!doctype html><title>a page</title><script src=\"/app.js\"></script>".utf8)

    static func html(_ extra: [(String, String)] = []) -> Reply {
        Reply(status: 200, headers: [("Content-Type", "text/html; charset=utf-8")] + extra, body: page)
    }

    @Test("an HTML page through curl -x twice: the origin's bytes both times, the origin asked twice, labelled not-image and counted as not_image")
    func htmlTwice() async throws {
        // Given an origin whose page even says it may be cached
        let harness = try ProxyHarness()
        harness.origin.route("/page.html") { _ in Self.html([("Cache-Control", "max-age=600")]) }
        let url = harness.origin.baseURL + "/page.html"
        // When curl asks for it through the proxy twice
        let first = try await CurlProcess.run(proxyPort: harness.port, [url])
        let second = try await CurlProcess.run(proxyPort: harness.port, [url])
        // Then both have the page as the origin sent it, never stored
        for response in [first, second] {
            #expect(response.exitStatus == 0, "\(response.stderr)")
            #expect(response.status == 200 && response.body == Self.page)
            #expect(response.header("Content-Type") == "text/html; charset=utf-8")
            #expect(response.header("Cache-Status") == "imagecached; fwd=bypass; fwd-status=200; detail=not-image")
            #expect(response.header("X-Cache") == "BYPASS")
            #expect(response.header("Content-Security-Policy") == nil, "a page passed on keeps its scripts")
        }
        #expect(harness.origin.requestCount("/page.html") == 2)
        let metrics = try await harness.get("/_imagecached/metrics")
        #expect(metrics.text.contains("imagecached_requests_total{outcome=\"not_image\"} 2"))
        #expect(metrics.text.contains("imagecached_served_bytes_total{outcome=\"not_image\"} \(2 * Self.page.count)"))
    }

    @Test("a POST with a body and a Cookie arrives at the origin whole through curl -x; the origin's answer comes back as PASS")
    func postArrivesWhole() async throws {
        let harness = try ProxyHarness()
        harness.origin.route("/submit") { request in
            Reply(status: 201, headers: [("Content-Type", "application/json")], body: Array("{\"bytes\":\(request.body.count)}".utf8))
        }
        let body = Fixtures.jpeg(size: 300_000)
        // When
        let response = try await CurlProcess.run(proxyPort: harness.port, [
            "--data-binary", "@-", "-H", "Content-Type: application/octet-stream", "-b", "session=s1",
            "-H", "Via: 1.1 corporate-gateway",
            harness.origin.baseURL + "/submit",
        ], input: body)
        // Then the origin has the request as curl sent it
        #expect(response.exitStatus == 0, "\(response.stderr)")
        #expect(response.status == 201 && response.text == "{\"bytes\":300000}")
        #expect(response.header("X-Cache") == "PASS")
        let seen = try #require(harness.origin.requests("/submit").first)
        #expect(seen.method == "POST")
        #expect(seen.body == body)
        #expect(seen.header("Cookie") == "session=s1")
        #expect(seen.header("Content-Type") == "application/octet-stream")
        #expect(seen.header("Via")?.hasPrefix("1.1 corporate-gateway, 1.1 imagecached-") == true, "\(seen.header("Via") ?? "no Via")")
        #expect(harness.origin.requestCount("/submit") == 1, "a POST is never retried")
    }

    @Test("a request body at server.max-request-body is passed; one byte more is refused with 413 before the origin is asked")
    func requestBodyLimit() async throws {
        let harness = try ProxyHarness { $0.server.maxRequestBodyBytes = 4096 }
        harness.origin.route("/up") { request in Reply(status: 200, body: Array("\(request.body.count)".utf8)) }
        let url = harness.origin.baseURL + "/up"
        let atLimit = try await CurlProcess.run(proxyPort: harness.port, ["-X", "PUT", "--data-binary", "@-", url],
                                                input: Array(repeating: 1, count: 4096))
        let over = try await CurlProcess.run(proxyPort: harness.port, ["-X", "PUT", "--data-binary", "@-", url],
                                             input: Array(repeating: 1, count: 4097))
        #expect(atLimit.status == 200 && atLimit.text == "4096")
        #expect(over.status == 413)
        #expect(harness.origin.requestCount("/up") == 1)
    }

    @Test("an origin's 404 page is passed with its status and body (nosniff); a HEAD is fetched with GET and gets the head alone")
    func notFoundPassed() async throws {
        let harness = try ProxyHarness()
        harness.origin.route("/page.html") { _ in Self.html() }
        // The test origin answers unknown targets 404 "not found" (text/plain)
        let missing = try await harness.get(harness.origin.baseURL + "/missing.png")
        #expect(missing.status == 404 && missing.text == "not found")
        #expect(missing.header("X-Content-Type-Options") == "nosniff")
        #expect(missing.header("Cache-Status") == "imagecached; fwd=bypass; fwd-status=404; detail=not-image")
        let head = try await harness.get(harness.origin.baseURL + "/page.html", method: "HEAD")
        #expect(head.status == 200 && head.body.isEmpty)
        #expect(head.header("Cache-Status")?.hasSuffix("detail=not-image") == true)
        #expect(harness.origin.requests("/page.html").map(\.method) == ["GET"])
    }

    @Test("a forward POST to a private address is refused 403 like a forward GET; the origin sees neither")
    func privatePostRefused() async throws {
        // Given the private-network guard on (the origin listens on 127.0.0.1)
        let harness = try ProxyHarness { $0.allowPrivateNetworks = false }
        harness.origin.route("/submit") { _ in Reply(status: 201, body: Array("made".utf8)) }
        let url = harness.origin.baseURL + "/submit"
        // When
        let post = try await CurlProcess.run(proxyPort: harness.port, ["--data-binary", "a=1", url])
        let get = try await harness.get(url)
        // Then
        #expect(post.status == 403)
        #expect(post.text.contains("127.0.0.1 is on a private or reserved network"), "\(post.text)")
        #expect(get.status == 403)
        #expect(harness.origin.requestCount("/submit") == 0)
        // A configured origin stays trusted
        #expect(try await ReverseModeTests.send(harness, "POST", "/submit", body: [1]).status == 201)
    }

    @Test("forward-non-images refuse: a page gets 502 and a POST 501 (refused at its head); fetch mode answers the same under pass")
    func refused() async throws {
        for (configure, prefix) in [({ (configuration: inout Configuration) in configuration.forwardNonImages = .refuse }, "forward"),
                                    ({ (_: inout Configuration) in }, "fetch")] {
            let harness = try ProxyHarness(configure)
            harness.origin.route("/page.html") { _ in Self.html() }
            harness.origin.route("/submit") { _ in Reply(status: 201, body: []) }
            let page = prefix == "forward" ? harness.origin.baseURL + "/page.html" : harness.fetchTarget("/page.html")
            let submit = prefix == "forward" ? harness.origin.baseURL + "/submit" : harness.fetchTarget("/submit")
            let refusedPage = try await harness.get(page)
            #expect(refusedPage.status == 502, "\(prefix)")
            #expect(refusedPage.text.contains("text/html"), "\(prefix): \(refusedPage.text)")
            let post = try await ReverseModeTests.send(harness, "POST", submit, body: Array("a=1".utf8))
            #expect(post.status == 501 && post.header("Allow") == "GET, HEAD", "\(prefix)")
            #expect(harness.origin.requestCount("/submit") == 0, "\(prefix)")
        }
    }

    @Test("a client outside proxy-allow gets 403 naming the key for forward requests of any method; its origin-form requests are served")
    func proxyAllowRefuses() async throws {
        // Given proxy-allow without the test's own address (127.0.0.1)
        let harness = try ProxyHarness { $0.proxyAllow = [AddressRange("10.0.0.0/8")!] }
        harness.origin.route("/a.png") { _ in Reply.ok(Fixtures.png()) }
        // When
        let get = try await harness.get(harness.origin.baseURL + "/a.png")
        let post = try await CurlProcess.run(proxyPort: harness.port, ["--data-binary", "a=1", harness.origin.baseURL + "/a.png"])
        // Then
        #expect(get.status == 403 && get.text.contains("proxy-allow") && get.text.contains("127.0.0.1"))
        #expect(post.status == 403 && post.text.contains("proxy-allow"))
        #expect(harness.origin.requestCount("/a.png") == 0)
        // Reverse mode and /fetch are not proxy requests
        #expect(try await harness.get("/a.png").status == 200)
        #expect(try await harness.get(harness.fetchTarget("/a.png")).status == 200)
        // A body is refused with the same 403 as soon as its head is in, whatever else the settings would say about it
        // (under refuse, a client in proxy-allow would get 501: the refused client must not learn that)
        let strict = try ProxyHarness { configuration in
            configuration.proxyAllow = [AddressRange("10.0.0.0/8")!]
            configuration.forwardNonImages = .refuse
        }
        let refusedPost = try await CurlProcess.run(proxyPort: strict.port, ["--data-binary", "a=1", strict.origin.baseURL + "/a.png"])
        #expect(refusedPost.status == 403 && refusedPost.text.contains("proxy-allow"), "\(refusedPost.status) \(refusedPost.text)")
    }

    @Test("an image through forward mode is still checked, stored and served from the cache: a MISS, then a HIT with the same bytes")
    func imageStillCached() async throws {
        let harness = try ProxyHarness()
        let image = Fixtures.png(size: 4096)
        harness.origin.route("/photo.png") { _ in
            Reply(status: 200, headers: [("Content-Type", "image/png"), ("Cache-Control", "max-age=600")], body: image)
        }
        let url = harness.origin.baseURL + "/photo.png"
        let first = try await CurlProcess.run(proxyPort: harness.port, [url])
        let second = try await CurlProcess.run(proxyPort: harness.port, [url])
        #expect(first.status == 200 && first.body == image && first.header("X-Cache") == "MISS")
        #expect(second.status == 200 && second.body == image && second.header("X-Cache") == "HIT")
        #expect(second.header("Content-Security-Policy") == UntrustedResponse.contentSecurityPolicy, "an image keeps the untrusted fields")
        #expect(harness.origin.requestCount("/photo.png") == 1)
    }

    @Test("a daemon listening beyond loopback with proxy-allow beyond loopback warns of an open proxy at start; loopback alone does not")
    func openProxyWarned() throws {
        let open = LogCapture()
        _ = try ProxyHarness(logCapture: open) {
            $0.listen = ListenAddress(host: "0.0.0.0", port: 0)
            $0.proxyAllow = AddressRange.loopback + [AddressRange("10.0.0.0/8")!]
        }
        #expect(open.messages.contains { $0.hasPrefix("warning open proxy: proxy-allow lets 10.0.0.0/8") }, "\(open.messages)")
        let closed = LogCapture()
        _ = try ProxyHarness(logCapture: closed) { $0.listen = ListenAddress(host: "0.0.0.0", port: 0) }
        #expect(!closed.messages.contains { $0.contains("open proxy") })
    }
}
