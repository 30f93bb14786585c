// Coalescing and the Fetch state machine, driven through Proxy with a MockOrigin (no sockets, no curl).

import Foundation
import Logging
import Testing
import ImageCacheStatus
@testable import ImageCacheHTTP
@testable import ImageCacheConfig
@testable import ImageCacheServer
@testable import ImageCacheStore
@testable import ImageCacheUpstream
@testable import ImageCacheCore

@Suite("Fetch: coalescing without sockets", .timeLimit(.minutes(1)))
struct FetchTests {
    static let png: [UInt8] = [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A] + Array(repeating: 7, count: 100)
    static let client = ClientInfo(address: "127.0.0.1", isLoopback: true)

    static func proxy(_ origin: MockOrigin, attached: Attached? = nil,
                      _ configure: (inout Configuration) -> Void = { _ in }) -> Proxy {
        var configuration = Configuration()
        configure(&configuration)
        var events: (@Sendable (ProxyEvent) -> Void)?
        if let attached { events = { attached.observe($0) } }
        return Proxy(configuration: configuration, origin: origin, logger: Logger(label: "test") { _ in SwiftLogNoOpLogHandler() },
                     events: events)
    }

    /// Says when `count` clients wait on one fetch (the proxy's waiterAttached events).
    final class Attached: Sendable {
        private let count: Int
        private let reached = DispatchSemaphore(value: 0)
        init(_ count: Int) { self.count = count }
        func observe(_ event: ProxyEvent) {
            if case let .waiterAttached(_, waiters) = event, waiters == count { reached.signal() }
        }
        func wait(timeout: Double = 10) -> Bool { reached.wait(timeout: .now() + timeout) == .success }
    }

    /// What the proxy queue holds once the work already queued on it has run (a read of its state, not a wait for
    /// work still to come).
    static func fetchesInFlight(_ proxy: Proxy) -> Int { proxy.fetchesInFlight }

    static func request(_ url: String, _ headers: [(String, String)] = []) -> HTTPRequestHead {
        HTTPRequestHead(method: "GET", target: url, headers: HTTPHeaders([("Host", "o")] + headers))
    }

    static func imageHead(_ extra: [(String, String)] = []) -> HTTPResponseHead {
        HTTPResponseHead(status: 200, headers: HTTPHeaders([("Content-Type", "image/png"), ("Cache-Control", "max-age=60"),
                                                            ("ETag", "\"v1\"")] + extra))
    }

    @Test("N concurrent requests for one key make one upstream fetch, and every client gets the same bytes")
    func oneFetch() throws {
        // Given a suspended origin
        let origin = MockOrigin()
        let attached = Attached(20)
        let proxy = FetchTests.proxy(origin, attached: attached)
        let sinks = (0..<20).map { _ in MockSink() }
        // When 20 clients ask for one URL, and all of them wait on its fetch before the origin answers
        for sink in sinks { proxy.handle(FetchTests.request("http://o.test/a.png"), body: [], client: FetchTests.client, sink: sink) }
        let transfer = try #require(origin.next())
        #expect(attached.wait(), "20 clients never waited on one fetch")
        transfer.respond(FetchTests.imageHead(), body: FetchTests.png)
        #expect(sinks.allSatisfy { $0.waitForEnd() })
        // Then
        #expect(origin.fetchCount == 1)
        #expect(sinks.allSatisfy { $0.status == 200 && $0.body == FetchTests.png && $0.ended })
        #expect(sinks.filter { $0.header("X-Cache") == "COALESCED" }.count == 19)
        #expect(FetchTests.fetchesInFlight(proxy) == 0)
    }

    @Test("a response for many clients reaches each event loop as one task, not one per client")
    func oneHopPerLoop() throws {
        let origin = MockOrigin()
        let attached = Attached(20)
        let proxy = FetchTests.proxy(origin, attached: attached)
        let loops = [CountingExecutor(), CountingExecutor()]
        let sinks = (0..<20).map { MockSink(executor: loops[$0 % 2]) }
        for sink in sinks { proxy.handle(FetchTests.request("http://o.test/a.png"), body: [], client: FetchTests.client, sink: sink) }
        let transfer = try #require(origin.next())
        #expect(attached.wait(), "20 clients never waited on one fetch")
        // A whole body (Content-Length known): each client's whole response, all of one loop's in one task.
        transfer.respond(FetchTests.imageHead([("Content-Length", String(FetchTests.png.count))]), body: FetchTests.png)
        #expect(sinks.allSatisfy { $0.waitForEnd() })
        #expect(sinks.allSatisfy { $0.status == 200 && $0.body == FetchTests.png })
        #expect(loops.map(\.tasks) == [1, 1])
    }

