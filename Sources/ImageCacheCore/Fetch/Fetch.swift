// Fetch: runs one upstream fetch. Its decisions are FetchMachine's (a value: what happens to the waiters, what is
// stored, when the transfer starts or stops); this class carries out the actions the machine returns, with the
// parts that are not values: the waiters' response sinks, the upstream transfer, the tiers, metrics and the
// backpressure that paces the transfer to its clients. Confined to the proxy queue (`context.queue`); events from the
// origin and the disk arrive with `queue.async`. It holds no reference to the proxy: what it needs is its
// `FetchContext`, and its `Handoff` (callbacks from the Coalescer) takes the waiters it sends elsewhere and is told
// when it closes: the fetch does not know its table.
//
// Data model
//   machine   the fetch's state (FetchMachine.State): disk stage, waiting for the head, checking, streaming, finished;
//             the waiters in the order they came (ids, requests).
//   clients   per waiter id: its sink and the body bytes handed to it (its backlog is that minus what it has taken).
//             Every chunk is handed to each sink as the same [UInt8] array (shared storage, not copied).
//   fan-out   the sink calls of one event's actions are gathered per event loop and posted as one task to each loop
//             (`deliver`, `postDeliveries`): a chunk or a whole response for 200 clients on 2 loops is 2 hops, not
//             200; on its loop each call acts at once, in the order made.
//   transfer  the upstream transfer of the current `generation` (a restart after a 304, or the disk read of a large
//             copy confirmed by a 304 or kept by stale-if-error, bumps it: events of an earlier transfer are ignored).
//
// Backpressure (`applyBackpressure`, after every upstream event while streaming): the fetch counts the bytes it keeps
// alive in the daemon-wide in-flight total (its kept body while it may be stored, else what its slowest client has
// not taken). While that total is over `in-flight-limit`, a body kept to be stored is let go (the machine's
// `bodiesOverBudget`: streamed, not stored), and when a client is more than `server.write-buffer` behind, the
// upstream transfer pauses until every client has taken all but half a buffer of what it was handed (or gone), or
// the total is under the limit again. The slowest client sets the pace; one that takes nothing is closed by
// server.write-timeout as any client is. Between libcurl and the fetch at most a write buffer is in transit (the
// transfer's delivery window). A fetch keeps the settings in force when it started.

internal import ImageCacheSystem
internal import ImageCacheHTTP
internal import ImageCacheStatus
internal import ImageCacheConfig
internal import ImageCacheServer
internal import ImageCacheStore
internal import ImageCacheUpstream
internal import ImageCacheFleet
internal import Dispatch
internal import Foundation
internal import Logging
internal import Synchronization

final class Fetch: InFlightWork, @unchecked Sendable {
    /// Where the fetch sends waiters it does not serve, and says it takes no more (set by the coalescer). The two
    /// redispatches return false when nobody takes the waiters any more (the daemon is stopping).
    struct Handoff {
        let closed: (Fetch) -> Void
        let toVariants: ([(FetchMachine.Waiter, any ResponseSink)], HTTPResponseHead, CacheKey) -> Bool
        let alone: ([(FetchMachine.Waiter, any ResponseSink)], CacheKey) -> Bool
    }

    /// A waiter's connection, as the runner knows it.
    private struct Client {
        let sink: any ResponseSink
        let request: ClientRequest
        /// Body bytes handed to `sink` so far.
        var sentBytes = 0
    }

    // MARK: immutable
    let context: FetchContext
    let settings: FetchSettings
    /// Its place in the in-flight table.
    let fetchKey: FetchKey
    /// Takes the waiters this fetch sends to other fetches, and removes it from its table when it closes.
    private let handoff: Handoff

    // MARK: owned by context.queue
    private var machine: FetchMachine
    private var clients: [Int: Client] = [:]
    /// The sink calls of the actions being run, per event loop, posted when they are done (`postDeliveries`).
    private var deliveries: [(executor: any SinkExecutor, calls: [@Sendable () -> Void])] = []
    private var transfer: (any UpstreamTransfer)?
    /// Counts transfers started (and disk reads that replace one); events of an earlier one are ignored.
    private var generation = 0
    /// The upstream transfer is paused for backpressure.
    private var paused = false
    /// Bytes this fetch counts in `metrics.inFlightBytes` now.
    private var accountedBytes = 0
    // Metrics: when the current transfer started (nil once counted), its status and bytes; clients attached in all.
    private var transferStarted: ContinuousClock.Instant?
    private var transferStatus: Int?
    private var transferBytes = 0
    private var attachedCount = 0
    /// When the fetch began (for the status page's list of fetches in flight).
    private let begun = ContinuousClock.now
    // The fleet: the lease this host holds for the key (won, not yet stored, marked or released), and when the first
    // lookup went out (fleet.wait is counted from it).
    private var lease: FleetLease?
    private var fleetAsked: ContinuousClock.Instant?
    /// A lookup of this fetch answered "wait" (a lease won after that is a takeover).
    private var fleetWaited = false
    /// FleetPurges.serial when the fetch started: a purge of its URL after that means what it brings is not kept.
    private var purgeSerial: UInt64 = 0

