// Metrics: the daemon's counters and histograms, rendered on request as Prometheus text
// (/_imagecached/metrics) or JSON (/_imagecached/stats).
//
// Data model
//   requests, servedBytes     one relaxed atomic per cache outcome (hit, disk_hit, stale, miss, ...), bumped on the
//                             queue that answers: a memory hit on its connection's loop, everything else as its sink
//                             is told the response's outcome and sees its body (MetricsSink).
//   upstream*, fetchWaiters   bumped by Fetch on the proxy queue, still through atomics (no lock, no hop).
//   errors, hosts             string-keyed, rare (errors) or slow-path only (hosts: one update per upstream transfer):
//                             each behind its own Mutex. Each error is also kept with its reason in `recentErrors`,
//                             a ring of the last `recentErrorLimit` (its own Mutex; the status page lists them).
//   gauges                    memory and disk bytes, entries, evictions: read from the tiers when rendering.
// Nothing here is read on a request path; rendering reads every atomic once (a snapshot that may straddle a request).
//
// Hand-written rather than swift-metrics + swift-prometheus: see docs/operations.md (Metrics) for the measured
// build cost and the reasoning.

internal import ImageCacheSystem
internal import ImageCacheHTTP
internal import ImageCacheConfig
internal import ImageCacheServer
package import ImageCacheStore
public import Foundation
internal import Synchronization

/// A relaxed atomic counter in a class, so that counters can sit in arrays (Atomic is not copyable).
package final class Counter: Sendable {
    private let value = Atomic<Int>(0)
    package func add(_ amount: Int = 1) { value.wrappingAdd(amount, ordering: .relaxed) }
    var current: Int { value.load(ordering: .relaxed) }
}

/// A Prometheus histogram: cumulative buckets rendered from per-bucket atomic counts.
package final class Histogram: Sendable {
    let bounds: [Double]
    /// counts[i] counts observations in (bounds[i-1], bounds[i]]; the last one counts those above every bound.
    private let counts: [Counter]
    /// Sum of observations, in millionths (atomics hold integers).
    private let sumMicros = Counter()

    init(bounds: [Double]) {
        self.bounds = bounds
        counts = (0...bounds.count).map { _ in Counter() }
    }

    func observe(_ value: Double) {
        let index = bounds.firstIndex { value <= $0 } ?? bounds.count
        counts[index].add()
        sumMicros.add(Int((value * 1_000_000).rounded()))
    }

    struct Snapshot: Sendable, Codable, Equatable {
        /// (upper bound, cumulative count); the last bound is +Inf.
        var buckets: [Bucket]
        var count: Int
        var sum: Double
        struct Bucket: Sendable, Codable, Equatable {
            var le: Double
            var count: Int
        }
    }

    var snapshot: Snapshot {
        var cumulative = 0
        var buckets: [Snapshot.Bucket] = []
        for (index, counter) in counts.enumerated() {
            cumulative += counter.current
            buckets.append(Snapshot.Bucket(le: index < bounds.count ? bounds[index] : .infinity, count: cumulative))
        }
        return Snapshot(buckets: buckets, count: cumulative, sum: Double(sumMicros.current) / 1_000_000)
    }
}

/// How a request was answered, as counted (`CacheOutcome.served`: the X-Cache vocabulary, with disk hits told apart;
/// `error` for the daemon's own error answers).
public enum ServedOutcome: String, Sendable, CaseIterable, Codable {
    case hit, diskHit = "disk_hit", stale, miss, coalesced, revalidated, expired, bypass, pass, error

    /// Served from stored bytes without transferring the body upstream.
    var fromCache: Bool { [.hit, .diskHit, .stale, .revalidated].contains(self) }
}

