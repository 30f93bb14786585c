// Event loops: Dispatch drives them, epoll multiplexes the connections.
//
// Why not one Dispatch read source per connection: on Linux, libdispatch re-arms a read source after each
// event through its manager thread (an eventfd write and a context switch per request). bench/profile on the
// memory-hit path put the manager thread at about 25% of imagecached's CPU and the eventfd writes at 11%.
// Here each loop is one serial queue (`imagecached.loop.<i>`) that owns one epoll fd, with its connections'
// sockets registered edge-triggered (EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET), and ONE `DispatchSourceRead` on
// that epoll fd. When the source fires, the loop drains `epoll_wait(fd, events, n, 0)` on its queue and runs each
// ready connection's read and write handling there: the re-arm is paid once per batch of ready connections, not
// once per request.
//
// Ownership: everything here is confined to `queue`: the epoll fd, the read source, the tick timer and the
// registry of connections. A connection's queue IS its loop's queue (connections are spread round-robin by the
// listener), so the hot path still never hops and sink calls from other queues still hop with `queue.async`.
//
// Edge-triggered contract (what `Connection` does with an event): it reads until EAGAIN (or until it suspends
// reading, after which it retries a read when resuming), and it flushes its write queue when EPOLLOUT comes while
// bytes wait. An event for a connection that has closed meanwhile is dropped (events carry the connection id).
//
// Timeouts: a per-loop coarse tick every 250 ms (`tickInterval`) asks each connection to check its deadlines,
// instead of a Dispatch timer per connection: a timeout fires between 0 and 250 ms after its deadline.

#if canImport(Glibc)
internal import Glibc
#endif
internal import CEpoll
internal import Dispatch
internal import Synchronization

/// One event loop. Confined to `queue`.
final class EventLoop: @unchecked Sendable {
    /// How often deadlines are checked: the granularity of every connection timeout.
    static let tickInterval: DispatchTimeInterval = .milliseconds(250)
    /// Most events taken from epoll per `epoll_wait` call.
    private static let maxEvents: Int32 = 64
    /// Marks each loop's queue with the loop's unique id, to recognise calls already on it.
    private static let queueKey = DispatchSpecificKey<Int>()
    private static let nextID = Atomic<Int>(1)

    // MARK: immutable
    /// Unique in the process (several listeners may run, e.g. in tests).
    let id: Int
    let queue: DispatchQueue
    private let epollFD: Int32

    // MARK: owned by queue
    private var source: (any DispatchSourceRead)?
    private var tick: (any DispatchSourceTimer)?
    private var connections: [UInt64: Connection] = [:]
    private var events: [epoll_event]

    /// A new loop named `imagecached.loop.<index>`.
    init(index: Int) throws(SystemError) {
        id = Self.nextID.wrappingAdd(1, ordering: .relaxed).oldValue
        queue = DispatchQueue(label: "imagecached.loop.\(index)")
        epollFD = try syscall("epoll_create1") { epoll_create1(Int32(EPOLL_CLOEXEC)) }
        events = Array(repeating: epoll_event(), count: Int(Self.maxEvents))
        queue.setSpecific(key: Self.queueKey, value: id)
        let fd = epollFD
        let source = DispatchSource.makeReadSource(fileDescriptor: fd, queue: queue)
        source.setEventHandler { [weak self] in self?.drain() }
        source.setCancelHandler { closeDescriptor(fd) }
        let tick = DispatchSource.makeTimerSource(queue: queue)
        tick.schedule(deadline: .now() + Self.tickInterval, repeating: Self.tickInterval, leeway: .milliseconds(50))
        tick.setEventHandler { [weak self] in self?.checkDeadlines() }
        self.source = source
        self.tick = tick
        source.resume()
        tick.resume()
    }

    deinit {
        tick?.cancel()
        source?.cancel()  // its cancel handler closes the epoll fd
    }

    /// Whether the caller is running on this loop's queue.
    var isOnQueue: Bool { DispatchQueue.getSpecific(key: Self.queueKey) == id }

    /// Stops the source and the tick and closes the epoll fd (the listener stopped; its connections are closed).
    func stop() {
        queue.async {
            self.tick?.cancel()
            self.source?.cancel()
            self.tick = nil
            self.source = nil
        }
    }

    /// Watches `fd` for `connection` (edge-triggered). On queue.
    func register(_ connection: Connection, fd: Int32) throws(SystemError) {
        dispatchPrecondition(condition: .onQueue(queue))
        var event = epoll_event()
        event.events = EPOLLIN.rawValue | EPOLLOUT.rawValue | EPOLLRDHUP.rawValue | EPOLLET.rawValue
        event.data.u64 = connection.id
        try syscall("epoll_ctl(ADD)") { epoll_ctl(epollFD, EPOLL_CTL_ADD, fd, &event) }
        connections[connection.id] = connection
    }

    /// Stops watching `fd` (call before closing it). On queue.
    func deregister(_ connection: Connection, fd: Int32) {
        dispatchPrecondition(condition: .onQueue(queue))
        var event = epoll_event()
        _ = epoll_ctl(epollFD, EPOLL_CTL_DEL, fd, &event)
        connections[connection.id] = nil
    }

    // MARK: - On queue

    /// Takes every ready event (non-blocking) and lets each connection handle its own.
    private func drain() {
        dispatchPrecondition(condition: .onQueue(queue))
        while true {
            let count = events.withUnsafeMutableBufferPointer { buffer in
                epoll_wait(epollFD, buffer.baseAddress, Self.maxEvents, 0)
            }
            if count < 0 {
                if errno == EINTR { continue }
                return
            }
            for i in 0..<Int(count) {
                let event = events[i]
                guard let connection = connections[event.data.u64] else { continue }  // closed meanwhile
                let flags = event.events
                let readable = flags & (EPOLLIN.rawValue | EPOLLRDHUP.rawValue | EPOLLHUP.rawValue | EPOLLERR.rawValue) != 0
                let writable = flags & (EPOLLOUT.rawValue | EPOLLHUP.rawValue | EPOLLERR.rawValue) != 0
                connection.ready(readable: readable, writable: writable)
            }
            if count < Self.maxEvents { return }
        }
    }

    private func checkDeadlines() {
        dispatchPrecondition(condition: .onQueue(queue))
        let now = DispatchTime.now()
        for connection in Array(connections.values) {
            connection.checkDeadlines(now: now)
        }
    }
}
