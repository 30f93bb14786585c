// Starting a thread of our own: the one place that calls pthread_create (event loops, the fleet thread, the fleet's
// name lookups). pthread_create itself, not Foundation's Thread: Thread.start ignores a failure to create the thread
// (at a task limit, say), which would leave a loop nobody runs.

#if canImport(Glibc)
internal import Glibc
#elseif canImport(Darwin)
internal import Darwin
#endif

/// Runs `body` on a new thread and returns its pthread_t. `detached`: nobody joins it, and its resources go when it
/// ends. The thread holds `body` (and what it captures) until it exits. Throws the errno pthread_create gave.
package func startThread(detached: Bool, _ body: @escaping () -> Void) throws(SystemError) -> UInt {
    let start = Unmanaged.passRetained(ThreadBody(body))
    var handle = pthread_t()
    let created = pthread_create(&handle, nil, { argument in
        Unmanaged<ThreadBody>.fromOpaque(argument!).takeRetainedValue().body()
        return nil
    }, start.toOpaque())
    guard created == 0 else {
        start.release()
        throw SystemError(errno: created, function: "pthread_create")
    }
    if detached { pthread_detach(handle) }
    return UInt(handle)
}

/// What a new thread runs (handed to pthread_create as its argument).
private final class ThreadBody {
    let body: () -> Void
    init(_ body: @escaping () -> Void) { self.body = body }
}
