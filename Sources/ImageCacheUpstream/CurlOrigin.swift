// The production `Origin`: upstream transfers on one libcurl multi handle (Curl/CurlMulti.swift).
//
// Data model: every `fetch` makes a `Transfer` (the caller's handle: its ID, its request, its event sink and a
// small lock-guarded state) and submits its ID to `TransferQueue`, which caps the transfers running at once.
// A transfer that gets a slot becomes a `CurlEasy` handed to `CurlMulti`; one that does not waits in the queue
// (in `waiting`) until a slot frees up, it is cancelled, or it times out (`.queueTimeout`).
// Ownership: `state` (the queue, the waiting and running transfers, counters, shut-down flag) is shared and
// guarded by its Mutex; nothing slow and no event delivery happens inside it. Each transfer's events come from
// the curl thread (queue timeouts too: the multi's tick expires them), so they are serial per transfer.
// A slot is freed just before the transfer's terminal event (`.end`/`.failed`) is delivered, or at once on cancel.
// This file sees only Swift types: the C lives in Curl/ (house rule 4).

internal import Foundation
public import Logging
internal import Synchronization
internal import ImageCacheSystem
public import ImageCacheHTTP

/// Runs upstream transfers through one libcurl multi handle with a global cap and a waiting queue.
public final class CurlOrigin: Origin, @unchecked Sendable {
    private struct State {
        var queue: TransferQueue<UInt64>
        var waiting: [UInt64: Transfer] = [:]
        var running: [UInt64: Transfer] = [:]
        var nextID: UInt64 = 1
        var transfersStarted = 0
        var isShutDown = false
    }

    // MARK: immutable after init
    private let settings: UpstreamSettings
    private let allowPrivateNetworks: Bool
    private let loopGuard: LoopGuard?
    private let logger: Logger
    private let multi: CurlMulti

    // MARK: shared, guarded by lock
    private let state: Locked<State>

    /// Makes the multi handle and starts its thread.
    /// `loopGuard`: refuses requests to the daemon's own listening sockets (508).
    public init(settings: UpstreamSettings, allowPrivateNetworks: Bool, loopGuard: LoopGuard? = nil, logger: Logger) throws {
        self.settings = settings
        self.allowPrivateNetworks = allowPrivateNetworks
        self.loopGuard = loopGuard
        self.logger = logger
        let maxTotalConnections = max(settings.maxConcurrentTransfers, settings.maxHostConnections)
        multi = try CurlMulti(maxHostConnections: settings.maxHostConnections,
                              maxTotalConnections: maxTotalConnections, logger: logger)
        state = Locked(State(queue: TransferQueue(maxConcurrent: max(settings.maxConcurrentTransfers, 1),
                                                 order: settings.queueOrder,
                                                 timeout: .milliseconds(Int64(settings.queueTimeoutSeconds * 1000)))))
        multi.start { [weak self] in self?.expireWaiting() }
        logger.debug("upstream ready", metadata: ["libcurl": "\(CurlGlobal.version)"])
    }

    deinit {
        multi.shutdown()
    }

    // MARK: counters (for metrics)

    /// Transfers holding a slot now.
    public var activeTransfers: Int { state.withLock { $0.queue.runningCount } }
    /// Transfers waiting for a slot now.
    public var queuedTransfers: Int { state.withLock { $0.queue.waitingCount } }
    /// Transfers given a slot since start.
    public var transfersStarted: Int { state.withLock { $0.transfersStarted } }

    // MARK: Origin

    public func fetch(_ request: UpstreamRequest, events: @escaping @Sendable (UpstreamEvent) -> Void) -> any UpstreamTransfer {
        let admitted = state.withLock { state -> (Transfer, TransferQueue<UInt64>.Admission?) in
            let transfer = Transfer(id: state.nextID, request: request, origin: self, sink: events)
            state.nextID += 1
            guard !state.isShutDown else { return (transfer, nil) }
            let admission = state.queue.submit(transfer.id, priority: request.priority, now: .now)
            switch admission {
            case .start:
                state.running[transfer.id] = transfer
                state.transfersStarted += 1
            case .wait:
                state.waiting[transfer.id] = transfer
            }
            return (transfer, admission)
        }
        switch admitted {
        case let (transfer, .start?):
            start(transfer)
        case (_, .wait?):
            break
        case let (transfer, nil):
            // Not on the caller's stack: events never run inside fetch.
            DispatchQueue.global().async { transfer.deliver(.failed(.cancelled)) }
        }
        return admitted.0
    }

