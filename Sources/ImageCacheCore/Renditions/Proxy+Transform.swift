// Transforms, cached: a transform URL is a rendition of its source, looked up, stored and served through the same
// paths as any response (a CacheKey with the rendition's text: memory hit on the connection's loop, disk hit,
// CacheDecision), and made, when it is missing or stale, by one `RenditionJob` per key:
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
//
// RULES
//   Key: the source URL and the rendition's text: canonical options (TransformOptions.canonical) + "/f:" + the
//   format class (FormatNegotiation: explicit format, "avif"/"webp" negotiated, or "src") + ":v" when the response
//   varies on Accept. Equivalent URLs (aliases, order, defaults, dpr) share one entry; Accept never splits the
//   cache beyond the format class.
//   Freshness: the source's, as served to the job (Cache-Control, Expires, Date, Age, Last-Modified copied), so a
//   rendition goes stale when its source does. A source that may not be stored (no-store, private) makes a
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
// Ownership: `Renditions` and its jobs are confined to the proxy queue; the pool's callbacks and the collector hop
// there. Nothing here runs on the hit path.

internal import ImageCacheSystem
internal import ImageCacheHTTP
internal import ImageCacheStatus
internal import ImageCacheConfig
internal import ImageCacheServer
internal import ImageCacheStore
internal import ImageCacheTransform
internal import Dispatch
internal import Foundation
internal import Logging

/// What a rendition request adds to a client request. A class: a client request (passed along the hit path) holds
/// one reference, nil for every request that is not a transform.
final class RenditionRequest: Sendable {
    let options: TransformOptions
    /// The output format (nil: the source's) and whether it was negotiated from Accept.
    let choice: FormatNegotiation.Choice
    /// The key's rendition text.
    let text: String
    /// The key it is stored under.
    let key: CacheKey

    init(source: UpstreamURL, options: TransformOptions, canonical: String, choice: FormatNegotiation.Choice) {
        self.options = options
        self.choice = choice
        text = canonical + "/f:" + choice.keyClass + (choice.variesOnAccept ? ":v" : "")
        key = CacheKey(source, rendition: text)
    }

    /// The rendition a request asks for: the target's own when its format is fixed, else negotiated from Accept.
    static func of(_ target: TransformTarget, accept: String?, settings: TransformConfiguration) -> RenditionRequest {
        if let fixed = target.fixed { return fixed }
        return RenditionRequest(source: target.source, options: target.options, canonical: target.canonical,
                                choice: FormatNegotiation.choose(target.options.format, accept: accept,
                                                                 autoAVIF: settings.autoAVIF, autoWebP: settings.autoWebP))
    }
}

extension Proxy {
    /// A transform URL: served as its rendition's key (see the top).
    func serveTransform(_ target: TransformTarget, head: HTTPRequestHead, client: ClientInfo, sink: any ResponseSink,
                        settings: ProxySettings) {
        let rendition = RenditionRequest.of(target, accept: head.headers["Accept"], settings: settings.configuration.transform)
        if settings.configuration.accessLog { (sink as? AccessLogSink)?.describe(transform: rendition.text) }
        let request = ClientRequest(head: head, url: target.source, mode: target.mode, trusted: target.trusted, client: client,
                                    fields: settings.requestFields, rendition: rendition,
                                    staleWhileRevalidate: settings.configuration.staleWhileRevalidateSeconds)
        serve(request, sink: sink)
    }
}

/// The renditions being made, by key. Confined to the proxy queue.
final class Renditions: @unchecked Sendable {
    private var jobs: [CacheKey: RenditionJob] = [:]
    /// Jobs holding a source or a worker (bounded: workers + queue).
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

    init(pool: TransformPool, pixelCache: PixelCache, context: FetchContext, settings: SettingsCell, unavailable: String?) {
        self.pool = pool
        self.pixelCache = pixelCache
        self.context = context
        self.settings = settings
        self.unavailable = unavailable
    }

