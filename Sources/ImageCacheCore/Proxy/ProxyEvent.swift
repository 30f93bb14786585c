internal import ImageCacheSystem
public import ImageCacheHTTP
internal import ImageCacheStatus
public import ImageCacheConfig
public import ImageCacheServer
public import ImageCacheStore
public import ImageCacheUpstream
internal import ImageCacheTransform
internal import Dispatch
public import Foundation
public import Logging
public import ImageCacheFleet

/// What happens to fetches, as seen from the proxy queue.
public enum ProxyEvent: Sendable, Equatable {
    /// A client now waits on the upstream fetch for `key`; `waiters` counts them, this one included.
    case waiterAttached(key: CacheKey, waiters: Int)
    /// The fetch for `key` ended (stored or not, failed or cancelled).
    case fetchFinished(key: CacheKey)
    /// A request passed through to the origin (`Passthrough`) ended and its transfer was counted. A client may have
    /// read the whole response before this: its last bytes go out before the transfer's end arrives.
    case passFinished(key: CacheKey)
    /// The fetch for `key` paused its upstream transfer: a client was behind and the in-flight budget full.
    case transferPaused(key: CacheKey)
    /// The fetch for `key` was told by the fleet tier that another host fills it (its first "wait").
    case fleetWaiting(key: CacheKey)
    /// An entry this host filled is in the fleet tier (its store with the lease answered).
    case fleetStored(key: CacheKey)
    /// A purge from another host's log was applied here (`url`: the URL, or "*" for everything).
    case fleetPurgeApplied(url: String)
    /// This host has read the fleet's purge logs whole for the first time (`servers` of them): it serves fleet values
    /// from now on (FleetPurges.caughtUp).
    case fleetCaughtUp(servers: Int)
    /// A worker took the transform of the rendition `key` and is about to run it. Told on the worker's thread, not
    /// the proxy queue: a test holds the worker here to land a purge mid-transform.
    case transformStarting(key: CacheKey)
    /// A fleet server's breaker changed state (`server`: `host:port`): down (its keys local-only), probing, up.
    case fleetServerState(server: String, state: FleetStats.ServerState)
    /// /_imagecached/stats is about to be read (a test changes a counter here, to tell the status page's figures as
    /// its script computes them from those rendered with the page).
    case statsRead
}
