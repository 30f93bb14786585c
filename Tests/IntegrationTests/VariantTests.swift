// Several variants of one URL end to end: the real daemon (port 0) in front of an origin on 127.0.0.1 that answers
// `Vary: Accept` with a different image per Accept value.

import Foundation
import Testing
import ImageCacheStatus
@testable import ImageCacheHTTP
@testable import ImageCacheConfig
@testable import ImageCacheStore
@testable import ImageCacheCore
@testable import ImageCacheOps
import ImageCacheTestSupport

@Suite("Variants end to end", .timeLimit(.minutes(2)))
struct VariantTests {
    static let webp = Fixtures.png(size: 20_000)
    static let png = Fixtures.png(size: 30_000)
    static let avif = Fixtures.png(size: 40_000)

    /// An origin route whose image depends on the request's Accept.
    static func negotiate(_ harness: ProxyHarness, _ path: String) {
        harness.origin.route(path) { request in
            let accept = request.header("Accept") ?? ""
            let body = accept.contains("webp") ? webp : accept.contains("avif") ? avif : png
            return Reply(status: 200, headers: [("Content-Type", "image/png"), ("Cache-Control", "max-age=600"),
                                                ("Vary", "Accept"), ("ETag", "\"\(body.count)\"")], body: body)
        }
    }

    static func get(_ harness: ProxyHarness, _ path: String, accept: String) async throws -> TestResponse {
        try await harness.get(path, headers: [("Accept", accept)])
    }

    @Test("Vary: Accept with two Accept values gives two entries, both hits in memory, on disk and after a restart; a purge removes both")
    func twoVariants() async throws {
        let harness = try ProxyHarness()
        Self.negotiate(harness, "/v.png")
        let webp = try await Self.get(harness, "/v.png", accept: "image/webp")
        let png = try await Self.get(harness, "/v.png", accept: "image/png")
        #expect(webp.body == Self.webp && webp.header("X-Cache") == "MISS")
        #expect(png.body == Self.png && png.header("Cache-Status")?.contains("fwd=vary-miss") == true)
        // Both are hits now, each with its own body.
        for (accept, body) in [("image/webp", Self.webp), ("image/png", Self.png), ("image/webp", Self.webp)] {
            let hit = try await Self.get(harness, "/v.png", accept: accept)
            #expect(hit.header("X-Cache") == "HIT" && hit.body == body, "\(accept)")
        }
        #expect(harness.origin.requestCount("/v.png") == 2)
        let key = CacheKey(try UpstreamURL.parse(harness.origin.baseURL + "/v.png"))
        #expect(harness.daemon.proxy.memory.variants(key).count == 2)
        await harness.flushDisk()
        #expect(harness.daemon.proxy.disk?.stats.entries == 2)

        // From disk, after a restart (memory empty).
        try harness.restart()
        for (accept, body) in [("image/png", Self.png), ("image/webp", Self.webp)] {
            let hit = try await Self.get(harness, "/v.png", accept: accept)
            #expect(hit.body == body && hit.header("Cache-Status")?.contains("detail=disk") == true, "\(accept)")
        }
        #expect(harness.origin.requestCount("/v.png") == 2)

        // A purge of the URL takes both variants, in memory and on disk.
        #expect(try await harness.purge("/v.png").status == 200)
        #expect(harness.daemon.proxy.memory.variants(key).isEmpty)
        #expect(harness.daemon.proxy.disk?.stats.entries == 0)
        for accept in ["image/webp", "image/png"] {
            #expect(try await Self.get(harness, "/v.png", accept: accept).header("X-Cache") == "MISS")
        }
        #expect(harness.origin.requestCount("/v.png") == 4)
    }

    @Test("max-variants bounds the variants of a URL: a third Accept value evicts the least recently used one")
    func bound() async throws {
        let harness = try ProxyHarness {
            $0.maxVariants = 2
            $0.diskLimitBytes = 0
        }
        Self.negotiate(harness, "/b.png")
        _ = try await Self.get(harness, "/b.png", accept: "image/webp")
        _ = try await Self.get(harness, "/b.png", accept: "image/png")
        #expect(try await Self.get(harness, "/b.png", accept: "image/webp").header("X-Cache") == "HIT")
        // png is now the least recently used variant: avif takes its place.
        expectSameBytes(try await Self.get(harness, "/b.png", accept: "image/avif").body, Self.avif)
        #expect(try await Self.get(harness, "/b.png", accept: "image/webp").header("X-Cache") == "HIT")
        #expect(try await Self.get(harness, "/b.png", accept: "image/avif").header("X-Cache") == "HIT")
        let again = try await Self.get(harness, "/b.png", accept: "image/png")
        #expect(again.header("X-Cache") == "MISS" && again.body == Self.png)
        #expect(harness.origin.requestCount("/b.png") == 4)
        // avif evicted png, then png evicted the least recently used of the two (webp).
        #expect(harness.daemon.proxy.memory.evictionCount == 2)
    }

    @Test("clients that another variant's response sends away share one fetch of their own variant")
    func variantWaitersCoalesce() async throws {
        let harness = try ProxyHarness()
        let webpGate = Gate(), pngGate = Gate()
        harness.origin.route("/c.png") { request in
            let webp = request.header("Accept") == "image/webp"
            var reply = Reply(status: 200, headers: [("Content-Type", "image/png"), ("Cache-Control", "max-age=600"),
                                                     ("Vary", "Accept")], body: webp ? Self.webp : Self.png)
            reply.gate = webp ? webpGate : pngGate
            reply.gateAfterBytes = 100
            return reply
        }
        harness.waiters.expect(1)
        let a = try harness.connect()
        try a.request("/c.png", headers: [("Accept", "image/webp")])
        #expect(await harness.waiters.wait())
        // A has the head (Vary: Accept) while the rest of its body waits at the gate.
        let head = try await a.head()
        #expect(head.status == 200)
        harness.waiters.expect(2)
        let b1 = try harness.connect(), b2 = try harness.connect()
        try b1.request("/c.png", headers: [("Accept", "image/png")])
        try b2.request("/c.png", headers: [("Accept", "image/png")])
        // Both png clients wait on one fetch of the png variant.
        #expect(await harness.waiters.wait())
        webpGate.open()
        pngGate.open()
        expectSameBytes(try await a.body(status: head.status, headers: head.headers).body, Self.webp)
        let pngs = try await readAll([b1, b2])
        #expect(pngs.allSatisfy { $0.body == Self.png })
        #expect(harness.origin.requestCount("/c.png") == 2)
        for accept in ["image/webp", "image/png"] {
            #expect(try await Self.get(harness, "/c.png", accept: accept).header("X-Cache") == "HIT", "\(accept)")
        }
    }

    @Test("a request that only another variant could answer, with only-if-cached, is a 504 naming the variant")
    func onlyIfCachedOtherVariant() async throws {
        let harness = try ProxyHarness()
        Self.negotiate(harness, "/o.png")
        _ = try await Self.get(harness, "/o.png", accept: "image/webp")
        let refused = try await harness.get("/o.png", headers: [("Accept", "image/png"), ("Cache-Control", "only-if-cached")])
        #expect(refused.status == 504)
        #expect(refused.text.contains(CacheDecision.otherVariant))
        #expect(harness.origin.requestCount("/o.png") == 1)
    }
}
