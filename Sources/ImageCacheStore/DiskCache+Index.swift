// The disk index's startup loader (the index itself, `DiskIndex`, is DiskIndex.swift and its parts).
//
// Startup loader (nginx's cache loader): the index starts empty, its load state `waiting`. The loader lists the 256
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
        let (step, count, bytes) = withIndex { index in
            (index.load.next(listed: listed, now: .now), index.entries.records.count, index.entries.bytes)
        }
        switch step {
        case .none:
            return
        case let .scan(shard):
            scanShard(shard)
            queue.async { self._loadIndexStep() }
        case let .finish(seconds):
            // Logged before `stats` says loaded, so whoever sees the flag finds the line.
            logger.info("disk index loaded: \(count) entries, \(bytes) bytes in \(String(format: "%.3f", seconds)) s")
            withIndex { $0.load.finish(seconds: seconds) }
            if bytes > configuration.limitBytes { _sweep() }
        }
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
                guard DiskEntryFormat.isEntryName(file), withIndex({ $0.entries.records[file] == nil }) else { continue }
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
                guard index.entries.records[name] == nil else { return false }
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
