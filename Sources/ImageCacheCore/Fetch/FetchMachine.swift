// FetchMachine: what one coalesced upstream fetch decides, as a value. It takes events (a client joins or leaves, the
// disk answers, the origin sends a head, a body chunk, the end or a failure) and returns the actions to carry out
// (start or cancel the transfer, send a head or a chunk to these clients, store this entry, send those clients to a
// fetch of their own). No sockets, queues, clocks or sinks: `Fetch` (Fetch.swift) runs the actions; unit tests drive
// the machine directly (FetchMachineTests).
//
// States (each carries its own data; `finished` is terminal)
//
//   lookingOnDisk(confirmed, removalsSeen, fallback) ── disk answer ──> a waiter the stored copy serves is answered
//        │                                                              from it; the rest go upstream (revalidating
//        │                                                              it if it can, else `fallback`)
//        └──────────────────────────────────────────────────────────> waitingForHead(Upstream: what is revalidated,
//                                                                                     when asked)
//   waitingForHead ── 304 for the revalidated copy ──> each waiter served the refreshed copy ──> finished
//                  ── 304 for a large disk copy ─────> kept: lookingOnDisk(confirmed: the outcome) (the body is in its
//                                                      file); not kept: waitingForHead again, unconditional
//                  ── 304 naming other validators ───> waitingForHead again, unconditional      (outdated copy removed)
//                  ── 200/203 ───────────────────────> checkingBody(Response, first bytes, chunks held back)
//                  ── other status, failure ─────────> stale-if-error serves the stale copy (a large disk copy: from
//                                                      lookingOnDisk(confirmed)), else every waiter gets the error
//                                                      ──> finished
//                  ── other status, reverse mode ────> as a 200 without the image checks: shared, stored (RFC 9111
//                                                      3, negative-ttl) or only streamed by the same rules
//                  ── not an image, forward mode ────> passed on (`passNotImage`): checkingBody without the checks
//   checkingBody ── image checks pass ──> streaming(Response) (or, when the whole body is in, each waiter gets its
//                                         whole response in one call and the fetch finishes)
//                ── checks fail, forward mode ──> passed on (`passNotImage`): streaming, never stored
//   streaming ── end ──> store, end every waiter ──> finished
//   any state ── every waiter gone (and nothing to fill) ──> finished
//
//   The fleet stage (a fleet tier is configured; a miss of the URL's own response, or a stale copy of it to revalidate):
//   between the disk's answer (or the start, without a disk tier) and the origin,
//   askingFleet ── hit ──────────> kept here (memory, disk), each waiter it serves answered (hit; detail=fleet, or
//                                  collapsed; detail=fleet after a wait); the rest revalidate it upstream
//               ── won ──────────> waitingForHead (revalidating the stale copy, if any), holding the lease: the entry
//                                  stored, or the copy a 304 refreshed (revalidated once per fleet), is shared with its CAS
//                                  (`fleetStore`); what is not stored leaves a pass marker (`fleetPass`); every client
//                                  gone hands the lease back (`fleetRelease`)
//               ── wait ─────────> askingFleet again after 10 ms, doubling to 40 ms; past fleet.wait, the origin
//                                  alone (never storing in the fleet: the lease is another host's)
//               ── pass marker ──> waitingForHead, alone (the winner's response could not be shared)
//               ── unavailable ──> waitingForHead, alone, labelled detail=fleet-unavailable
//               ── damaged ──────> waitingForHead, alone (the runner deleted the value)
//   One fleet lookup per key per host: the coalesced fetch asks, not each client.
//
// Rules
//   - A response that may not be shared (private, no-store, Set-Cookie, Vary: *) goes to the leader only; the other
//     waiters go upstream on their own. Waiters whose request selects another variant (their fields differ in what
//     the response's Vary names) go to a fetch of their variant (`redispatchToVariants`); from a fetch that was
//     already one variant's, they go on their own (an origin that changes its Vary cannot bounce them further).
//   - A failure before the head went out answers every waiter with the error's status and reason; after it, every
//     waiter's connection is closed (abort), so no short body passes as complete. Nothing is stored.
//   - On success the entry is stored first, then the waiters are ended, then the fetch finishes.
//   - When the last waiter goes, the transfer is cancelled unless complete-abandoned-fetches is on or a HEAD client
//     was answered from it (the fetch then runs on to fill the cache).
//   - A Range request (GET) on a 200 whose length is known gets a 206 for its part as soon as the head is in, and the
//     part's bytes as they arrive (a slice of each chunk); it ends when its part is out, while the fetch runs on for
//     the others or to fill the cache. 416 when no byte is in its range; the whole response when the range asks for
//     several parts or an If-Range does not hold, or the length is not known (RFC 9110 14.2 allows a 200).
//   - The body is kept (for the store and for late joiners) while it may be stored and fits; once it does not, or the
//     runner says the bodies in flight are over budget (`bodiesOverBudget`), it is streamed only and the fetch takes
//     no newcomer (`closeToNewcomers`).
//   - Not an image (forward and fetch modes): a status other than 200/203 (a 304 to a request that was not
//     conditional included), a declared Content-Type outside content-types, or first bytes that fail the content
//     sniff. A fetch-mode client gets the refusal (the origin's 4xx/5xx status, else 502, with the reason), and so
//     does every client under forward-non-images refuse. A forward-mode client under pass gets the response as the
//     origin sent it (its head without the untrusted fields, an error page nosniff, its body), never stored, labelled
//     fwd=bypass, detail=not-image; the fetch takes no newcomer, and the clients that joined it share it by the rule
//     above (`passNotImage`). Its size is still bounded by max-object-size (502 naming the key).

internal import ImageCacheSystem
internal import ImageCacheHTTP
internal import ImageCacheConfig
internal import ImageCacheStore
internal import ImageCacheUpstream
internal import Foundation
internal import Logging

struct FetchMachine {
    /// What the machine needs from the daemon's settings, fixed when the fetch starts.
    struct Rules {
        var maxObjectSizeBytes: Int
        var memoryObjectLimitBytes: Int
        /// A disk tier takes the stored body (then the body is kept up to max-object-size).
        var writesToDisk: Bool
        var completeAbandonedFetches: Bool
        var staleIfErrorSeconds: Double
        var contentPolicy: ContentPolicy
        var freshnessPolicy: FreshnessPolicy
        /// Forward mode: what the image checks refuse is passed on (pass) or refused (refuse).
        var forwardNonImages: ForwardNonImages = .pass
        /// The fleet tier, when one is configured.
        var fleet: FleetRules?
    }

    /// Longest pause between two polls of another host's fill, seconds: the last waiter's lag after the fill lands is at
    /// most this (bench/fleet.py measured 67 ms median with a 100 ms cap; bench/fleet_sim.py projects 34 ms with
    /// 50 ms), for one more tiny `mg` per 40 ms of waiting per host.
    static let fleetPollCap = 0.04

    /// The pause before the next poll of another host's fill, after `polls` answers "wait": 10 ms, doubling to
    /// `fleetPollCap` (the runner jitters it).
    static func fleetPollDelay(afterPolls polls: Int) -> Double {
        min(0.01 * Double(1 << min(polls, 2)), fleetPollCap)
    }

    /// How an entry another host stored serves a request here: `hit; ttl=N; detail=fleet` when it was there at the first
    /// lookup, `fwd=uri-miss; stored; collapsed; detail=fleet` when this host waited for the fill (a coalesced miss,
    /// fleet-wide); nil when the request may not be served from it (no-cache, too old for its max-age): it goes on.
    static func fleetOutcome(_ entry: CacheEntry, request: CacheControl, afterWaiting: Bool, now: Date,
                             forward: CacheOutcome.Forward = .miss) -> CacheOutcome? {
        let decision = CacheDecision.decide(stored: entry, request: request, now: now, defaultStaleWhileRevalidate: 0)
        guard case let .serve(serve) = decision else { return nil }
        switch serve {
        case .fresh, .stale(_, .maxStale):
            if afterWaiting { return CacheOutcome(forward: forward, stored: true, collapsed: true, detail: "fleet") }
            return decision.servedOutcome(tier: "fleet") ?? .hit(ttl: 0, detail: "fleet")
        default:
            return nil
        }
    }

