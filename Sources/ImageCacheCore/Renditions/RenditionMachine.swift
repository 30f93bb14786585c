// RenditionMachine: what one rendition job decides, as a value (the rendition's `FetchMachine`). It takes events (the
// job starts, a client joins or leaves, the source arrives or fails, the job's source deadline passes, a worker takes
// the transform or it is withdrawn from the queue, the transform ends, the result is stored) and returns the actions to
// carry out (fetch the source, arm or cancel the deadline, hand the transform to the pool, store or refresh the entry,
// answer or fail these clients, send those to a job of their own, count, finish). No queues, clocks, sinks or libvips:
// `RenditionJob` (RenditionJob.swift) runs the actions; unit tests drive the machine with event sequences
// (RenditionMachineTests).
//
// States (each carries its own data; `done` is terminal)
//
//   idle ── start ──> waitingForSource (the source asked for through the cache, the deadline armed)
//        └─ start, a new rendition with a fleet tier ──> askingFleet (the fleet stage, below)
//   waitingForSource ── source 200/203, same validator as the stale rendition ──> refreshed (new freshness, same
//        │                                                                      bytes, no transform) ──> storing/done
//        ├─ source 200/203, new (or no) validator ──> queued(Source, etag)    (a source revalidated into another
//        │                                                                    version is transformed again)
//        ├─ source 5xx, failure, deadline ──> stale-if-error serves the stale rendition, else every client gets the
//        │                                    error (504 at the deadline; the source fetch goes on for the cache)
//        └─ source 404/410 → 404, other status → 502
//   queued ── a worker takes it ──> transforming(Source, etag)
//          ── withdrawn from the pool's queue (every client left) ──> done
//   queued / transforming ── result ──> storing(entry) ── stored ──> done (a result not stored: done at once)
//                         ── failure (422, 503 queue full or timed out, ...) ──> every client gets it ──> done
//   every client gone, nothing to fill ── waitingForSource: done, the job's place among the source fetch's clients
//                                         given up (that fetch then follows its own rules for clients that leave)
//                                      ── queued: withdrawn from the pool's queue, then done
//                                      ── transforming: runs on (a worker cannot be stopped); its result is stored
//                                         if the job stores, else dropped
//
//   The fleet stage (a fleet tier is configured; a new rendition: nothing stored here, the job stores, the leader did
//   not ask no-cache): before the source is asked for, so that N hosts asking for a new rendition cost one source
//   fetch, one decode and one encode fleet-wide (the fetch's fleet stage, FetchMachine, by the same rules):
//   askingFleet ── hit ──────────> kept here (memory, disk; `store`), each client it serves answered (hit; detail=fleet,
//                                  or fwd=uri-miss; stored; collapsed; detail=fleet after a wait): no source, no
//                                  transform; the clients it may not serve (no-cache) have it made here, alone
//               ── won ──────────> waitingForSource, holding the lease: the result stored goes to the fleet with its
//                                  CAS (`fleetStore`); a result not stored or not shareable, a failure, the deadline
//                                  leave a pass marker (`fleetPass`); every client gone before a worker has the
//                                  transform (waiting for the source, or withdrawn from the pool's queue) hands the
//                                  lease back (`fleetRelease`), and so does a result whose source was purged
//                                  while it was made. The runner keeps the lease alive while the source's bytes
//                                  arrive and, on a timer (`keepsLeaseAlive`), while the source is awaited (it may
//                                  itself wait on another host's fill; transform-source-timeout bounds that) and
//                                  while the transform is with this host's pool (its queue timeout and the
//                                  transform's own timeout bound that)
//               ── wait ─────────> askingFleet again after 10 ms, doubling to 40 ms; past fleet.wait, made alone
//                                  (never stored in the fleet: the lease is another host's)
//               ── pass marker, unavailable, damaged ──> waitingForSource, alone (the response says
//                                  detail=fleet-unavailable when the tier could not be asked, as for a fetch; else
//                                  detail=transformed)
//               ── every client gone ──> done (a lease won by a lookup still out is handed back when it answers)
//   The source deadline (transform-source-timeout) is armed when the source is asked for, after the fleet stage: a
//   client waits at most fleet.wait for another host's rendition, then the source timeout. One fleet lookup per
//   rendition key per host: the job (the coalesced unit) asks, not each client.
//
// Rules
//   - A result whose source may not be shared (private, no-store) goes to the leader only; the other clients ask
//     again, each for themselves (Storability.isShareable, as for a fetch).
//   - A client's no-store: the result is not stored (RFC 9111 5.2.1.5); it is still shared with whoever joins.
//   - The entry is handed to the store before any client is answered; the job leaves the table after the answers,
//     once the store has it (today at once; a remote tier may take longer: a client that joins meanwhile is answered
//     from the entry at once).
//   - When the last client goes, the job ends unless it was started with no client (a stale-while-revalidate refresh)
//     or complete-abandoned-fetches is on and the job stores its result: then it runs on to fill the cache.
//   - A rendition is received when its source was: its response time is the source entry's (the time the origin
//     answered for the source), its age its source's (`entry`). A purge of the source after then (the runner's
//     `purged`: FleetPurges) covers it: a result made from a source purged meanwhile goes to the job's clients and is
//     kept nowhere (not stored, not shared: a lease held is handed back); every other host refuses a copy of it by
//     the same time (FleetFill.answer).
//   - Late events (a source after the deadline, a result after the job ended) change nothing.

