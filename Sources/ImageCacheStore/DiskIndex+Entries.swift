// The entry table of `DiskIndex`: one `Record` per indexed file name, the sum of their sizes, and the use sequence
// that orders uses of equal time. A value inside `DiskIndex`, guarded by the same lock (`DiskCache.withIndex`).

extension DiskIndex {
    /// Invariants:
    /// - `bytes` is the sum of the sizes of `records` (kept by `put`, `remove`, `removeAll`; the other mutations
    ///   never change a size).
    /// - Every `sequence` and `created` this table hands out is below `nextSequence` and above every one handed out
    ///   before: a later use or a new file orders after every earlier one, and no two new files share `created`.
    ///   Records from the loader carry 0 for both.
    struct Entries: Sendable {
        typealias Index = [String: Record].Index

        private(set) var records: [String: Record] = [:]
        private(set) var bytes = 0
        private(set) var nextSequence: UInt64 = 1

        /// A record for a file written now: its use sequence and `created` are the next sequence number.
        mutating func newRecord(size: Int, lastUsed: Double, persistedUse: Double, vary: VaryKey?) -> Record {
            defer { nextSequence += 1 }
            return Record(size: size, lastUsed: lastUsed, persistedUse: persistedUse, sequence: nextSequence,
                          created: nextSequence, vary: vary)
        }

        /// Stores `record` under `name`; returns the record it replaced (nil: a new name).
        @discardableResult
        mutating func put(_ name: String, _ record: Record) -> Record? {
            let old = records.updateValue(record, forKey: name)
            bytes += record.size - (old?.size ?? 0)
            return old
        }

        mutating func remove(_ name: String) -> Record? {
            guard let old = records.removeValue(forKey: name) else { return nil }
            bytes -= old.size
            return old
        }

        /// Empties the table; returns the records it held.
        mutating func removeAll() -> [String: Record] {
            defer { (records, bytes) = ([:], 0) }
            return records
        }

        /// A use of the record at `index`: its last use (and, when given, its last use on disk) moves forward to at
        /// least the time given, and it takes the next use sequence. In place: no second hash, no record copied back.
        mutating func recordUse(at index: Index, lastUsed: Double, persistedUse: Double? = nil) {
            records.values[index].lastUsed = max(records.values[index].lastUsed, lastUsed)
            if let persistedUse {
                records.values[index].persistedUse = max(records.values[index].persistedUse, persistedUse)
            }
            records.values[index].sequence = nextSequence
            nextSequence += 1
        }

        /// Sets the verified version of the record at `index` (its size and recency stay).
        mutating func setVerified(_ version: VerifiedVersion?, at index: Index) {
            records.values[index].verified = version
        }
    }
}
