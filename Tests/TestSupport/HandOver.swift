// Awaiting a value that a callback hands over on another thread, in a way ThreadSanitizer can follow.
//
// Swift's runtime publishes a continuation's resumption with atomics of its own, which TSan does not see; when the
// resume comes before the await (the awaiting task was slow to suspend: a loaded machine), the await takes a fast path
// with no TSan annotation at all (swiftlang/swift#57803). Whatever the resuming thread wrote before it resumed (the
// fields of an object it made, an array's buffer) is then reported as a race when the awaiting test reads it: seen on a
// `FleetLease` under load. `handOver` passes the value through a pthread mutex (NSLock), which TSan does see, and
// resumes with nothing.

public import Foundation

/// Calls `start` with a callback and returns the value the callback is given (once; later calls are ignored).
public func handOver<T: Sendable>(_ start: (@escaping @Sendable (T) -> Void) -> Void) async -> T {
    let box = HandOverBox<T>()
    await withCheckedContinuation { (handed: CheckedContinuation<Void, Never>) in
        start { value in
            if box.put(value) { handed.resume() }
        }
    }
    return box.take()
}

/// `handOver` for a callback that may fail.
public func handOver<T: Sendable>(throwing start: (@escaping @Sendable (Result<T, any Error>) -> Void) -> Void) async throws -> T {
    try await handOver(start).get()
}

/// The value in passage; its lock is the hand-over's synchronisation. Owned by one `handOver` call.
private final class HandOverBox<T>: @unchecked Sendable {
    private let lock = NSLock()
    /// Guarded by `lock`.
    private var value: T?

    /// Keeps the first value; false for a later one.
    func put(_ newValue: T) -> Bool {
        lock.withLock {
            guard value == nil else { return false }
            value = newValue
            return true
        }
    }

    func take() -> T {
        lock.withLock {
            guard let value else { preconditionFailure("handOver resumed without a value") }
            return value
        }
    }
}
