// One accepted client socket, driven by Dispatch.
//
// Each connection has its own serial queue (`imagecached.connection`) that targets one shared concurrent
// queue, so thousands of connections share a few threads. Everything mutable here is owned by that queue:
// the fd, the read and write sources, the two timers, the write queue and the `StateMachine` (which owns
// the parser). The sources report events; the state machine decides; `run(_:)` performs its actions.
//
// Each request is answered through its own `ConnectionResponseSink`, tagged with the exchange id, so a late
// call for an earlier request is ignored. A sink call made on this connection's queue acts at once (the queue
// is recognised through `DispatchQueue.getSpecific`); from any other queue it hops here with `queue.async`,
// which keeps the order of calls made from one serial queue.
//
// Writes go out with `sendmsg` (a vectored write, like `writev`, that also takes MSG_NOSIGNAL: a peer that
// closed never raises SIGPIPE). Whatever the socket does not take waits in the `WriteQueue` for the write source.

#if canImport(Glibc)
internal import Glibc
#elseif canImport(Darwin)
internal import Darwin
#endif
internal import Dispatch
internal import Logging

/// One client connection. Confined to `queue`.
final class Connection: @unchecked Sendable {
    /// Marks each connection's queue with its connection id, to recognise calls already on it.
    private static let queueKey = DispatchSpecificKey<UInt64>()
    /// Largest single read.
    private static let readChunkBytes = 16_384

    // MARK: immutable
    let id: UInt64
    let queue: DispatchQueue
    let client: ClientInfo
    private let fd: Int32
    private let handler: any RequestHandler
    private let configuration: ServerConfiguration
    private let logger: Logger
    /// Called once on `queue` when the connection has closed (the listener forgets it).
    private let onClose: @Sendable (Connection) -> Void

    // MARK: owned by queue
    private var stateMachine: StateMachine
    private var readSource: (any DispatchSourceRead)?
    private var writeSource: (any DispatchSourceWrite)?
    private var readTimer: (any DispatchSourceTimer)?
    private var writeTimer: (any DispatchSourceTimer)?
    /// Which read timer is armed and when it is due (a stale firing after a re-arm is ignored).
    private var readTimerArmed: (timer: StateMachine.ReadTimer, deadline: DispatchTime)?
    private var writeTimerDeadline: DispatchTime?
    /// When each Dispatch timer is set to fire (nil: not set). Re-setting a Dispatch timer wakes the Dispatch
    /// manager thread, so it is set only when a deadline comes earlier than it; a firing before the deadline
    /// (the deadline moved later, or was dropped) sets it again or does nothing.
    private var readTimerScheduled: DispatchTime?
    private var writeTimerScheduled: DispatchTime?
    private var readSuspended = false
    /// The write source is resumed only while bytes wait for room in the socket.
    private var writeSourceActive = false
    private var writeQueue = WriteQueue()
    /// onCancel callbacks of the current exchange.
    private var cancelCallbacks: [@Sendable () -> Void] = []
    /// Actions waiting to run: sink calls made while actions run (from inside the handler) are queued here
    /// rather than run re-entrantly, so pipelined requests never nest on the stack.
    private var pendingActions: [StateMachine.Action] = []
    private var running = false
    private var closed = false
    /// Source cancellations still to complete before the fd may be closed.
    private var sourcesToCancel = 0

    init(fd: Int32, id: UInt64, client: ClientInfo, handler: any RequestHandler, configuration: ServerConfiguration,
         targetQueue: DispatchQueue, logger: Logger, onClose: @escaping @Sendable (Connection) -> Void) {
        self.fd = fd
        self.id = id
        self.client = client
        self.handler = handler
        self.configuration = configuration
        self.onClose = onClose
        var logger = logger
        logger[metadataKey: "client"] = "\(client.address)"
        self.logger = logger
        self.queue = DispatchQueue(label: "imagecached.connection", target: targetQueue)
        self.stateMachine = StateMachine(configuration: configuration)
        queue.setSpecific(key: Self.queueKey, value: id)
    }

