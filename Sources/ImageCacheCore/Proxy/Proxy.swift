// Proxy: the coordinator. Every request flows through `handle`:
//
//   connection loop                          proxy queue                           curl thread
//   ----------------                         -----------                           -----------
//   proxy-allow (forward and CONNECT requests: ProxyAllow.swift) -> route (forward | fetch | reverse | admin)
//   store.lookupInMemory(key, request's Vary fields) ── fresh ──> StoredResponse.send (no hop, body shared, not copied)
//        │ (memory miss: the disk, Proxy+Disk.swift)
//        │ stale + max-stale ──> served STALE
//        │ only-if-cached ──> 504
//        └─ miss / stale / vary-miss / bypass ──> coalescer.dispatch (Coalescer.swift)
//                                              fetch in flight? ── attach as waiter (collapsed)
//                                              memory re-check (an entry may have landed)
//                                              new Fetch ──────────────────────────> origin.fetch
//                                              Fetch.receive(event) <─── queue.async ─ head, body, end, failed
//                                                 FetchMachine decides; Fetch carries out its actions: heads and
//                                                 chunks fan out to every waiter's sink, one task per event loop
//                                                 for the sinks on it; the entry is stored first, then the
//                                                 waiters are ended, then the fetch is finished.
//
// Ownership: `store` (TieredStore: memory guards itself, disk owns its queues); `coalescer` and every `Fetch` are
// confined to `queue` (imagecached.proxy) and hold no reference to the proxy; `origin` is thread-safe; the
// reloadable settings (`configuration`, `contentPolicy`, `originRoutes`, ...) are one immutable `ProxySettings` in a
// `SettingsCell`, swapped whole on reload and read once per request (Proxy+Settings.swift); `metrics` are atomics;
// the interception generation (the local CA, its TLS context and leaves) is an `InterceptionCell`, swapped whole when
// the CA changes, its leaves minted on the certificates queue (Intercept/).

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
internal import Synchronization
package import ImageCacheFleet
public import Logging

/// Answers requests from the cache, or through one coalesced upstream fetch per cache key.
public final class Proxy: RequestHandler, @unchecked Sendable {
    // MARK: immutable after init
    let origin: any Origin
    let logger: Logger
    /// Wall-clock time source (HTTP dates are wall-clock); injected by tests.
    let now: @Sendable () -> Date
    /// Receives coalescing events (for metrics and tests). Called on `queue`; must return quickly.
    let events: (@Sendable (ProxyEvent) -> Void)?
    /// This daemon's Via token (sent upstream; a request carrying it looped back: 508).
    let loopGuard: LoopGuard
    /// Seconds between two samples of the status page's history (the Daemon's timer period).
    public let historyInterval: Double

    // MARK: shared, guarded by its own lock
    /// The settings in force (configuration, content policy, origin routes); replaced whole by `apply` (reload).
    let settingsCell: SettingsCell
    /// Counters for /_imagecached/metrics and /stats (atomics).
    public let metrics: ProxyMetrics
    /// Both tiers, behind the rules that span them (TieredStore.swift).
    public let store: TieredStore
    /// The fleet's shared tier on memcached (ImageCacheFleet): its thread runs once fleet.servers names a server
    /// (`fleetStarted`), at start or by a reload. Owns its own thread and sockets.
    package let fleet: FleetTier
    /// The fleet's purge log (FleetPurges.swift). Confined to `queue`.
    let fleetPurges: FleetPurges
    private let fleetStarted = Atomic<Bool>(false)
    /// The interception generation in force (the local CA, its server context, its leaves), swapped whole when the
    /// daemon hands over another CA (InterceptionCell.swift).
    package let interception: InterceptionCell
    public var memory: MemoryCache { store.memory }
    /// The disk tier, if on; it owns its queue.
    public var disk: DiskCache? { store.disk }

    // MARK: owned by `queue`
    package let queue = DispatchQueue(label: "imagecached.proxy")
    /// The fetches and rendition jobs in flight, one table (InFlightTable.swift). Confined to `queue`.
    let inFlight: InFlightTable
    /// Who joins which fetch (Coalescer.swift). Confined to `queue`.
    let coalescer: Coalescer
    /// The renditions being made (Renditions.swift). Confined to `queue`; its pool runs the transforms.
    let renditions: Renditions
    /// The time series the status page draws (StatsHistory.swift, Proxy+Status.swift). Confined to `queue`.
    var history: StatsHistory
    /// Transform workers (for the start line and stats).
    public var transformWorkers: Int { renditions.pool.workers }

