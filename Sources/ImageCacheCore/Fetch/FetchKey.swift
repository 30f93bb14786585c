internal import ImageCacheSystem
internal import ImageCacheHTTP
internal import ImageCacheStatus
internal import ImageCacheServer
internal import ImageCacheStore
internal import Dispatch
internal import Foundation

/// The coalescer's key: one fetch per cache key and trust level, and per variant id for the fetches of variants
/// another response's Vary sent waiters to ("" for the URL's own fetch).
struct FetchKey: Hashable {
    let key: CacheKey
    let trusted: Bool
    let variant: String
}
