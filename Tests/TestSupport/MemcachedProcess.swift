// A memcached server for tests: `/usr/bin/memcached -l 127.0.0.1 -p PORT -U 0 -t 1 -m 64 -I 32m -vv` on a free
// loopback port (never 11211), as a child process the test can stop, kill, suspend (SIGSTOP), resume and restart on
// the same port, with a raw `command` to set up what the client under test should find (a damaged value, a stub).
//
// Readiness: with -vv memcached writes "<fd server listening" once its socket listens; a reader thread of its own
// collects the output (standard output and error, one pipe) and wakes the waiter, which then confirms with a
// connect (a bounded number of attempts, never a sleep). A start that loses its port to another process ("Address
// already in use": the port was free when probed, then taken) is retried on a new port a few times.
//
// Ownership: the current process (`Incarnation`: pid, output, exit status) is replaced by `restart` under `lock`;
// each incarnation's reader thread owns its pipe and reaps the child (waitpid) when the pipe closes. deinit kills it.

public import Foundation

public struct MemcachedError: Error, CustomStringConvertible {
    public var description: String
}

public final class MemcachedProcess: @unchecked Sendable {
    /// The loopback port it listens on (kept across restarts).
    public let port: Int
    /// `127.0.0.1:PORT`, as `fleet.servers` names it.
    public var address: String { "127.0.0.1:\(port)" }
    /// Guarded by `lock` (a restart may change it).
    private var itemSizeMax: String
    private let lock = NSLock()
    /// Guarded by `lock`.
    private var incarnation: Incarnation
    private var current: Incarnation { lock.withLock { incarnation } }

    /// Starts memcached on a free port. `itemSizeMax` is its `-I`.
    public init(itemSizeMax: String = "32m") throws {
        self.itemSizeMax = itemSizeMax
        var lastError = MemcachedError(description: "memcached did not start")
        for _ in 0..<5 {
            let port = try Self.freePort()
            switch Self.launch(port: port, itemSizeMax: itemSizeMax) {
            case let .success(incarnation):
                self.port = port
                self.incarnation = incarnation
                return
            case let .failure(error):
                lastError = error
                if !error.description.contains("Address already in use") { throw error }
            }
        }
        throw lastError
    }

    /// Starts memcached inside the network namespace `namespace` (`ip netns exec`), listening on `hosts` (addresses of
    /// that namespace) and `port`. Root only; `command` and `value` are not for it (they dial 127.0.0.1).
    public init(namespace: String, hosts: [String], port: Int) throws {
        itemSizeMax = "32m"
        self.port = port
        var arguments = ["netns", "exec", namespace, "/usr/bin/memcached", "-l", hosts.joined(separator: ","), "-p", String(port),
                         "-U", "0", "-t", "1", "-m", "64", "-I", itemSizeMax, "-vv", "-u", "root"]
        if geteuid() != 0 { arguments.removeLast(2) }
        let incarnation = try Incarnation(executable: "/usr/sbin/ip", arguments: arguments)
        guard incarnation.waitForOutput("server listening", timeout: 10) else {
            incarnation.kill(SIGKILL)
            _ = incarnation.waitForExit(timeout: 10)
            throw MemcachedError(description: "memcached in \(namespace) did not start: \(incarnation.output.suffix(300))")
        }
        self.incarnation = incarnation
    }

    deinit {
        let incarnation = current
        incarnation.kill(SIGKILL)
        _ = incarnation.waitForExit(timeout: 10)
    }

    public var pid: pid_t { current.pid }

    /// Everything it printed so far (with -vv: every command it read).
    public var output: String { current.output }

    /// Stops it (SIGTERM, and SIGCONT in case it was suspended) and waits for the exit.
    public func stop() {
        let incarnation = current
        incarnation.kill(SIGTERM)
        incarnation.kill(SIGCONT)
        _ = incarnation.waitForExit(timeout: 10)
    }

    /// Kills it (SIGKILL) and waits for the exit.
    public func kill9() {
        let incarnation = current
        incarnation.kill(SIGKILL)
        _ = incarnation.waitForExit(timeout: 10)
    }

    /// SIGSTOP: the kernel still accepts connections and buffers requests; nothing answers. Returns once every thread
    /// of it has stopped (kill(2) only queues the stop: a thread already running could still answer a request sent
    /// right after it, which a ThreadSanitizer run on a loaded machine showed).
    public func suspend() {
        let incarnation = current
        incarnation.kill(SIGSTOP)
        incarnation.waitUntilStopped()
    }

    /// SIGCONT.
    public func resume() { current.kill(SIGCONT) }

