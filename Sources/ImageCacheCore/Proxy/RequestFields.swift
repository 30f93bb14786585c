// WHICH REQUEST FIELDS GO UPSTREAM, stated once. Pure.
//
// Forward and fetch modes, on a request the cache answers (GET, HEAD: any origin on the internet, on a client's
// word, and one cache key and one coalesced fetch for every client of a URL): only the fields of
// `forward-request-fields` (default Accept, Accept-Language, User-Agent), and Authorization (such a request bypasses
// the cache: CacheDecision.beforeLookup). Cookies, Referer and the rest stay on this machine.
//
// Reverse mode (a configured origin), as nginx's proxy_pass does, and a request forward mode passes through (any
// other method, under forward-non-images pass: the client's own exchange with the origin, never cached or shared):
// every end-to-end field the client sent, except
//   1. hop-by-hop fields and every field the Connection field names (RFC 9110 7.6.1): Connection, Keep-Alive,
//      Proxy-Connection, Proxy-Authorization, TE, Trailer, Transfer-Encoding, Upgrade;
//   2. Host (the origin's goes, from its URL), Content-Length and Expect (the body is framed anew), Max-Forwards
//      (decremented: ProxyPassthrough), Via (the daemon appends its own to the client's: `upstreamHeaders`);
//   3. the fields of `drop-request-fields`;
//   4. on a request the cache answers (GET, HEAD): the client's preconditions and Range (If-None-Match,
//      If-Modified-Since, If-Match, If-Unmodified-Since, If-Range, Range). The cache fetches the whole response for
//      every client, makes its own conditional requests to revalidate, and evaluates If-None-Match,
//      If-Modified-Since and Range itself (RFC 9111 4.3); a precondition sent upstream would make the shared
//      response one client's answer. (If-Match and If-Unmodified-Since on a GET are nobody's then: a cache does not
//      evaluate them, RFC 9111 4.3.2.) And Accept-Encoding: images are compressed already, and a gzip-encoded
//      response would fail the image checks (whose magic bytes it hides) and split the cache per encoding.
// A request passed through (any other method) keeps its preconditions and Range: they are the origin's to judge.
//
// Vary is judged on the fields that go upstream (`ClientRequest.forwardedHeaders`): a field never sent cannot
// change the response, so it cannot split the cache or the coalescing.

internal import ImageCacheHTTP
internal import ImageCacheConfig

/// Immutable; a class so that a request carries it as one reference (ClientRequest is copied along the hit path).
final class RequestFieldPolicy: Sendable {
    /// The defaults (forward-request-fields' default list, nothing dropped).
    static let defaults = RequestFieldPolicy()

    /// Forward and fetch modes: the only fields sent (Authorization aside).
    let forwardNames: [String]
    /// Reverse mode: fields never sent.
    let droppedNames: [String]

    init(forwardNames: [String] = ["Accept", "Accept-Language", "User-Agent"], droppedNames: [String] = []) {
        self.forwardNames = forwardNames
        self.droppedNames = droppedNames
    }

    convenience init(_ configuration: Configuration) {
        self.init(forwardNames: configuration.forwardRequestFields, droppedNames: configuration.dropRequestFields)
    }

    /// Rule 2: fields the daemon sets itself (or curl does).
    static let replacedNames = ["Host", "Content-Length", "Expect", "Max-Forwards", "Via"]
    /// Rule 4: the client's preconditions, Range and Accept-Encoding, kept from the fetches the cache makes for everyone.
    static let conditionalNames = ["If-None-Match", "If-Modified-Since", "If-Match", "If-Unmodified-Since", "If-Range", "Range",
                                   "Accept-Encoding"]

    /// Whether a request in `mode` sends every end-to-end field (reverse mode; forward mode's passed methods), or
    /// only `forward-request-fields` and Authorization (the forward and fetch requests the cache answers).
    static func sendsEndToEnd(mode: Route.Mode, cached: Bool) -> Bool {
        mode == .reverse || (mode == .forward && !cached)
    }

    /// The fields of `headers` sent upstream for a request in `mode`; `cached`: the cache answers it (GET, HEAD).
    func forwarded(_ headers: HTTPHeaders, mode: Route.Mode, cached: Bool) -> HTTPHeaders {
        var forwarded = HTTPHeaders()
        guard Self.sendsEndToEnd(mode: mode, cached: cached) else {
            for name in forwardNames {
                if let value = headers.combined(name) { forwarded.add(name, value) }
            }
            if let authorization = headers["Authorization"] { forwarded.add("Authorization", authorization) }
            return forwarded
        }
        let connectionNamed = headers.tokens("Connection").map(String.init)
        for field in headers {
            let name = field.name
            if HopByHop.names.contains(where: { $0.equalsIgnoringASCIICase(name) })
                || connectionNamed.contains(where: { $0.equalsIgnoringASCIICase(name) })
                || Self.replacedNames.contains(where: { $0.equalsIgnoringASCIICase(name) })
                || droppedNames.contains(where: { $0.equalsIgnoringASCIICase(name) })
                || (cached && Self.conditionalNames.contains(where: { $0.equalsIgnoringASCIICase(name) })) {
                continue
            }
            forwarded.add(name, field.value)
        }
        return forwarded
    }

    /// The Via field sent upstream: the client's (when every end-to-end field goes) with this daemon's `via` appended
    /// (RFC 9110 7.6.3).
    static func via(_ headers: HTTPHeaders, mode: Route.Mode, cached: Bool = true, own via: String) -> String {
        guard sendsEndToEnd(mode: mode, cached: cached), let client = headers.combined("Via") else { return via }
        return client + ", " + via
    }
}
