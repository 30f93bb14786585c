// The fleet tier's client: one thread, `icd.fleet`, owns the sockets to every memcached server, the requests waiting
// for answers, their deadlines, the breakers and the held leases (as CurlMulti's thread owns curl's multi handle).
// This file is the thread: its inbox, its loop, its timers and its end; FleetClient+Connections.swift opens, feeds and
// closes the connections, resolves the servers' names and applies settings; FleetClient+Operations.swift holds the
// operations' request flows.
//
// Data model: `links` are the configured servers in ring order (FleetLink: address, breaker, a control and a bulk
// connection, counters); `retired` are servers a reload removed, kept until their connections are idle.
// `resolutions` numbers the names' resolutions (FleetLink.address holds the one out).
// `connections` maps epoll tokens (connection ids, from 1; 0 is the eventfd) to connections. `timers` is a min-heap
// of deadlines in monotonic milliseconds: each request's deadline, each open breaker's probe time, the next lease
// refresh; epoll_wait sleeps until the earliest. `held` are the leases won and not yet stored or released.
// `counters` are the tier-wide stats; `published` is the copy `stats()` reads.
//
// Ownership: everything under "owned by the fleet thread" is touched only on that thread (and by `init` before it
// starts). Other threads post `Command`s into `inbox` (a Locked list) and write the eventfd when the thread has not
// been woken for the inbox yet; the eventfd is written only under the inbox lock while the inbox is open, and both
// descriptors are closed in deinit, so a write never meets a closed descriptor. Completions and observer events are
// collected in `ready` while the thread works and run at the end of its turn, after `published` is updated and with
// no lock held: a completion sees stats that include its own operation, and may call into the tier (its command is
// taken at the next turn). The fleet thread never blocks but in epoll_wait: a server's name is resolved on a thread
// of its own (FleetResolver), whose answer comes back through the inbox as a command (`resolved`).
//
// The loop: epoll_wait -> socket events (connect done, reads: at most 1 MiB per connection per turn, so a bulk
// transfer never starves the others; writes) -> the inbox's commands -> due timers -> flush the connections that got
// bytes to send (one send for a turn's pipelined requests) -> publish stats -> run completions.
//
// Failures: a missed deadline, a socket error, a protocol error or an answer that desyncs the stream closes that
// connection, fails every request pending on it (`.unavailable`) and counts one failure on its server's breaker (a
// failed connect also looks a server's name up again). A name that does not resolve opens its breaker at once; each
// probe looks it up again first. A connection the server closed while nothing was pending is just closed.
//
// Teardown: `shutdown()` posts the last command and closes the inbox; the thread fails what is pending, closes every
// socket, runs the last completions and exits; `shutdown()` joins it (unless called on the thread itself: then the
// thread detaches itself). Before `start()` there is no thread: `shutdown()` fails the queued commands on the
// caller's thread. Commands posted after the shutdown are answered `.unavailable` on the caller's thread.

#if canImport(Glibc)
internal import Glibc
#endif
internal import CEpoll
internal import ImageCacheSystem
internal import Logging
internal import Synchronization

/// What the fleet thread reports besides completions (tests and logs wait on these instead of the clock).
package enum FleetEvent: Sendable, Equatable {
    /// A server's breaker changed state.
    case serverState(server: String, state: FleetStats.ServerState)
    /// A server's `stats settings` answered its `item_size_max`.
    case itemSizeMax(server: String, bytes: Int)
    /// A held lease was refreshed (`kept`), or found lost.
    case leaseRefreshed(key: String, kept: Bool)
    /// A server's name was resolved (`address`: the numeric host), or did not resolve (nil).
    case nameResolved(server: String, address: String?)
}

/// The fleet thread and everything it owns. Confined to the fleet thread, except the inbox and the published stats.
final class FleetClient: @unchecked Sendable {
    enum Command {
        case lookup(String, @Sendable (FleetLookup) -> Void)
        case store(FleetLease, [UInt8], UInt32, Int, @Sendable (FleetStoreResult) -> Void)
        case release(FleetLease)
        case delete(String, UInt64?, (@Sendable (Bool) -> Void)?)
        case append(String, [UInt8], Int, @Sendable (Int, Int) -> Void)
        case readLog(String, @Sendable ([FleetLogRead]) -> Void)
        case reload(FleetSettings)
        /// A resolution of `server`'s name answered (`token`: the one FleetLink.address waits for).
        case resolved(FleetServer, token: UInt64, Result<SocketAddress, ResolveError>)
        case shutdown
    }

