// The built imagecached binary as a child process, for tests of what only a process has: signals, the systemd
// notification socket, socket activation (a listening socket as fd 3, LISTEN_PID = the child's own pid).
//
// Spawned with posix_spawn through `/bin/sh -c 'LISTEN_PID=$$; export LISTEN_PID; exec "$0" "$@"'`: the shell learns
// its pid and exec keeps it, so the daemon sees LISTEN_PID equal to getpid() as systemd would set it. Standard
// error (and output) go to a pipe read by a thread of its own; tests wait for log lines, never sleep.

import Foundation
import ImageCacheTestSupport
import Synchronization
import ImageCacheSystem

final class DaemonProcess: @unchecked Sendable {
    let pid: pid_t
    private let output = Locked("")
    /// Broadcast by the reader thread after each read and at the exit: `waitForLog` sleeps on it, it never polls.
    private let logChanged = NSCondition()
    private let exitStatus = Locked<Int32?>(nil)
    private let exited = DispatchSemaphore(value: 0)

    /// Starts the binary with `arguments`; `environment` is added to a minimal one; `listeningFD` becomes fd 3
    /// with LISTEN_FDS=1 and LISTEN_PID set to the child's pid; `cpus` (a taskset list such as "1") narrows the
    /// CPUs it may run on, as systemd's CPUAffinity= would.
    /// `listeningFDs` (instead of `listeningFD`): several sockets, fds 3, 4, ..., named in LISTEN_FDNAMES by `names`.
    init(_ arguments: [String], environment: [String: String] = [:], listeningFD: Int32? = nil, cpus: String? = nil,
         listeningFDs: [Int32] = [], names: [String] = []) throws {
        // (from the pipe to the spawn under the tests' spawn lock: no other child inherits this pipe meanwhile)
        Subprocess.lockSpawns()
        var locked = true
        defer { if locked { Subprocess.unlockSpawns() } }
        var pipeFDs: [Int32] = [0, 0]
        guard pipe(&pipeFDs) == 0 else { throw POSIXError(.EIO) }
        for fd in pipeFDs { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_adddup2(&actions, pipeFDs[1], 1)
        posix_spawn_file_actions_adddup2(&actions, pipeFDs[1], 2)
        var env = ["PATH": "/usr/bin:/bin", "HOME": NSTemporaryDirectory()]
        // A sanitizer build's settings (scripts/sanitize) reach the daemon too: without them LeakSanitizer reports
        // the objects that live as long as the process at its exit and turns exit 0 into 1.
        for key in ["ASAN_OPTIONS", "LSAN_OPTIONS", "TSAN_OPTIONS"] {
            if let value = ProcessInfo.processInfo.environment[key] { env[key] = value }
        }
        for (key, value) in environment { env[key] = value }
        var script = "exec \"$0\" \"$@\""
        if let cpus { script = "exec taskset -c \(cpus) \"$0\" \"$@\"" }  // taskset execs the binary: the pid stays
        var highFDs: [Int32] = []
        let passed = listeningFD.map { [$0] } ?? listeningFDs
        if !passed.isEmpty {
            // Above the range in use, close-on-exec here; dup2 onto 3, 4, ... clears the flag in the child.
            for (index, fd) in passed.enumerated() {
                let high = fcntl(fd, F_DUPFD_CLOEXEC, 200)
                highFDs.append(high)
                posix_spawn_file_actions_adddup2(&actions, high, 3 + Int32(index))
            }
            env["LISTEN_FDS"] = String(passed.count)
            if !names.isEmpty { env["LISTEN_FDNAMES"] = names.joined(separator: ":") }
            script = "LISTEN_PID=$$; export LISTEN_PID; " + script
        }
        let argv = ["/bin/sh", "-c", script, CLITests.binary.path] + arguments
        let cArgs = argv.map { strdup($0) } + [nil]
        let cEnv = env.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer {
            cArgs.forEach { free($0) }
            cEnv.forEach { free($0) }
        }
        var child: pid_t = 0
        let result = posix_spawn(&child, "/bin/sh", &actions, nil, cArgs, cEnv)
        Subprocess.unlockSpawns()
        locked = false
        close(pipeFDs[1])
        for high in highFDs { close(high) }
        guard result == 0 else {
            close(pipeFDs[0])
            throw POSIXError(.init(rawValue: result) ?? .EIO)
        }
        pid = child
        let childPID = child
        let readFD = pipeFDs[0]
        Thread { [self] in
            var buffer = [UInt8](repeating: 0, count: 8192)
            while true {
                let n = buffer.withUnsafeMutableBytes { read(readFD, $0.baseAddress, $0.count) }
                if n <= 0 { break }
                let text = String(decoding: buffer[0..<n], as: UTF8.self)
                logChanged.lock()
                output.withLock { $0 += text }
                logChanged.broadcast()
                logChanged.unlock()
            }
            close(readFD)
            var status: Int32 = 0
            waitpid(childPID, &status, 0)
            logChanged.lock()
            exitStatus.withLock { $0 = status }
            logChanged.broadcast()
            logChanged.unlock()
            exited.signal()
        }.start()
    }

    var log: String { output.withLock { $0 } }

    /// The CPUs each of its event-loop threads may run on, by thread name (`icd.loop.<i>`), from /proc.
    func loopCPUs() -> [String: [Int]] {
        let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task")) ?? []
        var result: [String: [Int]] = [:]
        for task in tasks {
            guard let name = try? String(contentsOfFile: "/proc/\(pid)/task/\(task)/comm", encoding: .utf8)
                .trimmingCharacters(in: .whitespacesAndNewlines), name.hasPrefix("icd.loop."),
                let status = try? String(contentsOfFile: "/proc/\(pid)/task/\(task)/status", encoding: .utf8)
            else { continue }
            result[name] = cpuList(in: status)
        }
        return result
    }

    func send(_ signal: Int32) { kill(pid, signal) }

    /// Waits until the log contains `text`; false after `timeout` seconds or when the process exits first.
    func waitForLog(_ text: String, timeout: Double = 20) async -> Bool {
        (try? await offPool { [self] in
            let deadline = Date().addingTimeInterval(timeout)
            logChanged.lock()
            defer { logChanged.unlock() }
            while true {
                if log.contains(text) { return true }
                if exitStatus.withLock({ $0 }) != nil { return false }
                // Woken by the reader thread when output arrives or the process exits; false once the deadline passed.
                guard logChanged.wait(until: deadline) else { return log.contains(text) }
            }
        }) ?? false
    }

    /// The port from the start line ("listening on http://127.0.0.1:PORT" or "first on port PORT").
    func port() async -> Int? {
        guard await waitForLog("modes:") else { return nil }
        let log = self.log
        if let match = log.firstMatch(of: /listening on http:\/\/127\.0\.0\.1:(\d+)/) { return Int(match.1) }
        return log.firstMatch(of: /first on port (\d+)/).flatMap { Int($0.1) }
    }

    /// Waits for the exit; returns the exit code (or 128 + signal), nil after `timeout`.
    func waitForExit(timeout: Double = 30) async -> Int32? {
        let exited = exited
        guard await wait(exited, timeout: timeout) else { return nil }
        exited.signal()  // keep it signalled for a later call
        let status = exitStatus.withLock { $0 } ?? -1
        return status & 0x7f == 0 ? (status >> 8) & 0xff : 128 + (status & 0x7f)
    }

    /// Ends a process a test left running.
    func kill9() {
        if exitStatus.withLock({ $0 }) == nil { kill(pid, SIGKILL) }
    }
}

/// A datagram socket bound to a path, standing in for systemd's notification socket.
final class NotifySocket: @unchecked Sendable {
    let path: String
    private let fd: Int32

