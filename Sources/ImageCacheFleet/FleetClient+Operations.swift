// The tier's operations as request flows, on the fleet thread (FleetClient owns everything they touch). Each flow
// sends its requests, and `deliver` applies the rules of MetaOutcome.swift to the answers:
//
//   lookup   control: mg <key> s c f N<lease> t  -> W: won (the lease is held and refreshed) | Z: wait |
//            no W/Z: a value of s bytes -> read it: mg <key> v c f t on control (s <= bulk threshold) or bulk ->
//            the hit (W/Z: won or wait; EN: gone meanwhile -> the lookup once more, at most once) | EN: unavailable
//   store    control or bulk by size: ms <key> <n> T<ttl> F<flags> C<lease cas>; refused unsent when over
//            fleet.item-max or, with its item header, over the server's item_size_max; ends the lease's refreshes
//   release  control: md <key> C<lease cas> (answer dropped); ends the lease's refreshes
//   delete   control: md <key> [C<cas>]
//   refresh  every lease/3 seconds, for each held lease whose holder reported progress within the last lease time:
//            mg <key> c, and if the CAS is still the lease's, mg <key> T<lease> c. Checking first keeps a lost lease
//            from setting the TTL of another host's value (a touch has no CAS condition); a CAS that differs or EN
//            marks the lease lost (no more refreshes; its store will answer lostLease).
//   probe    (the breaker's open time is over; a name that did not resolve is resolved first, off the thread)
//            control: mn -> MN closes the breaker
//   stats    first request of every control connection: stats settings -> item_size_max
// Every operation on a server whose breaker is not closed is answered unavailable at once, without socket work.

internal import Logging

extension FleetClient {
    // MARK: lookup

    func lookup(_ job: LookupJob) {
        guard FleetKey.isValid(job.key) else { return finish(job, .unavailable(reason: "invalid key")) }
        guard let index = ring.owner(of: job.key) else { return finish(job, .unavailable(reason: "no fleet servers")) }
        let link = links[index]
        guard link.breaker.allowsOperations else {
            return finish(job, .unavailable(reason: "\(link.server) is down"))
        }
        let leaseSeconds = settings.leaseSeconds
        let sent = send(.lookup(job), on: link, .control) { opaque in
            [MetaRequest.lookup(job.key, leaseSeconds: leaseSeconds, opaque: opaque)]
        }
        if !sent { finish(job, .unavailable(reason: "\(link.server) cannot be reached")) }
    }

    private func answerLookup(_ job: LookupJob, _ response: MetaResponse, link: FleetLink) {
        switch MetaOutcome.lookup(response) {
        case let .read(size):
            let role: FleetConnection.Role = size > settings.bulkThresholdBytes ? .bulk : .control
            let sent = send(.read(job), on: link, role, valueBytes: size) { opaque in
                [MetaRequest.read(job.key, opaque: opaque)]
            }
            if !sent { finish(job, .unavailable(reason: "\(link.server) cannot be reached")) }
        case let .empty(flags, cas, ttl):
            finish(job, .hit(FleetValue(bytes: [], flags: flags, cas: cas, remainingTTL: ttl)))
        case let .won(cas):
            finish(job, .won(hold(job.key, cas: cas, link: link)))
        case .wait:
            finish(job, .wait)
        case let .unavailable(reason):
            finish(job, .unavailable(reason: "\(link.server): \(reason)"))
        }
    }

    private func answerRead(_ job: LookupJob, _ response: MetaResponse, link: FleetLink) {
        switch MetaOutcome.read(response) {
        case let .hit(bytes, flags, cas, ttl):
            finish(job, .hit(FleetValue(bytes: bytes, flags: flags, cas: cas, remainingTTL: ttl)))
        case let .won(cas):
            finish(job, .won(hold(job.key, cas: cas, link: link)))
        case .wait:
            finish(job, .wait)
        case .vanished:
            guard !job.retried else { return finish(job, .unavailable(reason: "the value changed twice while read")) }
            var again = job
            again.retried = true
            lookup(again)
        case let .unavailable(reason):
            finish(job, .unavailable(reason: "\(link.server): \(reason)"))
        }
    }

    private func finish(_ job: LookupJob, _ result: FleetLookup) {
        switch result {
        case .hit: counters.hits += 1
        case .won: counters.leaseWins += 1
        case .wait: counters.leaseWaits += 1
        case .unavailable: counters.unavailable += 1
        }
        let completion = job.completion
        later { completion(result) }
    }

    /// Records a lease won on `link` (it is refreshed from now on while its holder progresses).
    private func hold(_ key: String, cas: UInt64, link: FleetLink) -> FleetLease {
        let lease = FleetLease(key: key, cas: cas, server: links.firstIndex { $0 === link } ?? -1)
        held[ObjectIdentifier(lease)] = HeldLease(lease: lease, link: link)
        scheduleRefresh()
        return lease
    }