    public init(configuration: Configuration, origin: any Origin, disk: DiskCache? = nil, logger: Logger,
                now: @escaping @Sendable () -> Date = { Date() }, events: (@Sendable (ProxyEvent) -> Void)? = nil,
                loopGuard: LoopGuard = LoopGuard()) {
        settingsCell = SettingsCell(ProxySettings(configuration))
        metrics = ProxyMetrics(now: now)
        historyInterval = configuration.historyIntervalSeconds
        history = StatsHistory(interval: historyInterval,
                               capacity: min(max(configuration.historyCapacity, 1), StatsHistory.maximumCapacity), start: now())
        self.loopGuard = loopGuard
        self.events = events
        self.origin = origin
        self.logger = logger
        self.now = now
        // Leaves are judged by clients' clocks: minted on the wall clock, whatever `now` tests give the cache.
        interception = InterceptionCell(now: { Date() })
        store = TieredStore(
            memory: MemoryCache(limitBytes: configuration.memoryLimitBytes, countLimit: configuration.memoryCountLimit,
                                objectLimitBytes: configuration.effectiveMemoryObjectLimitBytes,
                                variantLimit: configuration.maxVariants),
            disk: disk)
        // The tier's breaker changes reach the event stream (tests of a server's recovery wait on them), on `queue`.
        fleet = FleetTier(settings: configuration.fleet, logger: logger, observer: Self.fleetObserver(events, queue: queue))
        fleetPurges = FleetPurges(fleet: fleet, store: store, logger: logger, now: now, events: events, queue: queue)
        let context = FetchContext(origin: origin, fleet: fleet, fleetPurges: fleetPurges, store: store, metrics: metrics, logger: logger, events: events,
                                   via: loopGuard.viaValue, now: now, queue: queue)
        let table = InFlightTable(queue: queue)
        inFlight = table
        coalescer = Coalescer(context: context, settings: settingsCell, table: table)
        let transform = configuration.transform
        var unavailable: String?
        do {
            try VipsRuntime.start(threadsPerImage: 1, allowSVG: transform.limits.allowSVG)
        } catch {
            unavailable = "image transforms are unavailable: libvips did not start (\(error))"
            logger.error("\(unavailable!)")
        }
        renditions = Renditions(
            pool: TransformPool(workers: transform.workers > 0 ? transform.workers : Proxy.defaultTransformWorkers(),
                                queueLimit: transform.queueLimit, queueTimeout: .milliseconds(Int(transform.queueTimeoutSeconds * 1000))),
            pixelCache: PixelCache(limitBytes: transform.pixelCacheBytes), context: context, settings: settingsCell, table: table,
            unavailable: unavailable)
        renditions.fetchSource = { [weak self] request, sink in self?.serve(request, sink: sink) }
        startFleetIfConfigured(configuration.fleet)
    }

    /// What the fleet tier's thread reports that the event stream carries: its breakers' changes, hopped to `queue`.
    private static func fleetObserver(_ events: (@Sendable (ProxyEvent) -> Void)?, queue: DispatchQueue)
        -> (@Sendable (FleetEvent) -> Void)? {
        guard let events else { return nil }
        return { event in
            guard case let .serverState(server, state) = event else { return }
            queue.async { events(.fleetServerState(server: server, state: state)) }
        }
    }

    /// Starts the fleet tier's thread the first time fleet.servers names a server.
    func startFleetIfConfigured(_ settings: FleetSettings) {
        guard settings.isEnabled, fleetStarted.compareExchange(expected: false, desired: true, ordering: .relaxed).exchanged
        else { return }
        fleet.start()
        queue.async { [fleetPurges] in fleetPurges.start() }
        logger.notice("fleet tier: \(settings.servers.count) memcached server(s): \(settings.servers.map(\.description).joined(separator: ", "))")
    }

    /// Stops the fleet tier's thread (pending operations end unavailable).
    package func stopFleet() {
        guard fleetStarted.load(ordering: .relaxed) else { return }
        queue.sync { fleetPurges.stop() }
        fleet.shutdown()
    }

    /// Called on the connection's loop thread.
    public func handle(_ request: HTTPRequestHead, body: [UInt8], client: ClientInfo, sink: any ResponseSink) {
        handle(request, body: .bytes(body), client: client, sink: sink)
    }

