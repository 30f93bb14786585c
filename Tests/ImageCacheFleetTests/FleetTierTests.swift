// FleetTier against real memcached processes (MemcachedProcess: 1.6.18, -I 32m, on free loopback ports). Two tiers
// on the same server are two hosts of a fleet. Serialized: several tests time deadlines, and the machine is small.

import Foundation
import Logging
import Testing
import ImageCacheTestSupport
@testable import ImageCacheFleet

@Suite(.serialized, .timeLimit(.minutes(2)))
struct FleetTierTests {
    // MARK: leases

    @Test func aMissWinsTheLeaseAndAnotherHostWaits() async throws {
        // Given one server and two hosts
        let memcached = try MemcachedProcess()
        let a = TierUnderTest([memcached]), b = TierUnderTest([memcached])
        // When both look a missing key up, A first
        let first = await a.lookup("ic1:miss")
        let second = await b.lookup("ic1:miss")
        // Then A won the lease and B is told to wait
        let lease = try #require(first.lease, "\(first.name)")
        #expect(lease.key == "ic1:miss")
        #expect(second.isWait, "\(second.name)")
        #expect(a.tier.stats().leaseWins == 1)
        #expect(a.tier.stats().leasesHeld == 1)
        #expect(b.tier.stats().leaseWaits == 1)
        #expect(b.tier.stats().lookups == 1)
    }

    @Test func aStoreWithTheLeaseServesBothHostsTheSameBytes() async throws {
        // Given A holds the lease of a key
        let memcached = try MemcachedProcess()
        let a = TierUnderTest([memcached]), b = TierUnderTest([memcached])
        let lease = try #require(await a.lookup("ic1:stored").lease)
        // When A stores a value with it
        let stored = await a.store(lease, Array("entry bytes".utf8), flags: 0xDEAD_BEEF, ttl: 60)
        // Then both hosts read the same bytes and flags, and the lease is no longer held
        #expect(stored == .stored)
        for tier in [a, b] {
            let found = await tier.lookup("ic1:stored")
            let value = try #require(found.value, "\(found.name)")
            expectSameBytes(value.bytes, Array("entry bytes".utf8))
            #expect(value.flags == 0xDEAD_BEEF)
            #expect((58...60).contains(value.remainingTTL ?? 0))
            #expect(tier.tier.stats().hits == 1)
        }
        #expect(a.tier.stats().stores == 1)
        #expect(a.tier.stats().leasesHeld == 0)
    }

    @Test func anEmptyValueIsAHitWithoutARead() async throws {
        let memcached = try MemcachedProcess()
        let a = TierUnderTest([memcached])
        let lease = try #require(await a.lookup("ic1:empty").lease)
        #expect(await a.store(lease, [], flags: 9) == .stored)
        let found = await a.lookup("ic1:empty")
        #expect(found.value?.bytes == [])
        #expect(found.value?.flags == 9)
    }

    @Test func aReleaseLetsTheNextAskerWinAtOnceAndFencesTheOldLeaseOut() async throws {
        // Given A holds the lease of a key and B waits for it
        let memcached = try MemcachedProcess()
        let a = TierUnderTest([memcached]), b = TierUnderTest([memcached])
        let old = try #require(await a.lookup("ic1:released").lease)
        #expect(await b.lookup("ic1:released").isWait)
        // When A releases it (a lookup on A's control connection after it: answered after the release, in order)
        a.tier.release(old)
        _ = await a.lookup("ic1:after-release")
        // Then B's next lookup wins a new lease at once
        let new = try #require(await b.lookup("ic1:released").lease)
        #expect(new.cas != old.cas)
        #expect(a.tier.stats().releases == 1)
        // And a store with the old lease's CAS loses; B's store wins
        #expect(await a.store(old, Array("late".utf8)) == .lostLease)
        #expect(await b.store(new, Array("fresh".utf8)) == .stored)
        #expect(await a.lookup("ic1:released").value?.bytes == Array("fresh".utf8))
        #expect(a.tier.stats().lostLeases == 1)
    }

