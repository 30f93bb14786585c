// The listening socket: accepts clients and hands each accepted fd to a new `Connection`.
//
// Owned by the serial `imagecached.listener` queue: the listening fd, the accept `DispatchSourceRead`, the
// registry of open connections, the event loops and the paused/stopped flags. The open-connection count is also
// kept under a Mutex so that `connectionCount` can be read from anywhere. Connections are spread round-robin over
// the event loops (one thread per CPU the process may use, pinned to it by default; see EventLoop.swift) and run
// on their loop's thread: no thread and no Dispatch source per connection.
//
// Accepting runs in a loop until EAGAIN. Past `maxConnections` a new client is closed at once. When the
// process or system runs out of descriptors (EMFILE, ENFILE) or memory, accepting pauses for 100 ms instead
// of spinning on a listening socket that stays readable.
//
// SIGPIPE: byte writes use `sendmsg(..., MSG_NOSIGNAL)`, so a client that went away never raises SIGPIPE there;
// `sendfile` (disk bodies) has no such flag, so the daemon ignores SIGPIPE (`signal(SIGPIPE, SIG_IGN)` in
// `Daemon.start`) and relies on that for it, as for any other code that writes to sockets.

internal import ImageCacheSystem
#if canImport(Glibc)
internal import Glibc
#elseif canImport(Darwin)
internal import Darwin
#endif
package import Dispatch
public import Logging
internal import Synchronization

/// Why the listener could not start.
public enum ListenerError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The host of the listen address did not resolve to a usable address.
    case badAddress(String, reason: String)
    /// `start` was called twice.
    case alreadyStarted

    public var description: String {
        switch self {
        case let .badAddress(address, reason): "cannot listen on \(address): \(reason)"
        case .alreadyStarted: "the listener is already started"
        }
    }
}

/// Accepts HTTP clients and serves them with a `RequestHandler`. Confined to its `imagecached.listener` queue;
/// the public methods may be called from any other queue.
public final class Listener: @unchecked Sendable {
    private static let backlog: Int32 = 1024
    private static let acceptPause: DispatchTimeInterval = .milliseconds(100)

    // MARK: immutable
    private let settings: ServerSettings
    private let handler: any RequestHandler
    /// A TLS listener's context and counts (`tls-listen`); nil for plain HTTP.
    private let tls: TLSListening?
    private let logger: Logger
    private let queue = DispatchQueue(label: "imagecached.listener")
    /// Signalled when the accept source's cancellation has closed the listening fd.
    private let listenFDClosed = DispatchSemaphore(value: 0)

    // MARK: owned by queue
    private var listenFD: Int32 = -1
    private var acceptSource: (any DispatchSourceRead)?
    private var acceptPaused = false
    private var stopped = false
    private var connections: [UInt64: Connection] = [:]
    private var nextConnectionID: UInt64 = 1
    /// One per active core, made at start.
    private var loops: [EventLoop] = []
    private var nextLoop = 0

    // MARK: shared, guarded by openConnections
    private struct Open {
        var count = 0
        /// Called (outside the lock) the next time `count` falls to 0.
        var whenNone: [@Sendable () -> Void] = []
    }
    private let openConnections = Locked(Open())

    public init(settings: ServerSettings, handler: any RequestHandler, logger: Logger, tls: TLSListening? = nil) {
        self.settings = settings
        self.handler = handler
        self.tls = tls
        self.logger = logger
    }

    /// Connections open now.
    public var connectionCount: Int { openConnections.withLock { $0.count } }

    /// Calls `callback` once no connection is open: now if none is, else when the last one closes (after its
    /// connection has let go of its exchange: the cancellations and progress callbacks of a closing connection run
    /// before). On the caller's thread, or on the loop thread of the connection that closed last.
    public func whenNoConnections(_ callback: @escaping @Sendable () -> Void) {
        let now = openConnections.withLock { open -> Bool in
            if open.count == 0 { return true }
            open.whenNone.append(callback)
            return false
        }
        if now { callback() }
    }

    /// The event loops (empty before `start`). Not on the listener queue.
    var eventLoops: [EventLoop] { queue.sync { loops } }

    /// Enters `group` once per event loop and leaves it from a task run on that loop: the group completes only when
    /// every loop has come round to its posted tasks (the systemd watchdog pings on it, so a wedged loop stops the
    /// pings). A stopped loop never leaves. Not on the listener queue.
    package func probeLoops(_ group: DispatchGroup) {
        for loop in eventLoops {
            group.enter()
            loop.execute { group.leave() }
        }
    }

