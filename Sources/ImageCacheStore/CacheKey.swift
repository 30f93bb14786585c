// CacheKey: names one cached resource by its normalised absolute upstream URL (UpstreamURL, in the HTTP layer).
// Immutable values, shared freely between queues; nothing here is owned or locked.

public import ImageCacheHTTP

/// The key of one cached resource: its normalised URL.
///
/// The URL's hash is computed once, when the key is made: a memory hit hashes the key for the admission sketch and
/// again for the map, and each would otherwise hash the URL's four strings (profiles of the hit path showed it).
public struct CacheKey: Sendable, Hashable, CustomStringConvertible {
    public let url: UpstreamURL
    /// `url.hashValue`, once (per process: Swift's hashing is seeded at start, and this never leaves memory).
    private let urlHash: Int
    public init(_ url: UpstreamURL) {
        self.url = url
        urlHash = url.hashValue
    }
    public var description: String { url.string }

    public static func == (a: CacheKey, b: CacheKey) -> Bool { a.urlHash == b.urlHash && a.url == b.url }
    public func hash(into hasher: inout Hasher) { hasher.combine(urlHash) }
}
