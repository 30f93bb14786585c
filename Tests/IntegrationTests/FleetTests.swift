// The fleet tier end to end: three daemons (in this process, each its own proxy, tiers and fleet client) in reverse
// mode for one test origin, naming the same real memcached servers (started here on loopback ports). What a user of a
// fleet notices: one origin fetch for a new image however many hosts ask at once; another host's fill served as a
// fleet hit and kept locally; a response that cannot be shared (no-store, too large, an error) does not hold the
// other hosts for the lease; a winner whose clients all leave hands its lease on; a damaged value is never served;
// a memcached down or hung leaves each host serving on its own.

import Foundation
import ImageCacheTestSupport
import ImageCacheSystem
import Testing
@testable import ImageCacheHTTP
@testable import ImageCacheConfig
@testable import ImageCacheStore
@testable import ImageCacheFleet
@testable import ImageCacheCore
@testable import ImageCacheOps

@Suite("Fleet: daemons sharing memcached", .serialized, .timeLimit(.minutes(3)))
struct FleetTests {
    /// `count` daemons in reverse mode for the first one's origin, all naming `servers`.
    /// (Each operation's deadline is 2 s, not 50 ms, a lease lives 60 s, not 5, and a host waits up to 60 s, not 10: these
    /// tests are about leases, and on a machine running every suite at once a 50 ms deadline is missed (a host serves
    /// alone), a winner held at a gate for more than 5 s loses its lease, and a storm's setup can outlast fleet.wait, as
    /// all three should in production. The tests of expiry and deadlines set their own.)
    /// Each daemon has read the purge logs (it serves fleet values) when this returns, unless `servers` is empty.
    static func fleet(_ count: Int = 3, servers: [MemcachedProcess], _ configure: (inout Configuration) -> Void = { _ in })
        async throws -> [ProxyHarness] {
        let first = try ProxyHarness { configuration in
            configuration.fleet.servers = servers.map { FleetServer(host: "127.0.0.1", port: $0.port) }
            configuration.fleet.itemMaxBytes = 32 << 20
            configuration.fleet.deadlineSeconds = 2
            configuration.fleet.leaseSeconds = 60
            configuration.fleet.waitSeconds = 60
            configure(&configuration)
        }
        var harnesses = [first]
        for _ in 1..<count {
            harnesses.append(try ProxyHarness { configuration in
                configuration.origins = first.configuration.origins
                configuration.fleet.servers = servers.map { FleetServer(host: "127.0.0.1", port: $0.port) }
                configuration.fleet.itemMaxBytes = 32 << 20
                configuration.fleet.deadlineSeconds = 2
                configuration.fleet.leaseSeconds = 60
                configuration.fleet.waitSeconds = 60
                configure(&configuration)
            })
        }
        if !servers.isEmpty {
            for harness in harnesses { try #require(await harness.fleetCaughtUp.wait(for: 1), "a daemon never read the fleet's purge logs") }
        }
        return harnesses
    }

    static func servers(_ count: Int = 3) throws -> [MemcachedProcess] {
        try (0..<count).map { _ in try MemcachedProcess() }
    }

    static func fleetMetrics(_ harness: ProxyHarness) -> FleetMetrics { harness.daemon.proxy.metrics.fleet }

    @Test("a storm of clients on three daemons for one new image: one origin fetch, the same bytes for all, fleet-collapsed on the others")
    func storm() async throws {
        let servers = try Self.servers()
        let daemons = try await Self.fleet(servers: servers)
        let origin = daemons[0].origin
        let body = Fixtures.png(size: 40_000)
        let gate = Gate()
        origin.route("/storm.png") { _ in Reply(status: 200, headers: [("Content-Type", "image/png"), ("Cache-Control", "max-age=300")], body: body, gate: gate) }
        // The first daemon's fetch wins the lease and waits at the gate; then the others' clients arrive.
        var connections = try await daemons[0].waitingClients(4, on: "/storm.png")
        try await origin.waitForRequests("/storm.png", count: 1)
        for daemon in daemons.dropFirst() { connections += try await daemon.waitingClients(4, on: "/storm.png") }
        gate.open()
        let responses = try await readAll(connections)
        #expect(origin.requestCount("/storm.png") == 1)
        #expect(responses.allSatisfy { $0.status == 200 && $0.body == body })
        let statuses = responses.map { $0.header("Cache-Status") ?? "" }
        #expect(statuses.prefix(4).allSatisfy { !$0.contains("detail=fleet") }, "\(statuses)")
        #expect(statuses.dropFirst(4).allSatisfy { $0.contains("collapsed; detail=fleet") }, "\(statuses)")
        #expect(Self.fleetMetrics(daemons[0]).leaseWins.current == 1)
        #expect(Self.fleetMetrics(daemons[0]).stored.current == 1)
        // Each host asked once per key, however many of its clients waited: the waits are polls of one fetch.
        #expect(daemons.dropFirst().allSatisfy { Self.fleetMetrics($0).leaseWins.current == 0 && Self.fleetMetrics($0).hits.current == 1 })
    }

    @Test("another host's fill is a fleet hit (Age counted), kept locally: the next request there is a memory hit")
    func fleetHitThenLocal() async throws {
        let servers = try Self.servers(1)
        let daemons = try await Self.fleet(2, servers: servers)
        let origin = daemons[0].origin
        let body = Fixtures.png(size: 5000)
        origin.route("/a.png") { _ in Reply(status: 200, headers: [("Content-Type", "image/png"), ("Cache-Control", "max-age=300")], body: body) }
        let first = try await daemons[0].get("/a.png")
        #expect(first.header("X-Cache") == "MISS")
        #expect(await daemons[0].fleetStores.wait(for: 1), "the entry never reached the fleet")
        daemons[1].clock.advance(20)
        let fleetHit = try await daemons[1].get("/a.png")
        #expect(fleetHit.body == body)
        #expect(fleetHit.header("Cache-Status") == "imagecached; hit; ttl=280; detail=fleet")
        #expect(fleetHit.header("Age") == "20")
        let local = try await daemons[1].get("/a.png")
        #expect(local.header("Cache-Status")?.contains("detail=fleet") == false)
        #expect(local.header("X-Cache") == "HIT")
        #expect(origin.requestCount("/a.png") == 1)
        let stats = try await daemons[1].get("/_imagecached/metrics")
        #expect(stats.text.contains("imagecached_fleet_hits_total 1"))
        #expect(stats.text.contains("imagecached_requests_total{outcome=\"fleet_hit\"} 1"))
    }

    @Test("a response with Vary is shared with its variant: a host whose client sends the same fields gets a fleet hit; one that differs fetches its own")
    func varyShared() async throws {
        let servers = try Self.servers(1)
        let daemons = try await Self.fleet(3, servers: servers)
        let origin = daemons[0].origin
        let plain = Fixtures.png(size: 5000), forSite = Fixtures.png(size: 6000)
        // S3 with CORS: Vary: Origin, and a different answer for a request that names an Origin.
        origin.route("/v.png") { request in
            Reply(status: 200, headers: [("Content-Type", "image/png"), ("Cache-Control", "max-age=300"), ("Vary", "Origin")],
                  body: request.header("Origin") == nil ? plain : forSite)
        }
        let first = try await daemons[0].get("/v.png")
        #expect(first.body == plain)
        #expect(await daemons[0].fleetStores.wait(for: 1), "the varied entry never reached the fleet")
        // A host whose client sends no Origin either: the fleet's copy, no origin fetch.
        let shared = try await daemons[1].get("/v.png")
        #expect(shared.body == plain)
        #expect(shared.header("Cache-Status")?.hasSuffix("detail=fleet") == true, "\(shared.header("Cache-Status") ?? "")")
        #expect(origin.requestCount("/v.png") == 1)
        // A host whose client names an Origin: its own variant from the origin, never the other variant's bytes.
        let other = try await daemons[2].get("/v.png", headers: [("Origin", "https://site.test")])
        #expect(other.body == forSite)
        #expect(other.header("Cache-Status")?.contains("detail=fleet") == false, "\(other.header("Cache-Status") ?? "")")
        #expect(origin.requestCount("/v.png") == 2)
        // And its next plain request is served from the fleet's copy (kept there when it came), no origin fetch.
        let plainThere = try await daemons[2].get("/v.png")
        #expect(plainThere.body == plain)
        #expect(origin.requestCount("/v.png") == 2)
    }

    enum Unshared: String, CaseIterable, Sendable {
        case noStore = "no-store", oversized, error = "503"
    }

    @Test("a response that cannot be shared leaves a pass marker: the waiting hosts fetch at once, not after the lease",
          arguments: Unshared.allCases)
    func unshared(_ kind: Unshared) async throws {
        let servers = try Self.servers(1)
        // A 60 s lease and wait: without the marker, the waiters would outlive the origin's wait below.
        let daemons = try await Self.fleet(3, servers: servers) {
            $0.fleet.leaseSeconds = 60
            $0.fleet.waitSeconds = 60
            if kind == .oversized { $0.fleet.itemMaxBytes = 4096 }
        }
        let origin = daemons[0].origin
        let gate = Gate()
        let body = Fixtures.png(size: 20_000)
        origin.route("/u.png") { _ in
            switch kind {
            case .noStore: Reply(status: 200, headers: [("Content-Type", "image/png"), ("Cache-Control", "no-store")], body: body, gate: gate)
            case .oversized: Reply(status: 200, headers: [("Content-Type", "image/png"), ("Cache-Control", "max-age=300")], body: body, gate: gate)
            case .error: Reply(status: 503, headers: [("Content-Type", "text/plain")], body: Array("down".utf8), gate: gate)
            }
        }
        var connections = try await daemons[0].waitingClients(1, on: "/u.png")
        try await origin.waitForRequests("/u.png", count: 1)
        for daemon in daemons.dropFirst() { connections += try await daemon.waitingClients(1, on: "/u.png") }
        gate.open()
        // Each of the others fetches for itself as soon as it sees the marker (10 s, far below the 60 s lease).
        try await origin.waitForRequests("/u.png", count: 3, timeout: .seconds(10))
        let responses = try await readAll(connections)
        #expect(responses.allSatisfy { $0.status == (kind == .error ? 503 : 200) })
        #expect(Self.fleetMetrics(daemons[0]).passMarkers.current == 1)
        #expect(daemons.dropFirst().map { Self.fleetMetrics($0).passMarkersSeen.current } == [1, 1])
    }

    @Test("a winner whose clients all leave hands the lease back: a waiting host takes over at its next poll")
    func release() async throws {
        let servers = try Self.servers(1)
        let daemons = try await Self.fleet(2, servers: servers) { $0.fleet.leaseSeconds = 60 }
        let origin = daemons[0].origin
        let gate = Gate()
        let body = Fixtures.png(size: 3000)
        origin.route("/r.png") { _ in Reply(status: 200, headers: [("Content-Type", "image/png"), ("Cache-Control", "max-age=300")], body: body, gate: gate) }
        let leaving = try await daemons[0].waitingClients(1, on: "/r.png")
        try await origin.waitForRequests("/r.png", count: 1)
        let staying = try await daemons[1].waitingClients(1, on: "/r.png")
        #expect(await daemons[1].fleetWaits.wait(for: 1), "the second host was never told to wait on the first one's fill")
        leaving[0].close()
        // The second host wins the handed-back lease and fetches itself, long before the 60 s lease would end.
        try await origin.waitForRequests("/r.png", count: 2, timeout: .seconds(10))
        gate.open()
        let response = try await readAll(staying)[0]
        #expect(response.status == 200 && response.body == body)
        #expect(Self.fleetMetrics(daemons[0]).releases.current == 1)
        #expect(Self.fleetMetrics(daemons[1]).takeovers.current == 1)
    }

    @Test("a winner whose origin hangs stops keeping its lease alive: it expires, and a waiting host takes over")
    func hungWinner() async throws {
        let servers = try Self.servers(1)
        let daemons = try await Self.fleet(2, servers: servers) { $0.fleet.leaseSeconds = 2 }
        let origin = daemons[0].origin
        let stalled = Gate(), gate = Gate()
        let body = Fixtures.png(size: 3000)
        // The first fetch gets its head and then nothing; the second (the takeover) is served when the gate opens.
        origin.route("/hang.png") { request in
            let first = origin.requestCount("/hang.png") == 1
            return Reply(status: 200, headers: [("Content-Type", "image/png"), ("Cache-Control", "max-age=300")], body: body,
                         gate: first ? stalled : gate)
        }
        let hung = try await daemons[0].waitingClients(1, on: "/hang.png")
        try await origin.waitForRequests("/hang.png", count: 1)
        let waiting = try await daemons[1].waitingClients(1, on: "/hang.png")
        #expect(await daemons[1].fleetWaits.wait(for: 1))
        // The lease (2 s, refreshed only while bytes arrive) lapses; the second host's next poll wins it.
        try await origin.waitForRequests("/hang.png", count: 2, timeout: .seconds(15))
        gate.open()
        let response = try await readAll(waiting)[0]
        #expect(response.status == 200 && response.body == body)
        #expect(Self.fleetMetrics(daemons[1]).takeovers.current == 1)
        stalled.open()
        _ = try await readAll(hung)
    }

    @Test("a copy gone stale on three hosts is revalidated once for the fleet: one conditional request, every host refreshed")
    func staleRevalidatedOnce() async throws {
        let servers = try Self.servers(1)
        let daemons = try await Self.fleet(3, servers: servers)
        let origin = daemons[0].origin
        let body = Fixtures.png(size: 5000)
        let gate = Gate()
        origin.route("/s.png") { request in
            let fields = [("Content-Type", "image/png"), ("Cache-Control", "max-age=10"), ("ETag", "\"v1\"")]
            if request.header("If-None-Match") == "\"v1\"" {
                // (held before its head: a 304 has no body for a body gate to hold)
                var notModified = Reply(status: 304, headers: fields)
                notModified.gateBeforeHead = gate
                return notModified
            }
            return Reply(status: 200, headers: fields, body: body)
        }
        // Every host has a copy (one origin fetch, two fleet hits); the tier's copy goes when it goes stale.
        _ = try await daemons[0].get("/s.png")
        #expect(await daemons[0].fleetStores.wait(for: 1), "the entry never reached the fleet")
        for daemon in daemons.dropFirst() { _ = try await daemon.get("/s.png") }
        #expect(origin.requestCount("/s.png") == 1)
        let key = FleetEnvelope.key(for: CacheKey(try UpstreamURL.parse(origin.baseURL + "/s.png")))
        let deleted = try servers[0].command("md \(key)")
        #expect(deleted.hasPrefix("HD"), "\(deleted)")

        for daemon in daemons { daemon.clock.advance(20) }
        // The first host wins the lease and asks the origin (held at the gate); the others wait on it.
        var connections = try await daemons[0].waitingClients(1, on: "/s.png")
        try await origin.waitForRequests("/s.png", count: 2)
        for daemon in daemons.dropFirst() {
            connections += try await daemon.waitingClients(1, on: "/s.png")
            #expect(await daemon.fleetWaits.wait(for: 1), "a host was not told to wait on the first one's revalidation")
        }
        gate.open()
        let responses = try await readAll(connections)
        #expect(responses.allSatisfy { $0.status == 200 && $0.body == body })
        #expect(origin.requestCount("/s.png") == 2, "one conditional request for the fleet")
        #expect(responses[0].header("X-Cache") == "REVALIDATED")
        #expect(responses.dropFirst().allSatisfy { $0.header("Cache-Status") == "imagecached; fwd=stale; stored; collapsed; detail=fleet" },
                "\(responses.map { $0.header("Cache-Status") ?? "" })")
        // and each host's copy is fresh again
        for daemon in daemons { #expect(try await daemon.get("/s.png").header("X-Cache") == "HIT") }
    }

    @Test("a damaged value in memcached is a miss: never served, deleted, counted")
    func damagedValue() async throws {
        let servers = try Self.servers(1)
        let daemons = try await Self.fleet(2, servers: servers)
        let origin = daemons[0].origin
        let body = Fixtures.png(size: 6000)
        origin.route("/d.png") { _ in Reply(status: 200, headers: [("Content-Type", "image/png"), ("Cache-Control", "max-age=300")], body: body) }
        _ = try await daemons[0].get("/d.png")
        #expect(await daemons[0].fleetStores.wait(for: 1), "the entry never reached the fleet")
        let key = FleetEnvelope.key(for: CacheKey(try UpstreamURL.parse(origin.baseURL + "/d.png")))
        // One byte of the body flipped, stored back as it was (same flags).
        var value = try servers[0].value(key)
        try #require(value.count > 100, "\(value.count) bytes in the fleet")
        value[value.count - 100] ^= 0xFF
        try servers[0].set(key, value: value, flags: FleetEnvelope.Flags.entry, ttl: 300)
        let response = try await daemons[1].get("/d.png")
        #expect(response.status == 200 && response.body == body)
        #expect(response.header("Cache-Status")?.contains("detail=fleet") == false)
        #expect(origin.requestCount("/d.png") == 2)
        #expect(Self.fleetMetrics(daemons[1]).damaged.current == 1)
    }

    @Test("a memcached killed or hung: each host serves on its own, labelled detail=fleet-unavailable, within the tier's deadline")
    func serverDown() async throws {
        let servers = try Self.servers(1)
        let daemons = try await Self.fleet(1, servers: servers)
        let origin = daemons[0].origin
        let body = Fixtures.png(size: 2000)
        origin.route("/k.png") { _ in Reply(status: 200, headers: [("Content-Type", "image/png"), ("Cache-Control", "max-age=300")], body: body) }
        origin.route("/h.png") { _ in Reply(status: 200, headers: [("Content-Type", "image/png"), ("Cache-Control", "max-age=300")], body: body) }
        servers[0].suspend()
        let hung = try await daemons[0].get("/h.png")
        #expect(hung.status == 200 && hung.body == body)
        #expect(hung.header("Cache-Status")?.hasSuffix("detail=fleet-unavailable") == true)
        servers[0].resume()
        servers[0].kill9()
        let killed = try await daemons[0].get("/k.png")
        #expect(killed.status == 200 && killed.body == body)
        #expect(killed.header("Cache-Status")?.hasSuffix("detail=fleet-unavailable") == true)
        // A local hit never asks the tier.
        let local = try await daemons[0].get("/k.png")
        #expect(local.header("X-Cache") == "HIT")
        #expect(Self.fleetMetrics(daemons[0]).unavailable.current == 2)
    }

    @Test("a memcached killed and restarted on the same port: the host serves alone while it is down, its breaker's probe closes it, and the next new image is shared again")
    func serverRecovers() async throws {
        // Given two daemons on one memcached, whose breakers open at the first failure and probe every 0.2 s
        let servers = try Self.servers(1)
        let daemons = try await Self.fleet(2, servers: servers) {
            $0.fleet.breakerFailures = 1
            $0.fleet.breakerOpenSeconds = 0.2
        }
        let origin = daemons[0].origin
        let body = Fixtures.png(size: 3000)
        for path in ["/before.png", "/down.png", "/after.png"] {
            origin.route(path) { _ in Reply(status: 200, headers: [("Content-Type", "image/png"), ("Cache-Control", "max-age=300")], body: body) }
        }
        // Both hosts share through it (each has its connection up: B's hit is A's fill)
        _ = try await daemons[0].get("/before.png")
        #expect(await daemons[0].fleetStores.wait(for: 1), "the entry never reached the fleet")
        #expect(try await daemons[1].get("/before.png").header("Cache-Status")?.hasSuffix("detail=fleet") == true)
        // When memcached is killed, A serves a new image on its own and its breaker opens
        servers[0].kill9()
        let alone = try await daemons[0].get("/down.png")
        #expect(alone.status == 200 && alone.body == body)
        #expect(alone.header("Cache-Status")?.hasSuffix("detail=fleet-unavailable") == true, "\(alone.headers)")
        #expect(await daemons[0].fleetServersDown.wait(for: 1), "A's breaker never opened")
        // (B's breaker opens too, at its next read of the purge log, once a second)
        #expect(await daemons[1].fleetServersDown.wait(for: 1), "B's breaker never opened")
        // and when memcached is restarted on the same port, each host's probe closes its breaker
        try servers[0].restart()
        #expect(await daemons[0].fleetServersUp.wait(for: 1), "A's breaker never closed again")
        #expect(await daemons[1].fleetServersUp.wait(for: 1), "B's breaker never closed again")
        // Then the next new image is shared again: A fills it, B has it from the fleet, one origin fetch in all
        let filled = try await daemons[0].get("/after.png")
        #expect(filled.status == 200 && filled.body == body)
        #expect(filled.header("Cache-Status")?.contains("fleet-unavailable") == false, "\(filled.headers)")
        #expect(await daemons[0].fleetStores.wait(for: 2), "the entry never reached the restarted memcached")
        let shared = try await daemons[1].get("/after.png")
        #expect(shared.status == 200 && shared.body == body)
        #expect(shared.header("Cache-Status")?.hasSuffix("detail=fleet") == true, "\(shared.headers)")
        #expect(origin.requestCount("/after.png") == 1)
        #expect(daemons[0].daemon.proxy.fleet.stats().servers.first?.state == .up)
    }
}

@Suite("Fleet: purges reach every host", .serialized, .timeLimit(.minutes(2)))
struct FleetPurgeTests {
    @Test("a purge on one host drops the fleet's copy and every other host's copies; a host that reads a value its server kept is not served it")
    func purgeAcrossHosts() async throws {
        let servers = try FleetTests.servers(2)
        let daemons = try await FleetTests.fleet(3, servers: servers)
        let origin = daemons[0].origin
        let body = Fixtures.png(size: 4000)
        origin.route("/p.png") { _ in Reply(status: 200, headers: [("Content-Type", "image/png"), ("Cache-Control", "max-age=300")], body: body) }
        // A fetches, B has it from the fleet (and keeps it).
        _ = try await daemons[0].get("/p.png")
        #expect(await daemons[0].fleetStores.wait(for: 1), "the entry never reached the fleet")
        let beforePurge = try await daemons[1].get("/p.png")
        #expect(beforePurge.header("Cache-Status")?.hasSuffix("detail=fleet") == true)
        let key = FleetEnvelope.key(for: CacheKey(try UpstreamURL.parse(origin.baseURL + "/p.png")))
        let owner = try #require(servers.first { (try? $0.value(key)) != nil }, "the entry is in neither server")
        let kept = try owner.value(key)
        // When A purges the URL
        let purge = try await daemons[0].purge("/p.png")
        #expect(purge.status == 200)
        #expect(purge.text.contains("fleet: logged on 2 of 2 servers"), "\(purge.text)")
        // Then B drops its copy at its next read of the log (once a second)
        #expect(await daemons[1].fleetPurges.wait(for: 1, timeout: 5), "B never applied the purge")
        daemons[1].clock.advance(1)
        let afterPurge = try await daemons[1].get("/p.png")
        #expect(afterPurge.header("X-Cache") == "MISS", "\(afterPurge.headers)")
        #expect(origin.requestCount("/p.png") == 2)
        // And a value a server kept through the purge (it was away: here, the old bytes written back) is refused by
        // the third host, which fetches for itself instead.
        try owner.set(key, value: kept, flags: FleetEnvelope.Flags.entry, ttl: 300)
        #expect(await daemons[2].fleetPurges.wait(for: 1, timeout: 5), "the third host never read the purge")
        daemons[2].clock.advance(1)
        let third = try await daemons[2].get("/p.png")
        #expect(third.status == 200 && third.body == body)
        #expect(third.header("Cache-Status")?.contains("detail=fleet") == false, "\(third.headers)")
        #expect(daemons[2].daemon.proxy.metrics.fleet.purgedRefused.current == 1)
    }

