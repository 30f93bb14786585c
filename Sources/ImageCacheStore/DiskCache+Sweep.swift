// Sweep policy (cf. nginx's cache manager, Nuke DataCache.sweep): runs on the disk queue, over the index only
// (read and updated under its lock; the unlinks happen after, outside it).
//   1. Expire: every entry whose last use (injected clock) is more than maxAgeSeconds ago is removed, fresh or not.
//   2. Evict: if the indexed bytes are over limitBytes, entries are removed least recently used first (last use,
//      then use sequence) until the bytes are at most lowWaterFraction * limitBytes.
// Before the index has loaded only the entries indexed so far are considered; the loader sweeps once it is done.
// Triggered by the 30-second timer, by an insert or update that passes the limit (in the same queue block), and by
// `sweep()`. One info line per sweep that removed something; each file at debug.
// The choice is `SweepPlan`, a pure value made from a snapshot of the entry table; the index then drops the chosen
// records no lookup used since (`removeUnused`), and the sweep removes their files.

internal import ImageCacheSystem
internal import Dispatch
internal import Foundation
internal import Logging
internal import Synchronization
#if canImport(Glibc)
internal import Glibc
#endif

/// What a sweep removes, chosen from a snapshot of the entry table (pure: no lock, no file call).
struct SweepPlan {
    typealias Chosen = [(name: String, record: DiskIndex.Record)]
    /// Unused for more than the max age, in no particular order.
    private(set) var expiring: Chosen = []
    /// Least recently used first (last use, then use sequence), enough to bring the bytes left after the expiring
    /// ones down to the target; empty when they are within the limit.
    private(set) var evicting: Chosen = []

    init(records: [String: DiskIndex.Record], bytes: Int, now: Double, maxAgeSeconds: Double, limitBytes: Int,
         targetBytes: Int) {
        for (name, record) in records where now - record.lastUsed > maxAgeSeconds { expiring.append((name, record)) }
        var projected = bytes - expiring.reduce(0) { $0 + $1.record.size }
        guard projected > limitBytes else { return }
        let expiringNames = Set(expiring.map(\.name))
        let byAge = records.filter { !expiringNames.contains($0.key) }.sorted { a, b in
            a.value.lastUsed != b.value.lastUsed ? a.value.lastUsed < b.value.lastUsed : a.value.sequence < b.value.sequence
        }
        for (name, record) in byAge {
            if projected <= targetBytes { break }
            evicting.append((name, record))
            projected -= record.size
        }
    }
}

extension DiskIndex {
    /// Removes the chosen records that no lookup used since the snapshot they were chosen from (same use sequence
    /// and last use); returns the names removed and their sizes.
    mutating func removeUnused(since chosen: SweepPlan.Chosen) -> [(name: String, size: Int)] {
        chosen.compactMap { name, record in
            guard let now = entries.records[name], now.sequence == record.sequence, now.lastUsed == record.lastUsed else {
                return nil
            }
            remove(name)
            return (name, now.size)
        }
    }
}

extension DiskCache {
    func _sweep() {
        dispatchPrecondition(condition: .onQueue(queue))
        let maxAge = configuration.maxAgeSeconds
        let limit = configuration.limitBytes
        // Chosen from a snapshot taken under the lock (copy-on-write: O(1) there) so lookups never wait on the scan
        // or the sort; dropped from the index under the lock, skipping any record used since the snapshot; the files
        // go after that, still on the disk queue, so no write can publish a new file under one of these names.
        let (snapshot, snapshotBytes) = withIndex { ($0.entries.records, $0.entries.bytes) }
        let plan = SweepPlan(records: snapshot, bytes: snapshotBytes, now: now().timeIntervalSince1970, maxAgeSeconds: maxAge,
                             limitBytes: limit, targetBytes: Int(Double(limit) * configuration.lowWaterFraction))
        let (expired, evicted, entries, bytes) = withIndex { index in
            let expired = index.removeUnused(since: plan.expiring)
            let evicted = index.removeUnused(since: plan.evicting)
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
