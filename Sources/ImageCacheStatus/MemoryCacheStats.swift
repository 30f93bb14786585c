// MemoryCacheStats: what the memory tier holds and has evicted, as MemoryCache reads it under its lock and as the
// stats document carries it (`memory`). One struct for both: the tier fills it, nothing copies it field by field.

/// Counters of the memory tier.
public struct MemoryCacheStats: Sendable, Codable, Equatable {
    /// Sum of the stored entries' costs.
    public var bytes: Int
    /// Stored entries (every variant counts).
    public var entries: Int
    /// The byte budget in force.
    public var limitBytes: Int
    /// Entries evicted to respect the limits since the tier was made.
    public var evictions: Int

    public init(bytes: Int = 0, entries: Int = 0, limitBytes: Int = 0, evictions: Int = 0) {
        (self.bytes, self.entries, self.limitBytes, self.evictions) = (bytes, entries, limitBytes, evictions)
    }
}
