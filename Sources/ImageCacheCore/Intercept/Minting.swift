// Minting: the `imagecached.certificates` queue (serial, utility), where interception's leaves are made: LeafMinter
// signs a P-256 leaf with the local CA (about a millisecond), and the DER becomes a TLSIdentity (OpenSSL objects,
// made once per leaf). One per proxy, shared by every CA generation: each mint carries its own CA.
//
// The bound: at most `queueLimit` (256) mints queued or running. Past it an ask is refused at once
// (LeafError.tooManyMints: the CONNECT gets 503 "too many certificates being made"), so a flood of CONNECTs to new
// hosts costs at most 256 ms of queued work and holds nothing more. LeafCache makes one mint per host, however many
// CONNECTs wait for it.
//
// Ownership: the queue runs the mints in order; `queued` and `minted` are atomics read by the stats from any thread.
// Each mint's `done` runs on the queue (LeafCache then answers its waiters there; each CONNECT hops to its own loop).

package import Foundation
package import ImageCacheHTTP
internal import ImageCacheTLS
package import ImageCacheCertificates
internal import Dispatch
internal import Synchronization

/// The certificates queue and its bound.
package final class Minting: Sendable {
    /// Most mints queued or running at once.
    package static let queueLimit = 256

    private let queue = DispatchQueue(label: "imagecached.certificates", qos: .utility)
    private let limit: Int
    /// Mints queued or running now.
    private let queuedCount = Atomic<Int>(0)
    /// Leaves made since start.
    private let mintedCount = Atomic<Int>(0)

    package init(limit: Int = Minting.queueLimit) {
        precondition(limit > 0, "minting needs room for one mint")
        self.limit = limit
    }

    /// Mints queued or running now (`leaf_mints_queued`).
    package var queued: Int { queuedCount.load(ordering: .relaxed) }

    /// Leaves made since start (`leaf_certificates_minted_total`).
    package var minted: Int { mintedCount.load(ordering: .relaxed) }

    /// Runs `work` on the queue and hands its result to `done` there; refused at once (on the caller's thread, with
    /// `tooManyMints`) when `limit` mints are queued or running.
    package func submit(_ work: @escaping @Sendable () -> Result<LeafCache.Leaf, LeafError>,
                        done: @escaping @Sendable (Result<LeafCache.Leaf, LeafError>) -> Void) {
        guard reserve() else {
            done(.failure(.tooManyMints(limit: limit)))
            return
        }
        queue.async { [self] in
            let result = work()
            queuedCount.subtract(1, ordering: .relaxed)
            if case .success = result { mintedCount.add(1, ordering: .relaxed) }
            done(result)
        }
    }

    /// A leaf for `host` signed by `ca`, valid from `now` (LeafMinter's rules), as a TLSIdentity.
    package static func make(host: InterceptHosts.Host, ca: LocalCA, now: Date) -> Result<LeafCache.Leaf, LeafError> {
        do {
            let minted = try LeafMinter.mint(host: host, ca: ca, now: now)
            let identity = try TLSIdentity(certificateDER: minted.certificateDER, privateKeyDER: minted.privateKeyDER)
            return .success(LeafCache.Leaf(identity: identity, notAfter: minted.notAfter))
        } catch {
            return .failure(.mintFailed(host: host.description, reason: "\(error)"))
        }
    }

    private func reserve() -> Bool {
        var current = queuedCount.load(ordering: .relaxed)
        while current < limit {
            let (exchanged, found) = queuedCount.compareExchange(expected: current, desired: current + 1, ordering: .relaxed)
            if exchanged { return true }
            current = found
        }
        return false
    }
}