    init(_ machine: FetchMachine, settings: FetchSettings, context: FetchContext, handoff: Handoff) {
        self.machine = machine
        self.settings = settings
        self.context = context
        self.handoff = handoff
        fetchKey = FetchKey(key: machine.key, trusted: machine.leader.trusted, variant: machine.variant)
    }

    private var key: CacheKey { machine.key }
    private var queue: DispatchQueue { context.queue }
    /// Still taking new waiters.
    var joinable: Bool { machine.joinable }

    /// What the stats document lists for it: the URL, the clients waiting, the body bytes received, its age.
    var summary: DaemonStats.InFlightFetch {
        dispatchPrecondition(condition: .onQueue(queue))
        return DaemonStats.InFlightFetch(url: key.description, kind: "fetch", waiters: clients.count, receivedBytes: transferBytes,
                                         seconds: (ContinuousClock.now - begun).inSeconds)
    }

    // MARK: events from the coalescer

    /// Adds a client. A late one gets the head and the body so far at once.
    func attach(id: Int, request: ClientRequest, sink: any ResponseSink, collapsed: Bool) {
        dispatchPrecondition(condition: .onQueue(queue))
        clients[id] = Client(sink: sink, request: request)
        attachedCount += 1
        weak let weakSelf = self
        sink.onCancel { [queue] in
            queue.async { weakSelf?.detach(id) }
        }
        run(machine.attach(FetchMachine.Waiter(id: id, request: request), collapsed: collapsed))
        // A late joiner may have been handed kept bytes (or ended with its part): the in-flight count follows.
        applyBackpressure()
    }

    /// Starts upstream, or from the disk's answer when the caller already has it.
    func start(disk probe: DiskProbe) {
        dispatchPrecondition(condition: .onQueue(queue))
        purgeSerial = context.fleetPurges.serial
        if case let .answered(result, removalsSeen) = probe {
            run(machine.start(fromDisk: result, removalsSeen: removalsSeen, now: context.now()))
        } else {
            run(machine.start())
        }
    }

    /// A client went away.
    private func detach(_ id: Int) {
        dispatchPrecondition(condition: .onQueue(queue))
        guard clients.removeValue(forKey: id) != nil else { return }
        run(machine.detach(id))
    }

    // MARK: events from the origin and the disk

    private func receive(_ event: UpstreamEvent, generation: Int) {
        dispatchPrecondition(condition: .onQueue(queue))
        guard generation == self.generation else { return }
        switch event {
        case let .head(head, _, _): transferStatus = head.status
        case let .body(chunk) where transferStarted != nil:
            transferBytes += chunk.count
            lease?.progressed()
            context.metrics.upstreamBytes.add(chunk.count)
        case .end: countTransfer(result: transferStatus == 304 ? "not_modified" : "ok")
        case let .failed(error): countTransfer(result: error.kind)
        default: break
        }
        if machine.isFinished { return }
        switch event {
        case let .interim(head): run(machine.receiveInterim(head))
        case let .head(head, url, redirects): run(machine.receiveHead(head, url: url, redirects: redirects, now: context.now()))
        case let .body(chunk): run(machine.receiveBody(chunk, now: context.now()))
        case .end: run(machine.receiveEnd(now: context.now()))
        case let .failed(error): run(machine.receiveFailure(error, now: context.now()))
        }
        applyBackpressure()
    }

    // MARK: actions

    private func run(_ actions: [FetchMachine.Action]) {
        for action in actions { perform(action) }
        postDeliveries()
    }

