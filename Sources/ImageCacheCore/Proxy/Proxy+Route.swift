// Where a request goes: the three ways in (forward proxy, /fetch?url=, reverse proxy), the daemon's own
// endpoints under /_imagecached/, or an error. Pure functions, no I/O.
//
// The cache key is the normalised upstream URL, whichever way the request came in, so a forward request and
// a fetch request for one URL share one entry.

/// What a request asks for.
package import ImageCacheHTTP
package import ImageCacheConfig
internal import ImageCacheTransform

package enum Route: Equatable {
    package enum Mode: String, Equatable { case forward, fetch, reverse }
    /// An upstream URL to serve through the cache. `trusted` for configured origins (no private-network check).
    case upstream(UpstreamURL, mode: Mode, trusted: Bool)
    /// A transform URL (imgproxy's syntax) under `transform-prefix`: verified, its options parsed.
    case transform(TransformTarget)
    /// One of the daemon's own endpoints: "/_imagecached/<name>".
    case admin(path: String, query: String?)
    case error(status: Int, reason: String)
}

extension Route {
    package static func resolve(_ request: HTTPRequestHead, origins: [OriginMapping], signing: URLSigning = URLSigning(),
                        transforms: TransformRouting? = nil, allowed: AllowedSources = AllowedSources([])) -> Route {
        resolve(request, origins: origins.compactMap(OriginRoute.init), signing: signing, transforms: transforms, allowed: allowed)
    }

    /// `signing`: the keys that verify signed fetch URLs, and whether unsigned ones are refused (URLSigning.swift).
    /// `transforms`: the transform prefix and its keys, when transforms are on.
    /// `allowed`: `allowed-sources`, for forward and fetch mode.
    static func resolve(_ request: HTTPRequestHead, origins: [OriginRoute], signing: URLSigning = URLSigning(),
                        transforms: TransformRouting? = nil, allowed: AllowedSources = AllowedSources([])) -> Route {
        let route = resolveTarget(request, origins: origins, signing: signing, transforms: transforms)
        if case let .upstream(url, mode, false) = route, let refusal = allowed.refusal(url) {
            _ = mode
            return .error(status: 403, reason: refusal)
        }
        return route
    }

    private static func resolveTarget(_ request: HTTPRequestHead, origins: [OriginRoute], signing: URLSigning,
                                      transforms: TransformRouting?) -> Route {
        let raw = request.target
        if request.method == "CONNECT" {
            // The server hands CONNECT to Proxy.connect (Connect/); routing sees one only when its head announces a body.
            return .error(status: 400, reason: "a CONNECT request must not have a body")
        }
        if raw.utf8.first != UInt8(ascii: "/") { return absoluteForm(raw, signing: signing) }
        // Every decision below is made on the normalised path, as the cache key is: "/img/%70rivate/x",
        // "/img/./private/x" and "/img/x/../private/x" all go where "/img/private/x" goes, and "/%5Fimagecached/"
        // and "/%66etch" are the daemon's own paths. A target already in normal form (the common case) is used as is.
        let targetIsNormal = UpstreamURL.isNormalPathAndQuery(raw)
        let target = targetIsNormal ? raw : UpstreamURL.normalisedOriginForm(raw)
        let mark = target.utf8.firstIndex(of: UInt8(ascii: "?"))
        let path = target[..<(mark ?? target.endIndex)]
        // The daemon's own paths begin "/f" or "/_": one byte tells most requests they are not one.
        let second = path.utf8.dropFirst().first
        // The daemon's own paths read their parameters from the query as the client sent it (the normal form would
        // turn a malformed escape into a literal "%25").
        if second == UInt8(ascii: "f"), path == "/fetch" {
            return fetchQuery(splitQuery(raw).query, signing: signing)
        }
        if second == UInt8(ascii: "f"), path.hasPrefix("/fetch/") {
            return signedPath(path.dropFirst("/fetch/".count), signing: signing)
        }
        if second == UInt8(ascii: "_"), path == "/_imagecached" || path.hasPrefix("/_imagecached/") {
            return .admin(path: String(path), query: splitQuery(raw).query)
        }
        // Compared as bytes (String.hasPrefix compares by Unicode equivalence: a cost every reverse request paid).
        if let transforms, path.utf8.count > transforms.prefix.utf8.count, path.utf8.starts(with: transforms.prefix.utf8),
           path.utf8.dropFirst(transforms.prefix.utf8.count).first == UInt8(ascii: "/"),
           !(transforms.prefix.isEmpty && URLSigning.looksSigned(path.dropFirst())) {
            // The signed text is the path as the client sent it (imgproxy signs the raw path).
            return transforms.resolve(raw.dropFirst(transforms.prefix.utf8.count + 1), origins: origins)
        }
        return originPath(target, path: path, targetIsNormal: targetIsNormal, origins: origins, signing: signing)
    }

