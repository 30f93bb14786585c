// Fetch: one upstream transfer for one cache key, and the clients waiting on it (Varnish's busy object
// and waiting list, Nuke's TaskPool entry). Confined to the proxy queue; events from the origin arrive
// with `queue.async`.
//
// Data model
//   waiters      the clients served by this transfer. Each gets the head as soon as it is known (and the
//                image checks passed), then every body chunk as it arrives: the same [UInt8] arrays, shared.
//   chunks       the body so far, kept while it may still be stored or joined by a late waiter; dropped
//                (and the fetch closed to newcomers) once it outgrows the memory tier's object limit.
//   state        waitingForHead -> checkingBody (image signature needs the first bytes) -> streaming -> finished
//                any state -> finished on failure, on cancellation (every waiter gone) or on a refusal.
//
// Rules
//   - A response that may not be shared (private, no-store, Set-Cookie, Vary: *) goes to the leader only;
//     the other waiters are sent upstream on their own. Waiters whose request selects another variant (their fields
//     differ in what the response's Vary names) go to a fetch of their variant, coalesced by variant id and stored
//     as one more variant of the URL (`Proxy.redispatchToVariants`); from a fetch that was already one variant's,
//     they go on their own (an origin that changes its Vary between responses cannot bounce them further).
//   - A failure before the head went out answers every waiter with the error's status and reason; after it,
//     every waiter's connection is closed (abort), so no short body passes as complete. Nothing is stored.
//   - On success the entry is stored first, then the waiters are ended, then the fetch leaves the coalescer.
//   - When the last waiter goes, the transfer is cancelled unless complete-abandoned-fetches is on.
//   - Backpressure (`applyBackpressure`, after every streamed chunk): the fetch counts the bytes it keeps alive in
//     the daemon-wide in-flight total (its retained body while it may be stored, else what its slowest client has
//     not taken). While that total is over `in-flight-limit`, a body kept to be stored is let go (streamed, not
//     stored), and when a client is more than `server.write-buffer` behind, the upstream transfer pauses until every
//     client has taken all but half a buffer of what it was handed (or gone), or the total is under the limit again.
//     The slowest client sets the pace; one that takes nothing is closed by server.write-timeout as any client is.
//     Between libcurl and the fetch at most a write buffer is in transit (the transfer's delivery window).

internal import Dispatch
internal import Foundation
internal import Logging
internal import Synchronization

final class Fetch: @unchecked Sendable {
    /// A client waiting on this fetch.
    struct Waiter {
        let id: Int
        let sink: any ResponseSink
        let request: ClientRequest
        var collapsed = false
        var sentHead = false
        /// Body bytes handed to `sink` so far (its backlog is this minus what the client has taken).
        var sentBytes = 0
    }

    enum State {
        /// Asking the disk tier first (a memory miss); waiters wait for its answer.
        case lookingOnDisk
        case waitingForHead
        case checkingBody(HTTPResponseHead)
        case streaming(HTTPResponseHead)
        case finished
    }

    // MARK: immutable
    /// Strong: a transfer can still deliver after the daemon let go of its proxy (a test's teardown, a stop with
    /// transfers in flight), and an unowned reference then crashed the process. The cycle (proxy -> coalescer ->
    /// fetch -> proxy) ends when the fetch finishes, as the transfer's does.
    let proxy: Proxy
    let key: CacheKey
    let leader: ClientRequest
    let reason: CacheOutcome.Forward
    /// The variant id this fetch was started for, when it serves waiters another response's Vary sent away ("": the
    /// URL's fetch, whatever variant it brings).
    let variant: String

    // MARK: owned by proxy.queue
    /// The stored entry being revalidated (conditional request), if any.
    var revalidating: CacheEntry?
    /// Counts transfers started; events of an earlier transfer are ignored.
    var generation = 0
    var state = State.waitingForHead
    var waiters: [Waiter] = []
    private var chunks: [[UInt8]] = []
    /// Bytes in `chunks`.
    private var retainedBytes = 0
    /// The upstream transfer is paused for backpressure.
    private var paused = false
    /// Bytes this fetch counts in `proxy.metrics.inFlightBytes` now.
    private var accountedBytes = 0
    private var prefix: [UInt8] = []
    private var receivedBytes = 0
    private var keepingBody = true
    /// Still in the coalescer map, taking new waiters.
    var joinable = true
    /// A HEAD client was answered from this fetch: it runs to the end to fill the cache even with no waiter left.
    var fillingForHead = false
    /// `revalidating` came from the disk tier with its body left in the file (a large entry).
    var revalidatingFromDisk = false
    var transfer: (any UpstreamTransfer)?
    var requestTime = Date()
    var responseTime = Date()
    private var bodyLength: Int?
    private var storeDecision = StoreDecision.dontStore(reason: "no response yet")
    // Metrics: when the current transfer started (nil once counted), its status and bytes; clients attached in all.
    private var transferStarted: ContinuousClock.Instant?
    private var transferStatus: Int?
    private var transferBytes = 0
    private var attachedCount = 0