    @Test("a host that starts hours after a purge catches up from the older logs, and refuses a value a server kept through it")
    func lateHostCatchesUp() async throws {
        let servers = try FleetTests.servers(1)
        let a = try await FleetTests.fleet(1, servers: servers)[0]
        let body = Fixtures.png(size: 3000)
        a.origin.route("/c.png") { _ in Reply(status: 200, headers: [("Content-Type", "image/png"), ("Cache-Control", "max-age=86400")], body: body) }
        _ = try await a.get("/c.png")
        #expect(await a.fleetStores.wait(for: 1), "the entry never reached the fleet")
        let key = FleetEnvelope.key(for: CacheKey(try UpstreamURL.parse(a.origin.baseURL + "/c.png")))
        let kept = try servers[0].value(key)
        // A purges; the server then holds the old value again (it was away for the delete: here, written back).
        let purge = try await a.purge("/c.png")
        #expect(purge.text.contains("fleet: logged on 1 of 1 servers"), "\(purge.text)")
        try servers[0].set(key, value: kept, flags: FleetEnvelope.Flags.entry, ttl: 3600)
        // When a host starts three hours later (its clock; the purge is in a log three hours old)
        let late = try ProxyHarness(clockAhead: 3 * 3600 + 60) { configuration in
            configuration.origins = a.configuration.origins
            configuration.fleet.servers = servers.map { FleetServer(host: "127.0.0.1", port: $0.port) }
            configuration.fleet.deadlineSeconds = 2
        }
        // Then it reads that log in its catch-up, and the value (fresh for a day) is refused, fetched anew
        #expect(await late.fleetPurges.wait(for: 1, timeout: 10), "the late host never read the older log")
        #expect(await late.fleetCaughtUp.wait(for: 1, timeout: 10), "the late host never read every log")
        let response = try await late.get("/c.png")
        #expect(response.status == 200 && response.body == body)
        #expect(response.header("Cache-Status")?.contains("detail=fleet") == false, "\(response.headers)")
        #expect(late.daemon.proxy.metrics.fleet.purgedRefused.current == 1)
        #expect(a.origin.requestCount("/c.png") == 2)
    }

