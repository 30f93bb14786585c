// Data model: `DiskIndex` is what the disk tier knows without opening a file. It composes one value per concern,
// each owning its fields and stating its invariants at its top:
//
//   entries   `Entries` (DiskIndex+Entries.swift)       file name -> `Record` (size, last use, use sequence, Vary key,
//                                                        the file version a lookup verified), the total bytes, the
//                                                        next use sequence
//   variants  `VariantNames` (DiskIndex+Variants.swift)  each URL's variant names, by the URL's primary name; which
//                                                        variant a request selects and which ones a new one outdates
//   heads     `KeptHeads` (DiskIndex+Heads.swift)        the budget of decoded heads (and open descriptors) kept for
//                                                        recently hit entries, oldest first; descriptors let go
//   writes    `QueuedWrites` (DiskIndex+Writes.swift)    writes queued on the serial queue and not yet run, by URL
//   load      `LoadState` (DiskIndex+Load.swift)         the startup loader's progress (waiting, scanning, loaded)
//   counters  `Counters` (below)                         what `stats` reports beside the entries
//
// DiskIndex keeps the invariants that span two parts, through the mutations below (the only ones callers use):
// `variants` lists exactly the variant-named records of `entries`, and `heads` counts exactly the heads the records
// of `entries` hold (each under the ticket its record names).
//
// Ownership (unchanged by the split): the parts are plain values inside `DiskIndex`, itself a value guarded by
// `DiskCache.index` (a Mutex, see DiskCache.swift); none has a lock or a queue of its own. The disk queue (loader,
// writes, sweeps) and the lookups on the read queue and on the caller's thread all update it through
// `DiskCache.withIndex`, never holding the lock across a file call; `stats` reads it under the same lock.
// The startup loader that fills it is DiskCache+Index.swift.

internal import ImageCacheSystem
internal import ImageCacheHTTP
internal import ImageCacheStatus
internal import Foundation

/// Guarded by `DiskCache.index` (through `DiskCache.withIndex`).
struct DiskIndex: Sendable {
    struct Record {
        var size: Int
        /// Seconds since 1970 (injected clock).
        var lastUsed: Double
        /// The last use as recorded in the file's mtime.
        var persistedUse: Double
        /// Orders uses with equal `lastUsed` (0 for entries found by the loader).
        var sequence: UInt64
        /// Which record this is: a new file under the name (`insert`) makes a new record, so a lookup that read the
        /// old file does not attach its version to the new one. 0 for records found by the loader.
        var created: UInt64 = 0
        /// The file version a lookup verified (nil: none yet). A lookup that finds the same identity (inode, size,
        /// ctime) skips hashing the body again, and with a kept head skips reading the header too; any change to
        /// the file, or a new file under the name, has another identity.
        var verified: VerifiedVersion? = nil
        /// The request field values the stored response was selected with (nil: no Vary; the primary name).
        var vary: VaryKey? = nil
    }

    /// A file version whose header and body a lookup verified.
    struct VerifiedVersion: Sendable {
        var identity: FileIdentity
        /// The decoded header as an entry without a body, kept for recently hit entries (`heads`); nil when dropped.
        /// Boxed, so reading a record under the lock copies one reference, not the entry's fields.
        var head: Head?
        var bodyOffset: Int
        var bodyLength: Int
        /// The body's region on a descriptor kept open (nginx's open_file_cache), for entries sent from their files;
        /// dropped with the head, or when the record is replaced or removed (a new file, a purge, an eviction).
        var file: FileBody?
        /// When a lookup last opened the name and found this version there (injected clock, seconds).
        var checkedAt: Double
        /// Which `heads` slot holds this head (slots of heads dropped since are skipped).
        var headTicket: UInt64 = 0
    }

    /// An immutable decoded header (an entry without a body).
    final class Head: Sendable {
        let entry: CacheEntry
        init(_ entry: CacheEntry) { self.entry = entry }
    }

    /// What `stats` reports beside the entries: events of the tier, counted where they happen.
    /// Invariant: each only grows.
    struct Counters: Sendable {
        var writeErrors = 0
        var removedCorrupt = 0
        var evicted = 0
        var expired = 0
        var bodiesVerified = 0
    }

    var entries = Entries()
    var variants = VariantNames()
    var heads = KeptHeads()
    var writes = QueuedWrites()
    var load = LoadState.waiting
    var counters = Counters()

    // MARK: - Records (entries, with the variant list and the head budget kept in step)

    /// A new file under `name` (written now): a new record, so versions verified of the file it replaced stay off it.
    mutating func insert(_ name: String, size: Int, lastUsed: Double, persistedUse: Double, vary: VaryKey? = nil) {
        put(name, entries.newRecord(size: size, lastUsed: lastUsed, persistedUse: persistedUse, vary: vary))
    }

    /// A record the loader found (`sequence` and `created` 0).
    mutating func add(_ name: String, _ record: Record) {
        put(name, record)
    }

    /// Stores `record` under `name`: a record it replaces lets its head go; a new name is listed under its URL.
    private mutating func put(_ name: String, _ record: Record) {
        if let old = entries.put(name, record) { forgetHead(old) } else { variants.insert(name) }
    }

    mutating func remove(_ name: String) {
        guard let old = entries.remove(name) else { return }
        forgetHead(old)
        variants.remove(name)
    }

    mutating func removeAllRecords() {
        for record in entries.removeAll().values {
            if let file = record.verified?.file { heads.release(file) }
        }
        variants.removeAll()
        heads.removeAll()
    }