    /// Queues a sink call for the loop its sink belongs to (made at once for a sink on no loop).
    private func deliver(to sink: any ResponseSink, _ call: @escaping @Sendable () -> Void) {
        guard let executor = sink.executor else { return call() }
        if let index = deliveries.firstIndex(where: { $0.executor === executor }) {
            deliveries[index].calls.append(call)
        } else {
            deliveries.append((executor, [call]))
        }
    }

    /// Posts the sink calls of the actions just run: one task per event loop, which makes its calls in order (each
    /// acts at once, on its own loop's thread).
    private func postDeliveries() {
        guard !deliveries.isEmpty else { return }
        let batches = deliveries
        deliveries = []
        for (executor, calls) in batches {
            if calls.count == 1 {
                executor.execute(calls[0])
            } else {
                executor.execute { for call in calls { call() } }
            }
        }
    }

    /// Carries out one action, by kind: the transfer, the waiters' sinks, the tiers, or the fetch itself.
    private func perform(_ action: FetchMachine.Action) {
        switch action {
        case .startTransfer, .cancelTransfer, .lookOnDisk:
            performTransferAction(action)
        case .askFleet, .fleetStore, .fleetPass, .fleetRelease:
            performFleetAction(action)
        case .sendInterim, .sendHead, .sendBody, .respondWhole, .respondStored, .end, .fail, .refuseRange, .abort:
            performSinkAction(action)
        case .store, .refresh, .keepInMemory, .promote, .remove, .removeRenditions:
            performStoreAction(action)
        case .waiterAttached, .redispatchToVariants, .redispatchAlone, .passUpstream, .closeToNewcomers, .finish, .log,
             .countError:
            performFetchAction(action)
        }
    }

    /// The upstream transfer and the disk read that may replace it.
    private func performTransferAction(_ action: FetchMachine.Action) {
        switch action {
        case let .startTransfer(conditional):
            startTransfer(conditional: conditional)
        case .cancelTransfer:
            transfer?.cancel()
        case .lookOnDisk:
            readDisk()
        default:
            preconditionFailure("not a transfer action: \(action)")
        }
    }

    /// The fleet tier: lookups and polls, and what becomes of a lease this host won.
    private func performFleetAction(_ action: FetchMachine.Action) {
        switch action {
        case let .askFleet(after):
            askFleet(after: after)
        case let .fleetStore(entry, ttl): endLease(.store(entry, ttl: ttl))
        case let .fleetPass(reason, ttl): endLease(.pass(reason: reason, ttl: ttl))
        case .fleetRelease: endLease(.release)
        default:
            preconditionFailure("not a fleet action: \(action)")
        }
    }

    private func endLease(_ end: FleetFill.LeaseEnd) {
        FleetFill.end(&lease, end, itemMaxBytes: settings.fleetItemMaxBytes, passSeconds: settings.rules.fleet?.passSeconds ?? 60,
                      startSerial: purgeSerial,
                      context: context)
    }

    /// Looks the key up in the fleet tier, now or after `delay` seconds (a poll, jittered by up to a fifth so that
    /// hosts waiting on one lease spread their polls).
    private func askFleet(after delay: Double) {
        if fleetAsked == nil { fleetAsked = .now }
        let fleetKey = FleetEnvelope.key(for: key)
        let ask: @Sendable () -> Void = { [self] in
            guard !machine.isFinished else { return }
            context.fleet.lookup(fleetKey) { [queue] answer in
                queue.async { self.fleetAnswered(answer) }
            }
        }
        if delay <= 0 { return ask() }
        let jittered = delay * Double.random(in: 0.8...1.2)
        queue.asyncAfter(deadline: .now() + jittered, execute: ask)
    }

    /// The fleet's answer, decoded and verified, for the machine.
    private func fleetAnswered(_ lookup: FleetLookup) {
        dispatchPrecondition(condition: .onQueue(queue))
        let (answer, won) = FleetFill.answer(lookup, key: key, policy: settings.rules.freshnessPolicy, waitedBefore: fleetWaited,
                                             context: context)
        if let won { lease = won }
        if case .wait = answer {
            if !fleetWaited { context.events?(.fleetWaiting(key: key)) }
            fleetWaited = true
        }
        let waited = fleetAsked.map { (ContinuousClock.now - $0).inSeconds } ?? 0
        run(machine.fleetAnswered(answer, waited: waited, now: context.now()))
        applyBackpressure()
    }