    @Test("a host that has not yet read the purge logs serves no fleet value: a value a server kept through a purge is not served in a new host's first seconds")
    func noFleetValueBeforeTheLogsAreRead() async throws {
        let servers = try FleetTests.servers(1)
        let a = try await FleetTests.fleet(1, servers: servers)[0]
        let old = Fixtures.png(size: 3000), new = Fixtures.png(size: 3100)
        let current = Locked(old)
        a.origin.route("/d.png") { _ in
            Reply(status: 200, headers: [("Content-Type", "image/png"), ("Cache-Control", "max-age=86400")], body: current.withLock { $0 })
        }
        _ = try await a.get("/d.png")
        #expect(await a.fleetStores.wait(for: 1), "the entry never reached the fleet")
        let key = FleetEnvelope.key(for: CacheKey(try UpstreamURL.parse(a.origin.baseURL + "/d.png")))
        let kept = try servers[0].value(key)
        // Given this hour's log long enough that a first read (a megabyte at most) stops before its end (lines no host
        // applies: not purge lines), then a purge of /d.png at its end, and the server holding the old value again
        // (it was away for the delete: here, written back); the origin now serves a new image
        let filler = Array((String(repeating: "# filler, not a purge line " + String(repeating: "x", count: 970) + "\n", count: 60)).utf8)
        for _ in 0..<24 {
            let (took, _) = await handOver { handed in
                a.daemon.proxy.fleet.appendToLog(FleetPurges.logKey(at: a.clock.now()), line: filler, createTTLSeconds: 7200) { handed(($0, $1)) }
            }
            try #require(took == 1)
        }
        let purge = try await a.purge("/d.png")
        #expect(purge.text.contains("fleet: logged on 1 of 1 servers"), "\(purge.text)")
        try servers[0].set(key, value: kept, flags: FleetEnvelope.Flags.entry, ttl: 3600)
        current.withLock { $0 = new }
        // When a new host asks for it at once (its first catch-up has not read the log to its end: the rest comes at
        // the next, 10 s later)
        let b = try ProxyHarness { configuration in
            configuration.origins = a.configuration.origins
            configuration.fleet.servers = servers.map { FleetServer(host: "127.0.0.1", port: $0.port) }
            configuration.fleet.deadlineSeconds = 2
        }
        let response = try await b.get("/d.png")
        // Then it serves the origin's new image, not the fleet's purged one, says the fleet was unavailable to it,
        // and leaves the value for hosts that know the purge to refuse
        #expect(response.status == 200 && response.body == new, "\(response.headers)")
        #expect(response.header("Cache-Status")?.hasSuffix("detail=fleet-unavailable") == true, "\(response.headers)")
        #expect(b.fleetCaughtUp.count == 0)
        #expect(b.daemon.proxy.metrics.fleet.catchUpRefused.current == 1)
        #expect(b.daemon.proxy.metrics.fleet.hits.current == 0)
        #expect(try servers[0].value(key) == kept)
    }

