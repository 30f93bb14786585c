// Test doubles for the proxy's seams: an origin whose transfers the test drives by hand, and a response sink that
// records what a client would have received. Pure logic only: no sockets, no curl.

import Foundation
import Synchronization
@testable import ImageCacheHTTP
@testable import ImageCacheServer
@testable import ImageCacheUpstream
import ImageCacheSystem

/// A transfer the test feeds events into.
final class MockTransfer: UpstreamTransfer, @unchecked Sendable {
    let request: UpstreamRequest
    let events: @Sendable (UpstreamEvent) -> Void
    private let cancelled = Locked(false)
    init(request: UpstreamRequest, events: @escaping @Sendable (UpstreamEvent) -> Void) {
        self.request = request
        self.events = events
    }
    private let cancelSignal = DispatchSemaphore(value: 0)
    func cancel() {
        let first = cancelled.withLock { was in defer { was = true }; return !was }
        if first { cancelSignal.signal() }
    }
    var isCancelled: Bool { cancelled.withLock { $0 } }
    /// Blocks until the fetch cancels this transfer; false after `timeout` seconds.
    func waitCancelled(timeout: Double = 10) -> Bool {
        if isCancelled { return true }
        return cancelSignal.wait(timeout: .now() + timeout) == .success
    }

    /// Sends a whole 200 response: head, body, end.
    func respond(_ head: HTTPResponseHead, body: [UInt8]) {
        events(.head(head, url: request.url, redirects: []))
        if !body.isEmpty { events(.body(body)) }
        events(.end)
    }
}

/// Counts fetches and hands each transfer to the test, suspended until the test sends its events (Nuke's MockDataLoader).
final class MockOrigin: Origin, @unchecked Sendable {
    private let state = Locked<[MockTransfer]>([])
    /// Weak references to every transfer made, to prove none outlives its fetch.
    private let made = Locked<[WeakTransfer]>([])

    struct WeakTransfer { weak var transfer: MockTransfer? }

    /// Signalled once per transfer made (see `next`).
    private let madeSignal = DispatchSemaphore(value: 0)

    func fetch(_ request: UpstreamRequest, events: @escaping @Sendable (UpstreamEvent) -> Void) -> any UpstreamTransfer {
        let transfer = MockTransfer(request: request, events: events)
        state.withLock { $0.append(transfer) }
        made.withLock { $0.append(WeakTransfer(transfer: transfer)) }
        madeSignal.signal()
        return transfer
    }

    /// Blocks until the proxy has made one more transfer than `next` returned so far, and returns it (nil after
    /// `timeout` seconds): the test waits for the fetch, not for a number of queue hops.
    func next(timeout: Double = 10) -> MockTransfer? {
        guard madeSignal.wait(timeout: .now() + timeout) == .success else { return nil }
        return take()
    }

    var fetchCount: Int { made.withLock { $0.count } }
    var requests: [UpstreamRequest] { state.withLock { $0.map(\.request) } }
    /// Removes and returns the oldest transfer not yet taken.
    func take() -> MockTransfer? { state.withLock { $0.isEmpty ? nil : $0.removeFirst() } }
    var liveTransfers: Int { made.withLock { $0.filter { $0.transfer != nil }.count } }
}

/// Stands for an event loop: counts the tasks posted to it and runs each at once.
final class CountingExecutor: SinkExecutor, @unchecked Sendable {
    private let count = Locked(0)
    var tasks: Int { count.withLock { $0 } }
    func execute(_ task: @escaping @Sendable () -> Void) {
        count.withLock { $0 += 1 }
        task()
    }
}

/// Records a response as a client would see it.
final class MockSink: ResponseSink, @unchecked Sendable {
    private struct State {
        var status: Int?
        var headers = HTTPHeaders()
        var body: [UInt8] = []
        var ended = false
        var aborted = false
        var cancel: (@Sendable () -> Void)?
    }
    private let state = Locked(State())
    /// Signalled when the response is over (ended, answered whole, or aborted).
    private let over = DispatchSemaphore(value: 0)
    /// The "event loop" the sink says its calls belong to (nil: none).
    let executor: (any SinkExecutor)?

    init(executor: (any SinkExecutor)? = nil) { self.executor = executor }

    func head(_ head: HTTPResponseHead, bodyLength: Int?) {
        state.withLock { $0.status = head.status; $0.headers = head.headers }
    }
    func body(_ chunk: [UInt8]) { state.withLock { $0.body += chunk } }
    func end() {
        state.withLock { $0.ended = true }
        over.signal()
    }
    func respond(_ head: HTTPResponseHead, body: [UInt8]) {
        state.withLock { $0.status = head.status; $0.headers = head.headers; $0.body = body; $0.ended = true }
        over.signal()
    }
    func abort() {
        state.withLock { $0.aborted = true }
        over.signal()
    }
    /// Blocks until the response is over (ended or aborted); false after `timeout` seconds.
    func waitForEnd(timeout: Double = 10) -> Bool { over.wait(timeout: .now() + timeout) == .success }
    func onCancel(_ callback: @escaping @Sendable () -> Void) { state.withLock { $0.cancel = callback } }

    var status: Int? { state.withLock { $0.status } }
    var body: [UInt8] { state.withLock { $0.body } }
    var ended: Bool { state.withLock { $0.ended } }
    var aborted: Bool { state.withLock { $0.aborted } }
    func header(_ name: String) -> String? { state.withLock { $0.headers[name] } }
    /// The client goes away.
    func leave() { state.withLock { $0.cancel }?() }
}