    @Test("a finished fetch lets go of its transfer")
    func noLeak() throws {
        let origin = MockOrigin()
        let proxy = FetchTests.proxy(origin)
        let sink = MockSink()
        proxy.handle(FetchTests.request("http://o.test/a.png"), body: [], client: FetchTests.client, sink: sink)
        do {
            let transfer = try #require(origin.next())
            transfer.respond(FetchTests.imageHead(), body: FetchTests.png)
            #expect(sink.waitForEnd())
        }
        // The fetch ended its client and finished in one block on the proxy queue: once that block has run, nothing
        // holds the transfer.
        #expect(FetchTests.fetchesInFlight(proxy) == 0)
        #expect(origin.liveTransfers == 0)
    }

    @Test("when every client leaves, the transfer is cancelled and nothing is stored")
    func cancel() throws {
        let origin = MockOrigin()
        let a = MockSink(), b = MockSink()
        let attached = Attached(2)
        let proxy = FetchTests.proxy(origin, attached: attached)
        for sink in [a, b] { proxy.handle(FetchTests.request("http://o.test/a.png"), body: [], client: FetchTests.client, sink: sink) }
        let transfer = try #require(origin.next())
        #expect(attached.wait())
        a.leave()   // queues the detach on the proxy queue
        #expect(FetchTests.fetchesInFlight(proxy) == 1, "one client still waits")
        #expect(!transfer.isCancelled)
        b.leave()
        #expect(transfer.waitCancelled())
        #expect(FetchTests.fetchesInFlight(proxy) == 0)
        #expect(proxy.memory.count == 0)
    }

    @Test("a client joining while the image check runs, with other Vary values, goes upstream alone")
    func varyWhileChecking() throws {
        let origin = MockOrigin()
        let proxy = FetchTests.proxy(origin) { $0.allowSVG = true }
        let a = MockSink(), b = MockSink()
        proxy.handle(FetchTests.request("http://o.test/a.svg", [("Accept", "image/webp")]), body: [], client: FetchTests.client, sink: a)
        let first = try #require(origin.next())
        first.events(.head(HTTPResponseHead(status: 200, headers: ["Content-Type": "image/svg+xml", "Cache-Control": "max-age=60", "Vary": "Accept"]),
                           url: "http://o.test/a.svg", redirects: []))
        first.events(.body(Array("<?xml version=\"1.0\"?>".utf8)))  // not enough to decide: still checking
        // (the events are queued on the proxy queue before the second client's dispatch: it joins while checking)
        proxy.handle(FetchTests.request("http://o.test/a.svg", [("Accept", "image/avif")]), body: [], client: FetchTests.client, sink: b)
        let second = try #require(origin.next(), "the avif client was not sent upstream alone")
        #expect(origin.fetchCount == 2)
        #expect(second.request.headers["Accept"] == "image/avif")
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
        let revalidation = try #require(origin.next())
        #expect(revalidation.request.headers["If-None-Match"] == "\"v1\"")
        // (queued after both clients' dispatches: the avif client is a collapsed waiter when the 304 arrives)
        revalidation.events(.head(HTTPResponseHead(status: 304, headers: ["ETag": "\"v1\"", "Cache-Control": "max-age=60"]),
                                  url: url.string, redirects: []))
        #expect(a.waitForEnd())
        let alone = try #require(origin.next(), "the avif client was not sent upstream alone")
        #expect(a.status == 200 && a.body == FetchTests.png)
        #expect(a.header("X-Cache") == "REVALIDATED")
        #expect(b.status == nil, "the avif client must not get the webp variant")
        #expect(alone.request.headers["Accept"] == "image/avif" && alone.request.headers["If-None-Match"] == nil)
        #expect(origin.fetchCount == 2)
    }

