// What the interception tests share: a manual clock, a minter the test completes by hand, real leaves from a local
// CA made in memory, and a ConnectReply that records what the proxy answered.

import Dispatch
import Foundation
import ImageCacheSystem
@testable import ImageCacheHTTP
@testable import ImageCacheServer
@testable import ImageCacheTLS
@testable import ImageCacheCertificates
@testable import ImageCacheCore

/// A clock that moves only when told.
final class ManualClock: Sendable {
    private let time: Locked<Date>

    init(_ start: Date = Date(timeIntervalSince1970: 1_800_000_000)) { time = Locked(start) }

    var now: Date { time.withLock { $0 } }

    func advance(hours: Double) { time.withLock { $0 = $0.addingTimeInterval(hours * 3600) } }

    var function: @Sendable () -> Date { { [self] in now } }
}

/// A minter that keeps each ask until the test completes it (or answers at once, when `immediate` is set).
final class ScriptedMinter: Sendable {
    struct Ask {
        let host: InterceptHosts.Host
        let now: Date
        let done: @Sendable (Result<LeafCache.Leaf, LeafError>) -> Void
    }

    private let asks = Locked<[Ask]>([])
    private let calls = Locked(0)
    /// Answers every mint at once with this leaf (its notAfter 72 h after the mint's time).
    private let immediate: TLSIdentity?

    init(immediate: TLSIdentity? = nil) { self.immediate = immediate }

    var mint: LeafCache.Mint {
        { [self] host, now, done in
            calls.withLock { $0 += 1 }
            if let immediate {
                done(.success(LeafCache.Leaf(identity: immediate, notAfter: now.addingTimeInterval(72 * 3600))))
            } else {
                asks.withLock { $0.append(Ask(host: host, now: now, done: done)) }
            }
        }
    }

    /// Mints started so far.
    var count: Int { calls.withLock { $0 } }

    /// The oldest ask not yet completed.
    func take() -> Ask? { asks.withLock { $0.isEmpty ? nil : $0.removeFirst() } }
}

extension ScriptedMinter.Ask {
    /// Completes the mint with `identity`, valid 72 h from the mint's time.
    func complete(with identity: TLSIdentity) {
        done(.success(LeafCache.Leaf(identity: identity, notAfter: now.addingTimeInterval(72 * 3600))))
    }
}

/// Real leaves, made once per test process: a CA for images.test and *.example.com, and two leaves of its.
enum TestLeaves {
    static let ca = LocalCA.make(hosts: try! InterceptHosts.parse(["images.test", "*.example.com"]), hostname: "test", now: Date())
    static let first = identity(for: "images.test")
    static let second = identity(for: "images.test")

    static func identity(for host: String, ca: LocalCA = TestLeaves.ca) -> TLSIdentity {
        try! Minting.make(host: InterceptHosts.Host(host)!, ca: ca, now: Date()).get().identity
    }
}

/// Collects the answers a LeafCache gives, and lets the test wait for a number of them.
final class Answers: Sendable {
    private let answers = Locked<[Result<TLSIdentity, LeafError>]>([])
    private let arrived = DispatchSemaphore(value: 0)

    var answer: LeafCache.Answer {
        { [self] result in
            answers.withLock { $0.append(result) }
            arrived.signal()
        }
    }

    var all: [Result<TLSIdentity, LeafError>] { answers.withLock { $0 } }

    /// Waits for `count` answers in all; false after 10 s.
    func wait(for count: Int) -> Bool {
        while all.count < count {
            guard arrived.wait(timeout: .now() + 10) == .success else { return false }
        }
        return true
    }
}

/// A ConnectReply that records the proxy's answer; `intercept` is its own unless `usesDefaultIntercept`.
final class RecordingConnectReply: ConnectReply, @unchecked Sendable {
    enum Outcome {
        case refused(status: Int, reason: String)
        case tunnelled
        case intercepted(context: TLSContext, identity: TLSIdentity, target: ConnectTarget,
                         ended: @Sendable (TunnelReport) -> Void)
    }

    private let state = Locked<(outcome: Outcome?, cancel: (@Sendable () -> Void)?)>((nil, nil))
    private let answered = DispatchSemaphore(value: 0)

    func refuse(status: Int, reason: String) { record(.refused(status: status, reason: reason)) }

    func tunnel(_ socket: OwnedSocket, options: TunnelOptions, ended: @escaping @Sendable (TunnelReport) -> Void) {
        record(.tunnelled)
    }

    func intercept(_ context: TLSContext, identity: TLSIdentity, target: ConnectTarget, options: TunnelOptions,
                   ended: @escaping @Sendable (TunnelReport) -> Void) {
        record(.intercepted(context: context, identity: identity, target: target, ended: ended))
    }

    func onCancel(_ callback: @escaping @Sendable () -> Void) { state.withLock { $0.cancel = callback } }

    /// The client goes away.
    func leave() { state.withLock { $0.cancel }?() }

    /// What was answered so far (nil: nothing yet).
    var outcome: Outcome? { state.withLock { $0.outcome } }

    /// Waits for the answer; nil after 10 s.
    func waitForOutcome() -> Outcome? {
        if let outcome { return outcome }
        guard answered.wait(timeout: .now() + 10) == .success else { return nil }
        return outcome
    }

    private func record(_ outcome: Outcome) {
        let first = state.withLock { state in
            guard state.outcome == nil else { return false }
            state.outcome = outcome
            return true
        }
        if first { answered.signal() }
    }
}

/// A ConnectReply of a server that does not intercept yet: `intercept` is the protocol's default (501).
final class NonInterceptingReply: ConnectReply, @unchecked Sendable {
    private let refusal = Locked<(Int, String)?>(nil)
    private let answered = DispatchSemaphore(value: 0)

    func refuse(status: Int, reason: String) {
        refusal.withLock { $0 = (status, reason) }
        answered.signal()
    }

    func tunnel(_ socket: OwnedSocket, options: TunnelOptions, ended: @escaping @Sendable (TunnelReport) -> Void) {}

    func onCancel(_ callback: @escaping @Sendable () -> Void) {}

    func waitForRefusal() -> (Int, String)? {
        guard answered.wait(timeout: .now() + 10) == .success else { return nil }
        return refusal.withLock { $0 }
    }
}
