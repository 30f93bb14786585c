@testable import ImageCacheCore
import Testing

@Suite("XXH64", .timeLimit(.minutes(1)))
struct XXH64Tests {
    /// Byte i is (i * 31 + 7) & 0xFF: deterministic, no runs, every byte value.
    static func pattern(_ count: Int) -> [UInt8] {
        (0..<count).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) }
    }

    static let megabyte = pattern(1_000_003)

    /// Deterministic chunk sizes (SplitMix64), so a failure reproduces.
    struct ChunkSizes {
        var state: UInt64
        mutating func next(in range: ClosedRange<Int>) -> Int {
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            z ^= z >> 31
            return range.lowerBound + Int(z % UInt64(range.count))
        }
    }

    /// Feeds `bytes` to a streaming digest in chunks of the given sizes (cycled), then finalizes.
    static func streamed(_ bytes: [UInt8], seed: UInt64 = 0, chunks: (inout Int) -> Int) -> UInt64 {
        var digest = XXH64(seed: seed)
        var offset = 0
        var index = 0
        bytes.withUnsafeBytes { all in
            while offset < all.count {
                let size = min(chunks(&index), all.count - offset)
                digest.update(UnsafeRawBufferPointer(rebasing: all[offset..<offset + size]))
                offset += size
            }
        }
        return digest.finalize()
    }

    // Expected values were produced with the reference C implementation through Python's `xxhash` 4.1.0
    // (`pip install xxhash`):
    //   def pattern(n): return bytes(((i * 31 + 7) & 0xFF) for i in range(n))
    //   print(f"0x{xxhash.xxh64_intdigest(data, seed=seed):016X}")
    // The first three match the values published with xxHash (XXH64("") = EF46DB3751D8E999).
    static let vectors: [(name: String, bytes: [UInt8], seed: UInt64, expected: UInt64)] = [
        ("empty", [], 0, 0xEF46_DB37_51D8_E999),
        ("\"a\"", Array("a".utf8), 0, 0xD24E_C4F1_A98C_6E5B),
        ("\"abc\"", Array("abc".utf8), 0, 0x44BC_2CF5_AD77_0999),
        ("31 bytes (no stripe: 8+8+8+4+1+1+1)", pattern(31), 0, 0x4A74_F3A1_A39A_D4A1),
        ("32 bytes (one stripe, no tail)", pattern(32), 0, 0x8D57_D6A4_671C_C43D),
        ("33 bytes (one stripe, 1-byte tail)", pattern(33), 0, 0x62C9_FD21_ED85_7664),
        ("100 bytes (three stripes, 4-byte tail)", pattern(100), 0, 0xEFA0_AD2D_3E70_C151),
        ("1,000,003 bytes", megabyte, 0, 0x857F_BF0F_F5D9_FCFC),
        ("empty, seed 1", [], 1, 0xD5AF_BA13_36A3_BE4B),
        ("\"abc\", seed 0x9E3779B97F4A7C15", Array("abc".utf8), 0x9E37_79B9_7F4A_7C15, 0x2ED0_F59D_6B43_AC8B),
        ("100 bytes, seed 0xFFFFFFFFFFFFFFFF", pattern(100), 0xFFFF_FFFF_FFFF_FFFF, 0xBD4F_CAAB_F7CA_D1A6),
        ("1,000,003 bytes, seed 42", megabyte, 42, 0xB4D9_C27C_656E_2BB2),
    ]

    @Test("one-shot hash matches the reference implementation", arguments: vectors.indices)
    func referenceVectors(_ index: Int) {
        // Given
        let vector = Self.vectors[index]
        // When
        let fromArray = XXH64.hash(vector.bytes, seed: vector.seed)
        let fromBuffer = vector.bytes.withUnsafeBytes { XXH64.hash($0, seed: vector.seed) }
        var digest = XXH64(seed: vector.seed)
        vector.bytes.withUnsafeBytes { digest.update($0) }
        // Then
        #expect(fromArray == vector.expected, "\(vector.name)")
        #expect(fromBuffer == vector.expected, "\(vector.name)")
        #expect(digest.finalize() == vector.expected, "\(vector.name)")
    }

    @Test("hashing an array slice hashes just the slice's bytes")
    func arraySlice() {
        // Given a slice that does not start at index 0
        let bytes = Self.pattern(200)
        let slice = bytes[37..<137]
        // When / Then
        #expect(XXH64.hash(slice) == XXH64.hash(Array(slice)))
        #expect(XXH64.hash(slice, seed: 9) == XXH64.hash(Array(slice), seed: 9))
        #expect(XXH64.hash(bytes[0..<0]) == 0xEF46_DB37_51D8_E999)
    }

    @Test("streaming one byte at a time equals one-shot for every length up to 130")
    func streamingByteAtATime() {
        for length in 0...130 {
            // Given
            let bytes = Self.pattern(length)
            // When
            let streamed = Self.streamed(bytes, seed: 5) { _ in 1 }
            // Then
            #expect(streamed == XXH64.hash(bytes, seed: 5), "length \(length)")
        }
    }

    @Test("streaming in two parts equals one-shot for every split point")
    func streamingEverySplit() {
        for length in [0, 1, 3, 4, 7, 8, 31, 32, 33, 63, 64, 65, 100, 131] {
            let bytes = Self.pattern(length)
            let expected = XXH64.hash(bytes)
            for split in 0...length {
                // Given
                var digest = XXH64()
                // When
                bytes.withUnsafeBytes { all in
                    digest.update(UnsafeRawBufferPointer(rebasing: all[0..<split]))
                    digest.update(UnsafeRawBufferPointer(rebasing: all[split...]))
                }
                // Then
                #expect(digest.finalize() == expected, "length \(length), split at \(split)")
            }
        }
    }

    @Test("streaming in chunks that straddle 32-byte boundaries equals one-shot", arguments: [
        [31], [33], [17, 47], [1, 31, 32, 33], [5, 64, 3, 96, 29], [63, 1], [4096, 7],
    ])
    func streamingStraddlingChunks(_ sizes: [Int]) {
        // Given
        let bytes = Self.megabyte
        // When
        let streamed = Self.streamed(bytes, seed: 42) { index in
            defer { index += 1 }
            return sizes[index % sizes.count]
        }
        // Then
        #expect(streamed == 0xB4D9_C27C_656E_2BB2)
    }

    @Test("streaming the megabyte in random-ish chunks of 1 to 100 bytes equals one-shot", arguments: [1, 2, 3] as [UInt64])
    func streamingRandomChunks(_ rngSeed: UInt64) {
        // Given
        var sizes = ChunkSizes(state: rngSeed)
        // When
        let streamed = Self.streamed(Self.megabyte) { _ in sizes.next(in: 1...100) }
        // Then
        #expect(streamed == 0x857F_BF0F_F5D9_FCFC)
    }

    @Test("finalize can be called mid-stream and the digest keeps going")
    func finalizeMidStream() {
        // Given
        let bytes = Self.pattern(100)
        var digest = XXH64()
        // When
        bytes.withUnsafeBytes { digest.update(UnsafeRawBufferPointer(rebasing: $0[0..<45])) }
        let partial = digest.finalize()
        bytes.withUnsafeBytes { digest.update(UnsafeRawBufferPointer(rebasing: $0[45...])) }
        // Then
        #expect(partial == XXH64.hash(bytes[0..<45]))
        #expect(digest.finalize() == 0xEFA0_AD2D_3E70_C151)
        #expect(digest.finalize() == 0xEFA0_AD2D_3E70_C151)
    }

    @Test("an empty update changes nothing")
    func emptyUpdate() {
        // Given
        var digest = XXH64(seed: 1)
        // When
        digest.update(UnsafeRawBufferPointer(start: nil, count: 0))
        [UInt8]().withUnsafeBytes { digest.update($0) }
        // Then
        #expect(digest.finalize() == 0xD5AF_BA13_36A3_BE4B)
    }

    @Test("flipping any single bit changes the hash")
    func singleBitFlip() {
        for bytes in [Self.pattern(1), Self.pattern(31), Self.pattern(33), Self.pattern(100)] {
            // Given
            let original = XXH64.hash(bytes)
            for bit in 0..<(bytes.count * 8) {
                // When
                var flipped = bytes
                flipped[bit / 8] ^= 1 << UInt8(bit % 8)
                // Then
                #expect(XXH64.hash(flipped) != original, "length \(bytes.count), bit \(bit)")
            }
        }
        // And one bit in the first, middle and last byte of the megabyte
        let original = XXH64.hash(Self.megabyte)
        for index in [0, 500_001, 1_000_002] {
            var flipped = Self.megabyte
            flipped[index] ^= 0x10
            #expect(XXH64.hash(flipped) != original, "byte \(index)")
        }
    }

    @Test("different seeds give different hashes")
    func seedMatters() {
        let bytes = Self.pattern(100)
        #expect(XXH64.hash(bytes, seed: 0) != XXH64.hash(bytes, seed: 1))
    }
}
