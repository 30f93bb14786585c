// The disk format's checksum: XXH3-64 from libxxhash, through its Swift shim (one-shot and incremental).

@testable import ImageCacheStore
import Testing

@Suite("XXH3 (libxxhash)", .timeLimit(.minutes(1)))
struct XXH3Tests {
    /// Byte i is (i * 31 + 7) & 0xFF: deterministic, no runs, every byte value.
    static let bytes: [UInt8] = (0..<1_000_003).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) }

    @Test("the empty input hashes to xxHash's published XXH3-64 value, through each entry point")
    func emptyInput() {
        #expect(XXH3.hash([UInt8]()) == 0x2D06_8005_38D3_94C2)
        #expect(XXH3.hash(Self.bytes[5..<5]) == 0x2D06_8005_38D3_94C2)
        #expect(XXH3.Hasher().finalize() == 0x2D06_8005_38D3_94C2)
    }

    @Test("non-empty inputs hash to the values xxHash's own xxhsum -H3 prints (the disk format stores these)")
    func knownValues() {
        #expect(XXH3.hash(Array("a".utf8)) == 0xE6C6_32B6_1E96_4E1F)
        #expect(XXH3.hash(Array("imagecached".utf8)) == 0x4777_6426_494C_163C)
        #expect(DiskEntryFormat.checksum(Array("imagecached".utf8)) == 0x4777_6426_494C_163C)
    }

    @Test("fed in pieces of any size (the body verified through a buffer), the hash equals the one-shot hash",
          arguments: [1, 7, 64, 239, 240, 4096, 65_537, 1_000_003])
    func incrementalEqualsOneShot(piece: Int) {
        let hasher = XXH3.Hasher()
        Self.bytes.withUnsafeBytes { all in
            var offset = 0
            while offset < all.count {
                let end = min(offset + piece, all.count)
                hasher.update(UnsafeRawBufferPointer(rebasing: all[offset..<end]))
                offset = end
            }
        }
        #expect(hasher.finalize() == XXH3.hash(Self.bytes))
    }

    @Test("a slice hashes as the same bytes in an array of their own; one flipped bit changes the hash")
    func slicesAndFlips() {
        let slice = Self.bytes[1000..<50_000]
        #expect(XXH3.hash(slice) == XXH3.hash(Array(slice)))
        var flipped = Self.bytes
        flipped[777_777] ^= 0x10
        #expect(XXH3.hash(flipped) != XXH3.hash(Self.bytes))
    }
}