    @Test func aLeaseWhoseHolderStopsExpiresWhileOneThatProgressesIsKept() async throws {
        // Given A holds two leases of 4 s (1 s cannot be kept alive: memcached's clock counts whole seconds and an
        // item of T1 expires at its next tick; 4 s leave a refresh every 1.3 s room to be late on a loaded machine);
        // only `kept`'s holder reports progress
        let memcached = try MemcachedProcess()
        let a = TierUnderTest([memcached]) { $0.leaseSeconds = 4 }
        let b = TierUnderTest([memcached]) { $0.leaseSeconds = 4 }
        let stalled = try #require(await a.lookup("ic1:stalled").lease)
        let kept = try #require(await a.lookup("ic1:kept").lease)
        // When B asks for both after each of A's refreshes of `kept` (about every 4/3 s), A's holder progressing
        var stalledTakenOver = false
        for _ in 0..<20 {
            guard await a.event(where: { $0 == .leaseRefreshed(key: "ic1:kept", kept: true) }) != nil else { break }
            kept.progressed()
            #expect(await b.lookup("ic1:kept").isWait)
            let other = await b.lookup("ic1:stalled")
            if other.lease != nil {
                stalledTakenOver = true
                break
            }
            #expect(other.isWait, "\(other.name)")
        }
        // Then the stalled lease expired and B won it; the progressing one is still A's
        #expect(stalledTakenOver)
        #expect(await b.lookup("ic1:kept").isWait)
        #expect(await a.store(kept, Array("kept".utf8)) == .stored)
        #expect(await a.store(stalled, Array("stalled".utf8)) == .lostLease)
        #expect(a.tier.stats().leaseRefreshes >= 3)
    }

    // MARK: values

    @Test func aLargeValueTravelsOnTheBulkConnectionWhileALookupAnswersFirst() async throws {
        // Given a 20 MiB value and a small one in the tier
        let memcached = try MemcachedProcess()
        let a = TierUnderTest([memcached]), b = TierUnderTest([memcached])
        let large = patternBytes(20 << 20)
        let largeLease = try #require(await a.lookup("ic1:large").lease)
        #expect(await a.store(largeLease, large, flags: 4) == .stored)
        let smallLease = try #require(await a.lookup("ic1:small").lease)
        #expect(await a.store(smallLease, Array("small".utf8), flags: 5) == .stored)
        // When B looks the large one up, then the small one, at once
        let order = CompletionOrder()
        async let largeFound: FleetLookup = handOver { handed in
            b.tier.lookup("ic1:large") { result in
                order.record("large")
                handed(result)
            }
        }
        async let smallFound: FleetLookup = handOver { handed in
            b.tier.lookup("ic1:small") { result in
                order.record("small")
                handed(result)
            }
        }
        let (largeResult, smallResult) = await (largeFound, smallFound)
        // Then the small one answered first (its read went on the control connection, the large one's on bulk), and
        // the large one arrived byte-identical
        let largeValue = try #require(largeResult.value, "\(largeResult.name)")
        expectSameBytes(largeValue.bytes, large)
        #expect(largeValue.flags == 4)
        #expect(smallResult.value?.bytes == Array("small".utf8))
        #expect(order.order == ["small", "large"])
        #expect(b.server.bytesRead > 20 << 20)
    }