    /// What the machine needs to know of the fleet tier.
    struct FleetRules {
        /// fleet.wait: longest a waiter waits for another host's fill, seconds.
        var waitSeconds: Double
        /// How long a pass marker stays: a response that may not be shared (hit-for-miss), seconds.
        var passSeconds = 60
        /// How long a pass marker stays after a failed fetch or an error answer, seconds.
        var failurePassSeconds = 2
    }

    /// The fleet's answer to a lookup, as the runner decoded it.
    enum FleetAnswer {
        /// A verified entry.
        case hit(CacheEntry)
        /// This host won the fill lease (the runner holds it).
        case won
        /// Another host fills.
        case wait
        /// The winner's response could not be shared.
        case pass(String)
        case unavailable(String)
        /// The value was damaged or foreign (the runner deleted it).
        case damaged(String)
    }

    /// The fleet tier's part in the fetch.
    enum FleetRole: Equatable {
        /// Not asked (no fleet, or not a miss of the URL's own response).
        case none
        /// Asked; `polls` lookups answered "wait" so far.
        case asking(polls: Int)
        /// This host holds the fill lease.
        case holdingLease
        /// Done with the fleet (answered, released, stored, or gone alone).
        case done
    }

    /// Why the image checks refuse a response (forward and fetch modes), as a client that is refused gets it.
    struct NotImage {
        /// The status a refused client gets: the origin's 4xx or 5xx, else 502.
        var status: Int
        var reason: String
        /// The error's kind in the metrics.
        var kind: String
    }

    /// A client waiting on the fetch (its sink stays with the runner).
    struct Waiter {
        let id: Int
        let request: ClientRequest
        /// Joined a fetch another request started.
        var collapsed = false
        var sentHead = false
        /// A Range request answered with this part of the response (206), its bytes sent as they arrive; it ends once
        /// they are all out.
        var part: ClosedRange<Int>?
    }

    /// A stored copy the fetch revalidates (a conditional request).
    struct Revalidation {
        var entry: CacheEntry
        /// The copy came from the disk tier with its body left in the file (a large entry).
        var bodyInFile: Bool
    }

    /// An upstream request under way.
    struct Upstream {
        var revalidating: Revalidation?
        var requestTime: Date
    }

    /// A response being checked or streamed (200/203; any status in reverse mode, or passed on as not an image).
    struct Response {
        var head: HTTPResponseHead
        /// The head as the origin sent it (before the untrusted fields): what a response passed on as not an image
        /// carries.
        var upstreamHead: HTTPResponseHead
        /// Why the image checks refused it, when it is passed on anyway (forward mode, forward-non-images pass): the
        /// origin's head and body go to the clients as they are, never stored.
        var notImage: String?
        var revalidating: Revalidation?
        var requestTime: Date
        var responseTime: Date
        var bodyLength: Int?
        var received = 0
        var storeDecision: StoreDecision
        /// The fields a qualified private names (lower-cased): the leader's only, never a joined client's or stored.
        var privateFields: [String] = []
        /// The body so far, kept to be stored or for a late joiner; nil once it is streamed only.
        var kept: [[UInt8]]? = []
        var keptBytes = 0

        /// Every byte of a Content-Length body has arrived (the transfer's own end may still be on its way).
        var bodyComplete: Bool { bodyLength.map { received >= $0 } ?? false }
    }

    enum State {
        /// Asking the disk tier (a memory miss, or the body of a large copy just confirmed by a 304 or kept by
        /// stale-if-error: `confirmed` is the outcome every waiter is then served with). `fallback`: a memory copy
        /// to revalidate when the disk's has no validators (one that landed between the lookup and the dispatch).
        case lookingOnDisk(confirmed: CacheOutcome?, removalsSeen: UInt64?, fallback: Revalidation?)
        /// Waiting for the fleet tier's answer (a lookup, or the next poll of another host's fill).
        /// (`revalidating`: the stale copy here that the origin is asked about if the fleet has no fresh one.)
        case askingFleet(revalidating: Revalidation?)
        case waitingForHead(Upstream)
        /// The image checks wait for the body's first bytes; chunks that came meanwhile are held back.
        case checkingBody(Response, prefix: [UInt8], heldBack: [[UInt8]])
        case streaming(Response)
        case finished
    }

    enum Action {
        /// Start the upstream transfer (cancelling any earlier one) with these extra request fields.
        case startTransfer(conditional: HTTPHeaders)
        case cancelTransfer
        /// Ask the disk tier again for the leader's variant and report with `diskAnswered`.
        case lookOnDisk
        /// Look the key up in the fleet tier after `after` seconds (a poll; 0: now), and report with `fleetAnswered`.
        case askFleet(after: Double)
        /// Share the stored entry through the fleet tier with the lease, for `ttl` seconds.
        case fleetStore(CacheEntry, ttl: Int)
        /// Leave a pass marker with the lease (`reason`, kept `ttl` seconds): the waiters fetch for themselves.
        case fleetPass(reason: String, ttl: Int)
        /// Hand the lease back: the next host to ask fills.
        case fleetRelease
        /// A waiter joined; `waiters` counts them now.
        case waiterAttached(waiters: Int)
        /// Send a response head (`outcome`: how it was produced, already rendered in its fields); `ends`: the
        /// response ends with it (a HEAD request).
        case sendHead(HTTPResponseHead, outcome: CacheOutcome, bodyLength: Int?, to: Int, ends: Bool)
        /// Send an interim 1xx response (103 Early Hints) to these waiters, before their heads.
        case sendInterim(HTTPResponseHead, to: [Int])
        case sendBody([UInt8], to: [Int])
        /// Send a whole response (head and body) in one call.
        case respondWhole(HTTPResponseHead, outcome: CacheOutcome, body: [UInt8], to: Int)
        /// Answer from a stored copy (its body, or `file` for a large one on disk).
        case respondStored(CacheEntry, outcome: CacheOutcome, file: FileBody?, now: Date, to: Int)
        case end([Int])
        case fail([Int], status: Int, reason: String)
        case abort([Int])
        case store(CacheEntry)
        case refresh(CacheEntry, bodyInFile: Bool)
        case keepInMemory(CacheEntry)
        case promote(CacheEntry, removalsSeen: UInt64)
        /// Remove one stored variant of the URL (outdated), or every variant (`nil`: the resource is gone).
        case remove(variant: String?)
        /// The URL's stored copy was replaced by another version (its validator changed): the renditions made from
        /// the old one (transforms) go, in both tiers.
        case removeRenditions
        /// Send these waiters to a fetch of the variant `head`'s Vary selects for each.
        case redispatchToVariants([Waiter], of: HTTPResponseHead)
        /// Send these waiters upstream on their own.
        case redispatchAlone([Waiter])
        /// Send these waiters' requests to the origin as they are, uncached (Passthrough): Range requests for an object
        /// over max-object-size in reverse mode, whose range the origin can answer.
        case passUpstream([Waiter])
        /// Answer a Range request 416: no part of the `length`-byte response is in its range.
        case refuseRange(outcome: CacheOutcome, length: Int, to: Int)
        /// Take no more waiters.
        case closeToNewcomers
        case finish
        case log(Logger.Level, String)
        /// An error to count under `kind` and list with its reason (and the status a client got, if one did).
        case countError(kind: String, status: Int?, reason: String)
    }

    let key: CacheKey
    let leader: ClientRequest
    let reason: CacheOutcome.Forward
    /// The variant id this fetch was started for, when it serves waiters another response's Vary sent away ("": the
    /// URL's fetch, whatever variant it brings).
    let variant: String
    let rules: Rules

    private(set) var state: State
    private(set) var waiters: [Waiter] = []
    /// Still taking new waiters.
    private(set) var joinable = true
    /// It runs to the end to fill the cache even with no waiter left: a HEAD client was answered from it, or it
    /// revalidates a copy served stale (stale-while-revalidate).
    private(set) var fillsCache = false
    /// The actions of the event being handled.
    private var actions: [Action] = []
    /// The fleet tier's part (see the fleet stage at the top).
    private(set) var fleetRole = FleetRole.none
    /// The Cache-Status detail of the origin's answer: "fleet-unavailable" when the fleet could not be asked.
    private var fleetDetail: String?

