// FleetPurges: a purge on any host of the fleet reaches every host's local tiers, and no host serves from the fleet a
// value older than a purge of its URL (a value on a server that missed the purge's delete, being away, included).
//
// Design: a purge log in the tier. A purge appends one line, "<time> <url>\n" ("*" for everything; time: seconds since
// 1970, the purging host's clock), to the log of the hour, `ic1:purge:<hours since 1970>`, on EVERY server
// (FleetTier.appendToLog: a log is a series of segments of 64 KiB at most, each made with a TTL of `retentionSeconds`
// and an hour, so a line stays readable for the retention, 25 hours, and the logs trim themselves; FleetLog.swift), and deletes the URL's own fleet copy. Every host reads this
// hour's and the last hour's logs on every server once a second (`poll`): each read returns only the lines appended
// since this host's last read of that server (two small `mg` per log and server when nothing changed). A host that
// has not read every server within the last 50 minutes (it just started, or a server was away) catches up: it reads
// every hour's log within the retention, at most every 10 s, until each server has been read whole. It applies the
// lines it has not seen (its local copies of the URL, variants and renditions, go: TieredStore.remove), and keeps
// each URL's latest purge time for the retention, longer than any fleet value lives (FleetEnvelope.maxSharedSeconds:
// a day).
// A value read from the fleet whose response is not newer than its URL's purge (or a purge of everything) is refused:
// deleted, and the host fetches for itself (`isPurged`). Because the line is on every server, a server that was away
// during a purge does not lose it: the hosts learn it from the others, and its stale values are refused by time.
// A host that has not yet read any server's logs whole since it started (its first catch-up: about a second, more when
// the logs are long) does not know the purges of the last day, so it serves no fleet value (`caughtUp`; FleetFill
// answers such a hit as the fleet being unavailable: the host fetches for itself, and keeps the value nowhere). A purge
// is logged on every server up when it is made, so one server read whole is enough.
// Bound: a host drops its local copies within about a second of the purge (one poll), plus the read's deadline.
// Limits: a log holds FleetLogLimits.maxSegments segments of 64 KiB per server (16 MiB: about 150,000 purges of
// 100-byte URLs an hour); past that a purge answers that it was logged on fewer servers (0 when all are full), and the
// local purge still happens. This host remembers `rememberedLimit` purges; when it must forget one early, it refuses
// every fleet value not newer than the latest purge it forgot (`forgottenThrough`): a refetch, never a purged value.
// A host cut off from every server learns the purges when it can read the logs again, within the retention.
// In flight across a purge: every purge this host makes or reads (with a fleet or without: `recordLocal`) takes the
// next serial number; a fetch or a rendition notes the serial when it starts, and what it brings is kept nowhere (not
// in the local tiers, not in the fleet: its lease goes back) when its URL, or everything, was purged since
// (`purgedSince`). Its clients are still served. A serial, not a time: exact on one host, whatever the clocks.
// Clocks: purge and response times come from different hosts: keep them in step (NTP), as for any shared cache.
//
// Ownership: confined to the proxy queue (the poll timer runs there; reads hop back to it).

internal import ImageCacheSystem
internal import ImageCacheHTTP
internal import ImageCacheStore
internal import ImageCacheFleet
internal import Dispatch
internal import Foundation
internal import Logging

final class FleetPurges: @unchecked Sendable {
    /// The log of the hour that holds `time`, on every server.
    static func logKey(at time: Date) -> String { "ic1:purge:\(Int((time.timeIntervalSince1970 / 3600).rounded(.down)))" }
    /// How long an hour's log lasts in memcached, and this host's memory of each purge, seconds: longer than any fleet
    /// value lives (FleetEnvelope.maxSharedSeconds) by an hour.
    static let retentionSeconds = FleetEnvelope.maxSharedSeconds + 3600
    /// A server not read whole within this long is read again from the oldest log (a catch-up), seconds.
    static let caughtUpSeconds = 50 * 60.0
    /// Catch-up reads are this far apart at least, seconds.
    static let catchUpIntervalSeconds = 10.0
    /// How far ahead of this host's clock a purge line may be dated (clocks in step, give or take).
    static let clockSkewSeconds = 300.0
    /// Purges remembered at most (the oldest are forgotten first).
    static let rememberedLimit = 100_000