internal import ImageCacheSystem
internal import ImageCacheHTTP
internal import ImageCacheStore
internal import ImageCacheTransform
internal import Foundation
internal import Logging

struct RenditionMachine {
    /// What the machine needs from the settings, fixed when the job starts.
    struct Rules {
        /// transform-source-timeout, seconds.
        var sourceTimeoutSeconds: Double
        var staleIfErrorSeconds: Double
        var completeAbandonedJobs: Bool
        var freshness: FreshnessPolicy
        /// The fleet tier, when one is configured (the fetch's rules: fleet.wait, the pass markers' lives).
        var fleet: FetchMachine.FleetRules? = nil
    }

    struct Waiter {
        let id: Int
        let request: ClientRequest
        /// Joined a job another request started.
        var collapsed = false
    }

    /// The source as the job received it (a hit, a disk hit, or a fetch's whole body).
    struct Source: Sendable {
        var head: HTTPResponseHead
        var body: [UInt8]
        /// When the origin answered for it and how old it was then (its entry's times, told with its outcome); nil
        /// when its producer did not say.
        var received: CacheOutcome.Received? = nil
    }

    /// Why the source did not arrive whole.
    struct SourceFailure: Error, Sendable, Equatable {
        var status: Int
        var reason: String
        var label: String
    }

    enum State {
        /// Not started yet.
        case idle
        /// Waiting for the fleet tier's answer (a lookup, or the next poll of another host's rendition).
        case askingFleet
        case waitingForSource
        /// Handed to the pool, waiting for a worker.
        case queued(Source, etag: String?)
        case transforming(Source, etag: String?)
        /// The entry is being stored; its clients have it.
        case storing(CacheEntry, Outcomes)
        case done
    }

    /// How a made entry is served to a waiter (the job's miss or refresh, Cache-Status).
    struct Outcomes {
        var forwardStatus: Int?
        var forward: CacheOutcome.Forward
        var stored: Bool
        /// The Cache-Status detail when it is not the job's own making ("fleet": another host made it).
        var detail: String? = nil

        func outcome(collapsed: Bool) -> CacheOutcome {
            CacheOutcome(forward: forward, forwardStatus: forwardStatus, revalidated: forwardStatus == 304, stored: stored,
                         collapsed: collapsed, detail: detail ?? (forwardStatus == 304 ? "refreshed" : "transformed"))
        }
    }

