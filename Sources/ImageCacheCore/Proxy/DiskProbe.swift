internal import ImageCacheSystem
internal import ImageCacheServer
internal import ImageCacheStore
internal import Dispatch
internal import Foundation

/// Whether the disk tier was already asked for a request that reaches `Coalescer.dispatch`.
enum DiskProbe: Sendable {
    /// Not asked (no disk tier, or a path that does not look on disk first).
    case notAsked
    /// Asked; its answer (nil: not on disk, or unreadable), and the memory tier's removal count read before asking
    /// (for `MemoryCache.promote`).
    case answered(DiskLookup?, removalsSeen: UInt64)
}
