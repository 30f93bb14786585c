// Data model: `DiskIndex` maps an entry's file name (DiskEntryFormat: the URL's primary name, with a variant suffix
// for a response with Vary) to its file size, last use and use sequence, its Vary key, and the file version a lookup
// last verified (with, for recently hit entries, the decoded header); it lists each URL's Vary variants by primary
// name (`variantNames`), and keeps the total bytes and the tier's counters. It is a value guarded by `DiskCache.index` (a Mutex):
// the disk queue (loader, writes, sweeps) and the lookups on the read queue both update it, never holding the lock
// across a file call. `stats` reads it under the same lock.
//
// Startup loader (nginx's cache loader): the index starts empty and `loaded == false`. The loader lists the 256
// possible top-level shard directories, then handles one per queue block (its 256 subdirectories, every file in
// them) and re-queues itself, so lookups and writes interleave with it. Per file it reads only the header: open,
// fstat (size, mtime = last use), one pread of 4 KiB (more only for a larger header), header checksum, the name the
// key and variant id give equal to the file name, size equal to header + body length. Failing files are removed as
// corrupt; leftover `*.tmp` files (a crash mid-write; our own tmp files never outlive a queue block) are removed. A
// name already in the index (written or looked up since start) is skipped: the index knows better; so is (removed) a
// variant whose Vary names differ from a variant of its URL stored since start. While loading, a lookup the index
// cannot answer lists the URL's directory and reads the candidates' headers; once loaded, a key not in the index is
// a miss without a syscall or a queue hop.

internal import ImageCacheSystem
internal import ImageCacheHTTP
internal import ImageCacheStatus
internal import Dispatch
internal import Foundation
internal import Logging
internal import Synchronization
#if canImport(Glibc)
internal import Glibc
#endif

/// Guarded by `DiskCache.index`.
struct DiskIndex: Sendable {
    struct Record {
        var size: Int
        /// Seconds since 1970 (injected clock).
        var lastUsed: Double
        /// The last use as recorded in the file's mtime.
        var persistedUse: Double
        /// Orders uses with equal `lastUsed` (0 for entries found by the loader).
        var sequence: UInt64
        /// Which record this is: a new file under the name (`set`) makes a new record, so a lookup that read the old
        /// file does not attach its version to the new one. 0 for records found by the loader.
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
        /// Which `headQueue` slot holds this head (slots of heads dropped since are skipped).
        var headTicket: UInt64 = 0
    }

    /// An immutable decoded header (an entry without a body).
    final class Head: Sendable {
        let entry: CacheEntry
        init(_ entry: CacheEntry) { self.entry = entry }
    }

    /// Decoded heads kept in `records`, by total cost: a few MiB serve the hot set of entries sent from their files.
    static let headLimitBytes = 4 << 20
    /// At most this many heads (and open descriptors with them).
    var headLimitCount = 1024
    /// Heads in the order they were kept, oldest first, by name and ticket; a slot whose ticket no longer matches
    /// the record's head (dropped, replaced, kept again later) is skipped, and compacted away when they pile up.
    var headQueue: [(name: String, ticket: UInt64)] = []
    var headStart = 0
    var nextHeadTicket: UInt64 = 1
    var headCount = 0
    var headBytes = 0
    /// Descriptors (kept with heads) let go by the last mutation: the caller drops them after unlocking, so their
    /// close (the last one of an unlinked file frees its blocks) never runs under the lock (`DiskCache.withIndex`).
    var released: [FileBody] = []

    var records: [String: Record] = [:]
    /// The names of the records with a Vary key, by their URL's primary name.
    var variantNames: [String: [String]] = [:]
    var bytes = 0
    var nextSequence: UInt64 = 1
    var loaded = false
    var loadSeconds: Double?
    /// Top-level shard directories the loader has still to scan; nil before it has listed them.
    var pendingShards: [String]?
    var loadStart = ContinuousClock.now
    var writeErrors = 0
    var removedCorrupt = 0
    var evicted = 0
    var expired = 0
    var bodiesVerified = 0
    /// Writes, updates and removals queued on the serial queue and not yet run, by the URL's primary name.
    var pendingWrites: [String: Int] = [:]
    /// `removeAll` calls queued and not yet run.
    var pendingRemoveAll = 0

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
    /// head and descriptor if any (`keptFile`). Runs under the index lock once per memory miss.
    mutating func routeKeeping(_ primary: String, fields: HTTPHeaders, now: Double)
        -> (route: LookupRoute, name: String?, kept: (Head, FileBody, FileIdentity)?)
    {
        if pendingRemoveAll > 0 || pendingWrites[primary] != nil { return (.afterWrites, nil, nil) }
        guard let name = selectedName(primary, fields: fields), let index = records.index(forKey: name) else {
            return (loaded ? .absent : .read, nil, nil)
        }
        return (.read, name, keptFile(at: index, now: now))
    }

