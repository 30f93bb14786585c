// A value guarded by a lock: the standard library's `Synchronization.Mutex`, told to ThreadSanitizer.
//
// On Linux `Mutex` waits on a futex inside the standard library, which is not built with ThreadSanitizer, so the
// sanitizer sees none of the ordering the lock gives and reports every access it guards as a race (316 reports in
// one run of the suite, all of them state under a lock). `Locked` is `Mutex` with the same `withLock`; in a build
// for `scripts/sanitize thread` (compiled with -DIMAGECACHED_TSAN) it also announces each critical section to the
// sanitizer (`__tsan_acquire` on entry, `__tsan_release` on exit, on the lock's own address), so a report is a
// real race. In every other build the annotations do not exist and `withLock` is `Mutex.withLock`, inlined.
// Use it wherever code would use `Mutex`; the house's "guarded by its Mutex" means this.

public import Synchronization

/// A `Value` that only one thread at a time may touch, inside `withLock`.
@frozen
public struct Locked<Value: ~Copyable>: ~Copyable, @unchecked Sendable {
    @usableFromInline let mutex: Mutex<Value>

    @inlinable
    public init(_ initialValue: consuming sending Value) {
        mutex = Mutex(initialValue)
    }

    /// Runs `body` with the value, holding the lock.
    @inlinable @inline(__always)
    public borrowing func withLock<Result: ~Copyable, E: Error>(
        _ body: (inout sending Value) throws(E) -> sending Result
    ) throws(E) -> sending Result {
        #if IMAGECACHED_TSAN
        let address = withUnsafePointer(to: self) { UnsafeRawPointer($0) }
        return try mutex.withLock { (value: inout sending Value) throws(E) -> sending Result in
            tsanAcquire(address)
            defer { tsanRelease(address) }
            return try body(&value)
        }
        #else
        return try mutex.withLock(body)
        #endif
    }
}

#if IMAGECACHED_TSAN
// ThreadSanitizer's annotation interface (compiler-rt's tsan_interface.h), present in a -sanitize=thread build.
@usableFromInline @_silgen_name("__tsan_acquire") func tsanAcquire(_ address: UnsafeRawPointer)
@usableFromInline @_silgen_name("__tsan_release") func tsanRelease(_ address: UnsafeRawPointer)
#endif