extension CacheOutcome {
    /// The label the response is counted under (requests_total, served_bytes_total by outcome).
    var served: ServedOutcome {
        guard let forward else { return (ttl ?? 0) < 0 ? .stale : detail == "disk" ? .diskHit : .hit }
        if collapsed { return .coalesced }
        switch forward {
        case _ where revalidated: return .revalidated
        case .bypass: return .bypass
        case .method: return .pass
        case _ where forwardStatus == 304: return .pass   // a 304 that answered no conditional request (xCache)
        case .stale: return .expired
        case .miss, .request, .varyMiss: return .miss
        }
    }
}

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
    package func snapshot(memory: MemoryCache, memoryLimitBytes: Int, disk: DiskCache?, fetchesInFlight: Int, topHosts: Int = 10,
                          transformQueue: (workers: Int, running: Int, queued: Int) = (0, 0, 0),
                          pixelCache: DaemonStats.Transforms.PixelCacheStats? = nil,
                          inFlight: [DaemonStats.InFlightFetch] = []) -> DaemonStats {
        var stats = DaemonStats()
        stats.version = imagecachedVersion
        stats.uptimeSeconds = now().timeIntervalSince(started)
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
        stats.memory = .init(bytes: memory.totalCost, entries: memory.count, limitBytes: memoryLimitBytes,
                             evictions: memory.evictionCount)
        if let disk {
            let tier = disk.stats
            stats.disk = .init(bytes: tier.bytes, entries: tier.entries, limitBytes: disk.configuration.limitBytes,
                               evictions: tier.evicted, expired: tier.expired, writeErrors: tier.writeErrors,
                               removedCorrupt: tier.removedCorrupt, indexLoaded: tier.indexLoaded)
        }
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
        return stats
    }
}

/// Upstream traffic to one host.
public struct HostStats: Sendable, Codable, Equatable {
    public var host: String
    public var transfers = 0
    public var bytes = 0
}

/// The /_imagecached/stats document (also what `imagecached stats` reads).
public struct DaemonStats: Sendable, Codable, Equatable {
    public struct Upstream: Sendable, Codable, Equatable {
        /// Transfers ended, by result ("ok" or an error kind).
        public var transfers: [String: Int] = [:]
        /// Body bytes received from origins.
        public var bytes = 0
        var seconds = Histogram.Snapshot(buckets: [], count: 0, sum: 0)
        /// Fetches (upstream or disk) in flight now.
        public var inFlight = 0
        /// Transfers paused for backpressure since start.
        public var paused = 0
        /// Bytes of bodies in flight now (see ProxyMetrics.inFlightBytes).
        public var inFlightBytes = 0
        public var count: Int { seconds.count }
        public var totalSeconds: Double { seconds.sum }
    }
    public struct Coalescing: Sendable, Codable, Equatable {
        var waitersPerFetch = Histogram.Snapshot(buckets: [], count: 0, sum: 0)
        /// Fetches finished and the clients they served.
        public var fetches: Int { waitersPerFetch.count }
        public var waiters: Int { Int(waitersPerFetch.sum.rounded()) }
    }
    public struct Tier: Sendable, Codable, Equatable {
        public var bytes = 0
        public var entries = 0
        public var limitBytes = 0
        public var evictions = 0
        public var expired: Int?
        public var writeErrors: Int?
        public var removedCorrupt: Int?
        public var indexLoaded: Bool?
    }

    public var version = ""
    public var uptimeSeconds = 0.0
    /// Requests by outcome (hit, disk_hit, stale, miss, coalesced, revalidated, expired, bypass, pass, error).
    public var requests: [String: Int] = [:]
    /// Body bytes written to clients, by outcome.
    public var servedBytes: [String: Int] = [:]
    public var upstream = Upstream()
    public var coalescing = Coalescing()
    public var memory = Tier()
    public var disk: Tier?
    /// Errors by kind.
    public var errors: [String: Int] = [:]
    /// Hosts with the most upstream transfers.
    public var topHosts: [HostStats] = []
    public var prefetched = 0
    public var reloads = 0
    public var reloadFailures = 0
    /// Image transforms (absent in documents from daemons without them).
    public var transforms: Transforms?
    /// The fetches and transforms in flight now, the most waited-on first (at most `ProxyMetrics.inFlightListLimit`).
    public var inFlightFetches: [InFlightFetch]?
    /// The last errors, newest first (at most `ProxyMetrics.recentErrorLimit`).
    public var recentErrors: [ErrorRecord]?

