// Event loops: one thread each, sleeping in `epoll_wait` itself (nginx's workers, SwiftNIO's SelectableEventLoop).
//
// Why a thread of its own and not Dispatch: the loops used to be serial queues woken by a `DispatchSourceRead` on
// their epoll fd. On Linux libdispatch watches every source from its manager thread, so each batch of ready
// connections cost two wake-ups (kernel -> manager thread -> a pool worker) where nginx pays one (kernel -> the
// worker asleep in epoll_wait). The CPU per request was the same as nginx's, but in bench/ the machine sat 8-10%
// idle during our runs (0.2% during nginx's): with 64 connections there is always work, and the second hop was the
// gap, measured as requests per second lost. Now each loop's thread blocks in `epoll_wait` until a socket is
// ready, a task is posted or the next tick is due; Dispatch still drives the listener, the proxy, the disk and
// the signal handling. (Not one Dispatch source per connection either: libdispatch re-arms each source after an
// event through that same manager thread; that was a quarter of the CPU on the memory-hit path.)
//
// Ownership: everything under "owned by the loop thread" is touched only on the loop's thread: the epoll fd's
// registrations, the registry of connections, the event buffer and the tick deadline. Other threads hand work to
// the loop with `execute`, which appends to the Mutex-guarded `inbox` and writes the loop's eventfd only when the
// loop has not been woken for the inbox yet (one write per batch of posted tasks, as NIO does). A connection's
// thread IS its loop's thread (connections are spread round-robin by the listener), so the hot path never hops and
// a sink call from another queue hops with `execute`, which keeps the order of tasks posted from one thread.
//
// Edge-triggered contract (what `Connection` does with an event): it reads until EAGAIN (or until it suspends
// reading, after which it retries a read when resuming), and it flushes its write queue when EPOLLOUT comes while
// bytes wait. An event for a connection that has closed meanwhile is dropped (events carry the connection id;
// id 0 is the loop's eventfd).
//
// CPU affinity (`server.cpu-affinity`, default auto): the listener makes one loop per CPU the daemon may use and
// pins loop i to the i-th of them (nginx's `worker_cpu_affinity auto`). Unpinned, the kernel moved the loops between
// the two CPUs of the bench machine and at times put both on one while the other sat idle: 1.5-6% of the machine was
// idle during our runs (0.2-0.6% pinned), and in runs taken in turns pinning served more requests per second with a
// lower p99 on both corpora (bench/results/2026-11-21-cpu-affinity.md). Off, the kernel places them.
//
// Yielding: a loop that has worked for 1.5 ms without sleeping (`yieldAfterNanoseconds`, the kernel's default EEVDF
// slice on two CPUs) calls `sched_yield` between two turns. imagecached serves programs on the same machine, so its
// clients share its CPUs: with 64 connections a loop always has work and never sleeps, and a client waiting on that
// CPU to read its responses then waited for the scheduler tick (4 ms at HZ=250) or longer. `perf sched` during a
// bench load showed loops running up to 8 ms at a stretch; yielding bounded their runs to under 3 ms, wrk's p99 wait
// for a CPU fell from 2.9 to 1.6 ms, and the thumbnails' p99 from about 6.5 to 4 ms with the same requests/s
// (bench/results/2026-11-21-cpu-affinity.md). With nothing else runnable on the CPU, `sched_yield` returns at once.
//
// Timeouts: every 250 ms (`tickNanoseconds`) the loop asks each connection to check its deadlines (the epoll_wait
// timeout is the time left until then), so a timeout fires between 0 and 250 ms after its deadline.
//
// Stopping: `stop` posts a last task; the thread runs what was posted before it and exits (the epoll fd and the
// eventfd are closed when the last reference goes). Tasks posted after `stop` are released unrun: the listener
// stops the loops only after every connection has closed, so what comes later are late answers for closed
// connections.

internal import ImageCacheSystem
#if canImport(Glibc)
internal import Glibc
#endif
internal import CEpoll
internal import Dispatch
internal import Synchronization

/// One event loop: a thread of its own, an epoll fd and an eventfd.
final class EventLoop: SinkExecutor, @unchecked Sendable {
    /// How often deadlines are checked (250 ms): the granularity of every connection timeout.
    static let tickNanoseconds: UInt64 = 250_000_000
    /// A loop that has worked this long without sleeping yields the CPU between two turns (see "Yielding" above).
    static let yieldAfterNanoseconds: UInt64 = 1_500_000
    /// An `epoll_wait` that took this long slept (one that finds events ready returns in a microsecond or two).
    private static let sleptNanoseconds: UInt64 = 20_000
    /// Most events taken from epoll per `epoll_wait` call.
    private static let maxEvents: Int32 = 64
    /// The epoll data of the eventfd (connection ids start at 1).
    private static let wakeToken: UInt64 = 0

    private struct Inbox {
        var tasks: [@Sendable () -> Void] = []
        /// The eventfd was written for tasks not taken yet: no further write needed.
        var woken = false
        /// The thread is exiting or gone: new tasks are dropped.
        var closed = false
    }

