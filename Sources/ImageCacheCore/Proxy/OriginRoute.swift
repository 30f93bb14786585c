package import ImageCacheHTTP
package import ImageCacheConfig
internal import ImageCacheTransform

/// A reverse-proxy mapping prepared once: the prefix without its trailing "/" ("" for "/"), and the parsed base.
struct OriginRoute: Sendable {
    let prefix: String
    let base: UpstreamURL
    /// The base URL's path without a trailing "/" ("" for the root).
    let basePath: String
    /// A base URL with a query takes the full parse for every target.
    let baseHasQuery: Bool

    init?(_ mapping: OriginMapping) {
        guard let base = try? UpstreamURL.parse(mapping.url) else { return nil }
        var prefix = Substring(mapping.prefix)
        while prefix.hasSuffix("/") { prefix = prefix.dropLast() }
        var path = Substring(base.pathAndQuery)
        while path.hasSuffix("/") { path = path.dropLast() }
        self.prefix = String(prefix)
        self.base = base
        basePath = String(path)
        baseHasQuery = path.contains("?")
    }

    /// The route with the longest prefix that matches `path` (the first of equals); nil: none.
    static func longest(matching path: Substring, in routes: [OriginRoute]) -> OriginRoute? {
        var best: OriginRoute?
        for route in routes where route.matches(path) && route.prefix.count > (best?.prefix.count ?? -1) { best = route }
        return best
    }

    /// "/img" matches "/img", "/img/a.jpg" and "/img?x", not "/images"; "" matches everything.
    func matches(_ path: Substring) -> Bool {
        prefix.isEmpty || path == prefix || path.hasPrefix(prefix + "/")
    }

    /// The upstream URL for a request target this mapping matches. The result must stay on the origin (same scheme,
    /// host and port) and under its base path: a target cannot name another host or climb out with dot segments.
    /// `targetIsNormal`: the caller found `target` in normal form (`UpstreamURL.isNormalPathAndQuery`).
    func upstreamURL(for target: String, targetIsNormal: Bool = false) throws(URLParseError) -> UpstreamURL {
        let rest = target.dropFirst(prefix.count)
        let pathAndQuery = (rest.isEmpty || rest.utf8.first == UInt8(ascii: "?")) ? basePath + "/" + rest : basePath + rest
        // A target already in normal form stays on the origin and under its base path by construction.
        if !baseHasQuery {
            if targetIsNormal && basePath.isEmpty, let url = UpstreamURL.withCheckedNormalPath(origin: base, pathAndQuery) { return url }
            if let url = UpstreamURL.withNormalPath(origin: base, pathAndQuery) { return url }
        }
        let url = try UpstreamURL.parse(base.scheme + "://" + base.authority + pathAndQuery)
        let underBase = basePath.isEmpty || url.pathAndQuery == basePath
            || url.pathAndQuery.hasPrefix(basePath + "/") || url.pathAndQuery.hasPrefix(basePath + "?")
        guard url.scheme == base.scheme, url.host == base.host, url.effectivePort == base.effectivePort, underBase else {
            throw URLParseError(reason: "the path leaves the origin's base URL \(base.string)")
        }
        return url
    }
}
