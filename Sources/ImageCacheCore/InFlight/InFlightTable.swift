// InFlightTable: the work in flight that clients join, one per key: upstream fetches (by FetchKey) and rendition jobs
// (by the rendition's CacheKey), in one table (Nuke's TaskPool). Confined to the proxy queue.
//
// The table only finds, holds and lists work. Who joins what is decided by its two users (Coalescer for fetches,
// Renditions for jobs); each piece of work decides for itself when it takes no more clients (its machine's
// `closeToNewcomers` or `finish`) and says so through the callback its user gave it (`Fetch.Handoff.closed`,
// `RenditionJob.Handoff.finished`), which removes it here.
// A piece of work does not know the table: as in Nuke, the task does not know its pool.

internal import ImageCacheStatus
internal import ImageCacheStore
internal import Dispatch

final class InFlightTable {
    enum Key: Hashable {
        case fetch(FetchKey)
        case rendition(CacheKey)

        var isFetch: Bool {
            if case .fetch = self { return true }
            return false
        }
    }

    private let queue: DispatchQueue
    // MARK: owned by queue
    private var work: [Key: any InFlightWork] = [:]

    init(queue: DispatchQueue) {
        self.queue = queue
    }

    subscript(key: Key) -> (any InFlightWork)? {
        dispatchPrecondition(condition: .onQueue(queue))
        return work[key]
    }

    /// `item` takes newcomers for `key` (replacing any that did: a closed fetch's key may be taken again).
    func insert(_ item: any InFlightWork, for key: Key) {
        dispatchPrecondition(condition: .onQueue(queue))
        work[key] = item
    }

    /// `item` takes no more newcomers: it leaves, unless another has taken its key since.
    func remove(_ item: any InFlightWork, for key: Key) {
        dispatchPrecondition(condition: .onQueue(queue))
        if work[key] === item { work[key] = nil }
    }

    /// Work taking newcomers.
    var count: Int {
        dispatchPrecondition(condition: .onQueue(queue))
        return work.count
    }

    /// Fetches taking newcomers.
    var fetchCount: Int {
        dispatchPrecondition(condition: .onQueue(queue))
        return work.keys.count(where: \.isFetch)
    }

    /// The work taking newcomers, as the stats document lists it.
    var summaries: [DaemonStats.InFlightFetch] {
        dispatchPrecondition(condition: .onQueue(queue))
        return work.values.map(\.summary)
    }
}