    /// A fetch for `key` led by `leader` (`revalidating`: a stale copy to revalidate). `start` or `start(fromDisk:)`
    /// takes its first step.
    /// (`bodyInFile`: the copy came from the disk tier with its body left in its file. `fillsCache`: a background
    /// revalidation, which runs with no waiter.)
    init(key: CacheKey, leader: ClientRequest, reason: CacheOutcome.Forward, variant: String = "", rules: Rules,
         revalidating: CacheEntry?, bodyInFile: Bool = false, fillsCache: Bool = false, now: Date) {
        self.key = key
        self.leader = leader
        self.reason = reason
        self.variant = variant
        self.rules = rules
        self.fillsCache = fillsCache
        state = .waitingForHead(Upstream(revalidating: revalidating.map { Revalidation(entry: $0, bodyInFile: bodyInFile) },
                                         requestTime: now))
    }

    var isStreaming: Bool { if case .streaming = state { true } else { false } }
    var isFinished: Bool { if case .finished = state { true } else { false } }
    /// Body bytes the fetch keeps (to store, for late joiners).
    var keptBytes: Int { if case let .streaming(response) = state { response.keptBytes } else { 0 } }
    var keepsBody: Bool {
        switch state {
        case let .streaming(response), let .checkingBody(response, _, _): response.kept != nil
        default: false
        }
    }

    // MARK: events

    /// The first step when the disk was not asked: the upstream request (conditional when revalidating).
    mutating func start() -> [Action] {
        if case let .waitingForHead(upstream) = state {
            if asksFleet, upstream.revalidating?.bodyInFile != true {
                askFleet(revalidating: upstream.revalidating)
            } else {
                actions.append(.startTransfer(conditional: upstream.revalidating?.entry.conditionalHeaders ?? HTTPHeaders()))
            }
        }
        return takeActions()
    }

    /// The first step when the caller already has the disk tier's answer for the leader's variant (`removalsSeen`:
    /// the memory tier's removal count read before it asked, for a promotion).
    mutating func start(fromDisk answer: DiskLookup?, removalsSeen: UInt64, now: Date) -> [Action] {
        var fallback: Revalidation?
        if case let .waitingForHead(upstream) = state { fallback = upstream.revalidating }
        state = .lookingOnDisk(confirmed: nil, removalsSeen: removalsSeen, fallback: fallback)
        handleDisk(answer, now: now)
        return takeActions()
    }

    /// Adds a client. A late one gets the head and the body so far at once.
    mutating func attach(_ waiter: Waiter, collapsed: Bool) -> [Action] {
        var waiter = waiter
        waiter.collapsed = collapsed
        switch state {
        case .waitingForHead, .lookingOnDisk, .askingFleet:
            waiters.append(waiter)
            actions.append(.waiterAttached(waiters: waiters.count))
        case let .checkingBody(response, _, _):
            guard varyAllows(waiter, for: response.head) else {
                redispatch([waiter], of: response.head)
                break
            }
            waiters.append(waiter)
            actions.append(.waiterAttached(waiters: waiters.count))
        case let .streaming(response):
            guard varyAllows(waiter, for: response.head) else {
                redispatch([waiter], of: response.head)
                break
            }
            waiters.append(waiter)
            actions.append(.waiterAttached(waiters: waiters.count))
            startWaiters([waiter.id], response)
            if waiter.request.isHead {
                dropAnsweredHeadWaiters()
                break
            }
            // What came before it, from the kept body (a fetch that keeps none takes no newcomer).
            var offset = 0
            for chunk in response.kept ?? [] {
                deliver(chunk, at: offset, to: [waiter.id], response)
                offset += chunk.count
            }
        case .finished:
            // A finished fetch is not in the coalescer; reaching here is a programming error.
            preconditionFailure("attach to a finished fetch")
        }
        return takeActions()
    }

    /// A client went away.
    mutating func detach(_ id: Int) -> [Action] {
        if isFinished { return [] }
        waiters.removeAll { $0.id == id }
        if waiters.isEmpty && !rules.completeAbandonedFetches && !fillsCache {
            if fleetRole == .holdingLease {
                // Another host's next poll wins the lease and fills instead.
                fleetRole = .done
                actions.append(.fleetRelease)
            }
            actions.append(.log(.debug, "every client left; cancelling upstream \(key)"))
            actions.append(.cancelTransfer)
            finish()
        }
        return takeActions()
    }

    /// The fleet tier's answer to `askFleet` (`waited`: seconds since the first lookup of this fetch).
    mutating func fleetAnswered(_ answer: FleetAnswer, waited: Double, now: Date) -> [Action] {
        guard case let .askingFleet(revalidating) = state, case let .asking(polls) = fleetRole else {
            // Too late (every client went): a lease won meanwhile goes back at once.
            if case .won = answer { actions.append(.fleetRelease) }
            return takeActions()
        }
        switch answer {
        case let .hit(entry):
            fleetRole = .done
            serveFleetEntry(entry, afterWaiting: polls > 0, now: now)
        case .won:
            fleetRole = .holdingLease
            restartUpstream(revalidating: revalidating, now: now)
        case .wait:
            guard let fleet = rules.fleet, waited < fleet.waitSeconds else {
                actions.append(.log(.notice, "\(key): waited \(Int(waited * 1000)) ms for another host's fill (fleet.wait); fetching alone"))
                fleetRole = .done
                restartUpstream(revalidating: revalidating, now: now)
                return takeActions()
            }
            fleetRole = .asking(polls: polls + 1)
            actions.append(.askFleet(after: FetchMachine.fleetPollDelay(afterPolls: polls)))
        case let .pass(reason):
            actions.append(.log(.debug, "\(key): the fleet's fill was not shared (\(reason)); fetching alone"))
            fleetRole = .done
            restartUpstream(revalidating: revalidating, now: now)
        case let .unavailable(reason):
            actions.append(.log(.debug, "\(key): fleet tier unavailable (\(reason)); fetching alone"))
            fleetRole = .done
            fleetDetail = "fleet-unavailable"
            restartUpstream(revalidating: revalidating, now: now)
        case let .damaged(reason):
            actions.append(.log(.warning, "\(key): the fleet's value was refused and deleted: \(reason)"))
            actions.append(.countError(kind: "fleet_damaged", status: nil, reason: reason))
            fleetRole = .done
            restartUpstream(revalidating: revalidating, now: now)
        }
        return takeActions()
    }

    /// The fleet stage applies: a fleet tier, and a miss of the URL's own response or a stale copy of it to revalidate
    /// (revalidated once per fleet: the host that wins the lease asks the origin, the others take what it stores). Not
    /// for a request's own no-cache (`.request`: the origin must confirm it), another variant, or a bypass.
    private var asksFleet: Bool {
        rules.fleet != nil && fleetRole == .none && (reason == .miss || reason == .stale) && variant.isEmpty
    }

    private mutating func askFleet(revalidating: Revalidation? = nil) {
        fleetRole = .asking(polls: 0)
        state = .askingFleet(revalidating: revalidating)
        actions.append(.askFleet(after: 0))
    }

    /// Upstream for the stale copy `revalidating`, through the fleet stage when it applies.
    private mutating func revalidateViaFleet(_ revalidating: Revalidation, now: Date) {
        if asksFleet, !revalidating.bodyInFile { return askFleet(revalidating: revalidating) }
        restartUpstream(revalidating: revalidating, now: now)
    }

    /// An entry another host stored: kept here, and served to each waiter it may serve (its variant, when it varies;
    /// fresh, or within its max-stale); a waiter whose request selects another variant goes to that variant's fetch;
    /// the others revalidate it upstream (no lease: this host is not filling for the fleet).
    private mutating func serveFleetEntry(_ entry: CacheEntry, afterWaiting: Bool, now: Date) {
        actions.append(.store(entry))
        splitOffOtherVariants(entry)
        var remaining: [Waiter] = []
        for waiter in waiters {
            guard let outcome = FetchMachine.fleetOutcome(entry, request: waiter.request.cacheControl, afterWaiting: afterWaiting,
                                                          now: now, forward: reason == .stale ? .stale : .miss) else {
                remaining.append(waiter)
                continue
            }
            actions.append(.respondStored(entry, outcome: outcome, file: nil, now: now, to: waiter.id))
        }
        waiters = remaining
        guard !waiters.isEmpty else { return finish() }
        restartUpstream(revalidating: entry.hasValidators ? Revalidation(entry: entry, bodyInFile: false) : nil, now: now)
    }