    @Test func aValueOverTheItemSizeIsTooLargeAndTheConnectionStaysUsable() async throws {
        // Given a server of -I 32m and a tier told 64 MiB
        let memcached = try MemcachedProcess()
        let a = TierUnderTest([memcached]) { $0.itemMaxBytes = 64 << 20 }
        #expect(await a.itemSizeMaxRead() == 32 << 20)
        #expect(a.server.itemSizeMax == 32 << 20)
        let key = "ic1:big"
        let lease = try #require(await a.lookup(key).lease)
        // When a value that does not fit the server's item (value, key and header) is stored
        let written = a.server.bytesWritten
        let largest = (32 << 20) - key.utf8.count - MetaOutcome.itemOverheadBytes
        #expect(await a.store(lease, [UInt8](repeating: 0x61, count: largest + 1)) == .tooLarge)
        // Then it is refused without being sent
        #expect(a.server.bytesWritten == written)
        #expect(try memcached.command("mg \(key) s").hasPrefix("HD s0"))  // the lease's stub is untouched

        // Given the server restarted with -I 1m while the tier still knows 32 MiB (its idle connections just close)
        try memcached.restart(itemSizeMax: "1m")
        // When 2 MiB are stored (a new bulk connection: no `stats settings` on it)
        #expect(await a.store(lease, [UInt8](repeating: 0x62, count: 2 << 20)) == .tooLarge)
        // Then the server refused them, and the same connection answers the next store (NF: the restart emptied it)
        #expect(a.server.bytesWritten > written + (2 << 20))
        #expect(await a.store(lease, patternBytes(100 << 10)) == .lostLease)
        #expect(a.server.failures == 0)
        // And the next control connection reads the new item_size_max
        let again = try #require(await a.lookup(key).lease)
        #expect(await a.itemSizeMaxRead() == 1 << 20)
        let value = patternBytes(100 << 10)
        #expect(await a.store(again, value, flags: 3) == .stored)
        expectSameBytes(try #require(await a.lookup(key).value).bytes, value)
        #expect(a.tier.stats().tooLarge == 2)
    }

    @Test func aDeleteRemovesAValueAndACASDeleteOnlyThatValue() async throws {
        // Given a damaged value put in by hand
        let memcached = try MemcachedProcess()
        #expect(try memcached.command("ms ic1:damaged 3 T60 F1", data: Array("abc".utf8)) == "HD\r\n")
        let a = TierUnderTest([memcached])
        let found = try #require(await a.lookup("ic1:damaged").value)
        #expect(found.bytes == Array("abc".utf8))
        // When it is deleted with a CAS that is not its own, then with its own
        #expect(await a.delete("ic1:damaged", cas: found.cas + 1000))  // EX: replaced already, nothing to do
        #expect(try memcached.command("mg ic1:damaged v").hasPrefix("VA 3"))
        #expect(await a.delete("ic1:damaged", cas: found.cas))
        // Then it is gone: the next lookup wins the lease
        #expect(try memcached.command("mg ic1:damaged v") == "EN\r\n")
        #expect(await a.lookup("ic1:damaged").lease != nil)
        // And a delete of a key that is not there is done too
        #expect(await a.delete("ic1:never"))
    }

    @Test func anInvalidKeyIsUnavailableAndNeverSent() async throws {
        let memcached = try MemcachedProcess()
        let a = TierUnderTest([memcached])
        _ = await a.itemSizeMaxRead()
        let written = a.server.bytesWritten
        for key in ["a b", "", String(repeating: "k", count: 251), "k\r\nmn"] {
            #expect(await a.lookup(key).isUnavailable)
            #expect(await a.delete(key) == false)
        }
        #expect(a.server.bytesWritten == written)
        #expect(a.server.operations == 0)
    }

    // MARK: failures

    @Test func aBurstOfPipelinedRequestsDoesNotPushTheNextDeadlineOut() async throws {
        // Given a tier with a 100 ms deadline that just sent 500 lookups at once, all answered (a catch-up's log reads
        // are such a burst)
        let memcached = try MemcachedProcess()
        let a = TierUnderTest([memcached]) { $0.deadlineSeconds = 0.1 }
        _ = await a.itemSizeMaxRead()
        let results = await withTaskGroup(of: Bool.self) { group in
            for index in 0..<500 { group.addTask { await a.lookup("ic1:burst-\(index)").lease != nil } }
            return await group.reduce(into: 0) { $0 += $1 ? 1 : 0 }
        }
        #expect(results == 500)
        // When the server stops
        memcached.suspend()
        defer { memcached.resume() }
        // Then the next lookup is unavailable within about its own deadline: a deadline runs from when its request is
        // first in line, not from the deadlines of the 500 before it (which would have put it 50 s out)
        let clock = ContinuousClock()
        let started = clock.now
        let after = await a.lookup("ic1:after-burst")
        #expect(after.isUnavailable, "\(after.name)")
        #expect(clock.now - started < .seconds(5))
    }

    @Test func aStoppedServerIsUnavailableWithinTheDeadlineOpensTheBreakerAndAProbeClosesIt() async throws {
        // Given a tier with a 100 ms deadline whose breaker opens after 3 failures for 0.2 s
        let memcached = try MemcachedProcess()
        let a = TierUnderTest([memcached]) {
            $0.deadlineSeconds = 0.1
            $0.breakerFailures = 3
            $0.breakerOpenSeconds = 0.2
        }
        #expect(await a.lookup("ic1:warm").lease != nil)
        // When the server is stopped (SIGSTOP: connections are accepted by the kernel, nothing answers)
        memcached.suspend()
        defer { memcached.resume() }
        // Then each lookup answers unavailable within about the deadline, and the third opens the breaker
        let clock = ContinuousClock()
        for index in 0..<3 {
            let started = clock.now
            let result = await a.lookup("ic1:stopped-\(index)")
            #expect(result.isUnavailable, "\(result.name)")
            #expect(clock.now - started < .seconds(1))
        }
        #expect(a.server.state != .up)
        #expect(a.server.timeouts >= 3)
        #expect(a.server.breakerOpens == 1)
        // And while it is open, lookups answer at once without socket work
        let written = a.server.bytesWritten, operations = a.server.operations
        let started = clock.now
        #expect(await a.lookup("ic1:while-open").isUnavailable)
        #expect(clock.now - started < .milliseconds(100))
        #expect(a.server.operations == operations)
        #expect(a.server.bytesWritten == written)
        // When the server runs again, a probe closes the breaker and lookups work again
        memcached.resume()
        #expect(await a.serverState(.up))
        #expect(a.server.state == .up)
        #expect(await a.lookup("ic1:after-resume").lease != nil)
    }

    @Test func aKilledServerIsUnavailableAndAfterARestartOnTheSamePortWorksAgain() async throws {
        // Given a tier whose breaker opens at the first failure, for 0.2 s
        let memcached = try MemcachedProcess()
        let a = TierUnderTest([memcached]) {
            $0.breakerFailures = 1
            $0.breakerOpenSeconds = 0.2
        }
        #expect(await a.lookup("ic1:before").lease != nil)
        // When memcached is killed
        memcached.kill9()
        // Then a lookup is unavailable and the breaker opens
        #expect(await a.lookup("ic1:while-dead").isUnavailable)
        #expect(await a.serverState(.down))
        // When it is restarted on the same port
        try memcached.restart()
        // Then a probe closes the breaker, and the (empty) server grants leases again
        #expect(await a.serverState(.up))
        #expect(await a.lookup("ic1:before").lease != nil)
        #expect(a.server.itemSizeMax == 32 << 20)
    }

    // MARK: settings and lifecycle

    @Test func aReloadMakesANewRingAndHeldLeasesStayWithTheirServer() async throws {
        // Given a tier on server 1 holding a lease there
        let one = try MemcachedProcess(), two = try MemcachedProcess()
        let a = TierUnderTest([one])
        let lease = try #require(await a.lookup("ic1:moved").lease)
        // When the settings name server 2 only
        var settings = FleetSettings()
        settings.servers = [FleetServer(host: "127.0.0.1", port: two.port)]
        settings.itemMaxBytes = 32 << 20
        settings.deadlineSeconds = 0.5
        a.tier.reload(settings)
        // Then new lookups go to server 2, and the held lease is stored on server 1
        #expect(await a.lookup("ic1:new").lease != nil)
        #expect(try two.command("mg ic1:new s").hasPrefix("HD"))
        #expect(try one.command("mg ic1:new s") == "EN\r\n")
        #expect(await a.store(lease, Array("one".utf8)) == .stored)
        #expect(try one.command("mg ic1:moved v") == "VA 3\r\none\r\n")
        #expect(a.tier.stats().servers.map(\.address) == [two.address])
    }

    @Test func aServerRemovedAndReAddedWhileItsBreakerIsOpenIsTriedAgainAtOnce() async throws {
        // Given a tier on one server, whose breaker opens at the first failure for 60 s (no probe within the test)
        let memcached = try MemcachedProcess()
        let server = FleetServer(host: "127.0.0.1", port: memcached.port)
        let configure = { (settings: inout FleetSettings) in
            settings.deadlineSeconds = 1
            settings.breakerFailures = 1
            settings.breakerOpenSeconds = 60
        }
        let a = TierUnderTest(servers: [server], configure: configure)
        _ = await a.itemSizeMaxRead()
        // When the server hangs with a lookup pending, and a reload removes it meanwhile (it stays retired while the
        // lookup is out), the lookup's deadline passes: the breaker opens
        memcached.suspend()
        defer { memcached.resume() }
        let (pending, continuation) = AsyncStream.makeStream(of: FleetLookup.self)
        a.tier.lookup("ic1:pending") { continuation.yield($0) }
        var without = TierUnderTest.settings([])
        configure(&without)
        a.tier.reload(without)
        var results = pending.makeAsyncIterator()
        #expect(await results.next()?.isUnavailable == true)
        #expect(await a.event { $0 == .serverState(server: server.description, state: .down) } != nil)
        // and the server comes back and is listed again while its old breaker is still open
        memcached.resume()
        var with = TierUnderTest.settings([server])
        configure(&with)
        with.deadlineSeconds = 10  // the new connection's connect, stats settings and lookup, on a loaded machine
        a.tier.reload(with)
        // Then it is tried at once, as a new server: its operations succeed
        let found = await a.lookup("ic1:back")
        #expect(found.lease != nil, "\(found.name)")
        #expect(try memcached.command("mg ic1:back s").hasPrefix("HD"))
        #expect(a.server.state == .up)
    }

    @Test func startThenShutdownWithoutServersAndShutdownTwiceAreSafe() async {
        // Given a tier with no servers
        let tier = FleetTier(settings: FleetSettings(), logger: .init(label: "fleet-test"))
        tier.start()
        // Then every operation answers at once
        let found = await handOver { tier.lookup("k", completion: $0) }
        #expect(found.isUnavailable)
        // And shutting down twice is safe; later operations are unavailable on the caller's thread
        tier.shutdown()
        tier.shutdown()
        let late = await handOver { tier.lookup("k", completion: $0) }
        #expect(late.isUnavailable)
        // And a tier never started shuts down too (its queued operations end unavailable)
        let idle = FleetTier(settings: FleetSettings(), logger: .init(label: "fleet-test"))
        let queued = await handOver { handed in
            idle.lookup("k", completion: handed)
            idle.shutdown()
        }
        #expect(queued.isUnavailable)
    }

    @Test func aShutdownEndsPendingOperationsUnavailable() async throws {
        // Given a lookup pending on a stopped server (long deadline)
        let memcached = try MemcachedProcess()
        let a = TierUnderTest([memcached]) { $0.deadlineSeconds = 30 }
        _ = await a.itemSizeMaxRead()
        memcached.suspend()
        defer { memcached.resume() }
        let (results, continuation) = AsyncStream.makeStream(of: FleetLookup.self)
        a.tier.lookup("ic1:pending") { continuation.yield($0) }
        // When the tier is shut down from a completion, on the fleet thread (it cannot join itself)
        a.tier.lookup("not a key") { _ in a.tier.shutdown() }
        // Then the pending lookup ends unavailable, failed by the thread's teardown
        var iterator = results.makeAsyncIterator()
        let result = await iterator.next()
        guard case let .unavailable(reason)? = result else {
            Issue.record("\(result?.name ?? "nothing")")
            return
        }
        #expect(reason == "the fleet tier shut down")
    }
}

/// The client against a scripted server: answers a real memcached gives only by chance.
@Suite(.serialized, .timeLimit(.minutes(1)))
struct FleetTierScriptedTests {
    static let stats = "STAT item_size_max 1048576\r\nEND\r\n"

