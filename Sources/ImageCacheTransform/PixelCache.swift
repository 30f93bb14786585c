// PixelCache: decoded pixels of recent sources, shrunk, shared by the transforms that make the variants of one source,
// so that a source is decoded once for its variants instead of once for each (decoding is most of a transform's work:
// a PNG has no shrink-on-load, and a JPEG's entropy decoding costs the same at any scale).
//
// The pipeline it serves (Transformer, "levels"), for JPEG and opaque PNG sources:
//   - a source whose whole decode takes at most an eighth of the cache (`wholeSourceLimitBytes`: 16 MiB, a 5 MP
//     RGB photo, at the default) is decoded once, whole, as its level 0; every variant is resized from it as
//     libvips's thumbnail does (vips_thumbnail_image), an opaque PNG's made 4 times smaller or more from a box
//     average of it (level k below). A page's variants of a small photo, which no level below would serve (a 1 MP
//     source's 320 to 800 px sizes are not 4 times smaller), then cost one decode, not one each: a PNG's decode
//     is most of a transform's work, having no shrink-on-load.
//   - otherwise a source made smaller by at least 4 in both directions is decoded to its level k (the largest k that
//     leaves at least twice the pixels the result needs in each direction: libvips's own rule for JPEG
//     shrink-on-load; but none that leaves less than 1024 pixels on the longer side, so that one level serves a
//     page's usual sizes), kept, and the result resized from it. An opaque PNG's level k is the decoded image
//     box-averaged by 2^k (k up to 4); a JPEG's is the decode libjpeg makes 2^k times smaller (k up to 3:
//     shrink-on-load, what vips_thumbnail_buffer would decode).
// Each level is what libvips's thumbnail would decode for that result (level 0 and k=0: the whole image; a box
// average of a decoded image is the same pixels however the image was decoded), so the bytes of a result are the
// same whether its level came from here, was just made, or the cache is off and libvips's thumbnail made it: a
// rendition's entity tag stays true. WebP, GIF, HEIF/AVIF, TIFF, PNG with alpha (a box average of unpremultiplied
// pixels would fringe), animations and crops/trims keep their own paths.
//
// Data model (one Mutex): entries by key (the source's SHA-256 and the level: a digest an attacker cannot collide
// with another source's), each with its image (in memory, unwatched: VipsImage.shareable) and its bytes, and a use
// counter for least-recently-used eviction; the total held within `limitBytes` (`transform-pixel-cache`, 128 MiB;
// 0 keeps nothing), each entry counted with its metadata (ICC, EXIF, XMP) and 16 KiB for its structures. An entry
// larger than the limit is not kept. Images are immutable once in memory: any number of
// workers read one at a time. Levels being made, by key (`making`): a job that wants one waits for its maker (a
// DispatchGroup left once the level is made or has failed) instead of decoding the source again, so the variants of
// a new source asked for at once, on several workers, cost one decode.

internal import Dispatch
internal import Foundation
internal import Synchronization

public final class PixelCache: Sendable {
    struct Key: Hashable {
        /// SHA-256 of the source's bytes, base64.
        let digest: String
        let level: Int
    }

    /// How a source's levels are made: decoded whole and box-averaged (PNG), or decoded smaller by the decoder
    /// (JPEG's shrink-on-load: the factor libvips's thumbnail would choose, so each level is what that decode is).
    enum Kind {
        case boxAverage, shrinkOnLoad
        /// The largest level: 16 for a box average, 8 for JPEG's decoder.
        var maximumLevel: Int { self == .boxAverage ? 4 : 3 }
    }

    private struct Entry {
        let image: VipsImage
        let bytes: Int
        var used: UInt64
    }

    /// A level one job is making; the jobs that want it meanwhile wait for it instead of decoding the source again.
    private final class Pending: @unchecked Sendable {
        let made = DispatchGroup()
        /// Set once by the maker before `made.leave()`, read only after `made.wait()`; nil: the make failed.
        var image: VipsImage?
        init() { made.enter() }
    }

    private struct State {
        var entries: [Key: Entry] = [:]
        var making: [Key: Pending] = [:]
        var bytes = 0
        var clock: UInt64 = 0
        var hits = 0
        var misses = 0
        var evictions = 0
    }

    /// What the cache holds and has done, for /stats and the metrics.
    public struct Stats: Sendable, Equatable {
        public var bytes: Int
        public var entries: Int
        public var hits: Int
        public var misses: Int
        public var evictions: Int
    }

    public let limitBytes: Int
    private let state = Mutex(State())

    /// Called when a job starts waiting for a level another job is making (a test's event; nil in the daemon).
    private let waiting: (@Sendable () -> Void)?

    public convenience init(limitBytes: Int) {
        self.init(limitBytes: limitBytes, waiting: nil)
    }

    init(limitBytes: Int, waiting: (@Sendable () -> Void)?) {
        self.limitBytes = max(0, limitBytes)
        self.waiting = waiting
    }

    /// The most a source's whole decode (its level 0) may take to be kept: an eighth of the cache, so that a page's
    /// sources fit together and a worker never holds more than this of a whole decode for it.
    public var wholeSourceLimitBytes: Int { limitBytes / 8 }