    init(proxy: Proxy, key: CacheKey, leader: ClientRequest, reason: CacheOutcome.Forward, revalidating: CacheEntry?,
         variant: String = "") {
        self.proxy = proxy
        self.key = key
        self.leader = leader
        self.reason = reason
        self.revalidating = revalidating
        self.variant = variant
    }

    /// Its place in the coalescer.
    var fetchKey: FetchKey { FetchKey(key: key, trusted: leader.trusted, variant: variant) }

    var queue: DispatchQueue { proxy.queue }

    func start() {
        dispatchPrecondition(condition: .onQueue(queue))
        var headers = leader.upstreamHeaders(via: proxy.loopGuard.viaValue)
        if let revalidating {
            for field in revalidating.conditionalHeaders { headers.set(field.name, field.value) }
        }
        let request = UpstreamRequest(
            url: key.url.string, method: "GET", headers: headers, trusted: leader.trusted,
            maxBodyBytes: proxy.configuration.maxObjectSizeBytes,
            deliveryWindow: proxy.configuration.server.writeBufferBytes)
        requestTime = proxy.now()
        if transferStarted != nil { countTransfer(result: "restarted") }
        transferStarted = .now
        transferStatus = nil
        transferBytes = 0
        generation += 1
        let generation = generation
        transfer = proxy.origin.fetch(request) { [self] event in
            queue.async {
                self.receive(event, generation: generation)
                // Every body chunk dealt with gives its room in the transfer's delivery window back.
                if case let .body(chunk) = event, generation == self.generation { self.transfer?.consumed(chunk.count) }
            }
        }
    }

    /// Adds a client. A late one gets the head and the body so far at once.
    func attach(_ waiter: Waiter, collapsed: Bool) {
        dispatchPrecondition(condition: .onQueue(queue))
        var waiter = waiter
        waiter.collapsed = collapsed
        attachedCount += 1
        let id = waiter.id
        weak let weakSelf = self
        waiter.sink.onCancel { [queue] in
            queue.async { weakSelf?.detach(id) }
        }
        switch state {
        case .waitingForHead, .lookingOnDisk:
            waiters.append(waiter)
            proxy.events?(.waiterAttached(key: key, waiters: waiters.count))
        case let .checkingBody(head):
            guard varyAllows(waiter, for: head) else { return proxy.redispatchToVariants([waiter], of: head, from: self) }
            waiters.append(waiter)
            proxy.events?(.waiterAttached(key: key, waiters: waiters.count))
        case let .streaming(head):
            guard varyAllows(waiter, for: head) else { return proxy.redispatchToVariants([waiter], of: head, from: self) }
            waiters.append(waiter)
            proxy.events?(.waiterAttached(key: key, waiters: waiters.count))
            sendHead(head, toWaiterAt: waiters.count - 1)
            if waiter.request.isHead {
                dropAnsweredHeadWaiters()
                return
            }
            for chunk in chunks { send(chunk, toWaiterAt: waiters.count - 1) }
        case .finished:
            // Closed fetches are not in the coalescer; reaching here is a programming error.
            preconditionFailure("attach to a closed fetch")
        }
    }

    /// Whether `waiter` may share the response `head` with the leader: same values for the fields it varies on.
    private func varyAllows(_ waiter: Waiter, for head: HTTPResponseHead) -> Bool {
        VaryKey.make(response: head, request: leader.forwardedHeaders)?.matches(waiter.request.forwardedHeaders) ?? true
    }

    /// A client went away.
    func detach(_ id: Int) {
        dispatchPrecondition(condition: .onQueue(queue))
        if case .finished = state { return }
        waiters.removeAll { $0.id == id }
        if waiters.isEmpty && !proxy.configuration.completeAbandonedFetches && !fillingForHead {
            proxy.logger.debug("every client left; cancelling upstream \(key)")
            transfer?.cancel()
            finish()
        }
    }

