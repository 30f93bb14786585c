// Interception: one CA generation (docs/design/issue-29-plan.md, D9 Generations). The local CA, named by its SHA-256
// fingerprint; the server TLSContext its leaves are served on (one for the whole generation, with no certificate of
// its own: each intercepted connection's stream presents its host's leaf, so the generation's ticket keys serve
// every host and survive a leaf's re-mint); and the LeafCache of its leaves, which mints through the shared
// certificates queue with this CA. A new CA is a new Interception: its context has new ticket keys (old tickets fall
// back to full handshakes) and its cache starts empty.
//
// Immutable; the parts guard themselves (TLSContext: OpenSSL; LeafCache: its Mutex).

package import Foundation
package import ImageCacheTLS
package import ImageCacheCertificates
internal import ImageCacheSystem

/// One CA generation: the CA, its server context and its leaves.
package final class Interception: Sendable {
    package let ca: LocalCA
    /// The CA's SHA-256 fingerprint ("AB:CD:..."): the generation's name.
    package var fingerprint: String { ca.fingerprint }
    /// The server context every intercepted connection of this generation is served on (replaced by a fresh one, with
    /// new ticket keys, by `rotateTicketKeys`).
    package var context: TLSContext { contextCell.withLock { $0 } }
    private let contextCell: Locked<TLSContext>
    package let leaves: LeafCache

    package init(ca: LocalCA, minting: Minting, now: @escaping @Sendable () -> Date) throws(TLSError) {
        self.ca = ca
        contextCell = Locked(try TLSContext.server())
        leaves = LeafCache(now: now) { host, mintedAt, done in
            minting.submit({ Minting.make(host: host, ca: ca, now: mintedAt) }, done: done)
        }
    }

    /// A fresh context, so fresh ticket keys (OpenSSL's are made with a context and live as long as it): tickets issued
    /// before fall back to full handshakes, and a ticket key that leaks exposes at most one period's TLS 1.2 sessions.
    /// The leaves stay (they do not depend on the context).
    package func rotateTicketKeys() throws(TLSError) {
        let next = try TLSContext.server()
        contextCell.withLock { $0 = next }
    }
}