    /// Ends `lease`'s refreshes; the link it belongs to (the one that granted it, else the key's owner now).
    private func end(_ lease: FleetLease) -> FleetLink? {
        if let record = held.removeValue(forKey: ObjectIdentifier(lease)) {
            record.ended = true
            return record.link
        }
        return ring.owner(of: lease.key).map { links[$0] }
    }

    // MARK: store, release, delete

    func store(_ lease: FleetLease, value: [UInt8], flags: UInt32, ttlSeconds: Int,
               completion: @escaping @Sendable (FleetStoreResult) -> Void) {
        let link = end(lease)
        let answer = { [self] (result: FleetStoreResult) in
            switch result {
            case .stored: counters.stores += 1
            case .lostLease: counters.lostLeases += 1
            case .tooLarge: counters.tooLarge += 1
            case .unavailable: counters.unavailable += 1
            }
            later { completion(result) }
        }
        guard FleetKey.isValid(lease.key) else { return answer(.unavailable(reason: "invalid key")) }
        guard let link else { return answer(.unavailable(reason: "no fleet servers")) }
        guard !MetaOutcome.isTooLarge(valueBytes: value.count, key: lease.key, itemMaxBytes: settings.itemMaxBytes,
                                      serverItemSizeMax: link.itemSizeMax) else { return answer(.tooLarge) }
        guard link.breaker.allowsOperations else { return answer(.unavailable(reason: "\(link.server) is down")) }
        let role: FleetConnection.Role = value.count > settings.bulkThresholdBytes ? .bulk : .control
        let sent = send(.store(completion), on: link, role, valueBytes: value.count) { opaque in
            [MetaRequest.storeHeader(lease.key, count: value.count, ttlSeconds: ttlSeconds, flags: flags, cas: lease.cas,
                                     opaque: opaque),
             value, MetaRequest.crlf]
        }
        if !sent { answer(.unavailable(reason: "\(link.server) cannot be reached")) }
    }

    private func answerStore(_ completion: @escaping @Sendable (FleetStoreResult) -> Void, _ response: MetaResponse) {
        let result = MetaOutcome.store(response)
        switch result {
        case .stored: counters.stores += 1
        case .lostLease: counters.lostLeases += 1
        case .tooLarge: counters.tooLarge += 1
        case .unavailable: counters.unavailable += 1
        }
        later { completion(result) }
    }

    func release(_ lease: FleetLease) {
        guard let link = end(lease), FleetKey.isValid(lease.key), link.breaker.allowsOperations else { return }
        counters.releases += 1
        _ = send(.release, on: link, .control) { opaque in [MetaRequest.delete(lease.key, cas: lease.cas, opaque: opaque)] }
    }

    func delete(_ key: String, cas: UInt64?, completion: (@Sendable (Bool) -> Void)?) {
        guard FleetKey.isValid(key), let index = ring.owner(of: key), links[index].breaker.allowsOperations else {
            later { completion?(false) }
            return
        }
        let sent = send(.delete(completion), on: links[index], .control) { opaque in
            [MetaRequest.delete(key, cas: cas, opaque: opaque)]
        }
        if !sent { later { completion?(false) } }
    }

    // MARK: answers

    /// Hands `response` to the request it answers (the first pending one on `connection`).
    func deliver(_ response: MetaResponse, on connection: FleetConnection) {
        let request: FleetConnection.Request
        do {
            request = try connection.match(response)
        } catch {
            return fail(connection, reason: error.description)
        }
        let link = connection.link
        armDeadline(connection)  // the next request in line, if any, is measured from now
        link.breaker.recordSuccess()
        if MetaOutcome.desyncs(response) {
            let reason = "memcached answered \(MetaOutcome.describe(response))"
            failed(request.work, reason: "\(link.server): \(reason)")
            return fail(connection, reason: reason)
        }
        switch request.work {
        case let .lookup(job): answerLookup(job, response, link: link)
        case let .read(job): answerRead(job, response, link: link)
        case let .store(completion): answerStore(completion, response)
        case .release: break
        case let .delete(completion):
            let deleted = MetaOutcome.deleted(response)
            later { completion?(deleted) }
        case let .check(record): answerCheck(record, response)
        case let .touch(record): answerTouch(record, response)
        case .probe: answerProbe(link, response)
        case let .append(part): answerAppend(part, response)
        case let .logRead(part): answerLogRead(part, response)
        case .statsSettings: answerStats(link, response)
        }
        if link.retired, !connection.hasPending {
            close(connection)  // a retired server's connection closes once idle (it may serve a held lease again)
            closeIdle()
        }
    }

