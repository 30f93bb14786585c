// The fleet thread's connections and settings (FleetClient.swift owns them; this is the same owner, on the same
// thread): opening a server's control or bulk connection (a control connection asks `stats settings` first), queueing
// a request with its deadline, closing a connection after a failure (every pending request answered unavailable, one
// failure on the breaker) or quietly (idle, retired, the tier's end), what a breaker transition calls for (a log line,
// a count, the probe's timer, an event), and putting new settings in force (a new ring; links kept for servers still
// listed, made for new ones, retired for the others).

#if canImport(Glibc)
internal import Glibc
#endif
internal import CEpoll
internal import Logging

extension FleetClient {
    // MARK: - Settings

    /// Puts `new` in force: a new ring; links kept for servers still listed (their connections, breaker and leases),
    /// made (resolved, their control connection opened for `stats settings`) for new ones, retired for the others.
    func apply(_ new: FleetSettings) {
        settings = new
        var servers: [FleetServer] = []
        for server in new.servers where !servers.contains(server) { servers.append(server) }
        var known: [FleetServer: FleetLink] = [:]
        for link in links + retired { known[link.server] = link }
        var fresh: [FleetLink] = []
        links = servers.map { server in
            if let link = known.removeValue(forKey: server) {
                link.retired = false
                return link
            }
            let link = FleetLink(server: server, settings: new)
            fresh.append(link)
            return link
        }
        retired = Array(known.values)
        for link in links + retired {
            link.breaker.failuresToOpen = max(1, new.breakerFailures)
            link.breaker.openSeconds = new.breakerOpenSeconds
        }
        ring = FleetRing(servers: servers)
        for link in retired where !link.retired {
            link.retired = true
            logger.info("fleet server removed from the ring: its connections close once idle",
                        metadata: ["server": "\(link.server)"])
        }
        closeIdle()
        for link in fresh {
            switch link.address {
            case .success:
                _ = connection(link, .control)  // asks `stats settings` first
            case let .failure(error):
                logger.error("fleet server cannot be resolved: its keys are local-only",
                             metadata: ["server": "\(link.server)", "error": "\(error)"])
            }
        }
    }

    /// Closes the idle connections of retired servers and forgets those with none left.
    func closeIdle() {
        for link in retired {
            for connection in [link.control, link.bulk].compactMap({ $0 }) where !connection.hasPending {
                close(connection)
            }
        }
        retired.removeAll { $0.control == nil && $0.bulk == nil }
    }

    // MARK: - Connections

    /// The link's connection for `role`, opened now if it has none (a control connection asks `stats settings`
    /// first). Nil when it cannot be opened (the failure is counted).
    func connection(_ link: FleetLink, _ role: FleetConnection.Role) -> FleetConnection? {
        if let existing = link.connection(role) { return existing }
        let address: SocketAddress
        switch link.address {
        case let .success(resolved): address = resolved
        case .failure: return nil
        }
        let connection: FleetConnection
        do {
            connection = try FleetConnection(id: nextConnectionID, role: role, link: link, address: address,
                                             maxValueBytes: link.itemSizeMax ?? MetaResponseParser.defaultMaxValueBytes)
        } catch {
            logger.info("fleet connection failed", metadata: ["server": "\(link.server)", "role": "\(role)", "error": "\(error)"])
            countFailure(link)
            return nil
        }
        nextConnectionID += 1
        var event = epoll_event()
        event.events = EPOLLIN.rawValue | EPOLLOUT.rawValue
        event.data.u64 = connection.id
        guard epoll_ctl(epollFD, EPOLL_CTL_ADD, connection.fd, &event) == 0 else {
            logger.error("fleet connection cannot be watched", metadata: ["server": "\(link.server)", "errno": "\(errno)"])
            connection.close()
            countFailure(link)
            return nil
        }
        connections[connection.id] = connection
        link.setConnection(connection, role)
        if role == .control {
            let serial = connection.enqueue(.statsSettings, expects: .stats, parts: [MetaRequest.statsSettings])
            schedule(deadlineSeconds: settings.deadlineSeconds, for: connection, serial: serial)
        }
        return connection
    }

