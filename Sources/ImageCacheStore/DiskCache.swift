// Data model and ownership (cf. Varnish cache_hash.c, nginx ngx_http_file_cache.c, Nuke DataCache):
//
//   DiskCache ──owns── queue "imagecached.disk" (serial, .utility)
//     on the queue only:  every file call that changes the tree (open for writing, write, fsync, rename, unlink,
//                         mkdir, rmdir, readdir), the startup loader (one top-level directory per queue block, so writes
//                         interleave with it), the 30-second sweep timer. Serial, so a removal decided there cannot
//                         race a write of the same name.
//              ── readQueue "imagecached.disk.read" (concurrent, .userInitiated): the lookups (open O_RDONLY,
//                         fstat, pread, futimens on the descriptor they opened). Reads need no order among
//                         themselves; a hit costs one hop here and none through the serial queue. A lookup that
//                         finds a bad or vanished file asks the serial queue to remove it (checked again there).
//     shared, Mutex:      `index` (`DiskIndex`, one value of six parts, see DiskIndex.swift: the entries (file name ->
//                         size, last use, use sequence, the verified file version with, for recently hit entries, its
//                         decoded head and kept descriptor; total bytes), each URL's variant names, the kept heads'
//                         budget, the writes queued, the loader's state, counters). Held only for dictionary work,
//                         never across a file call: every use goes through `withIndex`, which drops the descriptors
//                         a mutation let go after unlocking.
//     caller's thread:    `lookup` of a kept file (the connection's loop thread): one index lock and one fstat on a kept
//                         descriptor, no open, no hop, nothing that waits on the device.
//                         A `FileBody` owns the descriptor of a verified body the lookup handed out or the index
//                         keeps (immutable; connections send it with sendfile at their own offsets; closed at deinit).
//
//   Files: `<directory>/<h[0..1]>/<h[2..3]>/<h>[-<v>]`, h = hex SHA-256 of the key's URL string, v = 16 hex digits
//   of SHA-256 of the variant id (DiskEntryFormat). A URL holds up to `variantLimit` variants: storing one removes
//   those whose Vary names differ from its own, then the URL's least recently used variant past the bound; a removal
//   of the URL removes every variant, found by listing its shard directory too (so files the index does not know
//   yet go as well). Lookups select the variant whose Vary fields the request matches, from the index (before it is
//   loaded: from the URL's directory).
//   Publishing (nginx): write `<name>.<random>.tmp` in the target directory, optionally fsync, set its mtime to the
//   injected clock's now, rename(2) onto `<name>`. Readers see the old file or the new one, never a partial file.
//
//   Recency: the index keeps each entry's last use (injected clock) and a use sequence (tie-breaker for equal
//   times); atime is never read. A file's mtime is its last use as known on disk: set when written, pushed forward
//   (futimens) on a lookup hit when it is more than `touchIntervalSeconds` old, and read back by the loader.
//
//   Lookup verifies a file version before handing anything out: magic and format version, header checksum, the stored
//   key equal to the key asked for, the file size equal to header + body length, then the body checksum (a body sent
//   from its file is hashed through a buffer, then handed out as a `FileBody` on the same open descriptor, so a
//   concurrent remove or rename cannot change what is sent). A version (inode, size, ctime: `FileIdentity`) once
//   verified and settled is trusted by later lookups of the same version (no hash; with a kept head, no header read).
//   A file that fails is a cache fault, never a request fault: it is logged
//   (warning, with the path and why), reported as a miss, and removed by the serial queue if the name still points
//   at the same inode (a good file written meanwhile under the name stays), then counted.
//
//   Limits: after an insert takes the total past `limitBytes`, a sweep runs at once in the same queue block, so usage
//   never exceeds the limit by more than the writes in flight; it evicts least recently used entries down to
//   `lowWaterFraction * limitBytes`. Entries unused for `maxAgeSeconds` are removed by every sweep, fresh or not.

public import ImageCacheSystem
public import ImageCacheHTTP
public import ImageCacheStatus
internal import Crypto
internal import Dispatch
public import Foundation
public import Logging
internal import Synchronization
#if canImport(Glibc)
internal import Glibc
#endif

/// The persistent tier: one file per entry under `configuration.directory`, an in-memory index rebuilt at start.
public final class DiskCache: Sendable {
    public struct Configuration: Sendable {
        /// Root directory; created (with parents) if missing.
        public var directory: String
        /// Byte budget for the files (header + body). Default 10 GiB.
        public var limitBytes: Int
        /// A sweep over the limit evicts down to this fraction of it. Default 0.9.
        public var lowWaterFraction: Double
        /// Entries not used for this long are removed by sweeps, fresh or not. Default 7 days.
        public var maxAgeSeconds: Double
        /// fsync each file before its rename (and the directory after). Default false.
        public var fsync: Bool
        /// Bodies up to this size are read whole (`.entry`); larger ones are returned as a `.stream`. Default 1 MiB.
        public var memoryReadLimitBytes: Int
        /// Freshness policy applied to entries rebuilt from disk. Default `FreshnessPolicy()`.
        public var freshnessPolicy: FreshnessPolicy
        /// Most decoded heads the index keeps, each with its entry file kept open when the entry is sent from its
        /// file (for hits on the connection's loop thread); also capped at a quarter of RLIMIT_NOFILE. Default 1024; 0
        /// keeps none (every hit opens and reads the header).
        public var openFileLimit = 1024
        /// Whether init starts the startup loader (tests turn it off to look up before the index exists).
        var startsIndexLoader = true
        /// Variants kept per URL (responses with Vary, one per set of request field values); the least recently used
        /// goes past it. Default 16 (`max-variants`).
        public var variantLimit = MemoryCache.defaultVariantLimit

