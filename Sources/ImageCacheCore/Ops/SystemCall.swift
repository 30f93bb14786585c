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
func syscall<T: FixedWidthInteger>(_ function: String, _ body: () -> T) throws(SystemError) -> T {
    while true {
        let result = body()
        if result >= 0 { return result }
        let code = errno
        if code == EINTR { continue }
        throw SystemError(errno: code, function: function)
    }
}

/// Closes `fd`, never retrying: on Linux the descriptor is released even when close reports EINTR.
func closeDescriptor(_ fd: Int32) {
    _ = close(fd)
}