    enum Action {
        /// Look the rendition's key up in the fleet tier after `after` seconds (a poll; 0: now), and report with
        /// `fleetAnswered`.
        case askFleet(after: Double)
        /// Share the stored entry through the fleet tier with the lease this job holds, for `ttl` seconds.
        case fleetStore(CacheEntry, ttl: Int)
        /// Leave a pass marker with the lease: the hosts waiting on it make the rendition for themselves.
        case fleetPass(reason: String, ttl: Int)
        /// Hand the lease back: another host's next poll wins it.
        case fleetRelease
        /// Ask the cache for the source (Proxy.serve), collecting it whole.
        case fetchSource(ClientRequest)
        /// Report `deadline` after this many seconds.
        case armDeadline(seconds: Double)
        case cancelDeadline
        /// Stop collecting the source; whatever it reports later is dropped. The fetch itself goes on for the cache.
        case dropSource
        /// Stop collecting the source and leave the source fetch as any client that hangs up does (its clients all
        /// gone, it stops unless complete-abandoned-fetches is on).
        case abandonSource
        /// Hand the transform to the pool (a worker reports `workerStarted`, then `transformed`).
        case submit(source: [UInt8])
        /// Take the transform out of the pool's queue if no worker has it yet (reported as `withdrawn`).
        case withdraw
        case store(CacheEntry)
        case refresh(CacheEntry)
        case send(CacheEntry, to: Int, outcome: CacheOutcome)
        case fail(ids: [Int], status: Int, reason: String)
        /// Ask again, each on its own (a result they may not share).
        case redispatch([Waiter])
        /// rendition metrics: imagecached_transforms_total{format, result} and friends.
        case count(format: String, result: String, seconds: Double, bytesIn: Int, bytesOut: Int)
        /// A failure answered: logged at notice and counted as an error `transform_<label>`.
        case report(status: Int, reason: String, label: String)
        case log(Logger.Level, String)
        /// The job is over: it leaves the in-flight table and frees its admission slot.
        case finish
    }

    let key: CacheKey
    let leader: ClientRequest
    let rendition: RenditionRequest
    /// The stored rendition this job replaces (stale), if any.
    let stale: CacheEntry?
    /// False for a request that may not share or store (the client's no-store).
    let stores: Bool
    let rules: Rules
    /// Started with no client (stale-while-revalidate): runs to its end whoever comes or goes.
    let fillsCache: Bool
    /// Makes the ETag of a rendition whose source has no validator (a new one per transform).
    let nonce: UInt64

    private(set) var state: State = .idle
    private(set) var waiters: [Waiter] = []
    /// The fleet tier's part in the job (see the fleet stage at the top).
    private(set) var fleetRole = FetchMachine.FleetRole.none
    /// The Cache-Status detail of a rendition made here: "fleet-unavailable" when the fleet could not be asked (as
    /// for a fetch), else nil ("transformed").
    private var fleetDetail: String?

    init(key: CacheKey, leader: ClientRequest, rendition: RenditionRequest, stale: CacheEntry?, stores: Bool, rules: Rules,
         fillsCache: Bool = false, nonce: UInt64 = .random(in: 0...UInt64.max)) {
        self.key = key
        self.leader = leader
        self.rendition = rendition
        self.stale = stale
        self.stores = stores
        self.rules = rules
        self.fillsCache = fillsCache
        self.nonce = nonce
    }

    var isDone: Bool {
        if case .done = state { return true }
        return false
    }

    /// The transform is with this host's pool (queued or on a worker).
    var isWithPool: Bool {
        switch state {
        case .queued, .transforming: true
        default: false
        }
    }

