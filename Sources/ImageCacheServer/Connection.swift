// One accepted client socket, driven by its event loop (see EventLoop.swift).
//
// Each connection belongs to one `EventLoop` and runs on that loop's thread (`icd.loop.<i>`): a few loops
// serve thousands of connections. Everything mutable here is owned by that thread: the fd, the read and write
// deadlines, the write queue and the `StateMachine` (which owns the parser).
// The loop reports readiness (edge-triggered epoll) and ticks the deadlines; the state machine decides;
// `run(_:)` performs its actions.
//
// Edge-triggered reading: on a readable event the connection reads until the socket has nothing more (a short
// read or EAGAIN) or reading is suspended; resuming reading tries a read at once (no new edge may come for bytes
// already waiting). Writing: whatever the socket does not take waits in the `WriteQueue` until a writable event.
// Timeouts are deadlines checked by the loop's tick, so they fire up to `EventLoop.tickNanoseconds` (250 ms) late.
//
// Each request is answered through its own `ConnectionResponseSink`, tagged with the exchange id, so a late
// call for an earlier request is ignored. A sink call made on this connection's loop thread acts at once (the
// thread is recognised by its pthread_t); from any other thread it hops here with `loop.execute`, which keeps the
// order of calls made from one serial queue.
//
// Writes go out with `sendmsg` (a vectored write, like `writev`, that also takes MSG_NOSIGNAL: a peer that
// closed never raises SIGPIPE), and file bodies with `sendfile` (SIGPIPE ignored process-wide by the daemon).
// Whatever the socket does not take waits in the `WriteQueue` for a writable event.

internal import ImageCacheSystem
internal import ImageCacheHTTP
#if canImport(Glibc)
internal import Glibc
#elseif canImport(Darwin)
internal import Darwin
#endif
internal import Dispatch
internal import Logging
internal import Synchronization

/// One client connection. Confined to its event loop's thread.
final class Connection: @unchecked Sendable {
    /// Largest single read.
    private static let readChunkBytes = 16_384

    // MARK: immutable
    let id: UInt64
    let loop: EventLoop
    let client: ClientInfo
    private let fd: Int32
    private let handler: any RequestHandler
    private let settings: ServerSettings
    private let logger: Logger
    /// Called once on the loop thread when the connection has closed (the listener forgets it).
    private let onClose: @Sendable (Connection) -> Void

    // MARK: owned by the loop thread
    private var stateMachine: StateMachine
    /// Which read timer is armed and when it is due (checked by the loop's tick).
    private var readTimerArmed: (timer: StateMachine.ReadTimer, deadline: DispatchTime)?
    /// When the bytes waiting for room in the socket must have moved (checked by the loop's tick).
    private var writeTimerDeadline: DispatchTime?
    private var readSuspended = false
    /// The socket may have bytes to read that we have not read (edge-triggered: no new event comes for them).
    private var readReady = true
    private var writeQueue = WriteQueue()
    /// onCancel callbacks of the current exchange.
    private var cancelCallbacks: [@Sendable () -> Void] = []
    /// The sink of the current exchange when its response is streamed (set by its head): it counts what the socket
    /// takes (backpressure), every byte of which belongs to it, since an exchange starts only once the previous one's
    /// bytes are all written. Nil for responses given whole (memory and disk hits): they pay nothing for it.
    private var progress: ConnectionResponseSink?
    /// Actions waiting to run: sink calls made while actions run (from inside the handler) are queued here
    /// rather than run re-entrantly, so pipelined requests never nest on the stack.
    private var pendingActions: [StateMachine.Action] = []
    /// The streamed body of the current exchange, if it has one.
    private var requestBody: RequestBodyStream?
    private var running = false
    private var closed = false
    private var registered = false
    /// The tunnel accepted for the current CONNECT, waiting for its 200 to be written.
    private var acceptedTunnel: (socket: OwnedSocket, options: TunnelOptions, ended: @Sendable (TunnelReport) -> Void)?
    /// The tunnel this connection has become (CONNECT): its bytes are the tunnel's from then on.
    private var tunnel: Tunnel?