    /// Queues a request on the link's `role` connection (opened if needed) with the deadline of an operation moving
    /// `valueBytes`. False when no connection could be opened (the caller answers unavailable).
    func send(_ work: FleetWork, on link: FleetLink, _ role: FleetConnection.Role, valueBytes: Int = 0,
              expects: FleetConnection.Expectation? = nil, request: (UInt32) -> [[UInt8]]) -> Bool {
        guard let connection = connection(link, role) else { return false }
        let opaque = connection.takeOpaque()
        let serial = connection.enqueue(work, expects: expects ?? .opaque(opaque), parts: request(opaque))
        schedule(deadlineSeconds: settings.deadline(forValueBytes: valueBytes), for: connection, serial: serial)
        link.counters.operations += 1
        markDirty(connection)
        return true
    }

    /// A request's deadline: its own time from when the requests before it on the connection are due (answers come
    /// in order), so only the first one out measures the server.
    private func schedule(deadlineSeconds: Double, for connection: FleetConnection, serial: UInt64) {
        let start = max(Self.milliseconds(), connection.lastDeadline)
        let deadline = start + UInt64(max(1, (deadlineSeconds * 1000).rounded(.up)))
        connection.lastDeadline = deadline
        timers.insert(.deadline(connection: connection.id, serial: serial), at: deadline)
    }

    func schedule(probeOf link: FleetLink, at seconds: Double) {
        let milliseconds = UInt64(max(0, (seconds * 1000).rounded(.up)))
        timers.insert(.probe(link), at: milliseconds)
    }

    func scheduleRefresh() {
        guard !refreshScheduled, !held.isEmpty else { return }
        refreshScheduled = true
        let interval = UInt64(max(100, settings.leaseSeconds * 1000 / 3))
        timers.insert(.refresh, at: Self.milliseconds() + interval)
    }

    /// Closes `connection` after a failure: every pending request is answered unavailable, and its server's breaker
    /// counts one failure.
    func fail(_ connection: FleetConnection, reason: String) {
        guard !connection.isClosed else { return }
        let link = connection.link
        let requests = connection.takePending()
        close(connection)
        logger.info("fleet connection failed",
                    metadata: ["server": "\(link.server)", "role": "\(connection.role)", "reason": "\(reason)",
                               "pending": "\(requests.count)"])
        countFailure(link)
        for request in requests { failed(request.work, reason: "\(link.server): \(reason)") }
    }

    /// Closes `connection` without counting a failure (idle, retired, or the tier's end).
    func close(_ connection: FleetConnection) {
        guard !connection.isClosed else { return }
        if connections.removeValue(forKey: connection.id) != nil {
            var event = epoll_event()
            _ = epoll_ctl(epollFD, EPOLL_CTL_DEL, connection.fd, &event)
        }
        if connection.link.connection(connection.role) === connection {
            connection.link.setConnection(nil, connection.role)
        }
        connection.close()
    }

    private func countFailure(_ link: FleetLink) {
        link.counters.failures += 1
        apply(link.breaker.recordFailure(now: Self.seconds()), to: link)
    }

    /// Logs, counts and schedules what a breaker transition calls for.
    func apply(_ transition: FleetBreaker.Transition, to link: FleetLink) {
        switch transition {
        case .none:
            return
        case let .opened(until):
            link.counters.breakerOpens += 1
            logger.warning("fleet server is down: its keys are local-only until a probe answers",
                           metadata: ["server": "\(link.server)", "seconds": "\(settings.breakerOpenSeconds)"])
            schedule(probeOf: link, at: until)
            emit(.serverState(server: link.server.description, state: .down))
        case .closed:
            logger.notice("fleet server answers again", metadata: ["server": "\(link.server)"])
            emit(.serverState(server: link.server.description, state: .up))
        }
    }
}