    /// The runner keeps the lease this job holds alive (reports progress every third of fleet.lease): the job holds
    /// one and works toward its rendition, waiting for its source (which may itself wait on another host's fill, up
    /// to fleet.wait; transform-source-timeout bounds it) or with the transform in this host's pool (its queue timeout
    /// and the transform's own bound it). A host that hangs or dies stops the timer, and its lease lapses.
    var keepsLeaseAlive: Bool {
        guard fleetRole == .holdingLease else { return false }
        switch state {
        case .waitingForSource, .queued, .transforming: return true
        default: return false
        }
    }

    /// The format metrics name before a result exists.
    private var formatLabel: String { rendition.choice.format?.rawValue ?? "-" }

    // MARK: events

    mutating func start() -> [Action] {
        guard case .idle = state else { return [] }
        if asksFleet {
            fleetRole = .asking(polls: 0)
            state = .askingFleet
            return [.askFleet(after: 0)]
        }
        return askForSource()
    }

    /// The fleet tier's answer to `askFleet` (`waited`: seconds since the job's first lookup).
    mutating func fleetAnswered(_ answer: FetchMachine.FleetAnswer, waited: Double, now: Date) -> [Action] {
        guard case .askingFleet = state, case let .asking(polls) = fleetRole else {
            // Too late (every client went): a lease won meanwhile goes back at once.
            if case .won = answer { return [.fleetRelease] }
            return []
        }
        switch answer {
        case let .hit(entry):
            fleetRole = .done
            return serveFleetEntry(entry, afterWaiting: polls > 0, now: now)
        case .won:
            fleetRole = .holdingLease
            return askForSource()
        case .wait:
            guard let fleet = rules.fleet, waited < fleet.waitSeconds else {
                fleetRole = .done
                return [.log(.notice, "\(key): waited \(Int(waited * 1000)) ms for another host's rendition (fleet.wait); making it alone")]
                    + askForSource()
            }
            fleetRole = .asking(polls: polls + 1)
            return [.askFleet(after: FetchMachine.fleetPollDelay(afterPolls: polls))]
        case let .pass(reason):
            fleetRole = .done
            return [.log(.debug, "\(key): the fleet's rendition was not shared (\(reason)); making it alone")] + askForSource()
        case let .unavailable(reason):
            fleetRole = .done
            fleetDetail = "fleet-unavailable"
            return [.log(.debug, "\(key): fleet tier unavailable (\(reason)); making it alone")] + askForSource()
        case let .damaged(reason):
            fleetRole = .done
            return [.log(.warning, "\(key): the fleet's value was refused and deleted: \(reason)")] + askForSource()
        }
    }

    /// A client waits for the rendition (the first one, or one that joined: `collapsed`).
    mutating func attach(_ id: Int, request: ClientRequest, collapsed: Bool) -> [Action] {
        switch state {
        case .done:
            return [.fail(ids: [id], status: 503, reason: "the rendition job ended")]
        case let .storing(entry, outcomes):
            return [.send(entry, to: id, outcome: outcomes.outcome(collapsed: collapsed))]
        default:
            waiters.append(Waiter(id: id, request: request, collapsed: collapsed))
            return []
        }
    }

    /// A client went away.
    mutating func detach(_ id: Int) -> [Action] {
        guard waiters.contains(where: { $0.id == id }) else { return [] }
        waiters.removeAll { $0.id == id }
        guard waiters.isEmpty, !fillsCache, !(rules.completeAbandonedJobs && stores) else { return [] }
        switch state {
        case .askingFleet:
            // (A lookup still out: a lease it wins is handed back when it answers.)
            state = .done
            fleetRole = .done
            return [.log(.debug, "every client left; dropping the rendition job \(key) (asking the fleet)"),
                    .count(format: formatLabel, result: "abandoned", seconds: 0, bytesIn: 0, bytesOut: 0), .finish]
        case .waitingForSource:
            state = .done
            return endLease(.fleetRelease)
                + [.cancelDeadline, .abandonSource, .log(.debug, "every client left; dropping the rendition job \(key)"),
                   .count(format: formatLabel, result: "abandoned", seconds: 0, bytesIn: 0, bytesOut: 0), .finish]
        case .queued:
            return [.withdraw]
        case .transforming:
            // A worker cannot be stopped; its result is stored if the job stores, else dropped (`transformed`).
            return []
        case .idle, .storing, .done:
            return []
        }
    }