    // MARK: immutable
    /// `imagecached.loop.<index>`, in messages.
    let name: String
    /// The thread's name as ps, top and perf show it: `icd.loop.<index>` (Linux allows 15 bytes).
    private let threadName: String
    private let epollFD: Int32
    private let wakeFD: Int32

    // MARK: shared, guarded by inbox
    private let inbox = Locked(Inbox())

    // MARK: shared, atomic
    /// The loop thread's pthread_t (stored by `init` and by the thread itself; 0 once the thread has exited): `inLoop`
    /// compares it with pthread_self.
    private let thread = Atomic<UInt>(0)

    // MARK: owned by the loop thread
    private var connections: [UInt64: Connection] = [:]
    /// Tunnels' upstream sockets, by their token (the connection's id with `Tunnel.upstreamTokenBit` set).
    private var tunnels: [UInt64: Tunnel] = [:]
    private var events: [epoll_event]
    private var nextTick: UInt64 = 0
    private var stopping = false

    /// A new loop with its thread (`icd.loop.<index>`), running.
    init(index: Int) throws(SystemError) {
        name = "imagecached.loop.\(index)"
        threadName = "icd.loop.\(index)"
        epollFD = try syscall("epoll_create1") { epoll_create1(Int32(EPOLL_CLOEXEC)) }
        do {
            wakeFD = try syscall("eventfd") { eventfd(0, Int32(EFD_CLOEXEC | EFD_NONBLOCK)) }
        } catch {
            closeDescriptor(epollFD)
            throw error
        }
        events = Array(repeating: epoll_event(), count: Int(Self.maxEvents))
        var event = epoll_event()
        event.events = EPOLLIN.rawValue  // level-triggered: the loop reads the eventfd back to zero when it fires
        event.data.u64 = Self.wakeToken
        do {
            try syscall("epoll_ctl(ADD eventfd)") { epoll_ctl(epollFD, EPOLL_CTL_ADD, wakeFD, &event) }
        } catch {
            closeDescriptor(wakeFD)
            closeDescriptor(epollFD)
            throw error
        }
        // (A failure to make the thread fails the loop: never a loop that accepts connections and never reads them.)
        let thread: UInt
        do {
            thread = try startThread(detached: true) { [self] in run() }  // holds the loop until the thread exits
        } catch {
            closeDescriptor(wakeFD)
            closeDescriptor(epollFD)
            throw error
        }
        self.thread.store(thread, ordering: .relaxed)  // the thread stores the same value when it starts
    }

    /// Pins the loop's thread to `cpu` alone. Returns 0, or the errno value that says why it could not be done
    /// (the thread then runs wherever the kernel puts it). Call it right after `init`, before the loop has work.
    func pin(to cpu: Int32) -> Int32 {
        icd_pin_thread(pthread_t(thread.load(ordering: .relaxed)), cpu)
    }

    /// The CPUs this process may run on (its affinity mask), ascending; nil if the mask cannot be read.
    static func allowedCPUs() -> [Int32]? {
        let capacity = 1024
        var cpus = [Int32](repeating: 0, count: capacity)
        let count = cpus.withUnsafeMutableBufferPointer { icd_allowed_cpus($0.baseAddress, Int32(capacity)) }
        guard count > 0 else { return nil }
        return Array(cpus.prefix(Int(count)))
    }

    deinit {
        // Not when the thread exits: a thread that passed `execute`'s check may still write the eventfd, and it
        // holds this loop while it does.
        closeDescriptor(wakeFD)
        closeDescriptor(epollFD)
    }

    /// Whether the caller is running on this loop's thread.
    var inLoop: Bool { thread.load(ordering: .relaxed) == UInt(pthread_self()) }

    /// Traps unless called on the loop's thread (NIO's `assertInEventLoop`; `dispatchPrecondition` for a queue).
    func preconditionInLoop(file: StaticString = #fileID, line: UInt = #line) {
        precondition(inLoop, "not on \(name)", file: file, line: line)
    }

    /// Runs `task` on the loop's thread, after the tasks posted before it. From any thread, the loop's included
    /// (then it runs after the current event batch). Released unrun when posted after `stop`.
    func execute(_ task: @escaping @Sendable () -> Void) {
        let wake = inbox.withLock { inbox -> Bool in
            guard !inbox.closed else { return false }
            inbox.tasks.append(task)
            guard !inbox.woken else { return false }
            inbox.woken = true
            return true
        }
        if wake { _ = eventfd_write(wakeFD, 1) }
    }

    /// Ends the thread once the tasks posted before this call have run (the listener stopped; its connections are
    /// closed). The descriptors are closed when the last reference to the loop goes.
    func stop() {
        execute { self.stopping = true }
    }

    /// Watches `fd` for `connection` (edge-triggered). On the loop thread.
    func register(_ connection: Connection, fd: Int32) throws(SystemError) {
        try watch(fd, token: connection.id)
        connections[connection.id] = connection
    }

    /// Stops watching `fd` (call before closing it). On the loop thread.
    func deregister(_ connection: Connection, fd: Int32) {
        unwatch(fd)
        connections[connection.id] = nil
    }

