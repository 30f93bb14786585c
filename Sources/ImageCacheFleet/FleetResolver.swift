// Names resolved off the fleet thread. getaddrinfo blocks (for seconds when a DNS server is slow or gone), and the
// fleet thread must never block: each resolution runs on a short-lived detached thread of its own (`icd.fleet-dns`),
// which calls the resolver and hands the result to `answer` (the client posts it to its own inbox, as any other
// command, so the fleet thread takes it at its next turn). A slow name holds only its own thread: other names resolve
// meanwhile, and the fleet thread goes on serving every server it can reach.
//
// Ownership: FleetResolver is immutable. The fleet thread starts at most one resolution per server at a time
// (FleetLink.address records it, with a token that names it), so there are at most as many of these threads as
// configured servers; a resolution still out when the tier shuts down ends on its own and its answer is refused by the
// closed inbox.

#if canImport(Glibc)
internal import Glibc
#endif
internal import ImageCacheSystem

struct FleetResolver: Sendable {
    let resolve: SocketAddress.Resolver

    /// Resolves `host`:`port` on a new thread and calls `answer` there with the result; on the caller's thread when no
    /// thread can be made (the failure then says so).
    func start(host: String, port: Int, answer: @escaping @Sendable (Result<SocketAddress, ResolveError>) -> Void) {
        let resolve = resolve
        do {
            _ = try startThread(detached: true) {  // nobody joins it: its resources go when it ends
                nameThisThread("icd.fleet-dns")
                answer(resolve(host, port))
            }
        } catch {
            answer(.failure(ResolveError(message: "no thread to resolve it (\(String(cString: strerror(error.errno))))")))
        }
    }
}

