// Why an intercepted CONNECT got no leaf certificate: the status and the one-line reason its client is answered with.

/// A leaf that could not be had.
package enum LeafError: Error, Sendable, Equatable, CustomStringConvertible {
    /// `Minting.queueLimit` mints were queued already: 503, the client may try again.
    case tooManyMints(limit: Int)
    /// The mint itself failed (LeafMinter or OpenSSL refused the leaf): 500, with its reason.
    case mintFailed(host: String, reason: String)

    package var status: Int {
        switch self {
        case .tooManyMints: 503
        case .mintFailed: 500
        }
    }

    package var description: String {
        switch self {
        case let .tooManyMints(limit):
            "too many certificates being made (\(limit) queued); try again later"
        case let .mintFailed(host, reason):
            "cannot make a certificate for \(host): \(reason)"
        }
    }
}
