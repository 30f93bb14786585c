// Metrics: the daemon's counters and histograms, read on request into a DaemonStats (ImageCacheStatus), which is
// rendered as Prometheus text (/_imagecached/metrics), JSON (/_imagecached/stats) or the status page.
//
// Data model
//   requests, servedBytes     one relaxed atomic per cache outcome (hit, disk_hit, stale, miss, ...), bumped on the
//                             queue that answers: a memory hit on its connection's loop, everything else as its sink
//                             is told the response's outcome and sees its body (MetricsSink).
//   upstream*, fetchWaiters   bumped by Fetch on the proxy queue, still through atomics (no lock, no hop).
//   errors, hosts             string-keyed, rare (errors) or slow-path only (hosts: one update per upstream transfer):
//                             each behind its own Mutex. Each error is also kept with its reason in `recentErrors`,
//                             a ring of the last `recentErrorLimit` (its own Mutex; the status page lists them).
//   gauges                    the tiers' own stats (MemoryCacheStats, DiskCacheStats, PixelCacheStats), read by the
//                             caller from the tiers and carried into the document as they are.
// Nothing here is read on a request path; rendering reads every atomic once (a snapshot that may straddle a request).
//
// Hand-written rather than swift-metrics + swift-prometheus: see docs/operations.md (Metrics) for the measured
// build cost and the reasoning.

internal import ImageCacheSystem
internal import ImageCacheHTTP
internal import ImageCacheConfig
internal import ImageCacheServer
internal import ImageCacheStore
package import ImageCacheStatus
public import Foundation
internal import Synchronization