    /// One fetch (from the origin, or the disk) or transform in flight.
    public struct InFlightFetch: Sendable, Codable, Equatable {
        /// The URL fetched (a transform: its source URL and canonical options).
        public var url: String
        /// "fetch" or "transform".
        public var kind: String
        /// Clients waiting on it (more than one: coalesced).
        public var waiters: Int
        /// Body bytes received so far (a fetch).
        public var receivedBytes: Int
        /// Seconds since it started.
        public var seconds: Double
        public init(url: String, kind: String, waiters: Int, receivedBytes: Int, seconds: Double) {
            self.url = url
            self.kind = kind
            self.waiters = waiters
            self.receivedBytes = receivedBytes
            self.seconds = seconds
        }
    }

    /// One error, as counted in `errors` and logged.
    public struct ErrorRecord: Sendable, Codable, Equatable {
        /// When, seconds since 1970 (the daemon's wall clock).
        public var time: Double
        /// The kind it is counted under in `errors` ("refused_404", "upstream_timeout", ...).
        public var kind: String
        /// The status answered, when a client was answered with one.
        public var status: Int?
        /// The one-line reason (as in the response body and the log), at most 300 characters.
        public var reason: String
        /// The request target or URL it concerned, at most 300 characters.
        public var target: String
    }

    public struct Transforms: Sendable, Codable, Equatable {
        /// Transforms ended, by output format ("-" when none was chosen) then result ("ok" or the failure's label).
        public var results: [String: [String: Int]] = [:]
        var seconds = Histogram.Snapshot(buckets: [], count: 0, sum: 0)
        /// Source bytes read and result bytes produced.
        public var bytesIn = 0
        public var bytesOut = 0
        public var workers = 0
        public var running = 0
        public var queued = 0
        /// The decoded levels of JPEG and PNG sources kept for their next variants (`transform-pixel-cache`).
        public var pixelCache: PixelCacheStats?
        public struct PixelCacheStats: Sendable, Codable, Equatable {
            public var bytes = 0
            public var limitBytes = 0
            public var entries = 0
            /// Lookups that found a level (a decode saved), and those that did not.
            public var hits = 0
            public var misses = 0
            public var evictions = 0
        }
        public var total: Int { results.values.reduce(0) { $0 + $1.values.reduce(0, +) } }
        /// Mean time on a worker, milliseconds (nil before the first).
        public var meanMilliseconds: Int? { seconds.count == 0 ? nil : Int((seconds.sum / Double(seconds.count) * 1000).rounded()) }
    }

    public init() {}

    /// The JSON of /_imagecached/stats (+Inf histogram bounds written as "+Inf").
    public func json() -> [UInt8] {
        Array(StatsJSON.encode(self, [.prettyPrinted])) + [UInt8(ascii: "\n")]
    }

    /// Reads what `json()` wrote.
    public static func decode(_ data: Data) throws -> DaemonStats {
        let decoder = JSONDecoder()
        decoder.nonConformingFloatDecodingStrategy = .convertFromString(positiveInfinity: "+Inf", negativeInfinity: "-Inf", nan: "NaN")
        return try decoder.decode(DaemonStats.self, from: data)
    }

    /// Requests answered from stored bytes (hit, disk_hit, stale, revalidated) over all requests answered.
    public var hitRatio: Double {
        let total = requests.values.reduce(0, +)
        let fromCache = ServedOutcome.allCases.filter(\.fromCache).reduce(0) { $0 + (requests[$1.rawValue] ?? 0) }
        return total == 0 ? 0 : Double(fromCache) / Double(total)
    }

