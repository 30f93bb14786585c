// CACHE DECISION of imagecached: what happens to a request the cache may answer, given the variant stored for it.
// One pure function (`decide`) for every place that decides: the memory hit path on the connection's loop, the disk
// hit path, the coalescer's re-check on the proxy queue, and the fetch's disk stage for each waiting client. A memory
// hit, a disk hit and a coalesced waiter are judged by the same rules, and the 504 of only-if-cached is made here
// only. Freshness itself (lifetime, age, the request's max-age, min-fresh and max-stale) is `Freshness.use`.
//
//   request                             stored variant                             decision
//   Authorization, or no-store          (not looked up: `beforeLookup`)            forward, bypass (alone, not stored);
//                                                                                  with only-if-cached: refuse 504
//   only-if-cached                      none, another variant, or needs the origin refuse 504 (so no only-if-cached
//                                                                                  request ever waits on a fetch)
//   -                                   none                                       forward, miss
//   -                                   only other variants (their Vary fields     forward, vary-miss
//                                       differ from the request's)
// The stored variant is the one the store selected for the request (TieredStore: its Vary fields match), so the
// decision is about freshness only; Vary is the store's (selection) and the coalescer's (who shares a response).
//   -                                   fresh for this request                     serve fresh (ttl)
//   max-stale that covers the staleness stale, without must-revalidate,            serve stale (max-stale)
//                                       proxy-revalidate or s-maxage
//   neither max-age nor min-fresh       stale within its stale-while-revalidate    serve stale (stale-while-revalidate)
//   (only-if-cached may be set)         (or, naming none, the configured           and revalidate in the background
//                                       `stale-while-revalidate` window), without  (`revalidatesInBackground`)
//                                       must-revalidate, proxy-revalidate, s-maxage
//   no-cache (or Pragma: no-cache)      any                                        forward, request: conditional when
//                                                                                  it has a validator (ETag or
//                                                                                  Last-Modified)
//   -                                   stale, or the response's no-cache          forward, stale: conditional when it
//                                                                                  has a validator, else a plain fetch
//
// After the origin failed while a stale variant was being revalidated (connect error, timeout, 5xx: `afterOriginFailure`),
// the stale variant is served (stale-if-error, RFC 5861 section 4) when the staleness is within the response's or the
// request's stale-if-error or the configured offline window (`stale-if-error`), and the response says none of
// must-revalidate, proxy-revalidate and s-maxage (which carries proxy-revalidate for a shared cache, RFC 9111
// 5.2.2.10). Otherwise the client gets the error.
//
// Pure: no I/O, no clock (callers pass `now`), no state.

package import ImageCacheHTTP
package import Foundation

