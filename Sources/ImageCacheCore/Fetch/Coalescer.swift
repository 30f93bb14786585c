// Coalescer: who joins which fetch in flight, one per key (Varnish's waiting list), in the in-flight table it shares
// with the rendition jobs (InFlightTable, Nuke's TaskPool). Confined to the proxy queue (`context.queue`).
//
//   dispatch(request) ── a bypass ───────────────────────────────> a fetch of its own, not in the table
//        │ the table has a fetch for (URL, trust, "") ─────────────> joins it (collapsed)
//        │ memory has a fresh copy now (landed since the lookup) ──> answered from it
//        └ else ──────────────────────────────────────────────────> a new fetch in the table (revalidating a stale
//                                                                   copy; starting from the disk's answer if the
//                                                                   hit path had one)
//   redispatchToVariants(waiters) ── each to the fetch of its variant id, joined or started (stored beside the first)
//   redispatchAlone(waiters) ──────── each to a fetch of its own
//   closed(fetch) ─────────────────── a fetch that takes no more waiters leaves the table (it runs on)
//
// A fetch's waiters, its cancellation when the last one leaves and its fan-out are the fetch's (FetchMachine decides,
// Fetch carries out); the coalescer only finds and starts fetches, and gives each the callbacks through which it hands
// waiters on and leaves the table (a fetch does not know the coalescer). Keys: a fetch for an untrusted request is subject to
// the private-network check and must not answer requests for a configured origin, nor the reverse, so trust is part
// of the key; so is the variant id of a fetch another response's Vary sent waiters to.

internal import ImageCacheSystem
internal import ImageCacheHTTP
internal import ImageCacheStatus
internal import ImageCacheServer
internal import ImageCacheStore
internal import Dispatch
internal import Foundation

final class Coalescer {
    let context: FetchContext
    /// The settings in force, read when a fetch starts.
    private let settings: SettingsCell

    // MARK: owned by context.queue
    /// The work in flight, shared with the rendition jobs.
    private let table: InFlightTable
    /// Waiter identities.
    private var nextWaiterID = 0

    init(context: FetchContext, settings: SettingsCell, table: InFlightTable) {
        self.context = context
        self.settings = settings
        self.table = table
    }

    private func fetch(_ key: FetchKey) -> Fetch? { table[.fetch(key)] as? Fetch }

    /// Joins the fetch in flight for `key`, or starts one. `probe` is the disk tier's answer when the caller already
    /// asked it (a new fetch then starts from that answer instead of asking again).
    func dispatch(_ request: ClientRequest, key: CacheKey, sink: any ResponseSink, reason: CacheOutcome.Forward,
                  disk probe: DiskProbe) {
        dispatchPrecondition(condition: .onQueue(context.queue))
        let fetchKey = FetchKey(key: key, trusted: request.trusted, variant: "")
        var revalidating: CacheEntry?
        if reason != .bypass {
            if let fetch = fetch(fetchKey) {
                // No only-if-cached request gets here: CacheDecision refused it where it looked the request up.
                fetch.attach(id: nextID(), request: request, sink: sink, collapsed: true)
                return
            }
            // An entry may have landed (or been refreshed) between the lookup on the connection's loop and now: decided
            // again. A stale one this request may not use is revalidated with its validators (without any, fetched whole;
            // it is still the copy stale-if-error may serve if the origin fails).
            if let entry = context.store.peekInMemory(key, requestFields: request.forwardedHeaders).entry {
                let time = context.now()
                switch CacheDecision.decide(stored: entry, request: request.cacheControl, now: time,
                                            defaultStaleWhileRevalidate: request.staleWhileRevalidate) {
                case let .serve(.fresh(ttl)):
                    StoredResponse.send(entry, to: sink, request: request, outcome: .hit(ttl: ttl), now: time)
                    return
                case .forward where reason == .stale || reason == .request:
                    revalidating = entry
                default:
                    break
                }
            }
        }
        start(key: key, leader: request, sink: sink, reason: reason, revalidating: revalidating,
              inTable: reason != .bypass, disk: probe)
    }