    /// The disk tier's answer to `lookOnDisk` (or to the lookup the fetch began with).
    mutating func diskAnswered(_ result: DiskLookup?, now: Date) -> [Action] {
        handleDisk(result, now: now)
        return takeActions()
    }

    /// An interim response from the origin (reverse mode), to the waiters that have no head yet: whole to the client
    /// whose request the origin is answering (the leader, not collapsed); the clients that joined the fetch get only
    /// its Link fields (a 103's preload hints are about the resource), never another client's cookies or fields, and
    /// nothing when it has none.
    mutating func receiveInterim(_ head: HTTPResponseHead) -> [Action] {
        guard case .waitingForHead = state else { return [] }
        let waiting = waiters.filter { !$0.sentHead }
        var actions: [Action] = []
        let own = waiting.filter { !$0.collapsed }.map(\.id)
        if !own.isEmpty { actions.append(.sendInterim(head, to: own)) }
        let joined = waiting.filter(\.collapsed).map(\.id)
        let links = head.headers.values("Link")
        if !joined.isEmpty && !links.isEmpty {
            let shared = HTTPResponseHead(status: head.status, reason: head.reason, headers: HTTPHeaders(links.map { ("Link", $0) }))
            actions.append(.sendInterim(shared, to: joined))
        }
        return actions
    }

    mutating func receiveHead(_ head: HTTPResponseHead, url: String, redirects: [Int], now: Date) -> [Action] {
        handleHead(head, url: url, redirects: redirects, now: now)
        return takeActions()
    }

    mutating func receiveBody(_ chunk: [UInt8], now: Date) -> [Action] {
        handleBody(chunk, now: now)
        return takeActions()
    }

    mutating func receiveEnd(now: Date) -> [Action] {
        if case .checkingBody = state { checkBody(complete: true) }
        switch state {
        case let .streaming(response):
            if let length = response.bodyLength, length != response.received {
                fail(.broken("received \(response.received) of \(length) body bytes"), now: now)
            } else {
                store(response)
                endAll()
            }
        case .waitingForHead:
            fail(.broken("the transfer ended without a response"), now: now)
        default:
            break
        }
        return takeActions()
    }

    mutating func receiveFailure(_ error: UpstreamError, now: Date) -> [Action] {
        if !isFinished { fail(error, now: now) }
        return takeActions()
    }

    /// The runner found the bodies in flight over in-flight-limit: the kept body is let go (streamed, not stored).
    mutating func bodiesOverBudget(limit: Int) -> [Action] {
        guard case var .streaming(response) = state, response.kept != nil else { return [] }
        actions.append(.log(.notice, "\(key): not stored, the bodies in flight are over in-flight-limit (\(limit) bytes)"))
        response.storeDecision = .dontStore(reason: "the bodies in flight were over in-flight-limit")
        response.kept = nil
        response.keptBytes = 0
        state = .streaming(response)
        closeToNewcomers()
        if waiters.isEmpty {
            // Kept on only to fill the cache (complete-abandoned-fetches, a HEAD's fill), which it no longer will.
            actions.append(.cancelTransfer)
            finish()
        }
        return takeActions()
    }

    // MARK: the disk stage

    private mutating func handleDisk(_ result: DiskLookup?, now: Date) {
        guard case let .lookingOnDisk(confirmed, removalsSeen, fallback) = state else { return }
        let stored: CacheEntry?, file: FileBody?
        switch result {
        case let .entry(entry): (stored, file) = (entry, nil)
        case let .stream(head, body): (stored, file) = (head, body)
        case nil: (stored, file) = (nil, nil)
        }
        // Nothing there, or (after a purge or eviction meanwhile) another variant: fetch it whole, once.
        guard let stored, stored.vary?.matches(leader.forwardedHeaders) ?? true else {
            if stored == nil, confirmed == nil, asksFleet, !waiters.isEmpty { return askFleet() }
            return goUpstream(revalidating: nil, now: now)
        }
        splitOffOtherVariants(stored)
        guard !waiters.isEmpty else { return finish() }
        if file == nil {
            if confirmed != nil {
                actions.append(.keepInMemory(stored))
            } else if let removalsSeen {
                actions.append(.promote(stored, removalsSeen: removalsSeen))
            }
        }
        let (served, remaining, revalidatesInBackground) = whomServes(stored, among: waiters, confirmed: confirmed, now: now)
        if let file {
            return serveLargeCopy(stored, file: file, served: served, allServed: remaining.isEmpty,
                                  revalidatesInBackground: revalidatesInBackground, fallback: fallback, now: now)
        }
        for (waiter, outcome) in served {
            actions.append(.respondStored(stored, outcome: outcome, file: nil, now: now, to: waiter.id))
        }
        waiters = remaining
        let revalidating = stored.hasValidators ? Revalidation(entry: stored, bodyInFile: false)
            : fallback ?? Revalidation(entry: stored, bodyInFile: false)
        if waiters.isEmpty {
            guard revalidatesInBackground else { return finish() }
            fillsCache = true
            return revalidateViaFleet(revalidating, now: now)
        }
        revalidateViaFleet(revalidating, now: now)
    }

    /// Who the stored copy serves: everyone after a confirmation; else whom it is fresh for (or whose max-stale
    /// or the response's stale-while-revalidate allows it). `revalidatesInBackground`: one was served stale by
    /// stale-while-revalidate.
    private func whomServes(_ stored: CacheEntry, among waiters: [Waiter], confirmed: CacheOutcome?, now: Date)
        -> (served: [(Waiter, CacheOutcome)], remaining: [Waiter], revalidatesInBackground: Bool) {
        var served: [(Waiter, CacheOutcome)] = []
        var remaining: [Waiter] = []
        var revalidatesInBackground = false
        for waiter in waiters {
            if let confirmed {
                served.append((waiter, confirmed))
                continue
            }
            let decision = CacheDecision.decide(stored: stored, request: waiter.request.cacheControl, now: now,
                                                defaultStaleWhileRevalidate: waiter.request.staleWhileRevalidate)
            if let outcome = decision.servedOutcome(tier: "disk") {
                served.append((waiter, outcome))
                revalidatesInBackground = revalidatesInBackground || decision.revalidatesInBackground
            } else {
                remaining.append(waiter)
            }
        }
        return (served, remaining, revalidatesInBackground)
    }

    /// A stored copy whose large body is in `file`: sent to all from its file (one FileBody, sendfile per
    /// connection) only when it serves all (`allServed`); else the origin is asked once for all of them.
    private mutating func serveLargeCopy(_ stored: CacheEntry, file: FileBody, served: [(Waiter, CacheOutcome)],
                                         allServed: Bool, revalidatesInBackground: Bool, fallback: Revalidation?,
                                         now: Date) {
        guard allServed else {
            // (A copy without validators is fetched whole, and is still what stale-if-error may serve.)
            let revalidating = stored.hasValidators ? Revalidation(entry: stored, bodyInFile: true)
                : fallback ?? Revalidation(entry: stored, bodyInFile: true)
            return goUpstream(revalidating: revalidating, now: now)
        }
        if !revalidatesInBackground { closeToNewcomers() }
        for (waiter, outcome) in served {
            actions.append(.respondStored(stored, outcome: outcome, file: file, now: now, to: waiter.id))
        }
        waiters = []
        guard revalidatesInBackground else { return finish() }
        // Served stale: the copy is revalidated with no one waiting (newcomers join).
        fillsCache = true
        restartUpstream(revalidating: Revalidation(entry: stored, bodyInFile: true), now: now)
    }

    /// Leaves the disk stage for the origin. (No waiter said only-if-cached: CacheDecision refused those where they
    /// were looked up.)
    private mutating func goUpstream(revalidating: Revalidation?, now: Date) {
        guard !waiters.isEmpty else { return finish() }
        restartUpstream(revalidating: revalidating, now: now)
    }

    /// A new upstream request, whoever waits (after a 304 the fetch may be running on with no waiter, to fill the
    /// cache: complete-abandoned-fetches).
    private mutating func restartUpstream(revalidating: Revalidation?, now: Date) {
        state = .waitingForHead(Upstream(revalidating: revalidating, requestTime: now))
        actions.append(.startTransfer(conditional: revalidating?.entry.conditionalHeaders ?? HTTPHeaders()))
    }

