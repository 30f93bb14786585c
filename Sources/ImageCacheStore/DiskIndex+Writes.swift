// Queued writes in `DiskIndex`: the writes, updates and removals `DiskCache` has queued on its serial queue and not
// yet run, counted by the URL's primary name, and the `removeAll` calls the same way. A lookup of a URL with a write
// queued reads on the serial queue, after it (the caller's request came after the write). A value inside
// `DiskIndex`, guarded by the same lock (`DiskCache.withIndex`); `DiskCache.enqueueWrite` pairs each `queued` with
// one `done`.

extension DiskIndex {
    /// Invariants: every count in `byURL` is at least 1 (a URL with none queued is absent); `removeAll` counts the
    /// `removeAll` calls queued and not yet run. Both are 0 (empty) once every queued write has run.
    struct QueuedWrites: Sendable {
        private(set) var byURL: [String: Int] = [:]
        private(set) var removeAll = 0

        /// Whether a write of the URL with primary name `primary`, or of every URL, is queued.
        func isQueued(_ primary: String) -> Bool { removeAll > 0 || byURL[primary] != nil }

        var isEmpty: Bool { byURL.isEmpty && removeAll == 0 }

        /// A write of the URL with primary name `primary` (nil: every URL) was queued.
        mutating func queued(_ primary: String?) {
            guard let primary else { return removeAll += 1 }
            byURL[primary, default: 0] += 1
        }

        /// A write `queued` before has run.
        mutating func done(_ primary: String?) {
            guard let primary else { return removeAll -= 1 }
            if let count = byURL[primary], count > 1 { byURL[primary] = count - 1 } else { byURL[primary] = nil }
        }
    }
}
