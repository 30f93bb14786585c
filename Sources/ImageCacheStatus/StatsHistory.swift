// StatsHistory: the daemon's own time series, for the status page (/_imagecached/) and scripts
// (/_imagecached/stats/history). Pure value; the Proxy keeps one, confined to its queue, and records a sample every
// `status-history-interval` (10 s) from a timer (Daemon), with the time from the daemon's clock.
//
// Data model
//   ring       at most `capacity` samples (`status-history-length` / interval: 360 for one hour at 10 s), oldest
//              first once read; the storage is allocated once, at its full size, and a new sample overwrites the
//              oldest: the memory held never grows with the daemon's uptime.
//   previous   the counters (a DaemonStats) at the last sample, and when: the next sample is the difference.
// A sample holds what happened in its interval (requests and bytes by outcome, upstream bytes and transfers, fetches
// and the clients they served, errors, evictions, transforms by format and their latency) and the gauges at its end
// (tiers' bytes and entries, fetches in flight). Outcomes that did not occur are left out of its dictionaries.
// Size: a sample is about 1.4 KB at most (three small dictionaries of short keys, which Swift stores inline, plus
// 20 numbers; measured with every outcome and five formats present: 4.1 MB resident for 2880 samples), so the
// default ring holds about 0.5 MB, and the largest allowed (2880 samples) about 4.1 MB.

public import Foundation

/// What happened in one interval of the history, and the gauges at its end.
public struct HistorySample: Sendable, Codable, Equatable {
    /// End of the interval, seconds since 1970 (the daemon's wall clock).
    public var t: Double
    /// Length of the interval, seconds.
    public var seconds: Double
    /// Requests answered, by outcome (ServedOutcome's names; only those that occurred).
    public var requests: [String: Int] = [:]
    /// Response body bytes written to clients, by outcome (only those that occurred).
    public var servedBytes: [String: Int] = [:]
    /// Body bytes received from origins.
    public var upstreamBytes = 0
    /// Upstream transfers ended, and how many of those failed (an error kind: not ok, not_modified, cancelled or
    /// restarted).
    public var upstreamTransfers = 0
    public var upstreamFailures = 0
    /// Fetches ended, and the clients they served (more clients than fetches: coalescing saved the difference).
    public var fetches = 0
    public var waiters = 0
    /// Errors counted (every kind).
    public var errors = 0
    /// Memory tier at the end of the interval, and entries it evicted during it.
    public var memoryBytes = 0
    public var memoryEntries = 0
    public var memoryEvictions = 0
    /// Disk tier likewise (absent without one); evictions count those for its limit and its max age.
    public var diskBytes: Int?
    public var diskEntries: Int?
    public var diskEvictions: Int?
    /// Fetches in flight at the end of the interval.
    public var inFlight = 0
    /// Transforms that ended well, by output format (only formats that occurred), and those refused or failed.
    public var transforms: [String: Int] = [:]
    public var transformFailures = 0
    /// Mean and 95th percentile time on a worker of the transforms that ran in the interval, milliseconds (the
    /// percentile is its histogram bucket's upper bound); nil when none ran.
    public var transformMeanMilliseconds: Double?
    public var transformP95Milliseconds: Double?

    public init(t: Double, seconds: Double) {
        self.t = t
        self.seconds = seconds
    }

    /// What happened between two snapshots of the counters, `from` taken at `start` and `to` at `end`.
    public static func between(_ from: DaemonStats, _ to: DaemonStats, start: Date, end: Date) -> HistorySample {
        var sample = HistorySample(t: end.timeIntervalSince1970, seconds: max(0, end.timeIntervalSince(start)))
        func delta(_ now: Int, _ before: Int) -> Int { max(0, now - before) }
        func deltas(_ now: [String: Int], _ before: [String: Int]) -> [String: Int] {
            var result: [String: Int] = [:]
            for (name, value) in now {
                let change = delta(value, before[name] ?? 0)
                if change > 0 { result[name] = change }
            }
            return result
        }
        sample.requests = deltas(to.requests, from.requests)
        sample.servedBytes = deltas(to.servedBytes, from.servedBytes)
        sample.upstreamBytes = delta(to.upstream.bytes, from.upstream.bytes)
        let transfers = deltas(to.upstream.transfers, from.upstream.transfers)
        sample.upstreamTransfers = transfers.values.reduce(0, +)
        sample.upstreamFailures = transfers.filter { !Self.transferResultsThatAreNotFailures.contains($0.key) }.values.reduce(0, +)
        sample.fetches = delta(to.coalescing.fetches, from.coalescing.fetches)
        sample.waiters = delta(to.coalescing.waiters, from.coalescing.waiters)
        sample.errors = deltas(to.errors, from.errors).values.reduce(0, +)
        sample.memoryBytes = to.memory.bytes
        sample.memoryEntries = to.memory.entries
        sample.memoryEvictions = delta(to.memory.evictions, from.memory.evictions)
        if let disk = to.disk {
            sample.diskBytes = disk.bytes
            sample.diskEntries = disk.entries
            let before = from.disk.map { $0.evicted + $0.expired } ?? 0
            sample.diskEvictions = delta(disk.evicted + disk.expired, before)
        }
        sample.inFlight = to.upstream.inFlight
        if let transforms = to.transforms {
            let earlier = from.transforms ?? DaemonStats.Transforms()
            for (format, results) in transforms.results {
                for (result, count) in results {
                    let change = delta(count, earlier.results[format]?[result] ?? 0)
                    guard change > 0 else { continue }
                    if result == "ok" { sample.transforms[format, default: 0] += change } else { sample.transformFailures += change }
                }
            }
            let ran = delta(transforms.seconds.count, earlier.seconds.count)
            if ran > 0 {
                sample.transformMeanMilliseconds = max(0, transforms.seconds.sum - earlier.seconds.sum) / Double(ran) * 1000
                sample.transformP95Milliseconds = Self.percentile(0.95, of: ran, now: transforms.seconds, before: earlier.seconds)
                    .map { $0 * 1000 }
            }
        }
        return sample
    }

