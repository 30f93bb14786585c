// Policy: how often each key was asked for lately, for the memory tier's admission (TinyLFU: Einziger, Friedman and
// Manes, "TinyLFU: A Highly Efficient Cache Admission Policy", 2017; Caffeine's FrequencySketch).
//
// A count-min sketch: `width` one-byte counters (a power of two), each key counted in 4 of them (4 independent mixes
// of its hash), its estimate the smallest of the 4. Counters saturate at 15. Aging: after `width` additions (an
// access that raised at least one counter) every counter is halved, so the sketch reflects recent history and a key
// popular an hour ago fades; at that point the average counter has been raised 4 times, well under the cap, so the
// sketch never saturates as a whole (Caffeine: 10 x maximum size additions over 16 x maximum size counters).
// Collisions can only overestimate. Pure value; its owner (MemoryCache's lock) serialises it.

/// Approximate recent access counts by key hash.

struct FrequencySketch: Sendable {
    static let maximum: UInt8 = 15
    private static let probes = 4

    private var counters: [UInt8]
    private let mask: Int
    /// Increments since the last halving.
    private(set) var additions = 0
    /// Increments between two halvings.
    let sampleSize: Int

    /// `width` counters, rounded up to a power of two (at least 64).
    init(width: Int) {
        var size = 64
        while size < width { size <<= 1 }
        counters = [UInt8](repeating: 0, count: size)
        mask = size - 1
        sampleSize = size
    }

    var width: Int { counters.count }

    /// Counts one access of the key with this hash.
    mutating func increment(_ hash: Int) {
        var added = false
        for probe in 0..<Self.probes {
            let slot = Self.slot(hash, probe, mask)
            if counters[slot] < Self.maximum {
                counters[slot] += 1
                added = true
            }
        }
        guard added else { return }
        additions += 1
        if additions >= sampleSize { halve() }
    }

    /// The estimated recent accesses of the key with this hash (never less than the true count since the last
    /// halving, up to 15).
    func estimate(_ hash: Int) -> UInt8 {
        var smallest = Self.maximum
        for probe in 0..<Self.probes { smallest = min(smallest, counters[Self.slot(hash, probe, mask)]) }
        return smallest
    }

    private mutating func halve() {
        for index in counters.indices { counters[index] >>= 1 }
        additions /= 2
    }

    /// One of the 4 counters of `hash`: a 64-bit finaliser (MurmurHash3's fmix64) of the hash and the probe number.
    private static func slot(_ hash: Int, _ probe: Int, _ mask: Int) -> Int {
        var mixed = UInt64(truncatingIfNeeded: hash) &+ UInt64(probe + 1) &* 0x9E37_79B9_7F4A_7C15
        mixed = (mixed ^ (mixed >> 33)) &* 0xFF51_AFD7_ED55_8CCD
        mixed = (mixed ^ (mixed >> 33)) &* 0xC4CE_B9FE_1A85_EC53
        mixed ^= mixed >> 33
        return Int(truncatingIfNeeded: mixed) & mask
    }
}
