// Image transforms end to end: the real daemon (port 0, libvips) in front of a local origin serving real images
// (Tests/Fixtures). Results are decoded (libvips reads their headers) to check dimensions, format
// and frames; coalescing is observed through the proxy's events and the origin's request counts, never timed.

import Foundation
import Synchronization
import Testing
@testable import ImageCacheHTTP
@testable import ImageCacheConfig
@testable import ImageCacheStore
@testable import ImageCacheTransform
@testable import ImageCacheStatus
@testable import ImageCacheCore
@testable import ImageCacheOps
import ImageCacheTestSupport
import ImageCacheSystem

/// The real image files the origin serves.
enum ImageFiles {
    static let directory = RepositoryPath.fixtures
    static func bytes(_ name: String) -> [UInt8] {
        Array(FileManager.default.contents(atPath: directory.appendingPathComponent(name).path) ?? Data())
    }
    static let types = ["jpg": "image/jpeg", "png": "image/png", "gif": "image/gif", "svg": "image/svg+xml"]

    /// Serves `body` as a JPEG at `path` with `cacheControl`, holding the head until `gate` opens.
    static func serveGated(_ harness: ProxyHarness, _ path: String, _ body: [UInt8], cacheControl: String = "max-age=600",
                           etag: String? = nil, gate: Gate) {
        harness.origin.route(path) { _ in
            var headers = [("Content-Type", "image/jpeg"), ("Cache-Control", cacheControl)]
            if let etag { headers.append(("ETag", etag)) }
            var reply = Reply(status: 200, headers: headers, body: body)
            reply.gateBeforeHead = gate
            return reply
        }
    }

    /// A source whose version (its ETag) the test changes: the first version is photo.jpg (640x427), every later one
    /// rotated.jpg (300x200, EXIF-turned to 200x300).
    final class VersionedSource: Sendable {
        private let etag: Locked<String>
        init(_ first: String) { etag = Locked(first) }
        var current: String { etag.withLock { $0 } }
        func change(to etag: String) { self.etag.withLock { $0 = etag } }
    }

    /// Serves a `VersionedSource` at `path` with `max-age`: 304 when If-None-Match holds the current ETag.
    static func serveVersioned(_ harness: ProxyHarness, _ path: String, first: String, maxAge: Int) -> VersionedSource {
        let source = VersionedSource(first)
        let photo = bytes("photo.jpg"), rotated = bytes("rotated.jpg")
        harness.origin.route(path) { request in
            let current = source.current
            if request.header("If-None-Match") == current {
                return Reply(status: 304, headers: [("Cache-Control", "max-age=\(maxAge)"), ("ETag", current)])
            }
            return Reply(status: 200, headers: [("Content-Type", "image/jpeg"), ("Cache-Control", "max-age=\(maxAge)"), ("ETag", current)],
                         body: current == first ? photo : rotated)
        }
        return source
    }

    /// Serves `name` at "/<name>" with a long freshness and an ETag (or `etag`).
    static func serve(_ harness: ProxyHarness, _ name: String, maxAge: Int = 600, etag: String? = nil) {
        let body = bytes(name)
        let type = types[String(name.split(separator: ".").last ?? "")] ?? "application/octet-stream"
        harness.origin.route("/" + name) { _ in
            Reply(status: 200, headers: [("Content-Type", type), ("Cache-Control", "max-age=\(maxAge)"),
                                         ("ETag", etag ?? "\"\(body.count)\"")], body: body)
        }
    }
}

/// What a result decodes to.
struct Decoded: Equatable, CustomStringConvertible {
    var format: String
    var width: Int
    var height: Int
    var frames: Int
    var description: String { "\(format) \(width)x\(height)\(frames > 1 ? " x\(frames)" : "")" }

    /// libvips reads the header; the magic bytes must agree with the loader.
    static func read(_ bytes: [UInt8]) -> Decoded? {
        bytes.withUnsafeBytes { raw -> Decoded? in
            guard raw.count > 0, let image = try? VipsImage.load(raw, deadline: Deadline(seconds: 60)) else { return nil }
            let loader = image.loader
            let format = loader.hasPrefix("jpeg") ? "jpeg" : loader.hasPrefix("png") ? "png" : loader.hasPrefix("webp") ? "webp"
                : loader.hasPrefix("gif") ? "gif" : loader.hasPrefix("heif") ? "avif" : loader
            let magic: [String: [UInt8]] = ["jpeg": [0xFF, 0xD8, 0xFF], "png": [0x89, 0x50, 0x4E, 0x47], "gif": Array("GIF8".utf8),
                                            "webp": Array("RIFF".utf8)]
            if let prefix = magic[format], !bytes.starts(with: prefix) { return nil }
            if format == "avif", !(bytes.count > 12 && Array(bytes[4..<12]) == Array("ftypavif".utf8)) { return nil }
            return Decoded(format: format, width: image.width, height: image.pageHeight, frames: image.pages)
        }
    }
}

@Suite("Image transforms end to end", .timeLimit(.minutes(3)))
struct TransformTests {
    static func path(_ options: String, _ source: String, signature: String = "insecure") -> String {
        "/transform/\(signature)/\(options)/plain/\(source)"
    }

    static func stats(_ harness: ProxyHarness) async throws -> DaemonStats {
        try DaemonStats.decode(Data(try await harness.get("/_imagecached/stats").body))
    }

    static func transformsDone(_ harness: ProxyHarness, result: String = "ok") async throws -> Int {
        (try await stats(harness).transforms?.results.values.reduce(0) { $0 + ($1[result] ?? 0) }) ?? 0
    }