    /// Body bytes served from stored bytes.
    public var bytesServedFromCache: Int {
        ServedOutcome.allCases.filter(\.fromCache).reduce(0) { $0 + (servedBytes[$1.rawValue] ?? 0) }
    }
}

// MARK: - Prometheus text

extension DaemonStats {
    /// The Prometheus text exposition format (version 0.0.4).
    public var prometheusText: String {
        var out = ""
        func family(_ name: String, _ type: String, _ help: String) {
            out += "# HELP imagecached_\(name) \(help)\n# TYPE imagecached_\(name) \(type)\n"
        }
        func sample(_ name: String, _ labels: [(String, String)] = [], _ value: Double) {
            out += "imagecached_" + name
            if !labels.isEmpty {
                out += "{" + labels.map { "\($0.0)=\"\(Self.escape($0.1))\"" }.joined(separator: ",") + "}"
            }
            out += " " + Self.number(value) + "\n"
        }
        func histogram(_ name: String, _ help: String, _ snapshot: Histogram.Snapshot) {
            family(name, "histogram", help)
            for bucket in snapshot.buckets {
                sample(name + "_bucket", [("le", bucket.le.isInfinite ? "+Inf" : Self.number(bucket.le))], Double(bucket.count))
            }
            sample(name + "_sum", [], snapshot.sum)
            sample(name + "_count", [], Double(snapshot.count))
        }

        family("requests_total", "counter", "Requests answered through the cache, by outcome.")
        for outcome in ServedOutcome.allCases { sample("requests_total", [("outcome", outcome.rawValue)], Double(requests[outcome.rawValue] ?? 0)) }
        family("served_bytes_total", "counter", "Response body bytes written to clients, by outcome.")
        for outcome in ServedOutcome.allCases { sample("served_bytes_total", [("outcome", outcome.rawValue)], Double(servedBytes[outcome.rawValue] ?? 0)) }
        family("upstream_transfers_total", "counter", "Upstream transfers ended, by result (ok or the error kind).")
        for (result, count) in upstream.transfers.sorted(by: { $0.key < $1.key }) { sample("upstream_transfers_total", [("result", result)], Double(count)) }
        family("upstream_received_bytes_total", "counter", "Body bytes received from origins.")
        sample("upstream_received_bytes_total", [], Double(upstream.bytes))
        histogram("upstream_duration_seconds", "Time from the start of an upstream transfer to its end.", upstream.seconds)
        family("fetches_in_flight", "gauge", "Fetches (upstream or disk) in flight.")
        sample("fetches_in_flight", [], Double(upstream.inFlight))
        family("upstream_paused_total", "counter", "Upstream transfers paused because a client was behind while the in-flight budget was full.")
        sample("upstream_paused_total", [], Double(upstream.paused))
        family("inflight_bytes", "gauge", "Bytes of bodies in flight: retained to be stored, waiting to be written to disk, or not yet taken by the slowest client.")
        sample("inflight_bytes", [], Double(upstream.inFlightBytes))
        histogram("fetch_waiters", "Clients served by one fetch (more than 1: coalesced).", coalescing.waitersPerFetch)
        family("memory_bytes", "gauge", "Bytes held by the memory tier.")
        sample("memory_bytes", [], Double(memory.bytes))
        family("memory_entries", "gauge", "Entries in the memory tier.")
        sample("memory_entries", [], Double(memory.entries))
        family("memory_limit_bytes", "gauge", "Byte budget of the memory tier.")
        sample("memory_limit_bytes", [], Double(memory.limitBytes))
        family("memory_evictions_total", "counter", "Entries evicted from the memory tier to respect its limits.")
        sample("memory_evictions_total", [], Double(memory.evictions))
        if let disk {
            family("disk_bytes", "gauge", "Bytes held by the disk tier.")
            sample("disk_bytes", [], Double(disk.bytes))
            family("disk_entries", "gauge", "Entries in the disk tier.")
            sample("disk_entries", [], Double(disk.entries))
            family("disk_limit_bytes", "gauge", "Byte budget of the disk tier.")
            sample("disk_limit_bytes", [], Double(disk.limitBytes))
            family("disk_evictions_total", "counter", "Entries evicted from the disk tier, by reason.")
            sample("disk_evictions_total", [("reason", "limit")], Double(disk.evictions))
            sample("disk_evictions_total", [("reason", "max_age")], Double(disk.expired ?? 0))
        }
        family("errors_total", "counter", "Errors, by kind.")
        for (kind, count) in errors.sorted(by: { $0.key < $1.key }) { sample("errors_total", [("kind", kind)], Double(count)) }
        family("prefetched_total", "counter", "URLs warmed through /_imagecached/prefetch.")
        sample("prefetched_total", [], Double(prefetched))
        family("config_reloads_total", "counter", "Configuration reloads (SIGHUP), by result.")
        sample("config_reloads_total", [("result", "applied")], Double(reloads))
        sample("config_reloads_total", [("result", "refused")], Double(reloadFailures))
        if let transforms {
            family("transforms_total", "counter", "Image transforms ended, by output format and result (ok or the refusal's limit).")
            for (format, results) in transforms.results.sorted(by: { $0.key < $1.key }) {
                for (result, count) in results.sorted(by: { $0.key < $1.key }) {
                    sample("transforms_total", [("format", format), ("result", result)], Double(count))
                }
            }
            histogram("transform_duration_seconds", "Time a transform ran on a worker (decode, process, encode).", transforms.seconds)
            family("transform_source_bytes_total", "counter", "Source bytes read by transforms.")
            sample("transform_source_bytes_total", [], Double(transforms.bytesIn))
            family("transform_result_bytes_total", "counter", "Bytes of transform results.")
            sample("transform_result_bytes_total", [], Double(transforms.bytesOut))
            family("transform_workers", "gauge", "Transform workers.")
            sample("transform_workers", [], Double(transforms.workers))
            family("transform_running", "gauge", "Transforms running now.")
            sample("transform_running", [], Double(transforms.running))
            family("transform_queue_depth", "gauge", "Transforms waiting for a worker.")
            sample("transform_queue_depth", [], Double(transforms.queued))
            if let cache = transforms.pixelCache {
                family("transform_pixel_cache_bytes", "gauge", "Bytes of decoded source levels (JPEG, opaque PNG) kept for their next variants.")
                sample("transform_pixel_cache_bytes", [], Double(cache.bytes))
                family("transform_pixel_cache_lookups_total", "counter", "Lookups of a source level: hit (a decode saved) or miss.")
                sample("transform_pixel_cache_lookups_total", [("result", "hit")], Double(cache.hits))
                sample("transform_pixel_cache_lookups_total", [("result", "miss")], Double(cache.misses))
                family("transform_pixel_cache_evictions_total", "counter", "Source levels evicted to stay within transform-pixel-cache.")
                sample("transform_pixel_cache_evictions_total", [], Double(cache.evictions))
            }
        }
        family("uptime_seconds", "gauge", "Seconds since the daemon started.")
        sample("uptime_seconds", [], uptimeSeconds)
        return out
    }

