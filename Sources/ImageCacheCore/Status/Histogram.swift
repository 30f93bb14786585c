internal import ImageCacheSystem
internal import ImageCacheHTTP
internal import ImageCacheConfig
internal import ImageCacheServer
internal import ImageCacheStore
package import ImageCacheStatus
public import Foundation
internal import Synchronization

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

    var snapshot: HistogramSnapshot {
        var cumulative = 0
        var buckets: [HistogramSnapshot.Bucket] = []
        for (index, counter) in counts.enumerated() {
            cumulative += counter.current
            buckets.append(HistogramSnapshot.Bucket(le: index < bounds.count ? bounds[index] : .infinity, count: cumulative))
        }
        return HistogramSnapshot(buckets: buckets, count: cumulative, sum: Double(sumMicros.current) / 1_000_000)
    }
}
