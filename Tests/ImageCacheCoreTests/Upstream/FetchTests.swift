// Coalescing and the Fetch state machine, driven through Proxy with a MockOrigin (no sockets, no curl).

import Foundation
import Logging
import Testing
@testable import ImageCacheCore

@Suite("Fetch: coalescing without sockets", .timeLimit(.minutes(1)))
struct FetchTests {
    static let png: [UInt8] = [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A] + Array(repeating: 7, count: 100)
    static let client = ClientInfo(address: "127.0.0.1", isLoopback: true)

    static func proxy(_ origin: MockOrigin, _ configure: (inout Configuration) -> Void = { _ in }) -> Proxy {
        var configuration = Configuration()
        configure(&configuration)
        return Proxy(configuration: configuration, origin: origin, logger: Logger(label: "test") { _ in SwiftLogNoOpLogHandler() })
    }

    static func request(_ url: String, _ headers: [(String, String)] = []) -> HTTPRequestHead {
        HTTPRequestHead(method: "GET", target: url, headers: HTTPHeaders([("Host", "o")] + headers))
    }

    static func imageHead(_ extra: [(String, String)] = []) -> HTTPResponseHead {
        HTTPResponseHead(status: 200, headers: HTTPHeaders([("Content-Type", "image/png"), ("Cache-Control", "max-age=60"),
                                                            ("ETag", "\"v1\"")] + extra))
    }

    /// Waits until the proxy queue has run everything queued so far (twice: events hop once more).
    static func settle(_ proxy: Proxy) { proxy.queue.sync {}; proxy.queue.sync {} }

    @Test("N concurrent requests for one key make one upstream fetch, and every client gets the same bytes")
    func oneFetch() throws {
        // Given a suspended origin
        let origin = MockOrigin()
        let proxy = FetchTests.proxy(origin)
        let sinks = (0..<20).map { _ in MockSink() }
        // When 20 clients ask for one URL
        for sink in sinks { proxy.handle(FetchTests.request("http://o.test/a.png"), body: [], client: FetchTests.client, sink: sink) }
        FetchTests.settle(proxy)
        let transfer = try #require(origin.take())
        transfer.respond(FetchTests.imageHead(), body: FetchTests.png)
        FetchTests.settle(proxy)
        // Then
        #expect(origin.fetchCount == 1)
        #expect(sinks.allSatisfy { $0.status == 200 && $0.body == FetchTests.png && $0.ended })
        #expect(sinks.filter { $0.header("X-Cache") == "COALESCED" }.count == 19)
        #expect(proxy.coalescer.isEmpty)
    }

    @Test("a finished fetch lets go of its transfer")
    func noLeak() throws {
        let origin = MockOrigin()
        let proxy = FetchTests.proxy(origin)
        proxy.handle(FetchTests.request("http://o.test/a.png"), body: [], client: FetchTests.client, sink: MockSink())
        FetchTests.settle(proxy)
        do {
            let transfer = try #require(origin.take())
            transfer.respond(FetchTests.imageHead(), body: FetchTests.png)
            FetchTests.settle(proxy)
        }
        #expect(origin.liveTransfers == 0)
    }

    @Test("when every client leaves, the transfer is cancelled and nothing is stored")
    func cancel() throws {
        let origin = MockOrigin()
        let proxy = FetchTests.proxy(origin)
        let a = MockSink(), b = MockSink()
        for sink in [a, b] { proxy.handle(FetchTests.request("http://o.test/a.png"), body: [], client: FetchTests.client, sink: sink) }
        FetchTests.settle(proxy)
        let transfer = try #require(origin.take())
        a.leave()
        FetchTests.settle(proxy)
        #expect(!transfer.isCancelled, "one client still waits")
        b.leave()
        FetchTests.settle(proxy)
        #expect(transfer.isCancelled)
        #expect(proxy.coalescer.isEmpty)
        #expect(proxy.memory.count == 0)
    }

