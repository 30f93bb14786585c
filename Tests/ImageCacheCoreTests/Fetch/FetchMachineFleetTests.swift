// FetchMachine's fleet stage as a value: what a miss does with the fleet tier's answers (hit, won, wait, pass marker,
// unavailable, damaged), what becomes of a lease this host won (stored with it, a pass marker, handed back), and that
// nothing but a miss of the URL's own response asks the fleet.

import Foundation
import ImageCacheTestSupport
import Testing
@testable import ImageCacheHTTP
@testable import ImageCacheConfig
@testable import ImageCacheStatus
@testable import ImageCacheStore
@testable import ImageCacheUpstream
@testable import ImageCacheCore

@Suite("FetchMachine: the fleet stage", .timeLimit(.minutes(1)))
struct FetchMachineFleetTests {
    typealias T = FetchMachineTests

    static func fleetRules(wait: Double = 10, writesToDisk: Bool = false) -> FetchMachine.Rules {
        var rules = T.rules(writesToDisk: writesToDisk)
        rules.fleet = FetchMachine.FleetRules(waitSeconds: wait)
        return rules
    }

    static func machine(others: Int = 0, rules: FetchMachine.Rules = fleetRules(), reason: CacheOutcome.Forward = .miss,
                        revalidating: CacheEntry? = nil) -> FetchMachine {
        T.machine(others: Array(repeating: T.request(), count: others), rules: rules, revalidating: revalidating, reason: reason)
    }

    /// An entry another host stored `age` seconds before t0 (max-age=60).
    static func fleetEntry(age: Double = 0) -> CacheEntry { T.stored(age: age) }

    @Test("a miss asks the fleet first (not the origin); without a fleet tier it goes to the origin")
    func missAsksFleet() {
        var machine = Self.machine()
        #expect(T.lines(machine.start()) == ["ask fleet"])
        var alone = T.machine()
        #expect(T.lines(alone.start()) == ["start"])
    }

    @Test("a miss the disk tier answered with nothing asks the fleet")
    func diskMissAsksFleet() {
        var machine = Self.machine(rules: Self.fleetRules(writesToDisk: true))
        #expect(T.lines(machine.start(fromDisk: nil, removalsSeen: 0, now: T.t0)) == ["ask fleet"])
    }

    @Test("a request's own no-cache, bypasses and vary misses never ask the fleet")
    func onlyMissesAndStaleCopies() {
        var request = Self.machine(reason: .request, revalidating: T.stored(age: 120))
        #expect(T.lines(request.start()) == ["start If-None-Match: \"v1\""])
        var bypass = Self.machine(reason: .bypass)
        #expect(T.lines(bypass.start()) == ["start"])
        var vary = Self.machine(reason: .varyMiss)
        #expect(T.lines(vary.start()) == ["start"])
    }

    @Test("a stale copy is revalidated once per fleet: the lease's winner asks the origin, and shares the copy its 304 refreshed")
    func staleRevalidatedOnce() {
        var machine = Self.machine(reason: .stale, revalidating: T.stored(age: 120))
        #expect(T.lines(machine.start()) == ["ask fleet"])
        #expect(T.lines(machine.fleetAnswered(.won, waited: 0, now: T.t0)) == ["start If-None-Match: \"v1\""])
        let lines = T.lines(machine.receiveHead(HTTPResponseHead(status: 304, headers: HTTPHeaders([
            ("ETag", "\"v1\""), ("Cache-Control", "max-age=60"),
        ])), url: T.url, redirects: [], now: T.t0))
        #expect(lines.prefix(2) == ["refresh \"v1\"", "fleet store 100 ttl 60"], "\(lines)")
        #expect(lines.contains("stored REVALIDATED imagecached; fwd=stale; fwd-status=304; stored to 1"))
    }

