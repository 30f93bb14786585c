// Logs kept in the tier on every server (the purge log, Core's FleetPurges): a value each server holds under the same
// key, appended to by any host and read by every host. On the fleet thread, like the other flows:
//
//   append   every server whose breaker is closed: ms <key> <n> MA (append) -> HD: done | NS (no value yet):
//            ms <key> <n> ME T<ttl> (add: made with its TTL) -> HD: done | NS (another host made it meanwhile):
//            ms <key> <n> MA once more. The completion counts the servers that took the line, of those asked.
//   read     every server whose breaker is closed: mg <key> v c -> the value and its CAS | EN: none | failed:
//            unavailable. One completion with every server's answer.
// A server that is down misses the line; the hosts read every server's log, so a line reaches them through the
// others (that is why it goes to all: a purge made while a server is away is not lost).

internal import Logging

/// One server's answer to a log read.
public struct FleetLogRead: Sendable {
    public enum State: Sendable {
        case value([UInt8], cas: UInt64)
        case missing
        case unavailable(String)
    }
    /// The server, `host:port`.
    public var server: String
    public var state: State
}

/// An append in progress on every server.
final class AppendJob {
    enum Step { case append, add, appendAgain }
    let key: String
    let bytes: [UInt8]
    let createTTLSeconds: Int
    let completion: @Sendable (Int, Int) -> Void
    var pending = 0
    var stored = 0
    var asked = 0

    init(key: String, bytes: [UInt8], createTTLSeconds: Int, completion: @escaping @Sendable (Int, Int) -> Void) {
        self.key = key
        self.bytes = bytes
        self.createTTLSeconds = createTTLSeconds
        self.completion = completion
    }

    /// One server's part ended.
    func answered(stored: Bool) {
        pending -= 1
        if stored { self.stored += 1 }
    }
}

/// A read of one key on every server.
final class LogReadJob {
    let key: String
    let completion: @Sendable ([FleetLogRead]) -> Void
    var results: [FleetLogRead]
    var pending = 0

    init(key: String, servers: [String], completion: @escaping @Sendable ([FleetLogRead]) -> Void) {
        self.key = key
        self.completion = completion
        results = servers.map { FleetLogRead(server: $0, state: .unavailable("not asked")) }
    }
}

extension FleetClient {
    func appendEverywhere(_ key: String, _ bytes: [UInt8], createTTLSeconds: Int,
                          completion: @escaping @Sendable (Int, Int) -> Void) {
        let job = AppendJob(key: key, bytes: bytes, createTTLSeconds: createTTLSeconds, completion: completion)
        guard FleetKey.isValid(key) else { return later { completion(0, 0) } }
        for link in links where link.breaker.allowsOperations {
            job.asked += 1
            if sendAppend(job, .append, on: link) { job.pending += 1 }
        }
        finishAppend(job)
    }

    private func sendAppend(_ job: AppendJob, _ step: AppendJob.Step, on link: FleetLink) -> Bool {
        let count = job.bytes.count, key = job.key, ttl = job.createTTLSeconds, bytes = job.bytes
        return send(.append(job, step: step), on: link, .control, valueBytes: count) { opaque in
            [step == .add ? MetaRequest.addHeader(key, count: count, ttlSeconds: ttl, opaque: opaque)
                          : MetaRequest.appendHeader(key, count: count, opaque: opaque),
             bytes, MetaRequest.crlf]
        }
    }

    func answerAppend(_ job: AppendJob, step: AppendJob.Step, _ response: MetaResponse, link: FleetLink) {
        switch (response.status, step) {
        case (.header, _):
            job.answered(stored: true)
        case (.notStored, .append):
            // No log on this server yet: make it (with its TTL); if another host made it meanwhile, append again.
            if !sendAppend(job, .add, on: link) { job.answered(stored: false) }
        case (.notStored, .add):
            if !sendAppend(job, .appendAgain, on: link) { job.answered(stored: false) }
        default:
            job.answered(stored: false)
        }
        finishAppend(job)
    }

    func finishAppend(_ job: AppendJob) {
        guard job.pending == 0 else { return }
        let (stored, asked, completion) = (job.stored, job.asked, job.completion)
        later { completion(stored, asked) }
    }

    func readEverywhere(_ key: String, completion: @escaping @Sendable ([FleetLogRead]) -> Void) {
        let job = LogReadJob(key: key, servers: links.map(\.server.description), completion: completion)
        guard FleetKey.isValid(key) else { return later { completion(job.results) } }
        for (index, link) in links.enumerated() {
            guard link.breaker.allowsOperations else {
                job.results[index].state = .unavailable("\(link.server) is down")
                continue
            }
            let sent = send(.logRead(job, server: index), on: link, .control) { opaque in [MetaRequest.plainRead(key, opaque: opaque)] }
            if sent { job.pending += 1 } else { job.results[index].state = .unavailable("\(link.server) cannot be reached") }
        }
        finishLogRead(job, counting: false)
    }

    func answerLogRead(_ job: LogReadJob, server: Int, _ response: MetaResponse) {
        switch response.status {
        case .value: job.results[server].state = .value(response.value ?? [], cas: response.flags.cas ?? 0)
        case .miss: job.results[server].state = .missing
        default: job.results[server].state = .unavailable(MetaOutcome.describe(response))
        }
        finishLogRead(job)
    }

    /// `counting`: one server's answer (or failure) came in.
    func finishLogRead(_ job: LogReadJob, counting: Bool = true) {
        if counting { job.pending -= 1 }
        guard job.pending == 0 else { return }
        let (results, completion) = (job.results, job.completion)
        later { completion(results) }
    }
}