    @Test("a client joining while the image check runs, with other Vary values, goes upstream alone")
    func varyWhileChecking() throws {
        let origin = MockOrigin()
        let proxy = FetchTests.proxy(origin) { $0.allowSVG = true }
        let a = MockSink(), b = MockSink()
        proxy.handle(FetchTests.request("http://o.test/a.svg", [("Accept", "image/webp")]), body: [], client: FetchTests.client, sink: a)
        FetchTests.settle(proxy)
        let first = try #require(origin.take())
        first.events(.head(HTTPResponseHead(status: 200, headers: ["Content-Type": "image/svg+xml", "Cache-Control": "max-age=60", "Vary": "Accept"]),
                           url: "http://o.test/a.svg", redirects: []))
        first.events(.body(Array("<?xml version=\"1.0\"?>".utf8)))  // not enough to decide: still checking
        FetchTests.settle(proxy)
        proxy.handle(FetchTests.request("http://o.test/a.svg", [("Accept", "image/avif")]), body: [], client: FetchTests.client, sink: b)
        FetchTests.settle(proxy)
        #expect(origin.fetchCount == 2)
        #expect(origin.requests.last?.headers["Accept"] == "image/avif")
    }

    @Test("after a 304, a collapsed client of another variant is sent upstream alone, not given the stored variant")
    func varyAfter304() throws {
        let origin = MockOrigin()
        let now = Date()
        let proxy = FetchTests.proxy(origin)
        let url = try UpstreamURL.parse("http://o.test/a.png")
        let stale = CacheEntry(key: CacheKey(url), head: FetchTests.imageHead([("Vary", "Accept"), ("Date", HTTPDate.format(now.addingTimeInterval(-100)))]),
                               body: FetchTests.png, requestTime: now.addingTimeInterval(-100), responseTime: now.addingTimeInterval(-100),
                               requestHeaders: ["Accept": "image/webp"], policy: FreshnessPolicy())
        proxy.memory.insert(stale)
        let a = MockSink(), b = MockSink()
        proxy.handle(FetchTests.request(url.string, [("Accept", "image/webp")]), body: [], client: FetchTests.client, sink: a)
        proxy.handle(FetchTests.request(url.string, [("Accept", "image/avif")]), body: [], client: FetchTests.client, sink: b)
        FetchTests.settle(proxy)
        let revalidation = try #require(origin.take())
        #expect(revalidation.request.headers["If-None-Match"] == "\"v1\"")
        revalidation.events(.head(HTTPResponseHead(status: 304, headers: ["ETag": "\"v1\"", "Cache-Control": "max-age=60"]),
                                  url: url.string, redirects: []))
        FetchTests.settle(proxy)
        #expect(a.status == 200 && a.body == FetchTests.png)
        #expect(a.header("X-Cache") == "REVALIDATED")
        #expect(b.status == nil, "the avif client must not get the webp variant")
        #expect(origin.fetchCount == 2)
    }

    @Test("a failure after the head went out aborts every client; before it, each gets the error")
    func failures() throws {
        let origin = MockOrigin()
        let proxy = FetchTests.proxy(origin)
        let early = MockSink()
        proxy.handle(FetchTests.request("http://o.test/x.png"), body: [], client: FetchTests.client, sink: early)
        FetchTests.settle(proxy)
        try #require(origin.take()).events(.failed(.connect("refused")))
        FetchTests.settle(proxy)
        #expect(early.status == 502 && early.ended)

        let late = MockSink()
        proxy.handle(FetchTests.request("http://o.test/y.png"), body: [], client: FetchTests.client, sink: late)
        FetchTests.settle(proxy)
        let transfer = try #require(origin.take())
        transfer.events(.head(FetchTests.imageHead([("Content-Length", "200")]), url: "http://o.test/y.png", redirects: []))
        transfer.events(.body(Array(FetchTests.png.prefix(50))))
        transfer.events(.failed(.broken("reset")))
        FetchTests.settle(proxy)
        #expect(late.status == 200 && late.aborted && !late.ended)
        #expect(proxy.memory.count == 0)
    }
}
