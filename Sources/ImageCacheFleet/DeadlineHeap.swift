// A min-heap of deadlines (monotonic milliseconds) and what is due at each: the fleet thread's timers (operation
// deadlines, breaker probes, lease refreshes). Pure; the fleet thread owns it and sleeps in epoll_wait until the
// earliest. Entries are never removed early: what a due entry names is checked when it fires (the operation may have
// been answered meanwhile), which keeps every insertion O(log n) and the heap free of back-references.

package struct DeadlineHeap<Item> {
    private var entries: [(deadline: UInt64, order: UInt64, item: Item)] = []
    /// Breaks ties first-in first-out.
    private var nextOrder: UInt64 = 0

    package init() {}

    package var isEmpty: Bool { entries.isEmpty }
    package var count: Int { entries.count }
    package var nextDeadline: UInt64? { entries.first?.deadline }

    package mutating func insert(_ item: Item, at deadline: UInt64) {
        entries.append((deadline, nextOrder, item))
        nextOrder += 1
        var child = entries.count - 1
        while child > 0 {
            let parent = (child - 1) / 2
            guard less(child, parent) else { break }
            entries.swapAt(child, parent)
            child = parent
        }
    }

    /// Removes and returns the earliest entry if it is due at `now`.
    package mutating func popDue(now: UInt64) -> Item? {
        guard let first = entries.first, first.deadline <= now else { return nil }
        let last = entries.removeLast()
        if !entries.isEmpty {
            entries[0] = last
            var parent = 0
            while true {
                let left = 2 * parent + 1, right = left + 1
                var smallest = parent
                if left < entries.count, less(left, smallest) { smallest = left }
                if right < entries.count, less(right, smallest) { smallest = right }
                if smallest == parent { break }
                entries.swapAt(parent, smallest)
                parent = smallest
            }
        }
        return first.item
    }

    package mutating func removeAll() { entries.removeAll() }

    private func less(_ a: Int, _ b: Int) -> Bool {
        (entries[a].deadline, entries[a].order) < (entries[b].deadline, entries[b].order)
    }
}
