// FRESHNESS POLICY of imagecached, a shared cache (RFC 9111 section 4.2), in the manner of Varnish's cache_rfc2616.c.
//
// Freshness lifetime, computed once when a response is stored or refreshed by a 304, first rule that applies:
//   1. s-maxage=N                       -> N   (shared caches only; also implies proxy-revalidate, see below)
//   2. max-age=N                        -> N   (a missing or invalid value counts as 0, see CacheControl)
//   3. Expires                          -> Expires - Date, at least 0; an Expires we cannot parse (or "0") -> 0.
//                                          Without a Date field the time of receipt stands in for it.
//   4. 404 or 410 (a configured origin's "no such image")
//                                       -> negative-ttl, when it is not 0 (nginx's proxy_cache_valid 404)
//   5. heuristic, only for the statuses RFC 9110 section 15.1 calls heuristically cacheable
//      (200 203 204 206 300 301 308 404 405 410 414 501) or a response marked public (RFC 9111 4.2.2), and only with
//      a parseable Last-Modified:
//                                       -> min(heuristicFraction * (Date - Last-Modified), heuristicMaxSeconds)
//   6. otherwise                        -> 0 (stale at once: usable only after revalidation)
//
// Age (RFC 9111 section 4.2.3), with the clock-skew-safe formula:
//   apparent_age          = max(0, response_time - Date)
//   corrected_age_value   = Age + (response_time - request_time)       (an invalid Age field is ignored)
//   corrected_initial_age = max(apparent_age, corrected_age_value)
//   current_age           = corrected_initial_age + max(0, now - response_time)
//
// Using a stored entry for a request (`use`):
//   - request no-cache (or Pragma: no-cache without Cache-Control) or response no-cache -> revalidate.
//   - The request's max-age caps the lifetime; its min-fresh is added to the age.
//   - fresh (lifetime > age)                                 -> serve, ttl = the stored response's remaining lifetime.
//   - stale, and the request's max-stale allows the staleness (max-stale alone: any; max-stale=N: staleness <= N),
//     and the response has none of must-revalidate, proxy-revalidate, s-maxage -> serve stale without revalidating.
//   - stale within the response's stale-while-revalidate=N (staleness <= N, RFC 5861 section 3), or, when the
//     response names none, within the configured `stale-while-revalidate` window (0: none; Varnish's default grace), the response has
//     none of must-revalidate, proxy-revalidate, s-maxage, and the request sets none of max-age, min-fresh (it asked
//     for a fresher copy) and max-stale (it said how stale it takes) -> serve stale now, revalidate in the background.
//   - otherwise                                              -> revalidate (conditional request) or fetch.
// Not done here: stale-if-error (parsed; CacheDecision.afterOriginFailure), immutable (no effect on a shared cache's
// revalidation rules), only-if-cached (the proxy answers 504 on a miss).
// Pure functions, no I/O, no clock: callers pass the times.

public import ImageCacheHTTP
public import Foundation

/// Tunables of the heuristic freshness rule (configuration `heuristic-fraction`, `heuristic-max`).
/// The defaults are the init's (one place): the `heuristic-*`, `targeted-cache-control`,
/// `strip-targeted-cache-control` and `negative-ttl` keys take theirs from `FreshnessPolicy()`.
public struct FreshnessPolicy: Sendable, Equatable {
    /// Fraction of (Date - Last-Modified) used as lifetime. Default 0.1 (RFC 9111 section 4.2.2's example).
    public var heuristicFraction: Double
    /// Cap on heuristic lifetime, seconds. Default 86400.
    public var heuristicMaxSeconds: Double
    /// Targeted cache-control fields (RFC 9213), in order: for a response from a configured origin, the first one
    /// present takes the place of Cache-Control in the daemon's own decisions. Default CDN-Cache-Control.
    public var targetedFields: [String]
    /// The targeted fields are removed from what clients receive. Default false.
    public var stripsTargetedFields: Bool
    /// Lifetime of a 404 or 410 without explicit freshness (configuration `negative-ttl`), seconds; 0: none (only
    /// the heuristic). Only reverse mode stores these statuses (Storability). Default 10.
    public var negativeTTLSeconds: Double

    public init(heuristicFraction: Double = 0.1, heuristicMaxSeconds: Double = 86_400,
                targetedFields: [String] = ["CDN-Cache-Control"], stripsTargetedFields: Bool = false,
                negativeTTLSeconds: Double = 10) {
        self.negativeTTLSeconds = negativeTTLSeconds
        self.heuristicFraction = heuristicFraction
        self.heuristicMaxSeconds = heuristicMaxSeconds
        self.targetedFields = targetedFields
        self.stripsTargetedFields = stripsTargetedFields
    }

    /// The cache-control directives that govern storing and reusing `headers`' response: the first targeted field
    /// present and valid (a Structured Fields Dictionary; an invalid one is ignored, RFC 9213 2.1) for a response from
    /// a configured origin (`trusted`), else Cache-Control.
    public func cacheControl(_ headers: HTTPHeaders, trusted: Bool) -> CacheControl {
        if trusted {
            for name in targetedFields {
                let values = headers.values(name)
                if !values.isEmpty, let targeted = CacheControl(targeted: values) { return targeted }
            }
        }
        return CacheControl(headers)
    }
}

