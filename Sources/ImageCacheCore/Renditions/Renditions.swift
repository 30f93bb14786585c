// Transforms, cached: a transform URL is a rendition of its source, looked up, stored and served through the same
// paths as any response (a CacheKey with the rendition's text: memory hit on the connection's loop, disk hit,
// CacheDecision), and made, when it is missing or stale, by one `RenditionJob` per key (its decisions are
// RenditionMachine's; the job carries out the actions), held in the in-flight table it shares with the fetches:
//
//   client ── serve(rendition key) ── fresh in memory / on disk ──> StoredResponse.send (as any hit; never a hop)
//                    │ miss or stale
//                    └──> Renditions.dispatch (proxy queue) ── a job for the key? ── join it (coalesced)
//                              │ new job (at most transform-workers + transform-queue at once, else 503)
//                              ├─> the source through the cache: serve(source request) into a SourceCollector, so
//                              │   M renditions of one source share one source fetch (the source's own coalescing)
//                              │   and the source is stored, revalidated and purged as the entry it is
//                              ├─> source unchanged (same validator) and a stale rendition in hand: refreshed, no
//                              │   transform
//                              └─> TransformPool (a worker) ── Transformer.run ──> store the rendition, answer
//                                  every waiter (Cache-Status: detail=transformed)
//                              (with a fleet tier, a new rendition is first looked up in the fleet: another host's
//                              is served and kept here, and one host makes it for the fleet: RenditionMachine's
//                              fleet stage)
//
// RULES
//   Key: the source URL and the rendition's text: canonical options (TransformOptions.canonical) + "/f:" + the
//   format class (FormatNegotiation: explicit format, "avif"/"webp" negotiated, or "src") + ":v" when the response
//   varies on Accept. Equivalent URLs (aliases, order, defaults, dpr) share one entry; Accept never splits the
//   cache beyond the format class.
//   Freshness: the source's, as served to the job (Cache-Control, Expires, Date, Last-Modified copied; received
//   when the source was, with its source's age: RenditionMachine.entry), so a rendition goes stale when its source
//   does, and a purge of the source after the origin answered for it covers the rendition. A source that may not be stored (no-store, private) makes a
//   rendition that is not stored either.
//   Validators: ETag = hash of (the source's ETag, else Last-Modified, else nothing: then a new ETag per transform)
//   and the rendition's text. A stale rendition whose source comes back with the same validator is refreshed
//   without transforming; a changed one is transformed again. A source fetched anew with another validator than
//   the one it replaced removes every rendition of it (Fetch: TieredStore.removeRenditions); a purge of the source
//   URL removes them too (TieredStore.remove).
//   The source request carries no client field but Cache-Control and Pragma (a client's no-cache revalidates the
//   source too); it is the same for every client, so the source is one shared entry.
//   Errors: the source's 404/410 -> 404; other source failures -> 502; over transform-max-source-bytes -> 413;
//   not whole within transform-source-timeout -> 504 (the fetch goes on for the cache; the job's slot is freed);
//   refused images -> 422 naming the limit; queue full or waited too long -> 503. One line, in the body and the log.
//
// Ownership: `Renditions` and its jobs are confined to the proxy queue; the pool's callbacks, the deadline and the
// collector hop there. Nothing here runs on the hit path.

internal import ImageCacheSystem
internal import ImageCacheHTTP
internal import ImageCacheConfig
internal import ImageCacheServer
internal import ImageCacheStore
internal import ImageCacheTransform
internal import ImageCacheFleet
internal import Dispatch
internal import Foundation
internal import Logging

/// The renditions being made: admission, joining, and the jobs' callbacks. Confined to the proxy queue.
final class Renditions: @unchecked Sendable {
    /// The work in flight, shared with the fetches.
    private let table: InFlightTable
    /// Jobs holding a source or a worker (bounded: workers + queue); each is in the table until it finishes.
    private(set) var active = 0
    let pool: TransformPool
    /// Decoded levels of JPEG and opaque PNG sources, shared by the workers (its own lock; PixelCache.swift).
    let pixelCache: PixelCache
    let context: FetchContext
    private let settings: SettingsCell
    /// Serves the source request through the cache (Proxy.serve); set once by the proxy.
    var fetchSource: (@Sendable (ClientRequest, any ResponseSink) -> Void)?
    /// libvips could not start: every transform gets 503 with this reason.
    let unavailable: String?
    /// Waiter identities.
    private var nextWaiterID = 0

    init(pool: TransformPool, pixelCache: PixelCache, context: FetchContext, settings: SettingsCell, table: InFlightTable,
         unavailable: String?) {
        self.pool = pool
        self.pixelCache = pixelCache
        self.context = context
        self.settings = settings
        self.table = table
        self.unavailable = unavailable
    }

    private func job(_ key: CacheKey) -> RenditionJob? { table[.rendition(key)] as? RenditionJob }