    /// The name of the URL's variant that `fields` select (RFC 9111 section 4.1): the response without Vary, or one
    /// whose Vary fields match; the most recently stored when several do. nil: none indexed.
    func selectedName(_ primary: String, fields: HTTPHeaders) -> String? {
        guard let names = variantNames[primary] else { return records[primary] == nil ? nil : primary }
        var best: (name: String, created: UInt64, lastUsed: Double)?   // the most recently stored, then used
        if let record = records[primary] { best = (primary, record.created, record.lastUsed) }
        for name in names {
            guard let record = records[name], record.vary?.matches(fields) ?? true else { continue }
            if best == nil || (record.created, record.lastUsed) > (best!.created, best!.lastUsed) {
                best = (name, record.created, record.lastUsed)
            }
        }
        return best?.name
    }

    /// Whether a variant of `primary` stored since start varies on other fields than `names` (a file the loader finds
    /// for the URL is then outdated).
    func hasNewerVariants(_ primary: String, otherThanNamed names: [String]) -> Bool {
        allNames(primary).contains { name in
            guard let record = records[name], record.created > 0 else { return false }
            return (record.vary?.names ?? []) != names
        }
    }

    /// The indexed names of every variant of the URL with primary name `primary`.
    func allNames(_ primary: String) -> [String] {
        (records[primary] == nil ? [] : [primary]) + (variantNames[primary] ?? [])
    }

    /// The variants of `primary` to remove after `kept` (a variant just stored, with Vary names `names`) was
    /// stored: those that vary on other names (or on none, or when `kept` has none), then the least recently used
    /// past `limit`.
    func variantsToDrop(_ primary: String, kept: String, names: [String], limit: Int) -> [String] {
        var drop: [String] = []
        var others: [(name: String, record: Record)] = []
        for name in allNames(primary) where name != kept {
            guard let record = records[name] else { continue }
            if (record.vary?.names ?? []) != names { drop.append(name) } else { others.append((name, record)) }
        }
        if others.count + 1 > limit {
            others.sort { a, b in
                a.record.lastUsed != b.record.lastUsed ? a.record.lastUsed < b.record.lastUsed : a.record.sequence < b.record.sequence
            }
            drop += others.prefix(others.count + 1 - limit).map(\.name)
        }
        return drop
    }

    mutating func writeQueued(_ name: String?) {
        guard let name else { return pendingRemoveAll += 1 }
        pendingWrites[name, default: 0] += 1
    }

    mutating func writeDone(_ name: String?) {
        guard let name else { return pendingRemoveAll -= 1 }
        if let count = pendingWrites[name], count > 1 { pendingWrites[name] = count - 1 } else { pendingWrites[name] = nil }
    }

    mutating func set(_ name: String, size: Int, lastUsed: Double, persistedUse: Double, vary: VaryKey? = nil) {
        if let old = records[name] {
            bytes -= old.size
            forgetHead(old)
        }
        add(name, Record(size: size, lastUsed: lastUsed, persistedUse: persistedUse, sequence: nextSequence,
                         created: nextSequence, vary: vary))
        nextSequence += 1
    }

    /// Stores `record` under `name` (whose old record, if any, the caller has uncounted), listing a variant under its
    /// URL.
    mutating func add(_ name: String, _ record: Record) {
        if records.updateValue(record, forKey: name) == nil, DiskEntryFormat.isVariantName(name) {
            variantNames[DiskEntryFormat.primaryName(of: name), default: []].append(name)
        }
        bytes += record.size
    }

    /// A lookup hit: a known record gets the new last use (its size stays: an insert may have replaced the file
    /// since the lookup opened it); an unknown one is added only while the loader runs (afterwards, a name missing
    /// from the index was removed meanwhile, and must not come back).
    /// `verified`: the file version the lookup verified (nil: not to be trusted later); attached only to the record
    /// the lookup saw (`createdSeen`, its `created`; nil: there was none), not to one a new file made since.
    mutating func markUsed(_ name: String, size: Int, lastUsed: Double, persistedUse: Double, verified: VerifiedVersion?,
                           createdSeen: UInt64?, vary: VaryKey? = nil) {
        var verified = verified
        if records[name] == nil {
            guard !loaded else { return }
            set(name, size: size, lastUsed: lastUsed, persistedUse: persistedUse, vary: vary)
        } else if records[name]?.created != createdSeen {
            verified = nil
        }
        guard var record = records[name] else { return }
        record.lastUsed = max(record.lastUsed, lastUsed)
        record.persistedUse = max(record.persistedUse, persistedUse)
        record.sequence = nextSequence
        nextSequence += 1
        if var kept = record.verified, let verified, kept.identity == verified.identity {
            // The same version again: newer check time; a head (and descriptor) it lacked since one was dropped.
            kept.checkedAt = max(kept.checkedAt, verified.checkedAt)
            if kept.head == nil, verified.head != nil {
                kept.head = verified.head
                kept.file = verified.file
                keepHead(name, &kept)
            } else if kept.head != nil, kept.file == nil {
                kept.file = verified.file
            }
            record.verified = kept
        } else {
            forgetHead(record)
            record.verified = verified
            if record.verified?.head != nil { keepHead(name, &record.verified!) }
        }
        records[name] = record
        dropOldHeads()
    }