    init(fd: Int32, id: UInt64, client: ClientInfo, handler: any RequestHandler, settings: ServerSettings,
         loop: EventLoop, logger: Logger, onClose: @escaping @Sendable (Connection) -> Void) {
        self.fd = fd
        self.id = id
        self.client = client
        self.handler = handler
        self.settings = settings
        self.onClose = onClose
        var logger = logger
        logger[metadataKey: "client"] = "\(client.address)"
        self.logger = logger
        self.loop = loop
        self.stateMachine = StateMachine(settings: settings, bodyDecision: { [handler] in handler.bodyHandling(for: $0) })
    }

    /// Runs `body` on the loop thread: at once when already there, else asynchronously.
    func onLoop(_ body: @escaping @Sendable () -> Void) {
        if loop.inLoop { body() } else { loop.execute(body) }
    }

    /// Registers with the loop and starts reading. Call once, from any thread.
    func start() {
        loop.execute { self.setUp() }
    }

    /// Closes the connection (server stopping); a pending exchange is cancelled. `completion` runs on the loop thread.
    func stop(completion: @escaping @Sendable () -> Void) {
        loop.execute {
            if let tunnel = self.tunnel, !tunnel.isClosed {
                tunnel.stop()   // reports its end, then closes this connection
            } else {
                self.run(self.stateMachine.stop())
            }
            completion()
        }
    }

    /// Closes the connection if it is between requests (server draining); `completion(busy)` runs on the loop thread and
    /// says whether a request was in progress (then the connection is left alone).
    func closeIfIdle(completion: @escaping @Sendable (_ busy: Bool) -> Void) {
        loop.execute {
            switch self.stateMachine.state {
            case .idle, .closed:
                self.run(self.stateMachine.stop())
                completion(false)
            case .lingering:
                // Its last response is out and its write side shut; closing now with unread input would reset the
                // connection and could destroy that response in the client's buffer. Its linger timer closes it.
                completion(false)
            case .readingHead, .readingBody, .handling, .writing, .switching, .tunnelled:
                completion(true)
            }
        }
    }

    private func setUp() {
        loop.preconditionInLoop()
        do {
            try loop.register(self, fd: fd)
            registered = true
        } catch {
            logger.error("cannot watch the connection: \(error)")
            closeNow()
            return
        }
        run(stateMachine.start())
    }

    // MARK: - Events

    /// The loop saw the socket become readable and/or writable (or fail, or the peer close). On the loop thread.
    func ready(readable: Bool, writable: Bool) {
        loop.preconditionInLoop()
        guard !closed else { return }
        if let tunnel {
            tunnel.clientReady(readable: readable, writable: writable)
            return
        }
        if readable {
            readReady = true
            self.readable()
        }
        if writable, !closed, !writeQueue.isEmpty {
            run([])  // flushes, then moves the state machine on if the queue drained
        }
    }

    /// Reads until the socket has nothing more for now, reading is suspended, or the connection closes.
    private func readable() {
        loop.preconditionInLoop()
        while !closed, !readSuspended, readReady {
            let result: Result<[UInt8], SystemError> = withUnsafeTemporaryAllocation(of: UInt8.self, capacity: Self.readChunkBytes) { buffer in
                Result { () throws(SystemError) in
                    let count = try syscall("read") { read(fd, buffer.baseAddress, buffer.count) }
                    return Array(buffer[0..<count])
                }
            }
            switch result {
            case let .success(bytes) where bytes.isEmpty:
                readReady = false
                run(stateMachine.readClosed())
            case let .success(bytes):
                // A short read emptied the socket: more bytes, or the peer's FIN, come with a new edge.
                if bytes.count < Self.readChunkBytes { readReady = false }
                run(stateMachine.bytesReceived(bytes, date: HTTPDateCache.shared.current()))
            case let .failure(error) where error.isWouldBlock:
                readReady = false
            case let .failure(error):
                logger.debug("read failed: \(error)")
                readReady = false
                run(stateMachine.readClosed())
            }
        }
    }

    /// The handler consumed `bytes` of the exchange's streamed body (from any thread).
    func bodyConsumed(_ bytes: Int, exchange: UInt64) {
        onLoop { self.run(self.stateMachine.bodyConsumed(bytes, exchange: exchange)) }
    }