    /// Whether the caller is running on this connection's queue.
    var isOnQueue: Bool { DispatchQueue.getSpecific(key: Self.queueKey) == id }

    /// Runs `body` on the queue: at once when already there, else asynchronously.
    func onQueue(_ body: @escaping @Sendable () -> Void) {
        if isOnQueue { body() } else { queue.async(execute: body) }
    }

    /// Sets up the sources and starts reading. Call once, from any queue.
    func start() {
        queue.async { self.setUp() }
    }

    /// Closes the connection (server stopping); a pending exchange is cancelled. `completion` runs on the queue.
    func stop(completion: @escaping @Sendable () -> Void) {
        queue.async {
            self.run(self.stateMachine.stop())
            completion()
        }
    }

    /// Closes the connection if it is between requests (server draining); `completion(busy)` runs on the queue and
    /// says whether a request was in progress (then the connection is left alone).
    func closeIfIdle(completion: @escaping @Sendable (_ busy: Bool) -> Void) {
        queue.async {
            switch self.stateMachine.state {
            case .idle, .lingering, .closed:
                self.run(self.stateMachine.stop())
                completion(false)
            case .readingHead, .readingBody, .handling, .writing:
                completion(true)
            }
        }
    }

    private func setUp() {
        dispatchPrecondition(condition: .onQueue(queue))
        let read = DispatchSource.makeReadSource(fileDescriptor: fd, queue: queue)
        read.setEventHandler { self.readable() }
        read.setCancelHandler { self.sourceCancelled() }
        let write = DispatchSource.makeWriteSource(fileDescriptor: fd, queue: queue)
        write.setEventHandler { self.writable() }
        write.setCancelHandler { self.sourceCancelled() }
        let readTimer = DispatchSource.makeTimerSource(queue: queue)
        readTimer.setEventHandler { self.readTimerFired() }
        let writeTimer = DispatchSource.makeTimerSource(queue: queue)
        writeTimer.setEventHandler { self.writeTimerFired() }
        readTimer.schedule(deadline: .distantFuture)
        writeTimer.schedule(deadline: .distantFuture)
        readTimer.resume()
        writeTimer.resume()
        self.readSource = read
        self.writeSource = write
        self.readTimer = readTimer
        self.writeTimer = writeTimer
        sourcesToCancel = 2
        read.resume()  // the write source stays suspended until a write would block
        run(stateMachine.start())
    }

    // MARK: - Events

    private func readable() {
        dispatchPrecondition(condition: .onQueue(queue))
        guard !closed else { return }
        let result: Result<[UInt8], SystemError> = withUnsafeTemporaryAllocation(of: UInt8.self, capacity: Self.readChunkBytes) { buffer in
            Result { () throws(SystemError) in
                let count = try syscall("read") { read(fd, buffer.baseAddress, buffer.count) }
                return Array(buffer[0..<count])
            }
        }
        switch result {
        case let .success(bytes) where bytes.isEmpty:
            run(stateMachine.readClosed())
        case let .success(bytes):
            run(stateMachine.bytesReceived(bytes, date: HTTPDateCache.shared.current()))
        case let .failure(error) where error.isWouldBlock:
            return
        case let .failure(error):
            logger.debug("read failed: \(error)")
            run(stateMachine.readClosed())
        }
    }

    private func writable() {
        dispatchPrecondition(condition: .onQueue(queue))
        guard !closed else { return }
        run([])  // flushes, then moves the state machine on if the queue drained
    }

    private func readTimerFired() {
        dispatchPrecondition(condition: .onQueue(queue))
        readTimerScheduled = nil
        guard !closed, let armed = readTimerArmed else { return }
        guard DispatchTime.now() >= armed.deadline else {
            scheduleReadTimer(armed.deadline)
            return
        }
        readTimerArmed = nil
        run(stateMachine.readTimerFired(armed.timer, date: HTTPDateCache.shared.current()))
    }

