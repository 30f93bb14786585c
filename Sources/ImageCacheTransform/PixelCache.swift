// PixelCache: decoded pixels of recent sources, whole or shrunk, shared by the transforms that make the variants of one source,
// so that a source is decoded once for its variants instead of once for each (decoding is most of a transform's work:
// a PNG has no shrink-on-load, and a JPEG's entropy decoding costs the same at any scale).
//
// The pipeline it serves (Transformer, "levels"), for JPEG and opaque PNG sources. A result at least 4 times smaller
// than its source in both directions has a level k >= 1: the largest k that leaves at least twice the pixels the
// result needs in each direction (libvips's own rule for JPEG shrink-on-load), but none that leaves less than 1024
// pixels on the longer side, so that one level serves a page's usual sizes; any other result has k = 0.
//   - A source whose whole decode takes at most an eighth of the cache (`wholeSourceLimitBytes`: 16 MiB, a 5 MP
//     RGB photo, at the default) is decoded once, whole (level 0), for its k = 0 results, and for an opaque PNG for
//     all of them (its level k is a box average of the whole decode). A page's variants of a small photo (a 1 MP
//     source's 320 to 800 px sizes are not 4 times smaller) then cost one decode, not one each.
//   - A JPEG's level k is the decode libjpeg makes 2^k times smaller (k up to 3: shrink-on-load); an opaque PNG's
//     too large to keep whole is its streamed decode box-averaged by 2^k (k up to 4). Kept and resized from.
// Every result is resized from its level as libvips's thumbnail resizes a decoded image (vips_thumbnail_image). A
// level depends only on the source and the result's size, never on what the cache holds (a box average of a decoded
// image is the same pixels however it was decoded; a k = 0 result without a whole level is vips_thumbnail_buffer's,
// which decodes the same whole image), so a result is the same bytes whether its level came from here, was just
// made, or the cache is off: a rendition's entity tag stays true. WebP, GIF, HEIF/AVIF, TIFF, PNG with alpha (a box
// average of unpremultiplied pixels would fringe), animations and crops/trims keep their own paths.
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
internal import ImageCacheSystem
public import ImageCacheStatus

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
        /// Set once by the maker before `made.leave()`, read only after `made.wait()`: the level, or why it could not
        /// be made, and whether another job should try (the maker's own deadline passed: its failure says nothing
        /// about the source).
        var image: VipsImage?
        var failure: (any Error)?
        var retry = false
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

        /// The kept level, counted as a hit and made the most recently used; nil (nothing counted) when there is none.
        mutating func use(_ key: Key) -> VipsImage? {
            guard let image = touch(key) else { return nil }
            hits += 1
            return image
        }

        /// Makes the kept level the most recently used.
        @discardableResult
        mutating func touch(_ key: Key) -> VipsImage? {
            clock += 1
            guard var entry = entries[key] else { return nil }
            entry.used = clock
            entries[key] = entry
            return entry.image
        }
    }

    public let limitBytes: Int
    private let state = Locked(State())

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
    /// source asked for at once decode it once); else made here by `make` (a miss) and kept. A waiter waits at most
    /// until its own `deadline` (then it fails as a job past its time limit does); when the maker fails, its waiters
    /// fail with the same error (the same bytes would fail them the same way), unless the maker's own deadline passed:
    /// then they try again, and one of them makes it under its own.
    func level(_ key: Key, deadline: Deadline, make: () throws -> VipsImage) throws -> VipsImage {
        enum Claim { case kept(VipsImage), wait(Pending), make(Pending) }
        while true {
            let claim: Claim = state.withLock { state in
                if let image = state.use(key) { return .kept(image) }
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
                // (a millisecond past the deadline, so that the job finds it passed and reports its time limit)
                guard pending.made.wait(timeout: .now() + max(0, deadline.remaining) + 0.001) == .success else {
                    throw VipsError(operation: "level", message: "waited past the job's time limit for a level another job is making")
                }
                if let image = pending.image {
                    state.withLock { state in
                        state.hits += 1
                        state.touch(key)
                    }
                    return image
                }
                if !pending.retry, let failure = pending.failure { throw failure }
            case .make(let pending):
                do {
                    let image = try make()
                    pending.image = image
                    insert(key, image)
                    state.withLock { _ = $0.making.removeValue(forKey: key) }
                    pending.made.leave()
                    return image
                } catch {
                    pending.failure = error
                    pending.retry = deadline.passed
                    state.withLock { _ = $0.making.removeValue(forKey: key) }
                    pending.made.leave()
                    throw error
                }
            }
        }
    }

    /// The level kept for `key`, counted as a hit; nil (a miss) when there is none.
    func lookup(_ key: Key) -> VipsImage? {
        state.withLock { state in
            if let image = state.use(key) { return image }
            state.misses += 1
            return nil
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

    /// What the cache holds and has done, as the stats document carries it (`transforms.pixelCache`).
    public var stats: PixelCacheStats {
        state.withLock {
            PixelCacheStats(bytes: $0.bytes, limitBytes: limitBytes, entries: $0.entries.count, hits: $0.hits, misses: $0.misses,
                            evictions: $0.evictions)
        }
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