/// How a stored entry may be used for one request.
public enum CacheUse: Sendable, Equatable {
    /// Serve from cache; `ttl` = the stored response's remaining freshness, seconds.
    case fresh(ttl: Double)
    /// Stale by `staleness` seconds, but the request's max-stale allows serving it without revalidation.
    case staleAllowed(staleness: Double)
    /// Stale by `staleness` seconds, within the response's stale-while-revalidate: serve it now and revalidate in
    /// the background.
    case staleWhileRevalidate(staleness: Double)
    /// Must revalidate (or fetch) before serving.
    case revalidate
}

public enum Freshness {
    /// Statuses that may be given a heuristic lifetime (RFC 9110 section 15.1).
    public static let heuristicallyCacheableStatuses: Set<Int> = [200, 203, 204, 206, 300, 301, 308, 404, 405, 410, 414, 501]

    /// "No such resource": the statuses negative-ttl gives a lifetime.
    public static let negativeStatuses: Set<Int> = [404, 410]

    /// Shared-cache freshness lifetime in seconds (RFC 9111 section 4.2.1), per the policy above.
    public static func lifetime(of head: HTTPResponseHead, cacheControl: CacheControl, responseTime: Date,
                                policy: FreshnessPolicy) -> Double {
        if let sMaxAge = cacheControl.sMaxAge { return Double(sMaxAge) }
        if let maxAge = cacheControl.maxAge { return Double(maxAge) }
        let date = head.headers["Date"].flatMap { HTTPDate.parse($0) } ?? responseTime
        if let expires = head.headers["Expires"] {
            guard let expiry = HTTPDate.parse(expires) else { return 0 }
            return max(0, expiry.timeIntervalSince(date))
        }
        if negativeStatuses.contains(head.status), policy.negativeTTLSeconds > 0 { return policy.negativeTTLSeconds }
        if heuristicallyCacheableStatuses.contains(head.status) || cacheControl.isPublic,
           let lastModified = head.headers["Last-Modified"].flatMap({ HTTPDate.parse($0) }) {
            let sinceModified = max(0, date.timeIntervalSince(lastModified))
            return min(policy.heuristicFraction * sinceModified, policy.heuristicMaxSeconds)
        }
        return 0
    }

    /// corrected_initial_age (RFC 9111 section 4.2.3), seconds.
    public static func correctedInitialAge(of head: HTTPResponseHead, requestTime: Date, responseTime: Date) -> Double {
        let date = head.headers["Date"].flatMap { HTTPDate.parse($0) }
        let apparentAge = date.map { max(0, responseTime.timeIntervalSince($0)) } ?? 0
        let responseDelay = max(0, responseTime.timeIntervalSince(requestTime))
        let correctedAgeValue = Double(ageValue(head.headers)) + responseDelay
        return max(apparentAge, correctedAgeValue)
    }

    /// The Age field's first member as delta-seconds; 0 when absent or invalid (RFC 9111 section 5.1).
    public static func ageValue(_ headers: HTTPHeaders) -> Int {
        guard let first = headers.tokens("Age").first else { return 0 }
        return CacheControl.deltaSeconds(String(first)) ?? 0
    }

    /// current_age of a stored entry at `now`, seconds.
    public static func currentAge(_ entry: CacheEntry, now: Date) -> Double {
        entry.correctedInitialAge + max(0, now.timeIntervalSince(entry.responseTime))
    }

    /// What to do with `entry` for a request whose directives are `request`, per the policy above.
    /// `defaultStaleWhileRevalidate`: the configured window (`stale-while-revalidate`, seconds) for a response that
    /// names none; 0 for none.
    public static func use(_ entry: CacheEntry, request: CacheControl, now: Date, defaultStaleWhileRevalidate: Double) -> CacheUse {
        let response = entry.cacheControl
        if request.noCache || response.noCache { return .revalidate }
        let age = currentAge(entry, now: now)
        var lifetime = entry.freshnessLifetime
        if let maxAge = request.maxAge { lifetime = min(lifetime, Double(maxAge)) }
        if lifetime > age + Double(request.minFresh ?? 0) {
            return .fresh(ttl: entry.freshnessLifetime - age)
        }
        let staleness = max(0, age - lifetime)
        if response.mustRevalidate || response.proxyRevalidate || response.sMaxAge != nil { return .revalidate }
        switch request.maxStale {
        case .any: return .staleAllowed(staleness: staleness)
        case let .seconds(limit) where staleness <= Double(limit): return .staleAllowed(staleness: staleness)
        default: break
        }
        let configured: Double? = defaultStaleWhileRevalidate > 0 ? defaultStaleWhileRevalidate : nil
        if let window = response.staleWhileRevalidate.map(Double.init) ?? configured, staleness <= window,
           request.maxAge == nil, request.minFresh == nil, request.maxStale == nil {
            return .staleWhileRevalidate(staleness: staleness)
        }
        return .revalidate
    }
}
