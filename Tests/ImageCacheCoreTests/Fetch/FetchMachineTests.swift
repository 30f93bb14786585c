// FetchMachine as a value: sequences of events (clients join and leave, the disk answers, the origin sends a head,
// chunks, the end or a failure) and the actions each returns. No sockets, queues or sinks; the time is a fixed date.

import Foundation
import ImageCacheTestSupport
import Testing
@testable import ImageCacheHTTP
@testable import ImageCacheConfig
@testable import ImageCacheStatus
@testable import ImageCacheServer
@testable import ImageCacheStore
@testable import ImageCacheUpstream
@testable import ImageCacheCore

@Suite("FetchMachine: coalescing decisions as a value", .timeLimit(.minutes(1)))
struct FetchMachineTests {
    static let url = "http://origin.test/a.png"
    static let t0 = Fixture.t0
    static let png: [UInt8] = [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A] + Array(repeating: 7, count: 92)

    static func request(_ headers: [(String, String)] = [], method: String = "GET", mode: Route.Mode = .reverse) -> ClientRequest {
        ClientRequest(head: HTTPRequestHead(method: method, target: url, headers: HTTPHeaders([("Host", "origin.test")] + headers)),
                      url: try! UpstreamURL.parse(url), mode: mode, trusted: mode == .reverse,
                      client: ClientInfo(address: "127.0.0.1", isLoopback: true), staleWhileRevalidate: 0)
    }

    static func rules(writesToDisk: Bool = false, completeAbandoned: Bool = false, maxObject: Int = 1 << 20,
                      memoryObject: Int = 1 << 20, staleIfError: Double = 0, negativeTTL: Double = 10,
                      forwardNonImages: ForwardNonImages = .pass) -> FetchMachine.Rules {
        FetchMachine.Rules(maxObjectSizeBytes: maxObject, memoryObjectLimitBytes: memoryObject, writesToDisk: writesToDisk,
                           completeAbandonedFetches: completeAbandoned, staleIfErrorSeconds: staleIfError,
                           contentPolicy: ContentPolicy(allowedTypes: ["image/*"]),
                           freshnessPolicy: FreshnessPolicy(negativeTTLSeconds: negativeTTL),
                           forwardNonImages: forwardNonImages)
    }

    /// A machine with its leader (waiter 1) attached, plus `others` collapsed waiters (2, 3, ...).
    static func machine(leader: ClientRequest = request(), others: [ClientRequest] = [], variant: String = "",
                        rules: FetchMachine.Rules = rules(), revalidating: CacheEntry? = nil,
                        reason: CacheOutcome.Forward = .miss) -> FetchMachine {
        var machine = FetchMachine(key: Fixture.key(url), leader: leader, reason: reason, variant: variant, rules: rules,
                                   revalidating: revalidating, now: t0)
        _ = machine.attach(FetchMachine.Waiter(id: 1, request: leader), collapsed: false)
        for (index, other) in others.enumerated() {
            _ = machine.attach(FetchMachine.Waiter(id: index + 2, request: other), collapsed: true)
        }
        return machine
    }

    static func head(_ status: Int = 200, length: Int? = png.count, _ extra: [(String, String)] = []) -> HTTPResponseHead {
        var fields: [(String, String)] = [("Content-Type", "image/png"), ("Cache-Control", "max-age=60"), ("ETag", "\"v1\"")]
        if let length { fields.append(("Content-Length", String(length))) }
        return HTTPResponseHead(status: status, headers: HTTPHeaders(fields + extra))
    }

    /// A stored copy, `age` seconds old at t0, with the given Cache-Control and an ETag.
    static func stored(age: Double, cacheControl: String = "max-age=60", etag: String? = "\"v1\"") -> CacheEntry {
        var fields = [("Content-Type", "image/png"), ("Cache-Control", cacheControl)]
        if let etag { fields.append(("ETag", etag)) }
        return Fixture.entry(fields, key: Fixture.key(url), body: png, requestTime: t0.addingTimeInterval(-age),
                             responseTime: t0.addingTimeInterval(-age))
    }

    /// The actions as short lines (logs left out), so a test states the whole sequence it expects.
    static func lines(_ actions: [FetchMachine.Action]) -> [String] {
        actions.compactMap { action in
            switch action {
            case let .startTransfer(conditional):
                conditional.isEmpty ? "start" : "start " + conditional.map { "\($0.name): \($0.value)" }.joined(separator: ", ")
            case .cancelTransfer: "cancel"
            case .lookOnDisk: "look on disk"
            case let .waiterAttached(waiters): "attached \(waiters)"
            case let .sendHead(head, outcome, _, to, ends):
                "head \(head.status) \(outcome.xCache) to \(to)" + (ends ? " (ends)" : "")
            case let .sendBody(chunk, to): "body \(chunk.count) to \(to)"
            case let .sendInterim(head, to): "interim \(head.status) to \(to)"
            case let .respondWhole(head, outcome, body, to): "whole \(head.status) \(outcome.xCache) \(body.count) to \(to)"
            case let .respondStored(_, outcome, file, _, to): "stored \(outcome.xCache) \(outcome.cacheStatus)\(file == nil ? "" : " file") to \(to)"
            case let .end(ids): "end \(ids)"
            case let .fail(ids, status, _): "fail \(status) \(ids)"
            case let .abort(ids): "abort \(ids)"
            case let .store(entry): "store \(entry.body.count)"
            case let .refresh(entry, bodyInFile): "refresh \(entry.etag ?? "")" + (bodyInFile ? " (file)" : "")
            case .keepInMemory: "keep in memory"
            case .promote: "promote"
            case let .remove(variant): variant.map { "remove variant \"\($0)\"" } ?? "remove all"
            case .removeRenditions: "remove renditions"
            case let .redispatchToVariants(waiters, _): "to variants \(waiters.map(\.id))"
            case let .redispatchAlone(waiters): "alone \(waiters.map(\.id))"
            case let .passUpstream(waiters): "pass upstream \(waiters.map(\.id))"
            case let .refuseRange(_, length, to): "416 of \(length) to \(to)"
            case .closeToNewcomers: "closed"
            case .finish: "finish"
            case .log: nil
            case let .countError(kind, _, _): "error \(kind)"
            case let .askFleet(after): after == 0 ? "ask fleet" : "poll fleet after \(Int((after * 1000).rounded())) ms"
            case let .fleetStore(entry, ttl): "fleet store \(entry.body.count) ttl \(ttl)"
            case let .fleetPass(reason, ttl): "fleet pass \(ttl): \(reason)"
            case .fleetRelease: "fleet release"
            }
        }
    }

