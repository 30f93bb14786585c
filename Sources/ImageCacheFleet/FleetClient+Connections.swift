// The fleet thread's connections and settings (FleetClient.swift owns them; this is the same owner, on the same
// thread): opening a server's control or bulk connection (a control connection asks `stats settings` first), queueing
// a request with its deadline, closing a connection after a failure (every pending request answered unavailable, one
// failure on the breaker; a failed connect also re-resolves a name) or quietly (idle, retired, the tier's end), what a
// breaker transition calls for (a log line, a count, the probe's timer, an event), resolving a server's name (off this
// thread: FleetResolver) and taking its answer, and putting new settings in force (a new ring; links kept for servers
// still listed, made for new ones, retired for the others).
//
// A name's life (FleetLink.address):
//   made (apply)            -> resolving -> resolved: the control connection opens (`stats settings`)
//                                        -> failed: unresolved, an outage on the breaker (open), logged once
//   a connect fails         -> resolving again (the previous address still used meanwhile); a new address is logged
//   the probe time, open    -> unresolved: resolving, and the `mn` goes out once it resolves (a failure reopens)
// Logged once per change (does not resolve / resolves again / a new address), never per retry.

#if canImport(Glibc)
internal import Glibc
#endif
internal import CEpoll
internal import Logging

extension FleetClient {
    // MARK: - Settings

