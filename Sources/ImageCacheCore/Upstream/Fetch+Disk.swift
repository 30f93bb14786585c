// Fetch, the disk stage: what the hit path (Proxy+Disk.swift) could not answer arrives here with the disk's answer
// (`startFromDisk`); after a 304 for a large entry the fetch asks the disk again (`serveFromDiskAfterRevalidation`).
//
//   lookingOnDisk ── nil ─────────────────────────────> upstream
//                 ── .entry (small, verified) ────────> promoted into memory; each waiter it is fresh for (or whose
//                                                        max-stale allows it) is answered; the rest revalidate it
//                 ── .stream (large, verified) ───────> every waiter may use it: each is answered with the file
//                                                        (sendfile, one FileBody shared by all); else revalidate,
//                                                        and after a 304 the refreshed header is written and the
//                                                        body sent from the file
//   A revalidation that fails (connect error, timeout, 5xx) serves the stale entry when stale-if-error allows it
//   (the response's or request's directive, or the configured offline policy), else the error.
// The file descriptor is closed on every path (by the last FileBody reference once sent).

internal import Dispatch
internal import Foundation
internal import Logging

extension Fetch {
    /// Starts from a disk answer the proxy already has (the hit path asked and could not finish the request).
    func startFromDisk(_ result: DiskLookup?, removalsSeen: UInt64) {
        dispatchPrecondition(condition: .onQueue(queue))
        state = .lookingOnDisk
        diskAnswered(result, afterRevalidation: nil, removalsSeen: removalsSeen)
    }

    /// The disk's answer. `afterRevalidation` is the outcome to report when the origin has just confirmed the entry
    /// (a 304, or a failure where stale-if-error allows the stale copy): then every waiter is served from it, and a
    /// small entry is stored in memory as a fresh response would be. Otherwise a small entry is promoted with the
    /// memory tier's removal count read before the lookup (`removalsSeen`).
    func diskAnswered(_ result: DiskLookup?, afterRevalidation: CacheOutcome?, removalsSeen: UInt64?) {
        dispatchPrecondition(condition: .onQueue(queue))
        guard case .lookingOnDisk = state else { return }
        // The origin confirmed an entry that is gone now (purged or evicted meanwhile): fetch it whole, once.
        let usable: Bool
        switch result {
        case nil: usable = false
        case let .entry(entry): usable = entry.vary?.matches(leader.forwardedHeaders) ?? true
        case let .stream(head, _): usable = head.vary?.matches(leader.forwardedHeaders) ?? true
        }
        if !usable {
            revalidating = nil
            revalidatingFromDisk = false
            return goUpstream()
        }
        switch result {
        case nil:
            goUpstream()
        case let .entry(entry):
            splitOffOtherVariants(entry)
            guard !waiters.isEmpty else { return finish() }
            if afterRevalidation != nil {
                proxy.store.keepInMemory(entry)
            } else if let removalsSeen {
                proxy.store.promote(entry, removalsSeen: removalsSeen)
            }
            let time = proxy.now()
            var remaining: [Waiter] = []
            for waiter in waiters {
                if let confirmed = afterRevalidation {
                    proxy.respond(entry, to: waiter.sink, request: waiter.request, outcome: confirmed, now: time)
                    continue
                }
                let decision = CacheDecision.decide(stored: entry, request: waiter.request.cacheControl,
                                                    now: time)
                if let outcome = decision.servedOutcome(tier: "disk") {
                    proxy.respond(entry, to: waiter.sink, request: waiter.request, outcome: outcome, now: time)
                } else {
                    remaining.append(waiter)
                }
            }
            waiters = remaining
            guard !waiters.isEmpty else { return finish() }
            if entry.etag != nil || entry.lastModified != nil { revalidating = entry }
            goUpstream()
        case let .stream(head, file):
            splitOffOtherVariants(head)
            guard !waiters.isEmpty else { return finish() }
            let time = proxy.now()
            var outcomes: [CacheOutcome] = []
            for waiter in waiters {
                if let confirmed = afterRevalidation {
                    outcomes.append(confirmed)
                    continue
                }
                let decision = CacheDecision.decide(stored: head, request: waiter.request.cacheControl,
                                                    now: time)
                if let outcome = decision.servedOutcome(tier: "disk") { outcomes.append(outcome) }
            }
            guard outcomes.count == waiters.count else {
                // Someone needs it revalidated: ask the origin once for all of them.
                if head.etag != nil || head.lastModified != nil {
                    revalidating = head
                    revalidatingFromDisk = true
                }
                return goUpstream()
            }
            streamFromDisk(head, file: file, outcomes: outcomes, now: time)
        }
    }

    /// Waiters whose request does not match the stored variant's Vary fields go to a fetch of their own variant.
    func splitOffOtherVariants(_ entry: CacheEntry) {
        guard let vary = entry.vary else { return }
        let others = waiters.filter { !vary.matches($0.request.forwardedHeaders) }
        guard !others.isEmpty else { return }
        waiters.removeAll { waiter in others.contains { $0.id == waiter.id } }
        proxy.redispatchToVariants(others, of: entry.head, from: self)
    }

    /// Leaves the disk stage for the origin. (No waiter said only-if-cached: CacheDecision refused those where they
    /// were looked up.)
    func goUpstream() {
        state = .waitingForHead
        guard !waiters.isEmpty else { return finish() }
        start()
    }

    /// Serves a large stored body from its (verified, open) file to every waiter: one FileBody, sent to each
    /// connection with sendfile (each write queue keeps its own position; the descriptor closes after the last).
    private func streamFromDisk(_ entry: CacheEntry, file: FileBody, outcomes: [CacheOutcome], now: Date) {
        closeToNewcomers()
        for (waiter, outcome) in zip(waiters, outcomes) {
            proxy.respond(entry, to: waiter.sink, request: waiter.request, outcome: outcome, now: now, file: file)
        }
        waiters = []
        finish()
    }

    /// After a revalidation of a large disk entry: the refreshed header is written, then the body streams from the file.
    func serveFromDiskAfterRevalidation(_ outcome: CacheOutcome) {
        transfer?.cancel()
        transfer = nil
        generation += 1   // ignore whatever the upstream transfer still reports
        state = .lookingOnDisk
        let asked = proxy.store.reread(key, requestFields: leader.forwardedHeaders) { [self] result in
            queue.async { self.diskAnswered(result, afterRevalidation: outcome, removalsSeen: nil) }
        }
        if !asked { finish() }
    }
}
