// RenditionMachine as a value: sequences of events (clients join and leave, the source arrives, fails or is late, a
// worker takes the transform or it is withdrawn, the transform ends, the store has the entry) and the actions each
// returns. No sockets, queues, sinks or libvips: a transform's result is a value made here; the time is a fixed date.

import Foundation
import ImageCacheTestSupport
import Testing
@testable import ImageCacheHTTP
@testable import ImageCacheServer
@testable import ImageCacheStore
@testable import ImageCacheTransform
@testable import ImageCacheCore

@Suite("RenditionMachine: a rendition job's decisions as a value", .timeLimit(.minutes(1)))
struct RenditionMachineTests {
    static let url = "http://origin.test/a.jpg"
    static let t0 = Fixture.t0
    static let rendition = RenditionRequest(source: try! UpstreamURL.parse(url), options: TransformOptions(),
                                            canonical: "rs:fit:100:0", choice: .init(format: .webp, variesOnAccept: false))
    static let webp: [UInt8] = Array("RIFF....WEBPVP8 ".utf8) + Array(repeating: 9, count: 40)

    static func request(_ headers: [(String, String)] = []) -> ClientRequest {
        ClientRequest(head: HTTPRequestHead(method: "GET", target: "/transform/rs:fit:100:0/plain/" + url,
                                            headers: HTTPHeaders([("Host", "127.0.0.1")] + headers)),
                      url: try! UpstreamURL.parse(url), mode: .fetch, trusted: false,
                      client: ClientInfo(address: "127.0.0.1", isLoopback: true), rendition: rendition, staleWhileRevalidate: 0)
    }

    static func rules(staleIfError: Double = 0, completeAbandoned: Bool = false) -> RenditionMachine.Rules {
        RenditionMachine.Rules(sourceTimeoutSeconds: 10, staleIfErrorSeconds: staleIfError,
                               completeAbandonedJobs: completeAbandoned, freshness: FreshnessPolicy())
    }

    /// A started machine with its leader (client 1) and `others` collapsed clients (2, 3, ...).
    static func machine(others: Int = 0, stale: CacheEntry? = nil, stores: Bool = true, rules: RenditionMachine.Rules = rules(),
                        fillsCache: Bool = false) -> RenditionMachine {
        var machine = RenditionMachine(key: rendition.key, leader: request(), rendition: rendition, stale: stale, stores: stores,
                                       rules: rules, fillsCache: fillsCache, nonce: 42)
        if !fillsCache { _ = machine.attach(1, request: request(), collapsed: false) }
        for id in 0..<others { _ = machine.attach(id + 2, request: request(), collapsed: true) }
        _ = machine.start()
        return machine
    }

    static func source(_ status: Int = 200, etag: String? = "\"v1\"", cacheControl: String = "max-age=60") -> RenditionMachine.Source {
        var fields = [("Content-Type", "image/jpeg"), ("Cache-Control", cacheControl), ("Date", Fixture.date(0))]
        if let etag { fields.append(("ETag", etag)) }
        return .init(head: HTTPResponseHead(status: status, headers: HTTPHeaders(fields)), body: Array(repeating: 1, count: 500))
    }

    static let image = TransformedImage(bytes: webp, format: .webp, width: 100, height: 50, frames: 1)

    /// The stored rendition made from source validator `validator`, `age` seconds old at t0.
    static func staleRendition(validator: String = "\"v1\"", age: Double = 120, cacheControl: String = "max-age=60") -> CacheEntry {
        Fixture.entry([("Content-Type", "image/webp"), ("Cache-Control", cacheControl), ("Date", Fixture.date(-age)),
                       ("ETag", RenditionTag.etag(sourceValidator: validator, rendition: rendition.key.rendition))],
                      key: rendition.key, body: webp, requestTime: t0.addingTimeInterval(-age), responseTime: t0.addingTimeInterval(-age))
    }