    /// The kept head and descriptor of the record at `index`, if a lookup opened its name and found that version less than
    /// `DiskCache.openFileValidSeconds` ago and the mtime touch is not due (that is a lookup's job); the hit is recorded
    /// in place (before the caller's fstat confirms the version: if that fails, the lookup that follows records it).
    private mutating func keptFile(at index: [String: Record].Index, now: Double) -> (Head, FileBody, FileIdentity)? {
        let record = records.values[index]
        guard let version = record.verified, let head = version.head, let file = version.file,
              now - version.checkedAt < DiskCache.openFileValidSeconds,
              now - record.persistedUse < DiskCache.touchIntervalSeconds
        else { return nil }
        records.values[index].lastUsed = max(record.lastUsed, now)   // in place: no second hash, no record copy back
        records.values[index].sequence = nextSequence
        nextSequence += 1
        return (head, file, version.identity)
    }

    /// Counts a head just stored in `name`'s record (`version`, given its ticket).
    private mutating func keepHead(_ name: String, _ version: inout VerifiedVersion) {
        guard let head = version.head else { return }
        version.headTicket = nextHeadTicket
        headQueue.append((name, nextHeadTicket))
        nextHeadTicket += 1
        headCount += 1
        headBytes += head.entry.cost
    }

    /// Uncounts the head `record` holds (it is being replaced or removed) and releases its descriptor.
    private mutating func forgetHead(_ record: Record) {
        guard let head = record.verified?.head else { return }
        headCount -= 1
        headBytes -= head.entry.cost
        if let file = record.verified?.file { released.append(file) }
    }

    /// Drops the oldest heads (and kept descriptors) until within `headLimitBytes` and `headLimitCount` (their
    /// records keep the identity: no hash, one header read), and compacts `headNames` when most of it names records
    /// without a head.
    private mutating func dropOldHeads() {
        while headBytes > Self.headLimitBytes || headCount > headLimitCount, headStart < headQueue.count {
            let (name, ticket) = headQueue[headStart]
            headStart += 1
            if var record = records[name], record.verified?.head != nil, record.verified?.headTicket == ticket {
                forgetHead(record)
                record.verified?.head = nil
                record.verified?.file = nil
                records[name] = record
            }
        }
        // Slots of heads dropped or replaced since: compacted once they are most of the queue.
        if headQueue.count - headStart > 2 * headCount + 1024 {
            headQueue = headQueue[headStart...].filter { slot in
                records[slot.name]?.verified.map { $0.head != nil && $0.headTicket == slot.ticket } ?? false
            }
            headStart = 0
        } else if headStart > 1024, headStart > headQueue.count / 2 {
            headQueue.removeFirst(headStart)
            headStart = 0
        }
    }

    /// Whether a lookup of `name` can answer "miss" without opening anything.
    func knownAbsent(_ name: String) -> Bool { loaded && records[name] == nil }

    mutating func remove(_ name: String) {
        if let old = records.removeValue(forKey: name) {
            bytes -= old.size
            forgetHead(old)
            if DiskEntryFormat.isVariantName(name) {
                let primary = DiskEntryFormat.primaryName(of: name)
                variantNames[primary]?.removeAll { $0 == name }
                if variantNames[primary]?.isEmpty == true { variantNames[primary] = nil }
            }
        }
    }

    mutating func removeAllRecords() {
        for record in records.values { if let file = record.verified?.file { released.append(file) } }
        records = [:]
        variantNames = [:]
        bytes = 0
        headQueue = []
        headStart = 0
        headCount = 0
        headBytes = 0
    }

    var stats: DiskCacheStats {
        var stats = DiskCacheStats()
        stats.entries = records.count
        stats.bytes = bytes
        stats.indexLoaded = loaded
        stats.indexLoadSeconds = loadSeconds
        stats.writeErrors = writeErrors
        stats.removedCorrupt = removedCorrupt
        stats.evicted = evicted
        stats.expired = expired
        stats.bodiesVerified = bodiesVerified
        return stats
    }

