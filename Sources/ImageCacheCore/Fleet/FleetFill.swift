// FleetFill: what a runner (a Fetch, a RenditionJob) does with the fleet tier for the key its machine fills: the
// lookup's answer decoded, verified and counted for the machine (FetchMachine.FleetAnswer), the entry stored with the
// lease it won, a pass marker left with it. One place, so that an original and a rendition are shared by the same
// rules. Stateless: the runner keeps its lease and calls these on its own queue (the store's completion runs on the
// fleet thread and only counts and logs).

internal import ImageCacheHTTP
internal import ImageCacheStore
internal import ImageCacheFleet
internal import Foundation
internal import Logging

enum FleetFill {
    /// What becomes of a lease a runner holds: its machine's fleetStore, fleetPass or fleetRelease.
    enum LeaseEnd {
        case store(CacheEntry, ttl: Int)
        case pass(reason: String, ttl: Int)
        case release
    }

    /// Ends the runner's `lease` as `end` says, once (it is taken out); nothing when the runner holds none.
    /// `startSerial`: FleetPurges.serial when the fill started.
    static func end(_ lease: inout FleetLease?, _ end: LeaseEnd, itemMaxBytes: Int, passSeconds: Int, startSerial: UInt64,
                    context: FetchContext) {
        guard let held = lease.take() else { return }
        switch end {
        case let .store(entry, _) where context.fleetPurges.purgedSince(startSerial, url: entry.key.url.string):
            // In flight across a purge of its URL (FleetPurges.purgedSince): not shared; the lease goes back, so the
            // next asker fetches anew.
            release(held, context: context)
        case let .store(entry, ttl):
            store(entry, lease: held, ttl: ttl, itemMaxBytes: itemMaxBytes, passSeconds: passSeconds, context: context)
        case let .pass(reason, ttl):
            leavePass(held, reason: reason, ttl: ttl, context: context)
        case .release:
            release(held, context: context)
        }
    }

    /// The fleet's answer to a lookup of `key`, decoded and verified for the machine: a damaged or foreign value is
    /// deleted (by its CAS) and answered `damaged`; a value not newer than a purge of its URL (FleetPurges) is deleted
    /// and answered as a pass marker; a value found before this host has read the purge logs is answered `unavailable`; the counts kept (hits, bytes, markers seen, wins, takeovers after
    /// `waitedBefore`, waits, unavailable). The lease of a `won` answer is returned for the runner to keep.
    static func answer(_ lookup: FleetLookup, key: CacheKey, policy: FreshnessPolicy, waitedBefore: Bool,
                       context: FetchContext) -> (FetchMachine.FleetAnswer, FleetLease?) {
        let metrics = context.metrics.fleet
        switch lookup {
        case let .hit(value) where value.flags == FleetEnvelope.Flags.pass:
            metrics.passMarkersSeen.add()
            return (.pass(String(decoding: value.bytes.prefix(200), as: UTF8.self)), nil)
        case let .hit(value) where value.flags == FleetEnvelope.Flags.entry:
            do {
                let entry = try FleetEnvelope.decode(value.bytes, for: key, policy: policy)
                metrics.bytesRead.add(value.bytes.count)
                guard context.fleetPurges.caughtUp else {
                    // This host has not read the purge logs yet (it just started): it cannot tell whether the value
                    // was purged while its server was away. It fetches for itself, and the value stays.
                    metrics.catchUpRefused.add()
                    return (.unavailable("the fleet's purge logs are not read yet"), nil)
                }
                if context.fleetPurges.isPurged(entry) {
                    // Older than a purge of its URL (its server missed the delete, or a rendition of the URL, which a
                    // purge does not delete by name): gone, and this host fetches (or makes) it for itself.
                    metrics.purgedRefused.add()
                    context.fleet.delete(FleetEnvelope.key(for: key), cas: value.cas)
                    return (.pass("purged"), nil)
                }
                metrics.hits.add()
                return (.hit(entry), nil)
            } catch {
                metrics.damaged.add()
                context.fleet.delete(FleetEnvelope.key(for: key), cas: value.cas)
                return (.damaged(error.description), nil)
            }
        case let .hit(value):
            metrics.damaged.add()
            context.fleet.delete(FleetEnvelope.key(for: key), cas: value.cas)
            return (.damaged("a value with unknown client flags \(value.flags)"), nil)
        case let .won(lease):
            metrics.leaseWins.add()
            if waitedBefore { metrics.takeovers.add() }
            return (.won, lease)
        case .wait:
            metrics.waits.add()
            return (.wait, nil)
        case let .unavailable(reason):
            metrics.unavailable.add()
            return (.unavailable(reason), nil)
        }
    }

    /// Shares `entry` through the fleet with `lease` for `ttl` seconds; an entry over fleet.item-max (or over the
    /// server's own -I) leaves a pass marker instead (`passSeconds`), so the hosts waiting on the lease go alone.
    private static func store(_ entry: CacheEntry, lease: FleetLease, ttl: Int, itemMaxBytes: Int, passSeconds: Int,
                      context: FetchContext) {
        let value = FleetEnvelope.encode(entry)
        guard value.count <= itemMaxBytes else {
            return leavePass(lease, reason: "\(value.count) bytes, over fleet.item-max (\(itemMaxBytes))", ttl: passSeconds,
                             context: context)
        }
        let fleet = context.fleet, metrics = context.metrics, logger = context.logger, key = entry.key
        let events = context.events, queue = context.queue
        fleet.store(lease, value: value, flags: FleetEnvelope.Flags.entry, ttlSeconds: ttl) { result in
            switch result {
            case .stored:
                metrics.fleet.stored.add()
                if let events { queue.async { events(.fleetStored(key: key)) } }
            case .tooLarge:
                // (The server's own -I is smaller than fleet.item-max: the waiters go alone.)
                logger.notice("\(key): the fleet server refused \(value.count) bytes as too large (check fleet.item-max against its -I)")
                fleet.store(lease, value: Array("too large for the fleet server".utf8), flags: FleetEnvelope.Flags.pass,
                            ttlSeconds: passSeconds) { _ in }
                metrics.fleet.passMarkers.add()
            case .lostLease:
                metrics.fleet.lostLeases.add()
                logger.debug("\(key): the fleet lease was lost before the store (expired or taken over)")
            case let .unavailable(reason):
                logger.debug("\(key): not stored in the fleet: \(reason)")
            }
        }
    }

    /// Leaves a pass marker with `lease`: the hosts waiting on it fetch (or make) for themselves at once.
    private static func leavePass(_ lease: FleetLease, reason: String, ttl: Int, context: FetchContext) {
        context.metrics.fleet.passMarkers.add()
        context.fleet.store(lease, value: Array(reason.prefix(200).utf8), flags: FleetEnvelope.Flags.pass, ttlSeconds: ttl) { _ in }
    }

    /// Hands `lease` back: the next host to ask wins it at once.
    private static func release(_ lease: FleetLease, context: FetchContext) {
        context.fleet.release(lease)
        context.metrics.fleet.releases.add()
    }
}
