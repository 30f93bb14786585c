// The Cache-Status (RFC 9211) and X-Cache values a response carries. Pure.
//
//   X-Cache      Cache-Status                                   when
//   HIT          imagecached; hit; ttl=N                        fresh in memory
//   STALE        imagecached; hit; ttl=-N                       stale, served because the request's max-stale allows it
//   MISS         imagecached; fwd=uri-miss; fwd-status=200; stored  fetched: nothing was stored for the URL ("stored": kept now)
//   COALESCED    imagecached; fwd=uri-miss; fwd-status=200; collapsed   joined a fetch another request started
//   REVALIDATED  imagecached; fwd=stale; fwd-status=304; stored stale entry confirmed by the origin (304)
//   EXPIRED      imagecached; fwd=stale; fwd-status=200; stored stale entry replaced by a changed 200
//   MISS         imagecached; fwd=request; ...                  the request's no-cache forced a revalidation
//   MISS         imagecached; fwd=vary-miss; ...                stored variant does not match the request's Vary fields
//   BYPASS       imagecached; fwd=bypass; ...                   not cacheable as asked (Authorization, no-store) or not shareable
//   BYPASS       imagecached; fwd=bypass; fwd-status=404; detail=not-image   forward mode (forward-non-images pass): what
//                                                               the image checks refuse, passed on as the origin sent it,
//                                                               never stored ("collapsed" when it was shared)
//   PASS         imagecached; fwd=method; fwd-status=201        reverse mode: a method the cache does not answer, passed
//                                                               through (Passthrough.swift)
//   PASS         imagecached; fwd=uri-miss; fwd-status=304      reverse mode: a 304 that answered no conditional request,
//                                                               passed on, not stored (REVALIDATED needs `revalidated`)
//   HIT          imagecached; hit; ttl=N; detail=disk           fresh on disk (after a restart, or evicted from memory)
//   STALE        imagecached; hit; ttl=-N; detail=stale-if-error   stale, served because the origin failed and
//                                                               stale-if-error (directive or the offline policy) allows it
// A Cache-Status the origin already sent is kept and ours is appended (RFC 9211 section 2).
//
// The outcome is one value handed along with the response: whoever produces a response tells its sink first
// (`ResponseSink.note`), and the fields (Cache-Status, X-Cache), the metrics label (`served`), the access log and
// prefetch's report are all rendered from it. Nothing reads a response's fields back to learn what happened; a
// response with no outcome is the daemon's own error answer.

package import Foundation

/// How a response was produced.
public struct CacheOutcome: Sendable, Equatable {
    package enum Forward: String, Sendable, Equatable {
        /// Nothing is stored for the URL (RFC 9211's uri-miss: no variant either, else it is a vary-miss).
        case miss = "uri-miss"
        case stale, request, bypass
        case varyMiss = "vary-miss"
        /// The method is not one the cache answers (reverse mode passes it through).
        case method
    }
    /// nil for a hit (served from the cache without contacting the origin).
    package var forward: Forward?
    /// Seconds of freshness left (negative when stale); hits only.
    package var ttl: Double?
    package var forwardStatus: Int?
    /// The origin's 304 confirmed the stored copy (a conditional request the cache made). A 304 that answered no
    /// conditional request is passed on (reverse mode) and says PASS, not REVALIDATED.
    package var revalidated = false
    package var stored = false
    package var collapsed = false
    /// RFC 9211 detail: "disk" for a hit read from the disk tier, "stale-if-error" for a stale entry served because
    /// the origin failed.
    package var detail: String?
    /// When the origin answered for the response served, for a sink that makes a response of its own from it (a
    /// rendition job's source collector): nil for what was not received from the origin (the daemon's own answers).
    package var received: Received?

    /// A served response's times as its stored entry keeps them (RFC 9111 4.2.3): its response_time and its
    /// corrected_initial_age (its current age is `initialAge` plus the time since `responseTime`).
    package struct Received: Sendable, Equatable {
        package var responseTime: Date
        package var initialAge: Double

        package init(responseTime: Date, initialAge: Double) {
            self.responseTime = responseTime
            self.initialAge = initialAge
        }
    }

    package init(forward: Forward? = nil, ttl: Double? = nil, forwardStatus: Int? = nil, revalidated: Bool = false,
                 stored: Bool = false, collapsed: Bool = false, detail: String? = nil) {
        self.forward = forward
        self.revalidated = revalidated
        self.ttl = ttl
        self.forwardStatus = forwardStatus
        self.stored = stored
        self.collapsed = collapsed
        self.detail = detail
    }

    package static func hit(ttl: Double, detail: String? = nil) -> CacheOutcome { CacheOutcome(forward: nil, ttl: ttl, detail: detail) }

    /// The detail of a response forward mode passed on because the image checks refuse it.
    package static let notImageDetail = "not-image"

    /// Forward mode passed on what the image checks refuse (`forwardStatus`: the origin's status), uncached.
    package static func notImage(forwardStatus: Int, collapsed: Bool = false) -> CacheOutcome {
        CacheOutcome(forward: .bypass, forwardStatus: forwardStatus, collapsed: collapsed, detail: notImageDetail)
    }

    /// A response passed on as not an image (`notImage`).
    package var isNotImage: Bool { forward == .bypass && detail == Self.notImageDetail }

    package var xCache: String {
        guard let forward else { return (ttl ?? 0) < 0 ? "STALE" : "HIT" }
        // (a bypass, shared or not: never COALESCED, which promises a cached image)
        if isNotImage { return "BYPASS" }
        if collapsed { return "COALESCED" }
        if revalidated { return "REVALIDATED" }
        switch forward {
        case .bypass: return "BYPASS"
        case .method: return "PASS"
        case _ where forwardStatus == 304: return "PASS"
        case .stale: return "EXPIRED"
        case .miss, .request, .varyMiss: return "MISS"
        }
    }

    package var cacheStatus: String {
        var value = "imagecached"
        if let forward {
            value += "; fwd=\(forward.rawValue)"
            if let forwardStatus { value += "; fwd-status=\(forwardStatus)" }
            if stored { value += "; stored" }
            if collapsed { value += "; collapsed" }
        } else {
            value += "; hit"
            if let ttl { value += "; ttl=\(Int(ttl.rounded(.down)))" }
        }
        if let detail { value += "; detail=\(detail)" }
        return value
    }

    /// Adds Cache-Status (appended to an upstream one) and X-Cache.
    package func apply(to headers: inout HTTPHeaders) {
        let upstream = headers.combined("Cache-Status")
        headers.remove("Cache-Status")
        headers.add("Cache-Status", upstream.map { "\($0), \(cacheStatus)" } ?? cacheStatus)
        headers.set("X-Cache", xCache)
    }
}