    /// The actions as short lines (debug logs left out), so a test states the whole sequence it expects.
    static func lines(_ actions: [RenditionMachine.Action]) -> [String] {
        actions.compactMap { action in
            switch action {
            case let .askFleet(after): after == 0 ? "ask fleet" : "poll fleet after \(Int((after * 1000).rounded())) ms"
            case let .fleetStore(entry, ttl): "fleet store \(entry.body.count) ttl \(ttl)"
            case let .fleetPass(_, ttl): "fleet pass \(ttl)s"
            case .fleetRelease: "fleet release"
            case let .fetchSource(request): "fetch source \(request.head.target)"
            case let .armDeadline(seconds): "arm deadline \(Int(seconds))s"
            case .cancelDeadline: "cancel deadline"
            case .dropSource: "drop source"
            case .abandonSource: "abandon source"
            case let .submit(source): "submit \(source.count)"
            case .withdraw: "withdraw"
            case let .store(entry): "store \(entry.body.count)"
            case let .refresh(entry): "refresh \(entry.body.count)"
            case let .send(entry, id, outcome): "send \(entry.body.count) to \(id): \(outcome.cacheStatus)"
            case let .fail(ids, status, _): "fail \(status) \(ids)"
            case let .redispatch(waiters): "redispatch \(waiters.map(\.id))"
            case let .count(format, result, _, bytesIn, bytesOut): "count \(format) \(result) \(bytesIn)->\(bytesOut)"
            case let .report(status, _, label): "report \(status) \(label)"
            case .log: nil
            case .finish: "finish"
            }
        }
    }