    // MARK: events

    func receive(_ event: UpstreamEvent, generation: Int) {
        dispatchPrecondition(condition: .onQueue(queue))
        guard generation == self.generation else { return }
        switch event {
        case let .head(head, _, _): transferStatus = head.status
        case let .body(chunk) where transferStarted != nil:
            transferBytes += chunk.count
            proxy.metrics.upstreamBytes.add(chunk.count)
        case .end: countTransfer(result: transferStatus == 304 ? "not_modified" : "ok")
        case let .failed(error): countTransfer(result: error.kind)
        default: break
        }
        if case .finished = state { return }
        switch event {
        case let .head(head, url, redirects): receiveHead(head, url: url, redirects: redirects)
        case let .body(chunk): receiveBody(chunk)
        case .end: receiveEnd()
        case let .failed(error): fail(error)
        }
    }

    private func receiveHead(_ upstreamHead: HTTPResponseHead, url: String, redirects: [Int]) {
        responseTime = proxy.now()
        var head = upstreamHead
        if !leader.trusted { UntrustedResponse.apply(to: &head.headers) }
        if let revalidating, head.status == 304 {
            guard revalidating.isSelected(by: head) else {
                // The 304 names other validators than the stored ones: drop the entry and fetch it whole.
                proxy.logger.notice("\(key): 304 does not match the stored validators; fetching the whole response")
                proxy.store.remove(key, variant: revalidating.variantID)
                self.revalidating = nil
                revalidatingFromDisk = false
                transfer?.cancel()
                start()
                return
            }
            let refreshed = revalidating.refreshed(with: head, requestTime: requestTime, responseTime: responseTime,
                                                   policy: proxy.freshnessPolicy)
            // The merged head may now forbid storing (a 304 with no-store or private): serve it, keep nothing.
            var asGET = leader.head
            asGET.method = "GET"
            let keep = Storability.decide(request: asGET, requestCacheControl: leader.cacheControl,
                                          response: refreshed.head, responseCacheControl: refreshed.cacheControl) == .store
            if revalidatingFromDisk {
                // The body is in the file: write the refreshed header, then stream the body from there.
                if keep {
                    proxy.store.refresh(refreshed, bodyInFile: true)
                } else {
                    proxy.store.remove(key, variant: revalidating.variantID)
                }
                let outcome = CacheOutcome(forward: reason, forwardStatus: 304, stored: keep)
                if keep { return serveFromDiskAfterRevalidation(outcome) }
                // Not kept: the file is gone; fetch the whole response instead.
                self.revalidating = nil
                revalidatingFromDisk = false
                transfer?.cancel()
                start()
                return
            }
            if keep {
                proxy.store.refresh(refreshed, bodyInFile: false)
            } else {
                proxy.store.remove(key, variant: revalidating.variantID)
            }
            var unshared: [Waiter] = []
            var otherVariants: [Waiter] = []
            // A 304 that may not be shared (Set-Cookie, private, no-store, Vary: *) goes to the leader only, as a 200
            // would: the others go upstream on their own.
            let shareable = Storability.isShareable(refreshed.head, cacheControl: refreshed.cacheControl)
            for waiter in waiters {
                if !shareable && !isLeader(waiter) {
                    unshared.append(waiter)
                    continue
                }
                if let vary = refreshed.vary, !vary.matches(waiter.request.forwardedHeaders) {
                    otherVariants.append(waiter)
                    continue
                }
                var outcome = CacheOutcome(forward: reason, forwardStatus: 304, stored: keep)
                outcome.collapsed = waiter.collapsed
                proxy.respond(refreshed, to: waiter.sink, request: waiter.request, outcome: outcome, now: responseTime)
            }
            proxy.redispatchAlone(unshared, key: key)
            proxy.redispatchToVariants(otherVariants, of: refreshed.head, from: self)
            // No cancel: the 304 has no body, and letting it end keeps the connection reusable.
            finish()
            return
        }
        guard head.status == 200 || head.status == 203 else {
            if revalidating != nil && (head.status == 404 || head.status == 410) {
                proxy.forget(key)   // the resource is gone: every variant of it
            }
            if head.status >= 500, serveStaleIfError(because: "upstream answered \(head.status)") { return }
            let status = (400...599).contains(head.status) ? head.status : 502
            refuseAll(status: status, reason: "upstream answered \(head.status) \(head.reason)", kind: "upstream_status_\(head.status / 100)xx")
            return
        }
        let responseCacheControl = CacheControl(head.headers)
        // HEAD requests are fetched with GET (as nginx's proxy_cache_convert_head does), so judge the GET.
        var fetched = leader.head
        fetched.method = "GET"
        storeDecision = Storability.decide(request: fetched, requestCacheControl: leader.cacheControl,
                                           response: head, responseCacheControl: responseCacheControl)
        // Reached through a redirect: keeping it under this URL is right only if every hop was permanent (301, 308);
        // a temporary one (302, 303, 307) may point elsewhere tomorrow.
        if let temporary = redirects.first(where: { $0 != 301 && $0 != 308 }) {
            storeDecision = .dontStore(reason: "reached through a \(temporary) redirect to \(url)")
        }
        let contentType: String?
        switch ContentPolicy.declaredType(head.headers) {
        case let .ambiguous(why):
            refuseAll(status: 502, reason: why)
            return
        case .none: contentType = nil
        case let .one(value): contentType = value
        }
        if case let .refused(why) = proxy.contentPolicy.checkContentType(contentType) {
            refuseAll(status: 502, reason: why)
            return
        }
        bodyLength = head.headers["Content-Length"].flatMap { Int($0.trimmingOWS()) }
        if bodyLength.map({ $0 > proxy.configuration.maxObjectSizeBytes }) ?? false {
            fail(.tooLarge(limit: proxy.configuration.maxObjectSizeBytes))
            return
        }
        // Share the response only with waiters who may have it.
        if !Storability.isShareable(head, cacheControl: responseCacheControl) {
            closeToNewcomers()
            let others = waiters.filter { !isLeader($0) }
            waiters.removeAll { !isLeader($0) }
            proxy.redispatchAlone(others, key: key)
        } else if let vary = VaryKey.make(response: head, request: leader.forwardedHeaders) {
            let mismatched = waiters.filter { !isLeader($0) && !vary.matches($0.request.forwardedHeaders) }
            waiters.removeAll { w in mismatched.contains { $0.id == w.id } }
            proxy.redispatchToVariants(mismatched, of: head, from: self)
        }
        if waiters.isEmpty && !proxy.configuration.completeAbandonedFetches && !fillingForHead {
            transfer?.cancel()
            finish()
            return
        }
        state = .checkingBody(head)
        checkBody(complete: false)
    }