    /// Kills it if it runs and starts a new one on the same port (empty: memcached keeps nothing), with another `-I`
    /// when `itemSizeMax` is given.
    public func restart(itemSizeMax newItemSizeMax: String? = nil) throws {
        kill9()
        let itemSizeMax = lock.withLock {
            if let newItemSizeMax { self.itemSizeMax = newItemSizeMax }
            return self.itemSizeMax
        }
        var lastError = MemcachedError(description: "memcached did not restart")
        for _ in 0..<3 {
            switch Self.launch(port: port, itemSizeMax: itemSizeMax) {
            case let .success(incarnation):
                lock.withLock { self.incarnation = incarnation }
                return
            case let .failure(error):
                lastError = error
            }
        }
        throw lastError
    }

    /// Sends one request line (and `data` with its CRLF, for `ms`) on a connection of its own and returns the whole
    /// answer as text: one line, a `VA` line with its data, or STAT lines up to END.
    public func command(_ line: String, data: [UInt8]? = nil) throws -> String {
        let fd = try Self.connect(port: port, timeoutSeconds: 5)
        defer { close(fd) }
        var request = Array((line + "\r\n").utf8)
        if let data { request += data + [13, 10] }
        var sent = 0
        while sent < request.count {
            let n = request[sent...].withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            guard n > 0 else { throw MemcachedError(description: "send to memcached failed: errno \(errno)") }
            sent += n
        }
        var answer: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65536)
        while !Self.isComplete(answer) {
            let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            guard n > 0 else { throw MemcachedError(description: "memcached's answer ended early: \(String(decoding: answer, as: UTF8.self))") }
            answer += buffer[0..<n]
        }
        return String(decoding: answer, as: UTF8.self)
    }

    /// The bytes of `key`'s value (`mg <key> v`), as stored: binary, not text.
    public func value(_ key: String) throws -> [UInt8] {
        let fd = try Self.connect(port: port, timeoutSeconds: 5)
        defer { close(fd) }
        let request = Array("mg \(key) v\r\n".utf8)
        guard request.withUnsafeBytes({ send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }) == request.count else {
            throw MemcachedError(description: "send to memcached failed: errno \(errno)")
        }
        var answer: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65536)
        while !Self.isComplete(answer) {
            let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            guard n > 0 else { throw MemcachedError(description: "memcached's answer ended early") }
            answer += buffer[0..<n]
        }
        guard let lineEnd = answer.firstRange(of: [13, 10]),
              case let line = String(decoding: answer[..<lineEnd.lowerBound], as: UTF8.self), line.hasPrefix("VA "),
              let length = Int(line.split(separator: " ")[1]) else {
            throw MemcachedError(description: "mg \(key): \(String(decoding: answer.prefix(80), as: UTF8.self))")
        }
        return Array(answer[lineEnd.upperBound..<(lineEnd.upperBound + length)])
    }

    /// Stores `value` under `key` with these client flags and TTL (`ms <key> <n> F<flags> T<ttl>`).
    public func set(_ key: String, value: [UInt8], flags: UInt32, ttl: Int) throws {
        let answer = try command("ms \(key) \(value.count) F\(flags) T\(ttl)", data: value)
        guard answer.hasPrefix("HD") else { throw MemcachedError(description: "ms \(key): \(answer)") }
    }

    /// Whether `bytes` hold a whole answer.
    private static func isComplete(_ bytes: [UInt8]) -> Bool {
        let text = String(decoding: bytes, as: UTF8.self)
        guard let lineEnd = text.range(of: "\r\n") else { return false }
        let first = text[..<lineEnd.lowerBound]
        if first.hasPrefix("STAT ") { return text.hasSuffix("END\r\n") }
        if first.hasPrefix("VA "), let length = Int(first.split(separator: " ")[1]) {
            return bytes.count >= first.utf8.count + 2 + length + 2
        }
        return true
    }

    // MARK: starting

    /// A port nothing listens on now: bound to 127.0.0.1:0, read, closed.
    private static func freePort() throws -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue | SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw MemcachedError(description: "socket failed: errno \(errno)") }
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) } }
        guard bound == 0 else { throw MemcachedError(description: "bind failed: errno \(errno)") }
        _ = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) } }
        return Int(UInt16(bigEndian: address.sin_port))
    }

    private static func launch(port: Int, itemSizeMax: String) -> Result<Incarnation, MemcachedError> {
        var arguments = ["-l", "127.0.0.1", "-p", String(port), "-U", "0", "-t", "1", "-m", "64", "-I", itemSizeMax, "-vv"]
        if geteuid() == 0 { arguments += ["-u", "root"] }  // memcached refuses to run as root without -u
        let incarnation: Incarnation
        do {
            incarnation = try Incarnation(arguments: arguments)
        } catch {
            return .failure(error)
        }
        guard incarnation.waitForOutput("server listening", timeout: 10) else {
            incarnation.kill(SIGKILL)
            _ = incarnation.waitForExit(timeout: 10)
            return .failure(MemcachedError(description: "memcached on port \(port) did not start: \(incarnation.output.suffix(300))"))
        }
        // It listens: a connect confirms it (a few attempts, no waiting between them).
        for _ in 0..<3 {
            if let fd = try? connect(port: port, timeoutSeconds: 5) {
                close(fd)
                return .success(incarnation)
            }
        }
        incarnation.kill(SIGKILL)
        return .failure(MemcachedError(description: "memcached on port \(port) does not accept connections"))
    }

    private static func connect(port: Int, timeoutSeconds: Int) throws -> Int32 {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue | SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw MemcachedError(description: "socket failed: errno \(errno)") }
        var timeout = timeval(tv_sec: timeoutSeconds, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard result == 0 else {
            let code = errno
            close(fd)
            throw MemcachedError(description: "connect to 127.0.0.1:\(port) failed: errno \(code)")
        }
        return fd
    }
}