    /// Watches a tunnel's upstream socket `fd` (edge-triggered). On the loop thread.
    func register(_ tunnel: Tunnel, fd: Int32) throws(SystemError) {
        try watch(fd, token: tunnel.token)
        tunnels[tunnel.token] = tunnel
    }

    /// Stops watching a tunnel's upstream socket (call before closing it). On the loop thread.
    func deregister(_ tunnel: Tunnel, fd: Int32) {
        unwatch(fd)
        tunnels[tunnel.token] = nil
    }

    /// Adds `fd` to the epoll set, edge-triggered for reads, writes and the peer's FIN, with `token` as its data.
    private func watch(_ fd: Int32, token: UInt64) throws(SystemError) {
        preconditionInLoop()
        var event = epoll_event()
        event.events = EPOLLIN.rawValue | EPOLLOUT.rawValue | EPOLLRDHUP.rawValue | EPOLLET.rawValue
        event.data.u64 = token
        try syscall("epoll_ctl(ADD)") { epoll_ctl(epollFD, EPOLL_CTL_ADD, fd, &event) }
    }

    private func unwatch(_ fd: Int32) {
        preconditionInLoop()
        var event = epoll_event()
        _ = epoll_ctl(epollFD, EPOLL_CTL_DEL, fd, &event)
    }

    // MARK: - The loop thread

    private func run() {
        thread.store(UInt(pthread_self()), ordering: .relaxed)
        nameThisThread(threadName)
        nextTick = DispatchTime.now().uptimeNanoseconds + Self.tickNanoseconds
        /// When the thread last came back from sleeping (in epoll_wait, or yielding): see "Yielding" above.
        var awakeSince = DispatchTime.now().uptimeNanoseconds
        while !stopping {
            let before = DispatchTime.now().uptimeNanoseconds
            let timeoutMS = before >= nextTick ? 0 : Int32((nextTick - before + 999_999) / 1_000_000)
            let count = events.withUnsafeMutableBufferPointer { buffer in
                epoll_wait(epollFD, buffer.baseAddress, Self.maxEvents, timeoutMS)
            }
            let after = DispatchTime.now().uptimeNanoseconds
            if after &- before >= Self.sleptNanoseconds { awakeSince = after }
            if count > 0 { handle(Int(count)) }
            runTasks()
            let end = DispatchTime.now().uptimeNanoseconds
            if end >= nextTick {
                checkDeadlines()
                nextTick = DispatchTime.now().uptimeNanoseconds + Self.tickNanoseconds
            }
            if end &- awakeSince >= Self.yieldAfterNanoseconds {
                sched_yield()
                awakeSince = DispatchTime.now().uptimeNanoseconds
            }
        }
        let late = inbox.withLock { inbox in
            inbox.closed = true
            defer { inbox.tasks = [] }
            return inbox.tasks
        }
        _ = late  // released here, unrun (see "Stopping" above)
        thread.store(0, ordering: .relaxed)
    }

    /// Lets each ready connection handle its events; resets the eventfd when it fired.
    private func handle(_ count: Int) {
        for i in 0..<count {
            let event = events[i]
            let token = event.data.u64
            if token == Self.wakeToken {
                var value: eventfd_t = 0
                _ = eventfd_read(wakeFD, &value)
                continue
            }
            let flags = event.events
            let readable = flags & (EPOLLIN.rawValue | EPOLLRDHUP.rawValue | EPOLLHUP.rawValue | EPOLLERR.rawValue) != 0
            let writable = flags & (EPOLLOUT.rawValue | EPOLLHUP.rawValue | EPOLLERR.rawValue) != 0
            // The peer's FIN (or a hang-up) is queued: a short read no longer means the socket is empty, since the
            // read that takes the last bytes does not see the end, and no new edge will announce it.
            let hungUp = flags & (EPOLLRDHUP.rawValue | EPOLLHUP.rawValue | EPOLLERR.rawValue) != 0
            if token & Tunnel.upstreamTokenBit != 0 {
                tunnels[token]?.upstreamReady(readable: readable, writable: writable, hungUp: hungUp)   // nil: closed meanwhile
                continue
            }
            guard let connection = connections[token] else { continue }  // closed meanwhile
            connection.ready(readable: readable, writable: writable, hungUp: hungUp)
        }
    }

    /// Runs the tasks posted so far (tasks they post run in the next turn, after the sockets had their say); none
    /// after the one posted by `stop`.
    private func runTasks() {
        let tasks = inbox.withLock { inbox in
            inbox.woken = false
            defer { inbox.tasks = [] }
            return inbox.tasks
        }
        for task in tasks {
            task()
            if stopping { return }  // the rest are released unrun
        }
    }

    private func checkDeadlines() {
        let now = DispatchTime.now()
        for connection in Array(connections.values) {
            connection.checkDeadlines(now: now)
        }
    }
}

/// How many CPUs this process may run on (its affinity mask, as the listener counts its loops); nil if the mask
/// cannot be read.
package func allowedCPUCount() -> Int? { EventLoop.allowedCPUs()?.count }