    private func writeTimerFired() {
        dispatchPrecondition(condition: .onQueue(queue))
        writeTimerScheduled = nil
        guard !closed, let deadline = writeTimerDeadline else { return }
        guard DispatchTime.now() >= deadline else {
            scheduleWriteTimer(deadline)
            return
        }
        writeTimerDeadline = nil
        logger.notice("write timed out; closing")
        run(stateMachine.writeTimedOut())
    }

    // MARK: - Actions

    /// Performs `actions` in order, then flushes and reports a drained write queue to the state machine.
    private func run(_ actions: [StateMachine.Action]) {
        dispatchPrecondition(condition: .onQueue(queue))
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
            let deadline = DispatchTime.now() + seconds
            readTimerArmed = (timer, deadline)
            scheduleReadTimer(deadline)
        case .cancelReadTimer:
            readTimerArmed = nil  // a later firing finds nothing armed and does nothing
        case .suspendReading:
            if !readSuspended {
                readSuspended = true
                readSource?.suspend()
            }
        case .resumeReading:
            if readSuspended {
                readSuspended = false
                readSource?.resume()
            }
        case let .write(buffers):
            for buffer in buffers { writeQueue.append(buffer) }
        case let .handle(head, body, exchange):
            cancelCallbacks = []
            let sink = ConnectionResponseSink(connection: self, exchange: exchange)
            handler.handle(head, body: body, client: client, sink: sink)
        case .cancelExchange:
            let callbacks = cancelCallbacks
            cancelCallbacks = []
            for callback in callbacks { callback() }
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

    /// Writes as much of the queue as the socket takes; arms the write source and timer when it takes no more.
    private func flush() {
        guard !closed else { return }
        var progressed = false
        while !writeQueue.isEmpty {
            do {
                let written = try writeQueue.write { iovecs throws(SystemError) in
                    var message = msghdr()
                    message.msg_iov = UnsafeMutablePointer(mutating: iovecs.baseAddress)
                    message.msg_iovlen = numericCast(iovecs.count)
                    return try syscall("sendmsg") { sendmsg(fd, &message, Int32(MSG_NOSIGNAL)) }
                }
                if written > 0 { progressed = true }
            } catch where error.isWouldBlock {
                if progressed || writeTimerDeadline == nil {
                    let deadline = DispatchTime.now() + configuration.writeTimeoutSeconds
                    writeTimerDeadline = deadline
                    scheduleWriteTimer(deadline)
                }
                if !writeSourceActive {
                    writeSourceActive = true
                    writeSource?.resume()
                }
                return
            } catch {
                logger.debug("write failed: \(error)")
                pendingActions.append(contentsOf: stateMachine.writeFailed())
                return
            }
        }
        if writeSourceActive {
            writeSourceActive = false
            writeSource?.suspend()
        }
        writeTimerDeadline = nil  // a later firing finds nothing armed and does nothing
    }

    /// Makes the read timer fire no later than `deadline`, touching the Dispatch timer only to bring it forward.
    private func scheduleReadTimer(_ deadline: DispatchTime) {
        if let scheduled = readTimerScheduled, scheduled <= deadline { return }
        readTimerScheduled = deadline
        readTimer?.schedule(deadline: deadline)
    }

    /// Makes the write timer fire no later than `deadline`, touching the Dispatch timer only to bring it forward.
    private func scheduleWriteTimer(_ deadline: DispatchTime) {
        if let scheduled = writeTimerScheduled, scheduled <= deadline { return }
        writeTimerScheduled = deadline
        writeTimer?.schedule(deadline: deadline)
    }

    /// Cancels the sources; the fd is closed when both cancellations have completed (Dispatch requires it).
    private func closeNow() {
        dispatchPrecondition(condition: .onQueue(queue))
        guard !closed else { return }
        closed = true
        writeQueue.removeAll()
        cancelCallbacks = []
        readTimer?.cancel()
        writeTimer?.cancel()
        readTimer = nil
        writeTimer = nil
        guard let readSource, let writeSource else {
            closeDescriptor(fd)
            onClose(self)
            return
        }
        // A suspended source never delivers its cancellation: resume first.
        if readSuspended { readSuspended = false; readSource.resume() }
        if !writeSourceActive { writeSourceActive = true; writeSource.resume() }
        readSource.cancel()
        writeSource.cancel()
        onClose(self)
    }

    private func sourceCancelled() {
        dispatchPrecondition(condition: .onQueue(queue))
        sourcesToCancel -= 1
        if sourcesToCancel == 0 {
            closeDescriptor(fd)
            readSource = nil  // breaks the cycle connection -> source -> handler -> connection
            writeSource = nil
        }
    }

    // MARK: - Sink calls (on queue)

    fileprivate func sinkHead(_ head: HTTPResponseHead, bodyLength: Int?, exchange: UInt64) {
        dispatchPrecondition(condition: .onQueue(queue))
        run(stateMachine.responseHead(head, bodyLength: bodyLength, exchange: exchange, date: HTTPDateCache.shared.current()))
    }

    fileprivate func sinkBody(_ chunk: [UInt8], exchange: UInt64) {
        dispatchPrecondition(condition: .onQueue(queue))
        run(stateMachine.responseBody(chunk, exchange: exchange))
    }

    fileprivate func sinkEnd(exchange: UInt64) {
        dispatchPrecondition(condition: .onQueue(queue))
        run(stateMachine.responseEnd(exchange: exchange))
    }

    fileprivate func sinkRespond(_ head: HTTPResponseHead, body: [UInt8], exchange: UInt64) {
        dispatchPrecondition(condition: .onQueue(queue))
        run(stateMachine.respond(head, body: body, exchange: exchange, date: HTTPDateCache.shared.current()))
    }

    fileprivate func sinkAbort(exchange: UInt64) {
        dispatchPrecondition(condition: .onQueue(queue))
        run(stateMachine.abort(exchange: exchange))
    }

    fileprivate func sinkOnCancel(_ callback: @escaping @Sendable () -> Void, exchange: UInt64) {
        dispatchPrecondition(condition: .onQueue(queue))
        switch stateMachine.registerCancel(exchange: exchange) {
        case .store: cancelCallbacks.append(callback)
        case .runNow: callback()
        case .drop: break
        }
    }
}

/// The `ResponseSink` of one exchange on one connection. Holds no state of its own: every call goes to the
/// connection's queue (at once when already there), tagged with the exchange id.
final class ConnectionResponseSink: ResponseSink, @unchecked Sendable {
    private let connection: Connection
    private let exchange: UInt64

    init(connection: Connection, exchange: UInt64) {
        self.connection = connection
        self.exchange = exchange
    }

    func head(_ head: HTTPResponseHead, bodyLength: Int?) {
        let connection = connection, exchange = exchange
        connection.onQueue { connection.sinkHead(head, bodyLength: bodyLength, exchange: exchange) }
    }

    func body(_ chunk: [UInt8]) {
        let connection = connection, exchange = exchange
        connection.onQueue { connection.sinkBody(chunk, exchange: exchange) }
    }

    func end() {
        let connection = connection, exchange = exchange
        connection.onQueue { connection.sinkEnd(exchange: exchange) }
    }

    func respond(_ head: HTTPResponseHead, body: [UInt8]) {
        let connection = connection, exchange = exchange
        connection.onQueue { connection.sinkRespond(head, body: body, exchange: exchange) }
    }

    func abort() {
        let connection = connection, exchange = exchange
        connection.onQueue { connection.sinkAbort(exchange: exchange) }
    }

    func onCancel(_ callback: @escaping @Sendable () -> Void) {
        let connection = connection, exchange = exchange
        connection.onQueue { connection.sinkOnCancel(callback, exchange: exchange) }
    }
}
