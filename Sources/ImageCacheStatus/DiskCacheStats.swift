// DiskCacheStats: what the disk tier holds and has done, as DiskCache (ImageCacheStore) reads it from its index and
// as the stats document carries it (`disk`). One struct for both: the tier fills it, nothing copies it field by field.
// In JSON `evicted` is "evictions", as for the memory tier; documents from daemons before `indexLoadSeconds` and
// `bodiesVerified` were sent still decode (as nil and 0).

/// Counters of the disk tier.
public struct DiskCacheStats: Sendable, Codable, Equatable {
    /// Entries in the index (all of them once `indexLoaded`).
    public var entries = 0
    /// Sum of the indexed files' sizes.
    public var bytes = 0
    /// The byte budget (`disk-limit`).
    public var limitBytes = 0
    public var indexLoaded = false
    /// Wall time the startup loader took; nil until it finishes.
    public var indexLoadSeconds: Double?
    /// Writes and header rewrites dropped on an I/O error (disk full, ...).
    public var writeErrors = 0
    /// Files removed because they failed verification (corrupt, truncated, foreign, old format).
    public var removedCorrupt = 0
    /// Entries evicted to get under the byte limit.
    public var evicted = 0
    /// Entries removed because they were not used for max age.
    public var expired = 0
    /// Bodies hashed by lookups and found good (a hit on a file version verified before does not hash it again).
    public var bodiesVerified = 0

    public init(bytes: Int = 0, entries: Int = 0, limitBytes: Int = 0, evicted: Int = 0, expired: Int = 0) {
        (self.bytes, self.entries, self.limitBytes, self.evicted, self.expired) = (bytes, entries, limitBytes, evicted, expired)
    }

    enum CodingKeys: String, CodingKey {
        case entries, bytes, limitBytes, indexLoaded, indexLoadSeconds, writeErrors, removedCorrupt, expired, bodiesVerified
        case evicted = "evictions"
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        func count(_ key: CodingKeys) throws -> Int { try container.decodeIfPresent(Int.self, forKey: key) ?? 0 }
        (entries, bytes, limitBytes) = (try count(.entries), try count(.bytes), try count(.limitBytes))
        indexLoaded = try container.decodeIfPresent(Bool.self, forKey: .indexLoaded) ?? false
        indexLoadSeconds = try container.decodeIfPresent(Double.self, forKey: .indexLoadSeconds)
        (writeErrors, removedCorrupt) = (try count(.writeErrors), try count(.removedCorrupt))
        (evicted, expired, bodiesVerified) = (try count(.evicted), try count(.expired), try count(.bodiesVerified))
    }
}
