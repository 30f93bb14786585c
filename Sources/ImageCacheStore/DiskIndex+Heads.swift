// Kept heads in `DiskIndex` (nginx's open_file_cache): for recently hit entries a record keeps the decoded header and,
// for a body sent from its file, the open descriptor, so the next hit needs no open and no header read. `KeptHeads`
// is their budget: how many, how many bytes, in which order they were kept; the heads themselves live in the records
// (`VerifiedVersion.head`, `.file`). It also holds the descriptors let go since the lock was taken, which
// `DiskCache.withIndex` drops after unlocking, so their close (the last one of an unlinked file frees its blocks)
// never runs under the lock. A value inside `DiskIndex`, guarded by the same lock.

internal import ImageCacheSystem

extension DiskIndex {
    /// Invariants (with `DiskIndex`, which calls `keep` and `forget` exactly when a record gains or loses a head):
    /// - `count` is the number of records holding a head, `bytes` the sum of those heads' costs.
    /// - Each record's head has its (name, ticket) in `queue[start...]` once; tickets only grow, so a slot whose
    ///   ticket is not its record's current one (the head was dropped, replaced or kept again since) is stale.
    /// - After `DiskIndex` drops old heads (at every hit), `bytes <= limitBytes`, `count <= limitCount`, and the
    ///   queue from `start` holds at most `2 * count + 1024` slots (`compact`).
    struct KeptHeads: Sendable {
        struct Slot: Sendable, Hashable {
            var name: String
            var ticket: UInt64
        }

        /// Decoded heads kept, by total cost: a few MiB serve the hot set of entries sent from their files.
        static let limitBytes = 4 << 20
        /// At most this many heads (and open descriptors with them).
        var limitCount = 1024
        /// Heads in the order they were kept, oldest first, from `start`.
        private(set) var queue: [Slot] = []
        private(set) var start = 0
        private var nextTicket: UInt64 = 1
        private(set) var count = 0
        private(set) var bytes = 0
        /// Descriptors let go by the last mutations, for the caller to drop after unlocking (`takeReleased`).
        private(set) var released: [FileBody] = []

        /// Counts a head of `cost` bytes just kept in `name`'s record; returns the ticket the record keeps with it.
        mutating func keep(_ name: String, cost: Int) -> UInt64 {
            defer { nextTicket += 1 }
            queue.append(Slot(name: name, ticket: nextTicket))
            count += 1
            bytes += cost
            return nextTicket
        }

        /// Uncounts a head of `cost` bytes its record let go, and releases the descriptor kept with it.
        mutating func forget(cost: Int, file: FileBody?) {
            count -= 1
            bytes -= cost
            if let file { release(file) }
        }

        /// A descriptor to close after unlocking.
        mutating func release(_ file: FileBody) { released.append(file) }

        /// The descriptors released so far, handed to the caller (who drops them after unlocking).
        mutating func takeReleased() -> [FileBody] {
            defer { released = [] }
            return released
        }

        /// While over the budget, the oldest slot, taken off the queue (stale or not: the caller checks it against
        /// its record, and uncounts the head with `forget` if it is the record's); nil once within the budget.
        mutating func takeOldestOverBudget() -> Slot? {
            guard bytes > Self.limitBytes || count > limitCount, start < queue.count else { return nil }
            defer { start += 1 }
            return queue[start]
        }

        /// Drops the stale slots once they are most of the queue (`isKept`: whether a slot names its record's
        /// current head), or the taken ones once they are half of it.
        mutating func compact(isKept: (Slot) -> Bool) {
            if queue.count - start > 2 * count + 1024 {
                queue = queue[start...].filter(isKept)
                start = 0
            } else if start > 1024, start > queue.count / 2 {
                queue.removeFirst(start)
                start = 0
            }
        }

        /// Every record let its head go (the descriptors were released one by one): an empty budget.
        mutating func removeAll() {
            queue = []
            start = 0
            count = 0
            bytes = 0
        }
    }

    /// Attaches the version a lookup verified (nil: none to trust) to the record at `index`: the same version as the
    /// one it holds refreshes the check time and regains a head (and descriptor) it lacked since one was dropped;
    /// another version replaces it, letting its head go.
    mutating func attach(_ verified: VerifiedVersion?, to name: String, at index: Entries.Index) {
        let record = entries.records.values[index]
        if var kept = record.verified, let verified, kept.identity == verified.identity {
            kept.checkedAt = max(kept.checkedAt, verified.checkedAt)
            if kept.head == nil, verified.head != nil {
                kept.head = verified.head
                kept.file = verified.file
                keepHead(name, &kept)
            } else if kept.head != nil, kept.file == nil {
                kept.file = verified.file
            }
            entries.setVerified(kept, at: index)
        } else {
            forgetHead(record)
            var verified = verified
            if verified?.head != nil { keepHead(name, &verified!) }
            entries.setVerified(verified, at: index)
        }
    }

    /// Counts the head of `version` (about to be stored in `name`'s record) and gives it its ticket.
    private mutating func keepHead(_ name: String, _ version: inout VerifiedVersion) {
        guard let head = version.head else { return }
        version.headTicket = heads.keep(name, cost: head.entry.cost)
    }

    /// Uncounts the head `record` holds (it is being replaced or removed) and releases its descriptor.
    mutating func forgetHead(_ record: Record) {
        guard let head = record.verified?.head else { return }
        heads.forget(cost: head.entry.cost, file: record.verified?.file)
    }

    /// Drops the oldest heads (and kept descriptors) until within the budget (their records keep the identity: no
    /// hash, one header read), then compacts the queue.
    mutating func dropOldHeads() {
        while let slot = heads.takeOldestOverBudget() {
            guard let index = entries.records.index(forKey: slot.name),
                  var version = entries.records.values[index].verified,
                  version.head != nil, version.headTicket == slot.ticket else { continue }
            forgetHead(entries.records.values[index])
            version.head = nil
            version.file = nil
            entries.setVerified(version, at: index)
        }
        let records = entries.records
        heads.compact { slot in
            records[slot.name]?.verified.map { $0.head != nil && $0.headTicket == slot.ticket } ?? false
        }
    }
}
