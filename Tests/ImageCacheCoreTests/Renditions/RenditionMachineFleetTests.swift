// RenditionMachine's fleet stage as a value: a new rendition is looked up in the fleet tier before its source is asked
// for; another host's rendition is served and kept here (no source, no transform); a lease won makes it here and
// shares it (or leaves a pass marker, or hands the lease back); a wait polls until the rendition lands; a pass marker,
// an unavailable or a damaged tier make it alone. Only new renditions the job stores ask the fleet.

import Foundation
import ImageCacheTestSupport
import Testing
@testable import ImageCacheHTTP
@testable import ImageCacheServer
@testable import ImageCacheStore
@testable import ImageCacheTransform
@testable import ImageCacheCore

@Suite("RenditionMachine: the fleet stage", .timeLimit(.minutes(1)))
struct RenditionMachineFleetTests {
    typealias T = RenditionMachineTests

    static func fleetRules(wait: Double = 10, completeAbandoned: Bool = false) -> RenditionMachine.Rules {
        var rules = T.rules(completeAbandoned: completeAbandoned)
        rules.fleet = FetchMachine.FleetRules(waitSeconds: wait)
        return rules
    }

    /// A started machine with a fleet tier: its leader (client 1) and `others` collapsed clients (2, 3, ...).
    static func machine(others: Int = 0, rules: RenditionMachine.Rules = fleetRules()) -> RenditionMachine {
        T.machine(others: others, rules: rules)
    }

    /// The rendition another host stored, `age` seconds before t0 (max-age=60).
    static func fleetEntry(age: Double = 0) -> CacheEntry { T.staleRendition(age: age) }

    static let made = T.webp.count

    @Test("a new rendition asks the fleet first, before its source; without a fleet tier it asks for the source")
    func missAsksFleet() {
        // Given a job for a new rendition
        func fresh(_ rules: RenditionMachine.Rules, stale: CacheEntry? = nil, stores: Bool = true, fillsCache: Bool = false,
                   leader: ClientRequest = T.request()) -> RenditionMachine {
            var machine = RenditionMachine(key: T.rendition.key, leader: leader, rendition: T.rendition, stale: stale, stores: stores,
                                           rules: rules, fillsCache: fillsCache, nonce: 42)
            if !fillsCache { _ = machine.attach(1, request: leader, collapsed: false) }
            return machine
        }
        // When it starts, Then with a fleet tier it asks the fleet, and only the fleet
        var withFleet = fresh(Self.fleetRules())
        #expect(T.lines(withFleet.start()) == ["ask fleet"])
        var alone = fresh(T.rules())
        #expect(T.lines(alone.start()) == ["fetch source /a.jpg", "arm deadline 10s"])
        // A stale rendition being refreshed, a background refresh, a client's no-store or no-cache: the source, no fleet
        var stale = fresh(Self.fleetRules(), stale: T.staleRendition())
        #expect(T.lines(stale.start()) == ["fetch source /a.jpg", "arm deadline 10s"])
        var background = fresh(Self.fleetRules(), stale: T.staleRendition(), fillsCache: true)
        #expect(T.lines(background.start()) == ["fetch source /a.jpg", "arm deadline 10s"])
        var noStore = fresh(Self.fleetRules(), stores: false)
        #expect(T.lines(noStore.start()) == ["fetch source /a.jpg", "arm deadline 10s"])
        var noCache = fresh(Self.fleetRules(), leader: T.request([("Cache-Control", "no-cache")]))
        #expect(T.lines(noCache.start()) == ["fetch source /a.jpg", "arm deadline 10s"])
    }