    /// Puts `new` in force: a new ring; links kept for servers still listed (their connections, breaker and leases),
    /// made (resolved, their control connection opened for `stats settings`) for new ones, retired for the others.
    /// A server listed again gets its retired link back only while that link's breaker is closed: a retired link
    /// whose breaker is open lost its probe (a probe is for servers in the ring), so the server is made anew and
    /// tried at once, and the old link drains its pending requests and is forgotten.
    func apply(_ new: FleetSettings) {
        settings = new
        var servers: [FleetServer] = []
        for server in new.servers where !servers.contains(server) { servers.append(server) }
        let previous = links + retired
        var reusable: [FleetServer: FleetLink] = [:]
        for link in retired where link.breaker.allowsOperations { reusable[link.server] = link }
        for link in links { reusable[link.server] = link }  // a link in the ring keeps its breaker and its probe
        var fresh: [FleetLink] = []
        links = servers.map { server in
            if let link = reusable.removeValue(forKey: server) {
                link.retired = false
                return link
            }
            let link = FleetLink(server: server, settings: new)
            fresh.append(link)
            return link
        }
        retired = previous.filter { link in !links.contains { $0 === link } }
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
            if link.address.current != nil {
                _ = connection(link, .control)  // asks `stats settings` first
            } else {
                resolve(link)  // the control connection opens once it resolves
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
    /// first). Nil when it cannot be opened (the failure is counted) or the server has no address (its name is being
    /// resolved, or does not resolve: nothing counted here, the resolution counts its own failure).
    func connection(_ link: FleetLink, _ role: FleetConnection.Role) -> FleetConnection? {
        if let existing = link.connection(role) { return existing }
        guard let address = link.address.current else { return nil }
        let connection: FleetConnection
        do {
            connection = try FleetConnection(id: nextConnectionID, role: role, link: link, address: address,
                                             maxValueBytes: link.itemSizeMax ?? MetaResponseParser.defaultMaxValueBytes)
        } catch {
            logger.info("fleet connection failed", metadata: ["server": "\(link.server)", "role": "\(role)", "error": "\(error)"])
            countFailure(link)
            resolve(link)  // the address may have changed
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
            _ = connection.enqueue(.statsSettings, expects: .stats, seconds: settings.deadlineSeconds,
                                   parts: [MetaRequest.statsSettings])
            armDeadline(connection)
        }
        return connection
    }

    /// Queues a request on the link's `role` connection (opened if needed) with the deadline of an operation moving
    /// `valueBytes`. False when no connection could be opened (the caller answers unavailable).
    func send(_ work: FleetWork, on link: FleetLink, _ role: FleetConnection.Role, valueBytes: Int = 0,
              expects: FleetConnection.Expectation? = nil, request: (UInt32) -> [[UInt8]]) -> Bool {
        guard let connection = connection(link, role) else { return false }
        let opaque = connection.takeOpaque()
        _ = connection.enqueue(work, expects: expects ?? .opaque(opaque), seconds: settings.deadline(forValueBytes: valueBytes),
                               parts: request(opaque))
        if connection.pendingCount == 1 { armDeadline(connection) }
        link.counters.operations += 1
        markDirty(connection)
        return true
    }

    /// The deadline of the connection's first pending request: its own time from now, when it became first in line
    /// (sent to an idle connection, or the answer ahead of it just came). memcached answers a connection in order, so
    /// a request behind others is not late while they are answered (a read behind a 20 MiB upload), and the server
    /// is measured by its progress: a hung server is found within one request's time however long the queue, and a
    /// burst of pipelined requests (a catch-up's log reads) never pushes the deadlines of later ones out.
    func armDeadline(_ connection: FleetConnection) {
        guard let first = connection.first else { return }
        let deadline = Self.milliseconds() + UInt64(max(1, (first.seconds * 1000).rounded(.up)))
        timers.insert(.deadline(connection: connection.id, serial: first.serial), at: deadline)
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
    /// counts one failure. A connect that failed (refused, or no answer within the deadline) re-resolves a name. A
    /// retired server with no connection left is forgotten.
    func fail(_ connection: FleetConnection, reason: String) {
        guard !connection.isClosed else { return }
        let link = connection.link
        let connecting = connection.phase == .connecting
        let requests = connection.takePending()
        close(connection)
        logger.info("fleet connection failed",
                    metadata: ["server": "\(link.server)", "role": "\(connection.role)", "reason": "\(reason)",
                               "pending": "\(requests.count)"])
        countFailure(link)
        if connecting { resolve(link) }  // the address may have changed
        for request in requests { failed(request.work, reason: "\(link.server): \(reason)") }
        if link.retired { closeIdle() }
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

    /// One failure on the link's breaker (a connection's, a probe's).
    func countFailure(_ link: FleetLink) {
        link.counters.failures += 1
        let probing = link.breaker.serverState == .probing
        apply(link.breaker.recordFailure(now: Self.seconds()), to: link, logged: probing)
    }

    /// Logs, counts and schedules what a breaker transition calls for. `logged`: the change needs no line of its own
    /// (a breaker reopened by its failed probe: the server was down already; a name that does not resolve: said so).
    /// One line per change of state, not one per probe.
    func apply(_ transition: FleetBreaker.Transition, to link: FleetLink, logged: Bool = false) {
        switch transition {
        case .none:
            return
        case let .opened(until):
            link.counters.breakerOpens += 1
            if logged {
                logger.debug("fleet server is still down: probed again later",
                             metadata: ["server": "\(link.server)", "seconds": "\(settings.breakerOpenSeconds)"])
            } else {
                logger.warning("fleet server is down: its keys are local-only until a probe answers",
                               metadata: ["server": "\(link.server)", "seconds": "\(settings.breakerOpenSeconds)"])
            }
            schedule(probeOf: link, at: until)
            emit(.serverState(server: link.server.description, state: .down))
        case .closed:
            logger.notice("fleet server answers again", metadata: ["server": "\(link.server)"])
            emit(.serverState(server: link.server.description, state: .up))
        }
    }
}

extension FleetClient {
    // MARK: - Names

    /// Starts a resolution of the link's name off this thread (FleetResolver); its answer comes back as a `resolved`
    /// command. Nothing for an IP literal, or while one is out already.
    func resolve(_ link: FleetLink) {
        guard link.isName, !link.address.isResolving else { return }
        resolutions += 1
        let token = resolutions, server = link.server
        link.address = .resolving(token: token, previous: link.address.current)
        resolver.start(host: server.host, port: server.port) { [self] result in
            post(.resolved(server, token: token, result))
        }
    }

    /// A resolution answered: the link that waits for it takes the address (a new one is logged) and goes on: its
    /// first connection, or the probe waiting for it. A failure is an outage on its breaker (open at once; retried at
    /// the probe time), logged when the name stops resolving, not at each retry.
    func resolved(_ server: FleetServer, token: UInt64, _ result: Result<SocketAddress, ResolveError>) {
        guard let link = (links + retired).first(where: { link in
            if case let .resolving(waiting, _) = link.address, waiting == token, link.server == server { true } else { false }
        }) else { return }  // a link forgotten meanwhile
        guard case let .resolving(_, previous) = link.address else { return }
        switch result {
        case let .success(address):
            link.address = .resolved(address)
            emit(.nameResolved(server: link.server.description, address: address.description))
            if link.unresolvable {
                link.unresolvable = false
                logger.notice("fleet server's name resolves again",
                              metadata: ["server": "\(link.server)", "address": "\(address)"])
            } else if let previous, previous != address {
                logger.notice("fleet server's address changed",
                              metadata: ["server": "\(link.server)", "from": "\(previous)", "to": "\(address)"])
            }
            if link.breaker.serverState == .probing, !link.retired {
                sendProbe(link)
            } else if previous == nil, !link.retired, link.breaker.allowsOperations, link.control == nil {
                _ = connection(link, .control)  // its first connection: asks `stats settings` first
            }
        case let .failure(error):
            link.address = .unresolved
            emit(.nameResolved(server: link.server.description, address: nil))
            if link.unresolvable {
                logger.debug("fleet server's name still does not resolve", metadata: ["server": "\(link.server)", "error": "\(error)"])
            } else {
                link.unresolvable = true
                logger.error("fleet server's name does not resolve: its keys are local-only until it does (tried again at each probe)",
                             metadata: ["server": "\(link.server)", "error": "\(error)"])
            }
            link.counters.failures += 1
            apply(link.breaker.recordOutage(now: Self.seconds()), to: link, logged: true)
        }
        if link.retired { closeIdle() }  // a retired server with no connection left is forgotten
    }
}
