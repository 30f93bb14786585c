// TieredStore: the one store in front of both tiers. Everything that reads or changes what is cached goes through
// it: the hit path (memory, then disk), the fetch (store, refresh after a 304, forget), the admin purge. The rules
// that span the tiers are written here once:
//
//   look up      memory first, on the caller's thread (the hot path: one lock, no hop, the body not copied); on a
//                miss the disk, whose small bodies are read whole only when the memory tier would admit them
//                (then promoted), the rest sent from their files
//   store        memory, then disk (the next request hits memory while the file is written)
//   refresh      a 304's merged head replaces the variant in memory (unless its body lives only in its file) and
//                rewrites the file's header, keeping the body
//   promote      a disk hit's copy into memory, subject to the memory tier's admission and to no removal since
//                the lookup began (`removalsSeen`)
//   remove       memory at once (no later request hits it), and again once the files are gone (disk first, then
//                memory: a promotion that read a file before it went is refused by the removal count)
//   purge all    the same order
//
// Variants (RFC 9111 section 4.1): the key is the URL (primary key); each tier keeps up to `max-variants` stored
// responses per URL, one per variant id (the request field values its Vary names, see Vary.swift), selected by the
// request's fields. A removal of the URL removes every variant in both tiers.
//
// Ownership: immutable after init; `memory` guards itself (Mutex), `disk` owns its queues. Sendable.

package import ImageCacheHTTP
internal import Foundation
internal import Crypto

/// The memory and disk tiers behind one interface, with the cross-tier rules above.
public final class TieredStore: Sendable {
    public let memory: MemoryCache
    /// nil when the disk tier is off.
    public let disk: DiskCache?

    public init(memory: MemoryCache, disk: DiskCache?) {
        self.memory = memory
        self.disk = disk
    }

    // MARK: look up

    /// The memory tier's variant for a request (the hot path, on the caller's thread); `removals` is read under the
    /// same lock for a disk lookup that may follow. `requestFields` is built only when a stored variant has a Vary.
    package func lookupInMemory(_ key: CacheKey, requestFields: @autoclosure () -> HTTPHeaders,
                        removals: inout UInt64) -> MemoryCache.Found {
        memory.lookup(key, requestFields: requestFields(), removals: &removals)
    }

    /// A second look in memory for a request already counted (the coalescer's re-check).
    package func peekInMemory(_ key: CacheKey, requestFields: @autoclosure () -> HTTPHeaders) -> MemoryCache.Found {
        memory.peek(key, requestFields: requestFields())
    }

    /// Asks the disk tier for the variant `requestFields` select (see `DiskCache.lookup`); a body is read whole only
    /// when the memory tier would admit it. False (and `completion` not called) when there is no disk tier.
    package func lookupOnDisk(_ key: CacheKey, requestFields: HTTPHeaders,
                      completion: @escaping @Sendable (DiskLookup?) -> Void) -> Bool {
        guard let disk else { return false }
        disk.lookup(key, requestFields: requestFields, readsWhole: { [memory] cost in memory.admits(key, cost: cost) },
                    completion: completion)
        return true
    }

    /// Reads `key`'s variant for `requestFields` from disk again (after the origin confirmed a variant whose body
    /// lives in its file); the body is read whole only up to the disk tier's memory read limit.
    package func reread(_ key: CacheKey, requestFields: HTTPHeaders, completion: @escaping @Sendable (DiskLookup?) -> Void) -> Bool {
        guard let disk else { return false }
        disk.lookup(key, requestFields: requestFields, completion: completion)
        return true
    }

    // MARK: change

    /// Stores a response just received: memory, then disk. `diskWriteDone` runs once the disk write is over (written
    /// or dropped) when there is a disk tier; the caller counts the body in flight until then.
    package func store(_ entry: CacheEntry, diskWriteDone: (@Sendable () -> Void)? = nil) {
        memory.insert(entry)
        disk?.insert(entry, done: diskWriteDone)
    }

    /// Whether a response is written to disk when stored (its body is then kept whole until written).
    package var writesToDisk: Bool { disk != nil }

    /// A variant confirmed by the origin (a 304's merged head, or a disk copy the origin confirmed): kept in memory
    /// unless `bodyInFile` (its body was left in its file), and the file's header rewritten.
    package func refresh(_ entry: CacheEntry, bodyInFile: Bool) {
        if !bodyInFile { memory.insert(entry) }
        disk?.update(entry)
    }

