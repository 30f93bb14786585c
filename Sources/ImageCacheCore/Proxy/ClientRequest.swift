internal import ImageCacheSystem
public import ImageCacheHTTP
internal import ImageCacheStatus
public import ImageCacheConfig
public import ImageCacheServer
public import ImageCacheStore
public import ImageCacheUpstream
internal import ImageCacheTransform
internal import Dispatch
public import Foundation
public import Logging

/// A request headed for the cache, with what was parsed from it once.
struct ClientRequest: Sendable {
    let head: HTTPRequestHead
    let url: UpstreamURL
    let mode: Route.Mode
    let trusted: Bool
    let client: ClientInfo
    let cacheControl: CacheControl
    /// Which of its fields go upstream (from the settings the request was routed with).
    let fields: RequestFieldPolicy
    /// A transform URL's rendition of `url` (nil: the URL itself).
    let rendition: RenditionRequest?
    /// The daemon's own request for a transform's source: answered like any other, counted in no client metric.
    let isInternal: Bool
    /// The configured `stale-while-revalidate` window (seconds) for stored responses that name none, from the settings
    /// the request was routed with (CacheDecision).
    let staleWhileRevalidate: Double
    init(head: HTTPRequestHead, url: UpstreamURL, mode: Route.Mode, trusted: Bool, client: ClientInfo,
         fields: RequestFieldPolicy = .defaults, rendition: RenditionRequest? = nil, isInternal: Bool = false,
         staleWhileRevalidate: Double) {
        self.head = head
        self.staleWhileRevalidate = staleWhileRevalidate
        self.rendition = rendition
        self.isInternal = isInternal
        self.fields = fields
        self.url = url
        self.mode = mode
        self.trusted = trusted
        self.client = client
        cacheControl = CacheControl(head.headers)
    }

    /// The request fields sent upstream (RequestFields.swift). Vary is judged on these: a field never forwarded is
    /// absent for every client, so it cannot split the cache or the coalescing. Computed when asked: a fresh hit of
    /// an entry without Vary never needs it.
    var forwardedHeaders: HTTPHeaders { fields.forwarded(head.headers, mode: mode, cached: true) }

    var isHead: Bool { head.method == "HEAD" }

    /// The key it is stored under: its URL's, or its rendition's.
    var key: CacheKey { rendition?.key ?? CacheKey(url) }

    /// The decision made before any lookup: a request the cache may not answer or share (credentials, the client's
    /// no-store) is forwarded alone (`CacheDecision.beforeLookup`).
    var decisionBeforeLookup: CacheDecision? {
        // A rendition is looked up and shared whatever the request carries: its source is fetched without the
        // client's fields (its Authorization reaches no one), and a no-store only keeps the result from being stored
        // (RenditionJob.stores).
        if rendition != nil { return nil }
        return CacheDecision.beforeLookup(requestCacheControl: cacheControl, hasAuthorization: head.headers.contains("Authorization"))
    }

    /// The end-to-end request fields sent upstream (`forwardedHeaders`) and Via with this daemon's `via`
    /// (LoopGuard.viaValue) appended.
    func upstreamHeaders(via: String) -> HTTPHeaders {
        var headers = forwardedHeaders
        headers.add("Via", RequestFieldPolicy.via(head.headers, mode: mode, own: via))
        return headers
    }

    /// What the client's conditional fields (If-None-Match, If-Modified-Since) say about serving the stored entry
    /// (RFC 9111 4.3.2).
    func precondition(for entry: CacheEntry) -> Precondition {
        Precondition.evaluate(method: head.method, headers: head.headers, etag: entry.etag, lastModified: entry.lastModified,
                              date: entry.head.headers["Date"], received: entry.responseTime)
    }
}
