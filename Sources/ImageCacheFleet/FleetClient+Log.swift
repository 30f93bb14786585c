// Logs kept in the tier on every server (the purge log, Core's FleetPurges): appended to by any host, read by every
// host. What a log is and the walks over its segments are FleetLog.swift (pure); this file runs them on the fleet
// thread, one walk per server:
//
//   append  every server whose breaker is closed walks to the segment with room and appends the line there
//           (FleetLogAppendWalk). The completion counts the servers that took the line, of those asked.
//   read    every server whose breaker is closed walks from this host's cursor on it (FleetLink.logCursors) and
//           returns what was appended since (FleetLogReadWalk); segment values go on the control or the bulk
//           connection by their size, like any value. One completion with every server's answer.
// A server that is down misses the line; the hosts read every server's log, so a line reaches them through the
// others (that is why it goes to all: a purge made while a server is away is not lost).
// A walk whose connection fails ends there: an append counts as not stored; a read returns what it had read, and its
// cursor keeps what that covers (the rest is read at the next poll).

internal import Logging

/// One server's answer to a log read.
public struct FleetLogRead: Sendable {
    /// The server, `host:port`.
    public var server: String
    /// The lines appended to the log on this server since this host's last read of it (the first read: all of them).
    public var appended: [UInt8]
    /// Why the server could not be read (entirely or to the end); nil when it was.
    public var failure: String?
    /// The read reached the log's end on this server (no failure, and not stopped at its size bound).
    public var complete = false
}

/// An append in progress on every server.
final class AppendJob {
    let completion: @Sendable (Int, Int) -> Void
    var pending = 0
    var stored = 0
    var asked = 0

    init(completion: @escaping @Sendable (Int, Int) -> Void) {
        self.completion = completion
    }
}

/// One server's part of an append.
final class AppendPart {
    let job: AppendJob
    let link: FleetLink
    let ttlSeconds: Int
    var walk: FleetLogAppendWalk

    init(job: AppendJob, link: FleetLink, ttlSeconds: Int, walk: FleetLogAppendWalk) {
        self.job = job
        self.link = link
        self.ttlSeconds = ttlSeconds
        self.walk = walk
    }
}

/// A read of one log on every server.
final class LogReadJob {
    let completion: @Sendable ([FleetLogRead]) -> Void
    var results: [FleetLogRead]
    var pending = 0

    init(servers: [String], completion: @escaping @Sendable ([FleetLogRead]) -> Void) {
        self.completion = completion
        results = servers.map { FleetLogRead(server: $0, appended: [], failure: "not asked") }
    }
}

/// One server's part of a read.
final class LogReadPart {
    let job: LogReadJob
    let index: Int
    let link: FleetLink
    var walk: FleetLogReadWalk

    init(job: LogReadJob, index: Int, link: FleetLink, walk: FleetLogReadWalk) {
        self.job = job
        self.index = index
        self.link = link
        self.walk = walk
    }
}

extension FleetLink {
    /// This host's cursor in log `name` on this server (a new one at the start of the log).
    func logCursor(_ name: String) -> FleetLogCursor {
        logCursors.first { $0.name == name }?.cursor ?? FleetLogCursor()
    }

    /// Keeps `cursor` as the latest for `name` (the least recently used beyond FleetLogLimits.maxCursors go).
    func keep(_ cursor: FleetLogCursor, for name: String) {
        logCursors.removeAll { $0.name == name }
        logCursors.append((name, cursor))
        if logCursors.count > FleetLogLimits.maxCursors { logCursors.removeFirst(logCursors.count - FleetLogLimits.maxCursors) }
    }
}

extension FleetClient {
    // MARK: append

    func appendToLog(_ name: String, line: [UInt8], createTTLSeconds: Int, completion: @escaping @Sendable (Int, Int) -> Void) {
        let job = AppendJob(completion: completion)
        guard FleetKey.isValid(FleetLogLimits.segmentKey(name, FleetLogLimits.maxSegments)), !line.isEmpty else {
            return later { completion(0, 0) }
        }
        for link in links where link.breaker.allowsOperations {
            job.asked += 1
            job.pending += 1
            let cursor = link.logCursor(name)
            let walk = FleetLogAppendWalk(name: name, line: line, from: max(cursor.segment, cursor.appendSegment),
                                          segmentBytes: FleetLogLimits.segmentBytes(itemSizeMax: link.itemSizeMax),
                                          nonce: UInt64.random(in: 1...UInt64.max))
            let part = AppendPart(job: job, link: link, ttlSeconds: createTTLSeconds, walk: walk)
            step(part, part.walk.start())
        }
        finishAppend(job)
    }