    var count: Int { jobs.count }

    /// The renditions being made, as the stats document lists them.
    var inFlight: [DaemonStats.InFlightFetch] {
        dispatchPrecondition(condition: .onQueue(context.queue))
        return jobs.values.map { job in
            DaemonStats.InFlightFetch(url: job.key.description, kind: "transform", waiters: job.waiters.count, receivedBytes: 0,
                                      seconds: (ContinuousClock.now - job.begun).inSeconds)
        }
    }

    /// A client whose rendition is missing or stale (`stale`: the stored one, if any).
    func dispatch(_ request: ClientRequest, rendition: RenditionRequest, key: CacheKey, sink: any ResponseSink,
                  stale: CacheEntry?) {
        dispatchPrecondition(condition: .onQueue(context.queue))
        if let unavailable {
            sink.fail(status: 503, reason: unavailable)
            return
        }
        if let job = jobs[key] {
            job.waiters.append((request, sink, true))
            context.events?(.waiterAttached(key: key, waiters: job.waiters.count))
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
        guard active < pool.workers + pool.queueLimit else {
            let reason = "too many transforms in progress (\(active): transform-workers \(pool.workers) + transform-queue \(pool.queueLimit))"
            context.logger.notice("503 \(request.head.target.prefix(300)): \(reason)")
            context.metrics.transformed(format: "-", result: "queue_full", seconds: 0, bytesIn: 0, bytesOut: 0)
            sink.fail(status: 503, reason: reason)
            return
        }
        // A client's no-store: the result is not stored (RFC 9111 5.2.1.5); it is still shared with whoever joins.
        let job = RenditionJob(key: key, leader: request, rendition: rendition, stale: stale, stores: !request.cacheControl.noStore,
                               settings: settings.current.configuration, freshness: settings.current.freshnessPolicy)
        job.waiters.append((request, sink, false))
        jobs[key] = job
        active += 1
        context.events?(.waiterAttached(key: key, waiters: 1))
        startSource(job)
    }

    /// stale-while-revalidate for a rendition: the job runs with no client waiting.
    func refreshInBackground(_ stale: CacheEntry, request: ClientRequest, rendition: RenditionRequest, key: CacheKey) {
        dispatchPrecondition(condition: .onQueue(context.queue))
        guard jobs[key] == nil, unavailable == nil, active < pool.workers + pool.queueLimit else { return }
        let job = RenditionJob(key: key, leader: request, rendition: rendition, stale: stale, stores: true,
                               settings: settings.current.configuration, freshness: settings.current.freshnessPolicy)
        jobs[key] = job
        active += 1
        startSource(job)
    }

    private func startSource(_ job: RenditionJob) {
        let source = job.leader.url
        var headers = HTTPHeaders()
        headers.add("Host", source.authority)
        // The client's revalidation wishes reach the source (no-cache, max-age); its no-store concerns the rendition.
        let directives = job.leader.head.headers.values("Cache-Control").flatMap { $0.split(separator: ",") }
            .map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty && $0.lowercased() != "no-store" }
        if !directives.isEmpty { headers.add("Cache-Control", directives.joined(separator: ", ")) }
        for value in job.leader.head.headers.values("Pragma") { headers.add("Pragma", value) }
        let head = HTTPRequestHead(method: "GET", target: source.pathAndQuery, headers: headers)
        let sourceRequest = ClientRequest(head: head, url: source, mode: job.leader.mode, trusted: job.leader.trusted,
                                          client: job.leader.client, fields: job.leader.fields, isInternal: true,
                                          staleWhileRevalidate: job.leader.staleWhileRevalidate)
        let queue = context.queue
        let collector = SourceCollector(limit: job.settings.maxSourceBytes) { [self] result in
            queue.async { self.sourceArrived(job, result) }
        }
        guard let fetchSource else { preconditionFailure("Renditions.fetchSource is set by the proxy") }
        fetchSource(sourceRequest, collector)
        // A source not whole by transform-source-timeout fails the job (504), which frees its admission slot: a slow
        // origin holds a slot that long, not for the whole upstream.timeout. The fetch goes on for the cache. The
        // timer holds the collector and is cancelled when the source has been reported (sourceArrived, which runs
        // after this: the collector reports through the proxy queue).
        let timeout = job.settings.sourceTimeoutSeconds
        let timer = DispatchWorkItem {
            collector.giveUp(SourceCollector.Failure(status: 504, reason: "the source did not arrive within transform-source-timeout (\(String(format: "%g", timeout))s)",
                                                     label: "source_timeout"))
        }
        job.sourceTimer = timer
        queue.asyncAfter(deadline: .now() + timeout, execute: timer)
    }