    /// Waiters whose request does not match the stored variant's Vary fields go to a fetch of their own variant.
    private mutating func splitOffOtherVariants(_ entry: CacheEntry) {
        guard let vary = entry.vary else { return }
        let others = waiters.filter { !vary.matches($0.request.forwardedHeaders) }
        guard !others.isEmpty else { return }
        waiters.removeAll { waiter in others.contains { $0.id == waiter.id } }
        redispatch(others, of: entry.head)
    }

    /// After a 304 (or stale-if-error) for a large disk copy: the body streams from its file, looked up again.
    private mutating func serveFromDisk(confirmed outcome: CacheOutcome) {
        actions.append(.cancelTransfer)
        state = .lookingOnDisk(confirmed: outcome, removalsSeen: nil, fallback: nil)
        actions.append(.lookOnDisk)
    }

    // MARK: the response

    private mutating func handleHead(_ upstreamHead: HTTPResponseHead, url: String, redirects: [Int], now: Date) {
        guard case let .waitingForHead(upstream) = state else { return }
        var head = upstreamHead
        if !leader.trusted { UntrustedResponse.apply(to: &head.headers) }
        // (A 304 answers a conditional request: a copy without validators was asked for whole.)
        if let revalidating = upstream.revalidating, revalidating.entry.hasValidators, head.status == 304 {
            return notModified(head, revalidating: revalidating, requestTime: upstream.requestTime, now: now)
        }
        // Any other 304 answers a request that was not conditional (the client's own conditionals never go upstream
        // on a fetch): nothing was revalidated. Reverse mode passes it on as the origin's status, uncached and
        // labelled PASS (`passOn`); forward and fetch modes take it for what is not an image (`imageRefusal`).
        let notConditional = head.status == 304
        // 200 and 203 are the images; reverse mode passes every other status on as it is.
        let isImage = head.status == 200 || head.status == 203
        if !isImage, endsInsteadOfPassing(head, revalidating: upstream.revalidating != nil, now: now) { return }
        var notImage: String?
        if leader.mode == .reverse {
            // (An image's declared type is checked in every mode: a configured origin's too.)
            if !isImage { head = passOn(head) } else if let why = refusedImageType(head) { return refuseAll(status: 502, reason: why) }
        } else if let refusal = imageRefusal(head, notConditional: notConditional) {
            // Forward mode under forward-non-images pass: the origin's own head goes on, else the refusal.
            guard passNotImage(refusal, status: head.status) else { return }
            head = upstreamHead
            head.markErrorPage()
            notImage = refusal.reason
        }
        let responseCacheControl = rules.freshnessPolicy.cacheControl(head.headers, trusted: leader.trusted)
        // Another status (reverse mode) is shared, stored or streamed by the same rules as an image, without the image
        // checks; what is passed on as not an image is shared by those rules too, never stored.
        let storeDecision = notImage.map { StoreDecision.dontStore(reason: "not an image: \($0)") }
            ?? storeDecision(for: head, cacheControl: responseCacheControl, url: url, redirects: redirects,
                             notConditional: notConditional)
        // A 204 or 304 has no body whatever its Content-Length says (RFC 9110 8.6).
        let bodyLength = head.status == 204 || head.status == 304 ? 0
            : head.headers["Content-Length"].flatMap { Int($0.trimmingOWS()) }
        if bodyLength.map({ $0 > rules.maxObjectSizeBytes }) ?? false {
            return fail(.tooLarge(limit: rules.maxObjectSizeBytes), now: now)
        }
        let shareable = Storability.isShareable(head, cacheControl: responseCacheControl)
        keepWaitersWhoMayHave(head, shareable: shareable)
        // (A response passed on as not an image is for its clients alone: with none left it has no use.)
        if waiters.isEmpty && (notImage != nil || (!rules.completeAbandonedFetches && !fillsCache)) {
            actions.append(.cancelTransfer)
            return finish()
        }
        let response = Response(head: head, upstreamHead: upstreamHead, notImage: notImage, revalidating: upstream.revalidating,
                                requestTime: upstream.requestTime, responseTime: now, bodyLength: bodyLength,
                                storeDecision: storeDecision, privateFields: responseCacheControl.privateFields,
                                kept: notImage == nil ? [] : nil)
        if abandonsUselessFill(response, shareable: shareable) { return }
        state = .checkingBody(response, prefix: [], heldBack: [])
        checkBody(complete: false)
    }

    /// A status other than 200 or 203 (`revalidating`: a stored copy was being revalidated) may end the fetch before
    /// it is passed on or refused: a 404 or 410 removes every stored variant (the resource is gone); a 5xx may serve
    /// the stale copy instead (stale-if-error). True when the fetch ended here (served stale).
    private mutating func endsInsteadOfPassing(_ head: HTTPResponseHead, revalidating: Bool, now: Date) -> Bool {
        if revalidating && (head.status == 404 || head.status == 410) {
            actions.append(.remove(variant: nil))   // the resource is gone: every variant of it
        }
        return head.status >= 500 && serveStaleIfError(because: "upstream answered \(head.status)", now: now)
    }

    /// Reverse mode passes a status other than 200 or 203 on as it is: the head marked as an error page.
    private mutating func passOn(_ upstreamHead: HTTPResponseHead) -> HTTPResponseHead {
        var head = upstreamHead
        if head.status >= 400 {
            actions.append(.countError(kind: "upstream_status_\(head.status / 100)xx", status: head.status,
                                       reason: "upstream answered \(head.status) \(head.reason) (passed on)"))
        }
        head.markErrorPage()
        return head
    }

    /// Why the image checks refuse the response `head` (forward and fetch modes); nil when they accept it (its first
    /// bytes are judged once they arrive: `checkBody`). `notConditional`: a 304 to a request that was not conditional.
    private func imageRefusal(_ head: HTTPResponseHead, notConditional: Bool) -> NotImage? {
        if notConditional {
            return NotImage(status: 502, reason: "upstream answered 304 Not Modified to a request that was not conditional",
                            kind: "upstream_status_3xx")
        }
        guard head.status == 200 || head.status == 203 else {
            return NotImage(status: (400...599).contains(head.status) ? head.status : 502,
                            reason: "upstream answered \(head.status) \(head.reason)", kind: "upstream_status_\(head.status / 100)xx")
        }
        return refusedImageType(head).map { NotImage(status: 502, reason: $0, kind: "content_refused") }
    }

    /// Whether `waiter` is given a response the image checks refuse, as the origin sent it: a forward-mode client
    /// under forward-non-images pass. (A fetch-mode client may join a forward client's fetch: they share a key.)
    private func passesNotImages(_ waiter: Waiter) -> Bool {
        waiter.request.mode == .forward && rules.forwardNonImages == .pass
    }

    /// A response the image checks refuse (`refusal`; `status`: the origin's). The waiters it may be passed to keep
    /// waiting for it, and the fetch takes no newcomer; every other waiter gets the refusal. False when no one takes
    /// it: the fetch is over, refused.
    private mutating func passNotImage(_ refusal: NotImage, status: Int) -> Bool {
        let refused = waiters.filter { !passesNotImages($0) }
        guard refused.count < waiters.count else {
            refuseAll(status: refusal.status, reason: refusal.reason, kind: refusal.kind)
            return false
        }
        waiters = waiters.filter(passesNotImages)
        if !refused.isEmpty {
            actions.append(.log(.notice, "\(refusal.status) \(key): \(refusal.reason)"))
            actions.append(.countError(kind: refusal.kind, status: refusal.status, reason: refusal.reason))
            actions.append(.fail(refused.map(\.id), status: refusal.status, reason: refusal.reason))
        } else if status >= 400 {
            actions.append(.countError(kind: refusal.kind, status: status, reason: refusal.reason + " (passed on)"))
        }
        actions.append(.log(.info, "\(key): not an image (\(refusal.reason)); passed on, not stored"))
        closeToNewcomers()
        return true
    }