    func tier(_ server: ScriptedMemcached) -> TierUnderTest {
        let process: [MemcachedProcess] = []
        // (the scripts expect N5: the default lease, not the harness's long one)
        return TierUnderTest(process) {
            $0.servers = [FleetServer(host: "127.0.0.1", port: server.port)]
            $0.leaseSeconds = 5
        }
    }

    @Test func aValueThatVanishesBeforeItsReadIsLookedUpOnceMore() async throws {
        // Given a value that is gone when first read, and there when looked up again
        let server = try ScriptedMemcached([
            "stats settings": [Self.stats],
            "mg ic1:k s c f N5 t": ["HD s5 c1 f0 t-1 $O\r\n", "HD s5 c2 f3 t-1 $O\r\n"],
            "mg ic1:k v c f t": ["EN $O\r\n", "VA 5 c2 f3 t-1 $O\r\nhello\r\n"],
        ])
        let a = tier(server)
        // When it is looked up
        let found = await a.lookup("ic1:k")
        // Then the second lookup's read answers it
        #expect(found.value?.bytes == Array("hello".utf8), "\(found.name)")
        #expect(found.value?.cas == 2)
        #expect(server.requests.filter { $0.hasPrefix("mg ic1:k") }.count == 4)
    }

    @Test func aValueThatVanishesTwiceIsUnavailable() async throws {
        let server = try ScriptedMemcached([
            "stats settings": [Self.stats],
            "mg ic1:k s c f N5 t": ["HD s5 c1 f0 t-1 $O\r\n", "HD s5 c2 f0 t-1 $O\r\n"],
            "mg ic1:k v c f t": ["EN $O\r\n", "EN $O\r\n"],
        ])
        let a = tier(server)
        let found = await a.lookup("ic1:k")
        guard case let .unavailable(reason) = found else { Issue.record("\(found.name)"); return }
        #expect(reason == "the value changed twice while read")
        #expect(server.requests.filter { $0.hasPrefix("mg ic1:k") }.count == 4)
    }

