// Renditions in the fleet tier end to end: three daemons (in this process, transforms on, libvips) naming the same
// real memcached servers. What a user of a fleet notices: a new rendition asked for on every host at once is made
// once for the whole fleet (one source fetch, one decode and one encode), and every client gets the same bytes;
// another host's rendition is a fleet hit, kept locally; a winner whose clients all leave hands its lease on.

import Foundation
import ImageCacheTestSupport
import Testing
@testable import ImageCacheHTTP
@testable import ImageCacheConfig
@testable import ImageCacheStore
@testable import ImageCacheFleet
@testable import ImageCacheCore
@testable import ImageCacheOps

@Suite("Fleet: renditions made once per fleet", .serialized, .timeLimit(.minutes(3)))
struct FleetRenditionTests {
    /// A new AVIF of photo.jpg (640x427), 64 pixels wide.
    static let avif = TransformTests.path("format:avif/w:64", "photo.jpg")

    /// Transforms made (result ok) on each daemon.
    static func transforms(_ daemons: [ProxyHarness]) async throws -> [Int] {
        var counts: [Int] = []
        for daemon in daemons { counts.append(try await TransformTests.transformsDone(daemon)) }
        return counts
    }

    @Test("a storm of clients on three daemons for one new rendition: one source fetch and one encode fleet-wide, the same bytes for all")
    func storm() async throws {
        // Given three daemons sharing three memcached servers, and a source the origin holds at a gate
        let servers = try FleetTests.servers()
        let daemons = try await FleetTests.fleet(servers: servers)
        let origin = daemons[0].origin
        let gate = Gate()
        ImageFiles.serveGated(daemons[0], "/photo.jpg", ImageFiles.bytes("photo.jpg"), gate: gate)
        // When the first daemon's job wins the rendition's lease and waits for its source, and then the others' clients
        // arrive and are told to wait on it
        var connections = try await daemons[0].waitingClients(4, on: Self.avif)
        try await origin.waitForRequests("/photo.jpg", count: 1)
        for daemon in daemons.dropFirst() {
            connections += try await daemon.waitingClients(4, on: Self.avif)
            #expect(await daemon.fleetWaits.wait(for: 1), "a second host was never told to wait on the first one's rendition")
        }
        gate.open()
        let responses = try await readAll(connections)
        // Then the source was fetched once and the rendition made once, for all twelve clients
        #expect(origin.requestCount("/photo.jpg") == 1)
        #expect(try await Self.transforms(daemons) == [1, 0, 0])
        #expect(responses.allSatisfy { $0.status == 200 && $0.body == responses[0].body })
        #expect(Decoded.read(responses[0].body) == Decoded(format: "avif", width: 64, height: 43, frames: 1))
        let statuses = responses.map { $0.header("Cache-Status") ?? "" }
        #expect(statuses.prefix(4).allSatisfy { $0.contains("detail=transformed") }, "\(statuses)")
        #expect(statuses.dropFirst(4).allSatisfy { $0.contains("fwd=uri-miss; stored; collapsed; detail=fleet") }, "\(statuses)")
        // The winner won two leases (the rendition's, and its source's through the cache) and shared both; each other
        // host asked once for the rendition, however many of its clients waited, and never for the source.
        #expect(FleetTests.fleetMetrics(daemons[0]).leaseWins.current == 2)
        #expect(FleetTests.fleetMetrics(daemons[0]).stored.current == 2)
        #expect(daemons.dropFirst().allSatisfy {
            FleetTests.fleetMetrics($0).leaseWins.current == 0 && FleetTests.fleetMetrics($0).hits.current == 1
        })
    }

    @Test("another host's rendition is a fleet hit, kept locally: no source fetch, no transform, the next request a memory hit")
    func fleetHitThenLocal() async throws {
        // Given a rendition one daemon made
        let servers = try FleetTests.servers(1)
        let daemons = try await FleetTests.fleet(2, servers: servers)
        ImageFiles.serve(daemons[0], "photo.jpg")
        let made = try await daemons[0].get(Self.avif)
        #expect(made.status == 200 && made.header("Cache-Status")?.contains("detail=transformed") == true)
        // (the source and the rendition are both in the fleet)
        #expect(await daemons[0].fleetStores.wait(for: 2), "the entries never reached the fleet")
        // When another daemon is asked for it
        let fleetHit = try await daemons[1].get(Self.avif)
        // Then it serves the fleet's copy, keeps it, and serves the next request from memory
        #expect(fleetHit.status == 200 && fleetHit.body == made.body)
        #expect(fleetHit.header("Cache-Status")?.hasPrefix("imagecached; hit; ttl=") == true)
        #expect(fleetHit.header("Cache-Status")?.hasSuffix("detail=fleet") == true, "\(fleetHit.header("Cache-Status") ?? "")")
        let local = try await daemons[1].get(Self.avif)
        #expect(local.header("X-Cache") == "HIT" && local.header("Cache-Status")?.contains("detail=fleet") == false)
        #expect(local.body == made.body)
        #expect(daemons[0].origin.requestCount("/photo.jpg") == 1)
        #expect(try await Self.transforms(daemons) == [1, 0])
    }

    @Test("a winner whose clients all leave before its transform hands the lease back: a waiting host makes the rendition")
    func release() async throws {
        // Given a winner waiting for its gated source, and a second host waiting on the winner's rendition
        let servers = try FleetTests.servers(1)
        let daemons = try await FleetTests.fleet(2, servers: servers)
        let origin = daemons[0].origin
        let gate = Gate()
        ImageFiles.serveGated(daemons[0], "/photo.jpg", ImageFiles.bytes("photo.jpg"), gate: gate)
        let leaving = try await daemons[0].waitingClients(1, on: Self.avif)
        try await origin.waitForRequests("/photo.jpg", count: 1)
        let staying = try await daemons[1].waitingClients(1, on: Self.avif)
        #expect(await daemons[1].fleetWaits.wait(for: 1), "the second host was never told to wait on the first one's rendition")
        // When the winner's only client leaves
        leaving[0].close()
        // Then the second host wins the handed-back lease and fetches the source itself, long before the 60 s lease ends
        try await origin.waitForRequests("/photo.jpg", count: 2, timeout: .seconds(10))
        gate.open()
        let response = try await readAll(staying)[0]
        #expect(response.status == 200 && response.header("Cache-Status")?.contains("detail=transformed") == true)
        // Two leases handed back: the rendition's (the job), then its source's (the source fetch the job left).
        #expect(FleetTests.fleetMetrics(daemons[0]).releases.current == 2)
        #expect(FleetTests.fleetMetrics(daemons[1]).takeovers.current >= 1)
        #expect(try await Self.transforms(daemons) == [0, 1])
    }

    @Test("a rendition whose source is purged while it is transformed is served to its client and kept nowhere: not in the fleet, not here")
    func purgeDuringTransform() async throws {
        // Given two daemons, and the first one's worker held as it takes a new rendition's transform
        let servers = try FleetTests.servers(1)
        let daemons = try await FleetTests.fleet(2, servers: servers)
        ImageFiles.serve(daemons[0], "photo.jpg")
        let held = Gate()
        defer { held.open() }
        daemons[0].transformHold.hold(at: held)
        let client = try daemons[0].connect()
        try client.request(Self.avif)
        #expect(await daemons[0].transformHold.wait(for: 1), "the transform never started")
        // When the source is purged 1 s after the origin answered for it, and the transform ends 1 s later
        daemons[0].clock.advance(1)
        let purge = try await daemons[0].purge("/photo.jpg")
        #expect(purge.status == 200)
        daemons[0].clock.advance(1)
        held.open()
        let made = try await readAll([client])[0]
        // Then its client has it, not stored
        #expect(made.status == 200 && Decoded.read(made.body)?.format == "avif")
        #expect(made.header("Cache-Status") == "imagecached; fwd=uri-miss; detail=transformed", "\(made.headers)")
        // and the other host, once it has read the purge, makes its own (the lease was handed back, nothing stored in the fleet)
        #expect(await daemons[1].fleetPurges.wait(for: 1, timeout: 5), "the second host never read the purge")
        daemons[1].clock.advance(2)
        let other = try await daemons[1].get(Self.avif)
        #expect(other.status == 200 && other.header("Cache-Status")?.contains("detail=transformed") == true, "\(other.headers)")
        #expect(daemons[0].origin.requestCount("/photo.jpg") == 2)
        #expect(await daemons[1].fleetStores.wait(for: 2), "the second host's entries never reached the fleet")
        // and the first host kept nothing: it is served the second host's rendition from the fleet, not its own from memory
        let again = try await daemons[0].get(Self.avif)
        #expect(again.header("Cache-Status")?.hasSuffix("detail=fleet") == true, "\(again.headers)")
        #expect(again.body == other.body)
        #expect(try await Self.transforms(daemons) == [1, 1])
    }

    @Test("a winner whose source waits on another host's fill longer than fleet.lease keeps its rendition's lease: one encode fleet-wide")
    func leaseKeptWhileSourceWaits() async throws {
        // Given two daemons with a 4 s lease, and a source whose body the origin drips over 12 s (the host fetching it
        // keeps the source's lease alive as its bytes arrive)
        let servers = try FleetTests.servers(1)
        let daemons = try await FleetTests.fleet(2, servers: servers) { $0.fleet.leaseSeconds = 4 }
        let origin = daemons[0].origin
        let photo = ImageFiles.bytes("photo.jpg")
        origin.route("/photo.jpg") { _ in
            Reply(status: 200, headers: [("Content-Type", "image/jpeg"), ("Cache-Control", "max-age=600")], body: photo,
                  drip: (chunks: 12, interval: .milliseconds(1000)))
        }
        // The second host fetches the source (its lease); the first host's job wins the rendition's lease, and its
        // source waits on the second host's fill
        let sourceClient = try await daemons[1].waitingClients(1, on: "/photo.jpg")
        try await origin.waitForRequests("/photo.jpg", count: 1)
        let winner = try await daemons[0].waitingClients(1, on: Self.avif)
        #expect(await daemons[0].fleetWaits.wait(for: 1), "the first host's source never waited on the second host's fill")
        // When the second host is asked for the rendition, and waits on the first host's lease for as long as the drip
        let second = try await daemons[1].waitingClients(1, on: Self.avif)
        #expect(await daemons[1].fleetWaits.wait(for: 1), "the second host never waited on the first host's rendition")
        let responses = try await readAll(winner + second)
        _ = try await readAll(sourceClient)
        // Then the rendition's lease outlived the source's wait: one source fetch, one encode, and the second host's
        // client has the first host's rendition
        #expect(origin.requestCount("/photo.jpg") == 1)
        #expect(try await Self.transforms(daemons) == [1, 0])
        #expect(responses.allSatisfy { $0.status == 200 && $0.body == responses[0].body })
        #expect(responses[1].header("Cache-Status")?.hasSuffix("collapsed; detail=fleet") == true, "\(responses[1].headers)")
        #expect(FleetTests.fleetMetrics(daemons[1]).takeovers.current == 0)
    }

    @Test("a rendition made while the tier is unavailable says detail=fleet-unavailable, as a fetch does")
    func unavailable() async throws {
        // Given a daemon whose only memcached is gone
        let servers = try FleetTests.servers(1)
        let daemons = try await FleetTests.fleet(1, servers: servers)
        ImageFiles.serve(daemons[0], "photo.jpg")
        servers[0].kill9()
        // When a new rendition is asked for
        let response = try await daemons[0].get(Self.avif)
        // Then it is made here, and its Cache-Status says the tier could not be asked
        #expect(response.status == 200 && Decoded.read(response.body)?.format == "avif")
        #expect(response.header("Cache-Status") == "imagecached; fwd=uri-miss; stored; detail=fleet-unavailable", "\(response.headers)")
        #expect(try await Self.transforms(daemons) == [1])
    }
}