    /// Whether the response `head` (reached at `url` through `redirects`) may be stored. `notConditional`: a 304 to
    /// a request that was not conditional (passed on in reverse mode, never stored).
    private func storeDecision(for head: HTTPResponseHead, cacheControl responseCacheControl: CacheControl, url: String,
                               redirects: [Int], notConditional: Bool) -> StoreDecision {
        if notConditional { return .dontStore(reason: "a 304 to a request that was not conditional") }
        // Reached through a redirect: keeping it under this URL is right only if every hop was permanent (301, 308);
        // a temporary one (302, 303, 307) may point elsewhere tomorrow.
        if let temporary = redirects.first(where: { $0 != 301 && $0 != 308 }) {
            return .dontStore(reason: "reached through a \(temporary) redirect to \(url)")
        }
        // HEAD requests are fetched with GET (as nginx's proxy_cache_convert_head does), so judge the GET.
        var fetched = leader.head
        fetched.method = "GET"
        return Storability.decide(request: fetched, requestCacheControl: leader.cacheControl,
                                  response: head, responseCacheControl: responseCacheControl,
                                  allStatuses: leader.mode == .reverse,
                                  negativeTTL: rules.freshnessPolicy.negativeTTLSeconds)
    }

    /// Why an image response's declared Content-Type is refused; nil when it is accepted.
    private func refusedImageType(_ head: HTTPResponseHead) -> String? {
        let contentType: String?
        switch ContentPolicy.declaredType(head.headers) {
        case let .ambiguous(why): return why
        case .none: contentType = nil
        case let .one(value): contentType = value
        }
        if case let .refused(why) = rules.contentPolicy.checkContentType(contentType) { return why }
        return nil
    }

    /// Share the response only with waiters who may have it: the collapsed ones go upstream alone when it is not
    /// shareable, or to their own variant's fetch when its Vary does not match them.
    private mutating func keepWaitersWhoMayHave(_ head: HTTPResponseHead, shareable: Bool) {
        if !shareable {
            closeToNewcomers()
            let others = waiters.filter(\.collapsed)
            waiters.removeAll(where: \.collapsed)
            if !others.isEmpty { actions.append(.redispatchAlone(others)) }
        } else if let vary = VaryKey.make(response: head, request: leader.forwardedHeaders) {
            let mismatched = waiters.filter { $0.collapsed && !vary.matches($0.request.forwardedHeaders) }
            waiters.removeAll { waiter in mismatched.contains { $0.id == waiter.id } }
            redispatch(mismatched, of: head)
        }
    }

    /// A 304 for the copy being revalidated.
    private mutating func notModified(_ head: HTTPResponseHead, revalidating: Revalidation, requestTime: Date, now: Date) {
        let entry = revalidating.entry
        guard entry.isSelected(by: head) else {
            // The 304 names other validators than the stored ones: drop the copy and fetch it whole.
            actions.append(.log(.notice, "\(key): 304 does not match the stored validators; fetching the whole response"))
            actions.append(.remove(variant: entry.variantID))
            actions.append(.cancelTransfer)
            return restartUpstream(revalidating: nil, now: now)
        }
        let refreshed = entry.refreshed(with: head, requestTime: requestTime, responseTime: now,
                                        policy: rules.freshnessPolicy)
        // The merged head may now forbid storing (a 304 with no-store or private): serve it, keep nothing.
        var asGET = leader.head
        asGET.method = "GET"
        let keep = Storability.decide(request: asGET, requestCacheControl: leader.cacheControl,
                                      response: refreshed.head, responseCacheControl: refreshed.cacheControl,
                                      allStatuses: leader.mode == .reverse,
                                      negativeTTL: rules.freshnessPolicy.negativeTTLSeconds) == .store
        actions.append(keep ? .refresh(refreshed, bodyInFile: revalidating.bodyInFile) : .remove(variant: entry.variantID))
        if fleetRole == .holdingLease {
            // Revalidated once for the fleet: the refreshed copy (head and body) is what the other hosts take.
            fleetRole = .done
            if keep, !revalidating.bodyInFile, let ttl = FleetEnvelope.sharedTTL(of: refreshed, now: now) {
                actions.append(.fleetStore(refreshed, ttl: ttl))
            } else {
                actions.append(.fleetPass(reason: "the revalidated copy is not shared", ttl: rules.fleet?.passSeconds ?? 60))
            }
        }
        if revalidating.bodyInFile {
            // The body is in the file: the refreshed header was written; stream the body from there. Not kept: the
            // file is gone, so fetch the whole response instead.
            if keep {
                // No one waits (a background revalidation): the refreshed header is all there was to do.
                if waiters.isEmpty { return finish() }
                return serveFromDisk(confirmed: CacheOutcome(forward: reason, forwardStatus: 304, revalidated: true, stored: true))
            }
            actions.append(.cancelTransfer)
            return restartUpstream(revalidating: nil, now: now)
        }
        // A 304 that may not be shared (Set-Cookie, private, no-store, Vary: *) goes to the leader only, as a 200
        // would: the others go upstream on their own.
        let shareable = Storability.isShareable(refreshed.head, cacheControl: refreshed.cacheControl)
        var unshared: [Waiter] = []
        var otherVariants: [Waiter] = []
        for waiter in waiters {
            if !shareable && waiter.collapsed {
                unshared.append(waiter)
            } else if let vary = refreshed.vary, !vary.matches(waiter.request.forwardedHeaders) {
                otherVariants.append(waiter)
            } else {
                var outcome = CacheOutcome(forward: reason, forwardStatus: 304, revalidated: true, stored: keep)
                outcome.collapsed = waiter.collapsed
                actions.append(.respondStored(refreshed, outcome: outcome, file: nil, now: now, to: waiter.id))
            }
        }
        waiters = []
        if !unshared.isEmpty { actions.append(.redispatchAlone(unshared)) }
        redispatch(otherVariants, of: refreshed.head)
        // No cancel: the 304 has no body, and letting it end keeps the connection reusable.
        finish()
    }

    private mutating func handleBody(_ chunk: [UInt8], now: Date) {
        var response: Response, checking: (prefix: [UInt8], heldBack: [[UInt8]])?
        switch state {
        case let .checkingBody(checked, prefix, heldBack): (response, checking) = (checked, (prefix, heldBack))
        case let .streaming(streamed): (response, checking) = (streamed, nil)
        default: return
        }
        if let length = response.bodyLength, response.received + chunk.count > length {
            return fail(.broken("more body bytes than the Content-Length of \(length)"), now: now)
        }
        // The state lets go of its copies, so the kept chunks are appended to in place, not copied per chunk.
        state = .finished
        response.received += chunk.count
        var stopsKeeping = false
        if response.kept != nil {
            response.kept!.append(chunk)
            response.keptBytes += chunk.count
            // With a disk tier the body is kept whole (up to max-object-size) to be written there.
            if !rules.writesToDisk, response.received > rules.memoryObjectLimitBytes {
                // Too large to keep: stream it on, but stop retaining it and take no new waiters.
                response.kept = nil
                response.keptBytes = 0
                stopsKeeping = true
            }
        }
        if var checking = checking.take() {
            if checking.prefix.count < ImageSignature.bytesNeeded {
                checking.prefix.append(contentsOf: chunk.prefix(ImageSignature.bytesNeeded - checking.prefix.count))
            }
            checking.heldBack.append(chunk)
            state = .checkingBody(response, prefix: checking.prefix, heldBack: checking.heldBack)
            if stopsKeeping, abandonsUselessFill(response) { return }
            if stopsKeeping { closeToNewcomers() }
            checkBody(complete: response.bodyComplete)
        } else {
            state = .streaming(response)
            if stopsKeeping, abandonsUselessFill(response) { return }
            if stopsKeeping { closeToNewcomers() }
            // Store before the last bytes go out: a client that has its whole body and asks again must hit.
            if response.bodyComplete { store(response) }
            deliver(chunk, at: response.received - chunk.count, to: nil, response)
            if isFinished { return }
            if response.bodyComplete { endAll() }
        }
    }

    /// Runs the image checks on the first bytes; once they pass, the head goes out and streaming starts.
    private mutating func checkBody(complete: Bool) {
        guard case var .checkingBody(response, prefix, heldBack) = state else { return }
        // The image checks are for images (200, 203); another status (reverse mode), or what is passed on as not an
        // image, is the origin's as it is.
        let isImage = (response.head.status == 200 || response.head.status == 203) && response.notImage == nil
        switch isImage ? rules.contentPolicy.check(contentType: response.head.headers["Content-Type"], prefix: prefix[...],
                                                   complete: complete) : .allowed {
        case .needMoreBytes:
            return
        case let .refused(why):
            // No head went out yet: the clients that take what is not an image get the origin's response after all.
            guard passNotImage(NotImage(status: 502, reason: why, kind: "content_refused"), status: response.head.status)
            else { return }
            response.head = response.upstreamHead
            response.notImage = why
            response.storeDecision = .dontStore(reason: "not an image: \(why)")
            response.kept = nil
            response.keptBytes = 0
            startStreaming(response, heldBack: heldBack)
        case .allowed:
            startStreaming(response, heldBack: heldBack)
        }
    }