    private func receiveBody(_ chunk: [UInt8]) {
        receivedBytes += chunk.count
        if let bodyLength, receivedBytes > bodyLength {
            fail(.broken("more body bytes than the Content-Length of \(bodyLength)"))
            return
        }
        if keepingBody {
            chunks.append(chunk)
            retainedBytes += chunk.count
            // With a disk tier the body is kept whole (up to max-object-size) to be written there.
            if !proxy.store.writesToDisk, receivedBytes > proxy.configuration.effectiveMemoryObjectLimitBytes {
                // Too large to keep: stream it on, but stop retaining it and take no new waiters.
                keepingBody = false
                chunks = []
                retainedBytes = 0
                closeToNewcomers()
            }
        }
        switch state {
        case .checkingBody:
            if prefix.count < ImageSignature.bytesNeeded {
                prefix.append(contentsOf: chunk.prefix(ImageSignature.bytesNeeded - prefix.count))
            }
            pendingWhileChecking.append(chunk)
            checkBody(complete: bodyComplete)
        case let .streaming(head):
            // Store before the last bytes go out: a client that has its whole body and asks again must hit.
            if bodyComplete { store(head) }
            for index in waiters.indices { send(chunk, toWaiterAt: index) }
            if bodyComplete { return endAll() }
            applyBackpressure()
        case .waitingForHead, .finished, .lookingOnDisk:
            break
        }
    }

    /// Chunks that arrived while the image checks waited for the first bytes; sent once they pass.
    private var pendingWhileChecking: [[UInt8]] = []

    /// Every byte of a Content-Length body has arrived (the transfer's own end may still be on its way).
    private var bodyComplete: Bool { bodyLength.map { receivedBytes >= $0 } ?? false }

    private func receiveEnd() {
        if case .checkingBody = state { checkBody(complete: true) }
        guard case let .streaming(head) = state else {
            if case .waitingForHead = state { fail(.broken("the transfer ended without a response")) }
            return
        }
        if let bodyLength, bodyLength != receivedBytes {
            fail(.broken("received \(receivedBytes) of \(bodyLength) body bytes"))
            return
        }
        store(head)
        endAll()
    }

