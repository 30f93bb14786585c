// RenditionJob: runs one rendition job. Its decisions are RenditionMachine's (a value); this class carries out the
// actions the machine returns, with the parts that are not values: the clients' response sinks, the source's
// collector, the deadline timer, the pool's job, the store, metrics and the log. Confined to the proxy queue
// (`context.queue`); the collector, the timer and the pool's callbacks hop there. It holds no reference to the proxy
// or its table: what it needs is its `FetchContext`, the pool, and its `Handoff` (callbacks from Renditions).
// Lifetime: the in-flight table holds the job from its start to `.finish` (Renditions never replaces a job in it);
// every callback (collector, deadline, pool, a client's cancel, the lease's keep-alive) holds it weakly, but for a
// fleet lookup in flight, which holds it until it answers (within fleet.deadline), so that a lease won after every
// client left is handed back rather than left to expire.
//
// The fleet (RenditionMachine's fleet stage): lookups and polls go to the fleet tier (FleetFill decodes and counts
// the answers, as for a fetch); a lease won is kept in `lease` until the machine stores, marks or releases it (one
// still held at `.finish` is released). The tier refreshes a held lease only while its holder reports progress: the
// job reports the source's bytes as they arrive (the collector), the source's arrival, a worker taking the transform,
// and, while the machine says so (`keepsLeaseAlive`: waiting for the source, which may itself wait on another host's
// fill for up to fleet.wait, or the transform with the pool), every third of fleet.lease (`keepAlive`): the source
// wait is bounded by transform-source-timeout, a transform by transform-queue-timeout and its own timeout, so a
// lease outlives them only as long as they last; a host that hangs or dies stops reporting, and its lease lapses.
// Purges: a made rendition is checked against FleetPurges (the machine's `purged`) by its source's response time.

internal import ImageCacheSystem
internal import ImageCacheHTTP
internal import ImageCacheServer
internal import ImageCacheStatus
internal import ImageCacheStore
internal import ImageCacheTransform
internal import ImageCacheFleet
internal import Dispatch
internal import Logging
internal import Foundation

final class RenditionJob: InFlightWork, @unchecked Sendable {
    private struct Client {
        let sink: any ResponseSink
        let request: ClientRequest
    }

    /// The fleet tier's limits the runner applies (the machine's rules carry the rest).
    struct FleetLimits {
        /// fleet.item-max: a rendition larger than this leaves a pass marker instead.
        var itemMaxBytes: Int
        /// fleet.lease, seconds: the keep-alive reports progress every third of it while the pool has the transform.
        var leaseSeconds: Int
    }

    /// What the job asks of its owner.
    struct Handoff {
        /// Serves the source request through the cache.
        let fetchSource: @Sendable (ClientRequest, any ResponseSink) -> Void
        /// The job is over: out of the table, its admission slot freed.
        let finished: (RenditionJob) -> Void
        /// Clients that may not share the result ask again, each on its own.
        let redispatch: (RenditionJob, [(RenditionMachine.Waiter, any ResponseSink)]) -> Void
    }

    // MARK: immutable
    let spec: TransformSpec
    let maxSourceBytes: Int
    private let pool: TransformPool
    private let context: FetchContext
    private let handoff: Handoff
    private let fleetLimits: FleetLimits
    let key: CacheKey
    let rendition: RenditionRequest
    /// When the job began (for the list of work in flight).
    private let begun = ContinuousClock.now

    // MARK: owned by context.queue
    private var machine: RenditionMachine
    /// The clients waiting, by id: their sinks and requests (the machine knows them by id).
    private var clients: [Int: Client] = [:]
    /// The store took the entry; `stored` is reported once the actions that came with it are carried out.
    private var storeDone = false
    private var collector: SourceCollector?
    private var deadline: DispatchWorkItem?
    /// The pool's ticket while the transform may still be in its queue.
    private var ticket: UInt64?
    // The fleet: the lease this job holds for its key (won, not yet stored, marked or released), when the first lookup
    // went out (fleet.wait is counted from it), whether a lookup answered "wait" (a lease won after is a takeover),
    // and the keep-alive timer while the pool has the transform.
    private var lease: FleetLease?
    private var fleetAsked: ContinuousClock.Instant?
    private var fleetWaited = false
    /// FleetPurges.serial when the job started: a purge of the source's URL after that means its rendition is kept
    /// nowhere.
    private var purgeSerial: UInt64 = 0
    private var keepAlive: DispatchWorkItem?

    init(_ machine: RenditionMachine, spec: TransformSpec, maxSourceBytes: Int, pool: TransformPool, context: FetchContext,
         handoff: Handoff, fleetLimits: FleetLimits) {
        self.fleetLimits = fleetLimits
        self.machine = machine
        self.spec = spec
        self.maxSourceBytes = maxSourceBytes
        self.pool = pool
        self.context = context
        self.handoff = handoff
        key = machine.key
        rendition = machine.rendition
    }