    @Test("another host's rendition is kept here and served as hit; detail=fleet, with its age counted: no source, no transform")
    func hit() {
        // Given a job asking the fleet for two clients
        var machine = Self.machine(others: 1)
        // When the fleet answers with the rendition
        let lines = T.lines(machine.fleetAnswered(.hit(Self.fleetEntry(age: 15)), waited: 0, now: T.t0))
        // Then it is stored here and sent to both, and nothing is fetched or transformed
        #expect(lines == [
            "store \(Self.made)",
            "send \(Self.made) to 1: imagecached; hit; ttl=45; detail=fleet",
            "send \(Self.made) to 2: imagecached; hit; ttl=45; detail=fleet",
        ])
        // A client joining while the store takes it gets it at once; the job ends once stored.
        #expect(T.lines(machine.attach(3, request: T.request(), collapsed: true)) == [
            "send \(Self.made) to 3: imagecached; fwd=uri-miss; stored; collapsed; detail=fleet",
        ])
        #expect(T.lines(machine.stored()) == ["finish"])
        #expect(machine.isDone)
    }

    @Test("a client the fleet's rendition may not serve (no-cache) has it made here, alone; the others are served")
    func hitNotForEveryone() {
        // Given a job whose second client asked no-cache
        var machine = Self.machine()
        _ = machine.attach(2, request: T.request([("Cache-Control", "no-cache")]), collapsed: true)
        // When the fleet answers with the rendition, Then the leader has it and the job makes it for the other, leaseless
        #expect(T.lines(machine.fleetAnswered(.hit(Self.fleetEntry()), waited: 0, now: T.t0)) == [
            "store \(Self.made)", "send \(Self.made) to 1: imagecached; hit; ttl=60; detail=fleet",
            "fetch source /a.jpg", "arm deadline 10s",
        ])
        _ = machine.sourceArrived(.success(T.source()), now: T.t0)
        #expect(T.lines(machine.transformed(.success(T.image), seconds: 0.01, now: T.t0)) == [
            "count webp ok 500->\(Self.made)", "store \(Self.made)",
            "send \(Self.made) to 2: imagecached; fwd=uri-miss; stored; collapsed; detail=transformed",
        ])
    }

    @Test("a rendition another host makes, waited for: polls back off from 10 ms to 40 ms, then it is served as collapsed; detail=fleet")
    func hitAfterWaiting() {
        // Given a job the fleet told to wait
        var machine = Self.machine()
        var polls: [String] = []
        for waited in [0.001, 0.011, 0.031, 0.071] { polls += T.lines(machine.fleetAnswered(.wait, waited: waited, now: T.t0)) }
        #expect(polls == ["poll fleet after 10 ms", "poll fleet after 20 ms", "poll fleet after 40 ms", "poll fleet after 40 ms"])
        // When the rendition lands, Then it is a coalesced miss, fleet-wide
        #expect(T.lines(machine.fleetAnswered(.hit(Self.fleetEntry()), waited: 0.11, now: T.t0)) == [
            "store \(Self.made)", "send \(Self.made) to 1: imagecached; fwd=uri-miss; stored; collapsed; detail=fleet",
        ])
    }

    @Test("past fleet.wait the job makes the rendition alone and shares nothing (the lease is another host's)")
    func waitCap() {
        var machine = Self.machine(rules: Self.fleetRules(wait: 2))
        #expect(T.lines(machine.fleetAnswered(.wait, waited: 2.0, now: T.t0)) == ["fetch source /a.jpg", "arm deadline 10s"])
        _ = machine.sourceArrived(.success(T.source()), now: T.t0)
        #expect(T.lines(machine.transformed(.success(T.image), seconds: 0.01, now: T.t0)) == [
            "count webp ok 500->\(Self.made)", "store \(Self.made)",
            "send \(Self.made) to 1: imagecached; fwd=uri-miss; stored; detail=transformed",
        ])
    }

    @Test("the winner fetches the source and transforms, and the rendition it stores goes to the fleet with the lease, for its freshness left")
    func winnerStores() {
        // Given a job that won the lease
        var machine = Self.machine(others: 1)
        #expect(T.lines(machine.fleetAnswered(.won, waited: 0, now: T.t0)) == ["fetch source /a.jpg", "arm deadline 10s"])
        // When the source arrives and the transform ends
        #expect(T.lines(machine.sourceArrived(.success(T.source()), now: T.t0)) == ["cancel deadline", "submit 500"])
        #expect(machine.isWithPool)
        _ = machine.workerStarted()
        // Then the rendition is stored here and in the fleet before the clients are answered
        #expect(T.lines(machine.transformed(.success(T.image), seconds: 0.01, now: T.t0)) == [
            "count webp ok 500->\(Self.made)", "store \(Self.made)", "fleet store \(Self.made) ttl 60",
            "send \(Self.made) to 1: imagecached; fwd=uri-miss; stored; detail=transformed",
            "send \(Self.made) to 2: imagecached; fwd=uri-miss; stored; collapsed; detail=transformed",
        ])
        #expect(T.lines(machine.stored()) == ["finish"])
    }

    @Test("a winner whose rendition cannot be shared or made leaves a pass marker: 60 s for private, 2 s after a failure or the deadline")
    func winnerLeavesPass() {
        // A private source: the rendition goes to the leader only, and the other hosts make their own
        var privately = Self.machine()
        _ = privately.fleetAnswered(.won, waited: 0, now: T.t0)
        _ = privately.sourceArrived(.success(T.source(cacheControl: "private, max-age=60")), now: T.t0)
        #expect(T.lines(privately.transformed(.success(T.image), seconds: 0.01, now: T.t0)) == [
            "count webp ok 500->\(Self.made)", "fleet pass 60s", "finish",
            "send \(Self.made) to 1: imagecached; fwd=uri-miss; detail=transformed",
        ])
        // A transform that fails
        var failing = Self.machine()
        _ = failing.fleetAnswered(.won, waited: 0, now: T.t0)
        _ = failing.sourceArrived(.success(T.source()), now: T.t0)
        let refused = TransformFailure(status: 422, reason: "too many pixels", label: "megapixels")
        #expect(T.lines(failing.transformed(.failure(refused), seconds: 0.01, now: T.t0)) == [
            "count webp megapixels 500->0", "report 422 megapixels", "fail 422 [1]", "fleet pass 2s", "finish",
        ])
        // The source deadline
        var late = Self.machine()
        _ = late.fleetAnswered(.won, waited: 0, now: T.t0)
        #expect(T.lines(late.deadline(now: T.t0)) == [
            "drop source", "count webp source_timeout 0->0", "report 504 source_timeout", "fail 504 [1]", "fleet pass 2s", "finish",
        ])
        // A source with no freshness to share (stored here by the heuristics of nothing: max-age=0 is not shared)
        var unfresh = Self.machine()
        _ = unfresh.fleetAnswered(.won, waited: 0, now: T.t0)
        _ = unfresh.sourceArrived(.success(T.source(cacheControl: "max-age=0")), now: T.t0)
        #expect(T.lines(unfresh.transformed(.success(T.image), seconds: 0.01, now: T.t0)).contains("fleet pass 60s"))
    }

    enum Alone: String, CaseIterable, Sendable { case pass, unavailable, damaged }

    @Test("a pass marker, an unavailable tier or a damaged value: made alone, nothing shared", arguments: Alone.allCases)
    func alone(_ kind: Alone) {
        var machine = Self.machine()
        let answer: FetchMachine.FleetAnswer = switch kind {
        case .pass: .pass("not shareable")
        case .unavailable: .unavailable("connection refused")
        case .damaged: .damaged("body checksum mismatch")
        }
        #expect(T.lines(machine.fleetAnswered(answer, waited: 0, now: T.t0)) == ["fetch source /a.jpg", "arm deadline 10s"])
        _ = machine.sourceArrived(.success(T.source()), now: T.t0)
        // (an unavailable tier is said in Cache-Status, as for a fetch; a marker or a damaged value is the fleet working)
        let detail = kind == .unavailable ? "fleet-unavailable" : "transformed"
        #expect(T.lines(machine.transformed(.success(T.image), seconds: 0.01, now: T.t0)) == [
            "count webp ok 500->\(Self.made)", "store \(Self.made)",
            "send \(Self.made) to 1: imagecached; fwd=uri-miss; stored; detail=\(detail)",
        ])
    }

    @Test("a rendition made alone while the tier was unavailable says detail=fleet-unavailable to every client, a private one's too")
    func unavailableDetail() {
        // Given a job for two clients that the tier could not answer
        var machine = Self.machine(others: 1)
        _ = machine.fleetAnswered(.unavailable("connection refused"), waited: 0, now: T.t0)
        _ = machine.sourceArrived(.success(T.source()), now: T.t0)
        // When the rendition is made, Then both clients are told the tier was unavailable
        #expect(T.lines(machine.transformed(.success(T.image), seconds: 0.01, now: T.t0)) == [
            "count webp ok 500->\(Self.made)", "store \(Self.made)",
            "send \(Self.made) to 1: imagecached; fwd=uri-miss; stored; detail=fleet-unavailable",
            "send \(Self.made) to 2: imagecached; fwd=uri-miss; stored; collapsed; detail=fleet-unavailable",
        ])
        // And a rendition of a private source (the leader's alone) says it too
        var privately = Self.machine()
        _ = privately.fleetAnswered(.unavailable("connection refused"), waited: 0, now: T.t0)
        _ = privately.sourceArrived(.success(T.source(cacheControl: "private, max-age=60")), now: T.t0)
        #expect(T.lines(privately.transformed(.success(T.image), seconds: 0.01, now: T.t0)).last
                == "send \(Self.made) to 1: imagecached; fwd=uri-miss; detail=fleet-unavailable")
    }

    @Test("the lease a job holds is kept alive while its source is awaited (it may wait on another host's fill) and while the pool has the transform; never without a lease")
    func keepsLeaseAlive() {
        // Given a job asking the fleet: no lease yet
        var machine = Self.machine()
        #expect(!machine.keepsLeaseAlive)
        // When it wins the lease and waits for its source (which may wait on another host's fill longer than fleet.lease)
        _ = machine.fleetAnswered(.won, waited: 0, now: T.t0)
        // Then the lease is kept alive, and while the transform is queued and on a worker
        #expect(machine.keepsLeaseAlive)
        _ = machine.sourceArrived(.success(T.source()), now: T.t0)
        #expect(machine.keepsLeaseAlive)
        _ = machine.workerStarted()
        #expect(machine.keepsLeaseAlive)
        // Once the rendition is shared the lease is the store's: nothing more to keep alive
        _ = machine.transformed(.success(T.image), seconds: 0.01, now: T.t0)
        #expect(!machine.keepsLeaseAlive)
        // A job making its rendition alone, or one that handed its lease back, holds nothing to keep alive
        var alone = Self.machine()
        _ = alone.fleetAnswered(.unavailable("connection refused"), waited: 0, now: T.t0)
        #expect(!alone.keepsLeaseAlive)
        var abandoned = Self.machine()
        _ = abandoned.fleetAnswered(.won, waited: 0, now: T.t0)
        _ = abandoned.detach(1)
        #expect(!abandoned.keepsLeaseAlive)
    }

    @Test("a rendition is received when its source was: the source entry's response time, and its age exactly its source's")
    func sourceTimes() {
        // Given a source the origin answered 30 s before t0 (corrected initial age 10: Age 10 from the origin), served
        // from the cache at t0 with Age: 40
        var source = RenditionMachine.Source(
            head: Fixture.head(200, [("Content-Type", "image/jpeg"), ("Cache-Control", "max-age=600"), ("Date", Fixture.date(-40)),
                                     ("Age", "40"), ("ETag", "\"v1\"")]),
            body: Array(repeating: 1, count: 500))
        source.received = CacheOutcome.Received(responseTime: T.t0.addingTimeInterval(-30), initialAge: 10)
        // When its rendition is made 5 s later
        let made = RenditionMachine.entry(key: T.rendition.key, rendition: T.rendition, body: T.webp, mediaType: "image/webp",
                                          source: source, etag: "\"r\"", freshness: FreshnessPolicy(), now: T.t0.addingTimeInterval(5))
        // Then it carries the source's response time (a purge of the source since then covers it), and is as old as
        // its source at any time: 10 s when the origin answered, 45 s now (not 40 + 35, the served Age counted twice)
        #expect(made.entry.responseTime == T.t0.addingTimeInterval(-30))
        #expect(made.entry.key.url.string == RenditionMachineTests.url)
        #expect(Freshness.currentAge(made.entry, now: T.t0.addingTimeInterval(5)) == 45)
        #expect(Freshness.currentAge(made.entry, now: T.t0.addingTimeInterval(100)) == 140)
        // A source whose times are unknown: received now, its Age as served
        source.received = nil
        let unknown = RenditionMachine.entry(key: T.rendition.key, rendition: T.rendition, body: T.webp, mediaType: "image/webp",
                                             source: source, etag: "\"r\"", freshness: FreshnessPolicy(), now: T.t0.addingTimeInterval(5))
        #expect(unknown.entry.responseTime == T.t0.addingTimeInterval(5))
    }

    @Test("a rendition whose source was purged while it was made goes to its clients and is kept nowhere: not stored, the lease handed back")
    func sourcePurgedMeanwhile() {
        // Given a winner whose source the origin answered at t0, and a purge of the source at t0 + 1, during the transform
        let purgedAt = T.t0.addingTimeInterval(1)
        let purged: (CacheEntry) -> Bool = { $0.key.url.string == RenditionMachineTests.url && $0.responseTime <= purgedAt }
        var source = T.source()
        source.received = CacheOutcome.Received(responseTime: T.t0, initialAge: 0)
        var machine = Self.machine(others: 1)
        _ = machine.fleetAnswered(.won, waited: 0, now: T.t0)
        _ = machine.sourceArrived(.success(source), now: T.t0, purged: purged)
        _ = machine.workerStarted()
        // When the transform ends at t0 + 2
        let lines = T.lines(machine.transformed(.success(T.image), seconds: 2, now: T.t0.addingTimeInterval(2), purged: purged))
        // Then its clients have it, and it is neither stored here nor shared: the lease goes back
        #expect(lines == [
            "count webp ok 500->\(Self.made)", "fleet release",
            "send \(Self.made) to 1: imagecached; fwd=uri-miss; detail=transformed",
            "send \(Self.made) to 2: imagecached; fwd=uri-miss; collapsed; detail=transformed",
            "finish",
        ])
        #expect(machine.isDone)
        // Without a fleet too: not stored here
        var alone = T.machine()
        _ = alone.sourceArrived(.success(source), now: T.t0, purged: purged)
        #expect(T.lines(alone.transformed(.success(T.image), seconds: 2, now: T.t0.addingTimeInterval(2), purged: purged)) == [
            "count webp ok 500->\(Self.made)", "send \(Self.made) to 1: imagecached; fwd=uri-miss; detail=transformed", "finish",
        ])
        // A purge before the origin answered for the source does not concern it: stored and shared
        var later = Self.machine()
        _ = later.fleetAnswered(.won, waited: 0, now: T.t0)
        var fresh = source
        fresh.received = CacheOutcome.Received(responseTime: T.t0.addingTimeInterval(1.5), initialAge: 0)
        _ = later.sourceArrived(.success(fresh), now: T.t0, purged: purged)
        let stored = T.lines(later.transformed(.success(T.image), seconds: 2, now: T.t0.addingTimeInterval(2), purged: purged))
        #expect(stored.prefix(2) == ["count webp ok 500->\(Self.made)", "store \(Self.made)"])
        #expect(stored.contains { $0.hasPrefix("fleet store \(Self.made)") }, "\(stored)")
    }

    @Test("every client gone while the job holds the lease, before a worker has the transform: the lease is handed back")
    func releaseWhenAbandoned() {
        // Waiting for the source
        var waiting = Self.machine()
        _ = waiting.fleetAnswered(.won, waited: 0, now: T.t0)
        #expect(T.lines(waiting.detach(1)) == ["fleet release", "cancel deadline", "abandon source", "count webp abandoned 0->0", "finish"])
        // Queued in the pool: withdrawn, then handed back
        var queued = Self.machine()
        _ = queued.fleetAnswered(.won, waited: 0, now: T.t0)
        _ = queued.sourceArrived(.success(T.source()), now: T.t0)
        #expect(T.lines(queued.detach(1)) == ["withdraw"])
        #expect(T.lines(queued.withdrawn()) == ["fleet release", "count webp abandoned 0->0", "finish"])
        // Asking the fleet: the job ends, and a lease its lookup wins afterwards goes back at once
        var asking = Self.machine()
        #expect(T.lines(asking.detach(1)) == ["count webp abandoned 0->0", "finish"])
        #expect(T.lines(asking.fleetAnswered(.won, waited: 0, now: T.t0)) == ["fleet release"])
        #expect(T.lines(asking.fleetAnswered(.hit(Self.fleetEntry()), waited: 0, now: T.t0)) == [])
    }

    @Test("every client gone while a worker transforms: it runs on, and its rendition is still shared with the lease")
    func transformingRunsOn() {
        var machine = Self.machine()
        _ = machine.fleetAnswered(.won, waited: 0, now: T.t0)
        _ = machine.sourceArrived(.success(T.source()), now: T.t0)
        _ = machine.workerStarted()
        #expect(T.lines(machine.detach(1)) == [])
        #expect(T.lines(machine.transformed(.success(T.image), seconds: 0.01, now: T.t0)) == [
            "count webp ok 500->\(Self.made)", "store \(Self.made)", "fleet store \(Self.made) ttl 60",
        ])
    }
}