    /// What the waiters' connections are sent.
    private func performSinkAction(_ action: FetchMachine.Action) {
        switch action {
        case let .sendInterim(head, ids):
            for id in ids {
                guard let sink = clients[id]?.sink else { continue }
                deliver(to: sink) { sink.interim(head) }
            }
        case let .sendHead(head, outcome, bodyLength, id, ends):
            sendHead(head, outcome: outcome, bodyLength: bodyLength, to: id, ends: ends)
        case let .sendBody(chunk, ids):
            for id in ids {
                guard let sink = clients[id]?.sink else { continue }
                clients[id]!.sentBytes += chunk.count
                deliver(to: sink) { sink.body(chunk) }
            }
        case let .respondWhole(head, outcome, body, id):
            guard let client = clients.removeValue(forKey: id) else { return }
            let sink = client.sink
            sink.note(outcome)
            deliver(to: sink) { sink.respond(head, body: body) }
        case let .respondStored(entry, outcome, file, now, id):
            guard let client = clients.removeValue(forKey: id) else { return }
            let sink = client.sink, request = client.request
            deliver(to: sink) { StoredResponse.send(entry, to: sink, request: request, outcome: outcome, now: now, file: file) }
        case let .end(ids):
            endClients(ids)
        case let .fail(ids, status, reason):
            for id in ids {
                guard let sink = clients.removeValue(forKey: id)?.sink else { continue }
                deliver(to: sink) { sink.fail(status: status, reason: reason) }
            }
        case let .refuseRange(outcome, length, id):
            refuseRange(outcome: outcome, length: length, to: id)
        case let .abort(ids):
            for id in ids {
                guard let sink = clients.removeValue(forKey: id)?.sink else { continue }
                deliver(to: sink) { sink.abort() }
            }
        default:
            preconditionFailure("not a sink action: \(action)")
        }
    }

    private func sendHead(_ head: HTTPResponseHead, outcome: CacheOutcome, bodyLength: Int?, to id: Int, ends: Bool) {
        guard let client = clients[id] else { return }
        let sink = client.sink
        sink.note(outcome)
        deliver(to: sink) {
            sink.head(head, bodyLength: bodyLength)
            // A HEAD client has what it asked for; the transfer goes on for the cache.
            if ends { sink.end() }
        }
        if ends { clients[id] = nil }
    }

    private func refuseRange(outcome: CacheOutcome, length: Int, to id: Int) {
        guard let sink = clients.removeValue(forKey: id)?.sink else { return }
        sink.note(outcome)
        deliver(to: sink) {
            sink.fail(status: 416, reason: "Range: no part of the \(length)-byte response is in the range asked",
                      headers: ["Content-Range": "bytes */\(length)"])
        }
    }

    /// What the tiers keep.
    private func performStoreAction(_ action: FetchMachine.Action) {
        switch action {
        case let .store(entry):
            store(entry)
        case let .refresh(entry, bodyInFile):
            // A revalidation in flight across a purge: its 304 answers the clients, the purged copy is not put back.
            guard !purgedMeanwhile else { return }
            context.store.refresh(entry, bodyInFile: bodyInFile)
        case let .keepInMemory(entry):
            guard !purgedMeanwhile else { return }
            context.store.keepInMemory(entry)
        case let .promote(entry, removalsSeen):
            _ = context.store.promote(entry, removalsSeen: removalsSeen)
        case let .remove(variant):
            if let variant { context.store.remove(key, variant: variant) } else { context.store.remove(key) }
        case .removeRenditions:
            context.store.removeRenditions(of: key)
        default:
            preconditionFailure("not a store action: \(action)")
        }
    }

    /// The URL (or everything) was purged since this fetch started: what it brings is kept nowhere.
    private var purgedMeanwhile: Bool { context.fleetPurges.purgedSince(purgeSerial, url: key.url.string) }

    private func store(_ entry: CacheEntry) {
        guard !purgedMeanwhile else {
            // In flight across a purge of its URL: served to its clients, kept nowhere (FleetPurges.purgedSince).
            context.logger.info("not stored \(key): its URL was purged while it was fetched")
            return
        }
        if settings.rules.writesToDisk {
            // The body waits for the disk queue as one more copy (the clients may still hold the chunks): it
            // counts in flight until written.
            let bytes = entry.body.count, metrics = context.metrics
            metrics.inFlightBytes.wrappingAdd(bytes, ordering: .relaxed)
            context.store.store(entry) { metrics.inFlightBytes.wrappingSubtract(bytes, ordering: .relaxed) }
        } else {
            context.store.store(entry)
        }
        context.store.sourceStored(entry)
    }