/// The daemon's counters. Thread-safe; see the data model above.
public final class ProxyMetrics: Sendable {
    static let upstreamSecondsBounds: [Double] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60]
    static let waiterBounds: [Double] = [1, 2, 3, 5, 10, 20, 50, 100]
    static let transformSecondsBounds: [Double] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10]
    /// Hosts kept for "top hosts"; beyond this, new hosts are counted under "(other)".
    static let hostLimit = 1000
    /// Errors kept with their reasons (the newest; older ones are only counted).
    static let recentErrorLimit = 20
    /// Fetches and transforms listed in the stats document's `inFlightFetches` (the most waited-on).
    static let inFlightListLimit = 20
    /// Characters of an error's reason and target kept.
    static let errorTextLimit = 300

    /// The daemon's wall clock (injected by tests), for the time of an error.
    let now: @Sendable () -> Date
    let started: Date
    private let requests = ServedOutcome.allCases.map { _ in Counter() }
    private let servedBytes = ServedOutcome.allCases.map { _ in Counter() }
    let upstreamSeconds = Histogram(bounds: ProxyMetrics.upstreamSecondsBounds)
    let fetchWaiters = Histogram(bounds: ProxyMetrics.waiterBounds)
    let upstreamBytes = Counter()
    /// Upstream transfers paused because a client of theirs was behind while the in-flight budget was full.
    let upstreamPauses = Counter()
    /// Bytes of bodies in flight now (retained to be stored, waiting for the disk queue, or not yet taken by a fetch's
    /// slowest client, during the fetch and after it); the backpressure budget `in-flight-limit` is held against
    /// this. Added to and taken from by fetches and the InFlightDrain they leave behind.
    let inFlightBytes = Atomic<Int>(0)
    private let upstreamResults = Locked<[String: Int]>([:])
    private let errors = Locked<[String: Int]>([:])
    /// The last `recentErrorLimit` errors, oldest first.
    private let recentErrors = Locked<[DaemonStats.ErrorRecord]>([])
    private let hosts = Locked<[String: HostStats]>([:])
    let prefetched = Counter()
    /// Transforms ended, by "format result" (result "ok" or the failure's label); their durations; bytes in and out.
    private let transformResults = Locked<[String: Int]>([:])
    let transformSeconds = Histogram(bounds: ProxyMetrics.transformSecondsBounds)
    let transformBytesIn = Counter()
    let transformBytesOut = Counter()
    package let reloads = Counter()
    package let reloadFailures = Counter()
    /// CONNECT tunnels: the open count (and the max-tunnels cap), results, ends, bytes.
    package let tunnels = TunnelMetrics()
    /// The fleet tier: what fetches found there and did with their leases.
    package let fleet = FleetMetrics()
    /// The local CA in use (set at start and by each reload; nil without intercept-hosts). Its expiry is counted
    /// from each snapshot's time.
    private let interceptCA = Locked<DaemonStats.InterceptCA?>(nil)

    /// Reads the TLS listener's counts for each snapshot (set by the daemon when it has one).
    private let tlsStatus = Locked<(@Sendable () -> DaemonStats.TLS)?>(nil)

    /// The TLS listener the stats describe from now on.
    package func setTLSStatus(_ status: (@Sendable () -> DaemonStats.TLS)?) {
        tlsStatus.withLock { $0 = status }
    }

    /// The local CA the status page and /metrics describe from now on (nil: none).
    package func setInterceptCA(_ ca: DaemonStats.InterceptCA?) {
        interceptCA.withLock { $0 = ca }
    }

    public init(now: @escaping @Sendable () -> Date = { Date() }) {
        self.now = now
        started = now()
    }

    private static let outcomeIndex: [ServedOutcome: Int] = Dictionary(
        uniqueKeysWithValues: ServedOutcome.allCases.enumerated().map { ($1, $0) })

    /// One request answered with `outcome`, and `bytes` of body written for it.
    func served(_ outcome: ServedOutcome) {
        requests[Self.outcomeIndex[outcome]!].add()
    }

    func servedBytes(_ outcome: ServedOutcome, _ bytes: Int) {
        servedBytes[Self.outcomeIndex[outcome]!].add(bytes)
    }

    /// An upstream transfer ended: "ok", or the error's kind.
    func upstreamFinished(host: String, result: String, seconds: Double, bytes: Int) {
        upstreamSeconds.observe(seconds)
        upstreamResults.withLock { $0[result, default: 0] += 1 }
        hosts.withLock { hosts in
            let name = hosts[host] != nil || hosts.count < Self.hostLimit ? host : "(other)"
            hosts[name, default: HostStats(host: name)].transfers += 1
            hosts[name, default: HostStats(host: name)].bytes += bytes
        }
    }

    /// A transform ended: `format` (the output's, or "-" when it failed before one was chosen), `result` "ok" or the
    /// failure's label; `seconds` on a worker (0 when it never ran).
    func transformed(format: String, result: String, seconds: Double, bytesIn: Int, bytesOut: Int) {
        transformResults.withLock { $0["\(format) \(result)", default: 0] += 1 }
        if seconds > 0 { transformSeconds.observe(seconds) }
        transformBytesIn.add(bytesIn)
        transformBytesOut.add(bytesOut)
    }

    /// An error: counted under `kind`, and kept with its reason (the one-line text the client and the log got), the
    /// status answered (nil: no client was answered with it) and the request target or URL it concerned.
    func error(_ kind: String, status: Int?, reason: String, target: String) {
        errors.withLock { $0[kind, default: 0] += 1 }
        let record = DaemonStats.ErrorRecord(time: now().timeIntervalSince1970, kind: kind, status: status,
                                             reason: String(reason.prefix(Self.errorTextLimit)),
                                             target: String(target.prefix(Self.errorTextLimit)))
        recentErrors.withLock { records in
            if records.count == Self.recentErrorLimit { records.removeFirst() }
            records.append(record)
        }
    }

    // MARK: - Snapshot

    /// Everything counted, plus the tiers' gauges: the /_imagecached/stats document.
    package func snapshot(memory: MemoryCacheStats, disk: DiskCacheStats?, fetchesInFlight: Int, topHosts: Int = 10,
                          transformQueue: (workers: Int, running: Int, queued: Int) = (0, 0, 0),
                          pixelCache: PixelCacheStats? = nil,
                          inFlight: [DaemonStats.InFlightFetch] = []) -> DaemonStats {
        var stats = DaemonStats()
        stats.version = imagecachedVersion
        let time = now()
        stats.time = time.timeIntervalSince1970
        stats.uptimeSeconds = time.timeIntervalSince(started)
        stats.inFlightFetches = Array(inFlight.sorted { ($0.waiters, $0.seconds, $1.url) > ($1.waiters, $1.seconds, $0.url) }
            .prefix(Self.inFlightListLimit))
        stats.recentErrors = recentErrors.withLock { $0.reversed() }
        for (index, outcome) in ServedOutcome.allCases.enumerated() {
            stats.requests[outcome.rawValue] = requests[index].current
            stats.servedBytes[outcome.rawValue] = servedBytes[index].current
        }
        stats.upstream.transfers = upstreamResults.withLock { $0 }
        stats.upstream.bytes = upstreamBytes.current
        stats.upstream.seconds = upstreamSeconds.snapshot
        stats.upstream.inFlight = fetchesInFlight
        stats.upstream.paused = upstreamPauses.current
        stats.upstream.inFlightBytes = inFlightBytes.load(ordering: .relaxed)
        stats.coalescing.waitersPerFetch = fetchWaiters.snapshot
        stats.memory = memory
        stats.disk = disk
        stats.errors = errors.withLock { $0 }
        stats.topHosts = Array(hosts.withLock { Array($0.values) }
            .sorted { ($0.transfers, $0.bytes, $1.host) > ($1.transfers, $1.bytes, $0.host) }.prefix(topHosts))
        stats.prefetched = prefetched.current
        var transforms = DaemonStats.Transforms()
        for (key, count) in transformResults.withLock({ $0 }) {
            let parts = key.split(separator: " ", maxSplits: 1).map(String.init)
            transforms.results[parts[0], default: [:]][parts.count > 1 ? parts[1] : "ok"] = count
        }
        transforms.seconds = transformSeconds.snapshot
        transforms.bytesIn = transformBytesIn.current
        transforms.bytesOut = transformBytesOut.current
        transforms.workers = transformQueue.workers
        transforms.running = transformQueue.running
        transforms.queued = transformQueue.queued
        transforms.pixelCache = pixelCache
        stats.transforms = transforms
        stats.reloads = reloads.current
        stats.reloadFailures = reloadFailures.current
        stats.tls = tlsStatus.withLock { $0 }?()
        stats.interceptCA = interceptCA.withLock { $0 }.map { ca in
            var ca = ca
            ca.expirySeconds = ca.notAfter - time.timeIntervalSince1970
            return ca
        }
        return stats
    }
}

// MARK: - The sink that counts