    /// Revalidates `entry` (served stale under stale-while-revalidate) with no client waiting, unless a fetch for the
    /// key is in flight already (it refreshes the entry, or replaces it). `bodyInFile`: the entry came from the disk
    /// tier with its body left in its file. Clients that come meanwhile join it.
    func revalidateInBackground(_ entry: CacheEntry, bodyInFile: Bool, request: ClientRequest, key: CacheKey) {
        dispatchPrecondition(condition: .onQueue(context.queue))
        let fetchKey = FetchKey(key: key, trusted: request.trusted, variant: "")
        guard fetch(fetchKey) == nil else { return }
        // A revalidation that finished between the stale answer and now replaced or refreshed the entry: done.
        if let current = context.store.peekInMemory(key, requestFields: request.forwardedHeaders).entry, current !== entry {
            return
        }
        let settings = FetchSettings(settings.current, writesToDisk: context.store.writesToDisk)
        let machine = FetchMachine(key: key, leader: request, reason: .stale, rules: settings.rules, revalidating: entry,
                                   bodyInFile: bodyInFile, fillsCache: true, now: context.now())
        let fetch = Fetch(machine, settings: settings, context: context, handoff: handoff)
        table.insert(fetch, for: .fetch(fetchKey))
        fetch.start(disk: .notAsked)
    }

    /// Sends waiters whose request selects another variant than a response of `key` (`head`, whose Vary names the
    /// fields they differ in) to a fetch of their own variant: one per variant id, coalesced, stored as one more
    /// variant of the URL.
    func redispatchToVariants(_ waiters: [(FetchMachine.Waiter, any ResponseSink)], of head: HTTPResponseHead,
                              key: CacheKey) {
        dispatchPrecondition(condition: .onQueue(context.queue))
        for (waiter, sink) in waiters {
            // Never "" (the URL's own fetch): a head without Vary does not send anyone here.
            let variant = VaryKey.make(response: head, request: waiter.request.forwardedHeaders)?.id ?? "*"
            if let joined = fetch(FetchKey(key: key, trusted: waiter.request.trusted, variant: variant)) {
                joined.attach(id: waiter.id, request: waiter.request, sink: sink, collapsed: true)
                continue
            }
            start(key: key, leader: waiter.request, sink: sink, reason: .varyMiss, variant: variant, id: waiter.id)
        }
    }

    /// Sends waiters that cannot share a response of `key` upstream on their own.
    func redispatchAlone(_ waiters: [(FetchMachine.Waiter, any ResponseSink)], key: CacheKey) {
        dispatchPrecondition(condition: .onQueue(context.queue))
        for (waiter, sink) in waiters {
            start(key: key, leader: waiter.request, sink: sink, reason: .bypass, inTable: false, id: waiter.id)
        }
    }

    /// A fetch takes no more waiters: it leaves the table (and runs on to its end).
    func closed(_ fetch: Fetch) {
        dispatchPrecondition(condition: .onQueue(context.queue))
        table.remove(fetch, for: .fetch(fetch.fetchKey))
    }

    /// What a fetch calls to hand waiters on and to leave the table. Weak: the table holds the fetches that take
    /// newcomers, not the reverse; a fetch that reports after the daemon let go of its coalescer fails the waiters it
    /// would have sent elsewhere.
    private var handoff: Fetch.Handoff {
        weak let coalescer = self
        return Fetch.Handoff(
            closed: { coalescer?.closed($0) },
            toVariants: { waiters, head, key in
                guard let coalescer else { return false }
                coalescer.redispatchToVariants(waiters, of: head, key: key)
                return true
            },
            alone: { waiters, key in
                guard let coalescer else { return false }
                coalescer.redispatchAlone(waiters, key: key)
                return true
            })
    }

    private func nextID() -> Int {
        nextWaiterID += 1
        return nextWaiterID
    }

    /// Starts a fetch with `leader` as its first waiter (`id`: a waiter that keeps its identity as it moves on).
    private func start(key: CacheKey, leader: ClientRequest, sink: any ResponseSink, reason: CacheOutcome.Forward,
                       variant: String = "", revalidating: CacheEntry? = nil, inTable: Bool = true, id: Int? = nil,
                       disk probe: DiskProbe = .notAsked) {
        let settings = FetchSettings(settings.current, writesToDisk: context.store.writesToDisk)
        let machine = FetchMachine(key: key, leader: leader, reason: reason, variant: variant, rules: settings.rules,
                                   revalidating: revalidating, now: context.now())
        let fetch = Fetch(machine, settings: settings, context: context, handoff: handoff)
        if inTable { table.insert(fetch, for: .fetch(fetch.fetchKey)) }
        fetch.attach(id: id ?? nextID(), request: leader, sink: sink, collapsed: false)
        fetch.start(disk: probe)
    }
}