        public init(directory: String, limitBytes: Int = 10 << 30, lowWaterFraction: Double = 0.9,
                    maxAgeSeconds: Double = 7 * 86_400, fsync: Bool = false, memoryReadLimitBytes: Int = 1 << 20,
                    freshnessPolicy: FreshnessPolicy = FreshnessPolicy()) {
            self.directory = directory
            self.limitBytes = limitBytes
            self.lowWaterFraction = lowWaterFraction
            self.maxAgeSeconds = maxAgeSeconds
            self.fsync = fsync
            self.memoryReadLimitBytes = memoryReadLimitBytes
            self.freshnessPolicy = freshnessPolicy
        }
    }

    /// A hit's on-disk mtime is pushed forward when it is older than this (bounds futimens calls per entry).
    static let touchIntervalSeconds: Double = 600
    /// A descriptor kept open for a name is used for this long after a lookup last opened the name and found the
    /// same file there (as nginx's open_file_cache_valid); then the next hit opens the name again.
    static let openFileValidSeconds: Double = 60
    /// Period of the background sweep.
    static let sweepIntervalSeconds = 30

    // MARK: immutable
    package let configuration: Configuration
    let logger: Logger
    let now: @Sendable () -> Date
    /// The directory with no trailing slash.
    let root: String
    /// Serial: writes, removals, the loader, sweeps.
    let queue: DispatchQueue
    /// Concurrent: lookups.
    let readQueue: DispatchQueue
    /// Fires `_sweep` on `queue` every 30 s. Set once in init; Dispatch sources are thread-safe.
    nonisolated(unsafe) let sweepTimer: any DispatchSourceTimer

    // MARK: shared, guarded by its lock
    let index: Locked<DiskIndex>

    /// Creates the directory, starts the sweep timer and the background index loader (which also removes leftover
    /// `*.tmp` files as it walks the tree); returns at once.
    public init(configuration: Configuration, logger: Logger,
                now: @escaping @Sendable () -> Date = { Date() }) throws(DiskCacheError) {
        guard configuration.limitBytes > 0 else { throw DiskCacheError.invalidConfiguration("limitBytes must be more than 0") }
        guard configuration.lowWaterFraction > 0, configuration.lowWaterFraction <= 1 else {
            throw DiskCacheError.invalidConfiguration("lowWaterFraction must be in (0, 1]")
        }
        guard configuration.maxAgeSeconds > 0 else { throw DiskCacheError.invalidConfiguration("maxAgeSeconds must be more than 0") }
        guard configuration.memoryReadLimitBytes >= 0 else {
            throw DiskCacheError.invalidConfiguration("memoryReadLimitBytes must not be negative")
        }
        var root = configuration.directory
        while root.count > 1, root.hasSuffix("/") { root.removeLast() }
        guard !root.isEmpty else { throw DiskCacheError.invalidConfiguration("directory must not be empty") }
        do {
            try DiskFile.makeDirectories(root)
        } catch {
            throw DiskCacheError.cannotCreateDirectory(path: root, error)
        }
        guard access(root, W_OK | X_OK | R_OK) == 0 else {
            throw DiskCacheError.notWritable(path: root, SystemError(errno: errno, function: "access"))
        }

        self.configuration = configuration
        self.logger = logger
        self.now = now
        self.root = root
        let queue = DispatchQueue(label: "imagecached.disk", qos: .utility)
        self.queue = queue
        self.readQueue = DispatchQueue(label: "imagecached.disk.read", qos: .userInitiated, attributes: .concurrent)
        var index = DiskIndex()
        var files = rlimit()
        let descriptorCap = getrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &files) == 0 ? Int(clamping: files.rlim_cur / 4) : 256
        index.heads.limitCount = max(0, min(configuration.openFileLimit, descriptorCap))
        self.index = Locked(index)
        self.sweepTimer = DispatchSource.makeTimerSource(queue: queue)

