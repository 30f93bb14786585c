import Foundation
import Testing
import ImageCacheTestSupport
@testable import ImageCacheTransform

/// Hostile bytes through the real transformer (libvips, in this process: a crash in a loader or in our code ends the
/// test run). Every source a transform reads is one of these seeds with its header or body damaged by a seeded
/// generator, so a failure names the case that reproduces it.
@Suite("Transformer: fuzzed headers and bodies of every source format are refused or transformed, never a crash", .timeLimit(.minutes(3)))
struct TransformerFuzzTests {
    static let fixtures = RepositoryPath.fixtures

    /// SplitMix64: the same cases on every run.
    struct Generator {
        var state: UInt64
        mutating func next() -> UInt64 {
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
        mutating func below(_ n: Int) -> Int { Int(next() % UInt64(max(1, n))) }
    }

    /// A 16x16 RGB baseline TIFF, uncompressed (libvips's TIFF loader is allowed, and this daemon saves no TIFF).
    static func tiff() -> [UInt8] {
        var bytes: [UInt8] = Array("II".utf8) + [42, 0, 8, 0, 0, 0]
        func short(_ v: Int) -> [UInt8] { [UInt8(v & 0xFF), UInt8(v >> 8)] }
        func long(_ v: Int) -> [UInt8] { [UInt8(v & 0xFF), UInt8((v >> 8) & 0xFF), UInt8((v >> 16) & 0xFF), UInt8(v >> 24)] }
        func entry(_ tag: Int, _ type: Int, _ count: Int, _ value: [UInt8]) -> [UInt8] {
            short(tag) + short(type) + long(count) + value + [UInt8](repeating: 0, count: 4 - value.count)
        }
        let entries = 10, ifdEnd = 8 + 2 + entries * 12 + 4, bitsAt = ifdEnd, pixelsAt = bitsAt + 6
        bytes += short(entries)
        bytes += entry(256, 3, 1, short(16)) + entry(257, 3, 1, short(16)) + entry(258, 3, 3, long(bitsAt))
        bytes += entry(259, 3, 1, short(1)) + entry(262, 3, 1, short(2)) + entry(273, 4, 1, long(pixelsAt))
        bytes += entry(277, 3, 1, short(3)) + entry(278, 3, 1, short(16)) + entry(279, 4, 1, long(16 * 16 * 3))
        bytes += entry(284, 3, 1, short(1)) + long(0)
        bytes += short(8) + short(8) + short(8)
        for y in 0..<16 { for x in 0..<16 { bytes += [UInt8(x * 16), UInt8(y * 16), 128] } }
        return bytes
    }

    /// One seed per format the transformer reads: JPEG (with EXIF orientation too), PNG (opaque and with alpha), GIF
    /// (animated), WebP (still and animated), AVIF, TIFF.
    static func seeds() throws -> [(name: String, bytes: [UInt8])] {
        try VipsRuntime.start(threadsPerImage: 1, allowSVG: false)
        func file(_ name: String) throws -> [UInt8] { try [UInt8](Data(contentsOf: fixtures.appendingPathComponent(name))) }
        func made(_ name: String, _ options: String, _ format: ImageOutputFormat) throws -> [UInt8] {
            let spec = TransformSpec(options: try TransformOptions.parse([Substring(options)]), format: format, limits: TransformLimits())
            return try Transformer.run(try file(name), spec).get().bytes
        }
        return [("photo.jpg", try file("photo.jpg")), ("rotated.jpg", try file("rotated.jpg")),
                ("bordered.png", try file("bordered.png")), ("alpha.png", try file("alpha.png")),
                ("anim.gif", try file("anim.gif")), ("still.webp", try made("bordered.png", "w:48", .webp)),
                ("anim.webp", try made("anim.gif", "w:16", .webp)), ("photo.avif", try made("photo.jpg", "w:48", .avif)),
                ("made.tiff", tiff())]
    }

    /// Damages `bytes` one of five ways: a few header bytes flipped, a header field set to a huge number, cut short,
    /// bytes flipped anywhere, or a run of it repeated in place (chunk and marker structure confused).
    static func mutate(_ bytes: [UInt8], _ random: inout Generator) -> (how: String, bytes: [UInt8]) {
        var out = bytes
        switch random.below(5) {
        case 0:
            for _ in 0...random.below(4) { out[random.below(min(out.count, 64))] ^= UInt8(1 + random.below(255)) }
            return ("header bytes flipped", out)
        case 1:
            let at = random.below(max(1, min(out.count, 160) - 4))
            for (i, byte) in [UInt8](arrayLiteral: 0xFF, 0xFF, 0xFF, 0x7F).enumerated() where at + i < out.count { out[at + i] = byte }
            return ("huge field at \(at)", out)
        case 2:
            return ("cut to \(out.count)", Array(out.prefix(1 + random.below(out.count - 1))))
        case 3:
            for _ in 0...random.below(16) { out[random.below(out.count)] ^= UInt8(1 + random.below(255)) }
            return ("bytes flipped", out)
        default:
            let start = random.below(out.count), length = 1 + random.below(min(512, out.count - start))
            out.insert(contentsOf: out[start..<(start + length)], at: start)
            return ("\(length) bytes at \(start) repeated", out)
        }
    }

    static let options = ["w:32", "rs:fill:20:20/g:sm", "c:12:10/w:8", "w:24/f:webp", "t:10/w:16", "w:40/rot:90/f:png", "w:64/f:avif"]

    @Test("300 damaged copies of each seed: each a decodable image or a 422 with its reason; the pixel cache path included", arguments: 0..<9)
    func damaged(seedIndex: Int) throws {
        let seeds = try Self.seeds()
        let seed = seeds[seedIndex]
        // The undamaged seed transforms (so the damage, not the seed, decides each outcome below)
        let cache = PixelCache(limitBytes: 8 << 20)
        func spec(_ options: String) throws -> TransformSpec {
            TransformSpec(options: try TransformOptions.parse(options.split(separator: "/")), format: nil,
                          limits: TransformLimits(timeoutSeconds: 2), pixelCache: cache)
        }
        #expect(throws: Never.self) { try Transformer.run(seed.bytes, spec("w:32")).get() }
        var random = Generator(state: UInt64(seedIndex + 1) &* 0x1234_5678_9ABC_DEF1)
        var made = 0, refused = 0
        for round in 0..<300 {
            let (how, bytes) = Self.mutate(seed.bytes, &random)
            let options = Self.options[round % Self.options.count]
            switch Transformer.run(bytes, try spec(options)) {
            case .success(let image):
                // Then a result is a whole image of its format and size
                let decoded = try image.bytes.withUnsafeBytes { raw in try VipsImage.load(raw, deadline: Deadline(seconds: 10)) }
                #expect(decoded.width == image.width && decoded.width >= 1, "\(seed.name) round \(round) (\(how), \(options))")
                made += 1
            case .failure(let failure):
                // ... and a refusal is a 422 with a one-line reason
                #expect(failure.status == 422 && !failure.reason.isEmpty && !failure.reason.contains("\n"),
                        "\(seed.name) round \(round) (\(how), \(options)): \(failure.status) \(failure.reason)")
                refused += 1
            }
        }
        // The damage reached both outcomes (a generator that never breaks a file, or breaks every one, tests little)
        #expect(made > 0 && refused > 0, "\(seed.name): \(made) made, \(refused) refused")
    }
}