    /// Binds `address` (IPv4 or IPv6 host, port 0 for any free port), listens and starts accepting.
    /// Returns the bound port.
    public func start(address: ListenAddress) throws -> Int {
        var host = address.host
        if host.hasPrefix("["), host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        var hints = addrinfo()
        hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV
        hints.ai_family = AF_UNSPEC
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var result: UnsafeMutablePointer<addrinfo>?
        let status = getaddrinfo(host.isEmpty ? nil : host, String(address.port), &hints, &result)
        guard status == 0, let info = result else {
            throw ListenerError.badAddress(address.description, reason: String(cString: gai_strerror(status)))
        }
        defer { freeaddrinfo(result) }

        let fd = try syscall("socket") { socket(info.pointee.ai_family, Int32(SOCK_STREAM.rawValue | SOCK_CLOEXEC.rawValue), 0) }
        do {
            var one: Int32 = 1
            try syscall("setsockopt(SO_REUSEADDR)") {
                setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
            }
            try syscall("bind") { bind(fd, info.pointee.ai_addr, info.pointee.ai_addrlen) }
            try syscall("listen") { listen(fd, Self.backlog) }
            return try start(listeningFD: fd)
        } catch {
            closeDescriptor(fd)
            throw error
        }
    }

    /// Adopts a socket that is already bound and listening (systemd socket activation) and starts accepting.
    /// Returns its port. The listener owns the fd from now on.
    public func start(listeningFD fd: Int32) throws -> Int {
        let flags = try syscall("fcntl(F_GETFL)") { fcntl(fd, F_GETFL) }
        try syscall("fcntl(F_SETFL)") { fcntl(fd, F_SETFL, flags | O_NONBLOCK) }
        let port = try Self.localPort(of: fd)
        try queue.sync {
            guard listenFD < 0, !stopped else { throw ListenerError.alreadyStarted }
            // One loop per CPU the process may use; pinned one to each unless cpu-affinity is off (EventLoop.swift).
            let allowed = EventLoop.allowedCPUs()
            if allowed == nil {
                logger.warning("cannot read the CPU affinity mask (\(String(cString: strerror(errno)))); one loop per online CPU, unpinned")
            }
            let count = allowed?.count ?? max(1, Int(sysconf(Int32(_SC_NPROCESSORS_ONLN))))
            for index in 0..<count {
                let loop: EventLoop
                do {
                    loop = try EventLoop(index: index)
                } catch {
                    for loop in loops { loop.stop() }  // their threads end; no connection is on them yet
                    loops = []
                    throw error
                }
                loops.append(loop)
                if settings.cpuAffinity == .auto, let cpu = allowed?[index] {
                    let error = loop.pin(to: cpu)
                    if error != 0 {
                        logger.warning("cannot pin \(loop.name) to CPU \(cpu) (\(String(cString: strerror(error)))); the kernel places it")
                    }
                }
            }
            if settings.cpuAffinity == .auto, let allowed {
                logger.debug("\(count) event loop(s), pinned to CPUs \(allowed.map(String.init).joined(separator: ","))")
            } else {
                logger.debug("\(count) event loop(s), unpinned")
            }
            listenFD = fd
            let source = DispatchSource.makeReadSource(fileDescriptor: fd, queue: queue)
            source.setEventHandler { [self] in acceptClients() }
            source.setCancelHandler { [self] in
                closeDescriptor(fd)
                listenFDClosed.signal()
            }
            acceptSource = source
            source.resume()
        }
        logger.info("listening", metadata: ["port": "\(port)"])
        return port
    }

    /// Stops accepting, closes the listening socket and every connection (pending exchanges are cancelled), then
    /// ends the event loops' threads. Returns once the listening socket is closed and every connection has been told
    /// to close. Only the first call does this (a later or concurrent one returns at once, so the loops are never
    /// stopped ahead of the first caller's closing tasks). A started listener must be stopped: its loop threads run
    /// until then. Must not be called on the listener queue, nor concurrently with `closeIdleConnections`.
    public func stop() {
        dispatchPrecondition(condition: .notOnQueue(queue))
        let stopping: (open: [Connection], hadSource: Bool)? = queue.sync {
            guard !stopped else { return nil }
            stopped = true
            let source = acceptSource
            acceptSource = nil
            if let source {
                if acceptPaused { acceptPaused = false; source.resume() }
                source.cancel()
            }
            return (Array(connections.values), source != nil)
        }
        guard let (open, hadSource) = stopping else { return }
        if hadSource { listenFDClosed.wait() }
        let group = DispatchGroup()
        for connection in open {
            group.enter()
            connection.stop { group.leave() }
        }
        group.wait()
        let loops = queue.sync { self.loops }
        for loop in loops { loop.stop() }
    }

    /// Stops accepting (closes the listening socket) and leaves open connections to finish: the first step of a
    /// graceful shutdown. `stop` closes what is left. Must not be called on the listener queue.
    public func stopAccepting() {
        dispatchPrecondition(condition: .notOnQueue(queue))
        let hadSource: Bool = queue.sync {
            guard let source = acceptSource else { return false }
            acceptSource = nil
            if acceptPaused { acceptPaused = false; source.resume() }
            source.cancel()
            return true
        }
        if hadSource { listenFDClosed.wait() }
    }

    /// Closes the connections waiting between requests; returns how many are in the middle of one (reading,
    /// handling or writing it). Called repeatedly while draining, before `stop` (not concurrently: a loop stopped
    /// meanwhile would drop the question). Must not be called on the listener queue.
    public func closeIdleConnections() -> Int {
        dispatchPrecondition(condition: .notOnQueue(queue))
        let open = queue.sync { Array(connections.values) }
        let busy = Locked(0)
        let group = DispatchGroup()
        for connection in open {
            group.enter()
            connection.closeIfIdle { isBusy in
                if isBusy { busy.withLock { $0 += 1 } }
                group.leave()
            }
        }
        group.wait()
        return busy.withLock { $0 }
    }