    /// The source arrived whole (any status), or could not (`failure`). `purged`: whether a purge of the source's URL
    /// came after an entry's response time (the runner asks FleetPurges).
    mutating func sourceArrived(_ result: Result<Source, SourceFailure>, now: Date,
                                purged: (CacheEntry) -> Bool = { _ in false }) -> [Action] {
        guard case .waitingForSource = state else { return [] }
        var actions: [Action] = [.cancelDeadline]
        switch result {
        case let .failure(failure):
            actions += sourceFailed(failure, now: now)
        case let .success(source):
            actions += sourceReceived(source, now: now, purged: purged)
        }
        return actions
    }

    /// transform-source-timeout passed before the source was whole: 504 (or the stale rendition), and the source's
    /// collection is dropped (its fetch goes on for the cache).
    mutating func deadline(now: Date) -> [Action] {
        guard case .waitingForSource = state else { return [] }
        let seconds = String(format: "%g", rules.sourceTimeoutSeconds)
        let failure = SourceFailure(status: 504, reason: "the source did not arrive within transform-source-timeout (\(seconds)s)",
                                    label: "source_timeout")
        return [.dropSource] + sourceFailed(failure, now: now)
    }

    /// A worker took the transform.
    mutating func workerStarted() -> [Action] {
        guard case let .queued(source, etag) = state else { return [] }
        state = .transforming(source, etag: etag)
        return []
    }

    /// The pool took the transform out of its queue (asked by `withdraw`). A client that joined since is not left
    /// without an answer: the transform is submitted again.
    mutating func withdrawn() -> [Action] {
        guard case let .queued(source, _) = state else { return [] }
        if !waiters.isEmpty { return [.submit(source: source.body)] }
        state = .done
        return endLease(.fleetRelease) + [.log(.debug, "every client left; the queued transform of \(key) was withdrawn"),
                .count(format: formatLabel, result: "abandoned", seconds: 0, bytesIn: 0, bytesOut: 0), .finish]
    }

    /// The transform ended (a worker's result, or the pool's refusal: queue full, waited too long). `purged`: as for
    /// `sourceArrived` (a purge may land while the transform runs).
    mutating func transformed(_ result: Result<TransformedImage, TransformFailure>, seconds: Double, now: Date,
                              purged: (CacheEntry) -> Bool = { _ in false }) -> [Action] {
        let source: Source, etag: String?
        switch state {
        case let .queued(queuedSource, queuedTag), let .transforming(queuedSource, queuedTag):
            (source, etag) = (queuedSource, queuedTag)
        default:
            return []
        }
        switch result {
        case let .failure(failure):
            return [.count(format: formatLabel, result: failure.label, seconds: seconds, bytesIn: source.body.count, bytesOut: 0)]
                + fail(failure.status, failure.reason, label: failure.label)
        case let .success(image):
            let tag = etag ?? RenditionTag.etag(sourceValidator: String(nonce), rendition: key.rendition)
            let made = Self.entry(key: key, rendition: rendition, body: image.bytes, mediaType: image.format.mediaType,
                                  source: source, etag: tag, freshness: rules.freshness, now: now)
            let what = "\(key.url.string.prefix(300)) [\(key.rendition)]"
            let log: Action = made.isShareable
                ? .log(.debug, "transformed \(what) -> \(image.width)x\(image.height) \(image.format.rawValue) \(image.bytes.count) bytes in \(Int(seconds * 1000)) ms")
                : .log(.debug, "transformed \(what): not shareable (the source is private or no-store)")
            return [.count(format: image.format.rawValue, result: "ok", seconds: seconds, bytesIn: source.body.count,
                           bytesOut: image.bytes.count), log]
                + answer(made, forwardStatus: nil, store: .store(made.entry), now: now, purged: purged)
        }
    }

