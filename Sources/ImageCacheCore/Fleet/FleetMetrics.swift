// The fleet counts this host's fetches keep (what they found in the fleet tier and did with their leases), beside the
// tier's own per-server counts (FleetTier.stats). Relaxed atomics, bumped on the proxy queue and the fleet thread.

internal import ImageCacheStatus
internal import ImageCacheFleet

package final class FleetMetrics: Sendable {
    let hits = Counter()
    let leaseWins = Counter()
    let takeovers = Counter()
    let waits = Counter()
    let passMarkers = Counter()
    let passMarkersSeen = Counter()
    let stored = Counter()
    let lostLeases = Counter()
    let releases = Counter()
    let unavailable = Counter()
    let damaged = Counter()
    let bytesRead = Counter()
    /// Fleet values refused as older than a purge of their URL.
    let purgedRefused = Counter()
    /// Fleet values not served because this host had not read the purge logs yet (FleetPurges.caughtUp).
    let catchUpRefused = Counter()

    package init() {}

    /// The document's fleet part: these counts and the tier's servers.
    func snapshot(tier: FleetStats) -> DaemonStats.Fleet {
        var fleet = DaemonStats.Fleet()
        fleet.hits = hits.current
        fleet.leaseWins = leaseWins.current
        fleet.takeovers = takeovers.current
        fleet.waits = waits.current
        fleet.passMarkers = passMarkers.current
        fleet.passMarkersSeen = passMarkersSeen.current
        fleet.stored = stored.current
        fleet.lostLeases = lostLeases.current
        fleet.releases = releases.current
        fleet.unavailable = unavailable.current
        fleet.damaged = damaged.current
        fleet.bytesRead = bytesRead.current
        fleet.purgedRefused = purgedRefused.current
        fleet.catchUpRefused = catchUpRefused.current
        fleet.leasesHeld = tier.leasesHeld
        fleet.servers = tier.servers.map { server in
            var out = DaemonStats.Fleet.Server()
            out.address = server.address
            out.state = server.state.rawValue
            out.itemSizeMax = server.itemSizeMax
            out.operations = Int(server.operations)
            out.failures = Int(server.failures)
            out.timeouts = Int(server.timeouts)
            out.breakerOpens = Int(server.breakerOpens)
            out.bytesRead = Int(server.bytesRead)
            out.bytesWritten = Int(server.bytesWritten)
            return out
        }
        return fleet
    }
}