    /// Keeps the complete response when it may be stored and fits; a revalidated entry that is not replaced goes.
    private func store(_ head: HTTPResponseHead) {
        if keepingBody, case .store = storeDecision {
            let body = chunks.count == 1 ? chunks[0] : Array(chunks.joined())
            let entry = CacheEntry(key: key, head: head, body: body, requestTime: requestTime, responseTime: responseTime,
                                   requestHeaders: leader.forwardedHeaders, policy: proxy.freshnessPolicy)
            if proxy.store.writesToDisk {
                // The body waits for the disk queue as one more copy (the clients may still hold the chunks): it
                // counts in flight until written.
                let bytes = body.count, metrics = proxy.metrics
                metrics.inFlightBytes.wrappingAdd(bytes, ordering: .relaxed)
                proxy.store.store(entry) { metrics.inFlightBytes.wrappingSubtract(bytes, ordering: .relaxed) }
            } else {
                proxy.store.store(entry)
            }
        } else if let revalidating {
            // The stored variant is outdated and the new response is not kept.
            proxy.store.remove(key, variant: revalidating.variantID)
        }
        if case let .dontStore(why) = storeDecision {
            proxy.logger.debug("not stored \(key): \(why)")
        }
    }

    /// Ends every waiter's response and the fetch.
    private func endAll() {
        for waiter in waiters { waiter.sink.end() }
        // What the clients have not taken yet stays in memory, in their connections, after the fetch: it stays
        // counted in flight until they take it or go.
        let behind = waiters.filter { backlog($0) > 0 }.map { (sink: $0.sink, sentBytes: $0.sentBytes) }
        finish()
        if !behind.isEmpty { InFlightDrain.start(behind, metrics: proxy.metrics) }
    }

    // MARK: steps

    /// Runs the image checks on the first bytes; once they pass, the head goes out and streaming starts.
    private func checkBody(complete: Bool) {
        guard case let .checkingBody(head) = state else { return }
        switch proxy.contentPolicy.check(contentType: head.headers["Content-Type"], prefix: prefix[...], complete: complete) {
        case .needMoreBytes:
            return
        case let .refused(why):
            refuseAll(status: 502, reason: why)
        case .allowed:
            state = .streaming(head)
            if bodyComplete {
                // The whole body is here already (the common case for a coalesced image): store it, then give each
                // client its whole response in one call, one hop onto its connection's loop thread instead of three.
                store(head)
                let body = pendingWhileChecking.count == 1 ? pendingWhileChecking[0] : Array(pendingWhileChecking.joined())
                pendingWhileChecking = []
                for index in waiters.indices {
                    waiters[index].sentHead = true
                    waiters[index].sink.respond(clientHead(head, for: waiters[index]), body: body)
                }
                return finish()
            }
            for index in waiters.indices { sendHead(head, toWaiterAt: index) }
            dropAnsweredHeadWaiters()
            let backlog = pendingWhileChecking
            pendingWhileChecking = []
            let wholeBody = bodyComplete
            if wholeBody { store(head) }
            for chunk in backlog {
                for index in waiters.indices { send(chunk, toWaiterAt: index) }
            }
            if wholeBody { return endAll() }
            applyBackpressure()
        }
    }

    /// The head a waiter gets for the upstream response: no Content-Length (the sink frames), Cache-Status, X-Cache.
    private func clientHead(_ upstream: HTTPResponseHead, for waiter: Waiter) -> HTTPResponseHead {
        var headers = upstream.headers
        headers.remove("Content-Length")
        var outcome = CacheOutcome(forward: reason, forwardStatus: upstream.status)
        if case .store = storeDecision, keepingBody,
           proxy.store.writesToDisk || (bodyLength ?? 0) <= proxy.configuration.effectiveMemoryObjectLimitBytes {
            outcome.stored = true
        }
        outcome.collapsed = waiter.collapsed
        outcome.apply(to: &headers)
        return HTTPResponseHead(status: upstream.status, reason: upstream.reason, headers: headers)
    }