    /// The store has the entry (or refused it: nothing is waiting on that).
    mutating func stored() -> [Action] {
        guard case .storing = state else { return [] }
        state = .done
        return [.finish]
    }

    // MARK: decisions

    /// The fleet stage applies: a fleet tier, and a new rendition this job stores (no stale one here to refresh; not
    /// a refresh in the background) for a leader that may be served a stored one (no no-cache).
    private var asksFleet: Bool {
        rules.fleet != nil && stale == nil && stores && !fillsCache && !leader.cacheControl.noCache
    }

    private mutating func askForSource() -> [Action] {
        state = .waitingForSource
        return [.fetchSource(Self.sourceRequest(for: leader)), .armDeadline(seconds: rules.sourceTimeoutSeconds)]
    }

    /// The lease this job holds ends with `action` (a pass marker, a release); nothing when it holds none.
    private mutating func endLease(_ action: Action) -> [Action] {
        guard fleetRole == .holdingLease else { return [] }
        fleetRole = .done
        return [action]
    }

    /// A rendition another host made: kept here, and sent to each client it may serve (fresh, or within its
    /// max-stale); the others have it made here, alone (no lease: this host is not filling for the fleet).
    private mutating func serveFleetEntry(_ entry: CacheEntry, afterWaiting: Bool, now: Date) -> [Action] {
        var actions: [Action] = [.store(entry)]
        var remaining: [Waiter] = []
        for waiter in waiters {
            guard let outcome = FetchMachine.fleetOutcome(entry, request: waiter.request.cacheControl, afterWaiting: afterWaiting,
                                                          now: now) else {
                remaining.append(waiter)
                continue
            }
            actions.append(.send(entry, to: waiter.id, outcome: outcome))
        }
        waiters = remaining
        guard waiters.isEmpty else { return actions + askForSource() }
        // Clients that join while the store takes it are answered from it (a coalesced miss, fleet-wide).
        state = .storing(entry, Outcomes(forwardStatus: nil, forward: .miss, stored: true, detail: "fleet"))
        return actions
    }

    private mutating func sourceReceived(_ source: Source, now: Date, purged: (CacheEntry) -> Bool) -> [Action] {
        let status = source.head.status
        guard status == 200 || status == 203 else {
            if status >= 500, let served = serveStale(now: now) { return served }
            return fail(status == 404 || status == 410 ? 404 : 502, "the source answered \(status)", label: "source_\(status)",
                        counted: false)
        }
        let etag = source.head.headers.validator.map { RenditionTag.etag(sourceValidator: $0, rendition: key.rendition) }
        if let stale, let etag, stale.etag == etag, !stale.body.isEmpty {
            // The source is what the rendition was made from: new freshness, same bytes.
            let made = Self.entry(key: key, rendition: rendition, body: stale.body,
                                  mediaType: stale.head.headers["Content-Type"] ?? "application/octet-stream",
                                  source: source, etag: etag, freshness: rules.freshness, now: now)
            let counted: [Action] = made.isShareable ? [.count(format: made.format, result: "refreshed", seconds: 0, bytesIn: 0, bytesOut: 0)] : []
            return counted + answer(made, forwardStatus: 304, store: .refresh(made.entry), now: now, purged: purged)
        }
        // (An SVG source without transform-allow-svg, or one SVGGuard refuses, is the Transformer's to refuse.)
        state = .queued(source, etag: etag)
        return [.submit(source: source.body)]
    }

    private mutating func sourceFailed(_ failure: SourceFailure, now: Date) -> [Action] {
        if failure.status >= 500, let served = serveStale(now: now) {
            // A source that timed out is counted even so: its fetch, which goes on, reports no failure of its own.
            let counted: [Action] = failure.label == "source_timeout"
                ? [.count(format: formatLabel, result: failure.label, seconds: 0, bytesIn: 0, bytesOut: 0)] : []
            return counted + served
        }
        return fail(failure.status, failure.reason, label: failure.label, counted: false)
    }