    private func sourceArrived(_ job: RenditionJob, _ result: Result<SourceCollector.Source, SourceCollector.Failure>) {
        dispatchPrecondition(condition: .onQueue(context.queue))
        job.sourceTimer?.cancel()
        job.sourceTimer = nil
        let source: SourceCollector.Source
        switch result {
        case let .failure(failure):
            if failure.status >= 500, serveStale(job) {
                // A source that timed out is counted even so: its fetch, which goes on, reports no failure of its own.
                if failure.label == "source_timeout" {
                    context.metrics.transformed(format: job.rendition.choice.format?.rawValue ?? "-", result: failure.label,
                                                seconds: 0, bytesIn: 0, bytesOut: 0)
                }
                return
            }
            return finish(job, failing: failure.status, failure.reason, label: failure.label)
        case let .success(arrived):
            source = arrived
        }
        guard source.head.status == 200 || source.head.status == 203 else {
            if source.head.status >= 500, serveStale(job) { return }
            let status = (source.head.status == 404 || source.head.status == 410) ? 404 : 502
            return finish(job, failing: status, "the source answered \(source.head.status)", label: "source_\(source.head.status)")
        }
        let validator = source.head.headers.validator
        let etag = validator.map { RenditionJob.etag(sourceValidator: $0, rendition: job.key.rendition) }
        if let stale = job.stale, let etag, stale.etag == etag, !stale.body.isEmpty {
            // The source is what the rendition was made from: new freshness, same bytes.
            let entry = job.entry(body: stale.body, mediaType: stale.head.headers["Content-Type"] ?? "application/octet-stream",
                                  source: source.head, etag: etag, now: context.now())
            if job.stores, entry.isStorable { context.store.refresh(entry.entry, bodyInFile: false) }
            if !entry.isShareable { return answer(job, entry.entry, forwardStatus: 304, shareable: false) }
            context.metrics.transformed(format: entry.format, result: "refreshed", seconds: 0, bytesIn: 0, bytesOut: 0)
            return answer(job, entry.entry, forwardStatus: 304)
        }
        // (An SVG source without transform-allow-svg, or one SVGGuard refuses, is the Transformer's to refuse.)
        let format = job.rendition.choice.format
        let spec = TransformSpec(options: job.rendition.options, format: format, limits: job.settings.limits,
                                 defaultQuality: job.settings.quality, avifEffort: job.settings.avifEffort,
                                 webpEffort: job.settings.webpEffort, pixelCache: pixelCache.limitBytes > 0 ? pixelCache : nil)
        let queue = context.queue
        let body = source.body
        pool.submit(TransformPool.Job(source: body, spec: spec) { [self] result, seconds in
            queue.async { self.transformed(job, result, seconds: seconds, source: source, etag: etag) }
        })
    }