    private struct Inbox {
        var commands: [Command] = []
        /// The eventfd was written for commands not taken yet.
        var woken = false
        var started = false
        var closed = false
        /// Someone waits in pthread_join for the thread (false: it detaches itself when it exits).
        var joined = false
    }

    enum Timer {
        case deadline(connection: UInt64, serial: UInt64)
        case probe(FleetLink)
        case refresh
    }

    private static let wakeToken: UInt64 = 0
    private static let maxEvents: Int32 = 64
    private static let readBufferBytes = 256 << 10
    /// Most bytes read from one connection per turn.
    private static let readBudgetBytes = 1 << 20

    // MARK: immutable
    let logger: Logger
    private let observer: (@Sendable (FleetEvent) -> Void)?
    let resolver: FleetResolver
    /// -1 when they could not be made: then the tier answers everything `.unavailable`.
    let epollFD: Int32
    private let wakeFD: Int32

    // MARK: shared, guarded by their locks
    private let inbox = Locked(Inbox())
    private let published: Locked<FleetStats>
    private let thread = Locked<pthread_t?>(nil)

    // MARK: shared, atomic
    /// The fleet thread's pthread_t once it runs (0 before and after).
    private let threadID = Atomic<UInt>(0)

    // MARK: owned by the fleet thread
    var settings: FleetSettings
    var ring: FleetRing
    var links: [FleetLink] = []
    var retired: [FleetLink] = []
    var held: [ObjectIdentifier: HeldLease] = [:]
    var counters = FleetStats()
    var connections: [UInt64: FleetConnection] = [:]
    var timers = DeadlineHeap<Timer>()
    var refreshScheduled = false
    var resolutions: UInt64 = 0
    private var dirty: [FleetConnection] = []
    private var ready: [() -> Void] = []
    var nextConnectionID: UInt64 = 1
    private var events: [epoll_event]
    private let readBuffer: UnsafeMutableRawBufferPointer

    init(settings: FleetSettings, logger: Logger, observer: (@Sendable (FleetEvent) -> Void)?,
         resolve: @escaping SocketAddress.Resolver = SocketAddress.resolve) {
        self.settings = settings
        self.logger = logger
        self.observer = observer
        resolver = FleetResolver(resolve: resolve)
        ring = FleetRing(servers: [])
        var stats = FleetStats()
        stats.servers = settings.servers.map { FleetStats.Server(address: $0.description, state: .up, itemSizeMax: nil) }
        published = Locked(stats)
        events = Array(repeating: epoll_event(), count: Int(Self.maxEvents))
        readBuffer = .allocate(byteCount: Self.readBufferBytes, alignment: 16)
        let epollFD = epoll_create1(Int32(EPOLL_CLOEXEC))
        let wakeFD = epollFD >= 0 ? eventfd(0, Int32(EFD_CLOEXEC | EFD_NONBLOCK)) : -1
        var event = epoll_event()
        event.events = EPOLLIN.rawValue  // level-triggered: the thread reads the eventfd back to zero
        event.data.u64 = Self.wakeToken
        if wakeFD >= 0, epoll_ctl(epollFD, EPOLL_CTL_ADD, wakeFD, &event) == 0 {
            self.epollFD = epollFD
            self.wakeFD = wakeFD
        } else {
            logger.error("fleet tier: cannot make its epoll and eventfd descriptors; every operation answers unavailable",
                         metadata: ["errno": "\(errno)"])
            if wakeFD >= 0 { closeDescriptor(wakeFD) }
            if epollFD >= 0 { closeDescriptor(epollFD) }
            self.epollFD = -1
            self.wakeFD = -1
        }
    }

    deinit {
        if wakeFD >= 0 { closeDescriptor(wakeFD) }
        if epollFD >= 0 { closeDescriptor(epollFD) }
        readBuffer.deallocate()
    }

    // MARK: - Any thread

    func start() {
        let start = inbox.withLock { inbox -> Bool in
            guard !inbox.started, !inbox.closed, epollFD >= 0 else { return false }
            inbox.started = true
            // Commands posted before the start (a reload, a lookup) wake the thread's first wait.
            if !inbox.commands.isEmpty, !inbox.woken {
                inbox.woken = true
                _ = eventfd_write(wakeFD, 1)
            }
            return true
        }
        guard start else { return }
        let handle: UInt
        do {
            handle = try startThread(detached: false) { [self] in run() }  // holds the client until the thread exits
        } catch {
            logger.error("fleet tier: cannot start its thread; every operation answers unavailable",
                         metadata: ["errno": "\(error.errno)"])
            let queued = inbox.withLock { inbox -> [Command] in
                inbox.started = false
                inbox.closed = true
                defer { inbox.commands = [] }
                return inbox.commands
            }
            Self.refuse(queued, reason: "the fleet tier has no thread")
            return
        }
        thread.withLock { $0 = pthread_t(handle) }
    }

