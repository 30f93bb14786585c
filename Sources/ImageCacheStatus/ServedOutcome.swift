// ServedOutcome: how a request was answered, as the daemon counts it (requests_total and served_bytes_total by
// outcome, the history's samples, the status page's stack of outcomes). `CacheOutcome.served` is the one rule that
// maps what the proxy decided (the Cache-Status / X-Cache vocabulary) to it.

package import ImageCacheHTTP

/// How a request was answered, as counted (`CacheOutcome.served`: the X-Cache vocabulary, with disk hits told apart;
/// `error` for the daemon's own error answers).
public enum ServedOutcome: String, Sendable, CaseIterable, Codable {
    case hit, diskHit = "disk_hit", stale, miss, coalesced, revalidated, expired, bypass, pass, error
    /// Forward mode passed on what the image checks refuse, uncached (forward-non-images pass). Last, so that the
    /// status page's colours of the others (by index) stay as they were.
    case notImage = "not_image"
    /// A hit in the fleet's shared tier (another host stored it): kept here from then on. After notImage, for the
    /// same reason.
    case fleetHit = "fleet_hit"

    /// Served from stored bytes without transferring the body upstream.
    package var fromCache: Bool { [.hit, .diskHit, .stale, .revalidated, .fleetHit].contains(self) }
}

extension CacheOutcome {
    /// The label the response is counted under (requests_total, served_bytes_total by outcome).
    package var served: ServedOutcome {
        guard let forward else {
            return (ttl ?? 0) < 0 ? .stale : detail == "disk" ? .diskHit : detail == "fleet" ? .fleetHit : .hit
        }
        if isNotImage { return .notImage }
        if collapsed { return .coalesced }
        switch forward {
        case _ where revalidated: return .revalidated
        case .bypass: return .bypass
        case .method: return .pass
        case _ where forwardStatus == 304: return .pass   // a 304 that answered no conditional request (xCache)
        case .stale: return .expired
        case .miss, .request, .varyMiss: return .miss
        }
    }
}