    private let fleet: FleetTier
    private let store: TieredStore
    private let logger: Logger
    private let now: @Sendable () -> Date
    private let events: (@Sendable (ProxyEvent) -> Void)?
    private let queue: DispatchQueue

    // MARK: owned by queue
    /// Lines applied (or made here), with when they were seen, for the retention time.
    private var seen: [String: Date] = [:]
    /// Each URL's latest purge time.
    private var purgedAt: [String: Date] = [:]
    /// The latest purge of everything.
    private var purgedAllAt: Date?
    /// The latest purge forgotten before its time (past `rememberedLimit`): no older fleet value is served.
    private var forgottenThrough: Date?
    /// When each server (`host:port`) was last read without a failure, in a poll that read every log it needed.
    private var readWhole: [String: Date] = [:]
    /// When the last catch-up read started.
    private var lastCatchUp: Date?
    /// Whether some server's logs have been read whole since this host started: until then it knows none of the day's
    /// purges, and serves no fleet value.
    private(set) var caughtUp = false
    /// When old purges were last forgotten.
    private var lastForgetting: Date?
    /// The latest purge's serial number; the latest of each URL (with when it was made), of everything, and of those
    /// forgotten (an hour after they were made: no fetch is in flight that long).
    private var purgeSerial: UInt64 = 0
    private var serialOf: [String: (serial: UInt64, time: Date)] = [:]
    private var allSerial: UInt64 = 0
    private var forgottenSerial: UInt64 = 0
    private var timer: (any DispatchSourceTimer)?
    /// Log reads out (this hour's and the last hour's).
    private var reading = 0

    init(fleet: FleetTier, store: TieredStore, logger: Logger, now: @escaping @Sendable () -> Date,
         events: (@Sendable (ProxyEvent) -> Void)?, queue: DispatchQueue) {
        self.fleet = fleet
        self.store = store
        self.logger = logger
        self.now = now
        self.events = events
        self.queue = queue
    }

    /// Starts reading the log every `interval` seconds.
    func start(interval: Double = 1) {
        dispatchPrecondition(condition: .onQueue(queue))
        guard timer == nil else { return }
        let timer = DispatchSource.makeTimerSource(queue: queue)
        timer.schedule(deadline: .now(), repeating: interval, leeway: .milliseconds(50))
        timer.setEventHandler { [weak self] in self?.poll() }
        timer.resume()
        self.timer = timer
    }

    func stop() {
        timer?.cancel()
        timer = nil
    }

    /// A purge made on this host (its local copies are gone already): logged on every server, the URL's fleet copy
    /// deleted. `url` nil: everything. Completion: the servers that logged it, of those asked.
    func purged(_ url: UpstreamURL?, completion: @escaping @Sendable (Int, Int) -> Void) {
        dispatchPrecondition(condition: .onQueue(queue))
        let time = now()
        let line = Self.line(time: time, url: url?.string ?? "*")
        seen[line] = time
        remember(url?.string ?? "*", at: time)
        number(url?.string ?? "*")
        if let url { fleet.delete(FleetEnvelope.key(for: CacheKey(url))) }
        // A segment's TTL counts from when it was made, up to an hour before this line: an hour more keeps every line
        // readable for the whole retention.
        fleet.appendToLog(Self.logKey(at: time), line: Array((line + "\n").utf8), createTTLSeconds: Self.retentionSeconds + 3600,
                          completion: completion)
    }

    /// A purge made on this host without a fleet: numbered, so that nothing in flight across it is kept after it.
    /// `url` nil: everything.
    func recordLocal(_ url: UpstreamURL?) {
        dispatchPrecondition(condition: .onQueue(queue))
        number(url?.string ?? "*")
        forgetOld()
    }

    /// The serial of the latest purge this host made or read (a fetch or rendition notes it when it starts).
    var serial: UInt64 {
        dispatchPrecondition(condition: .onQueue(queue))
        return purgeSerial
    }

    /// Whether `url`, or everything, was purged after the purge numbered `start` (a fetch or rendition that started
    /// then is in flight across the purge: what it brings is not kept).
    func purgedSince(_ start: UInt64, url: String) -> Bool {
        dispatchPrecondition(condition: .onQueue(queue))
        return allSerial > start || forgottenSerial > start || (serialOf[url]?.serial ?? 0) > start
    }