    /// A request passed through to a configured origin with its body as it arrives (`bodyHandling` said so).
    public func handle(_ request: HTTPRequestHead, streamedBody body: RequestBodyStream, client: ClientInfo, sink: any ResponseSink) {
        handle(request, body: .stream(body), client: client, sink: sink)
    }

    private func handle(_ request: HTTPRequestHead, body: RequestBody, client: ClientInfo, sink: any ResponseSink) {
        let settings = self.settings
        let sink = settings.configuration.accessLog ? AccessLogSink(wrapping: sink, request: request, client: client, logger: logger) : sink
        if loopGuard.carriesOwnVia(request.headers) {
            refuse(sink, status: 508, reason: "request loop: this request already passed through this daemon (Via: \(loopGuard.viaToken))",
                   request: request, client: client)
            return
        }
        if ProxyAllow.isProxyRequest(request), let refusal = settings.proxyAllow.refusal(client) {
            refuse(sink, status: 403, reason: refusal, request: request, client: client)
            return
        }
        let route = Route.resolve(request, origins: settings.originRoutes, signing: settings.signing,
                                  transforms: settings.transformRouting, allowed: settings.allowedSources)
        switch route {
        case let .error(status, reason):
            refuse(sink, status: status, reason: reason, request: request, client: client)
        case let .admin(path, query):
            handleAdmin(request, path: path, query: query, body: body.bytes, client: client, sink: sink, settings: settings)
        case let .transform(target):
            guard PassthroughRules.isCached(request.method) else {
                refuse(sink, status: 405, reason: "method \(request.method) is not allowed on a transform URL (GET and HEAD only)",
                       request: request, client: client, headers: ["Allow": "GET, HEAD"])
                return
            }
            guard body.bytes.isEmpty else {
                refuse(sink, status: 400, reason: "a \(request.method) request must not have a body", request: request, client: client)
                return
            }
            serveTransform(target, head: request, client: client, sink: sink, settings: settings)
        case let .upstream(url, mode, trusted):
            if let refusal = methodRefusal(request, mode: mode, settings: settings) {
                refuse(sink, status: refusal.status, reason: refusal.reason, request: request, client: client,
                       headers: refusal.headers)
                return
            }
            if !PassthroughRules.isCached(request.method) {
                pass(request, body: body, url: url, mode: mode, trusted: trusted, sink: sink, settings: settings)
                return
            }
            guard body.bytes.isEmpty else {
                refuse(sink, status: 400, reason: "a \(request.method) request must not have a body", request: request, client: client)
                return
            }
            serve(ClientRequest(head: request, url: url, mode: mode, trusted: trusted, client: client,
                                fields: settings.requestFields,
                                staleWhileRevalidate: settings.configuration.staleWhileRevalidateSeconds), sink: sink)
        }
    }

    /// A request passed through to its origin (reverse mode, and forward mode under forward-non-images pass) streams
    /// its body there; `POST /_imagecached/prefetch` reads its list whole; any other request that announces a body is
    /// refused as soon as its head is in, with the status its route would answer (400 for a GET or HEAD with a body,
    /// 501 for a method the cache does not take, the route's own error), so no connection holds up to
    /// `server.max-request-body` for nothing. (A forward request from a client outside proxy-allow is refused by
    /// `handle`, which knows the client, before any of its body is read: its connection then closes.)
    /// A client outside proxy-allow is told so first, as `handle` would (never a reason that depends on the settings).
    public func bodyHandling(for request: HTTPRequestHead, client: ClientInfo) -> HTTPParser.BodyHandling {
        if ProxyAllow.isProxyRequest(request), let refusal = settings.proxyAllow.refusal(client) {
            return .refuse(HTTPParser.ParseError(status: 403, reason: refusal))
        }
        return bodyHandling(for: request)
    }

    public func bodyHandling(for request: HTTPRequestHead) -> HTTPParser.BodyHandling {
        let settings = self.settings
        if loopGuard.carriesOwnVia(request.headers) {
            return .refuse(HTTPParser.ParseError(status: 508, reason: "request loop: this request already passed through this daemon (Via: \(loopGuard.viaToken))"))
        }
        switch Route.resolve(request, origins: settings.originRoutes, signing: settings.signing,
                             transforms: settings.transformRouting, allowed: settings.allowedSources) {
        case let .error(status, reason):
            return .refuse(HTTPParser.ParseError(status: status, reason: reason))
        case .transform:
            return .refuse(HTTPParser.ParseError(status: 400, reason: "a transform request takes no request body"))
        case let .admin(path, _):
            if path == "/_imagecached/prefetch" && request.method == "POST" { return .read }
            return .refuse(HTTPParser.ParseError(status: 400, reason: "\(request.method) \(path.prefix(100)) takes no request body"))
        case let .upstream(_, mode, _):
            if let refusal = methodRefusal(request, mode: mode, settings: settings) { return .refuse(refusal) }
            if !PassthroughRules.isCached(request.method) { return .stream }
            return .refuse(HTTPParser.ParseError(status: 400, reason: "a \(request.method) request must not have a body"))
        }
    }