/// One memcached process: its pid, its output and its exit, collected by a reader thread.
private final class Incarnation: @unchecked Sendable {
    let pid: pid_t
    private let changed = NSCondition()
    // MARK: guarded by `changed`
    private var text = ""
    private var exitStatus: Int32?

    init(executable: String = "/usr/bin/memcached", arguments: [String]) throws(MemcachedError) {
        var fds: [Int32] = [0, 0]
        // Close-on-exec at once, under the tests' spawn lock (pipe2 is not in Glibc's Swift module): another child
        // spawned meanwhile would hold the write end and delay the end of this output until it exits.
        Subprocess.lockSpawns()
        var locked = true
        defer { if locked { Subprocess.unlockSpawns() } }
        guard pipe(&fds) == 0 else { throw MemcachedError(description: "pipe failed: errno \(errno)") }
        for fd in fds { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_adddup2(&actions, fds[1], 1)
        posix_spawn_file_actions_adddup2(&actions, fds[1], 2)
        let argv = [executable] + arguments
        let cArgs = argv.map { strdup($0) } + [nil]
        let cEnv: [UnsafeMutablePointer<CChar>?] = [strdup("PATH=/usr/bin:/bin"), nil]
        defer {
            cArgs.forEach { free($0) }
            cEnv.forEach { free($0) }
        }
        var child: pid_t = 0
        let result = posix_spawn(&child, executable, &actions, nil, cArgs, cEnv)
        Subprocess.unlockSpawns()
        locked = false
        close(fds[1])
        guard result == 0 else {
            close(fds[0])
            throw MemcachedError(description: "posix_spawn /usr/bin/memcached failed: \(String(cString: strerror(result)))")
        }
        pid = child
        let childPID = child
        let readFD = fds[0]
        Thread { [self] in
            var buffer = [UInt8](repeating: 0, count: 8192)
            while true {
                let n = buffer.withUnsafeMutableBytes { read(readFD, $0.baseAddress, $0.count) }
                if n < 0, errno == EINTR { continue }
                if n <= 0 { break }
                changed.lock()
                text += String(decoding: buffer[0..<n], as: UTF8.self)
                changed.broadcast()
                changed.unlock()
            }
            close(readFD)
            var status: Int32 = 0
            while waitpid(childPID, &status, 0) < 0, errno == EINTR {}
            changed.lock()
            exitStatus = status
            changed.broadcast()
            changed.unlock()
        }.start()
    }

    var output: String {
        changed.lock()
        defer { changed.unlock() }
        return text
    }

    func kill(_ signal: Int32) {
        changed.lock()
        defer { changed.unlock() }
        if exitStatus == nil { _ = Glibc.kill(pid, signal) }
    }

    /// Waits (woken by the reader thread) until the output contains `needle`; false when it exits first or after
    /// `timeout` seconds.
    func waitForOutput(_ needle: String, timeout: Double) -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        changed.lock()
        defer { changed.unlock() }
        while true {
            if text.contains(needle) { return true }
            if exitStatus != nil { return false }
            guard changed.wait(until: deadline) else { return text.contains(needle) }
        }
    }

    /// Blocks until the child is stopped (its group stop is complete) or has exited, without reaping it (WNOWAIT: the
    /// reader thread still collects its exit status).
    func waitUntilStopped() {
        var info = siginfo_t()
        while waitid(P_PID, id_t(pid), &info, WSTOPPED | WEXITED | WNOWAIT) < 0, errno == EINTR {}
    }

    /// Waits (woken by the reader thread) for the exit; false after `timeout` seconds.
    func waitForExit(timeout: Double) -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        changed.lock()
        defer { changed.unlock() }
        while exitStatus == nil {
            guard changed.wait(until: deadline) else { return exitStatus != nil }
        }
        return true
    }
}