    /// The results of upstream transfers that ended without an error (Fetch, Passthrough).
    static let transferResultsThatAreNotFailures: Set<String> = ["ok", "not_modified", "cancelled", "restarted"]

    /// The upper bound of the bucket holding the `fraction` quantile of the `count` observations made between two
    /// snapshots of one histogram (+Inf: above every bound, reported as the largest bound).
    static func percentile(_ fraction: Double, of count: Int, now: HistogramSnapshot, before: HistogramSnapshot) -> Double? {
        let rank = Int((fraction * Double(count)).rounded(.up))
        for (index, bucket) in now.buckets.enumerated() {
            let earlier = index < before.buckets.count ? before.buckets[index].count : 0
            if bucket.count - earlier >= rank {
                return bucket.le.isInfinite ? now.buckets.dropLast().last?.le : bucket.le
            }
        }
        return nil
    }
}

/// The /_imagecached/stats/history document.
public struct HistoryDocument: Sendable, Codable, Equatable {
    /// Seconds between samples, and how many the ring keeps.
    public var interval: Double
    public var capacity: Int
    /// The daemon's wall clock when the document was made, seconds since 1970.
    public var now: Double
    /// Every outcome's name, in the order the page stacks them, and those answered from stored bytes (the hit ratio's
    /// numerator: DaemonStats.hitRatio), so that a reader needs no rule of its own.
    public var outcomes: [String]
    public var fromCache: [String]
    /// Recorded samples, oldest first (with `?since=T`: only those that end after T).
    public var samples: [HistorySample]
    /// The interval in progress: what happened since the last sample, until `now`.
    public var current: HistorySample
}

/// The ring of samples. See the data model above.
public struct StatsHistory: Sendable {
    /// Largest ring allowed (`status-history-length` / `status-history-interval`).
    public static let maximumCapacity = 2880
    public let interval: Double
    public let capacity: Int
    /// Samples in the order they were recorded, `oldest` the index of the oldest once the ring is full.
    private var ring: [HistorySample]
    private var oldest = 0
    private var previous: DaemonStats
    private var previousTime: Date

    /// An empty history whose first sample counts from `start` (the counters then are `baseline`: zero at start-up).
    public init(interval: Double, capacity: Int, start: Date, baseline: DaemonStats = DaemonStats()) {
        precondition(interval > 0 && capacity >= 1 && capacity <= Self.maximumCapacity, "history interval and capacity out of range")
        self.interval = interval
        self.capacity = capacity
        ring = []
        ring.reserveCapacity(capacity)
        previous = baseline
        previousTime = start
    }

    /// Samples kept, at most `capacity`.
    public var count: Int { ring.count }

    /// The storage's allocated size, in samples: `capacity` from the start, whatever the uptime.
    public var storageCapacity: Int { ring.capacity }

    /// Samples kept, oldest first.
    public var samples: [HistorySample] {
        Array(ring[oldest...]) + ring[..<oldest]
    }

    /// The samples that end after `since`, oldest first, walked back from the newest: a poll asks for the few since
    /// its last one, not for the whole ring. (After the wall clock went back, samples older than a newer one that
    /// ends before `since` are not repeated: the poller has them.)
    func samples(after since: Double) -> [HistorySample] {
        var newer: [HistorySample] = []
        var index = ring.count - 1 + oldest
        for _ in 0..<ring.count {
            let sample = ring[index % ring.count]
            guard sample.t > since else { break }
            newer.append(sample)
            index -= 1
        }
        return newer.reversed()
    }

    /// Records what happened since the last sample (the counters are now `stats`, the time `time`).
    public mutating func record(_ stats: DaemonStats, at time: Date) {
        let sample = HistorySample.between(previous, stats, start: previousTime, end: time)
        if ring.count < capacity {
            ring.append(sample)
        } else {
            ring[oldest] = sample
            oldest = (oldest + 1) % capacity
        }
        previous = stats
        previousTime = time
    }

    /// The interval in progress: what happened since the last sample, until `time`.
    public func pending(_ stats: DaemonStats, at time: Date) -> HistorySample {
        HistorySample.between(previous, stats, start: previousTime, end: time)
    }

    /// The document for /_imagecached/stats/history: the samples that end after `since` (every one without it), and
    /// the interval in progress.
    public func document(since: Double?, stats: DaemonStats, at time: Date) -> HistoryDocument {
        return HistoryDocument(interval: interval, capacity: capacity, now: time.timeIntervalSince1970,
                               outcomes: ServedOutcome.allCases.map(\.rawValue),
                               fromCache: ServedOutcome.allCases.filter(\.fromCache).map(\.rawValue),
                               samples: since.map { samples(after: $0) } ?? samples, current: pending(stats, at: time))
    }
}

extension HistoryDocument {
    /// The JSON of /_imagecached/stats/history.
    public func json() -> [UInt8] {
        Array(StatsJSON.encode(self)) + [UInt8(ascii: "\n")]
    }
}