    /// Fetch mode takes GET and HEAD only (501), and so does forward mode under forward-non-images refuse; reverse mode,
    /// and forward mode under forward-non-images pass, pass every method but CONNECT (Route) and TRACE when pass-trace
    /// is off (405). Said once for both places a request is refused: when its body is announced (`bodyHandling`) and
    /// when it is handled.
    private func methodRefusal(_ request: HTTPRequestHead, mode: Route.Mode, settings: ProxySettings) -> HTTPParser.ParseError? {
        if PassthroughRules.isCached(request.method) { return nil }
        switch mode {
        case .reverse:
            break
        case .forward where settings.configuration.forwardNonImages == .pass:
            break
        case .forward:
            return HTTPParser.ParseError(status: 501, reason: "method \(request.method) is not passed through forward mode here (only GET and HEAD: forward-non-images is refuse)",
                                         headers: ["Allow": "GET, HEAD"])
        case .fetch:
            return HTTPParser.ParseError(status: 501, reason: "method \(request.method) is not supported here (only GET and HEAD; reverse and forward modes pass other methods to the origin)",
                                         headers: ["Allow": "GET, HEAD"])
        }
        if request.method == "TRACE" && !settings.configuration.passTrace {
            return HTTPParser.ParseError(status: 405, reason: "TRACE is not passed to the origin (pass-trace is off)",
                                         headers: ["Allow": PassthroughRules.allowedWithoutTrace])
        }
        return nil
    }

    /// Reverse and forward modes: a method the cache does not answer goes to the origin as it is (Passthrough.swift),
    /// judged as the route says (`trusted`: a configured origin; forward mode's is any URL, under the private-network
    /// guard and allowed-sources).
    private func pass(_ request: HTTPRequestHead, body: RequestBody, url: UpstreamURL, mode: Route.Mode, trusted: Bool,
                      sink: any ResponseSink, settings: ProxySettings) {
        switch PassthroughRules.hops(method: request.method, headers: request.headers) {
        case .answerHere:
            answerAsFinalRecipient(request, sink: sink, settings: settings)
        case let .forward(maxForwards):
            let sink = MetricsSink(wrapping: sink, metrics: metrics, isHead: false)
            Passthrough.start(request, body: body, url: url, mode: mode, trusted: trusted, sink: sink, context: coalescer.context,
                              fields: settings.requestFields, policy: settings.freshnessPolicy,
                              writeBuffer: settings.configuration.server.writeBufferBytes, maxForwards: maxForwards)
        }
    }

    /// An OPTIONS or TRACE with Max-Forwards: 0 (RFC 9110 7.6.2): the daemon answers for itself.
    private func answerAsFinalRecipient(_ request: HTTPRequestHead, sink: any ResponseSink, settings: ProxySettings) {
        metrics.served(.pass)
        if request.method == "OPTIONS" {
            let allow = PassthroughRules.allowedWithoutTrace + (settings.configuration.passTrace ? ", TRACE" : "")
            sink.respond(HTTPResponseHead(status: 200, headers: ["Allow": allow, "Cache-Control": "no-store"]), body: [])
            return
        }
        var echo = "\(request.method) \(request.target) HTTP/1.1\r\n"
        for field in request.headers where !PassthroughRules.notEchoed.contains(where: { $0.equalsIgnoringASCIICase(field.name) }) {
            echo += "\(field.name): \(field.value)\r\n"
        }
        echo += "\r\n"
        sink.respond(HTTPResponseHead(status: 200, headers: ["Content-Type": "message/http", "Cache-Control": "no-store",
                                                             "X-Content-Type-Options": "nosniff"]),
                     body: Array(echo.utf8))
    }