    private func sendHead(_ upstream: HTTPResponseHead, toWaiterAt index: Int) {
        waiters[index].sink.head(clientHead(upstream, for: waiters[index]), bodyLength: bodyLength)
        waiters[index].sentHead = true
        if waiters[index].request.isHead {
            // A HEAD client has what it asked for; the transfer goes on for the cache (see dropAnsweredHeadWaiters).
            waiters[index].sink.end()
        }
    }

    /// HEAD clients leave once their head is out: no body chunks hop to them. The fetch they started still completes
    /// and fills the cache (a HEAD miss is fetched with GET, as nginx's proxy_cache_convert_head does).
    private func dropAnsweredHeadWaiters() {
        let before = waiters.count
        waiters.removeAll { $0.request.isHead && $0.sentHead }
        if waiters.count != before { fillingForHead = true }
    }

    /// Answers every waiter with an error status (the head has not gone out) and stops the transfer.
    private func refuseAll(status: Int, reason: String, kind: String = "content_refused") {
        proxy.logger.notice("\(status) \(key): \(reason)")
        proxy.metrics.error(kind)
        for waiter in waiters { waiter.sink.fail(status: status, reason: reason) }
        transfer?.cancel()
        finish()
    }

    private func fail(_ error: UpstreamError) {
        if case .cancelled = error {} else {
            proxy.metrics.error("upstream_" + error.kind)
            if serveStaleIfError(because: error.description) { return }
        }
        proxy.logger.warning("\(error.httpStatus) \(key): \(error)")
        for waiter in waiters {
            if waiter.sentHead { waiter.sink.abort() } else { waiter.sink.fail(status: error.httpStatus, reason: error.description) }
        }
        transfer?.cancel()
        finish()
    }

    private func isLeader(_ waiter: Waiter) -> Bool { !waiter.collapsed }

    // MARK: backpressure (see the rules at the top)

    private func send(_ chunk: [UInt8], toWaiterAt index: Int) {
        waiters[index].sentBytes += chunk.count
        waiters[index].sink.body(chunk)
    }

    /// Body bytes handed to `waiter` that its client has not taken yet (0 for sinks that are not clients).
    private func backlog(_ waiter: Waiter) -> Int {
        let written = waiter.sink.bytesWritten
        return written >= waiter.sentBytes ? 0 : waiter.sentBytes - written
    }

    /// Sets this fetch's share of the in-flight total to `bytes`.
    private func account(_ bytes: Int) {
        let delta = bytes - accountedBytes
        guard delta != 0 else { return }
        accountedBytes = bytes
        proxy.metrics.inFlightBytes.wrappingAdd(delta, ordering: .relaxed)
    }

    private func applyBackpressure() {
        guard case .streaming = state else { return }
        account(keepingBody ? retainedBytes : waiters.map(backlog).max() ?? 0)
        guard !paused, overBudget else { return }
        if keepingBody {
            let limit = proxy.configuration.inFlightLimitBytes
            proxy.logger.notice("\(key): not stored, the bodies in flight are over in-flight-limit (\(limit) bytes)")
            storeDecision = .dontStore(reason: "the bodies in flight were over in-flight-limit")
            keepingBody = false
            chunks = []
            retainedBytes = 0
            closeToNewcomers()
            account(waiters.map(backlog).max() ?? 0)
            if waiters.isEmpty {
                // Kept on only to fill the cache (complete-abandoned-fetches, a HEAD's fill), which it no longer will.
                transfer?.cancel()
                return finish()
            }
        }
        guard watchWaitersBehind() else { return }
        paused = true
        transfer?.setPaused(true)
        proxy.metrics.upstreamPauses.add()
        proxy.events?(.transferPaused(key: key))
        proxy.logger.debug("\(key): upstream paused, a client is more than server.write-buffer behind")
    }

    private var overBudget: Bool {
        proxy.metrics.inFlightBytes.load(ordering: .relaxed) > proxy.configuration.inFlightLimitBytes
    }

    /// Asks every client more than `server.write-buffer` behind to say when it has taken all but half a buffer of
    /// what it was handed (or went away); true when there is one.
    private func watchWaitersBehind() -> Bool {
        let buffer = proxy.configuration.server.writeBufferBytes
        let behind = waiters.filter { backlog($0) > buffer }
        weak let weakSelf = self
        for waiter in behind {
            waiter.sink.whenWritten(waiter.sentBytes - buffer / 2) { [queue] in
                queue.async { weakSelf?.resume() }
            }
        }
        return !behind.isEmpty
    }