    @Test("a stale copy another host revalidated meanwhile: the fleet's fresh copy replaces it, no request to the origin")
    func staleRefreshedByAnotherHost() {
        var machine = Self.machine(reason: .stale, revalidating: T.stored(age: 120))
        _ = machine.start()
        #expect(T.lines(machine.fleetAnswered(.wait, waited: 0, now: T.t0)) == ["poll fleet after 10 ms"])
        #expect(T.lines(machine.fleetAnswered(.hit(Self.fleetEntry(age: 1)), waited: 0.01, now: T.t0)) == [
            "store 100", "stored COALESCED imagecached; fwd=stale; stored; collapsed; detail=fleet to 1", "closed", "finish",
        ])
    }

    @Test("a stale copy whose fleet lookup is unavailable is revalidated here, as without a fleet")
    func staleAlone() {
        var machine = Self.machine(reason: .stale, revalidating: T.stored(age: 120))
        _ = machine.start()
        #expect(T.lines(machine.fleetAnswered(.unavailable("down"), waited: 0, now: T.t0)) == ["start If-None-Match: \"v1\""])
    }

    @Test("a fleet hit is kept here and served to every waiter as hit; detail=fleet, with its age counted")
    func hit() {
        var machine = Self.machine(others: 1)
        _ = machine.start()
        let lines = T.lines(machine.fleetAnswered(.hit(Self.fleetEntry(age: 15)), waited: 0, now: T.t0))
        #expect(lines == [
            "store 100",
            "stored HIT imagecached; hit; ttl=45; detail=fleet to 1",
            "stored HIT imagecached; hit; ttl=45; detail=fleet to 2",
            "closed", "finish",
        ])
    }

    @Test("a fill another host made, waited for, is served as collapsed; detail=fleet")
    func hitAfterWaiting() {
        var machine = Self.machine()
        _ = machine.start()
        #expect(T.lines(machine.fleetAnswered(.wait, waited: 0.001, now: T.t0)) == ["poll fleet after 10 ms"])
        #expect(T.lines(machine.fleetAnswered(.wait, waited: 0.011, now: T.t0)) == ["poll fleet after 20 ms"])
        #expect(T.lines(machine.fleetAnswered(.hit(Self.fleetEntry()), waited: 0.031, now: T.t0)) == [
            "store 100", "stored COALESCED imagecached; fwd=uri-miss; stored; collapsed; detail=fleet to 1", "closed", "finish",
        ])
    }

    @Test("polls back off from 10 ms, doubling to a 40 ms cap (the last waiter's lag after the fill lands)")
    func backoff() {
        var machine = Self.machine()
        _ = machine.start()
        var delays: [String] = []
        for _ in 0..<7 { delays += T.lines(machine.fleetAnswered(.wait, waited: 1, now: T.t0)) }
        #expect(delays == ["poll fleet after 10 ms", "poll fleet after 20 ms", "poll fleet after 40 ms", "poll fleet after 40 ms",
                           "poll fleet after 40 ms", "poll fleet after 40 ms", "poll fleet after 40 ms"])
    }

    @Test("past fleet.wait a waiter fetches alone, and stores nothing in the fleet (the lease is another host's)")
    func waitCap() {
        var machine = Self.machine(rules: Self.fleetRules(wait: 2))
        _ = machine.start()
        #expect(T.lines(machine.fleetAnswered(.wait, waited: 2.0, now: T.t0)) == ["start"])
        _ = machine.receiveHead(T.head(), url: T.url, redirects: [], now: T.t0)
        let lines = T.lines(machine.receiveBody(T.png, now: T.t0))
        #expect(lines == ["store 100", "whole 200 MISS 100 to 1", "closed", "finish"])
    }

    @Test("the winner fetches, and the entry it stores goes to the fleet with the lease, for its freshness left")
    func winnerStores() {
        var machine = Self.machine(others: 1)
        _ = machine.start()
        #expect(T.lines(machine.fleetAnswered(.won, waited: 0, now: T.t0)) == ["start"])
        _ = machine.receiveHead(T.head(), url: T.url, redirects: [], now: T.t0)
        #expect(T.lines(machine.receiveBody(T.png, now: T.t0)) == [
            "store 100", "fleet store 100 ttl 60", "whole 200 MISS 100 to 1", "whole 200 COALESCED 100 to 2", "closed", "finish",
        ])
    }

    @Test("a winner whose response may not be stored (no-store) leaves a pass marker, so the waiters do not wait out the lease")
    func noStoreLeavesPass() {
        var machine = Self.machine()
        _ = machine.start()
        _ = machine.fleetAnswered(.won, waited: 0, now: T.t0)
        _ = machine.receiveHead(HTTPResponseHead(status: 200, headers: HTTPHeaders([
            ("Content-Type", "image/png"), ("Cache-Control", "no-store"), ("Content-Length", "100"),
        ])), url: T.url, redirects: [], now: T.t0)
        let lines = T.lines(machine.receiveBody(T.png, now: T.t0))
        #expect(lines.contains { $0.hasPrefix("fleet pass 60: not stored") })
        #expect(!lines.contains { $0.hasPrefix("fleet store") })
    }

    @Test("a winner whose origin fails (or answers an error not stored) leaves a short pass marker")
    func failureLeavesPass() {
        var machine = Self.machine()
        _ = machine.start()
        _ = machine.fleetAnswered(.won, waited: 0, now: T.t0)
        let lines = T.lines(machine.receiveFailure(.connect("refused"), now: T.t0))
        #expect(lines.contains("fleet pass 2: the fill failed or was not kept"))
        #expect(lines.contains("fail 502 [1]"))
    }

    @Test("a winner whose every client left hands the lease back (the next asker fills), and cancels the transfer")
    func winnerAbandoned() {
        var machine = Self.machine()
        _ = machine.start()
        _ = machine.fleetAnswered(.won, waited: 0, now: T.t0)
        #expect(T.lines(machine.detach(1)) == ["fleet release", "cancel", "closed", "finish"])
    }

    @Test("a lease won after every client left goes back at once")
    func lateLease() {
        var machine = Self.machine()
        _ = machine.start()
        #expect(T.lines(machine.detach(1)) == ["cancel", "closed", "finish"])
        #expect(T.lines(machine.fleetAnswered(.won, waited: 0, now: T.t0)) == ["fleet release"])
    }

    @Test("a pass marker sends the waiters to the origin at once, alone; a stored response then leaves nothing in the fleet")
    func passMarker() {
        var machine = Self.machine()
        _ = machine.start()
        _ = machine.fleetAnswered(.wait, waited: 0, now: T.t0)
        #expect(T.lines(machine.fleetAnswered(.pass("not stored: no-store"), waited: 0.05, now: T.t0)) == ["start"])
        _ = machine.receiveHead(T.head(), url: T.url, redirects: [], now: T.t0)
        #expect(!T.lines(machine.receiveBody(T.png, now: T.t0)).contains { $0.hasPrefix("fleet") })
    }

    @Test("an unavailable tier: the origin as before, labelled detail=fleet-unavailable")
    func unavailable() {
        var machine = Self.machine()
        _ = machine.start()
        #expect(T.lines(machine.fleetAnswered(.unavailable("breaker open"), waited: 0, now: T.t0)) == ["start"])
        _ = machine.receiveHead(T.head(), url: T.url, redirects: [], now: T.t0)
        let actions = machine.receiveBody(T.png, now: T.t0)
        #expect(T.lines(actions) == ["store 100", "whole 200 MISS 100 to 1", "closed", "finish"])
        let whole = actions.compactMap { action -> (HTTPResponseHead, CacheOutcome)? in
            if case let .respondWhole(head, outcome, _, _) = action { (head, outcome) } else { nil }
        }
        #expect(whole.first?.1.cacheStatus == "imagecached; fwd=uri-miss; fwd-status=200; stored; detail=fleet-unavailable")
        #expect(whole.first?.0.headers["Cache-Status"]?.hasSuffix("detail=fleet-unavailable") == true)
    }

    @Test("a damaged value is a miss: counted, and the origin asked")
    func damaged() {
        var machine = Self.machine()
        _ = machine.start()
        #expect(T.lines(machine.fleetAnswered(.damaged("body checksum mismatch"), waited: 0, now: T.t0)) == ["error fleet_damaged", "start"])
    }

    @Test("a fleet entry a waiter may not use (its request's max-age=0) is revalidated upstream for it; the others are served")
    func entryNotFreshEnough() {
        var machine = T.machine(others: [T.request([("Cache-Control", "max-age=0")])], rules: Self.fleetRules())
        _ = machine.start()
        let lines = T.lines(machine.fleetAnswered(.hit(Self.fleetEntry(age: 5)), waited: 0, now: T.t0))
        #expect(lines == ["store 100", "stored HIT imagecached; hit; ttl=55; detail=fleet to 1", "start If-None-Match: \"v1\""])
    }

    @Test("a winner's response with Vary is shared with its variant (Vary: * is not: a pass marker)")
    func varyShared() {
        var machine = T.machine(leader: T.request([("Accept", "image/webp")]), rules: Self.fleetRules())
        _ = machine.start()
        _ = machine.fleetAnswered(.won, waited: 0, now: T.t0)
        _ = machine.receiveHead(T.head(200, [("Vary", "Accept")]), url: T.url, redirects: [], now: T.t0)
        #expect(T.lines(machine.receiveBody(T.png, now: T.t0)).prefix(2) == ["store 100", "fleet store 100 ttl 60"])

        var everything = Self.machine()
        _ = everything.start()
        _ = everything.fleetAnswered(.won, waited: 0, now: T.t0)
        _ = everything.receiveHead(T.head(200, [("Vary", "*")]), url: T.url, redirects: [], now: T.t0)
        let lines = T.lines(everything.receiveBody(T.png, now: T.t0))
        #expect(lines.contains { $0.hasPrefix("fleet pass 60") }, "\(lines)")
        #expect(!lines.contains { $0.hasPrefix("fleet store") })
    }

    @Test("a fleet hit that varies is served to the waiters it selects; the others go to their own variant's fetch")
    func varyHitSplitsWaiters() {
        var machine = T.machine(leader: T.request([("Accept", "image/webp")]),
                                others: [T.request([("Accept", "image/avif")]), T.request([("Accept", "image/webp")])],
                                rules: Self.fleetRules())
        _ = machine.start()
        let varied = Fixture.entry([("Content-Type", "image/png"), ("Cache-Control", "max-age=60"), ("ETag", "\"v1\""),
                                    ("Vary", "Accept")],
                                   key: Fixture.key(T.url), body: T.png, requestTime: T.t0, responseTime: T.t0,
                                   requestHeaders: ["Accept": "image/webp"])
        let lines = T.lines(machine.fleetAnswered(.hit(varied), waited: 0, now: T.t0))
        #expect(lines == [
            "store 100", "to variants [2]",
            "stored HIT imagecached; hit; ttl=60; detail=fleet to 1",
            "stored HIT imagecached; hit; ttl=60; detail=fleet to 3",
            "closed", "finish",
        ], "\(lines)")
    }
}
