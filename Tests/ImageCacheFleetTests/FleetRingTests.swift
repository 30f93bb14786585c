import Testing
@testable import ImageCacheFleet

@Suite(.timeLimit(.minutes(1)))
struct FleetRingTests {
    static let servers = ["10.0.0.1:11211", "10.0.0.2:11211", "10.0.0.3:11211"].map { FleetServer(parsing: $0)! }
    static let keys = (0..<30_000).map { "ic1:\($0)" }

    @Test func spreadsKeysEvenlyOverThreeServers() {
        // Given a ring of three servers
        let ring = FleetRing(servers: Self.servers)
        // When 30k keys are placed
        var counts = [0, 0, 0]
        for key in Self.keys { counts[ring.owner(of: key)!] += 1 }
        // Then each server owns about a third (10000 +- 5%; the standard deviation is about 82)
        for count in counts { #expect((9_500...10_500).contains(count), "\(counts)") }
    }

    @Test func removingAServerMovesOnlyItsKeys() {
        // Given the owners of 30k keys on three servers
        let three = FleetRing(servers: Self.servers)
        let two = FleetRing(servers: [Self.servers[0], Self.servers[2]])
        var moved = 0
        for key in Self.keys {
            let before = three.servers[three.owner(of: key)!]
            let after = two.servers[two.owner(of: key)!]
            // Then a key of a server still listed stays with it
            if before != Self.servers[1] { #expect(after == before, "\(key)") } else { moved += 1 }
        }
        #expect(moved > 9_000)
    }

    @Test func theOwnerDoesNotDependOnTheListOrder() {
        let ring = FleetRing(servers: Self.servers)
        let reversed = FleetRing(servers: Self.servers.reversed())
        for key in Self.keys.prefix(1_000) {
            #expect(ring.servers[ring.owner(of: key)!] == reversed.servers[reversed.owner(of: key)!])
        }
    }

    @Test func anEmptyRingOwnsNothing() {
        #expect(FleetRing(servers: []).owner(of: "k") == nil)
        #expect(FleetRing(servers: [Self.servers[0]]).owner(of: "k") == 0)
    }

    @Test func hashesWithXXH3() {
        // XXH3-64 of "" with seed 0 (xxHash's test vector).
        #expect(XXH3.hash([]) == 0x2D06_8005_38D3_94C2)
    }
}

@Suite(.timeLimit(.minutes(1)))
struct FleetBreakerTests {
    @Test func opensAfterConsecutiveFailuresOnly() {
        // Given a breaker opening after 3 failures for 2 s
        var breaker = FleetBreaker(failuresToOpen: 3, openSeconds: 2)
        // When 2 failures, a success, then 2 failures
        do { let result = breaker.recordFailure(now: 0); #expect(result == .none) }
        do { let result = breaker.recordFailure(now: 0); #expect(result == .none) }
        breaker.recordSuccess()
        do { let result = breaker.recordFailure(now: 1); #expect(result == .none) }
        do { let result = breaker.recordFailure(now: 1); #expect(result == .none) }
        // Then it is still closed; the third consecutive failure opens it until now + 2 s
        #expect(breaker.allowsOperations)
        do { let result = breaker.recordFailure(now: 1.5); #expect(result == .opened(until: 3.5)) }
        #expect(!breaker.allowsOperations)
        #expect(breaker.serverState == .down)
    }

    @Test func letsOneProbeOutWhenTheOpenTimeIsOver() {
        var breaker = FleetBreaker(failuresToOpen: 1, openSeconds: 2)
        _ = breaker.recordFailure(now: 10)
        // Not before the open time is over
        do { let result = breaker.startProbe(now: 11.9); #expect(!result) }
        // Then exactly one probe
        do { let result = breaker.startProbe(now: 12); #expect(result) }
        #expect(breaker.serverState == .probing)
        do { let result = breaker.startProbe(now: 12.5); #expect(!result) }
        #expect(!breaker.allowsOperations)
        // A success of an operation sent before does not close it; the probe's does
        breaker.recordSuccess()
        #expect(breaker.serverState == .probing)
        do { let result = breaker.probeSucceeded(); #expect(result == .closed) }
        #expect(breaker.allowsOperations)
        #expect(breaker.state == .closed(failures: 0))
    }

    @Test func aFailedProbeReopens() {
        var breaker = FleetBreaker(failuresToOpen: 2, openSeconds: 0.2)
        _ = breaker.recordFailure(now: 0)
        _ = breaker.recordFailure(now: 0)
        do { let result = breaker.startProbe(now: 0.2); #expect(result) }
        do { let result = breaker.recordFailure(now: 0.3); #expect(result == .opened(until: 0.5)) }
        // A failure while open changes nothing
        do { let result = breaker.recordFailure(now: 0.4); #expect(result == .none) }
        #expect(breaker.state == .open(until: 0.5))
        do { let result = breaker.probeSucceeded(); #expect(result == .none) }
    }

    @Test func anOutageOpensAtOnceFromClosedOrProbingAndChangesNothingWhileOpen() {
        // Given a breaker that opens after 3 failures
        var breaker = FleetBreaker(failuresToOpen: 3, openSeconds: 2)
        // When the server's name does not resolve: open at once, whatever the count
        do { let result = breaker.recordOutage(now: 10); #expect(result == .opened(until: 12)) }
        // Then while open another outage changes nothing
        do { let result = breaker.recordOutage(now: 11); #expect(result == .none) }
        #expect(breaker.state == .open(until: 12))
        // And at the probe, an outage (the name still does not resolve) reopens it
        do { let result = breaker.startProbe(now: 12); #expect(result) }
        do { let result = breaker.recordOutage(now: 12.1); #expect(result == .opened(until: 14.1)) }
    }
}

@Suite(.timeLimit(.minutes(1)))
struct DeadlineHeapTests {
    @Test func popsDueEntriesEarliestFirstAndTiesInOrder() {
        var heap = DeadlineHeap<String>()
        for (deadline, name) in [(50, "e"), (10, "a"), (30, "c1"), (20, "b"), (30, "c2"), (40, "d")] {
            heap.insert(name, at: UInt64(deadline))
        }
        #expect(heap.nextDeadline == 10)
        var due: [String] = []
        while let name = heap.popDue(now: 40) { due.append(name) }
        #expect(due == ["a", "b", "c1", "c2", "d"])
        #expect(heap.nextDeadline == 50)
        #expect(heap.popDue(now: 49) == nil)
        #expect(heap.popDue(now: 50) == "e")
        #expect(heap.isEmpty)
    }
}