    private func transformed(_ job: RenditionJob, _ result: Result<TransformedImage, TransformFailure>, seconds: Double,
                             source: SourceCollector.Source, etag: String?) {
        dispatchPrecondition(condition: .onQueue(context.queue))
        switch result {
        case let .failure(failure):
            context.metrics.transformed(format: job.rendition.choice.format?.rawValue ?? "-", result: failure.label,
                                        seconds: seconds, bytesIn: source.body.count, bytesOut: 0)
            finish(job, failing: failure.status, failure.reason, label: failure.label, counted: true)
        case let .success(image):
            context.metrics.transformed(format: image.format.rawValue, result: "ok", seconds: seconds,
                                        bytesIn: source.body.count, bytesOut: image.bytes.count)
            let made = job.entry(body: image.bytes, mediaType: image.format.mediaType, source: source.head,
                                 etag: etag ?? RenditionJob.etag(sourceValidator: "\(UInt64.random(in: 0...UInt64.max))", rendition: job.key.rendition),
                                 now: context.now())
            if job.stores && made.isStorable { context.store.store(made.entry) }
            if !made.isShareable {
                context.logger.debug("transformed \(job.key.url.string.prefix(300)) [\(job.key.rendition)]: not shareable (the source is private or no-store)")
                return answer(job, made.entry, forwardStatus: nil, shareable: false)
            }
            context.logger.debug("transformed \(job.key.url.string.prefix(300)) [\(job.key.rendition)] -> \(image.width)x\(image.height) \(image.format.rawValue) \(image.bytes.count) bytes in \(Int(seconds * 1000)) ms")
            answer(job, made.entry, forwardStatus: nil)
        }
    }

    /// The source failed (5xx, unreachable): a stale rendition in hand is served when stale-if-error allows it
    /// (CacheDecision.afterOriginFailure, as for any stored response).
    private func serveStale(_ job: RenditionJob) -> Bool {
        guard let stale = job.stale else { return false }
        let time = context.now()
        guard let decision = CacheDecision.afterOriginFailure(stored: stale, request: job.leader.cacheControl,
                                                              offlineSeconds: job.configuration.staleIfErrorSeconds, now: time),
              let outcome = decision.servedOutcome(tier: nil) else { return false }
        for (request, sink, _) in job.waiters {
            StoredResponse.send(stale, to: sink, request: request, outcome: outcome, now: time)
        }
        done(job)
        return true
    }

    private func answer(_ job: RenditionJob, _ entry: CacheEntry, forwardStatus: Int?, shareable: Bool = true) {
        let time = context.now()
        var waiters = job.waiters
        if !shareable {
            // A private or no-store source: its rendition is the leader's alone; the others ask again, each for
            // themselves (Storability.isShareable, as for a fetch).
            let others = waiters.dropFirst()
            waiters = Array(waiters.prefix(1))
            job.waiters = waiters
            done(job)
            for (request, sink, _) in others { dispatch(request, rendition: job.rendition, key: job.key, sink: sink, stale: nil) }
            for (request, sink, _) in waiters {
                StoredResponse.send(entry, to: sink, request: request,
                                    outcome: CacheOutcome(forward: .miss, forwardStatus: forwardStatus,
                                                         revalidated: forwardStatus == 304, detail: "transformed"), now: time)
            }
            return
        }
        for (request, sink, collapsed) in waiters {
            let outcome = CacheOutcome(forward: job.stale == nil ? .miss : .stale, forwardStatus: forwardStatus,
                                       revalidated: forwardStatus == 304,
                                       stored: job.stores, collapsed: collapsed,
                                       detail: forwardStatus == 304 ? "refreshed" : "transformed")
            StoredResponse.send(entry, to: sink, request: request, outcome: outcome, now: time)
        }
        done(job)
    }

    private func finish(_ job: RenditionJob, failing status: Int, _ reason: String, label: String, counted: Bool = false) {
        if !counted {
            context.metrics.transformed(format: job.rendition.choice.format?.rawValue ?? "-", result: label,
                                        seconds: 0, bytesIn: 0, bytesOut: 0)
        }
        context.logger.notice("\(status) transform \(job.leader.head.target.prefix(300)): \(reason)")
        context.metrics.error("transform_\(label)", status: status, reason: reason, target: job.leader.head.target)
        for (_, sink, _) in job.waiters { sink.fail(status: status, reason: reason) }
        done(job)
    }