        let interval = DispatchTimeInterval.seconds(DiskCache.sweepIntervalSeconds)
        sweepTimer.schedule(deadline: .now() + interval, repeating: interval, leeway: .seconds(1))
        sweepTimer.setEventHandler { [weak self] in self?._sweep() }
        sweepTimer.resume()
        if configuration.startsIndexLoader { startIndexLoader() }
    }

    deinit {
        sweepTimer.cancel()
    }

    // MARK: - API

    /// Looks `key` up (index, or the file itself when the index is not loaded yet). A key the loaded index does not
    /// hold is a miss at once: `completion(nil)` runs on the caller's thread before `lookup` returns; so does a hit
    /// on a descriptor the index keeps (`lookupOpened`) when the body is not to be read whole. Otherwise the
    /// file is read on the read queue and `completion` runs there. Verifies format version, key, header and body
    /// checksums before returning anything; a corrupt, truncated or foreign file is logged, reported as nil, and
    /// removed. A body up to `memoryReadLimitBytes` is read into memory (`.entry`) when `readsWhole` wants it (asked
    /// with the entry's cost in memory, head and body; nil: always); any other is verified and handed out as its open
    /// file (`.stream`).
    /// `requestFields`: the request's fields that Vary is judged on; the variant they select is looked up.
    public func lookup(_ key: CacheKey, requestFields: HTTPHeaders = HTTPHeaders(),
                       readsWhole: (@Sendable (_ cost: Int) -> Bool)? = nil,
                       completion: @escaping @Sendable (DiskLookup?) -> Void) {
        let primary = DiskEntryFormat.fileName(for: key)
        let nowSeconds = now().timeIntervalSince1970
        let (route, name, kept) = withIndex { index in
            index.routeKeeping(primary, fields: requestFields, now: nowSeconds)
        }
        switch route {
        case .absent:
            completion(nil)
        case .read:
            // A kept descriptor of a body not wanted in memory: answered here, as nginx's open_file_cache.
            if let (head, file) = Self.confirmed(kept), !wantsWhole(cost: head.cost, bodyLength: file.length, readsWhole) {
                return completion(.stream(head: head, file: file))
            }
            readQueue.async {
                completion(self._lookup(key: key, primary: primary, selected: name, fields: requestFields, readsWhole: readsWhole))
            }
        case .afterWrites:
            // A write, update or removal of this URL is queued: read after it, as the caller's request came after.
            queue.async {
                completion(self._lookup(key: key, primary: primary, selected: nil, fields: requestFields, readsWhole: readsWhole))
            }
        }
    }

    /// What `lookup` answers on the caller's thread, without a hop or a blocking call, when the body is sent from its
    /// file: the entry's file version was verified by an earlier lookup, which kept its decoded header and its
    /// descriptor open (see `openFileLimit`), the name was opened and found to hold that version within the last
    /// `openFileValidSeconds`, no write of the name is queued, and `fstat` on the kept descriptor still shows the
    /// version (a change in place moves ctime). The hit is recorded. nil: none kept (`lookup` opens the name).
    /// `lookup` takes this path itself (one index lock, `routeKeeping`); this entry point lets tests ask for it alone.
    func lookupOpened(_ key: CacheKey, requestFields: HTTPHeaders = HTTPHeaders()) -> (head: CacheEntry, file: FileBody)? {
        let primary = DiskEntryFormat.fileName(for: key)
        let nowSeconds = now().timeIntervalSince1970
        return Self.confirmed(withIndex { $0.routeKeeping(primary, fields: requestFields, now: nowSeconds).kept })
    }

    /// A kept file whose descriptor `fstat` still shows at the version the index kept (one syscall, no I/O wait).
    private static func confirmed(_ kept: (DiskIndex.Head, FileBody, FileIdentity)?) -> (head: CacheEntry, file: FileBody)? {
        guard let (head, file, identity) = kept,
              let status = try? DiskFile.status(file.descriptor), status.identity == identity else { return nil }
        return (head.entry, file)
    }

    /// Whether a body is read into memory: up to `memoryReadLimitBytes`, and when `readsWhole` (asked with the
    /// entry's cost, head and body) wants it; nil: always.
    private func wantsWhole(cost: Int, bodyLength: Int, _ readsWhole: (@Sendable (_ cost: Int) -> Bool)?) -> Bool {
        bodyLength <= configuration.memoryReadLimitBytes && (readsWhole?(cost + bodyLength) ?? true)
    }

    /// Queues `work` on the serial queue, and marks the URL with primary name `name` (nil: every URL) as written until
    /// it has run, so lookups of it wait for it.
    private func enqueueWrite(_ name: String?, _ work: @escaping @Sendable () -> Void) {
        withIndex { $0.writes.queued(name) }
        queue.async {
            work()
            self.withIndex { $0.writes.done(name) }
        }
    }

    /// Writes the entry (tmp file in the target directory, write, optional fsync, rename onto the final name),
    /// asynchronously on the disk queue. On disk full or an I/O error the write is dropped, the tmp file removed,
    /// the error logged and counted in `writeErrors`; a partial file is never published. `done` runs on the disk
    /// queue once the write is over (written or dropped) and the entry's body is no longer held here.
    public func insert(_ entry: CacheEntry, done: (@Sendable () -> Void)? = nil) {
        let name = DiskEntryFormat.fileName(for: entry.key, variant: entry.variantID)
        enqueueWrite(DiskEntryFormat.primaryName(of: name)) {
            self._insert(entry, name: name)
            done?()
        }
    }

    /// Rewrites the stored header after a 304 (new head, request and response times), keeping the stored body
    /// (tmp + rename). `entry.body` is not used: it may be empty for a streamed entry. Nothing is written when no
    /// valid file is stored for the key.
    public func update(_ entry: CacheEntry) {
        let name = DiskEntryFormat.fileName(for: entry.key, variant: entry.variantID)
        enqueueWrite(DiskEntryFormat.primaryName(of: name)) { self._update(entry, name: name) }
    }

    /// Removes `key`'s variant `variant` ("" without Vary), if stored; `completion` as `remove(_:completion:)`.
    public func remove(_ key: CacheKey, variant: String, completion: (@Sendable (_ failure: String?) -> Void)? = nil) {
        let name = DiskEntryFormat.fileName(for: key, variant: variant)
        enqueueWrite(DiskEntryFormat.primaryName(of: name)) {
            let failure = self._removeFile(name: name)
            completion?(failure)
        }
    }

    /// Removes every variant stored for `key`, if any; `completion` runs on the disk queue once the files are gone,
    /// with nil, or with why one could not be removed (it is then still stored, and still indexed).
    public func remove(_ key: CacheKey, completion: (@Sendable (_ failure: String?) -> Void)? = nil) {
        let primary = DiskEntryFormat.fileName(for: key)
        enqueueWrite(primary) {
            let failure = self._removeVariants(of: primary)
            completion?(failure)
        }
    }

    /// Removes the renditions stored for `key`'s URL (its files named `<primary>~...`), keeping the URL's own variants.
    public func removeRenditions(of key: CacheKey, completion: (@Sendable (_ failure: String?) -> Void)? = nil) {
        let primary = DiskEntryFormat.fileName(for: key.source)
        enqueueWrite(primary) {
            var failure: String?
            for file in DiskFile.list(self.directoryPath(of: primary)) ?? []
            where DiskEntryFormat.isRenditionName(file) && file.hasPrefix(primary) {
                if let why = self._removeFile(name: file), failure == nil { failure = why }
            }
            completion?(failure)
        }
    }

    /// Removes every entry file (and leftover tmp file); `completion` runs on the disk queue with nil, or with why
    /// some files could not be removed (those stay stored and indexed).
    public func removeAll(completion: (@Sendable (_ failure: String?) -> Void)? = nil) {
        enqueueWrite(nil) {
            let failure = self._removeAll()
            completion?(failure)
        }
    }

    /// Removes entries unused for `maxAgeSeconds`, then, when over the limit, least recently used entries down to the
    /// low-water mark; logs what it removed. Also run every 30 s and after an insert that passes the limit.
    /// `completion` runs on the disk queue.
    public func sweep(completion: (@Sendable () -> Void)? = nil) {
        queue.async {
            self._sweep()
            completion?()
        }
    }

    /// Blocks until the work queued so far has run (tests and shutdown): the lookups, then what they and the rest
    /// queued on the serial queue. Must not be called on either queue.
    public func flush() {
        dispatchPrecondition(condition: .notOnQueue(queue))
        dispatchPrecondition(condition: .notOnQueue(readQueue))
        readQueue.sync(flags: .barrier) {}
        queue.sync {}
    }

    /// The tier's counters, as the stats document carries them.
    public var stats: DiskCacheStats {
        var stats = withIndex { $0.stats }
        stats.limitBytes = configuration.limitBytes
        return stats
    }

    /// Every use of the index: `body` under its lock, then the descriptors it let go (`DiskIndex.KeptHeads.released`)
    /// are dropped after unlocking, so no close runs under the lock the event loops take.
    func withIndex<T>(_ body: (inout DiskIndex) throws(Never) -> T) -> T {
        let (result, released) = index.withLock { index -> (T, [FileBody]) in
            let result = body(&index)
            guard !index.heads.released.isEmpty else { return (result, []) }
            return (result, index.heads.takeReleased())
        }
        _ = released  // the last references go here, outside the lock
        return result
    }

    // MARK: - Paths

    func directoryPath(of name: String) -> String {
        let utf8 = Array(name.utf8)
        return root + "/" + String(decoding: utf8[0..<2], as: UTF8.self) + "/" + String(decoding: utf8[2..<4], as: UTF8.self)
    }

    func filePath(of name: String) -> String { directoryPath(of: name) + "/" + name }

    /// After a file of `name` went: its two shard directories go too once empty, so a tree that once held many
    /// entries does not keep up to 65,792 empty directories (4 KiB each on ext4, counted against no limit) after they
    /// are evicted or purged (nginx keeps them; Squid makes all of its own up front). On the serial queue, where every
    /// publish makes its directories again before writing, so no write can find its directory gone.
    func _pruneDirectories(of name: String) {
        dispatchPrecondition(condition: .onQueue(queue))
        let utf8 = Array(name.utf8)
        let top = root + "/" + String(decoding: utf8[0..<2], as: UTF8.self)
        DiskFile.removeIfEmpty(top + "/" + String(decoding: utf8[2..<4], as: UTF8.self), top)
    }

    /// The same for a file found at `path` (`<root>/<xx>/<yy>/<file>`, perhaps in the wrong shard); other paths: nothing.
    func _pruneDirectories(ofFileAt path: String) {
        dispatchPrecondition(condition: .onQueue(queue))
        guard path.hasPrefix(root + "/") else { return }
        let parts = path.dropFirst(root.count + 1).split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count == 3, DiskIndex.isShardName(String(parts[0])), DiskIndex.isShardName(String(parts[1])) else { return }
        let top = root + "/" + parts[0]
        DiskFile.removeIfEmpty(top + "/" + parts[1], top)
    }

    // MARK: - Lookup

    /// The variant of `key` (primary name `primary`) that `fields` select: `selected` when the index named it, else
    /// the one the index names now, else (index not loaded yet) the first matching file in the URL's directory.
    /// On the read queue, or on the serial queue after a queued write of the URL.
    func _lookup(key: CacheKey, primary: String, selected: String?, fields: HTTPHeaders,
                 readsWhole: (@Sendable (_ cost: Int) -> Bool)? = nil) -> DiskLookup? {
        let (name, loaded): (String?, Bool) = selected.map { ($0, true) }
            ?? withIndex { ($0.selectedName(primary, fields: fields), $0.load.isLoaded) }
        if let name { return _lookup(key: key, name: name, fields: fields, readsWhole: readsWhole) }
        guard !loaded else { return nil }
        let candidates = (DiskFile.list(directoryPath(of: primary)) ?? []).filter { DiskEntryFormat.isVariant($0, of: primary) }
        for name in candidates.sorted() {
            if let found = _lookup(key: key, name: name, fields: fields, readsWhole: readsWhole) { return found }
        }
        return nil
    }

    /// Reads and verifies the file `name`; nil when it is absent, bad (then removed) or a variant `fields` do not
    /// select. No file call here changes the tree. The steps: what the index knows of the name (`seen`), open it
    /// (`openForLookup`), check its head (`checkedHead`), take its body (`takeBody`), record the hit (`markUsed`).
    func _lookup(key: CacheKey, name: String, fields: HTTPHeaders,
                 readsWhole: (@Sendable (_ cost: Int) -> Bool)? = nil) -> DiskLookup? {
        guard let (created, verified, persistedUse) = withIndex({ $0.seen(name) }) else { return nil }
        let path = filePath(of: name)
        guard let fd = openForLookup(name: name, path: path, indexed: created != nil) else { return nil }
        var handedOut = false
        defer { if !handedOut { closeDescriptor(fd) } }
        do {
            let checkedAt = now()   // before fstat: a version is trusted only if its ctime is a second older than this
            let status = try DiskFile.status(fd)
            let (version, unverified) = try checkedHead(fd, status: status, key: key, name: name, verifiedBefore: verified)
            let head = version.head!.entry
            // Another variant of the URL (found by listing its directory): not this request's, and not a fault.
            guard head.vary?.matches(fields) ?? true else { return nil }
            let (result, file) = try takeBody(fd, head: head, version: version, unverified: unverified, readsWhole: readsWhole)
            handedOut = file != nil
            // Kept for later lookups once its ctime has settled, with the descriptor of a body sent from its file
            // (for hits answered on the caller's thread, `lookup`).
            markUsed(name: name, size: status.size, fd: fd, persistedUse: persistedUse,
                     verified: version.settled(file: file, checkedAt: checkedAt), createdSeen: created,
                     hashed: unverified != nil, vary: head.vary)
            return result
        } catch let failure as DiskEntryFormat.Failure {
            handedOut = true
            reportCorrupt(name: name, path: path, fd: fd, why: failure.description)
        } catch {
            handedOut = true
            reportCorrupt(name: name, path: path, fd: fd, why: "unreadable: \(error)")
        }
        return nil
    }

    /// Opens `name` for a lookup; nil when it cannot (logged unless it is absent). When the index holds the name
    /// (`indexed`), the serial queue, which orders writes, checks whether the file is really gone and forgets it.
    private func openForLookup(name: String, path: String, indexed: Bool) -> Int32? {
        do {
            return try DiskFile.open(path, O_RDONLY)
        } catch {
            if error.errno != ENOENT { logger.warning("disk lookup cannot open \(path): \(error)") }
            if indexed { queue.async { self._forgetIfMissing(name: name) } }
            return nil
        }
    }

    /// The version of the open file `fd` (`status`), and the header whose body checksum is still to be checked (nil:
    /// the body is trusted). What is read is `VerifiedVersion.check`'s answer: nothing for the version verified
    /// before with its head kept, the header (to decode it) when its head was dropped, else header and body.
    private func checkedHead(_ fd: Int32, status: FileStatus, key: CacheKey, name: String,
                             verifiedBefore: DiskIndex.VerifiedVersion?) throws
        -> (version: DiskIndex.VerifiedVersion, unverified: DiskEntryFormat.Header?)
    {
        let check = DiskIndex.VerifiedVersion.check(opened: status.identity, verifiedBefore: verifiedBefore)
        if case let .trusted(version) = check { return (version, nil) }
        let header = try readCheckedHeader(fd, status: status, key: key, name: name)
        let version = DiskIndex.VerifiedVersion(identity: status.identity,
                                                head: DiskIndex.Head(makeEntry(key: key, header: header, body: [])),
                                                bodyOffset: header.bodyOffset, bodyLength: header.bodyLength,
                                                file: nil, checkedAt: 0)
        if case .header = check { return (version, nil) }
        return (version, header)
    }

    /// Reads the header of `fd` and checks that it is `key`'s, stored under `name`, for a file of the size found.
    private func readCheckedHeader(_ fd: Int32, status: FileStatus, key: CacheKey, name: String) throws
        -> DiskEntryFormat.Header
    {
        let (header, _) = try DiskFile.readHeader(fd, status: status)
        guard header.key == key.description, DiskEntryFormat.fileName(for: key, variant: header.variant) == name else {
            throw DiskEntryFormat.Failure("holds another key (\(header.key)): a hash collision or a foreign file")
        }
        guard status.size == header.fileSize else {
            throw DiskEntryFormat.Failure("file is \(status.size) bytes, its header describes \(header.fileSize) (truncated?)")
        }
        return header
    }

    /// The body of a checked version, checked against `unverified`'s checksum when set: read whole when wanted
    /// (`wantsWhole`), else handed out on `fd` as the `FileBody` returned second, which then owns the descriptor.
    private func takeBody(_ fd: Int32, head: CacheEntry, version: DiskIndex.VerifiedVersion,
                          unverified: DiskEntryFormat.Header?, readsWhole: (@Sendable (_ cost: Int) -> Bool)?) throws
        -> (DiskLookup, handedOut: FileBody?)
    {
        if wantsWhole(cost: head.cost, bodyLength: version.bodyLength, readsWhole) {
            let body = try DiskFile.read(fd, count: version.bodyLength, offset: version.bodyOffset)
            guard body.count == version.bodyLength else { throw DiskEntryFormat.Failure("body truncated") }
            if let unverified, DiskEntryFormat.checksum(body) != unverified.bodyChecksum {
                throw DiskEntryFormat.Failure("body checksum mismatch")
            }
            return (.entry(head.withBody(body)), nil)
        }
        if let unverified { try DiskFile.verifyBody(fd, header: unverified) }
        let file = FileBody(descriptor: fd, offset: version.bodyOffset, length: version.bodyLength)
        return (.stream(head: head, file: file), file)
    }

    func makeEntry(key: CacheKey, header: DiskEntryFormat.Header, body: [UInt8]) -> CacheEntry {
        CacheEntry(key: key, head: header.head, body: body, requestTime: header.requestTime,
                   responseTime: header.responseTime, vary: header.vary, policy: configuration.freshnessPolicy)
    }

    /// Records a hit in the index, with the file version it verified or trusted (nil: too recently changed to trust
    /// later, see `FileIdentity.settleSeconds`) and whether it hashed the body; pushes the file's mtime forward when
    /// the on-disk last use (`persistedUse`) is stale (which moves its ctime: the next lookup verifies it again).
    private func markUsed(name: String, size: Int, fd: Int32, persistedUse: Double, verified: DiskIndex.VerifiedVersion?,
                          createdSeen: UInt64?, hashed: Bool, vary: VaryKey?) {
        let nowSeconds = now().timeIntervalSince1970
        var persisted = persistedUse
        if nowSeconds - persisted >= DiskCache.touchIntervalSeconds {
            if (try? DiskFile.setModificationTime(fd, nowSeconds)) != nil { persisted = nowSeconds }
        }
        withIndex { index in
            index.markUsed(name, size: size, lastUsed: nowSeconds, persistedUse: persisted, verified: verified,
                           createdSeen: createdSeen, vary: vary)
            if hashed { index.counters.bodiesVerified += 1 }
        }
    }

    /// A lookup found a bad file: logged now (the request is answered as a miss), removed by the serial queue.
    /// Takes `fd` and keeps it open until then, so its inode cannot be reused by a new file under the name meanwhile.
    private func reportCorrupt(name: String, path: String, fd: Int32, why: String) {
        let inode = DiskFile.inode(fd)
        queue.async {
            self._removeCorrupt(name: name, path: path, inode: inode, why: why)
            closeDescriptor(fd)
        }
    }

    /// Removes a file that failed verification, if `path` still names the same inode (nil: whatever is there):
    /// logged with the path and why, counted. On the serial queue.
    func _removeCorrupt(name: String, path: String, inode: UInt64?, why: String) {
        dispatchPrecondition(condition: .onQueue(queue))
        if let inode, DiskFile.inode(atPath: path) != inode {
            logger.warning("disk entry failed verification: \(path): \(why); a new file has replaced it since")
            return
        }
        logger.warning("disk entry removed: \(path): \(why)")
        _ = try? DiskFile.unlink(path)
        _pruneDirectories(ofFileAt: path)
        let indexed = path == filePath(of: name)  // a misplaced file does not stand for the record of its name
        withIndex { index in
            if indexed { index.remove(name) }
            index.counters.removedCorrupt += 1
        }
    }

    /// The index holds `name` but a lookup could not open its file: forgets it if the file is really gone.
    func _forgetIfMissing(name: String) {
        dispatchPrecondition(condition: .onQueue(queue))
        if DiskFile.inode(atPath: filePath(of: name)) == nil { withIndex { $0.remove(name) } }
    }

    // MARK: - Insert and update

    func _insert(_ entry: CacheEntry, name: String) {
        dispatchPrecondition(condition: .onQueue(queue))
        let header = DiskEntryFormat.encodeHeader(
            key: entry.key.description, variant: entry.variantID, head: entry.head, requestTime: entry.requestTime,
            responseTime: entry.responseTime, bodyLength: entry.body.count, bodyChecksum: DiskEntryFormat.checksum(entry.body))
        let size = header.count + entry.body.count
        // Variants that vary on other fields are outdated by this response (the origin changed its Vary) whether or
        // not it is written: they go first.
        let primary = DiskEntryFormat.primaryName(of: name)
        let names = entry.vary?.names ?? []
        for other in withIndex({ $0.variantsToDrop(primary, kept: name, names: names, limit: .max) }) {
            logger.debug("disk: \(entry.key) variant \(other) removed: it varies on other fields")
            _removeFile(name: other)
        }
        guard size <= configuration.limitBytes else {
            logger.debug("disk insert skipped: \(entry.key) is \(size) bytes, over the disk limit")
            _removeFile(name: name)
            return
        }
        do {
            try publish(name: name) { fd throws(SystemError) in
                try DiskFile.write(fd, header)
                try DiskFile.write(fd, entry.body)
            }
        } catch {
            withIndex { $0.counters.writeErrors += 1 }
            logger.error("disk write of \(entry.key) dropped: \(error)")
            return
        }
        let nowSeconds = now().timeIntervalSince1970
        let (bytes, others) = withIndex { index in
            index.insert(name, size: size, lastUsed: nowSeconds, persistedUse: nowSeconds, vary: entry.vary)
            return (index.entries.bytes, index.variantsToDrop(primary, kept: name, names: names, limit: configuration.variantLimit))
        }
        for other in others {
            logger.debug("disk: \(entry.key) variant \(other) removed: past \(configuration.variantLimit) variants, least recently used")
            _removeFile(name: other)
        }
        if bytes > configuration.limitBytes { _sweep() }
    }

    func _update(_ entry: CacheEntry, name: String) {
        dispatchPrecondition(condition: .onQueue(queue))
        let path = filePath(of: name)
        let old: Int32
        do {
            old = try DiskFile.open(path, O_RDONLY)
        } catch {
            logger.debug("disk update of \(entry.key) skipped: nothing stored (\(error))")
            withIndex { $0.remove(name) }
            return
        }
        defer { closeDescriptor(old) }
        let stored: DiskEntryFormat.Header
        do {
            let (header, status) = try DiskFile.readHeader(old)
            let size = status.size
            guard header.key == entry.key.description, header.variant == entry.variantID else {
                throw DiskEntryFormat.Failure("holds another key (\(header.key))")
            }
            guard size == header.fileSize else {
                throw DiskEntryFormat.Failure("file is \(size) bytes, its header describes \(header.fileSize) (truncated?)")
            }
            stored = header
        } catch let failure as DiskEntryFormat.Failure {
            _removeCorrupt(name: name, path: path, inode: DiskFile.inode(old), why: failure.description)
            return
        } catch {
            _removeCorrupt(name: name, path: path, inode: DiskFile.inode(old), why: "unreadable: \(error)")
            return
        }
        let header = DiskEntryFormat.encodeHeader(
            key: stored.key, variant: stored.variant, head: entry.head, requestTime: entry.requestTime,
            responseTime: entry.responseTime, bodyLength: stored.bodyLength, bodyChecksum: stored.bodyChecksum)
        do {
            try publish(name: name) { fd throws(SystemError) in
                try DiskFile.write(fd, header)
                try DiskFile.copy(from: old, offset: stored.bodyOffset, count: stored.bodyLength, to: fd)
            }
        } catch {
            withIndex { $0.counters.writeErrors += 1 }
            logger.error("disk update of \(entry.key) dropped: \(error)")
            return
        }
        let nowSeconds = now().timeIntervalSince1970
        let bytes = withIndex { index in
            index.insert(name, size: header.count + stored.bodyLength, lastUsed: nowSeconds, persistedUse: nowSeconds,
                         vary: entry.vary)
            return index.entries.bytes
        }
        if bytes > configuration.limitBytes { _sweep() }
    }

    /// nginx-style publish: `<h>.<random>.tmp` in the target directory, `fill` writes it, optional fsync, mtime set
    /// to now, rename onto `<h>` (then, with fsync, the directory is synced). Any failure removes the tmp file.
    func publish(name: String, fill: (Int32) throws(SystemError) -> Void) throws(SystemError) {
        let directory = directoryPath(of: name)
        let tmp = directory + "/" + name + "." + String(UInt64.random(in: 0...UInt64.max), radix: 36) + ".tmp"
        let flags = O_WRONLY | O_CREAT | O_EXCL
        let fd: Int32
        do {
            fd = try DiskFile.open(tmp, flags, mode: 0o644)
        } catch where error.errno == ENOENT {
            try DiskFile.makeDirectories(directory)
            fd = try DiskFile.open(tmp, flags, mode: 0o644)
        }
        do {
            try fill(fd)
            if configuration.fsync { try syscall("fsync") { Glibc.fsync(fd) } }
            try DiskFile.setModificationTime(fd, now().timeIntervalSince1970)
        } catch {
            closeDescriptor(fd)
            _ = try? DiskFile.unlink(tmp)
            _pruneDirectories(of: name)
            throw error
        }
        // close is not retried (the descriptor is gone even on EINTR), but a reported write-back error drops the file.
        if Glibc.close(fd) != 0, errno != EINTR {
            let error = SystemError(errno: errno, function: "close")
            _ = try? DiskFile.unlink(tmp)
            _pruneDirectories(of: name)
            throw error
        }
        do {
            try syscall("rename") { rename(tmp, directory + "/" + name) }
        } catch {
            _ = try? DiskFile.unlink(tmp)
            _pruneDirectories(of: name)
            throw error
        }
        if configuration.fsync { try? DiskFile.syncDirectory(directory) }
    }

    // MARK: - Remove

    /// Nil once the file is gone (or was never there), else why not: the file then stays, and so does its record.
    @discardableResult
    func _removeFile(name: String) -> String? {
        dispatchPrecondition(condition: .onQueue(queue))
        let path = filePath(of: name)
        do {
            try DiskFile.unlink(path)
        } catch where error.errno != ENOENT {
            logger.warning("disk remove of \(path) failed: \(error)")
            return "could not remove \(path): \(error)"
        } catch {}
        withIndex { $0.remove(name) }
        _pruneDirectories(of: name)
        return nil
    }

    /// Removes every variant and rendition of the URL with primary name `primary`: those the index knows and those its
    /// shard directory holds. Nil once all are gone, else why one stayed.
    @discardableResult
    func _removeVariants(of primary: String) -> String? {
        dispatchPrecondition(condition: .onQueue(queue))
        var names = Set(withIndex { $0.allNames(primary) })
        for file in DiskFile.list(directoryPath(of: primary)) ?? [] where DiskEntryFormat.isVariantOrRendition(file, of: primary) {
            names.insert(file)
        }
        var failure: String?
        for name in names.sorted() {
            if let why = _removeFile(name: name), failure == nil { failure = why }
        }
        return failure
    }

    /// Nil once every entry file is gone, else how many stayed and the first reason; the records of files that stayed
    /// are kept (a later purge or the sweeper tries again, and a restart finds what the index says).
    func _removeAll() -> String? {
        dispatchPrecondition(condition: .onQueue(queue))
        var removed: [String] = []
        var failed = 0
        var firstFailure: String?
        for top in DiskFile.list(root) ?? [] where DiskIndex.isShardName(top) {
            let topPath = root + "/" + top
            for sub in DiskFile.list(topPath) ?? [] where DiskIndex.isShardName(sub) {
                let subPath = topPath + "/" + sub
                for file in DiskFile.list(subPath) ?? []
                where DiskEntryFormat.isEntryName(file) || file.hasSuffix(".tmp") {
                    do {
                        try DiskFile.unlink(subPath + "/" + file)
                        if DiskEntryFormat.isEntryName(file) { removed.append(file) }
                    } catch where error.errno != ENOENT {
                        failed += 1
                        if firstFailure == nil { firstFailure = "could not remove \(subPath)/\(file): \(error)" }
                    } catch {}
                }
                _ = rmdir(subPath)  // once empty
            }
            _ = rmdir(topPath)
        }
        if failed == 0 {
            withIndex { $0.removeAllRecords() }
            logger.info("disk cache emptied: \(removed.count) files removed")
            return nil
        }
        withIndex { index in for name in removed { index.remove(name) } }
        let failure = "\(failed) files could not be removed (\(firstFailure ?? ""))"
        logger.error("disk cache purge incomplete: \(removed.count) files removed, \(failure)")
        return failure
    }
}

/// What a disk lookup found.
public enum DiskLookup: Sendable {
    /// A body up to `memoryReadLimitBytes`, read whole and verified.
    case entry(CacheEntry)
    /// A larger body, verified; `head.body` is empty and the bytes are `file` (its descriptor closes with it).
    case stream(head: CacheEntry, file: FileBody)
}

/// Why the disk tier could not start.
public enum DiskCacheError: Error, Sendable, CustomStringConvertible {
    case invalidConfiguration(String)
    case cannotCreateDirectory(path: String, SystemError)
    case notWritable(path: String, SystemError)

    public var description: String {
        switch self {
        case let .invalidConfiguration(reason): "invalid disk cache configuration: \(reason)"
        case let .cannotCreateDirectory(path, error): "cannot create the disk cache directory \(path): \(error)"
        case let .notWritable(path, error): "the disk cache directory \(path) is not writable: \(error)"
        }
    }
}