    /// Fires the read and write timeouts whose deadlines have passed. Called by the loop's tick. On the loop thread.
    func checkDeadlines(now: DispatchTime) {
        loop.preconditionInLoop()
        if let tunnel {
            tunnel.checkDeadlines(now: now)
            return
        }
        if !closed, let armed = readTimerArmed, now >= armed.deadline {
            readTimerArmed = nil
            run(stateMachine.readTimerFired(armed.timer, date: HTTPDateCache.shared.current()))
        }
        if !closed, let deadline = writeTimerDeadline, now >= deadline {
            writeTimerDeadline = nil
            logger.notice("write timed out; closing")
            run(stateMachine.writeTimedOut())
        }
    }

    // MARK: - Actions

    /// Performs `actions` in order, then flushes and reports a drained write queue to the state machine.
    private func run(_ actions: [StateMachine.Action]) {
        loop.preconditionInLoop()
        pendingActions.append(contentsOf: actions)
        guard !running else { return }
        running = true
        defer { running = false }
        while true {
            while !pendingActions.isEmpty {
                perform(pendingActions.removeFirst())
            }
            if closed { pendingActions.removeAll(); return }
            flush()
            guard pendingActions.isEmpty else { continue }
            guard writeQueue.isEmpty else { return }
            let next = stateMachine.writesDrained(date: HTTPDateCache.shared.current())
            if next.isEmpty { return }
            pendingActions.append(contentsOf: next)
        }
    }

    private func perform(_ action: StateMachine.Action) {
        guard !closed else { return }
        switch action {
        case let .armReadTimer(timer, seconds):
            readTimerArmed = (timer, DispatchTime.now() + seconds)
        case .cancelReadTimer:
            readTimerArmed = nil
        case .suspendReading:
            readSuspended = true
        case .resumeReading:
            if readSuspended {
                readSuspended = false
                // Bytes may already wait (no new edge will announce them); read them once these actions are done.
                if readReady { loop.execute { self.readable() } }
            }
        case let .write(buffers):
            for buffer in buffers { writeQueue.append(buffer) }
        case let .sendFile(file):
            writeQueue.append(file)
        case let .writePart(part):
            writeQueue.append(part)
        case let .handle(head, body, exchange):
            requestBody = nil
            cancelCallbacks = []
            if let previous = progress {
                previous.clientGone()
                progress = nil
            }
            let sink = ConnectionResponseSink(connection: self, exchange: exchange)
            handler.handle(head, body: body, client: client, sink: sink)
        case let .openBody(length, exchange):
            // A new exchange: the previous one's callbacks and progress are over (as at `.handle`).
            cancelCallbacks = []
            if let previous = progress {
                previous.clientGone()
                progress = nil
            }
            requestBody = RequestBodyStream(connection: self, exchange: exchange, length: length)
        case let .deliverBody(event):
            requestBody?.deliver(event)
        case let .handleStreamed(head, exchange):
            cancelCallbacks = []
            if let previous = progress {
                previous.clientGone()
                progress = nil
            }
            let sink = ConnectionResponseSink(connection: self, exchange: exchange)
            guard let body = requestBody else { preconditionFailure("handleStreamed comes after openBody") }
            handler.handle(head, streamedBody: body, client: client, sink: sink)
        case let .connect(head, exchange):
            cancelCallbacks = []
            if let previous = progress {
                previous.clientGone()
                progress = nil
            }
            handler.connect(head, client: client, reply: ConnectionConnectReply(connection: self, exchange: exchange))
        case let .startTunnel(leftover):
            startTunnel(leftover: leftover)
        case .cancelExchange:
            let callbacks = cancelCallbacks
            cancelCallbacks = []
            for callback in callbacks { callback() }
            progress?.clientGone()
            progress = nil
        case let .logRefused(error):
            logger.notice("refused request from \(client.address): \(error.status) \(error.reason)")
        case .shutdownWrite:
            _ = shutdown(fd, Int32(SHUT_WR))
        case .close:
            closeNow()
        case .reset:
            var linger = Glibc.linger(l_onoff: 1, l_linger: 0)
            _ = setsockopt(fd, SOL_SOCKET, SO_LINGER, &linger, socklen_t(MemoryLayout<Glibc.linger>.size))
            closeNow()
        }
    }

