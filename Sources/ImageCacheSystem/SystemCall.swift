// The one place where errno becomes a Swift error (cf. swift-nio `System.swift`).
//
// `syscall` runs a C call that reports failure with a negative result (-1) and errno, retries it while it
// fails with EINTR, and throws `SystemError` otherwise. EAGAIN/EWOULDBLOCK are thrown like any other errno:
// callers on non-blocking sockets catch them with `SystemError.isWouldBlock`.

#if canImport(Glibc)
internal import Glibc
#elseif canImport(Darwin)
internal import Darwin
#endif

/// A failed system call: the errno it left and the name of the call.
public struct SystemError: Error, Sendable, Equatable, CustomStringConvertible {
    public var errno: Int32
    public var function: String

    public init(errno: Int32, function: String) {
        self.errno = errno
        self.function = function
    }

    /// EAGAIN or EWOULDBLOCK: a non-blocking socket has nothing to give or no room to take.
    public var isWouldBlock: Bool { errno == EAGAIN || errno == EWOULDBLOCK }

    public var description: String {
        "\(function) failed: \(String(cString: strerror(errno))) (errno \(errno))"
    }
}

/// Runs `body`, retrying on EINTR; a negative result throws `SystemError` with the current errno.
@discardableResult
package func syscall<T: FixedWidthInteger>(_ function: String, _ body: () -> T) throws(SystemError) -> T {
    while true {
        let result = body()
        if result >= 0 { return result }
        let code = errno
        if code == EINTR { continue }
        throw SystemError(errno: code, function: function)
    }
}

/// Closes `fd`, never retrying: on Linux the descriptor is released even when close reports EINTR.
package func closeDescriptor(_ fd: Int32) {
    _ = close(fd)
}

/// Names the calling thread for ps, top and perf (at most 15 bytes are kept) by writing /proc/thread-self/comm:
/// what pthread_setname_np does, which Glibc's Swift module leaves out. Best effort: a failure leaves the name.
package func nameThisThread(_ name: String) {
    let fd = open("/proc/thread-self/comm", O_WRONLY | O_CLOEXEC)
    guard fd >= 0 else { return }
    var bytes = Array(name.utf8.prefix(15))
    _ = write(fd, &bytes, bytes.count)
    closeDescriptor(fd)
}

/// Reads of a file at an offset (pread), for bodies on disk.
package enum FileRead {
    package static func read(_ fd: Int32, count: Int, offset: Int) throws(SystemError) -> [UInt8] {
        var failure: SystemError?
        let bytes = [UInt8](unsafeUninitializedCapacity: count) { buffer, initialized in
            do throws(SystemError) {
                initialized = try read(fd, into: UnsafeMutableRawBufferPointer(buffer), offset: offset)
            } catch {
                failure = error
                initialized = 0
            }
        }
        if let failure { throw failure }
        return bytes
    }

    /// Fills `buffer` from `offset`; returns the bytes read (fewer only at the end of the file).
    package static func read(_ fd: Int32, into buffer: UnsafeMutableRawBufferPointer, offset: Int) throws(SystemError) -> Int {
        var done = 0
        while done < buffer.count {
            let n = try syscall("pread") {
                pread(fd, buffer.baseAddress! + done, buffer.count - done, off_t(offset + done))
            }
            if n == 0 { break }
            done += n
        }
        return done
    }
}

/// What `fstat` says of who may use an open file: its owner, its permission bits and whether it is a regular file
/// (the local CA's key is checked on the descriptor it is read from, as ssh checks its keys).
package struct FileOwnership: Sendable, Equatable {
    package var uid: UInt32
    /// The permission bits (mode & 0o7777).
    package var permissions: UInt32
    package var isRegularFile: Bool

    package static func of(_ fd: Int32) throws(SystemError) -> FileOwnership {
        var info = stat()
        try syscall("fstat") { fstat(fd, &info) }
        return FileOwnership(uid: UInt32(info.st_uid), permissions: UInt32(info.st_mode) & 0o7777,
                             isRegularFile: info.st_mode & S_IFMT == S_IFREG)
    }
}