    @Test("a new rendition: the source is fetched under a deadline, transformed once, stored, and every client gets it; the job finishes once the store has it")
    func madeOnce() {
        var machine = Self.machine(others: 1)
        #expect(Self.lines(machine.start()) == [])  // started once
        #expect(Self.lines(RenditionMachine(key: Self.rendition.key, leader: Self.request(), rendition: Self.rendition, stale: nil,
                                            stores: true, rules: Self.rules()).startLines) == ["fetch source /a.jpg", "arm deadline 10s"])
        #expect(Self.lines(machine.sourceArrived(.success(Self.source()), now: Self.t0)) == ["cancel deadline", "submit 500"])
        #expect(Self.lines(machine.workerStarted()) == [])
        let made = machine.transformed(.success(Self.image), seconds: 0.02, now: Self.t0)
        #expect(Self.lines(made) == [
            "count webp ok 500->\(Self.webp.count)", "store \(Self.webp.count)",
            "send \(Self.webp.count) to 1: imagecached; fwd=uri-miss; stored; detail=transformed",
            "send \(Self.webp.count) to 2: imagecached; fwd=uri-miss; stored; collapsed; detail=transformed",
        ])
        // The rendition's validator is derived from the source's and the rendition's text.
        if case let .store(entry) = made[2] {
            #expect(entry.etag == RenditionTag.etag(sourceValidator: "\"v1\"", rendition: Self.rendition.key.rendition))
            #expect(entry.head.headers["Cache-Control"] == "max-age=60")
        } else {
            Issue.record("the third action stores")
        }
        // A client that comes while the store is under way is answered from the entry at once.
        #expect(Self.lines(machine.attach(3, request: Self.request(), collapsed: true)) == [
            "send \(Self.webp.count) to 3: imagecached; fwd=uri-miss; stored; collapsed; detail=transformed",
        ])
        #expect(Self.lines(machine.stored()) == ["finish"])
        #expect(machine.isDone)
    }

    @Test("the deadline passes before the source is whole: 504 for every client, the collection dropped, and a source that arrives later changes nothing")
    func deadline() {
        var machine = Self.machine(others: 1)
        #expect(Self.lines(machine.deadline(now: Self.t0)) == [
            "drop source", "count webp source_timeout 0->0", "report 504 source_timeout", "fail 504 [1, 2]", "finish",
        ])
        #expect(Self.lines(machine.sourceArrived(.success(Self.source()), now: Self.t0)) == [])
        #expect(Self.lines(machine.deadline(now: Self.t0)) == [])
    }

    @Test("the deadline or a failing source with a stale rendition that stale-if-error allows: the stale rendition is served, no transform")
    func staleIfError() {
        var late = Self.machine(stale: Self.staleRendition(), rules: Self.rules(staleIfError: 3600))
        #expect(Self.lines(late.deadline(now: Self.t0)) == [
            "drop source", "count webp source_timeout 0->0",
            "send \(Self.webp.count) to 1: imagecached; hit; ttl=-60; detail=stale-if-error", "finish",
        ])
        var failing = Self.machine(stale: Self.staleRendition(), rules: Self.rules(staleIfError: 3600))
        #expect(Self.lines(failing.sourceArrived(.success(Self.source(503)), now: Self.t0)) == [
            "cancel deadline", "send \(Self.webp.count) to 1: imagecached; hit; ttl=-60; detail=stale-if-error", "finish",
        ])
        // Without stale-if-error the failure is the clients'.
        var strict = Self.machine(stale: Self.staleRendition())
        #expect(Self.lines(strict.sourceArrived(.failure(.init(status: 502, reason: "unreachable", label: "source_failed")), now: Self.t0)) == [
            "cancel deadline", "count webp source_failed 0->0", "report 502 source_failed", "fail 502 [1]", "finish",
        ])
    }

    @Test("the source's status: 404 and 410 are 404, other statuses 502, each named in the reason")
    func sourceStatus() {
        for (status, expected) in [(404, 404), (410, 404), (403, 502), (500, 502)] {
            var machine = Self.machine()
            let actions = machine.sourceArrived(.success(Self.source(status)), now: Self.t0)
            #expect(Self.lines(actions) == ["cancel deadline", "count webp source_\(status) 0->0", "report \(expected) source_\(status)",
                                            "fail \(expected) [1]", "finish"])
            if case let .fail(_, _, reason) = actions[3] { #expect(reason == "the source answered \(status)") }
        }
    }

    @Test("a stale rendition whose source is unchanged (same validator) is refreshed without a transform; one revalidated into another version is transformed again")
    func revalidated() {
        var same = Self.machine(others: 1, stale: Self.staleRendition(validator: "\"v1\""))
        #expect(Self.lines(same.sourceArrived(.success(Self.source(etag: "\"v1\"")), now: Self.t0)) == [
            "cancel deadline", "count webp refreshed 0->0", "refresh \(Self.webp.count)",
            "send \(Self.webp.count) to 1: imagecached; fwd=stale; fwd-status=304; stored; detail=refreshed",
            "send \(Self.webp.count) to 2: imagecached; fwd=stale; fwd-status=304; stored; collapsed; detail=refreshed",
        ])
        #expect(Self.lines(same.stored()) == ["finish"])

        var changed = Self.machine(stale: Self.staleRendition(validator: "\"v1\""))
        #expect(Self.lines(changed.sourceArrived(.success(Self.source(etag: "\"v2\"")), now: Self.t0)) == ["cancel deadline", "submit 500"])
        let made = changed.transformed(.success(Self.image), seconds: 0.01, now: Self.t0)
        #expect(Self.lines(made).contains("send \(Self.webp.count) to 1: imagecached; fwd=stale; stored; detail=transformed"))
        if case let .store(entry) = made[2] {
            #expect(entry.etag == RenditionTag.etag(sourceValidator: "\"v2\"", rendition: Self.rendition.key.rendition))
        } else {
            Issue.record("the third action stores")
        }
    }

    @Test("every client leaves while the source is on its way: the job ends and leaves the source's fetch; with complete-abandoned-fetches (if it stores), or as a background refresh, it runs on")
    func leaveWhileFetching() {
        var machine = Self.machine(others: 1)
        #expect(Self.lines(machine.detach(2)) == [])
        #expect(Self.lines(machine.detach(1)) == ["cancel deadline", "abandon source", "count webp abandoned 0->0", "finish"])
        #expect(Self.lines(machine.sourceArrived(.success(Self.source()), now: Self.t0)) == [])

        var keeps = Self.machine(rules: Self.rules(completeAbandoned: true))
        #expect(Self.lines(keeps.detach(1)) == [])
        #expect(Self.lines(keeps.sourceArrived(.success(Self.source()), now: Self.t0)) == ["cancel deadline", "submit 500"])

        // complete-abandoned-fetches fills the cache; a job that may not store (a client's no-store) has nothing to fill.
        var useless = Self.machine(stores: false, rules: Self.rules(completeAbandoned: true))
        #expect(Self.lines(useless.detach(1)) == ["cancel deadline", "abandon source", "count webp abandoned 0->0", "finish"])

        var refresh = Self.machine(stale: Self.staleRendition(validator: "\"v0\""), fillsCache: true)
        _ = refresh.attach(2, request: Self.request(), collapsed: true)
        #expect(Self.lines(refresh.detach(2)) == [])
        #expect(Self.lines(refresh.sourceArrived(.success(Self.source()), now: Self.t0)) == ["cancel deadline", "submit 500"])
        #expect(Self.lines(refresh.transformed(.success(Self.image), seconds: 0.01, now: Self.t0)) == [
            "count webp ok 500->\(Self.webp.count)", "store \(Self.webp.count)",
        ])
        #expect(Self.lines(refresh.stored()) == ["finish"])
    }

    @Test("the last client leaves while the transform waits for a worker: it is withdrawn from the queue; once a worker has it, its result is stored for the next client")
    func leaveWhileQueued() {
        var machine = Self.machine()
        _ = machine.sourceArrived(.success(Self.source()), now: Self.t0)
        #expect(Self.lines(machine.detach(1)) == ["withdraw"])
        #expect(Self.lines(machine.withdrawn()) == ["count webp abandoned 0->0", "finish"])
        #expect(Self.lines(machine.transformed(.success(Self.image), seconds: 0, now: Self.t0)) == [])

        // A client came between the withdrawal asked and made: the transform goes back to the pool for it.
        var rejoined = Self.machine()
        _ = rejoined.sourceArrived(.success(Self.source()), now: Self.t0)
        #expect(Self.lines(rejoined.detach(1)) == ["withdraw"])
        _ = rejoined.attach(2, request: Self.request(), collapsed: true)
        #expect(Self.lines(rejoined.withdrawn()) == ["submit 500"])
        #expect(Self.lines(rejoined.transformed(.success(Self.image), seconds: 0.01, now: Self.t0)).contains(
            "send \(Self.webp.count) to 2: imagecached; fwd=uri-miss; stored; collapsed; detail=transformed"))

        // The withdrawal came too late: a worker took it.
        var taken = Self.machine()
        _ = taken.sourceArrived(.success(Self.source()), now: Self.t0)
        #expect(Self.lines(taken.detach(1)) == ["withdraw"])
        #expect(Self.lines(taken.workerStarted()) == [])
        #expect(Self.lines(taken.withdrawn()) == [])
        #expect(Self.lines(taken.transformed(.success(Self.image), seconds: 0.01, now: Self.t0)) == [
            "count webp ok 500->\(Self.webp.count)", "store \(Self.webp.count)",
        ])
        #expect(Self.lines(taken.stored()) == ["finish"])

        // A transforming job whose clients left and that may not store: its result is dropped.
        var alone = Self.machine(stores: false)
        _ = alone.sourceArrived(.success(Self.source()), now: Self.t0)
        _ = alone.workerStarted()
        #expect(Self.lines(alone.detach(1)) == [])
        #expect(Self.lines(alone.transformed(.success(Self.image), seconds: 0.01, now: Self.t0)) == [
            "count webp ok 500->\(Self.webp.count)", "finish",
        ])
    }

    @Test("the transform fails (a limit, or the pool's queue full or waited out): every client gets its status, counted once with the source's bytes")
    func transformFails() {
        for failure in [TransformFailure(status: 422, reason: "too many megapixels", label: "megapixels"),
                        TransformFailure(status: 503, reason: "the transform queue is full", label: "queue_full")] {
            var machine = Self.machine(others: 1)
            _ = machine.sourceArrived(.success(Self.source()), now: Self.t0)
            #expect(Self.lines(machine.transformed(.failure(failure), seconds: 0.5, now: Self.t0)) == [
                "count webp \(failure.label) 500->0", "report \(failure.status) \(failure.label)", "fail \(failure.status) [1, 2]", "finish",
            ])
        }
    }

    @Test("a source that may not be shared (private): the rendition goes to the leader only, is not stored, and the others ask again after the job left the table")
    func notShareable() {
        var machine = Self.machine(others: 2)
        _ = machine.sourceArrived(.success(Self.source(cacheControl: "private, max-age=60")), now: Self.t0)
        #expect(Self.lines(machine.transformed(.success(Self.image), seconds: 0.01, now: Self.t0)) == [
            "count webp ok 500->\(Self.webp.count)", "finish", "redispatch [2, 3]",
            "send \(Self.webp.count) to 1: imagecached; fwd=uri-miss; detail=transformed",
        ])
    }

    @Test("a client's no-store: the rendition is shared with whoever joined but not stored, and the job finishes with its answers")
    func noStore() {
        var machine = Self.machine(others: 1, stores: false)
        _ = machine.sourceArrived(.success(Self.source()), now: Self.t0)
        #expect(Self.lines(machine.transformed(.success(Self.image), seconds: 0.01, now: Self.t0)) == [
            "count webp ok 500->\(Self.webp.count)",
            "send \(Self.webp.count) to 1: imagecached; fwd=uri-miss; detail=transformed",
            "send \(Self.webp.count) to 2: imagecached; fwd=uri-miss; collapsed; detail=transformed",
            "finish",
        ])
    }

    @Test("the source request carries the leader's revalidation wishes but not its no-store, nor any other field")
    func sourceRequest() {
        let leader = Self.request([("Cache-Control", "no-cache, no-store"), ("Pragma", "no-cache"), ("Cookie", "a=b")])
        let source = RenditionMachine.sourceRequest(for: leader)
        #expect(source.head.target == "/a.jpg")
        #expect(source.head.headers["Cache-Control"] == "no-cache")
        #expect(source.head.headers["Pragma"] == "no-cache")
        #expect(source.head.headers["Cookie"] == nil)
        #expect(source.rendition == nil)
    }
}

extension RenditionMachine {
    /// The actions of a fresh machine's start.
    fileprivate var startLines: [RenditionMachine.Action] {
        var copy = self
        return copy.start()
    }
}
