import Foundation
import ImageCacheTestSupport

/// Runs blocking socket code on a thread of its own and awaits its result.
///
/// Swift concurrency on Linux runs on the same few Dispatch worker threads as the server's queues (listener,
/// proxy, disk); a test blocked in `recv` on one of them would starve the server it is waiting for. Expectations stay in the
/// test (on its task): the closure only returns what it observed.
func offPool<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    // (handOver: the body's result, often bytes it read, is handed over through a lock ThreadSanitizer sees)
    try await handOver { (handed: @escaping @Sendable (Result<T, any Error>) -> Void) in
        Thread { handed(Result { try body() }) }.start()
    }
}