    /// The checks passed (or do not apply): the heads go out and the body so far (`heldBack`) follows.
    private mutating func startStreaming(_ response: Response, heldBack: [[UInt8]]) {
        state = .streaming(response)
        if response.bodyComplete {
            // The whole body is here already (the common case for a coalesced image): store it, then give each
            // client its whole response in one call, one hop onto its connection's loop thread instead of three.
            let entry = store(response)
            let body = heldBack.count == 1 ? heldBack[0] : Array(heldBack.joined())
            for index in waiters.indices {
                waiters[index].sentHead = true
                let waiter = waiters[index]
                let (head, outcome) = clientHead(response, for: waiter)
                if let entry, waiter.request.head.headers.contains("Range") {
                    // The stored entry answers the range (206, 416, If-Range) with a slice of its body, not a copy.
                    actions.append(.respondStored(entry, outcome: outcome, file: nil, now: response.responseTime, to: waiter.id))
                    continue
                }
                switch rangeAnswer(waiter, response) {
                case let .part(bytes)?:
                    let (partHead, _) = self.partHead(response, for: waiter, bytes)
                    actions.append(.respondWhole(partHead, outcome: outcome, body: Array(body[bytes]), to: waiter.id))
                case .unsatisfiable?:
                    actions.append(.refuseRange(outcome: outcome, length: body.count, to: waiter.id))
                default:
                    actions.append(.respondWhole(head, outcome: outcome, body: body, to: waiter.id))
                }
            }
            return finish()
        }
        startWaiters(waiters.map(\.id), response)
        if isFinished { return }
        dropAnsweredHeadWaiters()
        // (HEAD clients alone, on a response that will not be stored: nothing is left to do.)
        if abandonsUselessFill(response) { return }
        var offset = 0
        for chunk in heldBack {
            deliver(chunk, at: offset, to: nil, response)
            if isFinished { return }
            offset += chunk.count
        }
    }

    /// The head a waiter gets for the upstream response: no Content-Length (the sink frames), Cache-Status, X-Cache.
    private func clientHead(_ response: Response, for waiter: Waiter) -> (HTTPResponseHead, CacheOutcome) {
        var outcome = response.notImage == nil ? CacheOutcome(forward: reason, forwardStatus: response.head.status)
            : .notImage(forwardStatus: response.head.status)
        if case .store = response.storeDecision, response.kept != nil,
           rules.writesToDisk || (response.bodyLength ?? 0) <= rules.memoryObjectLimitBytes {
            outcome.stored = true
        }
        outcome.collapsed = waiter.collapsed
        if outcome.detail == nil { outcome.detail = fleetDetail }
        // The times its entry is stored with (`store`), for a sink that makes something from it (a rendition's source).
        outcome.received = CacheOutcome.Received(
            responseTime: response.responseTime,
            initialAge: Freshness.correctedInitialAge(of: response.head, requestTime: response.requestTime,
                                                      responseTime: response.responseTime))
        guard waiter.collapsed, !response.privateFields.isEmpty else {
            return (response.head.forClient(outcome, policy: rules.freshnessPolicy), outcome)
        }
        var shared = response.head
        shared.headers.removeAll { field in response.privateFields.contains(field.name.lowercased()) }
        return (shared.forClient(outcome, policy: rules.freshnessPolicy), outcome)
    }

    private mutating func sendHead(_ response: Response, toWaiterAt index: Int) {
        let waiter = waiters[index]
        // A HEAD client has what it asked for with the head; the transfer goes on for the cache.
        let (head, outcome) = clientHead(response, for: waiter)
        actions.append(.sendHead(head, outcome: outcome, bodyLength: response.bodyLength, to: waiter.id,
                                 ends: waiter.request.isHead))
        waiters[index].sentHead = true
    }

    /// HEAD clients leave once their head is out: no body chunks hop to them. The fetch they started still completes
    /// and fills the cache (a HEAD miss is fetched with GET, as nginx's proxy_cache_convert_head does).
    private mutating func dropAnsweredHeadWaiters() {
        let before = waiters.count
        waiters.removeAll { $0.request.isHead && $0.sentHead }
        if waiters.count != before { fillsCache = true }
    }

    /// Keeps the complete response when it may be stored and was kept; a revalidated copy that is not replaced goes.
    @discardableResult
    private mutating func store(_ response: Response) -> CacheEntry? {
        var stored: CacheEntry?
        if let kept = response.kept, case .store = response.storeDecision {
            let body = kept.count == 1 ? kept[0] : Array(kept.joined())
            let entry = CacheEntry(key: key, head: response.head, body: body, requestTime: response.requestTime,
                                   responseTime: response.responseTime, requestHeaders: leader.forwardedHeaders,
                                   policy: rules.freshnessPolicy)
            actions.append(.store(entry))
            stored = entry
            if fleetRole == .holdingLease {
                fleetRole = .done
                if let ttl = FleetEnvelope.sharedTTL(of: entry, now: response.responseTime) {
                    actions.append(.fleetStore(entry, ttl: ttl))
                } else {
                    actions.append(.fleetPass(reason: entry.vary?.matchesNothing == true ? "Vary: *"
                                                  : entry.variantID != (entry.vary?.id ?? "") ? "a derived variant" : "no freshness to share",
                                              ttl: rules.fleet?.passSeconds ?? 60))
                }
            }
        } else if let revalidating = response.revalidating {
            // The stored variant is outdated and the new response is not kept.
            actions.append(.remove(variant: revalidating.entry.variantID))
        }
        // A revalidation answered with another version: what was made from the old one is outdated too, on disk as in
        // memory (TieredStore.sourceStored judges only the renditions memory holds).
        if let old = response.revalidating?.entry, response.head.status == 200 || response.head.status == 203,
           old.validator != response.head.headers.validator {
            actions.append(.removeRenditions)
        }
        if case let .dontStore(why) = response.storeDecision {
            actions.append(.log(.debug, "not stored \(key): \(why)"))
            if fleetRole == .holdingLease {
                fleetRole = .done
                actions.append(.fleetPass(reason: "not stored: \(why)", ttl: rules.fleet?.passSeconds ?? 60))
            }
        }
        return stored
    }

    /// What a waiter's Range asks of the response (RFC 9110 14.2, ByteRanges.swift): nil for the whole response (no Range,
    /// not a GET, not a 200, a length not known yet, several ranges, an If-Range that does not hold).
    private func rangeAnswer(_ waiter: Waiter, _ response: Response) -> RangeAnswer? {
        guard waiter.request.head.method == "GET", waiter.request.head.headers.contains("Range"), response.head.status == 200,
              let length = response.bodyLength else { return nil }
        let answer = RangeAnswer.evaluate(method: "GET", headers: waiter.request.head.headers, length: length,
                                          etag: response.head.headers["ETag"], lastModified: response.head.headers["Last-Modified"],
                                          date: response.head.headers["Date"])
        return answer == .whole ? nil : answer
    }

    /// The 206 head for `bytes` of the response.
    private func partHead(_ response: Response, for waiter: Waiter, _ bytes: ClosedRange<Int>) -> (HTTPResponseHead, CacheOutcome) {
        var (head, outcome) = clientHead(response, for: waiter)
        head.status = 206
        head.reason = "Partial Content"
        head.headers.set("Content-Range", "bytes \(bytes.lowerBound)-\(bytes.upperBound)/\(response.bodyLength ?? 0)")
        head.headers.set("Accept-Ranges", "bytes")
        return (head, outcome)
    }

    /// Sends these waiters their heads: a Range request gets a 206 for its part (its bytes follow as they arrive,
    /// `deliver`) or a 416; any other the whole response's head.
    private mutating func startWaiters(_ ids: [Int], _ response: Response) {
        var refused: [Int] = []
        for index in waiters.indices where ids.contains(waiters[index].id) {
            let waiter = waiters[index]
            switch rangeAnswer(waiter, response) {
            case let .part(bytes)?:
                let (head, outcome) = partHead(response, for: waiter, bytes)
                actions.append(.sendHead(head, outcome: outcome, bodyLength: bytes.count, to: waiter.id, ends: false))
                waiters[index].sentHead = true
                waiters[index].part = bytes
            case .unsatisfiable?:
                actions.append(.refuseRange(outcome: clientHead(response, for: waiter).1, length: response.bodyLength ?? 0,
                                            to: waiter.id))
                refused.append(waiter.id)
            default:
                sendHead(response, toWaiterAt: index)
            }
        }
        waiters.removeAll { refused.contains($0.id) }
        // Every client refused: the fetch runs on only if it fills the cache.
        if !refused.isEmpty, waiters.isEmpty {
            fillsCache = true
            _ = abandonsUselessFill(response)
        }
    }

