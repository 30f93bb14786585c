// PixelCacheStats: what the transforms' pixel cache (`transform-pixel-cache`) holds and has done, as PixelCache
// (ImageCacheTransform) reads it under its lock and as the stats document carries it (`transforms.pixelCache`). One
// struct for both: the cache fills it, nothing copies it field by field. It lives here, not beside PixelCache, so
// that the stats documents do not depend on libvips.

/// The decoded levels of JPEG and PNG sources kept for their next variants.
public struct PixelCacheStats: Sendable, Codable, Equatable {
    /// Bytes of the levels kept, and the budget.
    public var bytes: Int
    public var limitBytes: Int
    public var entries: Int
    /// Lookups that found a level (a decode saved), and those that did not.
    public var hits: Int
    public var misses: Int
    public var evictions: Int

    public init(bytes: Int = 0, limitBytes: Int = 0, entries: Int = 0, hits: Int = 0, misses: Int = 0, evictions: Int = 0) {
        (self.bytes, self.limitBytes, self.entries) = (bytes, limitBytes, entries)
        (self.hits, self.misses, self.evictions) = (hits, misses, evictions)
    }
}