    static func number(_ value: Double) -> String {
        if value.isInfinite { return value > 0 ? "+Inf" : "-Inf" }
        if value == value.rounded(), abs(value) < 1e15 { return String(Int(value)) }
        return String(value)
    }

    static func escape(_ text: String) -> String {
        text.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"")
            .replacingOccurrences(of: "\n", with: "\\n")
    }
}

// MARK: - The sink that counts

/// Counts one response's outcome (as noted before its head: `note`; none noted, the daemon's own error answer) and
/// body bytes, then forwards every call. Wraps the sink of every request that leaves the connection's loop (misses,
/// stale, bypass, disk); fresh memory hits are counted where they are answered, without a wrapper.
final class MetricsSink: ResponseSink {
    private let inner: any ResponseSink
    private let metrics: ProxyMetrics
    private let countsBody: Bool
    /// The outcome, once the head went out (index into ServedOutcome.allCases; -1 before).
    private let outcome = Atomic<Int>(-1)

    init(wrapping inner: any ResponseSink, metrics: ProxyMetrics, isHead: Bool) {
        self.inner = inner
        self.metrics = metrics
        countsBody = !isHead
    }

    func note(_ outcome: CacheOutcome) {
        started(outcome.served)
        inner.note(outcome)
    }

    /// The head goes out: counted as the noted outcome, or as an error when none was noted.
    private func started() { started(.error) }

