import Foundation
import Testing
@testable import ImageCacheStatus

@Suite("StatsHistory: the status page's time series, a fixed-size ring of differences", .timeLimit(.minutes(1)))
struct StatsHistoryTests {
    static let start = Date(timeIntervalSince1970: 1_800_000_000)

    /// Counters after `step` steps of a steady load: per step 7 hits, 2 misses, 1 coalesced, 1000 bytes per hit.
    static func counters(step: Int) -> DaemonStats {
        var stats = DaemonStats()
        stats.requests = ["hit": 7 * step, "miss": 2 * step, "coalesced": step, "stale": 0]
        stats.servedBytes = ["hit": 7000 * step, "miss": 500 * step]
        stats.upstream.bytes = 500 * step
        stats.upstream.transfers = ["ok": 2 * step, "timeout": step / 2]
        stats.memory = .init(bytes: 10 * step, entries: step, limitBytes: 1 << 20, evictions: step / 3)
        return stats
    }

    @Test("over ten hours driven by a test clock the ring keeps one hour: 360 samples, its storage never grows, oldest dropped first")
    func longRun() {
        // Given an hour's ring at 10 s
        var history = StatsHistory(interval: 10, capacity: 360, start: Self.start)
        let storage = history.storageCapacity
        // When ten hours of samples are recorded, the clock moved 10 s each time
        var time = Self.start
        for step in 1...3600 {
            time = time.addingTimeInterval(10)
            history.record(Self.counters(step: step), at: time)
            // Then at every point the ring holds at most its capacity, in storage allocated at the start
            if history.count > 360 || history.storageCapacity != storage { break }
        }
        #expect(history.count == 360)
        #expect(history.storageCapacity == storage)
        let samples = history.samples
        #expect(samples.count == 360)
        #expect(samples.last?.t == time.timeIntervalSince1970)
        #expect(samples.first?.t == time.timeIntervalSince1970 - 359 * 10)
        #expect(zip(samples, samples.dropFirst()).allSatisfy { $1.t - $0.t == 10 })
        // Each sample is one step's difference, not the running total
        #expect(samples.allSatisfy { $0.requests == ["hit": 7, "miss": 2, "coalesced": 1] && $0.seconds == 10 })
        #expect(samples.allSatisfy { $0.servedBytes == ["hit": 7000, "miss": 500] && $0.upstreamBytes == 500 })
    }

    @Test("a sample holds what happened in its interval (outcomes that did not occur left out) and the gauges at its end")
    func sampleIsDifference() {
        // Given counters before and after an interval with a disk tier, transforms and errors
        var before = DaemonStats()
        before.requests = ["hit": 10, "miss": 5]
        before.coalescing.waitersPerFetch = .init(buckets: [], count: 4, sum: 9)
        before.errors = ["refused_404": 2]
        before.disk = .init(bytes: 100, entries: 1, limitBytes: 1000, evicted: 1, expired: 1)
        var transformsBefore = DaemonStats.Transforms()
        transformsBefore.results = ["webp": ["ok": 3]]
        transformsBefore.seconds = .init(buckets: [.init(le: 0.01, count: 1), .init(le: 0.1, count: 3), .init(le: .infinity, count: 3)],
                                         count: 3, sum: 0.12)
        before.transforms = transformsBefore
        var after = before
        after.requests = ["hit": 14, "miss": 5, "coalesced": 2]
        after.coalescing.waitersPerFetch = .init(buckets: [], count: 5, sum: 12)
        after.errors = ["refused_404": 3, "upstream_timeout": 1]
        after.disk = .init(bytes: 300, entries: 3, limitBytes: 1000, evicted: 2, expired: 3)
        after.upstream.inFlight = 2
        var transformsAfter = transformsBefore
        transformsAfter.results = ["webp": ["ok": 5], "avif": ["ok": 1, "max_megapixels": 1]]
        // 20 more: 19 within 100 ms, 1 above every bound
        transformsAfter.seconds = .init(buckets: [.init(le: 0.01, count: 1), .init(le: 0.1, count: 22), .init(le: .infinity, count: 23)],
                                        count: 23, sum: 0.12 + 2.0)
        after.transforms = transformsAfter
        // When
        let sample = HistorySample.between(before, after, start: Self.start, end: Self.start.addingTimeInterval(10))
        // Then
        #expect(sample.requests == ["hit": 4, "coalesced": 2])
        #expect(sample.fetches == 1 && sample.waiters == 3)
        #expect(sample.errors == 2)
        #expect(sample.diskBytes == 300 && sample.diskEntries == 3 && sample.diskEvictions == 3)
        #expect(sample.inFlight == 2)
        #expect(sample.transforms == ["webp": 2, "avif": 1] && sample.transformFailures == 1)
        #expect(abs((sample.transformMeanMilliseconds ?? 0) - 100) < 0.001)   // 2 s over 20
        #expect(sample.transformP95Milliseconds == 100)   // the 19th of 20 is within the 100 ms bucket
        #expect(sample.t == 1_800_000_010 && sample.seconds == 10)
    }

    @Test("counters that went down (a reset) and a clock that went back give zeros, never negative counts or lengths")
    func decreasingCountersAndClock() {
        // Given counters after ten steps, then after five (as if they were reset), the second taken earlier
        let sample = HistorySample.between(Self.counters(step: 10), Self.counters(step: 5), start: Self.start.addingTimeInterval(10),
                                           end: Self.start)
        // Then
        #expect(sample.requests.isEmpty && sample.servedBytes.isEmpty)
        #expect(sample.upstreamBytes == 0 && sample.upstreamTransfers == 0 && sample.memoryEvictions == 0)
        #expect(sample.seconds == 0)
        #expect(sample.memoryEntries == 5)   // a gauge is what it is at the end
    }

    @Test("upstream failures in a sample are the transfers that ended in an error, not revalidations, cancellations or restarts")
    func upstreamFailures() {
        var after = DaemonStats()
        after.upstream.transfers = ["ok": 5, "not_modified": 4, "cancelled": 3, "restarted": 2, "timeout": 1, "connect": 1]
        let sample = HistorySample.between(DaemonStats(), after, start: Self.start, end: Self.start.addingTimeInterval(10))
        #expect(sample.upstreamTransfers == 16 && sample.upstreamFailures == 2)
    }

    @Test("the document keeps the samples after ?since, and the interval in progress counts from the last sample to now")
    func documentSinceAndCurrent() {
        // Given three samples
        var history = StatsHistory(interval: 10, capacity: 5, start: Self.start)
        for step in 1...3 { history.record(Self.counters(step: step), at: Self.start.addingTimeInterval(Double(step) * 10)) }
        // When the document is asked for what came after the first, 4 s into the fourth interval
        let document = history.document(since: Self.start.timeIntervalSince1970 + 10, stats: Self.counters(step: 5),
                                        at: Self.start.addingTimeInterval(34))
        // Then
        #expect(document.samples.map(\.t) == [1_800_000_020, 1_800_000_030])
        #expect(document.current.requests["hit"] == 14 && document.current.seconds == 4)
        #expect(document.capacity == 5 && document.interval == 10 && document.now == 1_800_000_034)
        #expect(document.fromCache == ["hit", "disk_hit", "stale", "revalidated", "fleet_hit"])
        #expect(document.outcomes.count == ServedOutcome.allCases.count)
    }
}
