// Tiny deterministic "images": the real format signature followed by filler bytes up to `size`.
// Not decodable; the daemon only checks signatures. The same size always gives the same bytes.

enum Fixtures {
    static func png(size: Int = 1024) -> [UInt8] {
        fill([0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A], size: size, seed: 1)
    }

    static func jpeg(size: Int = 1024) -> [UInt8] {
        fill([0xFF, 0xD8, 0xFF, 0xE0, 0x00, 0x10] + Array("JFIF".utf8) + [0x00], size: size, seed: 2)
    }

    static func gif(size: Int = 1024) -> [UInt8] {
        fill(Array("GIF89a".utf8), size: size, seed: 3)
    }

    static func webp(size: Int = 1024) -> [UInt8] {
        let riffLength = UInt32(max(size, 16) - 8)
        let lengthBytes = (0..<4).map { UInt8(truncatingIfNeeded: riffLength >> (8 * $0)) }
        return fill(Array("RIFF".utf8) + lengthBytes + Array("WEBPVP8 ".utf8), size: size, seed: 4)
    }

    /// `signature` then a deterministic byte pattern, `size` bytes in all (at least the signature).
    private static func fill(_ signature: [UInt8], size: Int, seed: UInt32) -> [UInt8] {
        var bytes = signature
        bytes.reserveCapacity(max(size, signature.count))
        var x: UInt32 = 2_463_534_242 &+ seed   // xorshift32: cheap, deterministic
        while bytes.count < size {
            x ^= x << 13
            x ^= x >> 17
            x ^= x << 5
            bytes.append(UInt8(truncatingIfNeeded: x))
        }
        return bytes
    }
}
