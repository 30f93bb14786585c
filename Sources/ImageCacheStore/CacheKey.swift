// CacheKey: names one cached resource by its normalised absolute upstream URL (UpstreamURL, in the HTTP layer), and,
// for a rendition made from it (a transformed image), the rendition's canonical text ("rs:fill:300:200/.../f:webp").
// Immutable values, shared freely between queues; nothing here is owned or locked.
//
// A rendition is a resource of its own (its own entry, freshness and validators), named after its source: the store
// keeps it beside the source (same disk shard directory, a name starting with the source's), so that removing the
// source's URL removes its renditions too (TieredStore.remove).

public import ImageCacheHTTP

/// The key of one cached resource: its normalised URL, and a rendition's canonical text ("" for the URL's own responses).
///
/// The URL's hash is computed once, when the key is made: a memory hit hashes the key for the admission sketch and
/// again for the map, and each would otherwise hash the URL's four strings (profiles of the hit path showed it).
public struct CacheKey: Sendable, Hashable, CustomStringConvertible {
    public let url: UpstreamURL
    /// The rendition's canonical text; "" for the URL itself. Holds no space or line break.
    public let rendition: String
    /// `url.hashValue` combined with the rendition's, once (per process: Swift's hashing is seeded at start, and this
    /// never leaves memory).
    private let keyHash: Int
    public init(_ url: UpstreamURL) {
        self.url = url
        rendition = ""
        keyHash = url.hashValue
    }

    public init(_ url: UpstreamURL, rendition: String) {
        precondition(!rendition.contains(" ") && !rendition.contains("\n"), "a rendition's text holds no space or line break")
        self.url = url
        self.rendition = rendition
        var hasher = Hasher()
        hasher.combine(url)
        hasher.combine(rendition)
        keyHash = rendition.isEmpty ? url.hashValue : hasher.finalize()
    }

    /// The URL's own key (the source's, for a rendition).
    public var source: CacheKey { rendition.isEmpty ? self : CacheKey(url) }
    public var isRendition: Bool { !rendition.isEmpty }

    /// The URL, and for a rendition a space and its text (the disk header's key field).
    public var description: String { rendition.isEmpty ? url.string : url.string + " " + rendition }

    public static func == (a: CacheKey, b: CacheKey) -> Bool { a.keyHash == b.keyHash && a.url == b.url && a.rendition == b.rendition }
    public func hash(into hasher: inout Hasher) { hasher.combine(keyHash) }
}