    /// The source failed (5xx, unreachable, too slow): a stale rendition in hand is served when stale-if-error allows
    /// it (CacheDecision.afterOriginFailure, as for any stored response).
    private mutating func serveStale(now: Date) -> [Action]? {
        guard let stale,
              let decision = CacheDecision.afterOriginFailure(stored: stale, request: leader.cacheControl,
                                                              offlineSeconds: rules.staleIfErrorSeconds, now: now),
              let outcome = decision.servedOutcome(tier: nil) else { return nil }
        let actions = waiters.map { Action.send(stale, to: $0.id, outcome: outcome) }
        waiters = []
        state = .done
        return actions + [.finish]
    }

    /// Every client gets the error. `counted`: the transform's own failure was counted already.
    private mutating func fail(_ status: Int, _ reason: String, label: String, counted: Bool = true) -> [Action] {
        var actions: [Action] = counted ? [] : [.count(format: formatLabel, result: label, seconds: 0, bytesIn: 0, bytesOut: 0)]
        actions.append(.report(status: status, reason: reason, label: label))
        if !waiters.isEmpty { actions.append(.fail(ids: waiters.map(\.id), status: status, reason: reason)) }
        waiters = []
        state = .done
        // The hosts waiting on this one's rendition try for themselves at once.
        return actions + endLease(.fleetPass(reason: "the rendition could not be made (\(label))", ttl: rules.fleet?.failurePassSeconds ?? 2))
            + [.finish]
    }

    /// A made (or refreshed) entry: stored when the job stores and the store's rules allow, sent to every client (a
    /// result that may not be shared: to the leader only; the others ask again, after the job has left the table).
    /// A result whose source was purged after the origin answered for it (`purged`: a purge that landed while the
    /// source arrived or the transform ran) goes to this job's clients, who asked before the purge, and is kept
    /// nowhere: not stored here, not shared (a lease held is handed back: the next host makes it from the source as
    /// it is now).
    private mutating func answer(_ made: Made, forwardStatus: Int?, store: Action, now: Date,
                                 purged: (CacheEntry) -> Bool) -> [Action] {
        let sourcePurged = purged(made.entry)
        let storing = stores && made.isStorable && !sourcePurged
        guard made.isShareable else {
            let first = waiters.first, others = Array(waiters.dropFirst())
            waiters = []
            state = .done
            var actions: [Action] = storing ? [store] : []
            actions += endLease(.fleetPass(reason: "not shareable (the source is private or no-store)", ttl: rules.fleet?.passSeconds ?? 60))
            actions.append(.finish)
            if !others.isEmpty { actions.append(.redispatch(others)) }
            if let first {
                actions.append(.send(made.entry, to: first.id,
                                     outcome: CacheOutcome(forward: .miss, forwardStatus: forwardStatus,
                                                           revalidated: forwardStatus == 304, detail: fleetDetail ?? "transformed")))
            }
            return actions
        }
        let outcomes = Outcomes(forwardStatus: forwardStatus, forward: stale == nil ? .miss : .stale,
                                stored: stores && !sourcePurged, detail: fleetDetail)
        var actions: [Action] = storing ? [store] : []
        if sourcePurged {
            actions += [.log(.info, "\(key): its source was purged while it was made; served to its clients, kept nowhere")]
                + endLease(.fleetRelease)
        } else if storing, let ttl = FleetEnvelope.sharedTTL(of: made.entry, now: now) {
            actions += endLease(.fleetStore(made.entry, ttl: ttl))
        } else {
            actions += endLease(.fleetPass(reason: storing ? "no freshness to share" : "not stored", ttl: rules.fleet?.passSeconds ?? 60))
        }
        actions += waiters.map { Action.send(made.entry, to: $0.id, outcome: outcomes.outcome(collapsed: $0.collapsed)) }
        waiters = []
        if storing {
            state = .storing(made.entry, outcomes)
        } else {
            state = .done
            actions.append(.finish)
        }
        return actions
    }