    /// Writes as much of the queue as the socket takes; sets the write deadline when it takes no more (the loop's
    /// writable event flushes again).
    private func flush() {
        guard !closed else { return }
        var progressed = false
        while !writeQueue.isEmpty {
            do {
                let written = try writeQueue.write { iovecs, fileFollows throws(SystemError) in
                    var message = msghdr()
                    message.msg_iov = UnsafeMutablePointer(mutating: iovecs.baseAddress)
                    message.msg_iovlen = numericCast(iovecs.count)
                    let flags = Int32(MSG_NOSIGNAL) | (fileFollows ? Int32(MSG_MORE) : 0)
                    return try syscall("sendmsg") { sendmsg(fd, &message, flags) }
                } sendFile: { file, offset, count throws(SystemError) in
                    var position = off_t(offset)
                    let sent = try syscall("sendfile") { Glibc.sendfile(fd, file, &position, count) }
                    // The file ended before its verified length: the client must see a truncated response.
                    if sent == 0 { throw SystemError(errno: EIO, function: "sendfile (file shorter than its verified length)") }
                    return sent
                }
                if written > 0 {
                    progressed = true
                    progress?.add(written)
                }
            } catch where error.isWouldBlock {
                if progressed || writeTimerDeadline == nil {
                    writeTimerDeadline = DispatchTime.now() + settings.writeTimeoutSeconds
                }
                return
            } catch {
                logger.debug("write failed: \(error)")
                pendingActions.append(contentsOf: stateMachine.writeFailed())
                return
            }
        }
        writeTimerDeadline = nil
    }

    /// The 200 for a CONNECT is written: the tunnel takes over the socket.
    private func startTunnel(leftover: [UInt8]) {
        guard let accepted = acceptedTunnel, let upstream = accepted.socket.take() else {
            preconditionFailure("startTunnel follows connectAccepted")
        }
        acceptedTunnel = nil
        readTimerArmed = nil
        writeTimerDeadline = nil
        readSuspended = false
        let ended = accepted.ended
        let tunnel = Tunnel(connectionID: id, loop: loop, clientFD: fd, upstream: upstream, leftover: leftover,
                            clientReadReady: readReady, options: accepted.options,
                            writeTimeoutSeconds: settings.writeTimeoutSeconds, logger: logger) { [unowned self] report in
            ended(report)
            self.closeNow()
        }
        self.tunnel = tunnel
        tunnel.start()
    }

    /// Stops watching the socket and closes it.
    private func closeNow() {
        loop.preconditionInLoop()
        guard !closed else { return }
        if let tunnel, !tunnel.isClosed {
            tunnel.fail()   // reports its end and comes back here
            return
        }
        if let accepted = acceptedTunnel {
            // The client went while its 200 was being written: the tunnel never started.
            acceptedTunnel = nil
            accepted.ended(TunnelReport(end: .error, bytesUp: 0, bytesDown: 0, seconds: 0))
        }
        closed = true
        writeQueue.removeAll()
        cancelCallbacks = []
        progress?.clientGone()
        progress = nil
        readTimerArmed = nil
        writeTimerDeadline = nil
        if registered { loop.deregister(self, fd: fd) }
        closeDescriptor(fd)
        onClose(self)
    }

    // MARK: - Sink calls (on the loop thread)

    fileprivate func sinkInterim(_ head: HTTPResponseHead, exchange: UInt64) {
        loop.preconditionInLoop()
        run(stateMachine.responseInterim(head, exchange: exchange))
    }

    fileprivate func sinkHead(_ head: HTTPResponseHead, bodyLength: Int?, exchange: UInt64, sink: ConnectionResponseSink) {
        loop.preconditionInLoop()
        let actions = stateMachine.responseHead(head, bodyLength: bodyLength, exchange: exchange, date: HTTPDateCache.shared.current())
        // A streamed response: count what the socket takes of it from now on. A head for an exchange that is over
        // (its client gone) is refused with no action: its sink hears so at once.
        if closed || actions.isEmpty {
            sink.clientGone()
        } else {
            progress = sink
        }
        run(actions)
    }

    fileprivate func sinkBody(_ chunk: [UInt8], exchange: UInt64) {
        loop.preconditionInLoop()
        run(stateMachine.responseBody(chunk, exchange: exchange))
    }

    fileprivate func sinkEnd(exchange: UInt64) {
        loop.preconditionInLoop()
        run(stateMachine.responseEnd(exchange: exchange))
    }

    fileprivate func sinkRespond(_ head: HTTPResponseHead, body: [UInt8], exchange: UInt64) {
        loop.preconditionInLoop()
        run(stateMachine.respond(head, body: body, exchange: exchange, date: HTTPDateCache.shared.current()))
    }

