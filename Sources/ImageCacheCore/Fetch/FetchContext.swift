internal import ImageCacheSystem
internal import ImageCacheHTTP
internal import ImageCacheStatus
internal import ImageCacheConfig
internal import ImageCacheServer
internal import ImageCacheStore
internal import ImageCacheFleet
internal import ImageCacheUpstream
internal import Dispatch
internal import Foundation
internal import Logging
internal import Synchronization

/// What a fetch needs from the daemon, handed in when it starts (no reference back to the proxy).
struct FetchContext: Sendable {
    let origin: any Origin
    /// The fleet's shared tier (its own thread; FleetSettings say whether it is in use: FetchSettings.rules.fleet).
    let fleet: FleetTier
    /// The fleet's purge log as this host knows it (confined to `queue`).
    let fleetPurges: FleetPurges
    let store: TieredStore
    let metrics: ProxyMetrics
    let logger: Logger
    let events: (@Sendable (ProxyEvent) -> Void)?
    /// This daemon's Via value, sent upstream (LoopGuard).
    let via: String
    let now: @Sendable () -> Date
    /// The proxy queue every fetch and the coalescer are confined to.
    let queue: DispatchQueue
}