    /// A client whose rendition is missing or stale (`stale`: the stored one, if any).
    func dispatch(_ request: ClientRequest, rendition: RenditionRequest, key: CacheKey, sink: any ResponseSink,
                  stale: CacheEntry?) {
        dispatchPrecondition(condition: .onQueue(context.queue))
        if let unavailable {
            sink.fail(status: 503, reason: unavailable)
            return
        }
        if let job = job(key) {
            job.attach(id: nextID(), request: request, sink: sink, collapsed: true)
            return
        }
        // A rendition may have landed between the lookup and now.
        if let entry = context.store.peekInMemory(key, requestFields: HTTPHeaders()).entry {
            let time = context.now()
            if case let .serve(.fresh(ttl)) = CacheDecision.decide(stored: entry, request: request.cacheControl, now: time,
                                                                   defaultStaleWhileRevalidate: request.staleWhileRevalidate) {
                StoredResponse.send(entry, to: sink, request: request, outcome: .hit(ttl: ttl), now: time)
                return
            }
        }
        guard admits else {
            let reason = "too many transforms in progress (\(active): transform-workers \(pool.workers) + transform-queue \(pool.queueLimit))"
            context.logger.notice("503 \(request.head.target.prefix(300)): \(reason)")
            context.metrics.transformed(format: "-", result: "queue_full", seconds: 0, bytesIn: 0, bytesOut: 0)
            sink.fail(status: 503, reason: reason)
            return
        }
        // A client's no-store: the result is not stored (RFC 9111 5.2.1.5); it is still shared with whoever joins.
        let job = start(key: key, leader: request, rendition: rendition, stale: stale, stores: !request.cacheControl.noStore,
                        fillsCache: false)
        job.attach(id: nextID(), request: request, sink: sink, collapsed: false)
        job.start()
    }

    /// stale-while-revalidate for a rendition: the job runs with no client waiting.
    func refreshInBackground(_ stale: CacheEntry, request: ClientRequest, rendition: RenditionRequest, key: CacheKey) {
        dispatchPrecondition(condition: .onQueue(context.queue))
        guard job(key) == nil, unavailable == nil, admits else { return }
        start(key: key, leader: request, rendition: rendition, stale: stale, stores: true, fillsCache: true).start()
    }

    private var admits: Bool { active < pool.workers + pool.queueLimit }

    private func nextID() -> Int {
        nextWaiterID += 1
        return nextWaiterID
    }

    /// A new job in the table, holding an admission slot until it finishes.
    private func start(key: CacheKey, leader: ClientRequest, rendition: RenditionRequest, stale: CacheEntry?, stores: Bool,
                       fillsCache: Bool) -> RenditionJob {
        let current = settings.current
        let configuration = current.configuration
        let rules = RenditionMachine.Rules(sourceTimeoutSeconds: configuration.transform.sourceTimeoutSeconds,
                                           staleIfErrorSeconds: configuration.staleIfErrorSeconds,
                                           completeAbandonedJobs: configuration.completeAbandonedFetches,
                                           freshness: current.freshnessPolicy,
                                           fleet: FetchSettings.fleetRules(configuration))
        let machine = RenditionMachine(key: key, leader: leader, rendition: rendition, stale: stale, stores: stores,
                                       rules: rules, fillsCache: fillsCache)
        weak let renditions = self
        let handoff = RenditionJob.Handoff(
            fetchSource: { request, sink in
                guard let fetchSource = renditions?.fetchSource else { return sink.abort() }
                fetchSource(request, sink)
            },
            finished: { renditions?.finished($0) },
            redispatch: { [context] job, waiters in
                guard let renditions else {
                    for (_, sink) in waiters {
                        context.metrics.error("stopping", status: 503, reason: "the daemon is stopping", target: job.key.url.string)
                        sink.fail(status: 503, reason: "the daemon is stopping")
                    }
                    return
                }
                for (waiter, sink) in waiters {
                    renditions.dispatch(waiter.request, rendition: job.rendition, key: job.key, sink: sink, stale: nil)
                }
            })
        let spec = TransformSpec(options: rendition.options, format: rendition.choice.format,
                                 limits: configuration.transform.limits, defaultQuality: configuration.transform.quality,
                                 avifEffort: configuration.transform.avifEffort, webpEffort: configuration.transform.webpEffort,
                                 pixelCache: pixelCache.limitBytes > 0 ? pixelCache : nil)
        let job = RenditionJob(machine, spec: spec, maxSourceBytes: configuration.transform.maxSourceBytes, pool: pool,
                               context: context, handoff: handoff,
                               fleetLimits: RenditionJob.FleetLimits(itemMaxBytes: configuration.fleet.itemMaxBytes,
                                                                     leaseSeconds: configuration.fleet.leaseSeconds))
        precondition(self.job(key) == nil, "one rendition job per key: the table is a job's only owner")
        table.insert(job, for: .rendition(key))
        active += 1
        return job
    }

    /// A job ended: it leaves the table and frees its slot.
    private func finished(_ job: RenditionJob) {
        dispatchPrecondition(condition: .onQueue(context.queue))
        table.remove(job, for: .rendition(job.key))
        active -= 1
    }
}
