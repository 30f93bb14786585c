// What a client receives of an origin's response head, said once for the fetches the cache makes (FetchMachine) and
// the requests it passes through (Passthrough). Pure.

internal import ImageCacheHTTP
internal import ImageCacheStore

extension HTTPResponseHead {
    /// Reverse mode passes an origin's error page (4xx, 5xx) as it is, but never sniffed as HTML: it may quote what a
    /// client sent. Set on the head as received, so a stored page says it too.
    mutating func markErrorPage() {
        if status >= 400 { headers.set("X-Content-Type-Options", "nosniff") }
    }

    /// The head a client gets: no Content-Length (its sink frames the body), the targeted cache-control fields removed
    /// when strip-targeted-cache-control says so, Cache-Status and X-Cache for `outcome`.
    func forClient(_ outcome: CacheOutcome, policy: FreshnessPolicy) -> HTTPResponseHead {
        var headers = self.headers
        headers.remove("Content-Length")
        if policy.stripsTargetedFields {
            for name in policy.targetedFields { headers.remove(name) }
        }
        outcome.apply(to: &headers)
        return HTTPResponseHead(status: status, reason: reason, headers: headers)
    }
}
