// Variants in `DiskIndex`: the names of each URL's responses with Vary, listed by the URL's primary name
// (DiskEntryFormat: `<primary>-<variant id hash>`), and the pure rules over them and the entry table: which variant a
// request selects (RFC 9111 section 4.1), and which variants a newly stored one outdates. A value inside `DiskIndex`,
// guarded by the same lock (`DiskCache.withIndex`).

internal import ImageCacheHTTP

extension DiskIndex {
    /// Invariants: a name is listed only if it is a variant name (`DiskEntryFormat.isVariantName`), under its own
    /// primary name, and once; no URL has an empty list. The record under the primary name itself (no Vary) is
    /// not listed. (`DiskIndex` lists a name when its record is added and unlists it when the record goes.)
    struct VariantNames: Sendable {
        private(set) var byURL: [String: [String]] = [:]

        /// The variant names listed for the URL with primary name `primary` (in the order they were listed).
        subscript(primary: String) -> [String] { byURL[primary] ?? [] }

        /// Lists `name` under its URL if it is a variant name and not listed yet.
        mutating func insert(_ name: String) {
            guard DiskEntryFormat.isVariantName(name) else { return }
            let primary = DiskEntryFormat.primaryName(of: name)
            guard byURL[primary]?.contains(name) != true else { return }
            byURL[primary, default: []].append(name)
        }

        mutating func remove(_ name: String) {
            guard DiskEntryFormat.isVariantName(name) else { return }
            let primary = DiskEntryFormat.primaryName(of: name)
            byURL[primary]?.removeAll { $0 == name }
            if byURL[primary]?.isEmpty == true { byURL[primary] = nil }
        }

        mutating func removeAll() { byURL = [:] }
    }

    /// The name of the URL's variant that `fields` select (RFC 9111 section 4.1): the response without Vary, or one
    /// whose Vary fields match; the most recently stored when several do. nil: none indexed.
    func selectedName(_ primary: String, fields: HTTPHeaders) -> String? {
        guard let names = variants.byURL[primary] else { return entries.records[primary] == nil ? nil : primary }
        var best: (name: String, created: UInt64, lastUsed: Double)?   // the most recently stored, then used
        if let record = entries.records[primary] { best = (primary, record.created, record.lastUsed) }
        for name in names {
            guard let record = entries.records[name], record.vary?.matches(fields) ?? true else { continue }
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
            guard let record = entries.records[name], record.created > 0 else { return false }
            return (record.vary?.names ?? []) != names
        }
    }

    /// The indexed names of every variant of the URL with primary name `primary`.
    func allNames(_ primary: String) -> [String] {
        (entries.records[primary] == nil ? [] : [primary]) + variants[primary]
    }

    /// The variants of `primary` to remove after `kept` (a variant just stored, with Vary names `names`) was
    /// stored: those that vary on other names (or on none, or when `kept` has none), then the least recently used
    /// past `limit`.
    func variantsToDrop(_ primary: String, kept: String, names: [String], limit: Int) -> [String] {
        var drop: [String] = []
        var others: [(name: String, record: Record)] = []
        for name in allNames(primary) where name != kept {
            guard let record = entries.records[name] else { continue }
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
}