    private func number(_ target: String) {
        purgeSerial += 1
        if target == "*" { allSerial = purgeSerial } else { serialOf[target] = (purgeSerial, now()) }
    }

    /// Whether an entry (from the fleet, or received here) is not newer than a purge of its URL (or of everything).
    func isPurged(_ entry: CacheEntry) -> Bool {
        dispatchPrecondition(condition: .onQueue(queue))
        if let all = purgedAllAt, entry.responseTime <= all { return true }
        if let forgotten = forgottenThrough, entry.responseTime <= forgotten { return true }
        guard let time = purgedAt[entry.key.url.string] else { return false }
        return entry.responseTime <= time
    }

    /// Reads the logs on every server (this hour's and the last; every hour's within the retention when catching up),
    /// and applies what is new.
    func poll() {
        dispatchPrecondition(condition: .onQueue(queue))
        guard reading == 0 else { return }
        let time = now()
        let servers = fleet.stats().servers.map(\.address)
        let behind = servers.contains { readWhole[$0].map { time.timeIntervalSince($0) > Self.caughtUpSeconds } ?? true }
        let catchingUp = behind && lastCatchUp.map { time.timeIntervalSince($0) >= Self.catchUpIntervalSeconds || $0 > time } ?? true
        if catchingUp { lastCatchUp = time }
        let keys = Self.logKeys(at: time, catchingUp: catchingUp)
        weak let weakSelf = self
        let poll = PollReads(expected: keys.count, catchingUp: catchingUp, started: time)
        for key in keys {
            reading += 1
            fleet.readLog(key) { [queue] reads in
                queue.async { weakSelf?.apply(reads, poll: poll) }
            }
        }
    }

    /// The logs a poll reads: the last hour's and this hour's; when catching up, every hour's within the retention.
    static func logKeys(at time: Date, catchingUp: Bool) -> [String] {
        let hours = catchingUp ? retentionSeconds / 3600 : 1
        return (0...hours).reversed().map { logKey(at: time.addingTimeInterval(-Double($0 * 3600))) }
    }

    /// One poll's reads: which servers failed (or were not read to the end) in any of them. Confined to the proxy queue (the reads' completions hop
    /// back to it before they touch it).
    private final class PollReads: @unchecked Sendable {
        let expected: Int
        let catchingUp: Bool
        let started: Date
        var answered = 0
        var failed: Set<String> = []
        var servers: Set<String> = []
        init(expected: Int, catchingUp: Bool, started: Date) {
            self.expected = expected
            self.catchingUp = catchingUp
            self.started = started
        }
    }

    private func apply(_ reads: [FleetLogRead], poll: PollReads) {
        reading -= 1
        poll.answered += 1
        for read in reads {
            poll.servers.insert(read.server)
            if !read.complete { poll.failed.insert(read.server) }  // failed, or the rest comes at the next read
        }
        if poll.answered == poll.expected {
            // A server read whole is caught up: by a catch-up, or by a poll of the last two hours while it was caught up.
            for server in poll.servers where !poll.failed.contains(server) {
                if poll.catchingUp || readWhole[server].map({ poll.started.timeIntervalSince($0) <= Self.caughtUpSeconds }) == true {
                    readWhole[server] = poll.started
                }
            }
        }
        defer {
            // (After this read's lines are applied: the first fleet value served is checked against all of them.)
            if !caughtUp, poll.answered == poll.expected, !readWhole.isEmpty {
                caughtUp = true
                logger.info("fleet: the purge logs are read (\(readWhole.count) of \(poll.servers.count) server(s) whole): fleet values are served from now on")
                events?(.fleetCaughtUp(servers: readWhole.count))
            }
        }
        var applied = 0
        for read in reads {
            for raw in read.appended.split(separator: UInt8(ascii: "\n")) {
                let line = String(decoding: raw, as: UTF8.self)
                guard seen[line] == nil, let (time, target) = Self.parse(line) else { continue }
                // A line dated well ahead of this host's clock (a clock far off, or a stray write) would disable the
                // fleet for its URL until then: skipped, and logged once.
                guard time <= now().addingTimeInterval(Self.clockSkewSeconds) else {
                    seen[line] = now()
                    logger.warning("fleet: a purge line dated \(Int(time.timeIntervalSince(now()))) s ahead of this host's clock was skipped: \(line.prefix(200))")
                    continue
                }
                seen[line] = time
                applyPurge(target, at: time)
                applied += 1
            }
        }
        forgetOld()
        if applied > 0 { logger.info("fleet: applied \(applied) purge(s) from the fleet's log") }
    }