    // MARK: - Accepting (on queue)

    private func acceptClients() {
        dispatchPrecondition(condition: .onQueue(queue))
        while !stopped, !acceptPaused {
            var storage = sockaddr_storage()
            var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
            let fd: Int32
            do throws(SystemError) {
                fd = try syscall("accept") {
                    withUnsafeMutablePointer(to: &storage) {
                        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { accept(listenFD, $0, &length) }
                    }
                }
            } catch where error.isWouldBlock {
                return
            } catch where error.errno == ECONNABORTED || error.errno == EPROTO {
                continue
            } catch where [EMFILE, ENFILE, ENOBUFS, ENOMEM].contains(error.errno) {
                logger.error("accept paused for 100 ms: \(error)")
                pauseAccepting()
                return
            } catch {
                logger.error("accept failed: \(error)")
                return
            }
            let admitted = openConnections.withLock { open in
                guard open.count < settings.maxConnections else { return false }
                open.count += 1
                return true
            }
            guard admitted else {
                logger.warning("connection limit reached (\(settings.maxConnections)); closing new client")
                closeDescriptor(fd)
                continue
            }
            // Glibc's module does not export accept4: set non-blocking and close-on-exec here.
            _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
            var one: Int32 = 1
            _ = setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
            let client = Self.clientInfo(storage)
            let id = nextConnectionID
            nextConnectionID += 1
            let loop = loops[nextLoop]
            nextLoop = (nextLoop + 1) % loops.count
            let connection = Connection(fd: fd, id: id, client: client, handler: handler, settings: settings,
                                        loop: loop, logger: logger, tls: tls) { [self] closed in
                let idle = openConnections.withLock { open -> [@Sendable () -> Void] in
                    open.count -= 1
                    guard open.count == 0 else { return [] }
                    defer { open.whenNone = [] }
                    return open.whenNone
                }
                for callback in idle { callback() }
                queue.async { self.connections[closed.id] = nil }
            }
            connections[id] = connection
            connection.start()
        }
    }

    private func pauseAccepting() {
        dispatchPrecondition(condition: .onQueue(queue))
        guard let source = acceptSource, !acceptPaused else { return }
        acceptPaused = true
        source.suspend()
        queue.asyncAfter(deadline: .now() + Self.acceptPause) { [self] in
            guard acceptPaused, !stopped, let source = acceptSource else { return }
            acceptPaused = false
            source.resume()
        }
    }

    // MARK: - Addresses

    private static func localPort(of fd: Int32) throws -> Int {
        var storage = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        try syscall("getsockname") {
            withUnsafeMutablePointer(to: &storage) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
            }
        }
        return withUnsafePointer(to: &storage) { pointer in
            switch Int32(pointer.pointee.ss_family) {
            case AF_INET:
                pointer.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { Int(UInt16(bigEndian: $0.pointee.sin_port)) }
            case AF_INET6:
                pointer.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { Int(UInt16(bigEndian: $0.pointee.sin6_port)) }
            default:
                0
            }
        }
    }

    /// The peer's address text and whether it is loopback (127.0.0.0/8, ::1, ::ffff:127.0.0.0/104).
    static func clientInfo(_ storage: sockaddr_storage) -> ClientInfo {
        var storage = storage
        return withUnsafePointer(to: &storage) { pointer in
            switch Int32(pointer.pointee.ss_family) {
            case AF_INET:
                return pointer.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { sin in
                    var address = sin.pointee.sin_addr
                    let bytes = withUnsafeBytes(of: &address) { Array($0) }
                    return ClientInfo(address: addressText(AF_INET, bytes), isLoopback: bytes[0] == 127)
                }
            case AF_INET6:
                return pointer.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { sin6 in
                    var address = sin6.pointee.sin6_addr
                    let bytes = withUnsafeBytes(of: &address) { Array($0) }
                    return ClientInfo(address: addressText(AF_INET6, bytes), isLoopback: isLoopbackIPv6(bytes))
                }
            default:
                return ClientInfo(address: "unknown", isLoopback: false)
            }
        }
    }

    /// ::1, or an IPv4-mapped 127/8 address (::ffff:127.x.y.z).
    static func isLoopbackIPv6(_ bytes: [UInt8]) -> Bool {
        guard bytes.count == 16 else { return false }
        if bytes[0..<15].allSatisfy({ $0 == 0 }) && bytes[15] == 1 { return true }
        return bytes[0..<10].allSatisfy({ $0 == 0 }) && bytes[10] == 0xff && bytes[11] == 0xff && bytes[12] == 127
    }

    private static func addressText(_ family: Int32, _ address: [UInt8]) -> String {
        var text = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN))
        let formatted = address.withUnsafeBytes { inet_ntop(family, $0.baseAddress, &text, socklen_t(text.count)) }
        guard formatted != nil else { return "unknown" }
        return String(decoding: text.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}