    fileprivate func sinkRespond(_ prepared: SerializedResponseHead, extra: HTTPHeaders, body: [UInt8], exchange: UInt64) {
        loop.preconditionInLoop()
        run(stateMachine.respond(prepared, extra: extra, body: body, exchange: exchange, date: HTTPDateCache.shared.current()))
    }

    fileprivate func sinkRespond(_ prepared: SerializedResponseHead, extra: HTTPHeaders, file: FileBody, exchange: UInt64) {
        loop.preconditionInLoop()
        run(stateMachine.respond(prepared, extra: extra, file: file, exchange: exchange, date: HTTPDateCache.shared.current()))
    }

    fileprivate func sinkRespond(_ prepared: SerializedResponseHead, extra: HTTPHeaders, part: ArraySlice<UInt8>, exchange: UInt64) {
        loop.preconditionInLoop()
        run(stateMachine.respond(prepared, extra: extra, part: part, exchange: exchange, date: HTTPDateCache.shared.current()))
    }

    fileprivate func sinkAbort(exchange: UInt64) {
        loop.preconditionInLoop()
        run(stateMachine.abort(exchange: exchange))
    }

    fileprivate func connectRefused(status: Int, reason: String, exchange: UInt64) {
        loop.preconditionInLoop()
        run(stateMachine.connectRefused(status: status, reason: reason, exchange: exchange, date: HTTPDateCache.shared.current()))
    }

    fileprivate func connectAccepted(_ socket: OwnedSocket, options: TunnelOptions, ended: @escaping @Sendable (TunnelReport) -> Void,
                                     exchange: UInt64) {
        loop.preconditionInLoop()
        guard !closed, acceptedTunnel == nil, let actions = stateMachine.connectAccepted(exchange: exchange) else {
            // The client went away (or the answer came twice): the socket closes with its last reference.
            ended(TunnelReport(end: .error, bytesUp: 0, bytesDown: 0, seconds: 0))
            return
        }
        acceptedTunnel = (socket, options, ended)
        run(actions)
    }

    fileprivate func sinkOnCancel(_ callback: @escaping @Sendable () -> Void, exchange: UInt64) {
        loop.preconditionInLoop()
        switch stateMachine.registerCancel(exchange: exchange) {
        case .store: cancelCallbacks.append(callback)
        case .runNow: callback()
        case .drop: break
        }
    }
}

/// The `ResponseSink` of one exchange on one connection. Holds no state of its own: every call goes to the
/// connection's loop thread (at once when already there), tagged with the exchange id.
final class ConnectionResponseSink: ResponseSink, @unchecked Sendable {
    private let connection: Connection
    private let exchange: UInt64
    /// How much of this response the socket has taken (written on the loop thread, read anywhere). Held inline: a
    /// response costs no allocation for it.
    private let progress = ExchangeProgress()

    /// The socket took `bytes` of this response (the connection's loop thread).
    func add(_ bytes: Int) { progress.add(bytes) }
    /// The client went away, or the exchange is over: a waiting callback runs now.
    func clientGone() { progress.clientGone() }

    var bytesWritten: Int { progress.written }
    var executor: (any SinkExecutor)? { connection.loop }
    func whenWritten(_ bytes: Int, _ callback: @escaping @Sendable () -> Void) { progress.whenWritten(bytes, callback) }

    init(connection: Connection, exchange: UInt64) {
        self.connection = connection
        self.exchange = exchange
    }

    func interim(_ head: HTTPResponseHead) {
        let connection = connection, exchange = exchange
        connection.onLoop { connection.sinkInterim(head, exchange: exchange) }
    }

    func head(_ head: HTTPResponseHead, bodyLength: Int?) {
        let connection = connection, exchange = exchange
        connection.onLoop { connection.sinkHead(head, bodyLength: bodyLength, exchange: exchange, sink: self) }
    }

    func body(_ chunk: [UInt8]) {
        let connection = connection, exchange = exchange
        connection.onLoop { connection.sinkBody(chunk, exchange: exchange) }
    }

    func end() {
        let connection = connection, exchange = exchange
        connection.onLoop { connection.sinkEnd(exchange: exchange) }
    }

    func respond(_ head: HTTPResponseHead, body: [UInt8]) {
        let connection = connection, exchange = exchange
        connection.onLoop { connection.sinkRespond(head, body: body, exchange: exchange) }
    }