    private func done(_ job: RenditionJob) {
        if jobs[job.key] === job { jobs[job.key] = nil }
        active -= 1
        context.events?(.fetchFinished(key: job.key))
    }
}

/// One rendition being made and the clients waiting for it. Confined to the proxy queue.
final class RenditionJob: @unchecked Sendable {
    let key: CacheKey
    let leader: ClientRequest
    let rendition: RenditionRequest
    let stale: CacheEntry?
    /// False for a request that may not share or store (the client's no-store): made for it alone.
    let stores: Bool
    /// The configuration the job started with (its transform settings, stale-if-error).
    let configuration: Configuration
    var settings: TransformConfiguration { configuration.transform }
    let freshness: FreshnessPolicy
    var waiters: [(ClientRequest, any ResponseSink, Bool)] = []
    /// When the job began (for the list of work in flight).
    let begun = ContinuousClock.now
    /// Fails the source's collection at transform-source-timeout; cancelled once the source is reported (on the
    /// proxy queue).
    var sourceTimer: DispatchWorkItem?

    init(key: CacheKey, leader: ClientRequest, rendition: RenditionRequest, stale: CacheEntry?, stores: Bool,
         settings: Configuration, freshness: FreshnessPolicy) {
        self.key = key
        self.leader = leader
        self.rendition = rendition
        self.stale = stale
        self.stores = stores
        configuration = settings
        self.freshness = freshness
    }

    /// The rendition's entity tag (RenditionTag, in the store: it judges renditions when their source changes).
    static func etag(sourceValidator: String, rendition: String) -> String {
        RenditionTag.etag(sourceValidator: sourceValidator, rendition: rendition)
    }

    /// The stored response of a rendition: the image, with the source's freshness fields.
    func entry(body: [UInt8], mediaType: String, source: HTTPResponseHead, etag: String, now: Date)
        -> (entry: CacheEntry, isStorable: Bool, isShareable: Bool, format: String) {
        var headers = HTTPHeaders()
        headers.add("Content-Type", mediaType)
        // The source's freshness, its targeted cache-control fields included (RFC 9213: they govern it here too).
        for name in ["Cache-Control", "Expires", "Date", "Age", "Last-Modified"] + freshness.targetedFields {
            for value in source.headers.values(name) { headers.add(name, value) }
        }
        if !headers.contains("Date") { headers.add("Date", HTTPDate.format(now)) }
        headers.add("ETag", etag)
        if rendition.choice.variesOnAccept { headers.add("Vary", "Accept") }
        headers.add("X-Content-Type-Options", "nosniff")
        let head = HTTPResponseHead(status: 200, headers: headers)
        let entry = CacheEntry(key: key, head: head, body: body, requestTime: now, responseTime: now, vary: nil, policy: freshness)
        // The store's own rules (Storability), for the rendition's head as stored, with the source request's method.
        let request = HTTPRequestHead(method: "GET", target: key.url.pathAndQuery, headers: HTTPHeaders())
        let storable = Storability.decide(request: request, requestCacheControl: CacheControl(HTTPHeaders()), response: head,
                                          responseCacheControl: entry.cacheControl) == .store
        let shareable = Storability.isShareable(head, cacheControl: entry.cacheControl)
        let format = mediaType.hasPrefix("image/") ? String(mediaType.dropFirst(6)) : mediaType
        return (entry, storable, shareable, format)
    }
}

/// Receives the source's response (a hit, a disk hit read from its file, or a fetch's stream) and hands over its
/// whole body once, or why not. Thread-safe: its calls come from whichever queue answers the source request.
final class SourceCollector: ResponseSink, @unchecked Sendable {
    struct Source: Sendable {
        var head: HTTPResponseHead
        var body: [UInt8]
    }