    /// The cache lookup, on the connection's loop thread. A fresh hit is answered here without a queue hop.
    func serve(_ request: ClientRequest, sink: any ResponseSink) {
        let key = request.key
        if let decision = request.decisionBeforeLookup {
            act(on: decision, stored: nil, request: request, key: key, sink: sink, now: now(), tier: nil)
            return
        }
        var removals: UInt64 = 0
        let found = store.lookupInMemory(key, requestFields: request.forwardedHeaders, removals: &removals)
        if found.entry == nil {
            let removals = removals, otherVariants = found.otherVariants
            // Small bodies the memory tier would admit are read into memory; the rest are sent from their files
            // (from a kept descriptor: answered on this queue, without a hop).
            let asked = store.lookupOnDisk(key, requestFields: request.forwardedHeaders) { result in
                self.diskAnswered(result, request: request, key: key, sink: sink, removalsSeen: removals,
                                  otherVariants: otherVariants)
            }
            if asked { return }
        }
        let time = now()
        let decision = CacheDecision.decide(stored: found.entry, otherVariants: found.otherVariants,
                                            request: request.cacheControl, now: time,
                                            defaultStaleWhileRevalidate: request.staleWhileRevalidate)
        act(on: decision, stored: found.entry, request: request, key: key, sink: sink, now: time, tier: nil)
    }

    /// Carries out a decision made on the connection's loop (memory) or the disk's read queue (disk, `tier` "disk"):
    /// serve the stored variant, refuse, or hand the request to the proxy queue (`probe`: the disk's answer, so a fetch
    /// starts from it instead of reading the disk again).
    func act(on decision: CacheDecision, stored: CacheEntry?, request: ClientRequest, key: CacheKey, sink: any ResponseSink,
             now time: Date, tier: String?, file: FileBody? = nil, probe: DiskProbe = .notAsked) {
        switch decision {
        case .serve:
            guard let stored, let outcome = decision.servedOutcome(tier: tier)
            else { preconditionFailure("a decision to serve needs a stored variant") }
            let bodyBytes = StoredResponse.send(stored, to: sink, request: request, outcome: outcome, now: time, file: file)
            countHit(stored, request: request, outcome: outcome.served, bodyBytes: bodyBytes)
            if decision.revalidatesInBackground {
                let bodyInFile = file != nil
                if let rendition = request.rendition {
                    queue.async { self.renditions.refreshInBackground(stored, request: request, rendition: rendition, key: key) }
                } else {
                    queue.async { self.coalescer.revalidateInBackground(stored, bodyInFile: bodyInFile, request: request, key: key) }
                }
            }
        case let .refuse(status, reason):
            refuse(sink, status: status, reason: reason, request: request.head, client: request.client)
        case let .forward(reason, _):
            let sink = countingSink(sink, request: request)
            if let rendition = request.rendition {
                queue.async { self.renditions.dispatch(request, rendition: rendition, key: key, sink: sink, stale: stored) }
                return
            }
            queue.async { self.coalescer.dispatch(request, key: key, sink: sink, reason: reason, disk: probe) }
        }
    }

    /// `transform-workers` 0: one per CPU this process may use: its affinity mask (as the event loops count them),
    /// lowered by a cgroup v2 CPU quota (cpu.max) when one is set; at least 1.
    static func defaultTransformWorkers() -> Int {
        var count = allowedCPUCount() ?? ProcessInfo.processInfo.activeProcessorCount
        if let quota = try? String(contentsOfFile: "/sys/fs/cgroup/cpu.max", encoding: .utf8) {
            let parts = quota.split(separator: " ").map { $0.trimmingCharacters(in: .whitespacesAndNewlines) }
            if parts.count == 2, let limit = Double(parts[0]), let period = Double(parts[1]), period > 0 {
                count = min(count, Int((limit / period).rounded(.up)))
            }
        }
        return max(1, count)
    }

    /// A clear error: status, one-line reason in the body and the log.
    func refuse(_ sink: any ResponseSink, status: Int, reason: String, request: HTTPRequestHead, client: ClientInfo,
                headers: HTTPHeaders = HTTPHeaders()) {
        logger.notice("\(status) \(request.method) \(request.target.prefix(500)) from \(client.address): \(reason)")
        // A counting sink (MetricsSink, the proxy queue's) counts the answer itself: counted once either way.
        if !(sink is MetricsSink) { metrics.served(.error) }
        metrics.error("refused_\(status)", status: status, reason: reason, target: request.target)
        sink.fail(status: status, reason: reason, headers: headers)
    }

    // MARK: proxy queue

    /// Waiting fetches for tests and stats. Blocks until the proxy queue answers; never call it on a request path.
    public var fetchesInFlight: Int { queue.sync { inFlight.fetchCount } }
}