    /// A disk copy the origin just confirmed goes into memory as a fresh response would.
    package func keepInMemory(_ entry: CacheEntry) {
        memory.insert(entry)
    }

    /// A disk hit's copy into memory (see `MemoryCache.promote`).
    @discardableResult
    package func promote(_ entry: CacheEntry, removalsSeen: UInt64) -> Bool {
        memory.promote(entry, removalsSeen: removalsSeen)
    }

    /// Removes every variant of `key`, and of a URL's key every rendition made from it: the files first, then memory. `completion` runs once both are gone (on the
    /// disk queue, or here without a disk tier) with whether memory held it and why a file could not go (nil: gone).
    package func remove(_ key: CacheKey, completion: (@Sendable (_ wasInMemory: Bool, _ diskFailure: String?) -> Void)? = nil) {
        // Memory goes at once (a request after this call must not hit memory while the file waits its turn); the
        // removal after the file catches a promotion that read the file before it went.
        let removed = memory.remove(key) != nil
        let renditions = key.isRendition ? 0 : memory.removeRenditions(of: key.url)
        guard let disk else {
            completion?(removed || renditions > 0, nil)
            return
        }
        disk.remove(key) { [memory] failure in
            let late = memory.remove(key) != nil
            let lateRenditions = key.isRendition ? 0 : memory.removeRenditions(of: key.url)
            completion?(removed || late || renditions + lateRenditions > 0, failure)
        }
    }

    /// A new response for a URL was stored: renditions in memory made from another version of it (their entity tag
    /// is not the one `RenditionTag` gives for the new validator) are removed, with the URL's renditions on disk.
    /// One dictionary look-up when the URL has none in memory. (Renditions only on disk are judged when they go
    /// stale: their source is fetched then and compared.)
    package func sourceStored(_ entry: CacheEntry) {
        guard !entry.key.isRendition else { return }
        let validator = entry.validator
        let outdated = memory.renditions(of: entry.key.url).contains { rendition in
            guard let validator else { return true }
            return rendition.etag != RenditionTag.etag(sourceValidator: validator, rendition: rendition.key.rendition)
        }
        if outdated { removeRenditions(of: entry.key) }
    }

    /// Removes the renditions made from `key`'s URL (its source changed: they describe the old one), in both tiers.
    package func removeRenditions(of key: CacheKey) {
        memory.removeRenditions(of: key.url)
        disk?.removeRenditions(of: key) { [memory] _ in memory.removeRenditions(of: key.url) }
    }

    /// Removes `key`'s variant `variant` only (one response outdated by the origin; the URL's other variants stay).
    package func remove(_ key: CacheKey, variant: String) {
        memory.remove(key, variant: variant)
        disk?.remove(key, variant: variant) { [memory] _ in memory.remove(key, variant: variant) }
    }

    /// Removes everything: the files first, then memory (and memory at once, as `remove`). `completion` as `remove`.
    package func removeAll(completion: (@Sendable (_ diskFailure: String?) -> Void)? = nil) {
        guard let disk else {
            memory.removeAll()
            completion?(nil)
            return
        }
        memory.removeAll()
        disk.removeAll { [memory] failure in
            memory.removeAll()
            completion?(failure)
        }
    }
}

/// A rendition's entity tag: a hash of its source's validator (ETag, else Last-Modified) and its text, so that a
/// changed source gives another tag. Strong only when the source's ETag is strong (its bytes are then a function of
/// both); weak for a weak ETag or a Last-Modified (one-second resolution), so If-Range never joins two versions.
/// `pipeline` is in the hash too: it changes when the bytes made from one source and one text change (a new way of
/// decoding or resizing), so that renditions stored by an earlier version are told apart from (and replaced by) the
/// new ones instead of sharing their strong tag.
package enum RenditionTag {
    /// 2: sources decoded once per level for all their variants (PixelCache).
    package static let pipeline = 2

    package static func etag(sourceValidator: String, rendition: String) -> String {
        let strong = sourceValidator.hasPrefix("\"")
        let digest = SHA256.hash(data: Array(("pipeline \(pipeline)\n" + sourceValidator + "\n" + rendition).utf8))
        return (strong ? "" : "W/") + "\"" + URLSigning.hexEncode(Array(digest.prefix(12))) + "\""
    }
}