    @Test("each option's effect, checked on the decoded result", arguments: [
        // photo.jpg is 640x427; rotated.jpg is 300x200 stored with EXIF orientation 6 (shown 200x300); alpha.png
        // 200x200 with alpha; bordered.png 300x300 white with a red 100x80 block at (120, 110); anim.gif 3 frames of 120x80.
        ("rs:fit:300:300", "photo.jpg", Decoded(format: "jpeg", width: 300, height: 200, frames: 1)),
        ("resize:fill:300:300", "photo.jpg", Decoded(format: "jpeg", width: 300, height: 300, frames: 1)),
        ("rs:fill-down:1000:500", "photo.jpg", Decoded(format: "jpeg", width: 640, height: 320, frames: 1)),
        ("rs:force:100:300", "photo.jpg", Decoded(format: "jpeg", width: 100, height: 300, frames: 1)),
        ("rs:auto:100:300", "photo.jpg", Decoded(format: "jpeg", width: 100, height: 67, frames: 1)),
        ("s:1280:0:1", "photo.jpg", Decoded(format: "jpeg", width: 1280, height: 854, frames: 1)),
        ("s:1280:0", "photo.jpg", Decoded(format: "jpeg", width: 640, height: 427, frames: 1)),
        ("rs:fit:400:400:0:1/bg:00ff00", "photo.jpg", Decoded(format: "jpeg", width: 400, height: 400, frames: 1)),
        ("w:320", "photo.jpg", Decoded(format: "jpeg", width: 320, height: 214, frames: 1)),
        ("h:100/dpr:2", "photo.jpg", Decoded(format: "jpeg", width: 300, height: 200, frames: 1)),
        ("rs:fill:100:100/g:sm", "photo.jpg", Decoded(format: "jpeg", width: 100, height: 100, frames: 1)),
        ("rs:fill:100:100/g:fp:0.9:0.1", "photo.jpg", Decoded(format: "jpeg", width: 100, height: 100, frames: 1)),
        ("c:200:100:nowe", "photo.jpg", Decoded(format: "jpeg", width: 200, height: 100, frames: 1)),
        ("c:0.5:0.5/w:100", "photo.jpg", Decoded(format: "jpeg", width: 100, height: 67, frames: 1)),
        ("t:10", "bordered.png", Decoded(format: "png", width: 100, height: 80, frames: 1)),
        ("pd:10:20", "bordered.png", Decoded(format: "png", width: 340, height: 320, frames: 1)),
        // An opaque PNG made 4 times smaller or more goes through a decoded level (PixelCache): fit, smart fill, force.
        ("w:64", "bordered.png", Decoded(format: "png", width: 64, height: 64, frames: 1)),
        ("rs:fill:40:30/g:sm", "bordered.png", Decoded(format: "png", width: 40, height: 30, frames: 1)),
        ("rs:force:30:70/f:webp", "bordered.png", Decoded(format: "webp", width: 30, height: 70, frames: 1)),
        // ... and a JPEG through its level (decoded 2 times smaller), with its EXIF orientation and a turn
        ("w:40", "rotated.jpg", Decoded(format: "jpeg", width: 40, height: 60, frames: 1)),
        ("w:40/rot:90", "rotated.jpg", Decoded(format: "jpeg", width: 40, height: 27, frames: 1)),
        ("ar:0/w:40", "rotated.jpg", Decoded(format: "jpeg", width: 40, height: 27, frames: 1)),
        ("rs:fill:30:30/g:sm", "photo.jpg", Decoded(format: "jpeg", width: 30, height: 30, frames: 1)),
        ("rot:90", "photo.jpg", Decoded(format: "jpeg", width: 427, height: 640, frames: 1)),
        // Sizes are those of the final orientation (imgproxy's rule).
        ("rs:fill:300:200/rot:90", "photo.jpg", Decoded(format: "jpeg", width: 300, height: 200, frames: 1)),
        ("w:100/rot:270", "photo.jpg", Decoded(format: "jpeg", width: 100, height: 150, frames: 1)),
        ("rs:fill:60:90/g:sm/rot:90", "photo.jpg", Decoded(format: "jpeg", width: 60, height: 90, frames: 1)),
        ("c:100:50/rot:90", "photo.jpg", Decoded(format: "jpeg", width: 100, height: 50, frames: 1)),
        ("w:60/rot:180", "rotated.jpg", Decoded(format: "jpeg", width: 60, height: 90, frames: 1)),
        ("w:100", "rotated.jpg", Decoded(format: "jpeg", width: 100, height: 150, frames: 1)),
        ("ar:0/w:150", "rotated.jpg", Decoded(format: "jpeg", width: 150, height: 100, frames: 1)),
        ("bl:3/sh:1/q:40/w:64", "photo.jpg", Decoded(format: "jpeg", width: 64, height: 43, frames: 1)),
        ("f:png/w:64", "photo.jpg", Decoded(format: "png", width: 64, height: 43, frames: 1)),
        ("w:64", "photo.jpg@webp", Decoded(format: "webp", width: 64, height: 43, frames: 1)),
        ("format:avif/w:64", "photo.jpg", Decoded(format: "avif", width: 64, height: 43, frames: 1)),
        ("ext:gif/w:64", "photo.jpg", Decoded(format: "gif", width: 64, height: 43, frames: 1)),
        ("w:100", "alpha.png", Decoded(format: "png", width: 100, height: 100, frames: 1)),
        ("w:100/f:jpeg", "alpha.png", Decoded(format: "jpeg", width: 100, height: 100, frames: 1)),
        ("w:60", "anim.gif", Decoded(format: "gif", width: 60, height: 40, frames: 3)),
        ("rs:fill:40:40", "anim.gif@webp", Decoded(format: "webp", width: 40, height: 40, frames: 3)),
        ("w:60/f:png", "anim.gif", Decoded(format: "png", width: 60, height: 40, frames: 1)),
        ("w:60/rot:90", "anim.gif", Decoded(format: "gif", width: 60, height: 90, frames: 1)),
    ])
    func options(options: String, source: String, expected: Decoded) async throws {
        let harness = try ProxyHarness()
        for name in ["photo.jpg", "rotated.jpg", "alpha.png", "bordered.png", "anim.gif"] { ImageFiles.serve(harness, name) }
        let response = try await harness.get(Self.path(options, source))
        #expect(response.status == 200, "\(response.text.prefix(200))")
        #expect(Decoded.read(response.body) == expected, "\(options) \(source)")
        let mediaType = ["jpeg": "image/jpeg", "png": "image/png", "webp": "image/webp", "avif": "image/avif", "gif": "image/gif"][expected.format]
        #expect(response.header("Content-Type") == mediaType)
        #expect(response.header("Cache-Status")?.contains("detail=transformed") == true)
    }

    @Test("a background fills transparent pixels; a trimmed colour, an extend gravity and metadata stripping change the bytes as asked")
    func pixels() async throws {
        let harness = try ProxyHarness()
        ImageFiles.serve(harness, "alpha.png")
        // The corner of alpha.png is transparent: with bg:ff0000 and PNG output it is red and opaque.
        let flat = try await harness.get(Self.path("bg:ff0000/w:200", "alpha.png@png"))
        try flat.body.withUnsafeBytes { raw in
            let image = try VipsImage.load(raw, random: true, deadline: Deadline(seconds: 60))
            #expect(!image.hasAlpha)
            #expect(try image.pixel(x: 0, y: 0).prefix(3) == [255, 0, 0])
        }
        let clear = try await harness.get(Self.path("w:200", "alpha.png@png"))
        try clear.body.withUnsafeBytes { raw in
            let image = try VipsImage.load(raw, random: true, deadline: Deadline(seconds: 60))
            #expect(image.hasAlpha)
            #expect(try image.pixel(x: 0, y: 0).last == 0)
        }
        // Trim by a named colour: bordered.png is a red 100x80 block on white. White trimmed leaves the block; red
        // "trimmed" leaves everything (no edge is red)
        ImageFiles.serve(harness, "bordered.png")
        #expect(Decoded.read(try await harness.get(Self.path("t:10:ffffff", "bordered.png")).body)?.description == "png 100x80")
        #expect(Decoded.read(try await harness.get(Self.path("t:10:ff0000", "bordered.png")).body)?.description == "png 300x300")
        // An extend gravity places the fitted image on its canvas: the 200x133 photo at the top (no) leaves the
        // canvas's bottom rows transparent in a PNG, at the bottom (so) its top rows
        ImageFiles.serve(harness, "photo.jpg")
        for (gravity, clearRow, imageRow) in [("no", 195, 5), ("so", 5, 195)] {
            let extended = try await harness.get(Self.path("rs:fit:200:200/ex:1:\(gravity)/f:png", "photo.jpg"))
            try extended.body.withUnsafeBytes { raw in
                let image = try VipsImage.load(raw, random: true, deadline: Deadline(seconds: 60))
                #expect(image.width == 200 && image.height == 200 && image.hasAlpha)
                #expect(try image.pixel(x: 100, y: clearRow).last == 0, "ex:1:\(gravity)")
                #expect(try image.pixel(x: 100, y: imageRow).last == 255, "ex:1:\(gravity)")
            }
        }
        // Metadata: stripped by default (imgproxy's), kept with sm:0 (the EXIF block of rotated.jpg)
        ImageFiles.serve(harness, "rotated.jpg")
        let exif = Array("Exif".utf8)
        func hasExif(_ body: [UInt8]) -> Bool { body.indices.dropLast(exif.count).contains { body[$0..<($0 + exif.count)].elementsEqual(exif) } }
        #expect(!hasExif(try await harness.get(Self.path("w:60", "rotated.jpg")).body))
        #expect(hasExif(try await harness.get(Self.path("w:60/sm:0", "rotated.jpg")).body))
    }