    func respond(_ head: SerializedResponseHead, extra: HTTPHeaders, body: [UInt8]) {
        let connection = connection, exchange = exchange
        connection.onLoop { connection.sinkRespond(head, extra: extra, body: body, exchange: exchange) }
    }

    func respond(_ head: SerializedResponseHead, extra: HTTPHeaders, file: FileBody) {
        let connection = connection, exchange = exchange
        connection.onLoop { connection.sinkRespond(head, extra: extra, file: file, exchange: exchange) }
    }

    func respond(_ head: SerializedResponseHead, extra: HTTPHeaders, part: ArraySlice<UInt8>) {
        let connection = connection, exchange = exchange
        connection.onLoop { connection.sinkRespond(head, extra: extra, part: part, exchange: exchange) }
    }

    func abort() {
        let connection = connection, exchange = exchange
        connection.onLoop { connection.sinkAbort(exchange: exchange) }
    }

    func onCancel(_ callback: @escaping @Sendable () -> Void) {
        let connection = connection, exchange = exchange
        connection.onLoop { connection.sinkOnCancel(callback, exchange: exchange) }
    }
}

/// Bytes of one exchange's response the socket has taken, and one waiting "tell me when it reaches N" callback.
/// The count is added to on the connection's loop thread (one relaxed atomic add per write: the hot path takes no
/// lock, and none when the exchange ends with no callback waiting); the callback is registered from the proxy queue
/// and run by whichever side sees the target reached or the client gone.
struct ExchangeProgress: ~Copyable, Sendable {
    private let count = Atomic<Int>(0)
    /// The watched target (Int.max when none), read without the lock on every add.
    private let target = Atomic<Int>(Int.max)
    private let watch = Locked<(@Sendable () -> Void)?>(nil)
    private let gone = Atomic<Bool>(false)

    /// What the client has taken; Int.max once it is gone (nothing of the response is held for it any more).
    var written: Int { gone.load(ordering: .relaxed) ? Int.max : count.load(ordering: .relaxed) }

    func add(_ bytes: Int) {
        let total = count.add(bytes, ordering: .relaxed).newValue
        if total >= target.load(ordering: .relaxed) { fire() }
    }

    /// The client went away: a waiting callback runs now, later ones at once.
    func clientGone() {
        gone.store(true, ordering: .sequentiallyConsistent)
        // Pairs with whenWritten's store of the target, then load of `gone`: one of the two sees the other.
        if target.load(ordering: .sequentiallyConsistent) != Int.max { fire() }
    }

    /// A callback may run a little early (a racing add fired it), never late: its owner re-checks the count.
    func whenWritten(_ bytes: Int, _ callback: @escaping @Sendable () -> Void) {
        watch.withLock { watch in
            watch = callback
            target.store(bytes, ordering: .sequentiallyConsistent)
        }
        if gone.load(ordering: .sequentiallyConsistent) || count.load(ordering: .relaxed) >= bytes { fire() }
    }

    private func fire() {
        let callback = watch.withLock { watch -> (@Sendable () -> Void)? in
            defer {
                watch = nil
                target.store(Int.max, ordering: .sequentiallyConsistent)
            }
            return watch
        }
        callback?()
    }
}

/// The `ConnectReply` of one CONNECT exchange: every call goes to the connection's loop thread, tagged with the exchange.
final class ConnectionConnectReply: ConnectReply, @unchecked Sendable {
    private let connection: Connection
    private let exchange: UInt64

    init(connection: Connection, exchange: UInt64) {
        self.connection = connection
        self.exchange = exchange
    }

    func refuse(status: Int, reason: String) {
        let connection = connection, exchange = exchange
        connection.onLoop { connection.connectRefused(status: status, reason: reason, exchange: exchange) }
    }

    func tunnel(_ socket: OwnedSocket, options: TunnelOptions, ended: @escaping @Sendable (TunnelReport) -> Void) {
        let connection = connection, exchange = exchange
        connection.onLoop { connection.connectAccepted(socket, options: options, ended: ended, exchange: exchange) }
    }

    func onCancel(_ callback: @escaping @Sendable () -> Void) {
        let connection = connection, exchange = exchange
        connection.onLoop { connection.sinkOnCancel(callback, exchange: exchange) }
    }
}