    /// Body bytes at `offset` of the response, to the waiters that have their heads (`only`: these alone): the whole
    /// chunk to a whole response's, the bytes in its part to a Range request's, which ends once its part is out. A
    /// fetch whose waiters all have their parts runs on only to fill the cache.
    private mutating func deliver(_ chunk: [UInt8], at offset: Int, to only: [Int]?, _ response: Response) {
        var whole: [Int] = []
        var done: [Int] = []
        for waiter in waiters where waiter.sentHead && (only?.contains(waiter.id) ?? true) {
            guard let part = waiter.part else {
                whole.append(waiter.id)
                continue
            }
            let lower = max(part.lowerBound, offset), upper = min(part.upperBound + 1, offset + chunk.count)
            if lower < upper {
                actions.append(.sendBody(lower == offset && upper == offset + chunk.count ? chunk : Array(chunk[(lower - offset)..<(upper - offset)]),
                                         to: [waiter.id]))
            }
            if offset + chunk.count > part.upperBound { done.append(waiter.id) }
        }
        if !whole.isEmpty { actions.append(.sendBody(chunk, to: whole)) }
        guard !done.isEmpty else { return }
        actions.append(.end(done))
        waiters.removeAll { done.contains($0.id) }
        if waiters.isEmpty && !response.bodyComplete {
            fillsCache = true
            _ = abandonsUselessFill(response)
        }
    }

    /// A fetch that runs with no waiter only to fill the cache (a background revalidation, a HEAD's fill) stops when
    /// the response will not be stored after all (not storable, not shareable, or too large to keep): the variant
    /// it was revalidating is outdated and goes. True when it stopped.
    private mutating func abandonsUselessFill(_ response: Response, shareable: Bool = true) -> Bool {
        guard waiters.isEmpty, fillsCache, !rules.completeAbandonedFetches else { return false }
        if case .store = response.storeDecision, response.kept != nil, shareable { return false }
        actions.append(.log(.debug, "\(key): the response will not be stored; the background fetch stops"))
        if let revalidating = response.revalidating { actions.append(.remove(variant: revalidating.entry.variantID)) }
        actions.append(.cancelTransfer)
        finish()
        return true
    }

    /// Ends every waiter's response and the fetch.
    private mutating func endAll() {
        if !waiters.isEmpty { actions.append(.end(waiters.map(\.id))) }
        finish()
    }

    // MARK: failures

    /// Answers every waiter with an error status (the head has not gone out) and stops the transfer.
    private mutating func refuseAll(status: Int, reason: String, kind: String = "content_refused") {
        actions.append(.log(.notice, "\(status) \(key): \(reason)"))
        // (the status a client got: none when no one waits, as for a revalidation in the background)
        actions.append(.countError(kind: kind, status: waiters.isEmpty ? nil : status, reason: reason))
        if !waiters.isEmpty { actions.append(.fail(waiters.map(\.id), status: status, reason: reason)) }
        actions.append(.cancelTransfer)
        finish()
    }

    /// The transfer failed (the origin's error, a broken body, the object too large): before any head went out,
    /// stale-if-error may serve the copy being revalidated; else each waiter gets the error (or, with its head out,
    /// a closed connection).
    private mutating func fail(_ error: UpstreamError, now: Date) {
        let counted: Bool
        if case .cancelled = error { counted = false } else { counted = true }
        let first = actions.count
        if counted, serveStaleIfError(because: error.description, now: now) {
            // (counted before what it caused, as when no stale copy is served)
            actions.insert(.countError(kind: "upstream_" + error.kind, status: nil,
                                       reason: error.description + " (the stored copy was served: stale-if-error)"), at: first)
            return
        }
        actions.append(.log(.warning, "\(error.httpStatus) \(key): \(error)"))
        if case .tooLarge = error, leader.mode == .reverse {
            // Too large to cache, but a configured origin can answer a part: those asking for one get it from there.
            let ranged = waiters.filter { !$0.sentHead && $0.request.head.method == "GET" && $0.request.head.headers.contains("Range") }
            if !ranged.isEmpty {
                waiters.removeAll { waiter in ranged.contains { $0.id == waiter.id } }
                actions.append(.passUpstream(ranged))
            }
        }
        let headSent = waiters.filter(\.sentHead).map(\.id)
        let notYet = waiters.filter { !$0.sentHead }.map(\.id)
        // The status the clients got: none when every one had its head already (their connections are cut).
        if counted {
            actions.append(.countError(kind: "upstream_" + error.kind, status: notYet.isEmpty ? nil : error.httpStatus,
                                       reason: error.description))
        }
        if !headSent.isEmpty { actions.append(.abort(headSent)) }
        if !notYet.isEmpty { actions.append(.fail(notYet, status: error.httpStatus, reason: error.description)) }
        actions.append(.cancelTransfer)
        finish()
    }

    /// A revalidation failed before any head went out: waiters that stale-if-error lets have the stale copy get it;
    /// true when every waiter was answered that way (the fetch is then over).
    private mutating func serveStaleIfError(because why: String, now: Date) -> Bool {
        let revalidating: Revalidation?
        switch state {
        case let .waitingForHead(upstream): revalidating = upstream.revalidating
        case let .checkingBody(response, _, _): revalidating = response.revalidating
        default: revalidating = nil
        }
        guard let revalidating, waiters.allSatisfy({ !$0.sentHead }) else { return false }
        splitOffOtherVariants(revalidating.entry)
        let decisions = waiters.map {
            CacheDecision.afterOriginFailure(stored: revalidating.entry, request: $0.request.cacheControl,
                                             offlineSeconds: rules.staleIfErrorSeconds, now: now)
        }
        guard let first = decisions.first, decisions.allSatisfy({ $0 != nil }),
              let outcome = first?.servedOutcome(tier: nil) else { return false }
        actions.append(.log(.warning, "\(key): \(why); serving the stale copy (stale-if-error)"))
        if revalidating.bodyInFile {
            serveFromDisk(confirmed: outcome)
            return true
        }
        for waiter in waiters {
            actions.append(.respondStored(revalidating.entry, outcome: outcome, file: nil, now: now, to: waiter.id))
        }
        waiters = []
        actions.append(.cancelTransfer)
        finish()
        return true
    }

    // MARK: helpers

    /// Whether `waiter` may share the response `head` with the leader: same values for the fields it varies on.
    private func varyAllows(_ waiter: Waiter, for head: HTTPResponseHead) -> Bool {
        VaryKey.make(response: head, request: leader.forwardedHeaders)?.matches(waiter.request.forwardedHeaders) ?? true
    }

    /// Waiters another variant is for: to that variant's fetch, or (from a variant's fetch) on their own.
    private mutating func redispatch(_ others: [Waiter], of head: HTTPResponseHead) {
        guard !others.isEmpty else { return }
        actions.append(variant.isEmpty ? .redispatchToVariants(others, of: head) : .redispatchAlone(others))
    }

    private mutating func closeToNewcomers() {
        guard joinable else { return }
        joinable = false
        actions.append(.closeToNewcomers)
    }

    private mutating func finish() {
        if isFinished { return }
        if fleetRole == .holdingLease {
            // Ended without sharing (a failure, an error answer, a response not kept): the waiters go alone at once.
            fleetRole = .done
            actions.append(.fleetPass(reason: "the fill failed or was not kept", ttl: rules.fleet?.failurePassSeconds ?? 2))
        }
        state = .finished
        waiters = []
        closeToNewcomers()
        actions.append(.finish)
    }

    private mutating func takeActions() -> [Action] {
        defer { actions = [] }
        return actions
    }
}

extension CacheEntry {
    /// It has a validator to revalidate with (ETag or Last-Modified).
    var hasValidators: Bool { etag != nil || lastModified != nil }
}