    /// The level for `key`: kept (a hit); being made by another job, then waited for (a hit: the variants of a new
    /// source asked for at once decode it once); else made here by `make` (a miss) and kept. When the maker fails
    /// (its source unreadable, its deadline passed) a waiter tries again, and may make it itself under its own
    /// deadline. The wait is bounded by the maker's `transform-timeout`, after which its evaluation is killed.
    func level(_ key: Key, make: () throws -> VipsImage) throws -> VipsImage {
        enum Claim { case kept(VipsImage), wait(Pending), make(Pending) }
        while true {
            let claim: Claim = state.withLock { state in
                state.clock += 1
                if var entry = state.entries[key] {
                    state.hits += 1
                    entry.used = state.clock
                    state.entries[key] = entry
                    return .kept(entry.image)
                }
                if let pending = state.making[key] { return .wait(pending) }
                let pending = Pending()
                state.making[key] = pending
                state.misses += 1
                return .make(pending)
            }
            switch claim {
            case .kept(let image):
                return image
            case .wait(let pending):
                waiting?()
                pending.made.wait()
                if let image = pending.image {
                    state.withLock { $0.hits += 1 }
                    return image
                }
            case .make(let pending):
                var image: VipsImage?
                defer {
                    pending.image = image
                    if let image { insert(key, image) }
                    state.withLock { _ = $0.making.removeValue(forKey: key) }
                    pending.made.leave()
                }
                image = try make()
                return image!
            }
        }
    }

    /// The level kept for `key`, counted as a hit; nil (a miss) when there is none.
    func lookup(_ key: Key) -> VipsImage? {
        state.withLock { state in
            state.clock += 1
            guard var entry = state.entries[key] else {
                state.misses += 1
                return nil
            }
            state.hits += 1
            entry.used = state.clock
            state.entries[key] = entry
            return entry.image
        }
    }

    /// What an entry is counted as beyond its image's pixels and metadata: the image's and the entry's own
    /// structures. It also bounds the entries (8192 in 128 MiB), whose eviction is a scan.
    static let entryOverheadBytes = 16 << 10

    /// Keeps `image` (a shareable level) under `key`, evicting the least recently used entries to stay within the
    /// limit; one larger than the limit is not kept. An entry counts its pixels, its metadata (a source's ICC
    /// profile, EXIF, XMP: copied onto the level, and possibly megabytes on a few pixels) and `entryOverheadBytes`.
    func insert(_ key: Key, _ image: VipsImage) {
        let bytes = image.retainedBytes + Self.entryOverheadBytes
        guard bytes <= limitBytes else { return }
        // Dropped images are released after the lock (their pixels freed outside it).
        var dropped: [VipsImage] = []
        state.withLock { state in
            state.clock += 1
            if let old = state.entries.removeValue(forKey: key) {
                state.bytes -= old.bytes
                dropped.append(old.image)
            }
            while state.bytes + bytes > limitBytes, let oldest = state.entries.min(by: { $0.value.used < $1.value.used }) {
                state.entries[oldest.key] = nil
                state.bytes -= oldest.value.bytes
                state.evictions += 1
                dropped.append(oldest.value.image)
            }
            state.entries[key] = Entry(image: image, bytes: bytes, used: state.clock)
            state.bytes += bytes
        }
        withExtendedLifetime(dropped) {}   // released here, after the lock
    }

    public var stats: Stats {
        state.withLock { Stats(bytes: $0.bytes, entries: $0.entries.count, hits: $0.hits, misses: $0.misses, evictions: $0.evictions) }
    }

    /// The level a result of `scaleX` x `scaleY` of the source is made from: the largest k up to the kind's maximum
    /// whose reduction (2^k x 2^k pixels into one) leaves at least twice the pixels the result needs in each direction
    /// (libvips's own rule for JPEG shrink-on-load: "leave at least a factor of two for the final resize step"); 0
    /// (decode and resize as they are) when even 2 would not.
    static func level(sourceWidth: Int, sourceHeight: Int, scaleX: Double, scaleY: Double, kind: Kind = .boxAverage) -> Int {
        var level = 0
        for k in 1...kind.maximumLevel {
            let factor = Double(1 << k)
            guard sourceWidth >> k >= 1, sourceHeight >> k >= 1, 2 * factor * scaleX <= 1, 2 * factor * scaleY <= 1 else { break }
            level = k
        }
        return min(level, cap(longestSide: max(sourceWidth, sourceHeight), kind: kind))
    }

    /// The deepest level of a source: the one that keeps its longer side at 1024 pixels or more (1 at least), so that
    /// one level serves all the sizes a page asks for (a 4000 px photo's 320 to 1000 px variants from its 2000 px
    /// level: one decode, where the deepest levels each size allows would take two or three).
    static func cap(longestSide: Int, kind: Kind) -> Int {
        var cap = 1
        while cap < kind.maximumLevel && longestSide >> (cap + 1) >= 1024 { cap += 1 }
        return cap
    }
}