    private func started(_ outcome: ServedOutcome) {
        let index = ServedOutcome.allCases.firstIndex(of: outcome)!
        guard self.outcome.compareExchange(expected: -1, desired: index, ordering: .relaxed).exchanged else { return }
        metrics.served(outcome)
    }

    private func count(_ bytes: Int) {
        let index = outcome.load(ordering: .relaxed)
        guard countsBody, index >= 0, bytes > 0 else { return }
        metrics.servedBytes(ServedOutcome.allCases[index], bytes)
    }

    func interim(_ head: HTTPResponseHead) { inner.interim(head) }

    func head(_ head: HTTPResponseHead, bodyLength: Int?) {
        started()
        inner.head(head, bodyLength: bodyLength)
    }

    func body(_ chunk: [UInt8]) {
        count(chunk.count)
        inner.body(chunk)
    }

    func end() { inner.end() }

    func respond(_ head: HTTPResponseHead, body: [UInt8]) {
        started()
        if ![304, 416].contains(head.status) { count(body.count) }
        inner.respond(head, body: body)
    }

    /// Passes the prepared head through, so a hit answered through this sink keeps the serialised fast path.
    func respond(_ head: SerializedResponseHead, extra: HTTPHeaders, body: [UInt8]) {
        startedPrepared(head, extra: extra, bodyBytes: body.count)
        inner.respond(head, extra: extra, body: body)
    }

    func respond(_ head: SerializedResponseHead, extra: HTTPHeaders, file: FileBody) {
        startedPrepared(head, extra: extra, bodyBytes: file.length)
        inner.respond(head, extra: extra, file: file)
    }

    func respond(_ head: SerializedResponseHead, extra: HTTPHeaders, part: ArraySlice<UInt8>) {
        startedPrepared(head, extra: extra, bodyBytes: part.count)
        inner.respond(head, extra: extra, part: part)
    }

    private func startedPrepared(_ head: SerializedResponseHead, extra: HTTPHeaders, bodyBytes: Int) {
        started()
        if ![304, 416].contains(head.status) { count(bodyBytes) }
    }

    func abort() { inner.abort() }

    func onCancel(_ callback: @escaping @Sendable () -> Void) { inner.onCancel(callback) }
    var executor: (any SinkExecutor)? { inner.executor }
    var bytesWritten: Int { inner.bytesWritten }
    func whenWritten(_ bytes: Int, _ callback: @escaping @Sendable () -> Void) { inner.whenWritten(bytes, callback) }
}

/// The encoding of every stats document (/stats, /stats/history, the status page's embedded data): keys sorted,
/// numbers that are not finite as "+Inf", "-Inf" and "NaN" (a histogram's last bound), "{}" if encoding fails.
enum StatsJSON {
    static func encode<Value: Encodable>(_ value: Value, _ formatting: JSONEncoder.OutputFormatting = []) -> Data {
        let encoder = JSONEncoder()
        encoder.outputFormatting = formatting.union(.sortedKeys)
        encoder.nonConformingFloatEncodingStrategy = .convertToString(positiveInfinity: "+Inf", negativeInfinity: "-Inf", nan: "NaN")
        return (try? encoder.encode(value)) ?? Data("{}".utf8)
    }
}
