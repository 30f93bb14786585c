internal import ImageCacheStatus
internal import ImageCacheStore
internal import Dispatch

/// Work clients can join, as the table lists it.
protocol InFlightWork: AnyObject {
    /// What the stats document lists for it (URL, kind, clients, bytes, age).
    var summary: DaemonStats.InFlightFetch { get }
}
