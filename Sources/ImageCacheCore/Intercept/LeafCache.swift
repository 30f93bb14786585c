// LeafCache: one CA generation's leaf certificates, by host (docs/design/issue-29-plan.md, D9 and step 5). An
// intercepted CONNECT asks it for its host's identity; a cached leaf answers at once, on the asking thread, and a
// host with none waits for one mint, however many CONNECTs ask for it.
//
// The rules (`freshness`, pure), for a host's cached leaf at the time of an ask:
//   age under 48 h (renewAfter)                  fresh    the leaf, at once
//   age 48 h or more                             renew    the leaf, at once; and one re-mint starts unless one is in
//                                                         flight: the old leaf serves until the new one lands
//   within 1 h of its notAfter (expiryMargin)    expired  dropped: the ask waits for the host's mint, as with none
//                                                         (a client whose clock is ahead still takes what it is sent)
//   no leaf                                               the first ask starts the host's mint, later asks join it
// A mint that lands is cached, the least recently used host going past 1024 (capacity), and handed to every ask
// waiting for it. A failed mint is handed to them as the failure (LeafError); a leaf it would have replaced stays, and
// the next ask in its renew window tries again. Leaves live in memory only; a new generation (a new CA) is a new
// LeafCache, and this one goes with its Interception.
//
// Ownership: `state`, under its Mutex: the leaves (identity, when minted, notAfter, last use), the use stamp, and the
// mints in flight with their waiters. The mint function is called, and every answer delivered, with the lock
// released: a mint that answers at once (a refusal from a full queue, a test's minter) comes back through `landed`.
// Answers run on the asking thread (a hit, a refusal) or on the thread the mint lands on (the certificates queue).

package import Foundation
package import ImageCacheHTTP
package import ImageCacheTLS
internal import ImageCacheSystem

/// One generation's leaves, by host: an LRU of `capacity` hosts, with the mints in flight and their waiters.
package final class LeafCache: Sendable {
    /// A minted leaf as the cache keeps it: the identity a connection presents, and when it stops being valid.
    package struct Leaf: Sendable {
        package let identity: TLSIdentity
        package let notAfter: Date

        package init(identity: TLSIdentity, notAfter: Date) {
            self.identity = identity
            self.notAfter = notAfter
        }
    }

    package typealias Answer = @Sendable (Result<TLSIdentity, LeafError>) -> Void
    /// Mints a leaf for a host at a time and calls back once, on any thread (at once when it refuses).
    package typealias Mint = @Sendable (_ host: InterceptHosts.Host, _ now: Date,
                                        _ done: @escaping @Sendable (Result<Leaf, LeafError>) -> Void) -> Void

    /// Hosts whose leaves are kept.
    package static let capacity = 1024
    /// A leaf this old is re-minted at the next ask (it is valid for 72 h: LeafMinter.lifetimeSeconds).
    package static let renewAfter: TimeInterval = 48 * 3600
    /// A leaf is not handed out in the last hour before its notAfter.
    package static let expiryMargin: TimeInterval = 3600

    // MARK: the rules

    package enum Freshness: Equatable {
        case fresh
        case renew
        case expired
    }

    /// What a cached leaf minted at `mintedAt`, valid until `notAfter`, is worth at `now`.
    package static func freshness(mintedAt: Date, notAfter: Date, now: Date) -> Freshness {
        if now >= notAfter.addingTimeInterval(-expiryMargin) { return .expired }
        if now.timeIntervalSince(mintedAt) >= renewAfter { return .renew }
        return .fresh
    }

    // MARK: state

    private struct Entry {
        var leaf: Leaf
        var mintedAt: Date
        var lastUse: UInt64
    }

    private struct State {
        var entries: [InterceptHosts.Host: Entry] = [:]
        /// Bumped by every use; the entry with the lowest `lastUse` goes first.
        var stamp: UInt64 = 0
        /// The hosts being minted, and the asks waiting for each (empty for a re-mint nobody waits for).
        var minting: [InterceptHosts.Host: [Answer]] = [:]
    }

    /// What an ask does once the lock is released.
    private enum Step {
        case answer(TLSIdentity)
        case answerAndMint(TLSIdentity)
        case mint
        case wait
    }

    // MARK: shared, guarded by its lock
    private let state = Locked(State())

    // MARK: immutable
    private let mint: Mint
    private let now: @Sendable () -> Date
    private let capacity: Int

    package init(capacity: Int = LeafCache.capacity, now: @escaping @Sendable () -> Date, mint: @escaping Mint) {
        precondition(capacity > 0, "a leaf cache holds at least one host")
        self.capacity = capacity
        self.now = now
        self.mint = mint
    }

    /// Leaves cached now.
    package var count: Int { state.withLock { $0.entries.count } }

    /// Hosts being minted now.
    package var mintsInFlight: Int { state.withLock { $0.minting.count } }

    /// `host`'s identity: `answer` runs at once with a cached leaf, else when the host's mint lands or fails.
    package func identity(for host: InterceptHosts.Host, _ answer: @escaping Answer) {
        let time = now()
        let step: Step = state.withLock { state in
            state.stamp &+= 1
            if let entry = state.entries[host] {
                switch Self.freshness(mintedAt: entry.mintedAt, notAfter: entry.leaf.notAfter, now: time) {
                case .fresh:
                    state.entries[host]!.lastUse = state.stamp
                    return .answer(entry.leaf.identity)
                case .renew:
                    state.entries[host]!.lastUse = state.stamp
                    guard state.minting[host] == nil else { return .answer(entry.leaf.identity) }
                    state.minting[host] = []
                    return .answerAndMint(entry.leaf.identity)
                case .expired:
                    state.entries[host] = nil
                }
            }
            if state.minting[host] != nil {
                state.minting[host]!.append(answer)
                return .wait
            }
            state.minting[host] = [answer]
            return .mint
        }
        switch step {
        case let .answer(identity):
            answer(.success(identity))
        case let .answerAndMint(identity):
            answer(.success(identity))
            start(host, at: time)
        case .mint:
            start(host, at: time)
        case .wait:
            break
        }
    }

    private func start(_ host: InterceptHosts.Host, at time: Date) {
        mint(host, time) { [self] result in landed(host, mintedAt: time, result) }
    }

    /// A mint ended: its leaf is cached (evicting past capacity), and every ask waiting for it is answered.
    private func landed(_ host: InterceptHosts.Host, mintedAt: Date, _ result: Result<Leaf, LeafError>) {
        let waiters: [Answer] = state.withLock { state in
            let waiters = state.minting.removeValue(forKey: host) ?? []
            if case let .success(leaf) = result {
                state.stamp &+= 1
                state.entries[host] = Entry(leaf: leaf, mintedAt: mintedAt, lastUse: state.stamp)
                Self.evict(&state, capacity: capacity)
            }
            return waiters
        }
        let answer = result.map(\.identity)
        for waiter in waiters { waiter(answer) }
    }

    /// Drops the least recently used hosts past `capacity`: a scan of at most `capacity` entries, once per landed
    /// mint (about a millisecond's work each), never on a hit.
    private static func evict(_ state: inout State, capacity: Int) {
        while state.entries.count > capacity {
            guard let oldest = state.entries.min(by: { $0.value.lastUse < $1.value.lastUse })?.key else { return }
            state.entries[oldest] = nil
        }
    }
}