    @Test("a coalesced miss whose body is whole when the image check passes: stored, then one whole response per client")
    func wholeBody() {
        var machine = Self.machine(others: [Self.request()])
        #expect(Self.lines(machine.start()) == ["start"])
        #expect(Self.lines(machine.receiveHead(Self.head(), url: Self.url, redirects: [], now: Self.t0)).isEmpty)
        #expect(Self.lines(machine.receiveBody(Self.png, now: Self.t0)) == [
            "store 100", "whole 200 MISS 100 to 1", "whole 200 COALESCED 100 to 2", "closed", "finish",
        ])
        #expect(machine.isFinished)
    }

    @Test("a streamed body: heads once the check passes, every chunk to every client, a late joiner gets what came before")
    func streaming() {
        var machine = Self.machine(others: [Self.request()])
        _ = machine.start()
        _ = machine.receiveHead(Self.head(length: nil), url: Self.url, redirects: [], now: Self.t0)
        #expect(Self.lines(machine.receiveBody(Array(Self.png[0..<4]), now: Self.t0)).isEmpty, "4 bytes cannot be judged")
        #expect(Self.lines(machine.receiveBody(Array(Self.png[4..<50]), now: Self.t0)) == [
            "head 200 MISS to 1", "head 200 COALESCED to 2", "body 4 to [1, 2]", "body 46 to [1, 2]",
        ])
        #expect(Self.lines(machine.attach(FetchMachine.Waiter(id: 3, request: Self.request()), collapsed: true)) == [
            "attached 3", "head 200 COALESCED to 3", "body 4 to [3]", "body 46 to [3]",
        ])
        #expect(Self.lines(machine.receiveBody(Array(Self.png[50...]), now: Self.t0)) == ["body 50 to [1, 2, 3]"])
        #expect(Self.lines(machine.receiveEnd(now: Self.t0)) == ["store 100", "end [1, 2, 3]", "closed", "finish"])
    }

    @Test("a 304 for the stale copy: refreshed once, every client served the refreshed copy, nothing cancelled")
    func notModified() {
        var machine = Self.machine(others: [Self.request()], revalidating: Self.stored(age: 120), reason: .stale)
        #expect(Self.lines(machine.start()) == ["start If-None-Match: \"v1\""])
        let lines = Self.lines(machine.receiveHead(HTTPResponseHead(status: 304, headers: ["ETag": "\"v1\"", "Cache-Control": "max-age=60"]),
                                                   url: Self.url, redirects: [], now: Self.t0))
        #expect(lines == [
            "refresh \"v1\"",
            "stored REVALIDATED imagecached; fwd=stale; fwd-status=304; stored to 1",
            "stored COALESCED imagecached; fwd=stale; fwd-status=304; stored; collapsed to 2",
            "closed", "finish",
        ])
    }

    @Test("a 304 naming other validators: the outdated variant goes and the response is fetched again, unconditionally")
    func notModifiedOtherValidators() {
        var machine = Self.machine(revalidating: Self.stored(age: 120), reason: .stale)
        _ = machine.start()
        let lines = Self.lines(machine.receiveHead(HTTPResponseHead(status: 304, headers: ["ETag": "\"v2\""]),
                                                   url: Self.url, redirects: [], now: Self.t0))
        #expect(lines == ["remove variant \"\"", "cancel", "start"])
        #expect(!machine.isFinished)
        // The new 200 replaces the copy.
        _ = machine.receiveHead(Self.head(), url: Self.url, redirects: [], now: Self.t0)
        #expect(Self.lines(machine.receiveBody(Self.png, now: Self.t0)) == ["store 100", "whole 200 EXPIRED 100 to 1", "closed", "finish"])
    }

    @Test("a revalidation answered with another version removes the renditions made from the old one; the same version keeps them")
    func changedVersionDropsRenditions() {
        var v2 = Self.machine(revalidating: Self.stored(age: 120), reason: .stale)
        _ = v2.start()
        var actions = v2.receiveHead(HTTPResponseHead(status: 200, headers: HTTPHeaders([
            ("Content-Type", "image/png"), ("Cache-Control", "max-age=60"), ("ETag", "\"v2\""), ("Content-Length", String(Self.png.count)),
        ])), url: Self.url, redirects: [], now: Self.t0)
        actions += v2.receiveBody(Self.png, now: Self.t0)
        #expect(Self.lines(actions).contains("remove renditions"))
        var same = Self.machine(revalidating: Self.stored(age: 120), reason: .stale)
        _ = same.start()
        var kept = same.receiveHead(Self.head(), url: Self.url, redirects: [], now: Self.t0)
        kept += same.receiveBody(Self.png, now: Self.t0)
        #expect(!Self.lines(kept).contains("remove renditions") && Self.lines(kept).contains("store 100"))
    }

    @Test("a response that may not be shared goes to its leader only; the collapsed clients go upstream alone")
    func unshareable() {
        for extra in [[("Set-Cookie", "a=1")], [("Cache-Control", "private")], [("Vary", "*")]] {
            var machine = Self.machine(others: [Self.request(), Self.request()])
            _ = machine.start()
            let lines = Self.lines(machine.receiveHead(Self.head(200, length: Self.png.count, extra), url: Self.url, redirects: [], now: Self.t0))
            #expect(lines == ["closed", "alone [2, 3]"], "\(extra)")
            #expect(machine.waiters.map(\.id) == [1])
        }
    }

    @Test("Vary: clients whose field differs go to their variant's fetch; from a variant's fetch they go alone")
    func varyMismatch() {
        let webp = Self.request([("Accept", "image/webp")]), avif = Self.request([("Accept", "image/avif")])
        for (variant, expected) in [("", "to variants [3]"), ("accept=image/webp", "alone [3]")] {
            var machine = Self.machine(leader: webp, others: [webp, avif], variant: variant)
            _ = machine.start()
            let lines = Self.lines(machine.receiveHead(Self.head(200, length: Self.png.count, [("Vary", "Accept")]), url: Self.url, redirects: [], now: Self.t0))
            #expect(lines == [expected])
            #expect(machine.waiters.map(\.id) == [1, 2])
            // A client that joins later with the other value is sent on too, without being attached.
            #expect(Self.lines(machine.attach(FetchMachine.Waiter(id: 4, request: avif), collapsed: true))
                    == [expected.replacingOccurrences(of: "3", with: "4")])
        }
    }

    @Test("the last client leaving cancels the transfer, unless complete-abandoned-fetches is on")
    func lastClientLeaves() {
        var machine = Self.machine(others: [Self.request()])
        _ = machine.start()
        #expect(Self.lines(machine.detach(2)).isEmpty)
        #expect(Self.lines(machine.detach(1)) == ["cancel", "closed", "finish"])
        var keeps = Self.machine(rules: Self.rules(completeAbandoned: true))
        _ = keeps.start()
        #expect(Self.lines(keeps.detach(1)).isEmpty)
        _ = keeps.receiveHead(Self.head(), url: Self.url, redirects: [], now: Self.t0)
        #expect(Self.lines(keeps.receiveBody(Self.png, now: Self.t0)) == ["store 100", "closed", "finish"],
                "fetched to the end and stored with no client")
    }

    @Test("a HEAD client gets the head and leaves; the fetch runs on to fill the cache even when its client goes")
    func headFills() {
        var machine = Self.machine(leader: Self.request(method: "HEAD"))
        _ = machine.start()
        _ = machine.receiveHead(Self.head(length: nil), url: Self.url, redirects: [], now: Self.t0)
        #expect(Self.lines(machine.receiveBody(Array(Self.png[0..<50]), now: Self.t0)) == ["head 200 MISS to 1 (ends)"])
        #expect(machine.waiters.isEmpty && machine.fillsCache)
        #expect(Self.lines(machine.detach(1)).isEmpty, "not cancelled: it fills the cache")
        _ = machine.receiveBody(Array(Self.png[50...]), now: Self.t0)
        #expect(Self.lines(machine.receiveEnd(now: Self.t0)) == ["store 100", "closed", "finish"])
    }

    @Test("refusals before the head: too large, not an image, an error status; every client gets the status, nothing stored")
    func refusals() {
        let cases: [(HTTPResponseHead, [String])] = [
            (Self.head(length: 2 << 20), ["error upstream_too_large", "fail 502 [1, 2]", "cancel", "closed", "finish"]),
            (HTTPResponseHead(status: 200, headers: ["Content-Type": "text/html"]),
             ["error content_refused", "fail 502 [1, 2]", "cancel", "closed", "finish"]),
            (HTTPResponseHead(status: 404, headers: ["Content-Type": "text/plain"]),
             ["error upstream_status_4xx", "fail 404 [1, 2]", "cancel", "closed", "finish"]),
        ]
        for (head, expected) in cases {
            var machine = Self.machine(leader: Self.request(mode: .fetch), others: [Self.request(mode: .fetch)])
            _ = machine.start()
            #expect(Self.lines(machine.receiveHead(head, url: Self.url, redirects: [], now: Self.t0)) == expected)
        }
    }

    @Test("reverse mode: an origin's 404 page, 301 or 204 that will not be stored is shared with the clients that joined, as a 200 would be (no image check, an error page nosniff); a private one goes to the leader only")
    func reversePassesStatuses() throws {
        // Given a leader and one collapsed waiter, and no negative-ttl
        var machine = Self.machine(others: [Self.request()], rules: Self.rules(negativeTTL: 0))
        _ = machine.start()
        // When the origin answers with its HTML 404 page
        let page = Array("<h1>no such image</h1>".utf8)
        let actions = machine.receiveHead(HTTPResponseHead(status: 404, headers: HTTPHeaders([("Content-Type", "text/html"),
                                                                                            ("Content-Length", String(page.count))])),
                                          url: Self.url, redirects: [], now: Self.t0)
        // Then both have it, and nothing is stored
        #expect(Self.lines(actions) == ["error upstream_status_4xx", "head 404 MISS to 1", "head 404 COALESCED to 2"])
        guard case let .sendHead(head, outcome, length, _, _)? = actions.first(where: { if case .sendHead = $0 { true } else { false } })
        else { Issue.record("no head"); return }
        #expect(head.headers["X-Content-Type-Options"] == "nosniff" && head.headers["Content-Type"] == "text/html")
        #expect(length == page.count && !outcome.stored)
        #expect(Self.lines(machine.receiveBody(page, now: Self.t0)) == ["body 22 to [1, 2]", "end [1, 2]", "closed", "finish"])

        // A private 503 goes to the leader only
        var personal = Self.machine(others: [Self.request()], rules: Self.rules(negativeTTL: 0))
        _ = personal.start()
        let lines = Self.lines(personal.receiveHead(HTTPResponseHead(status: 503, headers: HTTPHeaders([("Cache-Control", "private")])),
                                                    url: Self.url, redirects: [], now: Self.t0))
        #expect(lines == ["error upstream_status_5xx", "closed", "alone [2]", "head 503 MISS to 1"])

        // A redirect is the final response (reverse mode does not follow it); a 204 has no body whatever it says
        var moved = Self.machine(rules: Self.rules(negativeTTL: 0))
        _ = moved.start()
        #expect(Self.lines(moved.receiveHead(HTTPResponseHead(status: 301, headers: HTTPHeaders([("Location", "/b.png")])),
                                             url: Self.url, redirects: [], now: Self.t0)) == ["head 301 MISS to 1"])
        #expect(Self.lines(moved.receiveEnd(now: Self.t0)) == ["end [1]", "closed", "finish"])
        var empty = Self.machine(rules: Self.rules(negativeTTL: 0))
        _ = empty.start()
        #expect(Self.lines(empty.receiveHead(HTTPResponseHead(status: 204, headers: HTTPHeaders([("Content-Length", "9")])),
                                             url: Self.url, redirects: [], now: Self.t0)) == ["whole 204 MISS 0 to 1", "closed", "finish"])
    }

    @Test("reverse mode: a 404 within negative-ttl, or a 301 with max-age, is shared with the clients that joined and stored, without the image checks; forward mode stores neither")
    func reverseStoresStatuses() throws {
        let page = Array("<h1>no such image</h1>".utf8)
        let cases: [(HTTPResponseHead, [UInt8])] = [
            (HTTPResponseHead(status: 404, headers: HTTPHeaders([("Content-Type", "text/html"), ("Content-Length", "22")])), page),
            (HTTPResponseHead(status: 301, headers: HTTPHeaders([("Location", "/b.png"), ("Cache-Control", "max-age=60"),
                                                                  ("Content-Length", "5")])), Array("moved".utf8)),
        ]
        for (head, body) in cases {
            var machine = Self.machine(others: [Self.request()])
            _ = machine.start()
            let heads = Self.lines(machine.receiveHead(head, url: Self.url, redirects: [], now: Self.t0))
            #expect(heads.suffix(2) == ["head \(head.status) MISS to 1", "head \(head.status) COALESCED to 2"])
            #expect(Self.lines(machine.receiveBody(body, now: Self.t0)) == ["store \(body.count)", "body \(body.count) to [1, 2]", "end [1, 2]", "closed", "finish"])
        }
        var forward = Self.machine(leader: Self.request(mode: .fetch))
        _ = forward.start()
        #expect(Self.lines(forward.receiveHead(cases[1].0, url: Self.url, redirects: [], now: Self.t0)).contains("fail 502 [1]"))
    }

    @Test("a stale copy without validators is fetched whole and is the copy stale-if-error serves; a 304 to that unconditional request refreshes nothing")
    func staleCopyWithoutValidators() {
        let stale = Self.stored(age: 120, cacheControl: "max-age=60, stale-if-error=600", etag: nil)
        var failed = Self.machine(revalidating: stale, reason: .stale)
        #expect(Self.lines(failed.start()) == ["start"], "no conditional fields: nothing to validate with")
        #expect(Self.lines(failed.receiveHead(HTTPResponseHead(status: 503), url: Self.url, redirects: [], now: Self.t0)).contains {
            $0.hasPrefix("stored STALE")
        })
        var odd = Self.machine(rules: Self.rules(negativeTTL: 0), revalidating: stale, reason: .stale)
        _ = odd.start()
        let lines = Self.lines(odd.receiveHead(HTTPResponseHead(status: 304), url: Self.url, redirects: [], now: Self.t0))
        #expect(!lines.contains { $0.hasPrefix("refresh") }, "\(lines)")
    }

    @Test("a body that breaks after the heads went out closes every client's connection; before, each gets 502")
    func brokenBody() {
        var streaming = Self.machine(others: [Self.request()])
        _ = streaming.start()
        _ = streaming.receiveHead(Self.head(length: 100), url: Self.url, redirects: [], now: Self.t0)
        _ = streaming.receiveBody(Array(Self.png[0..<60]), now: Self.t0)
        #expect(Self.lines(streaming.receiveEnd(now: Self.t0)) == ["error upstream_broken", "abort [1, 2]", "cancel", "closed", "finish"])
        var waiting = Self.machine(others: [Self.request()])
        _ = waiting.start()
        #expect(Self.lines(waiting.receiveEnd(now: Self.t0)) == ["error upstream_broken", "fail 502 [1, 2]", "cancel", "closed", "finish"])
    }

    @Test("stale-if-error: a failed revalidation serves the stale copy when the copy, the request or the policy allows it")
    func staleIfError() {
        let cases: [(CacheEntry, FetchMachine.Rules, Bool)] = [
            (Self.stored(age: 90, cacheControl: "max-age=60, stale-if-error=60"), Self.rules(), true),
            (Self.stored(age: 90), Self.rules(staleIfError: 60), true),
            (Self.stored(age: 90), Self.rules(), false),
            (Self.stored(age: 90, cacheControl: "max-age=60, must-revalidate"), Self.rules(staleIfError: 60), false),
        ]
        for (entry, rules, serves) in cases {
            var machine = Self.machine(others: [Self.request()], rules: rules, revalidating: entry, reason: .stale)
            _ = machine.start()
            let lines = Self.lines(machine.receiveFailure(.connect("refused"), now: Self.t0))
            let expected = serves
                ? ["error upstream_connect", "stored STALE imagecached; hit; ttl=-30; detail=stale-if-error to 1",
                   "stored STALE imagecached; hit; ttl=-30; detail=stale-if-error to 2", "cancel", "closed", "finish"]
                : ["error upstream_connect", "fail 502 [1, 2]", "cancel", "closed", "finish"]
            #expect(lines == expected, "\(entry.cacheControl)")
        }
    }

    @Test("the disk stage: a fresh copy serves every client; a stale one is revalidated once; none goes upstream")
    func diskStage() {
        var fresh = Self.machine(others: [Self.request()])
        #expect(Self.lines(fresh.start(fromDisk: .entry(Self.stored(age: 10)), removalsSeen: 0, now: Self.t0)) == [
            "promote", "stored HIT imagecached; hit; ttl=50; detail=disk to 1", "stored HIT imagecached; hit; ttl=50; detail=disk to 2",
            "closed", "finish",
        ])
        var stale = Self.machine(others: [Self.request()])
        #expect(Self.lines(stale.start(fromDisk: .entry(Self.stored(age: 90)), removalsSeen: 0, now: Self.t0))
                == ["promote", "start If-None-Match: \"v1\""])
        var noValidator = Self.machine()
        #expect(Self.lines(noValidator.start(fromDisk: .entry(Self.stored(age: 90, etag: nil)), removalsSeen: 0, now: Self.t0))
                == ["promote", "start"])
        var missing = Self.machine()
        #expect(Self.lines(missing.start(fromDisk: nil, removalsSeen: 0, now: Self.t0)) == ["start"])
        // A stale memory copy the coalescer found (landed after the lookup) is revalidated when the disk's copy has no
        // validators.
        var inMemory = Self.machine(revalidating: Self.stored(age: 120), reason: .stale)
        #expect(Self.lines(inMemory.start(fromDisk: .entry(Self.stored(age: 90, etag: nil)), removalsSeen: 0, now: Self.t0))
                == ["promote", "start If-None-Match: \"v1\""])
    }

    @Test("with complete-abandoned-fetches, a 304 naming other validators fetches the whole response for the cache even with no client left")
    func restartWithoutClients() {
        var machine = Self.machine(rules: Self.rules(completeAbandoned: true), revalidating: Self.stored(age: 120), reason: .stale)
        _ = machine.start()
        #expect(Self.lines(machine.detach(1)).isEmpty)
        let lines = Self.lines(machine.receiveHead(HTTPResponseHead(status: 304, headers: ["ETag": "\"v2\""]),
                                                   url: Self.url, redirects: [], now: Self.t0))
        #expect(lines == ["remove variant \"\"", "cancel", "start"])
        _ = machine.receiveHead(Self.head(), url: Self.url, redirects: [], now: Self.t0)
        #expect(Self.lines(machine.receiveBody(Self.png, now: Self.t0)) == ["store 100", "closed", "finish"])
    }

    @Test("a background revalidation (stale-while-revalidate) runs with no client: a 304 refreshes, a 200 replaces")
    func backgroundRevalidation() {
        for (head, expected) in [
            (HTTPResponseHead(status: 304, headers: ["ETag": "\"v1\"", "Cache-Control": "max-age=60"]), ["refresh \"v1\"", "closed", "finish"]),
            (Self.head(), ["store 100", "closed", "finish"]),
        ] {
            var machine = FetchMachine(key: Fixture.key(Self.url), leader: Self.request(), reason: .stale, rules: Self.rules(),
                                       revalidating: Self.stored(age: 70), fillsCache: true, now: Self.t0)
            #expect(Self.lines(machine.start()) == ["start If-None-Match: \"v1\""])
            var lines = Self.lines(machine.receiveHead(head, url: Self.url, redirects: [], now: Self.t0))
            if head.status == 200 { lines += Self.lines(machine.receiveBody(Self.png, now: Self.t0)) }
            #expect(lines == expected)
        }
    }

    @Test("a background revalidation stops when the response will not be stored; a 304 for a large disk copy ends without reading the file")
    func uselessBackgroundFetch() {
        for extra in [[("Cache-Control", "no-store")], [("Cache-Control", "private")]] {
            var machine = FetchMachine(key: Fixture.key(Self.url), leader: Self.request(), reason: .stale, rules: Self.rules(),
                                       revalidating: Self.stored(age: 70), fillsCache: true, now: Self.t0)
            _ = machine.start()
            let head = HTTPResponseHead(status: 200, headers: HTTPHeaders([("Content-Type", "image/png"), ("ETag", "\"v2\""),
                                                                           ("Content-Length", "100")] + extra))
            #expect(Self.lines(machine.receiveHead(head, url: Self.url, redirects: [], now: Self.t0))
                    == ["closed", "remove variant \"\"", "cancel", "finish"], "\(extra)")
        }
        var large = FetchMachine(key: Fixture.key(Self.url), leader: Self.request(), reason: .stale, rules: Self.rules(),
                                 revalidating: Self.stored(age: 70), bodyInFile: true, fillsCache: true, now: Self.t0)
        _ = large.start()
        #expect(Self.lines(large.receiveHead(HTTPResponseHead(status: 304, headers: ["ETag": "\"v1\""]), url: Self.url,
                                             redirects: [], now: Self.t0)) == ["refresh \"v1\" (file)", "closed", "finish"])
    }

    @Test("the disk stage under stale-while-revalidate: every client gets the stale copy, then it is revalidated with no one waiting")
    func diskStaleWhileRevalidate() {
        var machine = Self.machine(others: [Self.request()])
        let stale = Self.stored(age: 70, cacheControl: "max-age=60, stale-while-revalidate=30")
        #expect(Self.lines(machine.start(fromDisk: .entry(stale), removalsSeen: 0, now: Self.t0)) == [
            "promote",
            "stored STALE imagecached; hit; ttl=-10; detail=stale-while-revalidate to 1",
            "stored STALE imagecached; hit; ttl=-10; detail=stale-while-revalidate to 2",
            "start If-None-Match: \"v1\"",
        ])
        #expect(machine.waiters.isEmpty && machine.fillsCache && machine.joinable)
        let lines = Self.lines(machine.receiveHead(HTTPResponseHead(status: 304, headers: ["ETag": "\"v1\""]),
                                                   url: Self.url, redirects: [], now: Self.t0))
        #expect(lines == ["refresh \"v1\"", "closed", "finish"])
    }

    @Test("a Range request on a miss gets a 206 for its part as soon as the head is in and the part's bytes as they arrive; it ends when they are out while the fetch runs on; 416 past the end; the whole response without a known length")
    func rangeOnAMiss() {
        let range = Self.request([("Range", "bytes=0-9")])
        // Whole at once: the plain client gets the whole response, the Range one the stored entry (a 206 when sent).
        var whole = Self.machine(others: [range])
        _ = whole.start()
        _ = whole.receiveHead(Self.head(), url: Self.url, redirects: [], now: Self.t0)
        #expect(Self.lines(whole.receiveBody(Self.png, now: Self.t0)) == [
            "store 100", "whole 200 MISS 100 to 1",
            "stored COALESCED imagecached; fwd=uri-miss; fwd-status=200; stored; collapsed to 2", "closed", "finish",
        ])
        // Streamed: the Range client has its part from the first chunk and is done; the other streams on.
        var streamed = Self.machine(leader: range, others: [Self.request()])
        _ = streamed.start()
        _ = streamed.receiveHead(Self.head(), url: Self.url, redirects: [], now: Self.t0)
        #expect(Self.lines(streamed.receiveBody(Array(Self.png[0..<50]), now: Self.t0)) == [
            "head 206 MISS to 1", "head 200 COALESCED to 2", "body 10 to [1]", "body 50 to [2]", "end [1]",
        ])
        #expect(Self.lines(streamed.receiveBody(Array(Self.png[50...]), now: Self.t0)) == [
            "store 100", "body 50 to [2]", "end [2]", "closed", "finish",
        ])
        // A part across two chunks gets a slice of each; alone, it leaves the fetch filling the cache
        var across = Self.machine(leader: Self.request([("Range", "bytes=45-54")]))
        _ = across.start()
        _ = across.receiveHead(Self.head(), url: Self.url, redirects: [], now: Self.t0)
        #expect(Self.lines(across.receiveBody(Array(Self.png[0..<50]), now: Self.t0)) == ["head 206 MISS to 1", "body 5 to [1]"])
        #expect(Self.lines(across.receiveBody(Array(Self.png[50..<60]), now: Self.t0)) == ["body 5 to [1]", "end [1]"])
        #expect(across.waiters.isEmpty && across.fillsCache && !across.isFinished)
        #expect(Self.lines(across.receiveBody(Array(Self.png[60...]), now: Self.t0)) == ["store 100", "closed", "finish"])
        // A part of a response that will not be stored: once it is out, the transfer stops
        var unstored = Self.machine(leader: range)
        _ = unstored.start()
        _ = unstored.receiveHead(Self.head(length: 100, [("Cache-Control", "no-store")]), url: Self.url, redirects: [], now: Self.t0)
        #expect(Self.lines(unstored.receiveBody(Array(Self.png[0..<50]), now: Self.t0)) == [
            "head 206 MISS to 1", "body 10 to [1]", "end [1]", "cancel", "finish",
        ])
        // Past the end: 416
        var past = Self.machine(leader: Self.request([("Range", "bytes=500-")]), others: [Self.request()])
        _ = past.start()
        _ = past.receiveHead(Self.head(), url: Self.url, redirects: [], now: Self.t0)
        #expect(Self.lines(past.receiveBody(Array(Self.png[0..<50]), now: Self.t0)) == [
            "416 of 100 to 1", "head 200 COALESCED to 2", "body 50 to [2]",
        ])
        // Refused alone, on a response that will not be stored: nothing more to do
        var pastAlone = Self.machine(leader: Self.request([("Range", "bytes=500-")]))
        _ = pastAlone.start()
        _ = pastAlone.receiveHead(Self.head(length: 100, [("Cache-Control", "no-store")]), url: Self.url, redirects: [], now: Self.t0)
        #expect(Self.lines(pastAlone.receiveBody(Array(Self.png[0..<50]), now: Self.t0)) == ["416 of 100 to 1", "cancel", "finish"])
        // No Content-Length: the part cannot be placed, so the whole response is streamed (RFC 9110 allows a 200).
        var unknown = Self.machine(leader: range)
        _ = unknown.start()
        _ = unknown.receiveHead(Self.head(length: nil), url: Self.url, redirects: [], now: Self.t0)
        #expect(Self.lines(unknown.receiveBody(Array(Self.png[0..<50]), now: Self.t0)) == ["head 200 MISS to 1", "body 50 to [1]"])
    }

    @Test("over the in-flight budget the kept body is let go: streamed on, not stored, no newcomer joins")
    func overBudget() {
        var machine = Self.machine()
        _ = machine.start()
        _ = machine.receiveHead(Self.head(length: nil), url: Self.url, redirects: [], now: Self.t0)
        _ = machine.receiveBody(Array(Self.png[0..<50]), now: Self.t0)
        #expect(machine.keepsBody && machine.keptBytes == 50)
        #expect(Self.lines(machine.bodiesOverBudget(limit: 10)) == ["closed"])
        #expect(!machine.keepsBody && !machine.joinable)
        _ = machine.receiveBody(Array(Self.png[50...]), now: Self.t0)
        #expect(Self.lines(machine.receiveEnd(now: Self.t0)) == ["end [1]", "finish"])
    }

    // MARK: forward mode: what is not an image (forward-non-images)

    static let html = Array("<!doctype html><title>a page</title>".utf8)

    static func page(_ status: Int, _ extra: [(String, String)] = [], length: Int = html.count) -> HTTPResponseHead {
        HTTPResponseHead(status: status, headers: HTTPHeaders([("Content-Type", "text/html"), ("Content-Length", String(length))] + extra))
    }

    /// The first head or whole response of `actions` sent to `waiter`, with its outcome.
    static func sent(_ actions: [FetchMachine.Action], to waiter: Int) -> (HTTPResponseHead, CacheOutcome)? {
        for action in actions {
            switch action {
            case let .sendHead(head, outcome, _, to, _) where to == waiter: return (head, outcome)
            case let .respondWhole(head, outcome, _, to) where to == waiter: return (head, outcome)
            default: continue
            }
        }
        return nil
    }

    @Test("forward mode under pass: an HTML 200, a 404 page, a 304 to an unconditional request, or bytes that are no image after an image type reach every client as the origin sent them, labelled not-image, never stored")
    func forwardPassesNotImages() throws {
        let noImage = Array(repeating: UInt8(ascii: "A"), count: Self.png.count)
        let cases: [(label: String, head: HTTPResponseHead, body: [UInt8], expected: [String])] = [
            ("an HTML page", Self.page(200), Self.html,
             ["closed", "head 200 BYPASS to 1", "head 200 BYPASS to 2", "body \(Self.html.count) to [1, 2]", "end [1, 2]", "finish"]),
            ("a 404 page", Self.page(404), Self.html,
             ["error upstream_status_4xx", "closed", "head 404 BYPASS to 1", "head 404 BYPASS to 2",
              "body \(Self.html.count) to [1, 2]", "end [1, 2]", "finish"]),
            ("a 304 to a request that was not conditional", HTTPResponseHead(status: 304, headers: ["ETag": "\"v1\""]), [],
             ["closed", "whole 304 BYPASS 0 to 1", "whole 304 BYPASS 0 to 2", "finish"]),
            ("bytes that are no PNG under image/png", Self.head(), noImage,
             ["closed", "whole 200 BYPASS 100 to 1", "whole 200 BYPASS 100 to 2", "finish"]),
        ]
        for (label, head, body, expected) in cases {
            // Given a forward-mode leader and a forward-mode client that joined its fetch
            var machine = Self.machine(leader: Self.request(mode: .forward), others: [Self.request(mode: .forward)])
            _ = machine.start()
            // When the origin answers what the image checks refuse
            var actions = machine.receiveHead(head, url: Self.url, redirects: [], now: Self.t0)
            if !body.isEmpty { actions += machine.receiveBody(body, now: Self.t0) }
            // Then both get it, nothing is stored and no client is refused
            #expect(Self.lines(actions) == expected, "\(label)")
            #expect(machine.isFinished, "\(label)")
            let (leaderHead, outcome) = try #require(Self.sent(actions, to: 1), "\(label)")
            #expect(outcome.cacheStatus == "imagecached; fwd=bypass; fwd-status=\(head.status); detail=not-image", "\(label)")
            #expect(outcome.served == .notImage && !outcome.stored, "\(label)")
            // As the origin sent it: not the untrusted fields of an image (a page keeps its scripts and styles)
            #expect(leaderHead.headers["Content-Security-Policy"] == nil, "\(label)")
            #expect(leaderHead.headers["Content-Type"] == head.headers["Content-Type"], "\(label)")
            #expect(leaderHead.headers["X-Content-Type-Options"] == (head.status >= 400 ? "nosniff" : nil), "\(label)")
            let (_, joined) = try #require(Self.sent(actions, to: 2), "\(label)")
            #expect(joined.cacheStatus.hasSuffix("; collapsed; detail=not-image") && joined.xCache == "BYPASS", "\(label)")
        }
    }

    @Test("forward mode under refuse, and fetch mode under either setting, answer what is not an image 502 (an error status as itself), nothing passed")
    func notImagesRefused() {
        let noImage = Array(repeating: UInt8(ascii: "A"), count: Self.png.count)
        for (mode, setting) in [(Route.Mode.forward, ForwardNonImages.refuse), (.fetch, .pass), (.fetch, .refuse)] {
            let rules = Self.rules(forwardNonImages: setting)
            var html = Self.machine(leader: Self.request(mode: mode), others: [Self.request(mode: mode)], rules: rules)
            _ = html.start()
            #expect(Self.lines(html.receiveHead(Self.page(200), url: Self.url, redirects: [], now: Self.t0))
                    == ["error content_refused", "fail 502 [1, 2]", "cancel", "closed", "finish"], "\(mode) \(setting)")
            var missing = Self.machine(leader: Self.request(mode: mode), rules: rules)
            _ = missing.start()
            #expect(Self.lines(missing.receiveHead(Self.page(404), url: Self.url, redirects: [], now: Self.t0))
                    == ["error upstream_status_4xx", "fail 404 [1]", "cancel", "closed", "finish"], "\(mode) \(setting)")
            var sniffed = Self.machine(leader: Self.request(mode: mode), rules: rules)
            _ = sniffed.start()
            _ = sniffed.receiveHead(Self.head(), url: Self.url, redirects: [], now: Self.t0)
            #expect(Self.lines(sniffed.receiveBody(noImage, now: Self.t0))
                    == ["error content_refused", "fail 502 [1]", "cancel", "closed", "finish"], "\(mode) \(setting)")
        }
    }

    @Test("a not-image response is shared with the forward clients that joined when it may be shared; a private one goes to the leader only and the others go alone; a fetch-mode client that joined gets 502")
    func notImageSharing() {
        // Given a forward leader and two forward clients that joined
        var shared = Self.machine(leader: Self.request(mode: .forward), others: [Self.request(mode: .forward), Self.request(mode: .forward)])
        _ = shared.start()
        #expect(Self.lines(shared.receiveHead(Self.page(200), url: Self.url, redirects: [], now: Self.t0))
                == ["closed", "head 200 BYPASS to 1", "head 200 BYPASS to 2", "head 200 BYPASS to 3"])
        // A private page (or one that sets a cookie) is the leader's alone
        for extra in [[("Cache-Control", "private")], [("Set-Cookie", "session=1")]] {
            var personal = Self.machine(leader: Self.request(mode: .forward), others: [Self.request(mode: .forward), Self.request(mode: .forward)])
            _ = personal.start()
            #expect(Self.lines(personal.receiveHead(Self.page(200, extra), url: Self.url, redirects: [], now: Self.t0))
                    == ["closed", "alone [2, 3]", "head 200 BYPASS to 1"], "\(extra)")
            #expect(personal.waiters.map(\.id) == [1])
        }
        // A fetch-mode client shares the key, but is refused what is not an image
        var mixed = Self.machine(leader: Self.request(mode: .forward), others: [Self.request(mode: .fetch)])
        _ = mixed.start()
        #expect(Self.lines(mixed.receiveHead(Self.page(200), url: Self.url, redirects: [], now: Self.t0))
                == ["error content_refused", "fail 502 [2]", "closed", "head 200 BYPASS to 1"])
    }

    @Test("a not-image response over max-object-size is refused 502 naming the key, as an image would be; a HEAD client alone ends its transfer")
    func notImageLimits() throws {
        var large = Self.machine(leader: Self.request(mode: .forward), rules: Self.rules(maxObject: 1000))
        _ = large.start()
        let actions = large.receiveHead(Self.page(200, length: 1001), url: Self.url, redirects: [], now: Self.t0)
        #expect(Self.lines(actions) == ["closed", "error upstream_too_large", "fail 502 [1]", "cancel", "finish"])
        let reason = actions.compactMap { action -> String? in if case let .fail(_, _, reason) = action { reason } else { nil } }.first
        #expect(reason?.contains("max-object-size") == true)
        // HEAD is fetched with GET: its client has the head, and nothing is left to fetch for
        var head = Self.machine(leader: Self.request(method: "HEAD", mode: .forward))
        _ = head.start()
        #expect(Self.lines(head.receiveHead(Self.page(200), url: Self.url, redirects: [], now: Self.t0))
                == ["closed", "head 200 BYPASS to 1 (ends)", "cancel", "finish"])
    }

    @Test("an image whose Content-Type is ambiguous (two fields) is refused 502 in reverse and fetch modes; forward mode passes it, uncached, as the origin's own")
    func ambiguousType() {
        let polyglot = HTTPResponseHead(status: 200, headers: HTTPHeaders([("Content-Type", "image/png"), ("Content-Type", "text/html"),
                                                                           ("Content-Length", String(Self.png.count))]))
        for mode in [Route.Mode.reverse, .fetch] {
            var machine = Self.machine(leader: Self.request(mode: mode))
            _ = machine.start()
            #expect(Self.lines(machine.receiveHead(polyglot, url: Self.url, redirects: [], now: Self.t0))
                    == ["error content_refused", "fail 502 [1]", "cancel", "closed", "finish"], "\(mode)")
        }
        var forward = Self.machine(leader: Self.request(mode: .forward))
        _ = forward.start()
        #expect(Self.lines(forward.receiveHead(polyglot, url: Self.url, redirects: [], now: Self.t0)) == ["closed", "head 200 BYPASS to 1"])
        #expect(Self.lines(forward.receiveBody(Self.png, now: Self.t0)) == ["body 100 to [1]", "end [1]", "finish"])
    }
}