    /// A target in absolute form: forward proxy (curl -x). Any other form that is not a path is malformed here.
    private static func absoluteForm(_ raw: String, signing: URLSigning) -> Route {
        guard raw.contains("://") else {
            return .error(status: 400, reason: "request target '\(raw.prefix(200))' is not a path or an absolute URL")
        }
        if signing.required {
            return .error(status: 403, reason: "this daemon requires signed URLs, which a forward-proxy request cannot carry: use /fetch?url=<percent-encoded URL>&sig=<signature> (imagecached sign URL)")
        }
        do {
            return .upstream(try UpstreamURL.parse(raw), mode: .forward, trusted: false)
        } catch {
            return .error(status: 400, reason: "bad URL: \(error.reason)")
        }
    }

    /// `/fetch?url=<percent-encoded URL>[&sig=<signature>]`, its `query` as the client sent it.
    private static func fetchQuery(_ query: String?, signing: URLSigning) -> Route {
        guard let query, let encoded = queryParameter("url", in: query) else {
            return .error(status: 400, reason: "missing url parameter: use /fetch?url=<percent-encoded absolute http or https URL>")
        }
        guard let url = PercentDecoding.decode(encoded), !url.isEmpty else {
            return .error(status: 400, reason: "the url parameter is not valid percent-encoding")
        }
        let parsed: UpstreamURL
        do {
            parsed = try UpstreamURL.parse(url)
        } catch {
            return .error(status: 400, reason: "bad url parameter: \(error.reason)")
        }
        if let sig = queryParameter("sig", in: query) {
            if let refusal = signing.verify(sig: sig, url: url, normalised: parsed.string) {
                return .error(status: 403, reason: refusal.reason)
            }
        } else if signing.required {
            return .error(status: 403, reason: "this daemon requires signed fetch URLs: add &sig=<signature> (imagecached sign URL)")
        }
        return .upstream(parsed, mode: .fetch, trusted: false)
    }

    /// Any other path (`target` normalised, `path` its part before the query): the reverse proxy's origin with the
    /// longest matching prefix.
    private static func originPath(_ target: String, path: Substring, targetIsNormal: Bool, origins: [OriginRoute],
                                   signing: URLSigning) -> Route {
        guard let mapping = OriginRoute.longest(matching: path, in: origins) else {
            // With no origin, "/" serves the camo path form too: /<digest>/<encoded URL>.
            if origins.isEmpty, URLSigning.looksSigned(path.dropFirst()) {
                return signedPath(path.dropFirst(), signing: signing)
            }
            if origins.isEmpty {
                return .error(status: 400, reason: "not a proxy request: send an absolute URL (curl -x), use /fetch?url=..., or start the daemon with --origin")
            }
            return .error(status: 404, reason: "no origin is configured for path \(path.prefix(200))")
        }
        do {
            return .upstream(try mapping.upstreamURL(for: target, targetIsNormal: targetIsNormal), mode: .reverse, trusted: true)
        } catch {
            return .error(status: 400, reason: "bad URL: \(error.reason)")
        }
    }

    /// A camo-style signed path (`<digest>/<encoded URL>`), verified.
    private static func signedPath(_ rest: Substring, signing: URLSigning) -> Route {
        switch signing.verifyPath(rest) {
        case let .failure(refusal):
            return .error(status: 403, reason: refusal.reason)
        case let .success(url):
            do {
                return .upstream(try UpstreamURL.parse(url), mode: .fetch, trusted: false)
            } catch {
                return .error(status: 400, reason: "bad signed URL: \(error.reason)")
            }
        }
    }

    static func splitQuery(_ target: String) -> (path: String, query: String?) {
        guard let mark = target.firstIndex(of: "?") else { return (target, nil) }
        return (String(target[..<mark]), String(target[target.index(after: mark)...]))
    }

    /// The raw (still percent-encoded) value of the first `name` parameter of a query string.
    static func queryParameter(_ name: String, in query: String) -> String? {
        for pair in query.split(separator: "&", omittingEmptySubsequences: true) {
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            if parts[0] == name { return parts.count > 1 ? String(parts[1]) : "" }
        }
        return nil
    }
}