    /// A dial is a transfer with nothing to send (CONNECT_ONLY): it waits for a slot like a fetch, is judged by the same
    /// guards on the address it connects to, and ends with the socket in its slot.
    public func dial(_ target: ConnectTarget, events: @escaping @Sendable (DialEvent) -> Void) -> any UpstreamTransfer {
        let slot = DialSlot()
        var request = UpstreamRequest(url: "http://\(target.authority)/", trusted: false)
        request.dialSlot = slot
        return fetch(request) { event in
            switch event {
            case .end:
                if let socket = slot.take() {
                    events(.connected(socket))
                } else {
                    events(.failed(.connect("the dial ended without a socket")))
                }
            case let .failed(error):
                events(.failed(error))
            case .interim, .head, .body:
                break   // a connect-only transfer sends no request: none come
            }
        }
    }

    /// Cancels every transfer (those not cancelled by their caller get `.failed(.cancelled)`) and stops the thread.
    public func shutdown() {
        let waiting = state.withLock { state -> [Transfer] in
            state.isShutDown = true
            _ = state.queue.removeAll()
            defer {
                state.waiting = [:]
                state.running = [:]
            }
            return Array(state.waiting.values)
        }
        for transfer in waiting { transfer.deliver(.failed(.cancelled)) }
        multi.shutdown()   // fails the running ones with .cancelled on the curl thread
    }

    // MARK: transfer lifecycle

    /// Gives `transfer` (which holds a slot) to the multi handle.
    private func start(_ transfer: Transfer) {
        // Untrusted transfers: every connection is judged, and they use their own connection cache.
        // Trusted ones (configured origins): the first hop is not judged, redirect hops elsewhere are.
        let guardMode: CurlEasy.AddressGuard = allowPrivateNetworks ? .off : (transfer.request.trusted ? .redirectsOnly : .always)
        let easy: CurlEasy
        do {
            easy = try CurlEasy(id: transfer.id, request: transfer.request, settings: settings,
                                addressGuard: guardMode, guardedConnections: multi.guardedConnections,
                                loopGuard: loopGuard, flow: transfer.flow, logger: logger) { [weak self] event in
                // The slot is free before the last event is passed on: whoever sees a transfer end sees its slot
                // free (and the next queued transfer started).
                if event.isTerminal { self?.ended(transfer.id) }
                transfer.deliver(event)
            }
        } catch {
            logger.error("could not set up upstream transfer", metadata: ["error": "\(error)", "url": "\(transfer.request.url)"])
            DispatchQueue.global().async { [weak self] in
                self?.ended(transfer.id)
                transfer.deliver(.failed(.other(error.description)))
            }
            return
        }
        // A streamed upload that paused for want of bytes resumes through the curl thread.
        let id = transfer.id
        transfer.request.streamedBody?.setResume { [weak self] in self?.multi.resume(id) }
        // Posting under the transfer's lock orders it against cancel(): a cancelled transfer is never added,
        // and a cancel that follows an add reaches the curl thread after it.
        let posted = transfer.markPosted { multi.add(easy) }
        if !posted {
            DispatchQueue.global().async { [weak self] in
                self?.ended(transfer.id)
                transfer.deliver(.failed(.cancelled))
            }
        }
    }

    /// `id` delivered its last event: frees its slot and starts who is next.
    private func ended(_ id: UInt64) {
        let next = state.withLock { state -> [Transfer] in
            state.running[id] = nil
            return Self._promote(state.queue.finish(id), in: &state)
        }
        next.forEach(start)
    }

    /// Called by `Transfer.setPaused`: pausing flags the easy handle (its write callback pauses at once), resuming
    /// goes through the curl thread.
    fileprivate func setPaused(_ transfer: Transfer, _ paused: Bool) {
        transfer.flow.setPaused(paused)
        if !paused && transfer.wasPosted { multi.resume(transfer.id) }
    }