    /// Answers `work` unavailable: its connection failed (or the tier ends).
    func failed(_ work: FleetWork, reason: String) {
        switch work {
        case let .lookup(job), let .read(job):
            finish(job, .unavailable(reason: reason))
        case let .store(completion):
            counters.unavailable += 1
            later { completion(.unavailable(reason: reason)) }
        case let .delete(completion):
            later { completion?(false) }
        case let .check(record), let .touch(record):
            record.refreshing = false
        case let .append(part):
            failedAppend(part, reason: reason)
        case let .logRead(part):
            failedLogRead(part, reason: reason)
        case .release, .probe, .statsSettings:
            break  // a failed probe reopened the breaker with its connection's failure
        }
    }

    // MARK: leases

    /// Starts a refresh of every held lease whose holder progressed within the last lease time.
    func refreshLeases() {
        let now = FleetClock.nanoseconds()
        let window = UInt64(max(0, settings.leaseSeconds)) * 1_000_000_000
        for record in held.values where !record.lost && !record.refreshing {
            let progressed = record.lease.lastProgressNanoseconds
            guard progressed >= now || now - progressed <= window, record.link.breaker.allowsOperations else { continue }
            let key = record.lease.key
            record.refreshing = send(.check(record), on: record.link, .control) { opaque in
                [MetaRequest.check(key, opaque: opaque)]
            }
        }
    }

    private func answerCheck(_ record: HeldLease, _ response: MetaResponse) {
        guard !record.ended else { return }
        switch MetaOutcome.leaseHeld(response, cas: record.lease.cas) {
        case true?:
            let key = record.lease.key, ttl = settings.leaseSeconds
            record.refreshing = send(.touch(record), on: record.link, .control) { opaque in
                [MetaRequest.touch(key, ttlSeconds: ttl, opaque: opaque)]
            }
        case false?:
            lose(record)
        case nil:
            record.refreshing = false
        }
    }

    private func answerTouch(_ record: HeldLease, _ response: MetaResponse) {
        record.refreshing = false
        guard !record.ended else { return }
        switch MetaOutcome.leaseHeld(response, cas: record.lease.cas) {
        case true?:
            counters.leaseRefreshes += 1
            emit(.leaseRefreshed(key: record.lease.key, kept: true))
        case false?:
            lose(record)
        case nil:
            break
        }
    }

    private func lose(_ record: HeldLease) {
        record.refreshing = false
        record.lost = true
        counters.leasesLost += 1
        logger.info("fleet lease lost: the item expired or was replaced", metadata: ["key": "\(record.lease.key)"])
        emit(.leaseRefreshed(key: record.lease.key, kept: false))
    }

    // MARK: breaker probe, stats settings

    /// The breaker's open time is over: one `mn` goes out (a retired server is not probed: re-added, it is made
    /// anew). A name that did not resolve is resolved first, off this thread, and the `mn` goes out when it answers
    /// (`resolved`); a failed resolution reopens the breaker.
    func probe(_ link: FleetLink) {
        guard links.contains(where: { $0 === link }), link.breaker.startProbe(now: Self.seconds()) else { return }
        emit(.serverState(server: link.server.description, state: .probing))
        switch link.address {
        case .resolved: sendProbe(link)
        case .resolving: break  // a re-resolution after a failed connect is out: the probe waits for it
        case .unresolved: resolve(link)
        }
    }

    /// Sends the probing breaker's `mn`.
    func sendProbe(_ link: FleetLink) {
        let sent = send(.probe, on: link, .control, expects: .noop) { _ in [MetaRequest.noop] }
        _ = sent  // not sent: opening the connection failed, which counted a failure and reopened the breaker
    }

    private func answerProbe(_ link: FleetLink, _ response: MetaResponse) {
        if case .noop = response.status {
            apply(link.breaker.probeSucceeded(), to: link)
        } else {
            countFailure(link)
        }
    }

    private func answerStats(_ link: FleetLink, _ response: MetaResponse) {
        guard case let .stats(values) = response.status, let text = values["item_size_max"], let bytes = Int(text) else {
            logger.warning("fleet server did not report item_size_max", metadata: ["server": "\(link.server)"])
            return
        }
        let changed = link.itemSizeMax != bytes
        link.itemSizeMax = bytes
        for connection in [link.control, link.bulk].compactMap({ $0 }) {
            connection.parser.maxValueBytes = bytes
        }
        guard changed else { return }
        if bytes < settings.itemMaxBytes {
            logger.warning("fleet server's item_size_max is below fleet.item-max: values above it are not stored there",
                           metadata: ["server": "\(link.server)", "item_size_max": "\(bytes)",
                                      "fleet.item-max": "\(settings.itemMaxBytes)"])
        }
        emit(.itemSizeMax(server: link.server.description, bytes: bytes))
    }
}