    @Test("each answer is counted under the outcome it was given (no header read back): revalidated, expired, stale, bypass")
    func countedOutcomes() throws {
        let origin = MockOrigin()
        let now = Date()
        let proxy = FetchTests.proxy(origin)
        let url = try UpstreamURL.parse("http://o.test/r.png")
        let old = now.addingTimeInterval(-100)
        proxy.memory.insert(CacheEntry(key: CacheKey(url), head: FetchTests.imageHead([("Date", HTTPDate.format(old))]),
                                       body: FetchTests.png, requestTime: old, responseTime: old, requestHeaders: [:],
                                       policy: FreshnessPolicy()))
        func ask(_ headers: [(String, String)] = [], answer: ((MockTransfer) -> Void)? = nil) throws -> MockSink {
            let sink = MockSink()
            proxy.handle(FetchTests.request(url.string, headers), body: [], client: FetchTests.client, sink: sink)
            if let answer { answer(try #require(origin.next())) }
            #expect(sink.waitForEnd())
            return sink
        }
        // The stale copy served as the request's max-stale allows, then revalidated (304), then made stale again by
        // the client's no-cache and replaced by a changed 200; a request with credentials bypasses the cache.
        let stale = try ask([("Cache-Control", "max-stale=1000")])
        let revalidated = try ask { $0.events(.head(HTTPResponseHead(status: 304, headers: ["ETag": "\"v1\"", "Cache-Control": "max-age=0"]),
                                                   url: url.string, redirects: [])) }
        let expired = try ask { $0.respond(FetchTests.imageHead([("ETag", "\"v2\"")]), body: FetchTests.png) }
        let bypass = try ask([("Authorization", "Bearer x")]) { $0.respond(FetchTests.imageHead(), body: FetchTests.png) }
        #expect([stale, revalidated, expired, bypass].map { $0.header("X-Cache") } == ["STALE", "REVALIDATED", "EXPIRED", "BYPASS"])
        let requests = proxy.metrics.snapshot(memory: proxy.memory.stats, disk: nil, fetchesInFlight: 0).requests
        #expect(requests.filter { $0.value > 0 } == ["stale": 1, "revalidated": 1, "expired": 1, "bypass": 1])
    }

    @Test("stale-while-revalidate: clients get the stale copy at once, one background revalidation replaces it, the next client hits the new one")
    func staleWhileRevalidate() throws {
        let origin = MockOrigin()
        let finished = DispatchSemaphore(value: 0)
        let proxy = Proxy(configuration: Configuration(), origin: origin,
                          logger: Logger(label: "test") { _ in SwiftLogNoOpLogHandler() },
                          events: { if case .fetchFinished = $0 { finished.signal() } })
        let url = try UpstreamURL.parse("http://o.test/swr.png")
        let old = Date().addingTimeInterval(-100)
        proxy.memory.insert(CacheEntry(key: CacheKey(url), head: FetchTests.imageHead([("Cache-Control", "max-age=60, stale-while-revalidate=600"),
                                                                                      ("Date", HTTPDate.format(old))]),
                                       body: FetchTests.png, requestTime: old, responseTime: old, requestHeaders: [:],
                                       policy: FreshnessPolicy()))
        // When five clients ask for the stale entry (the origin answers nobody yet)
        let stale = (0..<5).map { _ in MockSink() }
        for sink in stale { proxy.handle(FetchTests.request(url.string), body: [], client: FetchTests.client, sink: sink) }
        // Then each already has the stale copy, and one conditional request went upstream
        #expect(stale.allSatisfy { $0.waitForEnd() && $0.status == 200 && $0.body == FetchTests.png })
        #expect(stale.allSatisfy { $0.header("X-Cache") == "STALE" })
        #expect(stale.allSatisfy { $0.header("Cache-Status")?.contains("detail=stale-while-revalidate") == true })
        #expect(FetchTests.fetchesInFlight(proxy) == 1)
        let revalidation = try #require(origin.next())
        #expect(origin.fetchCount == 1)
        #expect(revalidation.request.headers["If-None-Match"] == "\"v1\"")
        // When the origin sends a changed image, the next client gets it from the cache
        let changed = FetchTests.png.dropLast(8) + Array(repeating: 9, count: 8)
        revalidation.respond(FetchTests.imageHead([("ETag", "\"v2\"")]), body: Array(changed))
        #expect(finished.wait(timeout: .now() + 10) == .success)
        let next = MockSink()
        proxy.handle(FetchTests.request(url.string), body: [], client: FetchTests.client, sink: next)
        #expect(next.waitForEnd() && next.header("X-Cache") == "HIT" && next.body == Array(changed))
        #expect(origin.fetchCount == 1)
        let requests = proxy.metrics.snapshot(memory: proxy.memory.stats, disk: nil, fetchesInFlight: 0).requests
        #expect(requests.filter { $0.value > 0 } == ["stale": 5, "hit": 1])
    }

    @Test("a failure after the head went out aborts every client; before it, each gets the error")
    func failures() throws {
        let origin = MockOrigin()
        let proxy = FetchTests.proxy(origin)
        let early = MockSink()
        proxy.handle(FetchTests.request("http://o.test/x.png"), body: [], client: FetchTests.client, sink: early)
        try #require(origin.next()).events(.failed(.connect("refused")))
        #expect(early.waitForEnd())
        #expect(early.status == 502 && early.ended)

        let late = MockSink()
        proxy.handle(FetchTests.request("http://o.test/y.png"), body: [], client: FetchTests.client, sink: late)
        let transfer = try #require(origin.next())
        transfer.events(.head(FetchTests.imageHead([("Content-Length", "200")]), url: "http://o.test/y.png", redirects: []))
        transfer.events(.body(Array(FetchTests.png.prefix(50))))
        transfer.events(.failed(.broken("reset")))
        #expect(late.waitForEnd())
        #expect(late.status == 200 && late.aborted && !late.ended)
        #expect(proxy.memory.count == 0)
    }
}