    init() throws {
        path = "/tmp/icd-notify-\(UUID().uuidString.prefix(8)).sock"
        fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue | SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw POSIXError(.EIO) }
        var timeout = timeval(tv_sec: 20, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { buffer in
            for (index, byte) in path.utf8.enumerated() { buffer[index] = byte }
        }
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard result == 0 else { throw POSIXError(.init(rawValue: errno) ?? .EIO) }
    }

    deinit {
        close(fd)
        unlink(path)
    }

    /// The next datagram, nil after the receive timeout.
    func receive() -> String? {
        var buffer = [UInt8](repeating: 0, count: 4096)
        let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
        return n > 0 ? String(decoding: buffer[0..<n], as: UTF8.self) : nil
    }

    /// Datagrams until one contains `text` (inclusive); nil when the timeout passes first.
    func receive(until text: String) async -> [String]? {
        try? await offPool { [self] in
            var messages: [String] = []
            while let message = receive() {
                messages.append(message)
                if message.contains(text) { return messages }
            }
            return nil
        } ?? nil
    }
}

/// A listening TCP socket on 127.0.0.1 and a free port, as systemd would pass it.
func makeListeningSocket() throws -> (fd: Int32, port: Int) {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue | SOCK_CLOEXEC.rawValue), 0)
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    let bound = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) } }
    guard bound == 0, listen(fd, 128) == 0 else { throw POSIXError(.init(rawValue: errno) ?? .EIO) }
    _ = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) } }
    return (fd, Int(UInt16(bigEndian: address.sin_port)))
}

/// The CPUs in a /proc status text's Cpus_allowed_list ("0-1,3" -> [0, 1, 3]).
func cpuList(in status: String) -> [Int] {
    guard let line = status.split(separator: "\n").first(where: { $0.hasPrefix("Cpus_allowed_list:") }) else { return [] }
    let list = line.dropFirst("Cpus_allowed_list:".count).trimmingCharacters(in: .whitespaces)
    return list.split(separator: ",").flatMap { part -> [Int] in
        let bounds = part.split(separator: "-").compactMap { Int($0) }
        guard let first = bounds.first else { return [] }
        return Array(first...(bounds.last ?? first))
    }
}

/// The CPUs this test process may run on.
func allowedCPUsOfThisProcess() -> [Int] {
    cpuList(in: (try? String(contentsOfFile: "/proc/self/status", encoding: .utf8)) ?? "")
}