    static let notTheProtocol = [
        "a wrong opaque token": "HD s0 c1 f0 t5 O999 W\r\n",
        "a malformed answer": "VA five $O\r\n",
        "an answer without its token": "HD s0 c1 f0 t5 W\r\n",
        "a line of 9 KiB": String(repeating: "H", count: 9 << 10) + "\r\n",
        "CLIENT_ERROR": "CLIENT_ERROR bad command line format\r\n",
    ]

    @Test(arguments: notTheProtocol.keys.sorted())
    func anAnswerThatIsNotTheProtocolClosesTheConnectionAndCountsAFailure(_ what: String) async throws {
        let answer = try #require(Self.notTheProtocol[what])
        // Given a server answering a lookup with something else than the protocol (or a refusal of the line)
        let server = try ScriptedMemcached([
            "stats settings": [Self.stats, Self.stats],
            "mg ic1:k s c f N5 t": [answer, "HD s0 c7 f0 t5 $O W\r\n"],
        ])
        let a = tier(server)
        // When a key is looked up
        let found = await a.lookup("ic1:k")
        // Then it is unavailable, one failure is counted, and the next lookup works on a new connection
        #expect(found.isUnavailable, "\(what): \(found.name)")
        #expect(a.server.failures == 1, "\(what)")
        #expect(await a.lookup("ic1:k").lease?.cas == 7, "\(what)")
        #expect(server.requests.filter { $0 == "stats settings" }.count == 2, "\(what)")
    }
}
