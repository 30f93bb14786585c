@testable import ImageCacheStore
import Testing

@Suite("FrequencySketch", .timeLimit(.minutes(1)))
struct FrequencySketchTests {
    @Test("estimates count accesses, never below the true count, saturating at 15")
    func counts() {
        var sketch = FrequencySketch(width: 4096)
        let hashes = (0..<500).map { "http://origin.test/\($0).jpg".hashValue }
        for (index, hash) in hashes.enumerated() {
            for _ in 0..<(index % 8) { sketch.increment(hash) }
        }
        var exact = 0
        for (index, hash) in hashes.enumerated() {
            let estimate = Int(sketch.estimate(hash))
            #expect(estimate >= index % 8)
            if estimate == index % 8 { exact += 1 }
        }
        #expect(exact >= 480)   // 500 keys in 4096 counters: collisions are rare
        let hot = "hot".hashValue
        for _ in 0..<40 { sketch.increment(hot) }
        #expect(sketch.estimate(hot) == FrequencySketch.maximum)
    }

    @Test("aging halves every counter after width additions, so old popularity fades")
    func aging() {
        var sketch = FrequencySketch(width: 64)
        let old = "old".hashValue
        for _ in 0..<12 { sketch.increment(old) }
        #expect(sketch.estimate(old) >= 12)
        // Other keys' accesses until the additions wrap (a halving): the sample size (64) of them.
        var other = 0
        var previous = sketch.additions
        while sketch.additions >= previous, other <= sketch.sampleSize {
            previous = sketch.additions
            #expect(sketch.estimate(old) >= 12)   // counts only grow until the halving
            sketch.increment("other \(other)".hashValue)
            other += 1
        }
        #expect(previous == sketch.sampleSize - 1)
        #expect(sketch.estimate(old) <= 7)   // every counter halved: at most 15 / 2
        #expect(sketch.estimate(old) >= 6)   // and no lower than half its count
    }
}