    @Test("a poll reads this hour's and the last hour's logs; a catch-up every hour's within the retention, a day and an hour")
    func logKeys() {
        let time = Date(timeIntervalSince1970: 1_800_000_000)
        #expect(FleetPurges.logKeys(at: time, catchingUp: false) == ["ic1:purge:499999", "ic1:purge:500000"])
        let all = FleetPurges.logKeys(at: time, catchingUp: true)
        #expect(all.count == 26 && all.first == "ic1:purge:499975" && all.last == "ic1:purge:500000")
        #expect(FleetEnvelope.maxSharedSeconds < FleetPurges.retentionSeconds)
        #expect(FleetLogLimits.maxCursors >= all.count)
    }

    @Test("the log's lines: time and URL (or *), anything else skipped")
    func lines() {
        let line = FleetPurges.line(time: Date(timeIntervalSince1970: 1_800_000_000.25), url: "http://o.test/a.png")
        #expect(line == "1800000000.250 http://o.test/a.png")
        #expect(FleetPurges.parse(line)?.1 == "http://o.test/a.png")
        #expect(FleetPurges.parse("1800000000.000 *")?.1 == "*")
        for bad in ["", "x http://o.test/a", "1800000000 not a url", "-5 http://o.test/a", "nan http://o.test/a", "1800000000"] {
            #expect(FleetPurges.parse(bad) == nil, "\(bad)")
        }
    }
}

@Suite("Fleet: hosts and servers that fail", .serialized, .timeLimit(.minutes(2)))
struct FleetFailureTests {
    @Test("a winner killed (SIGKILL) mid-body: its lease lapses, a surviving host takes over, and every client of the survivor is answered")
    func winnerKilled() async throws {
        let memcached = try MemcachedProcess()
        let origin = try TestOrigin()
        defer { origin.stop() }
        let body = Fixtures.jpeg(size: 60_000)
        let first = Locked(true)
        // The first fetch drips its body (its lease is kept alive while bytes arrive); the takeover's comes at once.
        origin.route("/kill.jpg") { _ in
            let isFirst = first.withLock { value in defer { value = false }; return value }
            var reply = Reply(status: 200, headers: [("Content-Type", "image/jpeg"), ("Cache-Control", "max-age=300")], body: body,
                              drip: isFirst ? (chunks: 60, interval: .milliseconds(500)) : nil)
            reply.closeAfter = isFirst
            return reply
        }
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("imagecached-fleet-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        func daemon(_ name: String) throws -> DaemonProcess {
            try DaemonProcess(["--listen", "127.0.0.1:0", "--origin", origin.baseURL, "--memory-limit", "16MiB",
                               "--cache-dir", directory.appendingPathComponent(name).path, "--server-cpu-affinity", "off",
                               "--fleet-servers", "127.0.0.1:\(memcached.port)", "--fleet-lease", "2s", "--fleet-deadline", "2s"])
        }
        let winner = try daemon("a"), survivor = try daemon("b")
        defer {
            winner.kill9()
            survivor.kill9()
        }
        let winnerPort = try #require(await winner.port()), survivorPort = try #require(await survivor.port())
        // The winner's client starts the fetch; its first bytes are on their way when the survivor's clients ask.
        let dying = try TestConnection(port: winnerPort)
        try dying.request("/kill.jpg")
        try await origin.waitForRequests("/kill.jpg", count: 1)
        var survivors: [TestConnection] = []
        for _ in 0..<3 {
            let connection = try TestConnection(port: survivorPort)
            try connection.request("/kill.jpg")
            survivors.append(connection)
        }
        _ = try await dying.head()
        winner.send(SIGKILL)
        #expect(await winner.waitForExit() == 128 + SIGKILL)
        // The survivor's next poll after the lease lapses wins it: one more origin fetch, and all three answered.
        try await origin.waitForRequests("/kill.jpg", count: 2, timeout: .seconds(15))
        let responses = try await readAll(survivors)
        #expect(responses.allSatisfy { $0.status == 200 && $0.body == body })
        #expect(origin.requestCount("/kill.jpg") == 2)
        let metrics = try await offPool { try TestClient.get(port: survivorPort, "/_imagecached/metrics") }
        #expect(metrics.text.contains("imagecached_fleet_takeovers_total 1\n"), "\(metrics.text.split(separator: "\n").filter { $0.contains("fleet_") })")
    }