    private func applyPurge(_ target: String, at time: Date) {
        remember(target, at: time)
        number(target)
        if target == "*" {
            logger.notice("fleet: a purge of everything (from another host)")
            store.removeAll { _ in }
            events?(.fleetPurgeApplied(url: target))
            return
        }
        guard let url = try? UpstreamURL.parse(target) else { return }
        logger.notice("fleet: purge of \(target) (from another host)")
        let events = events
        store.remove(CacheKey(url)) { _, _ in events?(.fleetPurgeApplied(url: target)) }
    }

    private func remember(_ target: String, at time: Date) {
        if target == "*" {
            purgedAllAt = max(purgedAllAt ?? time, time)
        } else {
            purgedAt[target] = max(purgedAt[target] ?? time, time)
        }
    }

    /// Forgets purges older than the retention, and the oldest beyond the limit.
    private func forgetOld() {
        // At most once a minute (the filters cost the number of purges remembered), unless a limit is far exceeded (a
        // catch-up brought many).
        let time = now()
        let over = purgedAt.count > 2 * Self.rememberedLimit || seen.count > 2 * Self.rememberedLimit
            || serialOf.count > Self.rememberedLimit
        if !over, let last = lastForgetting, time >= last, time.timeIntervalSince(last) < 60 { return }
        lastForgetting = time
        let horizon = time.addingTimeInterval(-Double(Self.retentionSeconds + 60))
        let serialHorizon = time.addingTimeInterval(-3600)
        for (url, record) in serialOf where record.time < serialHorizon || record.time > time.addingTimeInterval(3600) {
            forgottenSerial = max(forgottenSerial, record.serial)
            serialOf[url] = nil
        }
        if serialOf.count > Self.rememberedLimit {
            // Too many purges within the hour to tell apart: every fetch in flight now counts as purged (it keeps
            // nothing, once).
            forgottenSerial = purgeSerial
            serialOf.removeAll()
        }
        seen = seen.filter { $0.value > horizon }
        purgedAt = purgedAt.filter { $0.value > horizon }
        if let all = purgedAllAt, all <= horizon { purgedAllAt = nil }
        if let forgotten = forgottenThrough, forgotten <= horizon { forgottenThrough = nil }
        if purgedAt.count > Self.rememberedLimit {
            let sorted = purgedAt.sorted { $0.value > $1.value }
            let kept = sorted.prefix(Self.rememberedLimit)
            if let newestForgotten = sorted.dropFirst(Self.rememberedLimit).first?.value {
                forgottenThrough = max(forgottenThrough ?? newestForgotten, newestForgotten)
                logger.warning("fleet: more than \(Self.rememberedLimit) purges within \(Self.retentionSeconds / 3600) h: fleet values from before \(newestForgotten) are refused")
            }
            purgedAt = Dictionary(uniqueKeysWithValues: kept.map { ($0.key, $0.value) })
        }
        if seen.count > Self.rememberedLimit {
            let kept = seen.sorted { $0.value > $1.value }.prefix(Self.rememberedLimit)
            seen = Dictionary(uniqueKeysWithValues: kept.map { ($0.key, $0.value) })
        }
    }

    // MARK: the log's lines (pure)

    /// "<seconds since 1970, 3 decimals> <url or *>".
    static func line(time: Date, url: String) -> String {
        String(format: "%.3f", time.timeIntervalSince1970) + " " + url
    }

    /// The time and target of a line; nil for what is not one (a damaged or foreign line is skipped).
    static func parse(_ line: String) -> (Date, String)? {
        let parts = line.split(separator: " ", maxSplits: 1)
        guard parts.count == 2, let seconds = Double(parts[0]), seconds.isFinite, seconds > 0,
              !parts[1].contains(where: { $0.isWhitespace }) else { return nil }
        let target = String(parts[1])
        guard target == "*" || (try? UpstreamURL.parse(target)) != nil else { return nil }
        return (Date(timeIntervalSince1970: seconds), target)
    }
}