    private var queue: DispatchQueue { context.queue }

    var summary: DaemonStats.InFlightFetch {
        dispatchPrecondition(condition: .onQueue(queue))
        return DaemonStats.InFlightFetch(url: key.description, kind: "transform", waiters: machine.waiters.count, receivedBytes: 0,
                                         seconds: (ContinuousClock.now - begun).inSeconds)
    }

    // MARK: events

    func start() {
        dispatchPrecondition(condition: .onQueue(queue))
        purgeSerial = context.fleetPurges.serial
        run(machine.start())
    }

    /// A client waits for the rendition; it leaves when its connection does.
    func attach(id: Int, request: ClientRequest, sink: any ResponseSink, collapsed: Bool) {
        dispatchPrecondition(condition: .onQueue(queue))
        clients[id] = Client(sink: sink, request: request)
        weak let job = self
        sink.onCancel { [queue] in queue.async { job?.detach(id) } }
        run(machine.attach(id, request: request, collapsed: collapsed))
        // (A client that came while the entry is stored was answered at once: it waits on nothing.)
        if machine.waiters.contains(where: { $0.id == id }) {
            context.events?(.waiterAttached(key: key, waiters: machine.waiters.count))
        }
    }

    private func detach(_ id: Int) {
        dispatchPrecondition(condition: .onQueue(queue))
        guard clients.removeValue(forKey: id) != nil else { return }
        run(machine.detach(id))
    }

    // MARK: actions

    private func run(_ actions: [RenditionMachine.Action]) {
        for action in actions { perform(action) }
        if storeDone {
            // After the clients were answered: the job leaves the table once they have the entry.
            storeDone = false
            run(machine.stored())
        }
    }

    private func endLease(_ end: FleetFill.LeaseEnd) {
        FleetFill.end(&lease, end, itemMaxBytes: fleetLimits.itemMaxBytes, passSeconds: machine.rules.fleet?.passSeconds ?? 60,
                      startSerial: purgeSerial, context: context)
    }

    private func perform(_ action: RenditionMachine.Action) {
        switch action {
        case let .askFleet(after):
            askFleet(after: after)
        case let .fleetStore(entry, ttl): endLease(.store(entry, ttl: ttl))
        case let .fleetPass(reason, ttl): endLease(.pass(reason: reason, ttl: ttl))
        case .fleetRelease: endLease(.release)
        case let .fetchSource(request):
            weak let job = self
            // The source's bytes arriving keep a lease this job holds alive (any thread: an atomic store).
            var progress: (@Sendable () -> Void)?
            if let lease { progress = { lease.progressed() } }
            let collector = SourceCollector(limit: maxSourceBytes, progress: progress) { [queue] result in
                queue.async { job?.sourceArrived(result) }
            }
            self.collector = collector
            armKeepAlive()
            handoff.fetchSource(request, collector)
        case let .armDeadline(seconds):
            weak let job = self
            let timer = DispatchWorkItem { job?.deadlinePassed() }
            deadline = timer
            queue.asyncAfter(deadline: .now() + seconds, execute: timer)
        case .cancelDeadline:
            deadline?.cancel()
            deadline = nil
        case .dropSource:
            collector?.drop()
            collector = nil
        case .abandonSource:
            collector?.abandon()
            collector = nil
        case let .submit(source):
            lease?.progressed()
            armKeepAlive()
            weak let job = self
            let events = context.events, key = key
            ticket = pool.submit(TransformPool.Job(source: source, spec: spec, started: { [queue] in
                events?(.transformStarting(key: key))
                queue.async { job?.workerStarted() }
            }) { [queue] result, seconds in
                queue.async { job?.transformed(result, seconds: seconds) }
            })
        case .withdraw:
            if let ticket, pool.withdraw(ticket) {
                self.ticket = nil
                run(machine.withdrawn())
            }
        case let .store(entry):
            context.store.store(entry)
            storeDone = true
        case let .refresh(entry):
            context.store.refresh(entry, bodyInFile: false)
            storeDone = true
        case let .send(entry, id, outcome):
            guard let client = clients.removeValue(forKey: id) else { return }
            StoredResponse.send(entry, to: client.sink, request: client.request, outcome: outcome, now: context.now())
        case let .fail(ids, status, reason):
            for id in ids { clients.removeValue(forKey: id)?.sink.fail(status: status, reason: reason) }
        case let .redispatch(waiters):
            let handed = waiters.compactMap { waiter in clients.removeValue(forKey: waiter.id).map { (waiter, $0.sink) } }
            handoff.redispatch(self, handed)
        case let .count(format, result, seconds, bytesIn, bytesOut):
            context.metrics.transformed(format: format, result: result, seconds: seconds, bytesIn: bytesIn, bytesOut: bytesOut)
        case let .report(status, reason, label):
            context.logger.notice("\(status) transform \(machine.leader.head.target.prefix(300)): \(reason)")
            context.metrics.error("transform_\(label)", status: status, reason: reason, target: machine.leader.head.target)
        case let .log(level, message):
            context.logger.log(level: level, "\(message)")
        case .finish:
            deadline?.cancel()
            deadline = nil
            keepAlive?.cancel()
            keepAlive = nil
            // (The machine marked or released a lease it held; one left here would only wait out its time.)
            endLease(.release)
            handoff.finished(self)
            context.events?(.fetchFinished(key: key))
        }
    }