    struct Failure: Error, Sendable {
        var status: Int
        var reason: String
        var label: String
    }

    private let lock = NSLock()
    private var head: HTTPResponseHead?
    private var body: [UInt8] = []
    private var reported = false
    private let limit: Int
    private let report: @Sendable (Result<Source, Failure>) -> Void

    init(limit: Int, report: @escaping @Sendable (Result<Source, Failure>) -> Void) {
        self.limit = limit
        self.report = report
    }

    /// Ends the collection with `failure` unless the source was reported already; bytes arriving later are dropped.
    func giveUp(_ failure: Failure) { finish(.failure(failure)) }

    private func finish(_ result: Result<Source, Failure>) {
        let first = lock.withLock { () -> Bool in
            guard !reported else { return false }
            reported = true
            body = []
            return true
        }
        if first { report(result) }
    }

    private func tooLarge(_ count: Int) -> Failure {
        Failure(status: 413, reason: "the source is over transform-max-source-bytes (\(limit) bytes; at least \(count) arrived)", label: "source_bytes")
    }

    func head(_ head: HTTPResponseHead, bodyLength: Int?) {
        if let bodyLength, bodyLength > limit { return finish(.failure(tooLarge(bodyLength))) }
        lock.withLock { self.head = head }
    }

    func body(_ chunk: [UInt8]) {
        let over: Int? = lock.withLock {
            guard !reported else { return nil }
            if body.isEmpty { body = chunk } else { body += chunk }
            return body.count > limit ? body.count : nil
        }
        if let over { finish(.failure(tooLarge(over))) }
    }

    func end() {
        let result: Result<Source, Failure>? = lock.withLock {
            guard !reported, let head else { return nil }
            return .success(Source(head: head, body: body))
        }
        if let result { finish(result) } else { finish(.failure(Failure(status: 502, reason: "the source response ended without a head", label: "source_failed"))) }
    }

    func respond(_ head: HTTPResponseHead, body: [UInt8]) {
        if head.status >= 400 || head.status < 200 {
            let text = String(decoding: body.prefix(300), as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
            // The cache refused the source's type: an SVG is a transform limit (422 naming it), others a bad source.
            if head.status == 502 && text.hasPrefix("upstream sent image/svg+xml") {
                return finish(.failure(Failure(status: 422, reason: "SVG sources are refused (transform-allow-svg, and allow-svg for the source itself, are off)", label: "svg")))
            }
            if head.status != 404 && head.status != 410 {
                return finish(.failure(Failure(status: head.status == 413 ? 413 : 502,
                                               reason: "the source could not be fetched (\(head.status)\(text.isEmpty ? "" : ": " + text))",
                                               label: "source_failed")))
            }
        }
        if body.count > limit { return finish(.failure(tooLarge(body.count))) }
        finish(.success(Source(head: head, body: body)))
    }

    func respond(_ head: SerializedResponseHead, extra: HTTPHeaders, body: [UInt8]) {
        var full = HTTPResponseHead(status: head.status, reason: head.reason, headers: head.headers)
        for field in extra { full.headers.add(field.name, field.value) }
        respond(full, body: body)
    }

    func respond(_ head: SerializedResponseHead, extra: HTTPHeaders, file: FileBody) {
        guard file.length <= limit else { return finish(.failure(tooLarge(file.length))) }
        guard let bytes = file.readAll() else {
            return finish(.failure(Failure(status: 502, reason: "the stored source could not be read from disk", label: "source_failed")))
        }
        respond(head, extra: extra, body: bytes)
    }

    func respond(_ head: SerializedResponseHead, extra: HTTPHeaders, part: ArraySlice<UInt8>) {
        respond(head, extra: extra, body: Array(part))
    }

    func abort() {
        finish(.failure(Failure(status: 502, reason: "the source transfer broke off", label: "source_failed")))
    }

    func onCancel(_ callback: @escaping @Sendable () -> Void) {}
}
