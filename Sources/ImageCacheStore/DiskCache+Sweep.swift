// Sweep policy (cf. nginx's cache manager, Nuke DataCache.sweep): runs on the disk queue, over the index only
// (read and updated under its lock; the unlinks happen after, outside it).
//   1. Expire: every entry whose last use (injected clock) is more than maxAgeSeconds ago is removed, fresh or not.
//   2. Evict: if the indexed bytes are over limitBytes, entries are removed least recently used first (last use,
//      then use sequence) until the bytes are at most lowWaterFraction * limitBytes.
// Before the index has loaded only the entries indexed so far are considered; the loader sweeps once it is done.
// Triggered by the 30-second timer, by an insert or update that passes the limit (in the same queue block), and by
// `sweep()`. One info line per sweep that removed something; each file at debug.

internal import ImageCacheSystem
internal import Dispatch
internal import Foundation
internal import Logging
internal import Synchronization
#if canImport(Glibc)
internal import Glibc
#endif

extension DiskCache {
    func _sweep() {
        dispatchPrecondition(condition: .onQueue(queue))
        let nowSeconds = now().timeIntervalSince1970
        let maxAge = configuration.maxAgeSeconds
        let limit = configuration.limitBytes
        let target = Int(Double(limit) * configuration.lowWaterFraction)
        // Chosen from a snapshot taken under the lock (copy-on-write: O(1) there) so lookups never wait on the scan
        // or the sort; dropped from the index under the lock, skipping any record used since the snapshot; the files
        // go after that, still on the disk queue, so no write can publish a new file under one of these names.
        let (snapshot, snapshotBytes) = withIndex { ($0.entries.records, $0.entries.bytes) }
        var expiring: [(name: String, record: DiskIndex.Record)] = []
        for (name, record) in snapshot where nowSeconds - record.lastUsed > maxAge { expiring.append((name, record)) }
        var evicting: [(name: String, record: DiskIndex.Record)] = []
        var projected = snapshotBytes - expiring.reduce(0) { $0 + $1.record.size }
        if projected > limit {
            let expiringNames = Set(expiring.map(\.name))
            let byAge = snapshot.filter { !expiringNames.contains($0.key) }.sorted { a, b in
                a.value.lastUsed != b.value.lastUsed ? a.value.lastUsed < b.value.lastUsed : a.value.sequence < b.value.sequence
            }
            for (name, record) in byAge {
                if projected <= target { break }
                evicting.append((name, record))
                projected -= record.size
            }
        }
        let (expired, evicted, entries, bytes) = withIndex { index in
            func take(_ chosen: [(name: String, record: DiskIndex.Record)]) -> [(name: String, size: Int)] {
                chosen.compactMap { name, record in
                    guard let now = index.entries.records[name], now.sequence == record.sequence, now.lastUsed == record.lastUsed else { return nil }
                    index.remove(name)
                    return (name, now.size)
                }
            }
            let expired = take(expiring)
            let evicted = take(evicting)
            index.counters.expired += expired.count
            index.counters.evicted += evicted.count
            return (expired, evicted, index.entries.records.count, index.entries.bytes)
        }
        for (name, _) in expired { deleteForSweep(name: name, why: "unused for more than \(maxAge) s") }
        for (name, _) in evicted { deleteForSweep(name: name, why: "least recently used, over the limit") }
        if !expired.isEmpty || !evicted.isEmpty {
            logger.info("""
                disk sweep: expired \(expired.count) entries (\(expired.reduce(0) { $0 + $1.size }) bytes), evicted \(evicted.count) \
                (\(evicted.reduce(0) { $0 + $1.size }) bytes); now \(entries) entries, \(bytes) of \(limit) bytes
                """)
        }
    }

    private func deleteForSweep(name: String, why: String) {
        let path = filePath(of: name)
        logger.debug("disk sweep removes \(path): \(why)")
        do {
            try DiskFile.unlink(path)
        } catch where error.errno != ENOENT {
            logger.warning("disk sweep cannot remove \(path): \(error)")
            return
        } catch {}
        _pruneDirectories(of: name)
    }
}
