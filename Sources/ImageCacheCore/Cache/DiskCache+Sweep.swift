// Sweep policy (cf. nginx's cache manager, Nuke DataCache.sweep): runs on the disk queue, over the index only.
//   1. Expire: every entry whose last use (injected clock) is more than maxAgeSeconds ago is removed, fresh or not.
//   2. Evict: if the indexed bytes are over limitBytes, entries are removed least recently used first (last use,
//      then use sequence) until the bytes are at most lowWaterFraction * limitBytes.
// Before the index has loaded only the entries indexed so far are considered; the loader sweeps once it is done.
// Triggered by the 30-second timer, by an insert or update that passes the limit (in the same queue block), and by
// `sweep()`. One info line per sweep that removed something; each file at debug.

internal import Dispatch
internal import Foundation
internal import Logging
#if canImport(Glibc)
internal import Glibc
#endif

extension DiskCache {
    func _sweep() {
        dispatchPrecondition(condition: .onQueue(queue))
        let nowSeconds = now().timeIntervalSince1970
        var expiredCount = 0
        var expiredBytes = 0
        let expiredNames = index.records.compactMap { name, record in
            nowSeconds - record.lastUsed > configuration.maxAgeSeconds ? name : nil
        }
        for name in expiredNames {
            expiredBytes += index.records[name]?.size ?? 0
            deleteForSweep(name: name, why: "unused for more than \(configuration.maxAgeSeconds) s")
            expiredCount += 1
        }
        index.expired += expiredCount

        var evictedCount = 0
        var evictedBytes = 0
        if index.bytes > configuration.limitBytes {
            let target = Int(Double(configuration.limitBytes) * configuration.lowWaterFraction)
            let byAge = index.records.sorted { a, b in
                a.value.lastUsed != b.value.lastUsed ? a.value.lastUsed < b.value.lastUsed : a.value.sequence < b.value.sequence
            }
            for (name, record) in byAge {
                if index.bytes <= target { break }
                deleteForSweep(name: name, why: "least recently used, over the limit")
                evictedCount += 1
                evictedBytes += record.size
            }
            index.evicted += evictedCount
        }
        if expiredCount > 0 || evictedCount > 0 {
            logger.info("""
                disk sweep: expired \(expiredCount) entries (\(expiredBytes) bytes), evicted \(evictedCount) \
                (\(evictedBytes) bytes); now \(index.records.count) entries, \(index.bytes) of \(configuration.limitBytes) bytes
                """)
        }
        publishStats()
    }

    private func deleteForSweep(name: String, why: String) {
        let path = filePath(of: name)
        logger.debug("disk sweep removes \(path): \(why)")
        do {
            try DiskFile.unlink(path)
        } catch where error.errno != ENOENT {
            logger.warning("disk sweep cannot remove \(path): \(error)")
        } catch {}
        index.remove(name)
    }
}