    /// Two lower-case hex digits: a shard directory name.
    static func isShardName(_ name: String) -> Bool {
        name.utf8.count == 2 && name.utf8.allSatisfy { ($0 >= 0x30 && $0 <= 0x39) || ($0 >= 0x61 && $0 <= 0x66) }
    }
}

extension DiskCache {
    /// Queues the first step of the startup loader.
    func startIndexLoader() {
        queue.async { self._loadIndexStep() }
    }

    /// One loader step: lists the shards (first step), or scans one top-level shard and re-queues itself, or
    /// finishes (marks the index loaded, logs the count and time, sweeps if over the limit).
    func _loadIndexStep() {
        dispatchPrecondition(condition: .onQueue(queue))
        let listed = DiskFile.list(root)
        let next: String?? = withIndex { index -> String?? in
            guard !index.loaded else { return .none }
            if index.pendingShards == nil {
                index.loadStart = ContinuousClock.now
                index.pendingShards = (listed ?? []).filter(DiskIndex.isShardName).sorted(by: >)
            }
            return .some(index.pendingShards?.popLast())
        }
        guard case let .some(shard) = next else { return }
        if let shard {
            scanShard(shard)
            queue.async { self._loadIndexStep() }
            return
        }
        let (count, bytes, seconds) = withIndex { index in
            let elapsed = ContinuousClock.now - index.loadStart
            let seconds = elapsed.inSeconds
            return (index.records.count, index.bytes, seconds)
        }
        // Logged before `stats` says loaded, so whoever sees the flag finds the line.
        logger.info("disk index loaded: \(count) entries, \(bytes) bytes in \(String(format: "%.3f", seconds)) s")
        withIndex { index in
            index.loaded = true
            index.loadSeconds = seconds
        }
        if bytes > configuration.limitBytes { _sweep() }
    }

    private func scanShard(_ top: String) {
        let topPath = root + "/" + top
        var buffer = [UInt8](repeating: 0, count: DiskFile.headerReadSize)
        for sub in DiskFile.list(topPath) ?? [] where DiskIndex.isShardName(sub) {
            let directory = topPath + "/" + sub
            for file in DiskFile.list(directory) ?? [] {
                let path = directory + "/" + file
                if file.hasSuffix(".tmp") {
                    logger.info("disk: removing leftover temporary file \(path)")
                    _ = try? DiskFile.unlink(path)
                    continue
                }
                guard DiskEntryFormat.isEntryName(file), withIndex({ $0.records[file] == nil }) else { continue }
                let utf8 = file.utf8
                guard utf8.prefix(2).elementsEqual(top.utf8), utf8.dropFirst(2).prefix(2).elementsEqual(sub.utf8) else {
                    _removeCorrupt(name: file, path: path, inode: nil, why: "in the wrong directory")
                    continue
                }
                loadFile(name: file, path: path, buffer: &buffer)
            }
            _ = rmdir(directory)  // once empty: left by a daemon before directories were pruned, or by a crash
        }
        _ = rmdir(topPath)
    }

    private func loadFile(name: String, path: String, buffer: inout [UInt8]) {
        let fd: Int32
        do {
            fd = try DiskFile.open(path, O_RDONLY)
        } catch {
            if error.errno != ENOENT { logger.warning("disk loader cannot open \(path): \(error)") }
            return
        }
        defer { closeDescriptor(fd) }
        do {
            let (key, variant, fileSize, size, mtime) = try DiskFile.readIndexFields(fd, buffer: &buffer)
            guard DiskEntryFormat.fileName(forKey: key, variant: variant) == name else {
                throw DiskEntryFormat.Failure("holds a key (\(key)) whose hash is not its name")
            }
            guard size == fileSize else {
                throw DiskEntryFormat.Failure("file is \(size) bytes, its header describes \(fileSize) (truncated?)")
            }
            let vary = VaryKey(id: variant)
            let outdated = withIndex { index -> Bool in
                // A write or a lookup since start knows better than the file's mtime.
                guard index.records[name] == nil else { return false }
                // The origin changed what this URL varies on since the file was written: the file is outdated.
                if index.hasNewerVariants(DiskEntryFormat.primaryName(of: name), otherThanNamed: vary?.names ?? []) {
                    return true
                }
                index.add(name, DiskIndex.Record(size: size, lastUsed: mtime, persistedUse: mtime, sequence: 0, vary: vary))
                return false
            }
            if outdated {
                logger.debug("disk loader removes \(path): a variant stored since start varies on other fields")
                _removeFile(name: name)
            }
        } catch let failure as DiskEntryFormat.Failure {
            _removeCorrupt(name: name, path: path, inode: DiskFile.inode(fd), why: failure.description)
        } catch {
            _removeCorrupt(name: name, path: path, inode: DiskFile.inode(fd), why: "unreadable: \(error)")
        }
    }
}