    /// Posts `command`; false (and nothing posted) once the client is shut down.
    func post(_ command: Command) {
        let posted = inbox.withLock { inbox -> Bool in
            guard !inbox.closed, epollFD >= 0 else { return false }
            inbox.commands.append(command)
            if inbox.started, !inbox.woken {
                inbox.woken = true
                _ = eventfd_write(wakeFD, 1)
            }
            return true
        }
        if !posted { Self.refuse([command], reason: "the fleet tier is shut down") }
    }

    func shutdown() {
        let onThread = threadID.load(ordering: .relaxed) == UInt(pthread_self())
        let (closedNow, started, queued) = inbox.withLock { inbox -> (Bool, Bool, [Command]) in
            guard !inbox.closed else { return (false, false, []) }
            inbox.closed = true
            guard inbox.started else {
                defer { inbox.commands = [] }
                return (true, false, inbox.commands)
            }
            inbox.commands.append(.shutdown)
            inbox.joined = !onThread
            _ = eventfd_write(wakeFD, 1)
            return (true, true, [])
        }
        guard closedNow else { return }
        guard started else {
            Self.refuse(queued, reason: "the fleet tier is shut down")
            return
        }
        if !onThread, let handle = thread.withLock({ $0 }) {
            pthread_join(handle, nil)
        }
    }

    func stats() -> FleetStats { published.withLock { $0 } }

    /// Answers commands that will never reach the thread, on the caller's thread.
    private static func refuse(_ commands: [Command], reason: String) {
        for command in commands {
            switch command {
            case let .lookup(_, completion): completion(.unavailable(reason: reason))
            case let .store(_, _, _, _, completion): completion(.unavailable(reason: reason))
            case let .delete(_, _, completion): completion?(false)
            case let .append(_, _, _, completion): completion(0, 0)
            case let .readLog(_, completion): completion([])
            case .release, .reload, .resolved, .shutdown: break
            }
        }
    }

    // MARK: - The fleet thread

    private func run() {
        threadID.store(UInt(pthread_self()), ordering: .relaxed)
        nameThisThread("icd.fleet")
        apply(settings)
        var exiting = false
        while !exiting {
            let count = events.withUnsafeMutableBufferPointer { buffer in
                epoll_wait(epollFD, buffer.baseAddress, Self.maxEvents, sleepMilliseconds())
            }
            for index in 0..<max(0, Int(count)) { handle(events[index]) }
            exiting = runCommands()
            fireTimers()
            flushDirty()
            finishTurn()
        }
        tearDown()
        finishTurn()
        threadID.store(0, ordering: .relaxed)
        let joined = inbox.withLock { $0.joined }
        if !joined { pthread_detach(pthread_self()) }
    }

    private func sleepMilliseconds() -> Int32 {
        guard let next = timers.nextDeadline else { return -1 }
        let now = Self.milliseconds()
        return next <= now ? 0 : Int32(clamping: next - now)
    }

    static func milliseconds() -> UInt64 { FleetClock.nanoseconds() / 1_000_000 }
    static func seconds() -> Double { Double(FleetClock.nanoseconds()) / 1e9 }

    /// Takes the posted commands and carries them out; true after the shutdown command.
    private func runCommands() -> Bool {
        let commands = inbox.withLock { inbox in
            inbox.woken = false
            defer { inbox.commands = [] }
            return inbox.commands
        }
        for command in commands {
            switch command {
            case let .lookup(key, completion):
                counters.lookups += 1
                lookup(LookupJob(key: key, completion: completion))
            case let .store(lease, value, flags, ttl, completion):
                store(lease, value: value, flags: flags, ttlSeconds: ttl, completion: completion)
            case let .release(lease):
                release(lease)
            case let .delete(key, cas, completion):
                delete(key, cas: cas, completion: completion)
            case let .append(name, line, ttl, completion):
                appendToLog(name, line: line, createTTLSeconds: ttl, completion: completion)
            case let .readLog(name, completion):
                readLog(name, completion: completion)
            case let .reload(settings):
                apply(settings)
            case let .resolved(server, token, result):
                resolved(server, token: token, result)
            case .shutdown:
                return true
            }
        }
        return false
    }