    /// Called by `Transfer.consumed`: the consumer made room in the delivery window the handle waits for.
    fileprivate func resume(_ transfer: Transfer) {
        multi.resume(transfer.id)
    }

    /// Called by `Transfer.cancel` after it marked itself cancelled.
    fileprivate func cancel(_ transfer: Transfer) {
        let next = state.withLock { state -> [Transfer] in
            state.waiting[transfer.id] = nil
            state.running[transfer.id] = nil
            switch state.queue.cancel(transfer.id) {
            case let .removedRunning(next): return Self._promote(next, in: &state)
            case .removedWaiting, .unknown: return []
            }
        }
        if transfer.wasPosted { multi.cancel(transfer.id) }
        next.forEach(start)
    }

    /// Fails the transfers that waited too long. Runs on the curl thread; returns when to run again.
    private func expireWaiting() -> Duration? {
        let now = ContinuousClock.now
        let (expired, nextDeadline) = state.withLock { state -> ([Transfer], ContinuousClock.Instant?) in
            let ids = state.queue.expire(now: now)
            return (ids.compactMap { state.waiting.removeValue(forKey: $0) }, state.queue.nextDeadline)
        }
        for transfer in expired {
            logger.debug("upstream transfer timed out in queue", metadata: ["url": "\(transfer.request.url)"])
            transfer.deliver(.failed(.queueTimeout))
        }
        return nextDeadline.map { now.duration(to: $0) }
    }

    /// Moves the IDs the queue started from `waiting` to `running`. Caller holds the lock.
    private static func _promote(_ ids: [UInt64], in state: inout State) -> [Transfer] {
        ids.compactMap { id in
            guard let transfer = state.waiting.removeValue(forKey: id) else { return nil }
            state.running[id] = transfer
            state.transfersStarted += 1
            return transfer
        }
    }
}

/// The caller's handle on one upstream transfer; filters events after `cancel()`.
private final class Transfer: UpstreamTransfer, Sendable {
    private struct State {
        var cancelled = false
        var ended = false
        var posted = false
    }

    let id: UInt64
    let request: UpstreamRequest
    private weak let origin: CurlOrigin?
    private let sink: @Sendable (UpstreamEvent) -> Void
    private let state = Locked(State())
    /// Pauses the easy handle's reading (backpressure and the delivery window); see FlowControl.
    let flow: FlowControl

    init(id: UInt64, request: UpstreamRequest, origin: CurlOrigin, sink: @escaping @Sendable (UpstreamEvent) -> Void) {
        self.id = id
        self.request = request
        self.flow = FlowControl(window: request.deliveryWindow)
        self.origin = origin
        self.sink = sink
    }

    func cancel() {
        let first = state.withLock { state -> Bool in
            defer { state.cancelled = true }
            return !state.cancelled && !state.ended
        }
        if first { origin?.cancel(self) }
    }

    func setPaused(_ paused: Bool) {
        let live = state.withLock { !$0.cancelled && !$0.ended }
        if live { origin?.setPaused(self, paused) }
    }

    func consumed(_ bytes: Int) {
        guard flow.release(bytes) else { return }
        let live = state.withLock { !$0.cancelled && !$0.ended }
        if live { origin?.resume(self) }
    }

    /// Passes `event` on unless the transfer was cancelled or already ended.
    func deliver(_ event: UpstreamEvent) {
        let pass = state.withLock { state -> Bool in
            guard !state.cancelled, !state.ended else { return false }
            if event.isTerminal { state.ended = true }
            return true
        }
        if pass { sink(event) }
    }

    /// Runs `post` (which hands the transfer to the multi) unless cancelled; returns its result.
    func markPosted(_ post: () -> Bool) -> Bool {
        state.withLock { state in
            guard !state.cancelled else { return true }   // cancel() already freed the slot; nothing to report
            state.posted = post()
            return state.posted
        }
    }

    var wasPosted: Bool { state.withLock { $0.posted } }
}

extension UpstreamEvent {
    var isTerminal: Bool {
        switch self {
        case .end, .failed: true
        case .interim, .head, .body: false
        }
    }
}