    // MARK: pure parts

    /// The source request: the same for every client (one shared entry), carrying only the leader's revalidation
    /// wishes (Cache-Control but no-store, which concerns the rendition; Pragma).
    static func sourceRequest(for leader: ClientRequest) -> ClientRequest {
        let source = leader.url
        var headers = HTTPHeaders()
        headers.add("Host", source.authority)
        let directives = leader.head.headers.values("Cache-Control").flatMap { $0.split(separator: ",") }
            .map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty && $0.lowercased() != "no-store" }
        if !directives.isEmpty { headers.add("Cache-Control", directives.joined(separator: ", ")) }
        for value in leader.head.headers.values("Pragma") { headers.add("Pragma", value) }
        let head = HTTPRequestHead(method: "GET", target: source.pathAndQuery, headers: headers)
        return ClientRequest(head: head, url: source, mode: leader.mode, trusted: leader.trusted, client: leader.client,
                             fields: leader.fields, isInternal: true, staleWhileRevalidate: leader.staleWhileRevalidate)
    }

    struct Made {
        var entry: CacheEntry
        var isStorable: Bool
        var isShareable: Bool
        /// The media type's subtype ("jpeg"), for metrics.
        var format: String
    }

    /// The stored response of a rendition: the image, with the source's freshness fields, received when its source
    /// was: its response time is the source entry's (the time the origin answered for the source, so a purge of the
    /// source after then covers the rendition too: FleetPurges.isPurged on every host, `answer` here), and its Age
    /// the source's corrected initial age, rounded up, so that it is exactly as old as its source at any time (the
    /// served head's Age counts up to the moment the source was served: with the source's response time it would
    /// count that time twice). A source whose times are unknown: received now, with its Age as served.
    static func entry(key: CacheKey, rendition: RenditionRequest, body: [UInt8], mediaType: String, source: Source,
                      etag: String, freshness: FreshnessPolicy, now: Date) -> Made {
        var headers = HTTPHeaders()
        headers.add("Content-Type", mediaType)
        // The source's freshness, its targeted cache-control fields included (RFC 9213: they govern it here too).
        for name in ["Cache-Control", "Expires", "Date", "Age", "Last-Modified"] + freshness.targetedFields {
            for value in source.head.headers.values(name) { headers.add(name, value) }
        }
        let received = source.received?.responseTime ?? now
        if let initialAge = source.received?.initialAge {
            headers.remove("Age")
            let age = Int(initialAge.rounded(.up))
            if age > 0 { headers.add("Age", String(age)) }
        }
        if !headers.contains("Date") { headers.add("Date", HTTPDate.format(received)) }
        headers.add("ETag", etag)
        if rendition.choice.variesOnAccept { headers.add("Vary", "Accept") }
        headers.add("X-Content-Type-Options", "nosniff")
        let head = HTTPResponseHead(status: 200, headers: headers)
        let entry = CacheEntry(key: key, head: head, body: body, requestTime: received, responseTime: received, vary: nil,
                               policy: freshness)
        // The store's own rules (Storability), for the rendition's head as stored, with the source request's method.
        let request = HTTPRequestHead(method: "GET", target: key.url.pathAndQuery, headers: HTTPHeaders())
        let storable = Storability.decide(request: request, requestCacheControl: CacheControl(HTTPHeaders()), response: head,
                                          responseCacheControl: entry.cacheControl) == .store
        let shareable = Storability.isShareable(head, cacheControl: entry.cacheControl)
        let format = mediaType.hasPrefix("image/") ? String(mediaType.dropFirst(6)) : mediaType
        return Made(entry: entry, isStorable: storable, isShareable: shareable, format: format)
    }
}
