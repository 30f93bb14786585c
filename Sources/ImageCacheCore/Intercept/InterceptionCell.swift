// InterceptionCell: the CA generation in force (nil without intercept-hosts), read once per intercepted CONNECT and
// swapped whole when the daemon's start or a reload hands over a CA with another fingerprint: the old generation's
// leaves and ticket keys go with it (connections already open keep theirs: each holds its own references). The same
// fingerprint keeps the generation, and its leaves, as they are.
//
// Ownership: the generation under its Mutex. `use` is called by one thread at a time (the daemon's start, then the
// signal queue's reloads); the new generation is built before the lock is taken.

package import ImageCacheTLS
package import ImageCacheCertificates
package import ImageCacheStatus
internal import ImageCacheSystem
package import Foundation

/// The interception generation in force.
package final class InterceptionCell: Sendable {
    /// What `use` did.
    package enum Change: Equatable {
        /// The CA in force was the one given (or there was none either way).
        case unchanged
        /// A new generation (the first CA, or a new fingerprint): the old leaves are gone.
        case started(fingerprint: String)
        /// No CA any more: nothing is intercepted.
        case ended
    }

    private let generation = Locked<Interception?>(nil)
    /// The certificates queue every generation mints on.
    package let minting: Minting
    private let now: @Sendable () -> Date

    package init(minting: Minting = Minting(), now: @escaping @Sendable () -> Date) {
        self.minting = minting
        self.now = now
    }

    /// The generation in force, nil when nothing is intercepted.
    package var current: Interception? { generation.withLock { $0 } }

    /// Puts `ca` in force (nil: none).
    package func use(_ ca: LocalCA?) throws(TLSError) -> Change {
        guard let ca else {
            let had = generation.withLock { generation in
                defer { generation = nil }
                return generation != nil
            }
            return had ? .ended : .unchanged
        }
        if current?.fingerprint == ca.fingerprint { return .unchanged }
        let next = try Interception(ca: ca, minting: minting, now: now)
        generation.withLock { $0 = next }
        return .started(fingerprint: ca.fingerprint)
    }

    /// The leaves' counts for the stats (nil when nothing is intercepted and nothing was ever minted).
    package var stats: DaemonStats.LeafCertificates? {
        let cached = current?.leaves.count
        guard cached != nil || minting.minted > 0 else { return nil }
        return DaemonStats.LeafCertificates(minted: minting.minted, cached: cached ?? 0, mintsQueued: minting.queued)
    }
}