    /// The fetch's waiters going elsewhere, its place in the table, its end, and what it reports.
    private func performFetchAction(_ action: FetchMachine.Action) {
        switch action {
        case let .waiterAttached(waiters):
            context.events?(.waiterAttached(key: key, waiters: waiters))
        case let .redispatchToVariants(waiters, head):
            hand(waiters) { handoff.toVariants($0, head, key) }
        case let .redispatchAlone(waiters):
            hand(waiters) { handoff.alone($0, key) }
        case let .passUpstream(waiters):
            passUpstream(waiters)
        case .closeToNewcomers:
            handoff.closed(self)
        case .finish:
            finish()
        case let .log(level, message):
            context.logger.log(level: level, "\(message)")
        case let .countError(kind, status, reason):
            context.metrics.error(kind, status: status, reason: reason, target: key.url.string)
        default:
            preconditionFailure("not a fetch action: \(action)")
        }
    }

    /// Sends these waiters' requests to the origin as they are, uncached (Passthrough).
    private func passUpstream(_ waiters: [FetchMachine.Waiter]) {
        for waiter in waiters {
            guard let client = clients.removeValue(forKey: waiter.id) else { continue }
            let request = waiter.request
            Passthrough.start(request.head, body: .bytes([]), url: request.url, mode: request.mode, trusted: request.trusted,
                              sink: client.sink, context: context,
                              fields: request.fields, policy: settings.rules.freshnessPolicy,
                              writeBuffer: settings.writeBufferBytes, maxForwards: nil, reason: .bypass)
        }
    }

    private func startTransfer(conditional: HTTPHeaders) {
        transfer?.cancel()
        var headers = machine.leader.upstreamHeaders(via: context.via)
        for field in conditional { headers.set(field.name, field.value) }
        var request = UpstreamRequest(
            url: key.url.string, method: "GET", followsRedirects: machine.leader.mode != .reverse && settings.followsRedirects, headers: headers,
            trusted: machine.leader.trusted,
            maxBodyBytes: settings.rules.maxObjectSizeBytes, deliveryWindow: settings.writeBufferBytes)
        // Reverse mode forwards a configured origin's 103 Early Hints (RFC 9110 15.2).
        request.forwardsInterim = machine.leader.mode == .reverse
        if transferStarted != nil { countTransfer(result: "restarted") }
        transferStarted = .now
        transferStatus = nil
        transferBytes = 0
        generation += 1
        let generation = generation
        transfer = context.origin.fetch(request) { [self] event in
            queue.async {
                self.receive(event, generation: generation)
                // Every body chunk dealt with gives its room in the transfer's delivery window back.
                if case let .body(chunk) = event, generation == self.generation { self.transfer?.consumed(chunk.count) }
            }
        }
    }

    /// Reads the leader's variant from the disk again (a large copy the origin just confirmed): whatever the
    /// transfer still reports is ignored.
    private func readDisk() {
        transfer = nil
        generation += 1
        let generation = generation
        let asked = context.store.reread(key, requestFields: machine.leader.forwardedHeaders) { [self] result in
            queue.async {
                guard generation == self.generation, !self.machine.isFinished else { return }
                self.run(self.machine.diskAnswered(result, now: self.context.now()))
            }
        }
        // No disk tier to ask (not reached: a copy with its body in a file came from one): the machine fetches whole.
        if !asked { run(machine.diskAnswered(nil, now: context.now())) }
    }

    /// Ends these clients' responses. What they have not taken yet stays in memory, in their connections, after the
    /// fetch: it stays counted in flight until they take it or go.
    private func endClients(_ ids: [Int]) {
        var behind: [(sink: any ResponseSink, sentBytes: Int)] = []
        for id in ids {
            guard let client = clients.removeValue(forKey: id) else { continue }
            let sink = client.sink
            deliver(to: sink) { sink.end() }
            if backlog(client) > 0 { behind.append((client.sink, client.sentBytes)) }
        }
        account(0)
        if !behind.isEmpty { InFlightDrain.start(behind, metrics: context.metrics) }
    }