    /// Looks the key up in the fleet tier, now or after `delay` seconds (a poll, jittered by up to a fifth so that
    /// hosts waiting on one lease spread their polls). The lookup holds the job until it answers.
    private func askFleet(after delay: Double) {
        if fleetAsked == nil { fleetAsked = .now }
        let fleetKey = FleetEnvelope.key(for: key)
        let ask: @Sendable () -> Void = { [self] in
            guard !machine.isDone else { return }
            context.fleet.lookup(fleetKey) { [queue] answer in
                queue.async { self.fleetAnswered(answer) }
            }
        }
        if delay <= 0 { return ask() }
        queue.asyncAfter(deadline: .now() + delay * Double.random(in: 0.8...1.2), execute: ask)
    }

    /// The fleet's answer, decoded and verified, for the machine.
    private func fleetAnswered(_ lookup: FleetLookup) {
        dispatchPrecondition(condition: .onQueue(queue))
        let (answer, won) = FleetFill.answer(lookup, key: key, policy: machine.rules.freshness, waitedBefore: fleetWaited,
                                             context: context)
        if let won { lease = won }
        switch answer {
        case .wait:
            if !fleetWaited { context.events?(.fleetWaiting(key: key)) }
            fleetWaited = true
        case let .damaged(reason):
            context.metrics.error("fleet_damaged", status: nil, reason: reason, target: key.description)
        default:
            break
        }
        let waited = fleetAsked.map { (ContinuousClock.now - $0).inSeconds } ?? 0
        run(machine.fleetAnswered(answer, waited: waited, now: context.now()))
    }

    /// While the machine keeps the lease it holds alive (its source awaited, or the transform with the pool), reports
    /// progress every third of fleet.lease.
    private func armKeepAlive() {
        guard lease != nil, keepAlive == nil else { return }
        weak let job = self
        let timer = DispatchWorkItem { job?.keepAliveFired() }
        keepAlive = timer
        queue.asyncAfter(deadline: .now() + Double(fleetLimits.leaseSeconds) / 3, execute: timer)
    }

    private func keepAliveFired() {
        dispatchPrecondition(condition: .onQueue(queue))
        keepAlive = nil
        guard let lease, machine.keepsLeaseAlive else { return }
        lease.progressed()
        armKeepAlive()
    }

    private func sourceArrived(_ result: Result<RenditionMachine.Source, RenditionMachine.SourceFailure>) {
        dispatchPrecondition(condition: .onQueue(queue))
        lease?.progressed()
        collector = nil
        run(machine.sourceArrived(result, now: context.now(), purged: isPurged))
    }

    private func deadlinePassed() {
        dispatchPrecondition(condition: .onQueue(queue))
        deadline = nil
        run(machine.deadline(now: context.now()))
    }

    private func workerStarted() {
        dispatchPrecondition(condition: .onQueue(queue))
        lease?.progressed()
        ticket = nil
        run(machine.workerStarted())
    }

    private func transformed(_ result: Result<TransformedImage, TransformFailure>, seconds: Double) {
        dispatchPrecondition(condition: .onQueue(queue))
        ticket = nil
        run(machine.transformed(result, seconds: seconds, now: context.now(), purged: isPurged))
    }

    /// Whether the source's URL was purged since this job started (in flight across a purge, with a fleet or
    /// without: FleetPurges.purgedSince). A serial, not the source's time against the purges this host knows: a source
    /// it holds was not removed by any of them, and a time test would also refuse, at every request, renditions of
    /// sources older than a purge of everything or than the purges it had to forget (FleetPurges.forgottenThrough).
    /// Other hosts judge the rendition by its time (its source's response time) when they read it from the fleet.
    private func isPurged(_ entry: CacheEntry) -> Bool {
        dispatchPrecondition(condition: .onQueue(queue))
        return context.fleetPurges.purgedSince(purgeSerial, url: entry.key.url.string)
    }
}
