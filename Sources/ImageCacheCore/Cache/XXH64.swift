// Data model: XXH64, the 64-bit xxHash of a byte sequence with a 64-bit seed, as a one-shot function and as a
// streaming value (`init`, `update`, `finalize`). A plain value: no owner, no lock, no I/O, no allocation.
//
// Why: the disk tier checks cache files for corruption (torn writes, bit rot, a truncated copy) on every disk hit,
// and SHA-256 (about 2 GB/s) costs more than reading the file from the page cache does. XXH64 (10+ GB/s on one
// core) is the content checksum the LZ4 and zstd frame formats use for the same job. It is NOT a cryptographic hash:
// anyone can craft collisions, so it detects accidents, never tampering, and must not be used as a cache key.
//
// Algorithm: "xxHash fast digest algorithm", XXH64 section, https://github.com/Cyan4973/xxHash/blob/dev/doc/xxhash_spec.md
//   - inputs of 32 bytes or more: four accumulators (seed + P1 + P2, seed + P2, seed, seed - P1) each take one
//     little-endian 64-bit lane of every 32-byte stripe (round: acc += lane * P2; acc = rotl(acc, 31); acc *= P1),
//     then converge (rotl 1, 7, 12, 18, summed, then one merge round per accumulator);
//     shorter inputs start from seed + P5;
//   - add the input length, then the remaining 0..31 bytes as 8-byte, 4-byte and 1-byte steps;
//   - final avalanche (xor-shift 33, * P2, xor-shift 29, * P3, xor-shift 32).
// The streaming form keeps the accumulators and an unfinished stripe of up to 31 bytes, so it gives the same value
// as the one-shot form for every split of the input.

/// The XXH64 checksum (xxHash, 64-bit). Not a cryptographic hash; see the file comment.
struct XXH64 {
    // MARK: constants (the spec's PRIME64_1 ... PRIME64_5)

    private static let prime1: UInt64 = 0x9E37_79B1_85EB_CA87
    private static let prime2: UInt64 = 0xC2B2_AE3D_27D4_EB4F
    private static let prime3: UInt64 = 0x1656_67B1_9E37_79F9
    private static let prime4: UInt64 = 0x85EB_CA77_C2B2_AE63
    private static let prime5: UInt64 = 0x27D4_EB2F_1656_67C5

    // MARK: streaming state

    private let seed: UInt64
    private var acc1: UInt64
    private var acc2: UInt64
    private var acc3: UInt64
    private var acc4: UInt64
    /// Bytes passed to `update` so far (the spec adds the length modulo 2^64).
    private var totalLengthBytes: UInt64 = 0
    /// The unfinished stripe: the first `stripeCountBytes` bytes are input not yet folded into the accumulators.
    private var stripe: (UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0)
    private var stripeCountBytes = 0

    // MARK: one-shot

    /// The XXH64 of `buffer`'s bytes.
    static func hash(_ buffer: UnsafeRawBufferPointer, seed: UInt64 = 0) -> UInt64 {
        let length = buffer.count
        guard length > 0, let base = buffer.baseAddress else { return avalanche(seed &+ prime5) }
        var acc: UInt64
        var offset = 0
        if length >= 32 {
            var acc1 = seed &+ prime1 &+ prime2
            var acc2 = seed &+ prime2
            var acc3 = seed
            var acc4 = seed &- prime1
            offset = consumeStripes(base, length, &acc1, &acc2, &acc3, &acc4)
            acc = converge(acc1, acc2, acc3, acc4)
        } else {
            acc = seed &+ prime5
        }
        acc &+= UInt64(truncatingIfNeeded: length)
        return finish(acc, base + offset, length &- offset)
    }

    /// The XXH64 of `bytes` (no copy).
    static func hash(_ bytes: [UInt8], seed: UInt64 = 0) -> UInt64 {
        bytes.withUnsafeBytes { hash($0, seed: seed) }
    }

    /// The XXH64 of `bytes` (no copy).
    static func hash(_ bytes: ArraySlice<UInt8>, seed: UInt64 = 0) -> UInt64 {
        bytes.withUnsafeBytes { hash($0, seed: seed) }
    }

    // MARK: streaming

    /// A digest with no input yet; `finalize()` now returns the XXH64 of the empty input.
    init(seed: UInt64 = 0) {
        self.seed = seed
        acc1 = seed &+ Self.prime1 &+ Self.prime2
        acc2 = seed &+ Self.prime2
        acc3 = seed
        acc4 = seed &- Self.prime1
    }

