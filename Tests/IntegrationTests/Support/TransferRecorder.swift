// Collects one upstream transfer's events and lets a test await them (continuations, no polling).
//
//     let recorder = TransferRecorder()
//     let transfer = origin.fetch(request, events: recorder.record)
//     let head = try await recorder.head()           // the .head event (nil when it ended without one)
//     let outcome = try await recorder.completion()  // .end or .failed(error)
//     #expect(recorder.body == expectedBytes)
// Waits throw `TransferRecorder.Timeout` after their timeout.

import Foundation
import ImageCacheHTTP
import ImageCacheUpstream
import Synchronization
import ImageCacheSystem

final class TransferRecorder: Sendable {
    struct Timeout: Error {}

    enum Outcome: Sendable, Equatable {
        case end
        case failed(UpstreamError)
    }

    private struct Waiter {
        /// Returns the resumption to run (outside the lock) when the events satisfy the waiter.
        var check: @Sendable ([UpstreamEvent]) -> (@Sendable () -> Void)?
        var fail: @Sendable () -> Void
    }

    private struct State {
        var events: [UpstreamEvent] = []
        var waiters: [UInt64: Waiter] = [:]
        var nextWaiter: UInt64 = 0
    }

    private let state = Locked(State())

    init() {}

    /// The event sink to pass to `Origin.fetch`.
    var record: @Sendable (UpstreamEvent) -> Void {
        { [self] event in receive(event) }
    }

    var events: [UpstreamEvent] { state.withLock { $0.events } }

    var heads: [(HTTPResponseHead, String)] {
        events.compactMap { if case let .head(head, url, _) = $0 { (head, url) } else { nil } }
    }

    var body: [UInt8] {
        events.flatMap { event -> [UInt8] in if case let .body(bytes) = event { bytes } else { [] } }
    }

    var bodyEventCount: Int {
        events.filter { if case .body = $0 { true } else { false } }.count
    }

    var outcome: Outcome? { Self.outcome(events) }

    /// The head (and effective URL); nil when the transfer ended without one.
    func head(timeout: Duration = .seconds(60)) async throws -> (HTTPResponseHead, String)? {
        try await wait(timeout) { events -> (HTTPResponseHead, String)?? in
            if let head = Self.head(events) { return .some(head) }
            if Self.outcome(events) != nil { return .some(nil) }
            return nil
        }
    }

    /// Waits for `.end` or `.failed`.
    func completion(timeout: Duration = .seconds(60)) async throws -> Outcome {
        try await wait(timeout) { events in Self.outcome(events) }
    }

    /// Waits until `count` body bytes have arrived in all, or the transfer ended; returns the body bytes so far.
    func body(atLeast count: Int, timeout: Duration = .seconds(60)) async throws -> Int {
        try await wait(timeout) { events -> Int? in
            let received = events.reduce(0) { sum, event in if case let .body(bytes) = event { sum + bytes.count } else { sum } }
            return received >= count || Self.outcome(events) != nil ? received : nil
        }
    }

    private func wait<T: Sendable>(_ timeout: Duration, _ ready: @escaping @Sendable ([UpstreamEvent]) -> T?) async throws -> T {
        let id = state.withLock { state -> UInt64 in
            state.nextWaiter += 1
            return state.nextWaiter
        }
        return try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T, any Error>) in
            let check: @Sendable ([UpstreamEvent]) -> (@Sendable () -> Void)? = { events in
                guard let value = ready(events) else { return nil }
                return { continuation.resume(returning: value) }
            }
            let fail: @Sendable () -> Void = { continuation.resume(throwing: Timeout()) }
            let immediate: T? = state.withLock { state in
                if let value = ready(state.events) { return value }
                state.waiters[id] = Waiter(check: check, fail: fail)
                return nil
            }
            if let immediate {
                continuation.resume(returning: immediate)
                return
            }
            Task { [weak self] in
                try? await Task.sleep(for: timeout)
                let waiter = self?.state.withLock { $0.waiters.removeValue(forKey: id) }
                waiter?.fail()
            }
        }
    }

    private func receive(_ event: UpstreamEvent) {
        let resumptions = state.withLock { state -> [@Sendable () -> Void] in
            state.events.append(event)
            var resumptions: [@Sendable () -> Void] = []
            for (id, waiter) in state.waiters {
                if let resume = waiter.check(state.events) {
                    resumptions.append(resume)
                    state.waiters[id] = nil
                }
            }
            return resumptions
        }
        resumptions.forEach { $0() }
    }

    private static func head(_ events: [UpstreamEvent]) -> (HTTPResponseHead, String)? {
        for case let .head(head, url, _) in events { return (head, url) }
        return nil
    }

    private static func outcome(_ events: [UpstreamEvent]) -> Outcome? {
        for event in events {
            if case .end = event { return .end }
            if case let .failed(error) = event { return .failed(error) }
        }
        return nil
    }
}