    /// Sends what the walk asks for next, or ends the server's part.
    private func step(_ part: AppendPart, _ action: FleetLogAppendWalk.Action) {
        let link = part.link, line = part.walk.line
        let sent: Bool
        switch action {
        case let .size(key):
            sent = send(.append(part), on: link, .control) { opaque in [MetaRequest.size(key, opaque: opaque)] }
        case let .append(key):
            sent = send(.append(part), on: link, .control, valueBytes: line.count) { opaque in
                [MetaRequest.appendHeader(key, count: line.count, opaque: opaque), line, MetaRequest.crlf]
            }
        case let .add(key, bytes):
            let ttl = part.ttlSeconds
            sent = send(.append(part), on: link, .control, valueBytes: bytes.count) { opaque in
                [MetaRequest.addHeader(key, count: bytes.count, ttlSeconds: ttl, opaque: opaque), bytes, MetaRequest.crlf]
            }
        case let .done(stored, reason):
            var cursor = link.logCursor(part.walk.name)
            cursor.appendSegment = part.walk.segment  // where the next append starts (reads keep their own place)
            link.keep(cursor, for: part.walk.name)
            if stored {
                part.job.stored += 1
            } else if let reason {
                logger.warning("fleet log line not stored", metadata: ["server": "\(link.server)", "log": "\(part.walk.name)",
                                                                       "reason": "\(reason)"])
            }
            part.job.pending -= 1
            return
        }
        if !sent { step(part, part.walk.answered(.other("\(link.server) cannot be reached"))) }
    }

    func answerAppend(_ part: AppendPart, _ response: MetaResponse) {
        let answer: FleetLogAppendWalk.Answer
        switch response.status {
        case .header: answer = response.flags.size.map { .size($0) } ?? .stored
        case .miss, .notFound: answer = .missing
        case .notStored: answer = .notStored
        default: answer = .other(MetaOutcome.describe(response))
        }
        step(part, part.walk.answered(answer))
        finishAppend(part.job)
    }

    /// The server's part failed with its connection.
    func failedAppend(_ part: AppendPart, reason: String) {
        step(part, part.walk.answered(.other(reason)))
        finishAppend(part.job)
    }

    private func finishAppend(_ job: AppendJob) {
        guard job.pending == 0 else { return }
        let (stored, asked, completion) = (job.stored, job.asked, job.completion)
        job.pending = -1  // answered once
        later { completion(stored, asked) }
    }

    // MARK: read

    func readLog(_ name: String, completion: @escaping @Sendable ([FleetLogRead]) -> Void) {
        let job = LogReadJob(servers: links.map(\.server.description), completion: completion)
        guard FleetKey.isValid(FleetLogLimits.segmentKey(name, FleetLogLimits.maxSegments)) else {
            return later { completion(job.results) }
        }
        for (index, link) in links.enumerated() {
            guard link.breaker.allowsOperations else {
                job.results[index].failure = "\(link.server) is down"
                continue
            }
            job.results[index].failure = nil
            job.pending += 1
            let part = LogReadPart(job: job, index: index, link: link,
                                   walk: FleetLogReadWalk(name: name, cursor: link.logCursor(name)))
            step(part, part.walk.start())
        }
        finishLogRead(job)
    }

    private func step(_ part: LogReadPart, _ action: FleetLogReadWalk.Action) {
        let link = part.link
        let sent: Bool
        switch action {
        case let .size(key):
            sent = send(.logRead(part), on: link, .control) { opaque in [MetaRequest.size(key, opaque: opaque)] }
        case let .read(key, bytes):
            let role: FleetConnection.Role = bytes > settings.bulkThresholdBytes ? .bulk : .control
            sent = send(.logRead(part), on: link, role, valueBytes: bytes) { opaque in
                [MetaRequest.plainRead(key, opaque: opaque)]
            }
        case var .done(cursor):
            // An append meanwhile may have found a later segment: the read's copy of that is not newer.
            cursor.appendSegment = max(cursor.appendSegment, link.logCursor(part.walk.name).appendSegment)
            link.keep(cursor, for: part.walk.name)
            part.job.results[part.index].appended = part.walk.appended
            part.job.results[part.index].complete = part.job.results[part.index].failure == nil && !part.walk.stoppedEarly
            part.job.pending -= 1
            return
        }
        if !sent {
            part.job.results[part.index].failure = "\(link.server) cannot be reached"
            step(part, part.walk.answered(.other("\(link.server) cannot be reached")))
        }
    }

    func answerLogRead(_ part: LogReadPart, _ response: MetaResponse) {
        let answer: FleetLogReadWalk.Answer
        switch response.status {
        case .header: answer = .size(response.flags.size ?? -1)
        case .value: answer = .value(response.value ?? [])
        case .miss, .notFound: answer = .missing
        default:
            answer = .other(MetaOutcome.describe(response))
            part.job.results[part.index].failure = "\(part.link.server): \(MetaOutcome.describe(response))"
        }
        step(part, part.walk.answered(answer))
        finishLogRead(part.job)
    }

    /// The server's part failed with its connection: what it read so far is kept.
    func failedLogRead(_ part: LogReadPart, reason: String) {
        part.job.results[part.index].failure = reason
        step(part, part.walk.answered(.other(reason)))
        finishLogRead(part.job)
    }

    private func finishLogRead(_ job: LogReadJob) {
        guard job.pending == 0 else { return }
        job.pending = -1  // answered once
        let (results, completion) = (job.results, job.completion)
        later { completion(results) }
    }
}