    /// Appends `buffer`'s bytes to the input.
    mutating func update(_ buffer: UnsafeRawBufferPointer) {
        let length = buffer.count
        guard length > 0, let base = buffer.baseAddress else { return }
        totalLengthBytes &+= UInt64(truncatingIfNeeded: length)
        var offset = 0

        // Top up an unfinished stripe first; fold it in once it holds 32 bytes.
        let buffered = stripeCountBytes
        if buffered > 0 {
            let take = min(32 - buffered, length)
            withUnsafeMutableBytes(of: &stripe) { ($0.baseAddress! + buffered).copyMemory(from: base, byteCount: take) }
            offset = take
            guard buffered + take == 32 else {
                stripeCountBytes = buffered + take
                return
            }
            var (a1, a2, a3, a4) = (acc1, acc2, acc3, acc4)
            withUnsafeBytes(of: stripe) { _ = Self.consumeStripes($0.baseAddress!, 32, &a1, &a2, &a3, &a4) }
            (acc1, acc2, acc3, acc4) = (a1, a2, a3, a4)
            stripeCountBytes = 0
        }

        // Whole stripes straight from the caller's buffer.
        if length - offset >= 32 {
            var (a1, a2, a3, a4) = (acc1, acc2, acc3, acc4)
            offset += Self.consumeStripes(base + offset, length - offset, &a1, &a2, &a3, &a4)
            (acc1, acc2, acc3, acc4) = (a1, a2, a3, a4)
        }

        // Keep the rest (under 32 bytes) for the next update or finalize.
        let rest = length - offset
        if rest > 0 {
            withUnsafeMutableBytes(of: &stripe) { $0.baseAddress!.copyMemory(from: base + offset, byteCount: rest) }
            stripeCountBytes = rest
        }
    }

    /// The XXH64 of everything passed to `update` so far. The digest is unchanged and can take more input.
    func finalize() -> UInt64 {
        var acc = totalLengthBytes >= 32 ? Self.converge(acc1, acc2, acc3, acc4) : seed &+ Self.prime5
        acc &+= totalLengthBytes
        let count = stripeCountBytes
        return withUnsafeBytes(of: stripe) { Self.finish(acc, $0.baseAddress!, count) }
    }

    // MARK: steps of the algorithm

    @inline(__always)
    private static func rotl(_ x: UInt64, _ r: UInt64) -> UInt64 {
        (x << r) | (x >> (64 - r))
    }

    @inline(__always)
    private static func lane(_ base: UnsafeRawPointer, _ offset: Int) -> UInt64 {
        UInt64(littleEndian: base.loadUnaligned(fromByteOffset: offset, as: UInt64.self))
    }

    @inline(__always)
    private static func round(_ acc: UInt64, _ lane: UInt64) -> UInt64 {
        rotl(acc &+ lane &* prime2, 31) &* prime1
    }

    @inline(__always)
    private static func mergeRound(_ acc: UInt64, _ value: UInt64) -> UInt64 {
        (acc ^ round(0, value)) &* prime1 &+ prime4
    }

    /// Folds every whole 32-byte stripe of `base[0..<count]` (count >= 32) into the accumulators; returns the bytes used.
    @inline(__always)
    private static func consumeStripes(
        _ base: UnsafeRawPointer, _ count: Int,
        _ acc1: inout UInt64, _ acc2: inout UInt64, _ acc3: inout UInt64, _ acc4: inout UInt64
    ) -> Int {
        var (a1, a2, a3, a4) = (acc1, acc2, acc3, acc4)
        let lastStripe = count &- 32
        var offset = 0
        repeat {
            a1 = round(a1, lane(base, offset))
            a2 = round(a2, lane(base, offset &+ 8))
            a3 = round(a3, lane(base, offset &+ 16))
            a4 = round(a4, lane(base, offset &+ 24))
            offset &+= 32
        } while offset <= lastStripe
        (acc1, acc2, acc3, acc4) = (a1, a2, a3, a4)
        return offset
    }

    @inline(__always)
    private static func converge(_ acc1: UInt64, _ acc2: UInt64, _ acc3: UInt64, _ acc4: UInt64) -> UInt64 {
        var acc = rotl(acc1, 1) &+ rotl(acc2, 7) &+ rotl(acc3, 12) &+ rotl(acc4, 18)
        acc = mergeRound(acc, acc1)
        acc = mergeRound(acc, acc2)
        acc = mergeRound(acc, acc3)
        return mergeRound(acc, acc4)
    }

    /// Folds in the last `count` (< 32) bytes at `base`, then avalanches.
    @inline(__always)
    private static func finish(_ acc: UInt64, _ base: UnsafeRawPointer, _ count: Int) -> UInt64 {
        var acc = acc
        var offset = 0
        while count &- offset >= 8 {
            acc = rotl(acc ^ round(0, lane(base, offset)), 27) &* prime1 &+ prime4
            offset &+= 8
        }
        if count &- offset >= 4 {
            let word = UInt32(littleEndian: base.loadUnaligned(fromByteOffset: offset, as: UInt32.self))
            acc = rotl(acc ^ (UInt64(word) &* prime1), 23) &* prime2 &+ prime3
            offset &+= 4
        }
        while offset < count {
            let byte = base.load(fromByteOffset: offset, as: UInt8.self)
            acc = rotl(acc ^ (UInt64(byte) &* prime5), 11) &* prime1
            offset &+= 1
        }
        return avalanche(acc)
    }

    @inline(__always)
    private static func avalanche(_ acc: UInt64) -> UInt64 {
        var acc = acc
        acc ^= acc >> 33
        acc &*= prime2
        acc ^= acc >> 29
        acc &*= prime3
        acc ^= acc >> 32
        return acc
    }
}
