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
// closed never raises SIGPIPE), and file bodies with `sendfile` (SIGPIPE ignored process-wide by the daemon); on a
// TLS connection both go through the stream instead ("TLS" below: no sendfile, a pread into a scratch buffer).
// Whatever the socket does not take waits in the `WriteQueue` for a writable event.

internal import ImageCacheSystem
internal import ImageCacheHTTP
internal import ImageCacheTLS
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
    /// The peer's FIN or a hang-up is queued (EPOLLRDHUP): reads go on to the 0, never stop at a short read.
    private var hungUp = false
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
    /// The intercepted CONNECT accepted, waiting for its 200 to be written, then (until the connection closes) its
    /// `ended` callback.
    private var interception: (context: TLSContext, identity: TLSIdentity, target: ConnectTarget,
                               ended: @Sendable (TunnelReport) -> Void, started: DispatchTime)?
    private var stopping = false
    /// The TLS side, on a TLS listener (nil on a plain one): every byte in and out goes through it (Connection+TLS).
    private var tls: TLSTransport?
    /// On a TLS listener, the stream could not be made: the connection closes at once.
    private var tlsUnavailable = false

    init(fd: Int32, id: UInt64, client: ClientInfo, handler: any RequestHandler, settings: ServerSettings,
         loop: EventLoop, logger: Logger, tls: TLSListening? = nil, onClose: @escaping @Sendable (Connection) -> Void) {
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
        let authority = InterceptedAuthority()
        self.stateMachine = StateMachine(settings: settings, authority: authority, bodyDecision: { [handler, authority, client] head in
            // Inside an intercepted tunnel the handler decides on the forward request the head stands for.
            guard let target = authority.target else { return handler.bodyHandling(for: head, client: client) }
            switch InterceptedRequest.rewrite(head, for: target) {
            case let .success(rewritten): return handler.bodyHandling(for: rewritten, client: client)
            case let .failure(refusal): return .refuse(refusal)
            }
        })
        if let tls {
            do {
                self.tls = TLSTransport(stream: try TLSStream(server: tls.current), counters: tls.counters)
                tls.counters.opened()
            } catch {
                // Never served in plain text instead: the connection closes as soon as it is set up.
                logger.error("cannot start TLS for a connection: \(error)")
                tlsUnavailable = true
            }
        }
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
            self.stopping = true
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
        if tlsUnavailable {
            closeNow()
            return
        }
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
    func ready(readable: Bool, writable: Bool, hungUp: Bool = false) {
        loop.preconditionInLoop()
        guard !closed else { return }
        if hungUp { self.hungUp = true }
        if let tunnel {
            tunnel.clientReady(readable: readable, writable: writable, hungUp: hungUp)
            return
        }
        if readable {
            readReady = true
            self.readable()
        }
        if writable, !closed, !writeQueue.isEmpty || tls?.hasPendingCiphertext == true {
            run([])  // flushes, then moves the state machine on if the queue drained
        }
    }

    /// Reads until the socket has nothing more for now, reading is suspended, or the connection closes.
    private func readable() {
        loop.preconditionInLoop()
        if tls != nil { return readableTLS() }
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
                // A short read emptied the socket: more bytes, or the peer's FIN, come with a new edge; unless the FIN
                // is already queued behind these bytes (then read on to the 0).
                if bytes.count < Self.readChunkBytes, !hungUp { readReady = false }
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
        if let tls, let deadline = tls.handshakeDeadline, now >= deadline {
            logger.debug("TLS handshake not done within \(settings.headerTimeoutSeconds) s; closing")
            tls.failed(.timeout)
            closeNow()
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
            guard writeQueue.isEmpty, tls?.hasPendingCiphertext != true else { return }
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
                // Under TLS plaintext or ciphertext may also wait inside the stream.
                if readReady || tls != nil { loop.execute { self.readable() } }
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
        case let .connect(_, exchange) where tls != nil:
            // A tunnel inside a TLS connection would need the tunnel to speak TLS on its client side: not yet.
            pendingActions.append(contentsOf: stateMachine.connectRefused(
                status: 501, reason: "CONNECT is not supported on the TLS listener; use the plain listener as the proxy",
                exchange: exchange, date: HTTPDateCache.shared.current()))
        case let .connect(head, exchange):
            cancelCallbacks = []
            if let previous = progress {
                previous.clientGone()
                progress = nil
            }
            handler.connect(head, client: client, reply: ConnectionConnectReply(connection: self, exchange: exchange))
        case let .startTunnel(leftover):
            startTunnel(leftover: leftover)
        case let .startTLS(leftover):
            startInterceptedTLS(leftover: leftover)
        case .cancelExchange:
            let callbacks = cancelCallbacks
            cancelCallbacks = []
            for callback in callbacks { callback() }
            progress?.clientGone()
            progress = nil
        case let .logRefused(error):
            logger.notice("refused request from \(client.address): \(error.status) \(error.reason)")
        case .shutdownWrite:
            if let tls, tls.isEstablished {
                tls.closeNotify()   // close_notify goes out first; flush shuts the write side once the stream has drained
            } else {
                _ = shutdown(fd, Int32(SHUT_WR))
            }
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
        if let tls, tls.carriesWrites { return flushTLS(tls) }
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
                            clientReadReady: readReady || hungUp, clientHungUp: hungUp, options: accepted.options,
                            writeTimeoutSeconds: settings.writeTimeoutSeconds, logger: logger) { [unowned self] report in
            ended(report)
            self.closeNow()
        }
        self.tunnel = tunnel
        tunnel.start()
    }

    /// The 200 for an intercepted CONNECT is written: the connection becomes a TLS server for the tunnel's host.
    private func startInterceptedTLS(leftover: [UInt8]) {
        guard let interception else { preconditionFailure("startTLS follows connectIntercepted") }
        let stream: TLSStream
        do {
            stream = try TLSStream(server: interception.context, identity: interception.identity,
                                   serverName: .mustMatch(interception.target.host))
        } catch {
            logger.error("cannot start TLS for an intercepted tunnel to \(interception.target): \(error)")
            closeNow()
            return
        }
        let transport = TLSTransport(stream: stream, counters: TLSCounters.intercepted)
        TLSCounters.intercepted.opened()
        tls = transport
        readSuspended = false   // the state machine starts afresh (idle): reading goes on through the stream
        if !leftover.isEmpty {
            // An early ClientHello (the client did not wait for the 200): sniffed and fed as a first read's bytes.
            guard sniffHello(transport, leftover) else { return }
        }
        if readReady || hungUp || !leftover.isEmpty { readableTLS() }
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
        if let intercepted = interception {
            interception = nil
            let seconds = Double(DispatchTime.now().uptimeNanoseconds - intercepted.started.uptimeNanoseconds) / 1e9
            // The bytes are the TLS records each way (what a blind tunnel would have carried), the first ones included.
            intercepted.ended(TunnelReport(end: stopping ? .shutdown : (tls?.isEstablished == true ? .closed : .error),
                                           bytesUp: (tls?.bytesIn ?? 0) + (tls?.helloBytes ?? 0), bytesDown: tls?.bytesOut ?? 0,
                                           seconds: seconds))
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
        tls?.connectionClosed()
        onClose(self)
    }

    // MARK: - TLS (a connection on a TLS listener)
    //
    // Reading: socket -> the stream's incoming ring (before the first bytes are sniffed: a small buffer, so plain
    // HTTP gets its 400 and other bytes a close) -> handshake -> plaintext -> the state machine, as a plain read's
    // bytes. Writing: the write queue's buffers go through `TLSStream.write` (the cache's arrays read in place; a file
    // region through a pread into a scratch buffer), and the outgoing ring drains to the socket. The queue counts
    // bytes the stream took; "drained" waits for the ring too, so a close or a FIN never cuts a response short.

    private func readableTLS() {
        guard let tls else { return }
        while !closed {
            var moved = false
            if readReady, !tls.peerEnded {
                if tls.awaitingHello {
                    guard readHello(tls) else { return }
                    moved = true
                } else {
                    let space = tls.stream.networkWriteSpace()
                    if !space.isEmpty {
                        do {
                            let count = try syscall("read") { read(fd, space.baseAddress, space.count) }
                            if count == 0 {
                                tls.peerEnded = true
                                tls.stream.networkDidEnd()
                                readReady = false
                            } else {
                                tls.stream.networkDidWrite(count)
                                tls.bytesIn += count
                                if count < space.count, !hungUp { readReady = false }
                            }
                            moved = true
                        } catch where error.isWouldBlock {
                            readReady = false
                        } catch {
                            logger.debug("read failed: \(error)")
                            readReady = false
                            run(stateMachine.readClosed())
                            return
                        }
                    }
                }
            }
            if !tls.awaitingHello, !tls.stream.isHandshakeDone {
                switch tls.stream.handshake() {
                case .done:
                    tls.established()
                    moved = true
                case .wantRead, .wantWrite:
                    break
                case let .failed(error):
                    handshakeFailed(tls, error)
                    return
                }
            }
            if tls.isEstablished, !readSuspended {
                let result: (TLSStream.ReadResult, [UInt8]) = withUnsafeTemporaryAllocation(of: UInt8.self, capacity: Self.readChunkBytes) { buffer in
                    let result = tls.stream.read(into: UnsafeMutableRawBufferPointer(buffer))
                    if case let .bytes(count) = result { return (result, Array(buffer[0..<count])) }
                    return (result, [])
                }
                switch result.0 {
                case .bytes:
                    run(stateMachine.bytesReceived(result.1, date: HTTPDateCache.shared.current()))
                    moved = true
                case .wantRead, .wantWrite:
                    break
                case .closed:
                    run(stateMachine.readClosed())
                    return
                case let .failed(error):
                    if error.kind != .unexpectedEOF { logger.debug("TLS read failed: \(error)") }
                    run(stateMachine.readClosed())
                    return
                }
            } else if tls.peerEnded, !tls.isEstablished, !closed {
                tls.failed(.closed)
                closeNow()
                return
            }
            if !moved { break }
        }
        if !closed { run([]) }   // what the stream wrote (handshake flights, tickets, alerts) goes out
    }

    /// Reads the first bytes of a TLS connection and sniffs them. False when the connection is done with (closed, or
    /// answered in plain text).
    private func readHello(_ tls: TLSTransport) -> Bool {
        let result: Result<[UInt8], SystemError> = withUnsafeTemporaryAllocation(of: UInt8.self, capacity: Self.readChunkBytes) { buffer in
            Result { () throws(SystemError) in
                let count = try syscall("read") { read(fd, buffer.baseAddress, buffer.count) }
                return Array(buffer[0..<count])
            }
        }
        switch result {
        case let .success(bytes) where bytes.isEmpty:
            readReady = false
            closeNow()   // the client left before its first byte: nothing to count
            return false
        case let .success(bytes):
            if bytes.count < Self.readChunkBytes, !hungUp { readReady = false }
            return sniffHello(tls, bytes)
        case let .failure(error) where error.isWouldBlock:
            readReady = false
            return true
        case .failure:
            closeNow()
            return false
        }
    }

    /// Takes a TLS connection's first bytes: a ClientHello goes into the stream and the handshake clock starts; plain
    /// HTTP gets its 400; anything else a close. False when the connection is done with.
    private func sniffHello(_ tls: TLSTransport, _ bytes: [UInt8]) -> Bool {
        tls.hello += bytes
        tls.helloBytes += bytes.count
        switch TLSRecordSniff(tls.hello) {
        case .tls:
            let hello = tls.hello
            tls.hello = []
            let taken = hello.withUnsafeBytes { tls.stream.feed($0) }
            guard taken == hello.count else {
                // The first read is at most 16 KiB and the ring holds 17 KiB: never short.
                tls.failed(.protocol)
                closeNow()
                return false
            }
            tls.startHandshake(deadline: DispatchTime.now() + settings.headerTimeoutSeconds)
            return true
        case .needMore:
            return true
        case .plainHTTP:
            // As nginx does: a plain-text answer saying so, then close.
            tls.failed(.notTLS)
            let answer = ResponseWriter.errorResponse(
                HTTPParser.ParseError(status: 400, reason: "plain HTTP sent to the TLS port: use https://"),
                date: HTTPDateCache.shared.current())
            _ = answer.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            _ = shutdown(fd, Int32(SHUT_WR))
            closeNow()
            return false
        case .other:
            tls.failed(.notTLS)
            closeNow()
            return false
        }
    }

    private func handshakeFailed(_ tls: TLSTransport, _ error: TLSError) {
        switch error.kind {
        case .serverNameMismatch: tls.failed(.sniMismatch)
        case .unexpectedEOF: tls.failed(.closed)
        default: tls.failed(.protocol)
        }
        logger.debug("TLS handshake failed: \(error)")
        // The alert OpenSSL wrote goes out if the socket takes it now; then close.
        _ = try? drainCiphertext(tls)
        closeNow()
    }

    /// Writes the queue through the stream and drains its ring to the socket.
    private func flushTLS(_ tls: TLSTransport) {
        var progressed = false
        tls.socketTookBytes = false
        do throws(SystemError) {
            if try drainCiphertext(tls) { progressed = true }
            while !writeQueue.isEmpty, tls.isEstablished {
                let written = try writeQueue.write { iovecs, _ throws(SystemError) in
                    try self.tlsSend(iovecs, tls)
                } sendFile: { file, offset, count throws(SystemError) in
                    try self.tlsSendFile(file, offset: offset, count: count, tls)
                }
                if written > 0 {
                    progressed = true
                    progress?.add(written)
                }
                if try drainCiphertext(tls) { progressed = true }
            }
            if tls.shutdownPending, !tls.stream.hasPendingCiphertext {
                tls.shutdownPending = false
                _ = shutdown(fd, Int32(SHUT_WR))
            }
        } catch where error.isWouldBlock {
            // Any byte the socket took counts as progress, a part of the ring included (a slow reader moves the ring
            // a little at a time and must not be cut off while it does).
            if progressed || tls.socketTookBytes || writeTimerDeadline == nil {
                writeTimerDeadline = DispatchTime.now() + settings.writeTimeoutSeconds
            }
            return
        } catch {
            logger.debug("write failed: \(error)")
            pendingActions.append(contentsOf: stateMachine.writeFailed())
            return
        }
        writeTimerDeadline = nil
    }

    /// Sends what waits in the stream's outgoing ring; throws EAGAIN when the socket takes no more. Whether bytes went.
    @discardableResult
    private func drainCiphertext(_ tls: TLSTransport) throws(SystemError) -> Bool {
        var sent = false
        while tls.stream.hasPendingCiphertext {
            let pending = tls.stream.pendingCiphertext()
            let count = try syscall("send") { send(fd, pending.baseAddress, pending.count, Int32(MSG_NOSIGNAL)) }
            tls.stream.ciphertextConsumed(count)
            if count > 0 { tls.socketTookBytes = true }
            tls.bytesOut += count
            sent = true
        }
        return sent
    }

    /// The write queue's buffers into the stream: how many bytes it took (a partial write is fine: the queue resumes
    /// from there, which is also what OpenSSL asks of a write retried after WANT_WRITE).
    private func tlsSend(_ iovecs: UnsafeBufferPointer<iovec>, _ tls: TLSTransport) throws(SystemError) -> Int {
        var total = 0
        for vector in iovecs {
            var offset = 0
            while offset < vector.iov_len {
                let bytes = UnsafeRawBufferPointer(start: vector.iov_base.map { UnsafeRawPointer($0) + offset }, count: vector.iov_len - offset)
                switch tls.stream.write(bytes) {
                case let .wrote(count):
                    offset += count
                    total += count
                case .wantWrite, .wantRead:
                    do throws(SystemError) {
                        guard try drainCiphertext(tls) else { throw SystemError(errno: EAGAIN, function: "SSL_write") }
                    } catch where error.isWouldBlock {
                        if total > 0 { return total }
                        throw error
                    }
                case let .failed(error):
                    logger.debug("TLS write failed: \(error)")
                    throw SystemError(errno: EPROTO, function: "SSL_write")
                }
            }
        }
        return total
    }

    /// A file region into the stream, a record's worth at a time through a scratch buffer (no sendfile under TLS).
    private func tlsSendFile(_ file: Int32, offset: Int, count: Int, _ tls: TLSTransport) throws(SystemError) -> Int {
        try withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 16_384) { scratch throws(SystemError) -> Int in
            let wanted = min(count, scratch.count)
            let read = try FileRead.read(file, into: UnsafeMutableRawBufferPointer(UnsafeMutableBufferPointer(rebasing: scratch[0..<wanted])), offset: offset)
            // The file ended before its verified length: the client must see a truncated response.
            if read == 0 { throw SystemError(errno: EIO, function: "pread (file shorter than its verified length)") }
            var iovec = iovec(iov_base: UnsafeMutableRawPointer(scratch.baseAddress), iov_len: read)
            return try withUnsafePointer(to: &iovec) { pointer throws(SystemError) in
                try tlsSend(UnsafeBufferPointer(start: pointer, count: 1), tls)
            }
        }
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

    fileprivate func connectIntercepted(_ context: TLSContext, identity: TLSIdentity, target: ConnectTarget,
                                        ended: @escaping @Sendable (TunnelReport) -> Void, exchange: UInt64) {
        loop.preconditionInLoop()
        guard !closed, acceptedTunnel == nil, interception == nil, tls == nil,
              let actions = stateMachine.connectAccepted(exchange: exchange, intercept: target) else {
            // The client went away, the answer came twice, or this connection is already TLS (interception inside
            // the TLS listener would stack two streams: refused at CONNECT).
            ended(TunnelReport(end: .error, bytesUp: 0, bytesDown: 0, seconds: 0))
            return
        }
        interception = (context, identity, target, ended, DispatchTime.now())
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

    func intercept(_ context: TLSContext, identity: TLSIdentity, target: ConnectTarget, options: TunnelOptions,
                   ended: @escaping @Sendable (TunnelReport) -> Void) {
        let connection = connection, exchange = exchange
        connection.onLoop { connection.connectIntercepted(context, identity: identity, target: target, ended: ended, exchange: exchange) }
    }

    func onCancel(_ callback: @escaping @Sendable () -> Void) {
        let connection = connection, exchange = exchange
        connection.onLoop { connection.sinkOnCancel(callback, exchange: exchange) }
    }
}

/// A connection's TLS state: its stream, where the handshake is, and the listener's counters. Confined to the
/// connection's loop thread.
final class TLSTransport {
    let stream: TLSStream
    private let counters: TLSCounters
    /// The first bytes, until they are sniffed.
    var hello: [UInt8] = []
    /// How many bytes came as the first ones (they reach the stream through `feed`, not the ring's counts).
    var helloBytes = 0
    private(set) var awaitingHello = true
    /// When the handshake must be done (set by its first byte; cleared when done).
    private(set) var handshakeDeadline: DispatchTime?
    private(set) var isEstablished = false
    /// The socket read 0.
    var peerEnded = false
    /// Our close_notify is in the ring: shut the write side once it has gone.
    var shutdownPending = false
    /// The socket took bytes from the ring during the current flush (the write deadline moves on any progress).
    var socketTookBytes = false
    /// Bytes of TLS records read from the client and written to it (an intercepted tunnel's report).
    var bytesIn = 0
    var bytesOut = 0
    private var counted = false

    init(stream: TLSStream, counters: TLSCounters) {
        self.stream = stream
        self.counters = counters
    }

    /// Writes go through the stream once it has one to carry them (a plain-text refusal goes out raw).
    var carriesWrites: Bool { !awaitingHello }

    var hasPendingCiphertext: Bool { stream.hasPendingCiphertext }

    func startHandshake(deadline: DispatchTime) {
        awaitingHello = false
        handshakeDeadline = deadline
    }

    func established() {
        isEstablished = true
        handshakeDeadline = nil
        counters.handshake(resumed: stream.isResumed)
    }

    func failed(_ failure: TLSCounters.Failure) {
        guard !counted else { return }
        counted = true
        handshakeDeadline = nil
        counters.failed(failure)
    }

    func closeNotify() {
        _ = stream.shutdown()
        shutdownPending = true
    }

    func connectionClosed() {
        counters.closed()
    }
}