/// What happens to one request, given what is stored for it.
package enum CacheDecision: Sendable, Equatable {
    /// Answer from the stored variant without asking the origin.
    case serve(Serve)
    /// Ask the origin (`reason` is RFC 9211's fwd); `conditional`: with the stored variant's validators, so a 304
    /// refreshes it.
    case forward(CacheOutcome.Forward, conditional: Bool)
    /// Answer with an error and ask no one (only-if-cached).
    case refuse(status: Int, reason: String)

    package enum Serve: Sendable, Equatable {
        /// Fresh; `ttl`: the stored response's remaining freshness, seconds.
        case fresh(ttl: Double)
        /// Stale by `staleness` seconds, served because `why` allows it.
        case stale(staleness: Double, why: StaleReason)
    }

    package enum StaleReason: String, Sendable, Equatable {
        /// The request's max-stale.
        case maxStale = "max-stale"
        /// The origin failed and stale-if-error (directive or the configured window) covers the staleness.
        case staleIfError = "stale-if-error"
        /// The response's stale-while-revalidate covers the staleness: served now, revalidated in the background.
        case staleWhileRevalidate = "stale-while-revalidate"
    }

    /// The 504 reasons, one per case of only-if-cached.
    static let notCached = "not in the cache and the request said only-if-cached"
    static let otherVariant = "the cached variant does not match this request and it said only-if-cached"
    static let staleOnly = "the cached copy is stale and the request said only-if-cached"
    static let uncacheable = "the request may not be answered from the cache (credentials or no-store) and it said only-if-cached"

    /// The decision that needs no lookup: a request the cache may neither answer nor share goes to the origin alone.
    /// nil: look the request up, then `decide`.
    package static func beforeLookup(requestCacheControl request: CacheControl, hasAuthorization: Bool) -> CacheDecision? {
        guard hasAuthorization || request.noStore else { return nil }
        return request.onlyIfCached ? .refuse(status: 504, reason: uncacheable) : .forward(.bypass, conditional: false)
    }

    /// The decision for a request (its directives `request`) given the variant the store selected for it, `stored`
    /// (nil: none; `otherVariants`: none, but the URL has variants for other field values), at `now`.
    /// `defaultStaleWhileRevalidate`: the configured window for responses that name none (`stale-while-revalidate`).
    package static func decide(stored: CacheEntry?, otherVariants: Bool = false, request: CacheControl, now: Date,
                               defaultStaleWhileRevalidate: Double) -> CacheDecision {
        guard let stored else {
            if otherVariants {
                return request.onlyIfCached ? .refuse(status: 504, reason: otherVariant) : .forward(.varyMiss, conditional: false)
            }
            return request.onlyIfCached ? .refuse(status: 504, reason: notCached) : .forward(.miss, conditional: false)
        }
        switch Freshness.use(stored, request: request, now: now, defaultStaleWhileRevalidate: defaultStaleWhileRevalidate) {
        case let .fresh(ttl):
            return .serve(.fresh(ttl: ttl))
        case let .staleAllowed(staleness):
            return .serve(.stale(staleness: staleness, why: .maxStale))
        case let .staleWhileRevalidate(staleness):
            return .serve(.stale(staleness: staleness, why: .staleWhileRevalidate))
        case .revalidate:
            if request.onlyIfCached { return .refuse(status: 504, reason: staleOnly) }
            return .forward(request.noCache ? .request : .stale, conditional: stored.etag != nil || stored.lastModified != nil)
        }
    }

    /// After the origin failed while `stored` was being revalidated: serve it stale (stale-if-error), or nil when the
    /// client must get the error. `offlineSeconds`: the configured window (`stale-if-error`, 0 by default).
    package static func afterOriginFailure(stored: CacheEntry, request: CacheControl, offlineSeconds: Double,
                                          now: Date) -> CacheDecision? {
        let staleness = Freshness.currentAge(stored, now: now) - stored.freshnessLifetime
        guard staleness > 0 else { return .serve(.stale(staleness: 0, why: .staleIfError)) }
        let response = stored.cacheControl
        if response.mustRevalidate || response.proxyRevalidate || response.sMaxAge != nil { return nil }
        let window = [stored.cacheControl.staleIfError, request.staleIfError].compactMap { $0 }.map(Double.init).max() ?? 0
        guard staleness <= max(window, offlineSeconds) else { return nil }
        return .serve(.stale(staleness: staleness, why: .staleIfError))
    }

    /// The outcome a served response reports (Cache-Status, X-Cache); `tier` is "disk" for the disk tier (RFC 9211
    /// detail), nil for memory. nil for decisions that serve nothing.
    package func servedOutcome(tier: String?) -> CacheOutcome? {
        guard case let .serve(serve) = self else { return nil }
        switch serve {
        case let .fresh(ttl): return .hit(ttl: ttl, detail: tier)
        case let .stale(staleness, .maxStale): return .hit(ttl: -max(staleness, 1), detail: tier)
        case let .stale(staleness, .staleIfError): return .hit(ttl: -max(staleness, 1), detail: StaleReason.staleIfError.rawValue)
        case let .stale(staleness, .staleWhileRevalidate):
            return .hit(ttl: -max(staleness, 1), detail: StaleReason.staleWhileRevalidate.rawValue)
        }
    }

    /// The stored variant is served stale and must be revalidated in the background (stale-while-revalidate).
    package var revalidatesInBackground: Bool {
        if case .serve(.stale(_, .staleWhileRevalidate)) = self { true } else { false }
    }
}