    @Test("a slow memcached (300 ms each way): operations end at their deadline, the host serves alone, and after three failures its breaker keeps requests off the slow server")
    func slowServer() async throws {
        let memcached = try MemcachedProcess()
        let slow = try DelayProxy(to: memcached.port, delay: .milliseconds(300))
        let daemons = try await FleetTests.fleet(1, servers: []) { configuration in
            configuration.fleet.servers = [FleetServer(host: "127.0.0.1", port: slow.port)]
            configuration.fleet.deadlineSeconds = 0.05
            configuration.fleet.breakerOpenSeconds = 60
        }
        let daemon = daemons[0], origin = daemon.origin
        let body = Fixtures.png(size: 2000)
        for index in 0..<5 {
            origin.route("/slow\(index).png") { _ in Reply(status: 200, headers: [("Content-Type", "image/png"), ("Cache-Control", "max-age=300")], body: body) }
        }
        var statuses: [String] = []
        for index in 0..<5 {
            let response = try await daemon.get("/slow\(index).png")
            #expect(response.status == 200 && response.body == body)
            statuses.append(response.header("Cache-Status") ?? "")
        }
        #expect(statuses.allSatisfy { $0.hasSuffix("detail=fleet-unavailable") }, "\(statuses)")
        let stats = daemon.daemon.proxy.fleet.stats()
        #expect(stats.servers.first?.state == .down, "\(stats.servers)")
        // Three operations went to the slow server and missed their deadline; the other two never left the host.
        #expect(stats.servers.first?.failures == 3, "\(stats.servers)")
        #expect(stats.servers.first?.breakerOpens == 1)
        // A local hit never asks the tier.
        #expect(try await daemon.get("/slow0.png").header("X-Cache") == "HIT")
    }
}

@Suite("Fleet: a partition", .serialized, .timeLimit(.minutes(1)), .enabled(if: TestNetwork.isAvailable, "root and iproute2 only"))
struct FleetPartitionTests {
    @Test("memcached in a network namespace of its own: a host cut off from it serves alone, while the others still coalesce through it")
    func partition() async throws {
        let network = try TestNetwork(links: 2)
        let memcached = try MemcachedProcess(namespace: network.namespace, hosts: network.addresses, port: 11211)
        // A and C reach the server over the first link, B over the second (one server: the same owner for every key).
        func host(_ link: Int, origins: [OriginMapping]? = nil) async throws -> ProxyHarness {
            let harness = try ProxyHarness { configuration in
                if let origins { configuration.origins = origins }
                configuration.fleet.servers = [FleetServer(host: network.addresses[link], port: memcached.port)]
                configuration.fleet.deadlineSeconds = 0.5
                configuration.fleet.leaseSeconds = 60
                configuration.fleet.waitSeconds = 60
                configuration.fleet.breakerOpenSeconds = 60
            }
            try #require(await harness.fleetCaughtUp.wait(for: 1), "a host never read the fleet's purge logs")
            return harness
        }
        let a = try await host(0)
        let b = try await host(1, origins: a.configuration.origins), c = try await host(0, origins: a.configuration.origins)
        let origin = a.origin
        let body = Fixtures.png(size: 3000)
        for path in ["/one.png", "/two.png", "/three.png"] {
            origin.route(path) { _ in Reply(status: 200, headers: [("Content-Type", "image/png"), ("Cache-Control", "max-age=300")], body: body) }
        }
        // Before: one fetch, and the others' hits through the namespace.
        _ = try await a.get("/one.png")
        #expect(await a.fleetStores.wait(for: 1), "the entry never reached the fleet")
        #expect(try await b.get("/one.png").header("Cache-Status")?.hasSuffix("detail=fleet") == true)
        #expect(try await c.get("/one.png").header("Cache-Status")?.hasSuffix("detail=fleet") == true)
        // When B's link is cut
        try network.cut(1)
        // Then B serves alone (its lookup ends at its deadline), labelled so
        let alone = try await b.get("/two.png")
        #expect(alone.status == 200 && alone.body == body)
        #expect(alone.header("Cache-Status")?.hasSuffix("detail=fleet-unavailable") == true, "\(alone.headers)")
        // while A and C still share one fetch for a new image
        let gate = Gate()
        origin.route("/three.png") { _ in Reply(status: 200, headers: [("Content-Type", "image/png"), ("Cache-Control", "max-age=300")], body: body, gate: gate) }
        var connections = try await a.waitingClients(2, on: "/three.png")
        try await origin.waitForRequests("/three.png", count: 1)
        connections += try await c.waitingClients(2, on: "/three.png")
        #expect(await c.fleetWaits.wait(for: 1))
        gate.open()
        let responses = try await readAll(connections)
        #expect(responses.allSatisfy { $0.status == 200 && $0.body == body })
        #expect(origin.requestCount("/three.png") == 1)
        #expect(responses.suffix(2).allSatisfy { $0.header("Cache-Status")?.hasSuffix("collapsed; detail=fleet") == true })
    }
}