    private func handle(_ event: epoll_event) {
        let token = event.data.u64
        if token == Self.wakeToken {
            var value: eventfd_t = 0
            _ = eventfd_read(wakeFD, &value)
            return
        }
        guard let connection = connections[token] else { return }  // closed meanwhile
        let flags = event.events
        if connection.phase == .connecting {
            guard flags & (EPOLLOUT.rawValue | EPOLLERR.rawValue | EPOLLHUP.rawValue) != 0 else { return }
            let error = connection.finishConnect()
            guard error == 0 else {
                fail(connection, reason: "connect: \(String(cString: strerror(error)))")
                return
            }
            markDirty(connection)
            return
        }
        if flags & EPOLLOUT.rawValue != 0 { flush(connection) }
        if flags & (EPOLLIN.rawValue | EPOLLHUP.rawValue | EPOLLERR.rawValue) != 0, !connection.isClosed {
            receive(connection)
        }
    }

    private func receive(_ connection: FleetConnection) {
        var budget = Self.readBudgetBytes
        while budget > 0, !connection.isClosed {
            let count: Int?
            do {
                count = try connection.receive(into: UnsafeMutableRawBufferPointer(rebasing: readBuffer[0..<min(readBuffer.count, budget)]))
            } catch {
                fail(connection, reason: error.description)
                return
            }
            guard let count else { return }  // nothing more now
            guard count > 0 else {
                if connection.hasPending {
                    fail(connection, reason: "closed by the server")
                } else {
                    close(connection)
                }
                return
            }
            budget -= count
            connection.link.counters.bytesRead += UInt64(count)
            let responses: [MetaResponse]
            do {
                responses = try connection.parser.feed(UnsafeRawBufferPointer(rebasing: readBuffer[0..<count]))
            } catch {
                fail(connection, reason: error.description)
                return
            }
            for response in responses {
                guard !connection.isClosed else { return }
                deliver(response, on: connection)
            }
        }
    }

    func markDirty(_ connection: FleetConnection) {
        guard !connection.isDirty else { return }
        connection.isDirty = true
        dirty.append(connection)
    }

    private func flushDirty() {
        let connections = dirty
        dirty = []
        for connection in connections {
            connection.isDirty = false
            if connection.phase == .open { flush(connection) }
        }
    }

    private func flush(_ connection: FleetConnection) {
        do {
            let (written, drained) = try connection.flush()
            connection.link.counters.bytesWritten += UInt64(written)
            watchWrite(connection, !drained)
        } catch {
            fail(connection, reason: error.description)
        }
    }

    private func watchWrite(_ connection: FleetConnection, _ write: Bool) {
        guard connection.watchingWrite != write else { return }
        connection.watchingWrite = write
        var event = epoll_event()
        event.events = EPOLLIN.rawValue | (write ? EPOLLOUT.rawValue : 0)
        event.data.u64 = connection.id
        _ = epoll_ctl(epollFD, EPOLL_CTL_MOD, connection.fd, &event)
    }

    private func fireTimers() {
        let now = Self.milliseconds()
        while let timer = timers.popDue(now: now) {
            switch timer {
            case let .deadline(id, serial):
                guard let connection = connections[id], connection.isPending(serial: serial) else { continue }
                connection.link.counters.timeouts += 1
                fail(connection, reason: "no answer within the deadline")
            case let .probe(link):
                probe(link)
            case .refresh:
                refreshScheduled = false
                refreshLeases()
                scheduleRefresh()
            }
        }
    }

    /// Publishes the stats, then runs the turn's completions and events (no lock held).
    private func finishTurn() {
        var stats = counters
        stats.servers = links.map(\.stats)
        stats.leasesHeld = held.count
        published.withLock { $0 = stats }
        let work = ready
        ready = []
        for item in work { item() }
    }

    /// Queues a completion (or an event) for the end of the turn.
    func later(_ body: @escaping () -> Void) { ready.append(body) }

    func emit(_ event: FleetEvent) {
        guard let observer else { return }
        ready.append { observer(event) }
    }

    private func tearDown() {
        for connection in Array(connections.values) {
            let requests = connection.takePending()
            close(connection)
            for request in requests { failed(request.work, reason: "the fleet tier shut down") }
        }
        for record in held.values { record.ended = true }
        held = [:]
        timers.removeAll()
        let late = inbox.withLock { inbox in
            defer { inbox.commands = [] }
            return inbox.commands
        }
        for command in late {
            switch command {
            case let .lookup(_, completion): later { completion(.unavailable(reason: "the fleet tier shut down")) }
            case let .store(_, _, _, _, completion): later { completion(.unavailable(reason: "the fleet tier shut down")) }
            case let .delete(_, _, completion): later { completion?(false) }
            case let .append(_, _, _, completion): later { completion(0, 0) }
            case let .readLog(_, completion): later { completion([]) }
            case .release, .reload, .resolved, .shutdown: break
            }
        }
    }
}
