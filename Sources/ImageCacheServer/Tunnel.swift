// A blind tunnel: bytes between a client connection's socket and an upstream socket, on the connection's loop
// thread. Neither side's bytes are parsed, cached or logged (the access log has host:port and the byte counts).
//
// Ownership: confined to the loop thread of the connection that made it. It owns the upstream descriptor (closed
// here) and its registration on the loop (token = the connection id with bit 63 set, so it never collides with a
// connection's); the client descriptor stays the connection's, which closes it when the tunnel reports its end.
// The flow rules (64 KiB per direction, FINs passed on, when to close) are `Tunnel.Machine`'s; this class reads,
// writes and keeps the deadlines:
//   - idle: no byte either way for `TunnelOptions.idleTimeoutSeconds`;
//   - write: a side that takes none of the bytes waiting for it within `server.write-timeout`.
// Both are checked on the loop's tick (up to 250 ms late).
//
// Edge-triggered: a side marked readable is read until EAGAIN (or a short read, unless its FIN is known to be queued:
// then until the read that returns 0), its FIN, or its flow is full; resuming a flow reads
// at once (no new edge comes for bytes already waiting). A side marked writable is flushed. `pump` runs both until
// neither moves, never re-entrantly.

internal import ImageCacheSystem
#if canImport(Glibc)
internal import Glibc
#endif
internal import Dispatch
internal import Logging

/// One blind tunnel. Confined to its connection's loop thread.
final class Tunnel: @unchecked Sendable {   // confined to its loop: tasks that carry it are posted to that loop only
    /// Largest single read.
    private static let readChunkBytes = 16_384
    /// Bit 63 of an epoll token marks a tunnel's upstream socket.
    static let upstreamTokenBit: UInt64 = 1 << 63

    // MARK: immutable
    let token: UInt64
    private let loop: EventLoop
    private let clientFD: Int32
    private let upstreamFD: Int32
    private let options: TunnelOptions
    private let writeTimeoutSeconds: Double
    private let logger: Logger
    private let started = DispatchTime.now()
    /// Runs once, when the tunnel has closed (its upstream descriptor closed): the connection then closes the client.
    private let onEnd: (TunnelReport) -> Void

    // MARK: owned by the loop thread
    private var machine: Machine
    /// Bytes waiting for each side, oldest first, with how much of the first is written.
    private var toClient = Pending()
    private var toUpstream = Pending()
    private var clientReadReady: Bool
    private var upstreamReadReady = true
    /// The side's FIN or hang-up is queued (EPOLLRDHUP): read it until 0, never stop at a short read.
    private var clientHungUp = false
    private var upstreamHungUp = false
    private var registered = false
    private var bytesUp = 0
    private var bytesDown = 0
    private var lastActivity = DispatchTime.now()
    /// Since when bytes have waited for a side that takes none.
    private var clientStalledSince: DispatchTime?
    private var upstreamStalledSince: DispatchTime?
    private var running = false
    private var again = false

    private struct Pending {
        var chunks: [[UInt8]] = []
        var offset = 0
        var isEmpty: Bool { chunks.isEmpty }
    }

    /// `leftover`: bytes the client sent after its CONNECT head, sent upstream first. `clientReadReady`: whether the
    /// client socket may hold unread bytes (the connection's edge-triggered state).
    init(connectionID: UInt64, loop: EventLoop, clientFD: Int32, upstream: Int32, leftover: [UInt8], clientReadReady: Bool,
         clientHungUp: Bool = false, options: TunnelOptions, writeTimeoutSeconds: Double, logger: Logger, onEnd: @escaping (TunnelReport) -> Void) {
        self.token = connectionID | Self.upstreamTokenBit
        self.loop = loop
        self.clientFD = clientFD
        self.upstreamFD = upstream
        self.options = options
        self.writeTimeoutSeconds = writeTimeoutSeconds
        self.logger = logger
        self.onEnd = onEnd
        self.clientReadReady = clientReadReady
        self.clientHungUp = clientHungUp
        self.machine = Machine(limit: options.bufferBytes)
        if !leftover.isEmpty {
            toUpstream.chunks.append(leftover)
            bytesUp += leftover.count
            apply(machine.received(leftover.count, from: .client))
        }
    }

    /// Registers the upstream socket and starts pumping. On the loop thread.
    func start() {
        loop.preconditionInLoop()
        do {
            try loop.register(self, fd: upstreamFD)
            registered = true
        } catch {
            logger.error("cannot watch the tunnel's upstream socket: \(error)")
            apply(machine.failed())
            return
        }
        pump()
    }

    var isClosed: Bool { machine.closed }

    // MARK: - Events (loop thread)

    func clientReady(readable: Bool, writable: Bool, hungUp: Bool = false) {
        if readable { clientReadReady = true }
        if hungUp { clientHungUp = true }
        pump()
    }

    func upstreamReady(readable: Bool, writable: Bool, hungUp: Bool = false) {
        if readable { upstreamReadReady = true }
        if hungUp { upstreamHungUp = true }
        pump()
    }

    func checkDeadlines(now: DispatchTime) {
        guard !machine.closed else { return }
        if now >= lastActivity + options.idleTimeoutSeconds {
            logger.debug("tunnel idle for \(options.idleTimeoutSeconds) s; closing")
            apply(machine.idleTimedOut())
            return
        }
        for since in [clientStalledSince, upstreamStalledSince] {
            if let since, now >= since + writeTimeoutSeconds {
                logger.notice("a tunnel side took no bytes within \(writeTimeoutSeconds) s; closing")
                apply(machine.writeTimedOut())
                return
            }
        }
    }