    /// Hands waiters (with their sinks) on, or fails them when nobody takes them (the daemon let go of the coalescer).
    private func hand(_ waiters: [FetchMachine.Waiter],
                      to redispatch: ([(FetchMachine.Waiter, any ResponseSink)]) -> Bool) {
        let handed = waiters.compactMap { waiter in clients.removeValue(forKey: waiter.id).map { (waiter, $0.sink) } }
        guard !redispatch(handed) else { return }
        for (_, sink) in handed {
            context.metrics.error("stopping", status: 503, reason: "the daemon is stopping", target: key.url.string)
            deliver(to: sink) { sink.fail(status: 503, reason: "the daemon is stopping") }
        }
    }

    private func finish() {
        context.events?(.fetchFinished(key: key))
        if attachedCount > 0 { context.metrics.fetchWaiters.observe(Double(attachedCount)) }
        // A transfer stopped here (no waiter left, refused, or a 304 whose end is still on its way) is counted now.
        if transferStarted != nil {
            countTransfer(result: transferStatus == 304 ? "not_modified" : transferStatus != nil ? "ok" : "cancelled")
        }
        account(0)
        clients = [:]
        // (The machine marked or released a lease it held; one left here would only wait out its time.)
        endLease(.release)
        // The transfer's event closure holds this fetch: dropping the transfer breaks the cycle.
        transfer = nil
    }

    /// Counts the current upstream transfer once: its result, duration and bytes.
    private func countTransfer(result: String) {
        guard let started = transferStarted else { return }
        transferStarted = nil
        let elapsed = ContinuousClock.now - started
        let seconds = elapsed.inSeconds
        context.metrics.upstreamFinished(host: key.url.host, result: result, seconds: seconds, bytes: transferBytes)
    }

    // MARK: backpressure (see the rules at the top)

    /// Body bytes handed to `client` that it has not taken yet (0 for sinks that are not clients).
    private func backlog(_ client: Client) -> Int {
        let written = client.sink.bytesWritten
        return written >= client.sentBytes ? 0 : client.sentBytes - written
    }

    private var largestBacklog: Int { clients.values.map(backlog).max() ?? 0 }

    /// Sets this fetch's share of the in-flight total to `bytes`.
    private func account(_ bytes: Int) {
        let delta = bytes - accountedBytes
        guard delta != 0 else { return }
        accountedBytes = bytes
        context.metrics.inFlightBytes.wrappingAdd(delta, ordering: .relaxed)
    }

    private func applyBackpressure() {
        guard machine.isStreaming else { return }
        account(machine.keepsBody ? machine.keptBytes : largestBacklog)
        guard !paused, overBudget else { return }
        if machine.keepsBody {
            run(machine.bodiesOverBudget(limit: settings.inFlightLimitBytes))
            if machine.isFinished { return }
            account(largestBacklog)
        }
        guard watchClientsBehind() else { return }
        paused = true
        transfer?.setPaused(true)
        context.metrics.upstreamPauses.add()
        context.events?(.transferPaused(key: key))
        context.logger.debug("\(key): upstream paused, a client is more than server.write-buffer behind")
    }

    private var overBudget: Bool {
        context.metrics.inFlightBytes.load(ordering: .relaxed) > settings.inFlightLimitBytes
    }

    /// Asks every client more than `server.write-buffer` behind to say when it has taken all but half a buffer of
    /// what it was handed (or went away); true when there is one.
    private func watchClientsBehind() -> Bool {
        let buffer = settings.writeBufferBytes
        let behind = clients.values.filter { backlog($0) > buffer }
        weak let weakSelf = self
        for client in behind {
            client.sink.whenWritten(client.sentBytes - buffer / 2) { [queue] in
                queue.async { weakSelf?.resume() }
            }
        }
        return !behind.isEmpty
    }

    /// A client caught up (or went away): read on once none is behind, or the budget has room again.
    private func resume() {
        dispatchPrecondition(condition: .onQueue(queue))
        guard paused, !machine.isFinished else { return }
        account(machine.keepsBody ? machine.keptBytes : largestBacklog)
        if overBudget && watchClientsBehind() { return }
        paused = false
        transfer?.setPaused(false)
    }
}

extension UpstreamError {
    /// A metric label for the error.
    var kind: String {
        switch self {
        case .refusedDestination: "refused_destination"
        case .badURL: "bad_url"
        case .dns: "dns"
        case .connect: "connect"
        case .tls: "tls"
        case .timeout: "timeout"
        case .tooManyRedirects: "too_many_redirects"
        case .tooLarge: "too_large"
        case .broken: "broken"
        case .queueTimeout: "queue_timeout"
        case .cancelled: "cancelled"
        case .loop: "loop"
        case .other: "other"
        }
    }
}
