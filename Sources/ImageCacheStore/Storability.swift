// STORAGE POLICY of imagecached, a shared cache (RFC 9111 section 3), stated before the code like cache_rfc2616.c.
//
// A response is stored only when ALL of these hold (the first failing rule is the reason given):
//   1. the request method is GET (HEAD is fetched as GET by the proxy, so it never reaches here as HEAD);
//   2. the request has no no-store;
//   3. the status is 200 or 203: final and complete. For a configured origin (reverse mode: `allStatuses`) also
//      every final status RFC 9111 3 allows: a heuristically cacheable one (RFC 9110 15.1: 204 300 301 308 404 405
//      410 414 501), or any other with explicit freshness (max-age, s-maxage, Expires) or public. Never 206 (we do
//      not combine ranges, RFC 9111 3.4), 304 (merged, not stored: see CacheEntry.refreshed) or 1xx. Forward and
//      fetch modes pass no other status to a client, so they store none;
//   4. the response has no no-store;
//   5. the response is not private (a qualified private="..." is stored without the fields it names: CacheEntry);
//   6. the response has no Vary: * (it could never be selected again);
//   7. the response has no Set-Cookie: replaying one client's cookie to every client is never right for a shared
//      image cache (Varnish's builtin VCL refuses these too);
//   8. a request carrying Authorization is stored only if the response says public, s-maxage or must-revalidate
//      (RFC 9111 section 3.5);
//   9. the response has explicit freshness (max-age, s-maxage, Expires) or a validator (Last-Modified, ETag), or is
//      a 404/410 that negative-ttl gives a lifetime: otherwise it is not worth storing ("no freshness information and
//      no validator").
// no-cache responses are stored: they are revalidated on every use (Freshness.use).
//
// Coalescing (isShareable): one upstream response may be handed to every client waiting on the same fetch unless it
// is private, no-store, carries Set-Cookie, or has Vary: * (a qualified private's fields go to the leader only). A response with another Vary must still be matched
// against each waiter's request fields by the caller (VaryKey.matches).
// Pure functions, no I/O.

/// Whether a response may be stored.
public import ImageCacheHTTP

public enum StoreDecision: Sendable, Equatable {
    case store
    case dontStore(reason: String)
}

public enum Storability {
    /// Statuses we store.
    public static let storableStatuses: Set<Int> = [200, 203]

    /// May a shared cache store this response? (The policy above.)
    /// `allStatuses`: the response comes from a configured origin (rule 3); `negativeTTL`: the lifetime a 404 or 410
    /// without explicit freshness gets (rule 9; 0: none).
    public static func decide(request: HTTPRequestHead, requestCacheControl: CacheControl, response: HTTPResponseHead,
                              responseCacheControl: CacheControl, allStatuses: Bool = false,
                              negativeTTL: Double = 0) -> StoreDecision {
        if request.method != "GET" { return .dontStore(reason: "method \(request.method) is not cached") }
        if requestCacheControl.noStore { return .dontStore(reason: "request no-store") }
        let explicitFreshness = responseCacheControl.maxAge != nil || responseCacheControl.sMaxAge != nil
            || response.headers.contains("Expires")
        if !storableStatuses.contains(response.status) {
            guard allStatuses, response.status >= 200, response.status != 206, response.status != 304,
                  Freshness.heuristicallyCacheableStatuses.contains(response.status) || explicitFreshness
                    || responseCacheControl.isPublic
            else { return .dontStore(reason: "status \(response.status) is not cached") }
        }
        if responseCacheControl.noStore { return .dontStore(reason: "response no-store") }
        if responseCacheControl.isPrivate { return .dontStore(reason: "response private") }
        if hasVaryStar(response) { return .dontStore(reason: "Vary: *") }
        if setsSharedCookie(response, responseCacheControl) { return .dontStore(reason: "response sets a cookie") }
        if request.headers.contains("Authorization"),
           !(responseCacheControl.isPublic || responseCacheControl.sMaxAge != nil || responseCacheControl.mustRevalidate) {
            return .dontStore(reason: "request has Authorization and the response is not public")
        }
        let validator = response.headers.contains("Last-Modified") || response.headers.contains("ETag")
        let negative = negativeTTL > 0 && Freshness.negativeStatuses.contains(response.status)
        if !explicitFreshness && !validator && !negative {
            return .dontStore(reason: "no freshness information and no validator")
        }
        return .store
    }

    /// May this one response be handed to the other clients waiting on the same fetch?
    public static func isShareable(_ response: HTTPResponseHead, cacheControl: CacheControl) -> Bool {
        !cacheControl.isPrivate && !cacheControl.noStore && !setsSharedCookie(response, cacheControl) && !hasVaryStar(response)
    }

    /// Set-Cookie that is not named by a qualified private (such a one goes to its leader only, and is not stored).
    static func setsSharedCookie(_ response: HTTPResponseHead, _ cacheControl: CacheControl) -> Bool {
        response.headers.contains("Set-Cookie") && !cacheControl.privateFields.contains("set-cookie")
    }

    static func hasVaryStar(_ response: HTTPResponseHead) -> Bool {
        response.headers.tokens("Vary").contains("*")
    }
}
