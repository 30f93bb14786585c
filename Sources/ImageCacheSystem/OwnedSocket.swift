// A connected socket handed from one owner to the next (the curl thread that dialled it, the proxy that decides,
// the event loop that pumps it). Exactly one owner at a time: `take()` moves the descriptor out, and a socket
// nobody took is closed when the last reference goes, so a tunnel refused or abandoned on the way never leaks it.

internal import Synchronization

/// A connected socket descriptor and the peer it reached, closed on release unless taken.
public final class OwnedSocket: Sendable {
    /// The peer's address as text ("93.184.216.34", "2001:db8::1") and port, for logs and the tunnel's report.
    public let peer: String
    public let port: Int
    private let descriptor: Mutex<Int32?>

    /// Takes ownership of `fd`.
    public init(fd: Int32, peer: String, port: Int) {
        self.descriptor = Mutex(fd)
        self.peer = peer
        self.port = port
    }

    /// Moves the descriptor out (once): the caller now closes it. nil when it was taken already.
    public func take() -> Int32? {
        descriptor.withLock { fd in
            defer { fd = nil }
            return fd
        }
    }

    deinit {
        if let fd = descriptor.withLock({ $0 }) { closeDescriptor(fd) }
    }
}
