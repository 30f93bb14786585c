// Runs a program to its end with posix_spawn, for the tests (openssl, curl, ip, systemd-analyze, ...): what
// Foundation's Process does, without its launch path. Process.run in Swift 6.3.1's Foundation on Linux copies each
// /proc/self/fd entry's whole 256-byte name (swift-corelibs-foundation #5472, fixed after 6.3.1): when an entry ends
// its read buffer at an unmapped page it crashes (SIGSEGV in memcpy). The suite, with hundreds of sockets open at
// once, hit it in about every other full run; this path never lists the descriptors.
//
// Output and error are pipes (a program may open /dev/stdout or /dev/stderr, which a socket cannot be), the input a
// socket pair (a write to a child that left does not raise SIGPIPE). They are made close-on-exec under `spawnLock`,
// which every spawner of the tests holds from its pipes to its posix_spawn (MemcachedProcess, DaemonProcess), so no
// child inherits another's pipe and holds it open past its end. Output and error are read on threads of their own,
// the input written on a third: a child that fills one pipe while the caller waits on another does not stall.

import Foundation
import ImageCacheSystem

public enum Subprocess {
    /// Held by every spawner of the tests from making its pipes to its posix_spawn (see the top).
    private static let spawnLock = NSLock()
    public static func lockSpawns() { spawnLock.lock() }
    public static func unlockSpawns() { spawnLock.unlock() }

    public struct Result: Sendable {
        public var status: Int32
        public var output: [UInt8]
        public var error: [UInt8]
        /// The exit code, or 128 + the signal that ended it.
        public var exitCode: Int32 { status & 0x7f == 0 ? (status >> 8) & 0xff : 128 + (status & 0x7f) }
        public var outputText: String { String(decoding: output, as: UTF8.self) }
        public var errorText: String { String(decoding: error, as: UTF8.self) }
    }

    public struct Failure: Error, CustomStringConvertible {
        public var description: String
    }

    /// Runs `executable` with `arguments` (`environment`: the whole environment; nil: this process's), feeding it
    /// `input` (nil: /dev/null), and waits for its end. `mergeError`: its error goes to `output` too.
    public static func run(_ executable: String, _ arguments: [String], environment: [String: String]? = nil,
                           input: [UInt8]? = nil, mergeError: Bool = false) throws -> Result {
        spawnLock.lock()
        var locked = true
        defer { if locked { spawnLock.unlock() } }
        let output = try pipePair(), error = try pipePair()
        let stdin = input == nil ? nil : try pair()
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        if let stdin { posix_spawn_file_actions_adddup2(&actions, stdin.child, 0) } else {
            posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        }
        posix_spawn_file_actions_adddup2(&actions, output.child, 1)
        posix_spawn_file_actions_adddup2(&actions, mergeError ? output.child : error.child, 2)
        let argv = ([executable] + arguments).map { strdup($0) } + [nil]
        let env = (environment ?? ProcessInfo.processInfo.environment).map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer {
            argv.forEach { free($0) }
            env.forEach { free($0) }
        }
        var pid: pid_t = 0
        let spawned = posix_spawn(&pid, executable, &actions, nil, argv, env)
        spawnLock.unlock()
        locked = false
        for fd in [output.child, error.child, stdin?.child].compactMap({ $0 }) { close(fd) }
        guard spawned == 0 else {
            for fd in [output.parent, error.parent, stdin?.parent].compactMap({ $0 }) { close(fd) }
            throw Failure(description: "posix_spawn \(executable): \(String(cString: strerror(spawned)))")
        }
        if let stdin, let input {
            let fd = stdin.parent
            Thread.detachNewThread {
                var offset = 0
                while offset < input.count {
                    let sent = input[offset...].withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
                    guard sent > 0 else { break }
                    offset += sent
                }
                close(fd)
            }
        }
        let errorBytes = Locked<[UInt8]>([])
        let errorRead = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            errorBytes.withLock { $0 = readAll(error.parent) }
            errorRead.signal()
        }
        let outputBytes = readAll(output.parent)
        errorRead.wait()
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        return Result(status: status, output: outputBytes, error: errorBytes.withLock { $0 })
    }

    /// A connected pair: the parent's end and the child's (both close-on-exec; posix_spawn's dup2 clears it on the
    /// child's copy).
    private static func pair() throws -> (parent: Int32, child: Int32) {
        var fds: [Int32] = [0, 0]
        guard socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &fds) == 0 else {
            throw Failure(description: "socketpair: errno \(errno)")
        }
        return (fds[0], fds[1])
    }

    /// A pipe: the parent's (read) end and the child's (write) end, both close-on-exec (under `spawnLock`).
    private static func pipePair() throws -> (parent: Int32, child: Int32) {
        var fds: [Int32] = [0, 0]
        guard pipe(&fds) == 0 else { throw Failure(description: "pipe: errno \(errno)") }
        for fd in fds { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
        return (fds[0], fds[1])
    }

    /// Everything until the end, then closes `fd`.
    private static func readAll(_ fd: Int32) -> [UInt8] {
        defer { close(fd) }
        var bytes: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65536)
        while true {
            let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if count < 0 && errno == EINTR { continue }
            guard count > 0 else { return bytes }
            bytes += buffer[..<count]
        }
    }
}