    @Test("the variants of an opaque PNG or a JPEG decode it once per level (transform-pixel-cache); the bytes are those made without the cache; a PNG with alpha does not use it")
    func pixelCache() async throws {
        // Given a daemon with the pixel cache (128 MiB by default: sources of up to 16 MiB decoded are kept whole) and
        // one without
        let harness = try ProxyHarness()
        let uncached = try ProxyHarness { $0.transform.pixelCacheBytes = 0 }
        for daemon in [harness, uncached] {
            for name in ["bordered.png", "alpha.png", "photo.jpg", "rotated.jpg"] { ImageFiles.serve(daemon, name) }
        }
        // When four variants of the 300x300 PNG are made (64 px in two formats, 32 px: box averages of its whole
        // decode; 200 px: from the whole decode itself), two of the 640x427 JPEG at 64 px (level 1: decoded 2 times
        // smaller by libjpeg, 320x213, which no whole decode gives) and two at 320 and 400 px (its whole decode)
        let targets = [Self.path("w:64/f:webp", "bordered.png"), Self.path("w:64/f:jpeg", "bordered.png"),
                       Self.path("w:32/f:png", "bordered.png"), Self.path("w:200/f:png", "bordered.png"),
                       Self.path("w:64/f:webp", "photo.jpg"), Self.path("w:64/f:png", "photo.jpg"),
                       Self.path("w:320/f:webp", "photo.jpg"), Self.path("w:400", "photo.jpg")]
        var bodies: [[UInt8]] = []
        for target in targets {
            let response = try await harness.get(target)
            #expect(response.status == 200, "\(target): \(response.text.prefix(200))")
            bodies.append(response.body)
        }
        let cache = try #require(try await Self.stats(harness).transforms?.pixelCache)
        // Then one decode per source and level, every other variant from the kept one
        #expect(cache.misses == 3 && cache.hits == 5 && cache.entries == 3)
        // (each counted with its metadata, a few fields here, and the entry's overhead)
        let pixels = 300 * 300 * 3 + 320 * 213 * 3 + 640 * 427 * 3 + 3 * PixelCache.entryOverheadBytes
        #expect(cache.bytes >= pixels && cache.bytes < pixels + 8192 && cache.limitBytes == 128 << 20)
        #expect(bodies.map { Decoded.read($0).map(\.description) } == ["webp 64x64", "jpeg 64x64", "png 32x32", "png 200x200",
                                                                      "webp 64x43", "png 64x43", "webp 320x214", "jpeg 400x267"])
        // ... byte for byte what the daemon without the cache makes (a rendition's ETag holds either way): there the
        // PNG's small variants come from a box average of its streamed decode and the large ones from libvips's
        // thumbnail
        for (target, body) in zip(targets, bodies) {
            let again = try await uncached.get(target)
            expectSameBytes(again.body, body, "\(target) differs without the pixel cache")
        }
        // ... also for a JPEG turned by its EXIF orientation, made from its whole decode
        let turned = try await harness.get(Self.path("w:100", "rotated.jpg"))
        #expect(Decoded.read(turned.body)?.description == "jpeg 100x150")
        expectSameBytes(try await uncached.get(Self.path("w:100", "rotated.jpg")).body, turned.body)
        // ... and a PNG with alpha never looks it up, nor does a result that needs the source's own pixels (a crop)
        _ = try await harness.get(Self.path("w:32", "alpha.png"))
        _ = try await harness.get(Self.path("c:300:200/w:32", "photo.jpg"))
        let after = try #require(try await Self.stats(harness).transforms?.pixelCache)
        #expect(after.hits + after.misses == 9 && after.entries == 4)
        let metrics = try await harness.get("/_imagecached/metrics")
        #expect(metrics.text.contains("imagecached_transform_pixel_cache_lookups_total{result=\"hit\"} 5\n"))
        #expect(metrics.text.contains("imagecached_transform_pixel_cache_bytes \(after.bytes)\n"))
    }

    @Test("new variants of a new source asked for at once, on as many workers, decode it once: the others wait for its level")
    func pixelCacheCoalescing() async throws {
        // Given four workers and a JPEG source held back by its origin
        let harness = try ProxyHarness { $0.transform.workers = 4 }
        let gate = Gate()
        ImageFiles.serveGated(harness, "/photo.jpg", ImageFiles.bytes("photo.jpg"), etag: "\"p\"", gate: gate)
        // When four clients ask for four sizes that all come from its whole decode, then the source arrives: four
        // jobs start together
        let widths = [320, 400, 500, 600]
        let connections = try await harness.waitingClients(on: widths.map { Self.path("w:\($0)/f:png", "photo.jpg") })
        gate.open()
        let decoded = try await readAll(connections).map { Decoded.read($0.body)?.width ?? 0 }
        #expect(decoded == widths)
        // Then one of them decoded it; the three others waited for that decode (hits), none made its own (were the
        // jobs to run one after another this would hold without waiting too: PixelCacheTests.waitersShareOneMake is
        // the deterministic check; here four workers start together, and without the wait two or more decode)
        let cache = try #require(try await Self.stats(harness).transforms?.pixelCache)
        #expect(cache.misses == 1 && cache.hits == 3 && cache.entries == 1)
        #expect(harness.origin.requestCount("/photo.jpg") == 1)
        #expect(try await Self.transformsDone(harness) == 4)
    }

    @Test("a source is kept whole when its decode takes an eighth of transform-pixel-cache, not a byte more", arguments: [0, 1])
    func pixelCacheWholeSourceEdge(over: Int) async throws {
        // Given a pixel cache 8 times the 300x300 PNG's decode (270,000 bytes), or 8 bytes less (an eighth: one byte less)
        let harness = try ProxyHarness { $0.transform.pixelCacheBytes = 8 * 270_000 - 8 * over }
        let uncached = try ProxyHarness { $0.transform.pixelCacheBytes = 0 }
        for daemon in [harness, uncached] { ImageFiles.serve(daemon, "bordered.png") }
        // When a 64 px and a 200 px variant are made (the same bytes as without the cache either way)
        for options in ["w:64", "w:200"] {
            let response = try await harness.get(Self.path(options, "bordered.png"))
            #expect(response.status == 200, "\(response.text.prefix(200))")
            expectSameBytes(try await uncached.get(Self.path(options, "bordered.png")).body, response.body, "\(options)")
        }
        let cache = try #require(try await Self.stats(harness).transforms?.pixelCache)
        if over == 0 {
            // Then at the edge its whole decode is kept and serves both
            #expect(cache.entries == 1 && cache.misses == 1 && cache.hits == 1)
            #expect(cache.bytes >= 270_000 + PixelCache.entryOverheadBytes && cache.bytes < 270_000 + PixelCache.entryOverheadBytes + 8192)
        } else {
            // ... and past it only its level 1 (150x150) is, for the 64 px variant; the 200 px one is libvips's
            // thumbnail of the source, not looked up
            #expect(cache.entries == 1 && cache.misses == 1 && cache.hits == 0)
            #expect(cache.bytes >= 67_500 + PixelCache.entryOverheadBytes && cache.bytes < 67_500 + PixelCache.entryOverheadBytes + 8192)
        }
    }

    @Test("equivalent spellings (aliases, order, defaults, dpr) share one cached result: one source fetch, one transform")
    func equivalentSpellings() async throws {
        let harness = try ProxyHarness()
        ImageFiles.serve(harness, "photo.jpg")
        let first = try await harness.get(Self.path("rs:fill:300:200", "photo.jpg"))
        #expect(first.status == 200 && first.header("X-Cache") == "MISS")
        for spelling in ["resize:fill:300:200/q:0", "w:300/h:200/rt:fill", "rt:fill/w:150/h:100/dpr:2", "rs:fill:300:200:0:0/g:ce/ar:1/sm:1"] {
            let again = try await harness.get(Self.path(spelling, "photo.jpg"))
            #expect(again.header("X-Cache") == "HIT", "\(spelling)")
            #expect(again.body == first.body && again.header("ETag") == first.header("ETag"))
        }
        let other = try await harness.get(Self.path("rs:fill:300:201", "photo.jpg"))
        #expect(other.header("X-Cache") == "MISS")
        #expect(harness.origin.requestCount("/photo.jpg") == 1)
        #expect(try await Self.transformsDone(harness) == 2)
        // A client's If-None-Match with the rendition's ETag gets 304 from the cache.
        let notModified = try await harness.get(Self.path("w:300/h:200/rt:fill", "photo.jpg"), headers: [("If-None-Match", first.header("ETag")!)])
        #expect(notModified.status == 304)
    }

    @Test("signatures: each configured key/salt pair verifies; a wrong, truncated or absent signature is 403; imgproxy's environment variables are read")
    func signatures() async throws {
        let pairs = [
            TransformSigning.Pair(key: URLSigning.hexDecode("943b421c9eb07c830af81030552c86009268de4e532ba2ee2eab8247c6da0881")!,
                                  salt: URLSigning.hexDecode("520f986b998545b4785e0defbc4f3c1203f22de2374a3d53cb7a7fe9fea309c5")!),
            TransformSigning.Pair(key: Array("another key of 32 bytes, exactly".utf8), salt: Array("salt".utf8)),
        ]
        let harness = try ProxyHarness { $0.transform.signing = TransformSigning(pairs: pairs) }
        ImageFiles.serve(harness, "photo.jpg")
        let signed = "/rs:fit:100:100/plain/photo.jpg"
        for pair in pairs {
            let signature = TransformSigning(pairs: [pair]).sign(path: signed)
            let response = try await harness.get("/transform/\(signature)\(signed)")
            #expect(response.status == 200, "\(response.text)")
        }
        let good = TransformSigning(pairs: pairs).sign(path: signed)
        for (signature, reason) in [(String(good.dropLast(4)), "malformed"), ("insecure", "malformed"),
                                    (TransformSigning(pairs: pairs).sign(path: "/rs:fit:100:101/plain/photo.jpg"), "does not match")] {
            let response = try await harness.get("/transform/\(signature)\(signed)")
            #expect(response.status == 403 && response.text.contains(reason), "\(signature): \(response.text)")
        }
        // Options changed after signing: refused.
        #expect(try await harness.get("/transform/\(good)/rs:fit:1000:1000/plain/photo.jpg").status == 403)

        let environment = ["IMGPROXY_KEY": "943b421c9eb07c830af81030552c86009268de4e532ba2ee2eab8247c6da0881",
                           "IMGPROXY_SALT": "520f986b998545b4785e0defbc4f3c1203f22de2374a3d53cb7a7fe9fea309c5"]
        let configuration = try Configuration.load(file: nil, environment: environment, flags: [])
        #expect(configuration.transform.signing.pairs == [pairs[0]] && configuration.transform.signingFromIMGPROXY)
        #expect(throws: ConfigError.self) {
            _ = try Configuration.load(file: nil, environment: ["IMGPROXY_KEY": "abcd"], flags: [])
        }
    }

    @Test("f:auto picks AVIF, then WebP, then the source's format from Accept; the key holds the class, not the Accept text; Vary: Accept")
    func negotiation() async throws {
        let harness = try ProxyHarness()
        ImageFiles.serve(harness, "photo.jpg")
        let cases: [(String?, String, String)] = [
            ("image/avif,image/webp,*/*", "avif", "MISS"), ("image/webp,*/*;q=0.8", "webp", "MISS"), (nil, "jpeg", "MISS"),
            ("image/avif;q=0,image/webp", "webp", "HIT"), ("image/*,*/*", "jpeg", "HIT"), ("image/avif", "avif", "HIT"),
        ]
        for (accept, format, xCache) in cases {
            let response = try await harness.get(Self.path("w:50/f:auto", "photo.jpg"), headers: accept.map { [("Accept", $0)] } ?? [])
            #expect(Decoded.read(response.body)?.format == format, "\(accept ?? "-")")
            #expect(response.header("Vary") == "Accept" && response.header("X-Cache") == xCache, "\(accept ?? "-")")
        }
        #expect(try await Self.transformsDone(harness) == 3)
        // An explicit format does not vary.
        let explicit = try await harness.get(Self.path("w:50/f:webp", "photo.jpg"), headers: [("Accept", "image/avif")])
        #expect(Decoded.read(explicit.body)?.format == "webp" && explicit.header("Vary") == nil)
        // transform-auto-webp: a URL without a format negotiates too.
        let auto = try ProxyHarness { $0.transform.autoWebP = true }
        ImageFiles.serve(auto, "photo.jpg")
        let webp = try await auto.get(Self.path("w:50", "photo.jpg"), headers: [("Accept", "image/webp")])
        #expect(Decoded.read(webp.body)?.format == "webp" && webp.header("Vary") == "Accept")
        let plain = try await auto.get(Self.path("w:50", "photo.jpg"))
        #expect(Decoded.read(plain.body)?.format == "jpeg")
    }

    @Test("20 concurrent requests for one new variant make one source fetch and one transform; 3 variants of one new source make one source fetch")
    func coalescing() async throws {
        let harness = try ProxyHarness()
        let gate = Gate()
        let body = ImageFiles.bytes("photo.jpg")
        ImageFiles.serveGated(harness, "/photo.jpg", body, etag: "\"p\"", gate: gate)
        let connections = try await harness.waitingClients(20, on: Self.path("rs:fill:120:120", "photo.jpg"))
        gate.open()
        var bodies: Set<[UInt8]> = []
        var collapsed = 0
        for response in try await readAll(connections) {
            #expect(response.status == 200)
            bodies.insert(response.body)
            if response.header("X-Cache") == "COALESCED" { collapsed += 1 }
        }
        #expect(bodies.count == 1 && collapsed == 19)
        #expect(Decoded.read(bodies.first!) == Decoded(format: "jpeg", width: 120, height: 120, frames: 1))
        #expect(harness.origin.requestCount("/photo.jpg") == 1)
        #expect(try await Self.transformsDone(harness) == 1)

        // Three new variants of a new source: the source's own fetch collects the three jobs.
        let second = Gate()
        ImageFiles.serveGated(harness, "/other.jpg", body, gate: second)
        let variants = try await harness.waitingClients(on: ["w:10", "w:20", "w:30"].map { Self.path($0, "other.jpg") })
        second.open()
        let widths = try await readAll(variants).map { Decoded.read($0.body)?.width ?? 0 }
        #expect(widths == [10, 20, 30])
        #expect(harness.origin.requestCount("/other.jpg") == 1)
    }

    @Test("a pixel bomb, an over-long animation, an SVG, a truncated file and a non-image are refused with their reasons; the daemon keeps serving")
    func hostileImages() async throws {
        let harness = try ProxyHarness()
        for name in ["bomb.png", "long.gif", "image.svg", "truncated.jpg", "photo.jpg"] { ImageFiles.serve(harness, name) }
        harness.origin.route("/text.jpg") { _ in Reply(status: 200, headers: [("Content-Type", "image/jpeg")], body: Array("not an image".utf8)) }
        let refusals: [(String, String, Int, String)] = [
            ("w:10", "bomb.png", 422, "3600 MP), over transform-max-megapixels (50)"),
            ("w:10", "long.gif", 422, "150 frames, over transform-max-frames (100)"),
            ("w:10", "image.svg", 422, "SVG sources are refused"),
            ("w:10", "truncated.jpg", 422, "could not be transformed"),
            ("w:10", "text.jpg", 502, "not a JPEG"),
            ("w:10", "missing.jpg", 404, "the source answered 404"),
        ]
        for (options, source, status, reason) in refusals {
            let response = try await harness.get(Self.path(options, source))
            #expect(response.status == status && response.text.contains(reason), "\(source): \(response.status) \(response.text)")
            #expect(response.header("Content-Type")?.hasPrefix("text/plain") == true)
        }
        // The long animation as a still (first frame) is within the limits.
        #expect(Decoded.read(try await harness.get(Self.path("w:10/f:png", "long.gif")).body)?.frames == 1)
        #expect(try await harness.get(Self.path("w:10", "photo.jpg")).status == 200)
        let stats = try await Self.stats(harness)
        #expect(stats.transforms?.results["-"]?["megapixels"] == 1 || stats.transforms?.results["png"]?["megapixels"] == 1)
    }

    @Test("options are checked: unknown, malformed, over transform-max-dimension (400); a result over it (422); a POST (405)")
    func badRequests() async throws {
        let harness = try ProxyHarness { $0.transform.limits.maxDimension = 500 }
        ImageFiles.serve(harness, "photo.jpg")
        for (options, status, reason) in [("zoom:2", 400, "unknown processing option 'zoom'"), ("rs:fit:abc", 400, "is not a size"),
                                          ("w:501", 400, "0...500"), ("w:500", 200, ""), ("w:480/pd:20", 422, "over transform-max-dimension (500)"),
                                          ("rot:45", 400, "multiple of 90")] {
            let response = try await harness.get(Self.path(options, "photo.jpg"))
            #expect(response.status == status && (reason.isEmpty || response.text.contains(reason)), "\(options): \(response.text.prefix(200))")
        }
        #expect(try await harness.get(Self.path("w:10", "photo.jpg"), method: "POST").status == 405)
        #expect(try await harness.get("/transform/insecure/w:10/enc/abc").status == 400)
        #expect(try await harness.get(Self.path("w:10", "local:///missing.jpg")).status == 404)
        // ... and a relative source that is there: local:///path is the configured origin's path
        let local = try await harness.get(Self.path("w:12", "local:///photo.jpg"))
        #expect(local.status == 200 && Decoded.read(local.body)?.width == 12, "\(local.text.prefix(200))")
    }

    @Test("limits at their edges: source bytes (413), megapixels, frames")
    func limits() async throws {
        let photo = ImageFiles.bytes("photo.jpg")
        let harness = try ProxyHarness {
            $0.transform.maxSourceBytes = photo.count
            $0.transform.limits.maxPixels = 640 * 427
            $0.transform.limits.maxFrames = 3
        }
        ImageFiles.serve(harness, "photo.jpg")
        ImageFiles.serve(harness, "anim.gif")
        #expect(try await harness.get(Self.path("w:10", "photo.jpg")).status == 200)
        #expect(try await harness.get(Self.path("w:10", "anim.gif")).status == 200)
        let tight = try ProxyHarness {
            $0.transform.maxSourceBytes = photo.count - 1
            $0.transform.limits.maxPixels = 640 * 427 - 1
            $0.transform.limits.maxFrames = 2
        }
        ImageFiles.serve(tight, "photo.jpg")
        ImageFiles.serve(tight, "anim.gif")
        let big = try await tight.get(Self.path("w:10", "photo.jpg"))
        #expect(big.status == 413 && big.text.contains("transform-max-source-bytes"))
        let frames = try await tight.get(Self.path("w:10", "anim.gif"))
        #expect(frames.status == 422 && frames.text.contains("3 frames, over transform-max-frames (2)"))
        #expect(try await tight.get(Self.path("w:10/f:png", "anim.gif")).status == 200)
        tight.origin.route("/small.jpg") { _ in Reply(status: 200, headers: [("Content-Type", "image/jpeg")], body: photo) }
        // The same photo under a limit one pixel short of it.
        let loose = try ProxyHarness { $0.transform.limits.maxPixels = 640 * 427 - 1 }
        ImageFiles.serve(loose, "photo.jpg")
        let pixels = try await loose.get(Self.path("w:10", "photo.jpg"))
        #expect(pixels.status == 422 && pixels.text.contains("over transform-max-megapixels"))
    }

    @Test("transform-timeout stops a job that takes too long (a 10 MP blur of sigma 60 against 50 ms) with 422; the worker goes on to the next job")
    func timeout() async throws {
        let harness = try ProxyHarness {
            $0.transform.limits.timeoutSeconds = 0.05
            $0.transform.workers = 1
        }
        ImageFiles.serve(harness, "photo.jpg")
        let slow = try await harness.get(Self.path("rs:fit:4000:4000:1/bl:60", "photo.jpg"))
        #expect(slow.status == 422 && slow.text.contains("took longer than transform-timeout (0.05s)"), "\(slow.text)")
        #expect(try await harness.get(Self.path("w:10", "photo.jpg")).status == 200)
        #expect(try await Self.transformsDone(harness, result: "timeout") == 1)
    }

    @Test("a restart serves variants from disk; a purge of the source removes its variants in both tiers")
    func diskAndPurge() async throws {
        let harness = try ProxyHarness()
        ImageFiles.serve(harness, "photo.jpg")
        let target = Self.path("w:100", "photo.jpg")
        let made = try await harness.get(target)
        #expect(made.header("X-Cache") == "MISS")
        await harness.flushDisk()
        try harness.restart()
        let fromDisk = try await harness.get(target)
        #expect(fromDisk.body == made.body && fromDisk.header("Cache-Status")?.contains("detail=disk") == true)
        #expect(harness.origin.requestCount("/photo.jpg") == 1)
        #expect(try await Self.transformsDone(harness) == 0)

        let source = CacheKey(try UpstreamURL.parse(harness.origin.baseURL + "/photo.jpg"))
        _ = try await harness.get("/photo.jpg")   // the source itself, back in memory
        #expect(!harness.daemon.proxy.memory.renditions(of: source.url).isEmpty)
        #expect(try await harness.purge("/photo.jpg").status == 200)
        #expect(harness.daemon.proxy.memory.renditions(of: source.url).isEmpty)
        await harness.flushDisk()
        #expect(harness.daemon.proxy.disk?.stats.entries == 0)
        let again = try await harness.get(target)
        #expect(again.header("X-Cache") == "MISS" && again.header("Cache-Status")?.contains("detail=transformed") == true)
        #expect(harness.origin.requestCount("/photo.jpg") == 2)
    }

    @Test("a purge landing while a source is fetched and while a rendition is made: both are served to their clients, and kept nowhere")
    func purgeInFlight() async throws {
        // Given a daemon without a fleet, a source the origin holds at a gate, and a worker held as it takes a transform
        let harness = try ProxyHarness()
        let photo = ImageFiles.bytes("photo.jpg")
        let gate = Gate()
        defer { gate.open() }
        ImageFiles.serveGated(harness, "/photo.jpg", photo, gate: gate)
        // When the source's URL is purged while its fetch is in flight
        let fetching = try await harness.waitingClients(1, on: "/photo.jpg")
        try await harness.origin.waitForRequests("/photo.jpg", count: 1)
        #expect(try await harness.purge("/photo.jpg").status == 200)
        gate.open()
        // Then its client has it, and the next request fetches again (the clock never moved: a serial, not a time)
        let first = try await readAll(fetching)[0]
        #expect(first.status == 200 && first.body == photo)
        let second = try await harness.get("/photo.jpg")
        #expect(second.header("X-Cache") == "MISS", "\(second.headers)")
        #expect(harness.origin.requestCount("/photo.jpg") == 2)
        let third = try await harness.get("/photo.jpg")
        #expect(third.header("X-Cache") == "HIT")

        // When the source is purged while a rendition of it is transformed
        let held = Gate()
        defer { held.open() }
        harness.transformHold.hold(at: held)
        let target = Self.path("w:100", "photo.jpg")
        let client = try harness.connect()
        try client.request(target)
        #expect(await harness.transformHold.wait(for: 1), "the transform never started")
        #expect(try await harness.purge("/photo.jpg").status == 200)
        held.open()
        // Then its client has it, and the next request makes it again
        let made = try await readAll([client])[0]
        #expect(made.status == 200 && Decoded.read(made.body)?.width == 100)
        #expect(made.header("Cache-Status")?.contains("stored") == false, "\(made.headers)")
        let again = try await harness.get(target)
        #expect(again.header("Cache-Status")?.contains("detail=transformed") == true, "\(again.headers)")
        #expect(try await Self.transformsDone(harness) == 2)
    }

    @Test("a revalidation in flight across a purge: its 304 answers the client, and the purged copy is not put back")
    func revalidationAcrossPurge() async throws {
        let harness = try ProxyHarness()
        let photo = ImageFiles.bytes("photo.jpg")
        let gate = Gate()
        defer { gate.open() }
        harness.origin.route("/photo.jpg") { request in
            if request.header("If-None-Match") == "\"p1\"" {
                return Reply(status: 304, headers: [("ETag", "\"p1\""), ("Cache-Control", "max-age=60")], body: [], gate: gate)
            }
            return Reply(status: 200, headers: [("Content-Type", "image/jpeg"), ("Cache-Control", "max-age=60"), ("ETag", "\"p1\"")],
                         body: photo)
        }
        _ = try await harness.get("/photo.jpg")
        harness.clock.advance(120)
        // When the stale copy's revalidation waits at the origin, and the URL is purged meanwhile
        let revalidating = try await harness.waitingClients(1, on: "/photo.jpg")
        try await harness.origin.waitForRequests("/photo.jpg", count: 2)
        #expect(try await harness.purge("/photo.jpg").status == 200)
        gate.open()
        // Then its client has the copy the 304 confirmed, and the next request goes to the origin for a whole response
        let confirmed = try await readAll(revalidating)[0]
        #expect(confirmed.status == 200 && confirmed.body == photo)
        let next = try await harness.get("/photo.jpg")
        #expect(next.header("X-Cache") == "MISS", "\(next.headers)")
        #expect(harness.origin.requestCount("/photo.jpg") == 3)
    }

    @Test("a rendition has its source's freshness; once stale, an unchanged source (304) refreshes it without a transform, a changed one (new ETag) makes it again")
    func sourceChanges() async throws {
        let harness = try ProxyHarness()
        let version = ImageFiles.serveVersioned(harness, "/live.jpg", first: "\"v1\"", maxAge: 60)
        let target = Self.path("w:100", "live.jpg")
        let first = try await harness.get(target)
        #expect(Decoded.read(first.body)?.height == 67 && first.header("Cache-Control") == "max-age=60")
        harness.clock.advance(30)
        #expect(try await harness.get(target).header("X-Cache") == "HIT")
        harness.clock.advance(40)   // both stale now
        let refreshed = try await harness.get(target)
        #expect(refreshed.body == first.body && refreshed.header("X-Cache") == "REVALIDATED")
        #expect(try await Self.transformsDone(harness) == 1)
        #expect(try await Self.transformsDone(harness, result: "refreshed") == 1)
        version.change(to: "\"v2\"")
        harness.clock.advance(70)
        let changed = try await harness.get(target)
        #expect(Decoded.read(changed.body)?.height == 150 && changed.header("ETag") != first.header("ETag"))
        #expect(try await Self.transformsDone(harness) == 2)
        // Fetching the source anew with another ETag drops the renditions made from the old one.
        version.change(to: "\"v3\"")
        _ = try await harness.get("/live.jpg", headers: [("Cache-Control", "no-cache")])
        let source = try UpstreamURL.parse(harness.origin.baseURL + "/live.jpg")
        #expect(harness.daemon.proxy.memory.renditions(of: source).isEmpty)
    }

    @Test("a full transform queue is 503 with its reason; a HEAD gets the head only")
    func queueAndHead() async throws {
        let harness = try ProxyHarness {
            $0.transform.workers = 1
            $0.transform.queueLimit = 0
        }
        let gate = Gate()
        let body = ImageFiles.bytes("photo.jpg")
        ImageFiles.serveGated(harness, "/slow.jpg", body, gate: gate)
        ImageFiles.serve(harness, "photo.jpg")
        harness.waiters.expect(1)
        let held = try harness.connect()
        try held.request(Self.path("w:10", "slow.jpg"))
        #expect(await harness.waiters.wait())
        let refused = try await harness.get(Self.path("w:20", "photo.jpg"))
        #expect(refused.status == 503 && refused.text.contains("too many transforms in progress"))
        gate.open()
        #expect(try await readAll([held]).first?.status == 200)
        let head = try await harness.get(Self.path("w:20", "photo.jpg"), method: "HEAD")
        #expect(head.status == 200 && head.body.isEmpty && head.header("Content-Type") == "image/jpeg")
    }

    @Test("a source that has not arrived by transform-source-timeout fails its transform with 504 and frees the job's admission slot; the fetch goes on and stores the source")
    func sourceTimeout() async throws {
        // Given one admission slot (a worker, no queue) and a 200 ms transform-source-timeout
        let harness = try ProxyHarness {
            $0.transform.workers = 1
            $0.transform.queueLimit = 0
            $0.transform.sourceTimeoutSeconds = 0.2
        }
        let gate = Gate()
        ImageFiles.serveGated(harness, "/slow.jpg", ImageFiles.bytes("photo.jpg"), gate: gate)
        ImageFiles.serve(harness, "photo.jpg")
        // When a transform's source is held back by its origin past the timeout
        let late = try await harness.get(Self.path("w:10", "slow.jpg"))
        // Then its client gets 504 naming the limit, counted as a transform failure
        #expect(late.status == 504 && late.text.contains("the source did not arrive within transform-source-timeout (0.2s)"), "\(late.text)")
        let metrics = try await harness.get("/_imagecached/metrics").text
        #expect(metrics.contains("imagecached_transforms_total{format=\"-\",result=\"source_timeout\"} 1"))
        // ... the only slot is free again: another transform is made, not refused with 503
        let next = try await harness.get(Self.path("w:20", "photo.jpg"))
        #expect(next.status == 200, "\(next.text)")
        // ... and the source's fetch went on: once the origin answers it is stored, and its variant is made from
        // the cache without asking the origin again
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            harness.waiters.onFinished = firstCallOnly { done.resume() }
            gate.open()
        }
        harness.waiters.onFinished = nil
        let made = try await harness.get(Self.path("w:10", "slow.jpg"))
        #expect(made.status == 200 && Decoded.read(made.body)?.width == 10)
        #expect(harness.origin.requestCount("/slow.jpg") == 1)
    }

    @Test("a client that hangs up while its rendition's source is held ends the job: its admission slot is free at once, counted as abandoned, and the source's fetch, with no client left, stops as any fetch does")
    func abandonedJobFreesItsSlot() async throws {
        // Given: one admission slot, a source held by its origin, and a source timeout far away
        let harness = try ProxyHarness {
            $0.transform.workers = 1
            $0.transform.queueLimit = 0
            $0.transform.sourceTimeoutSeconds = 600
        }
        let gate = Gate()
        defer { gate.open() }
        ImageFiles.serveGated(harness, "/slow.jpg", ImageFiles.bytes("photo.jpg"), gate: gate)
        ImageFiles.serve(harness, "photo.jpg")
        let clients = try await harness.waitingClients(1, on: Self.path("w:10", "slow.jpg"))
        // When its only client hangs up: the job ends, then the source's fetch it left
        let finished = Locked(0)
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            harness.waiters.onFinished = {
                if finished.withLock({ $0 += 1; return $0 }) == 2 { done.resume() }
            }
            clients[0].close()
        }
        harness.waiters.onFinished = nil
        // Then the slot is free: another transform is made now, not refused with 503 for 600 s
        let next = try await harness.get(Self.path("w:20", "photo.jpg"))
        #expect(next.status == 200, "\(next.text)")
        let metrics = try await harness.get("/_imagecached/metrics").text
        #expect(metrics.contains("imagecached_transforms_total{format=\"-\",result=\"abandoned\"} 1"))
        // ... and nothing of the source was kept: the next rendition of it asks the origin again (the stopped fetch may
        // or may not have reached the origin before it stopped; it sends nothing more, it has finished)
        gate.open()
        let before = harness.origin.requestCount("/slow.jpg")
        let made = try await harness.get(Self.path("w:10", "slow.jpg"))
        #expect(made.status == 200 && Decoded.read(made.body)?.width == 10)
        #expect(harness.origin.requestCount("/slow.jpg") == before + 1)
    }

    @Test("the default qualities are imgproxy's: a URL without one encodes JPEG at 80, WebP at 79, AVIF at 63")
    func defaultQualities() async throws {
        let harness = try ProxyHarness()
        ImageFiles.serve(harness, "photo.jpg")
        for (format, quality) in [("jpeg", 80), ("webp", 79), ("avif", 63)] {
            let plain = try await harness.get(Self.path("w:64/f:\(format)", "photo.jpg")).body
            expectSameBytes(plain, try await harness.get(Self.path("w:64/f:\(format)/q:\(quality)", "photo.jpg")).body, "\(format)")
            #expect(plain != (try await harness.get(Self.path("w:64/f:\(format)/q:\(quality - 10)", "photo.jpg")).body), "\(format)")
        }
    }

    @Test("without a transform key the daemon says loudly at start that transform URLs are not signed; with one it does not")
    func unsignedWarning() async throws {
        let unsigned = LogCapture()
        let open = try ProxyHarness(logCapture: unsigned)
        #expect(unsigned.messages.contains { $0.contains("transform URLs are NOT signed") }, "\(unsigned.messages.prefix(10))")
        let signed = LogCapture()
        let closed = try ProxyHarness(logCapture: signed) {
            $0.transform.signing = TransformSigning(pairs: [.init(key: Array("0123456789abcdef".utf8), salt: [])])
        }
        #expect(!signed.messages.contains { $0.contains("NOT signed") })
        #expect(signed.messages.contains { $0.contains("1 key/salt pair(s)") })
        withExtendedLifetime((open, closed)) {}
    }

    @Test("operations: the access log names the options, metrics count transforms by format and result, imagecached stats shows them, imagecached sign makes URLs the daemon verifies")
    func operations() async throws {
        let lines = LogCapture()
        let pairs = [TransformSigning.Pair(key: Array("0123456789abcdef".utf8), salt: Array("pepper".utf8))]
        let harness = try ProxyHarness(logCapture: lines) {
            $0.accessLog = true
            $0.transform.signing = TransformSigning(pairs: pairs)
        }
        ImageFiles.serve(harness, "photo.jpg")
        ImageFiles.serve(harness, "bomb.png")
        let signing = TransformSigning(pairs: pairs)
        let path = "/w:80/f:webp/plain/photo.jpg"
        #expect(try await harness.get("/transform/\(signing.sign(path: path))\(path)").status == 200)
        let bomb = "/w:80/plain/bomb.png"
        #expect(try await harness.get("/transform/\(signing.sign(path: bomb))\(bomb)").status == 422)
        #expect(lines.messages.contains { $0.contains("GET /transform/") && $0.contains(" 200 MISS ") && $0.contains("transform=rs:fit:80:0:0:0/f:webp") },
                "\(lines.messages.filter { $0.contains("/transform/") })")
        #expect(lines.messages.contains { $0.contains("422") && $0.contains("over transform-max-megapixels") })
        let metrics = try await harness.get("/_imagecached/metrics").text
        #expect(metrics.contains("imagecached_transforms_total{format=\"webp\",result=\"ok\"} 1"))
        #expect(metrics.contains("imagecached_transforms_total{format=\"-\",result=\"megapixels\"} 1"))
        #expect(metrics.contains("imagecached_transform_duration_seconds_count 2"))
        #expect(metrics.contains("imagecached_transform_queue_depth 0"))
        let report = StatsReport.text(try await Self.stats(harness))
        #expect(report.contains("transforms    2 ended") && report.contains("webp: ok 1"), "\(report)")
    }

    @Test("imagecached sign --transform prints URLs (plain and base64 forms) that the daemon verifies with imgproxy's key and salt")
    func signCommand() async throws {
        let environment = ["IMGPROXY_KEY": "943b421c9eb07c830af81030552c86009268de4e532ba2ee2eab8247c6da0881",
                           "IMGPROXY_SALT": "520f986b998545b4785e0defbc4f3c1203f22de2374a3d53cb7a7fe9fea309c5",
                           "PATH": ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin"]
        let pairs = try Configuration.load(file: nil, environment: environment, flags: []).transform.signing.pairs
        let harness = try ProxyHarness { $0.transform.signing = TransformSigning(pairs: pairs) }
        ImageFiles.serve(harness, "photo.jpg")
        let source = harness.origin.baseURL + "/photo.jpg"
        for extra in [[], ["--base64"]] {
            let (status, stdout, stderr) = try await CLITests.run(["sign", "--transform", "rs:fill:64:64/f:png"] + extra + [source],
                                                                  environment: environment)
            #expect(status == 0, "\(stderr)")
            let url = stdout.trimmingCharacters(in: .whitespacesAndNewlines)
            #expect(url.hasPrefix("http://127.0.0.1:8080/transform/") && !url.contains("insecure"))
            let target = String(url.dropFirst("http://127.0.0.1:8080".count))
            let response = try await harness.get(target)
            #expect(response.status == 200 && Decoded.read(response.body) == Decoded(format: "png", width: 64, height: 64, frames: 1), "\(target)")
        }
        let (bad, _, stderr) = try await CLITests.run(["sign", "--transform", "zoom:2", source], environment: environment)
        #expect(bad == 2 && stderr.contains("unknown processing option 'zoom'"))
    }

    @Test("sources: an absolute URL under a configured origin is fetched as that origin; others go through the private-network guard and allowed-sources, as fetch mode does")
    func sourceRules() async throws {
        let guarded = try ProxyHarness { $0.allowPrivateNetworks = false }
        ImageFiles.serve(guarded, "photo.jpg")
        // The origin's own URL is trusted (it is configured); the same host under another port is not.
        #expect(try await guarded.get(Self.path("w:10", guarded.origin.baseURL + "/photo.jpg")).status == 200)
        let other = try await guarded.get(Self.path("w:10", "http://127.0.0.1:9/photo.jpg"))
        #expect(other.status == 403 || other.status == 502, "\(other.status) \(other.text)")
        #expect(other.text.contains("private") || other.text.contains("loopback") || other.text.contains("not allowed"), "\(other.text)")

        let listed = try ProxyHarness { $0.allowedSources = ["http://images.example.com/public/", "https://*.example.org"] }
        for source in ["http://images.example.com/private/a.jpg", "http://images.example.com/publicity.jpg", "https://example.org/a.jpg"] {
            let response = try await listed.get(Self.path("w:10", source))
            #expect(response.status == 403 && response.text.contains("allowed-sources"), "\(source)")
            let fetched = try await listed.get("/fetch?url=" + source.addingPercentEncoding(withAllowedCharacters: .alphanumerics)!)
            #expect(fetched.status == 403 && fetched.text.contains("allowed-sources"), "\(source)")
        }
    }

    @Test("presets: configured option sets, the default preset for every URL, and only-presets mode refusing other options")
    func presets() async throws {
        let harness = try ProxyHarness {
            $0.transform.presets = ["thumb": ["rs:fill:50:50", "f:png"], "default": ["q:70"]]
            $0.transform.onlyPresets = true
        }
        ImageFiles.serve(harness, "photo.jpg")
        let thumb = try await harness.get(Self.path("pr:thumb", "photo.jpg"))
        #expect(Decoded.read(thumb.body) == Decoded(format: "png", width: 50, height: 50, frames: 1))
        #expect(try await harness.get(Self.path("preset:thumb", "photo.jpg")).header("X-Cache") == "HIT")
        let refused = try await harness.get(Self.path("w:10", "photo.jpg"))
        #expect(refused.status == 400 && refused.text.contains("presets only"))
        #expect(try await harness.get(Self.path("pr:nope", "photo.jpg")).status == 400)
    }

    @Test("transform-prefix / serves imgproxy's paths at the root when no origin is configured (camo paths still route to fetch)")
    func rootPrefix() async throws {
        let origin = try ProxyHarness()
        ImageFiles.serve(origin, "photo.jpg")
        let root = try ProxyHarness {
            $0.origins = []
            $0.transform.prefix = "/"
        }
        let source = origin.origin.baseURL + "/photo.jpg"
        let response = try await root.get("/insecure/w:32/plain/" + source)
        #expect(response.status == 200 && Decoded.read(response.body)?.width == 32, "\(response.text)")
        #expect(throws: ConfigError.self) {
            var configuration = Configuration()
            configuration.transform.prefix = "/"
            configuration.origins = [OriginMapping(prefix: "/", url: "http://127.0.0.1:1")]
            try configuration.validate()
        }
    }

    @Test("after review: require-signature without a transform key refuses unsigned transforms of outside URLs; result and scaled sizes are bounded; no redirects under allowed-sources")
    func hardening() async throws {
        let required = try ProxyHarness { $0.requireSignature = true }
        ImageFiles.serve(required, "photo.jpg")
        let outside = try await required.get(Self.path("w:10", "http://203.0.113.9/a.jpg"))
        #expect(outside.status == 403 && outside.text.contains("require-signature"), "\(outside.text)")
        #expect(try await required.get(Self.path("w:10", "photo.jpg")).status == 200)

        let bounded = try ProxyHarness { $0.transform.limits.maxPixels = 1_000_000 }
        ImageFiles.serve(bounded, "photo.jpg")
        let scaled = try await bounded.get(Self.path("rs:fill:2000:100:1", "photo.jpg"))
        #expect(scaled.status == 422 && scaled.text.contains("the scaled image would be 2000x1334"), "\(scaled.text)")
        let result = try await bounded.get(Self.path("rs:fit:8000:8000:1", "photo.jpg"))
        #expect(result.status == 422, "\(result.text)")
        let big = try ProxyHarness()
        ImageFiles.serve(big, "photo.jpg")
        let over = try await big.get(Self.path("rs:fit:8000:8000:1", "photo.jpg"))
        #expect(over.status == 422 && over.text.contains("over transform-max-result-megapixels (16)"), "\(over.text)")

        let listed = try ProxyHarness { $0.origins = [] }
        listed.origin.route("/redir") { _ in Reply.redirect(to: "/photo.jpg") }
        ImageFiles.serve(listed, "photo.jpg")
        try listed.restart { $0.allowedSources = [listed.origin.baseURL + "/"] }
        let redirected = try await listed.get(Self.path("w:10", listed.origin.baseURL + "/redir"))
        #expect(redirected.status != 200 && listed.origin.requestCount("/photo.jpg") == 0, "\(redirected.status) \(redirected.text)")
        #expect(try await listed.get(Self.path("w:10", listed.origin.baseURL + "/photo.jpg")).status == 200)
    }

    @Test("after review: a weak validator gives a weak ETag; a client's no-store is served from the cache but stores nothing; one request is counted once")
    func semantics() async throws {
        let harness = try ProxyHarness()
        let photo = ImageFiles.bytes("photo.jpg")
        harness.origin.route("/dated.jpg") { _ in
            Reply(status: 200, headers: [("Content-Type", "image/jpeg"), ("Cache-Control", "max-age=600"),
                                         ("Last-Modified", "Tue, 01 Sep 2026 10:00:00 GMT")], body: photo)
        }
        ImageFiles.serve(harness, "photo.jpg")
        let dated = try await harness.get(Self.path("w:10", "dated.jpg"))
        #expect(dated.header("ETag")?.hasPrefix("W/\"") == true)
        let strong = try await harness.get(Self.path("w:10", "photo.jpg"))
        #expect(strong.header("ETag")?.hasPrefix("\"") == true)
        let stats = try await Self.stats(harness)
        #expect(stats.requests["miss"] == 2 && stats.requests.values.reduce(0, +) == 2, "\(stats.requests)")

        let hit = try await harness.get(Self.path("w:10", "photo.jpg"), headers: [("Cache-Control", "no-store")])
        #expect(hit.header("X-Cache") == "HIT")
        let unstored = try await harness.get(Self.path("w:11", "photo.jpg"), headers: [("Cache-Control", "no-store")])
        #expect(unstored.status == 200 && unstored.header("X-Cache") == "MISS")
        #expect(try await harness.get(Self.path("w:11", "photo.jpg")).header("X-Cache") == "MISS")
        #expect(harness.origin.requestCount("/photo.jpg") == 1)
    }

    enum SourceTrouble: CaseIterable { case fails, stalls }

    @Test("after review: a stale rendition is served when its source cannot be had (its origin fails, or stalls past transform-source-timeout) and stale-if-error allows it; a timeout is counted", arguments: SourceTrouble.allCases)
    func staleIfError(trouble: SourceTrouble) async throws {
        let harness = try ProxyHarness {
            $0.diskLimitBytes = 0
            $0.transform.sourceTimeoutSeconds = 0.2
        }
        let gate = Gate()
        let troubled = Locked(false)
        let photo = ImageFiles.bytes("photo.jpg")
        harness.origin.route("/flaky.jpg") { _ in
            var reply = Reply(status: 200, headers: [("Content-Type", "image/jpeg"), ("Cache-Control", "max-age=10, stale-if-error=600"),
                                                     ("ETag", "\"f\"")], body: photo)
            if troubled.withLock({ $0 }) {
                if trouble == .fails { return Reply(status: 503, headers: [("Content-Type", "text/plain")], body: Array("down".utf8)) }
                reply.gateBeforeHead = gate
            }
            return reply
        }
        // Given a rendition made, then stale, its source gone from the cache (evicted) and its origin in trouble
        let target = Self.path("w:40", "flaky.jpg")
        let made = try await harness.get(target)
        #expect(made.status == 200)
        harness.clock.advance(30)
        troubled.withLock { $0 = true }
        _ = harness.daemon.proxy.memory.remove(CacheKey(try UpstreamURL.parse(harness.origin.baseURL + "/flaky.jpg")))
        // When it is asked for again
        let stale = try await harness.get(target)
        // Then the stale rendition is the answer
        #expect(stale.status == 200 && stale.body == made.body && stale.header("Cache-Status")?.contains("stale-if-error") == true,
                "\(stale.status) \(stale.header("Cache-Status") ?? "") \(stale.text.prefix(200))")
        if trouble == .stalls {
            // ... and the timeout is counted (the source's fetch goes on, reporting no failure of its own)
            let metrics = try await harness.get("/_imagecached/metrics").text
            #expect(metrics.contains("imagecached_transforms_total{format=\"-\",result=\"source_timeout\"} 1"),
                    "\(metrics.split(separator: "\n").filter { $0.contains("transforms_total") })")
            gate.open()
        }
    }

    @Test("after review: a private source's rendition is not handed to the clients that joined; each gets its own")
    func privateSource() async throws {
        let harness = try ProxyHarness()
        let gate = Gate()
        let photo = ImageFiles.bytes("photo.jpg")
        ImageFiles.serveGated(harness, "/mine.jpg", photo, cacheControl: "private, max-age=60", gate: gate)
        let connections = try await harness.waitingClients(3, on: Self.path("w:30", "mine.jpg"))
        gate.open()
        let responses = try await readAll(connections)
        #expect(responses.allSatisfy { $0.status == 200 && $0.header("X-Cache") != "COALESCED" }, "\(responses.map { $0.header("X-Cache") ?? "-" })")
        #expect(harness.origin.requestCount("/mine.jpg") == 3)
    }

    @Test("libvips loaders other than JPEG, PNG, WebP, GIF, HEIF and TIFF never see a source (a PPM is refused even when the cache takes any type)")
    func blockedLoaders() async throws {
        let harness = try ProxyHarness { $0.contentTypes = ["*/*"] }
        harness.origin.route("/p.ppm") { _ in
            Reply(status: 200, headers: [("Content-Type", "image/x-portable-pixmap"), ("Cache-Control", "max-age=60")],
                  body: Array("P6\n2 2\n255\n".utf8) + [UInt8](repeating: 200, count: 12))
        }
        let refused = try await harness.get(Self.path("w:10/f:png", "p.ppm"))
        #expect(refused.status == 422 && refused.text.contains("not an image this daemon reads"), "\(refused.text)")
    }

    @Test("an animation's smart fill cuts, from every frame, the window libvips's attention finds on the first; a centre fill does not")
    func animatedSmartCrop() async throws {
        // anim-right.gif: 3 frames of 200x100 grey with a red and yellow checked patch at x 150-196.
        let harness = try ProxyHarness()
        ImageFiles.serve(harness, "anim-right.gif")
        func yellowPixels(_ body: [UInt8]) throws -> Int {
            try body.withUnsafeBytes { raw in
                let image = try VipsImage.load(raw, random: true, deadline: Deadline(seconds: 60))
                var count = 0
                for x in stride(from: 0, to: image.width, by: 1) {
                    for y in stride(from: 0, to: image.pageHeight, by: 4) {
                        let p = try image.pixel(x: x, y: y)
                        if p[0] > 200 && p[1] > 200 && p[2] < 80 { count += 1 }
                    }
                }
                return count
            }
        }
        let smart = try await harness.get(Self.path("rs:fill:50:100/g:sm", "anim-right.gif"))
        #expect(Decoded.read(smart.body) == Decoded(format: "gif", width: 50, height: 100, frames: 3))
        #expect(try yellowPixels(smart.body) > 20)
        let centre = try await harness.get(Self.path("rs:fill:50:100", "anim-right.gif"))
        #expect(Decoded.read(centre.body) == Decoded(format: "gif", width: 50, height: 100, frames: 3))
        #expect(try yellowPixels(centre.body) == 0)
    }

    @Test("a source revalidated into another version drops its renditions from disk too (one held only on disk is not served after)")
    func diskRenditionsOfChangedSource() async throws {
        let harness = try ProxyHarness()
        let version = ImageFiles.serveVersioned(harness, "/v.jpg", first: "\"a\"", maxAge: 600)
        let target = Self.path("w:50", "v.jpg")
        let first = try await harness.get(target)
        #expect(Decoded.read(first.body)?.height == 33)
        await harness.flushDisk()
        // The rendition now lives on disk only.
        let source = try UpstreamURL.parse(harness.origin.baseURL + "/v.jpg")
        #expect(harness.daemon.proxy.memory.removeRenditions(of: source) == 1)
        version.change(to: "\"b\"")
        let reloaded = try await harness.get("/v.jpg", headers: [("Cache-Control", "no-cache")])
        #expect(reloaded.status == 200 && reloaded.header("ETag") == "\"b\"")
        await harness.flushDisk()
        let again = try await harness.get(target)
        #expect(Decoded.read(again.body)?.height == 75 && again.header("Cache-Status")?.contains("detail=transformed") == true,
                "\(again.header("Cache-Status") ?? "")")
    }

    @Test("an SVG the cache may store (allow-svg) is still no transform source without transform-allow-svg: 422 naming it")
    func svgWithAllowSVG() async throws {
        let harness = try ProxyHarness { $0.allowSVG = true }
        ImageFiles.serve(harness, "image.svg")
        #expect(try await harness.get("/image.svg").status == 200)
        let refused = try await harness.get(Self.path("w:10/f:png", "image.svg"))
        #expect(refused.status == 422 && refused.text.contains("SVG sources are refused (transform-allow-svg is off)"), "\(refused.text)")
    }
}