    /// A client caught up (or went away): read on once none is behind, or the budget has room again.
    private func resume() {
        dispatchPrecondition(condition: .onQueue(queue))
        guard paused else { return }
        if case .finished = state { return }
        account(keepingBody ? retainedBytes : waiters.map(backlog).max() ?? 0)
        if overBudget && watchWaitersBehind() { return }
        paused = false
        transfer?.setPaused(false)
    }

    /// A revalidation failed before any head went out: waiters that stale-if-error lets have the stale entry get it;
    /// true when every waiter was answered that way (the fetch is then over).
    private func serveStaleIfError(because why: String) -> Bool {
        guard let revalidating, waiters.allSatisfy({ !$0.sentHead }) else { return false }
        splitOffOtherVariants(revalidating)
        let time = proxy.now()
        let decisions = waiters.map {
            CacheDecision.afterOriginFailure(stored: revalidating, request: $0.request.cacheControl,
                                             offlineSeconds: proxy.configuration.staleIfErrorSeconds, now: time)
        }
        guard let first = decisions.first, decisions.allSatisfy({ $0 != nil }),
              let outcome = first?.servedOutcome(tier: nil) else { return false }
        proxy.logger.warning("\(key): \(why); serving the stale copy (stale-if-error)")
        if revalidatingFromDisk {
            serveFromDiskAfterRevalidation(outcome)
            return true
        }
        for waiter in waiters {
            proxy.respond(revalidating, to: waiter.sink, request: waiter.request, outcome: outcome, now: time)
        }
        transfer?.cancel()
        finish()
        return true
    }

    func closeToNewcomers() {
        guard joinable else { return }
        joinable = false
        proxy.fetchClosed(self)
    }

    func finish() {
        if case .finished = state { return }
        proxy.events?(.fetchFinished(key: key))
        if attachedCount > 0 { proxy.metrics.fetchWaiters.observe(Double(attachedCount)) }
        // A transfer stopped here (no waiter left, refused, or a 304 whose end is still on its way) is counted now.
        if transferStarted != nil {
            countTransfer(result: transferStatus == 304 ? "not_modified" : transferStatus != nil ? "ok" : "cancelled")
        }
        state = .finished
        account(0)
        waiters = []
        chunks = []
        retainedBytes = 0
        pendingWhileChecking = []
        // The transfer's event closure holds this fetch: dropping the transfer breaks the cycle.
        transfer = nil
        revalidating = nil
        revalidatingFromDisk = false
        closeToNewcomers()
    }
}

extension Fetch {
    /// Counts the current upstream transfer once: its result, duration and bytes.
    fileprivate func countTransfer(result: String) {
        guard let started = transferStarted else { return }
        transferStarted = nil
        let elapsed = ContinuousClock.now - started
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        proxy.metrics.upstreamFinished(host: key.url.host, result: result, seconds: seconds, bytes: transferBytes)
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

/// Keeps the body bytes a finished fetch handed to clients that have not taken them yet counted in
/// `inFlightBytes` (as the fetch did: the largest backlog, since the clients share the same chunks) until each client
/// has taken its response or gone. Owned by the callbacks it registers; guarded by its Mutex.
final class InFlightDrain: Sendable {
    private struct State {
        var sinks: [(sink: any ResponseSink, sentBytes: Int)]
        var accounted = 0
    }

    private let state: Mutex<State>
    private let metrics: ProxyMetrics

    private init(_ sinks: [(sink: any ResponseSink, sentBytes: Int)], metrics: ProxyMetrics) {
        state = Mutex(State(sinks: sinks))
        self.metrics = metrics
    }

    static func start(_ sinks: [(sink: any ResponseSink, sentBytes: Int)], metrics: ProxyMetrics) {
        let drain = InFlightDrain(sinks, metrics: metrics)
        drain.recount()
        for (sink, sentBytes) in sinks {
            sink.whenWritten(sentBytes) { drain.recount() }
        }
    }

    /// Sets the count to the largest backlog left (0 once every client took its bytes or went).
    private func recount() {
        let delta = state.withLock { state -> Int in
            state.sinks.removeAll { $0.sink.bytesWritten >= $0.sentBytes }
            let backlog = state.sinks.map { $0.sentBytes - $0.sink.bytesWritten }.max() ?? 0
            defer { state.accounted = backlog }
            return backlog - state.accounted
        }
        if delta != 0 { metrics.inFlightBytes.wrappingAdd(delta, ordering: .relaxed) }
    }
}