    /// A lookup hit: a known record gets the new last use (its size stays: an insert may have replaced the file
    /// since the lookup opened it); an unknown one is added only while the loader runs (afterwards, a name missing
    /// from the index was removed meanwhile, and must not come back).
    /// `verified`: the file version the lookup verified (nil: not to be trusted later); attached only to the record
    /// the lookup saw (`createdSeen`, its `created`; nil: there was none), not to one a new file made since.
    mutating func markUsed(_ name: String, size: Int, lastUsed: Double, persistedUse: Double, verified: VerifiedVersion?,
                           createdSeen: UInt64?, vary: VaryKey? = nil) {
        var verified = verified
        if entries.records[name] == nil {
            guard !load.isLoaded else { return }
            insert(name, size: size, lastUsed: lastUsed, persistedUse: persistedUse, vary: vary)
        } else if entries.records[name]?.created != createdSeen {
            verified = nil
        }
        guard let index = entries.records.index(forKey: name) else { return }
        entries.recordUse(at: index, lastUsed: lastUsed, persistedUse: persistedUse)
        attach(verified, to: name, at: index)
        dropOldHeads()
    }

    // MARK: - Lookups

    /// Where a lookup of `name` goes.
    enum LookupRoute {
        /// The loaded index does not hold it and nothing is queued for it: a miss.
        case absent
        /// Read it on the read queue.
        case read
        /// A write of it (or of everything) is queued: read it on the serial queue, after that write.
        case afterWrites
    }

    /// How a lookup of the URL with primary name `primary` for a request with `fields` proceeds; for `.read` the
    /// name of the variant selected (nil: none indexed yet, the lookup searches the URL's directory) and its kept
    /// head and descriptor if any (`Record.keptFile`, the hit then recorded in place). Runs under the index lock once
    /// per memory miss.
    mutating func routeKeeping(_ primary: String, fields: HTTPHeaders, now: Double)
        -> (route: LookupRoute, name: String?, kept: (Head, FileBody, FileIdentity)?)
    {
        if writes.isQueued(primary) { return (.afterWrites, nil, nil) }
        guard let name = selectedName(primary, fields: fields), let index = entries.records.index(forKey: name) else {
            return (load.isLoaded ? .absent : .read, nil, nil)
        }
        // Recorded before the caller's fstat confirms the version: if that fails, the lookup that follows records it.
        guard let kept = entries.records.values[index].keptFile(now: now) else { return (.read, name, nil) }
        entries.recordUse(at: index, lastUsed: now)   // in place: no second hash, no record copy back
        return (.read, name, kept)
    }

    /// What a lookup of `name` starts from: the record it saw (`created`, nil: none), the version verified before, and
    /// the last use on disk; nil: the loaded index does not hold the name (a miss without opening anything).
    func seen(_ name: String) -> (created: UInt64?, verified: VerifiedVersion?, persistedUse: Double)? {
        guard !knownAbsent(name) else { return nil }
        let record = entries.records[name]
        return (record?.created, record?.verified, record?.persistedUse ?? -Double.infinity)
    }

    /// Whether a lookup of `name` can answer "miss" without opening anything.
    func knownAbsent(_ name: String) -> Bool { load.isLoaded && entries.records[name] == nil }

    var stats: DiskCacheStats {
        var stats = DiskCacheStats()
        stats.entries = entries.records.count
        stats.bytes = entries.bytes
        stats.indexLoaded = load.isLoaded
        stats.indexLoadSeconds = load.seconds
        stats.writeErrors = counters.writeErrors
        stats.removedCorrupt = counters.removedCorrupt
        stats.evicted = counters.evicted
        stats.expired = counters.expired
        stats.bodiesVerified = counters.bodiesVerified
        return stats
    }

    /// Two lower-case hex digits: a shard directory name.
    static func isShardName(_ name: String) -> Bool {
        name.utf8.count == 2 && name.utf8.allSatisfy { ($0 >= 0x30 && $0 <= 0x39) || ($0 >= 0x61 && $0 <= 0x66) }
    }
}

extension DiskIndex.Record {
    /// The kept head and descriptor, if a lookup opened the name and found that version less than
    /// `DiskCache.openFileValidSeconds` before `now` and the mtime touch is not due (that is a lookup's job).
    func keptFile(now: Double) -> (DiskIndex.Head, FileBody, FileIdentity)? {
        guard let version = verified, let head = version.head, let file = version.file,
              now - version.checkedAt < DiskCache.openFileValidSeconds,
              now - persistedUse < DiskCache.touchIntervalSeconds
        else { return nil }
        return (head, file, version.identity)
    }
}

extension DiskIndex.VerifiedVersion {
    /// What a lookup that opened a file version still has to check, given the version an earlier lookup verified.
    enum Check {
        /// The version verified before, with its head kept: neither the header nor the body is read to check them.
        case trusted(DiskIndex.VerifiedVersion)
        /// The version verified before, its head dropped: the header is read again to decode it; the body is trusted.
        case header
        /// Another version, or none verified before: the header and the body are checked.
        case headerAndBody
    }

    /// What a lookup that opened the file version `identity` still has to check (`verifiedBefore`: the version the
    /// record holds, nil: none). Trusting the same identity is safe: see `FileIdentity`.
    static func check(opened identity: FileIdentity, verifiedBefore before: Self?) -> Check {
        guard let before, before.identity == identity else { return .headerAndBody }
        return before.head == nil ? .header : .trusted(before)
    }

    /// This version as later lookups may trust it: with the descriptor kept for them (`file`, nil: none) and the
    /// time the name was opened and found to hold it (`checkedAt`); nil while its ctime is too recent to trust
    /// (`FileIdentity.settleSeconds`).
    func settled(file: FileBody?, checkedAt: Date) -> Self? {
        guard identity.isSettled(now: checkedAt) else { return nil }
        var settled = self
        settled.file = file
        settled.checkedAt = checkedAt.timeIntervalSince1970
        return settled
    }
}