    /// The daemon is stopping.
    func stop() {
        apply(machine.stop())
    }

    /// The client connection failed (its own error path): the tunnel goes with it.
    func fail() {
        apply(machine.failed())
    }

    // MARK: - Pumping

    /// Rounds of reading and writing in one turn of the loop; a tunnel still busy after them goes on in a task posted
    /// behind the loop's other work, so two fast peers cannot hold the loop thread (nor its tick, nor the watchdog).
    private static let roundsPerTurn = 16

    private func pump() {
        loop.preconditionInLoop()
        guard !machine.closed else { return }
        if running {
            again = true
            return
        }
        running = true
        defer { running = false }
        var rounds = 0
        repeat {
            again = false
            flush(to: .upstream)
            flush(to: .client)
            read(from: .client)
            read(from: .upstream)
            rounds += 1
        } while again && !machine.closed && rounds < Self.roundsPerTurn
        if again && !machine.closed {
            loop.execute { self.pump() }
        }
    }

    private func fd(_ side: Machine.Side) -> Int32 { side == .client ? clientFD : upstreamFD }

    private func read(from side: Machine.Side) {
        while !machine.closed, machine.mayRead(side), side == .client ? clientReadReady : upstreamReadReady {
            let result: Result<[UInt8], SystemError> = withUnsafeTemporaryAllocation(of: UInt8.self, capacity: Self.readChunkBytes) { buffer in
                Result { () throws(SystemError) in
                    let count = try syscall("read") { Glibc.read(fd(side), buffer.baseAddress, buffer.count) }
                    return Array(buffer[0..<count])
                }
            }
            switch result {
            case let .success(bytes) where bytes.isEmpty:
                setReadReady(side, false)
                apply(machine.readEnded(side))
            case let .success(bytes):
                // A short read emptied the socket, unless its FIN is queued behind the bytes (read on to the 0).
                if bytes.count < Self.readChunkBytes, !(side == .client ? clientHungUp : upstreamHungUp) { setReadReady(side, false) }
                lastActivity = DispatchTime.now()
                if side == .client {
                    bytesUp += bytes.count
                    toUpstream.chunks.append(bytes)
                } else {
                    bytesDown += bytes.count
                    toClient.chunks.append(bytes)
                }
                apply(machine.received(bytes.count, from: side))
                again = true   // the other side has bytes to take
            case let .failure(error) where error.isWouldBlock:
                setReadReady(side, false)
            case let .failure(error):
                logger.debug("tunnel read failed: \(error)")
                setReadReady(side, false)
                apply(machine.failed())
            }
        }
    }

    private func setReadReady(_ side: Machine.Side, _ ready: Bool) {
        if side == .client { clientReadReady = ready } else { upstreamReadReady = ready }
    }

    private func flush(to side: Machine.Side) {
        var pending = side == .client ? toClient : toUpstream
        defer { if side == .client { toClient = pending } else { toUpstream = pending } }
        var written = 0
        var failed = false
        var blocked = false
        while !pending.isEmpty {
            let chunk = pending.chunks[0]
            let result = chunk.withUnsafeBytes { bytes in
                Result { () throws(SystemError) in
                    try syscall("send") {
                        send(fd(side), bytes.baseAddress! + pending.offset, bytes.count - pending.offset, Int32(MSG_NOSIGNAL))
                    }
                }
            }
            switch result {
            case let .success(count):
                written += count
                pending.offset += count
                if pending.offset == chunk.count {
                    pending.chunks.removeFirst()
                    pending.offset = 0
                }
            case let .failure(error) where error.isWouldBlock:
                blocked = true
            case let .failure(error):
                logger.debug("tunnel write failed: \(error)")
                failed = true
            }
            if blocked || failed { break }
        }
        let now = DispatchTime.now()
        if written > 0 { lastActivity = now }
        let stalled: DispatchTime? = pending.isEmpty ? nil : (written > 0 ? now : (side == .client ? clientStalledSince : upstreamStalledSince) ?? now)
        if side == .client { clientStalledSince = stalled } else { upstreamStalledSince = stalled }
        if written > 0 { apply(machine.sent(written, to: side)) }
        if failed { apply(machine.failed()) }
    }

    // MARK: - Actions

    private func apply(_ actions: [Machine.Action]) {
        for action in actions {
            switch action {
            case .suspendReading:
                break   // `mayRead` says so; nothing to do on the socket (edge-triggered)
            case .resumeReading:
                again = true   // read at once: bytes may already wait
            case let .shutdownWrite(side):
                _ = shutdown(fd(side), Int32(SHUT_WR))
            case let .close(end):
                close(end)
            }
        }
    }

    private func close(_ end: TunnelReport.End) {
        if registered {
            loop.deregister(self, fd: upstreamFD)
            registered = false
        }
        closeDescriptor(upstreamFD)
        toClient = Pending()
        toUpstream = Pending()
        let seconds = Double(DispatchTime.now().uptimeNanoseconds - started.uptimeNanoseconds) / 1e9
        onEnd(TunnelReport(end: end, bytesUp: bytesUp, bytesDown: bytesDown, seconds: seconds))
    }
}
