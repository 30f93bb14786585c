package import ImageCacheHTTP
package import ImageCacheConfig
package import ImageCacheTransform
internal import Foundation
internal import Synchronization
internal import ImageCacheSystem

/// `allowed-sources`: the URL prefixes forward mode, fetch mode and transform sources may reach (empty: any). An
/// item is "scheme://host[:port][/path]"; a host "*.example.com" matches its subdomains (not example.com itself).
/// Matched against the normalised URL, so "%2e%2e" or a default port cannot step around it.
package struct AllowedSources: Sendable, Equatable {
    struct Item: Sendable, Equatable {
        let scheme: String
        let host: String
        let wildcard: Bool
        let port: Int
        let path: String
    }
    let items: [Item]

    package init(_ texts: [String]) {
        items = texts.compactMap { text in
            var host = text
            var wildcard = false
            if let range = text.range(of: "://*.") {
                wildcard = true
                host = text.replacingCharacters(in: range, with: "://")
            }
            guard let url = try? UpstreamURL.parse(host) else { return nil }
            return Item(scheme: url.scheme, host: url.host, wildcard: wildcard, port: url.effectivePort,
                        path: url.pathAndQuery == "/" ? "" : url.pathAndQuery)
        }
    }

    /// nil when `url` may be reached; else why not.
    func refusal(_ url: UpstreamURL) -> String? {
        if items.isEmpty { return nil }
        for item in items where item.scheme == url.scheme && item.port == url.effectivePort {
            let hostMatches = item.wildcard ? url.host.hasSuffix("." + item.host) : url.host == item.host
            guard hostMatches else { continue }
            let path = url.pathAndQuery
            if item.path.isEmpty || path == item.path || path.hasPrefix(item.path.hasSuffix("/") ? item.path : item.path + "/")
                || (!item.path.hasSuffix("/") && path.hasPrefix(item.path + "?")) {
                return nil
            }
        }
        return "\(url.scheme)://\(url.authority) is not under allowed-sources"
    }

    /// For a blind tunnel (CONNECT host:port), which carries any path: nil when an entry without a path names this
    /// host and port (either scheme); else why not.
    func refusal(host: String, port: Int) -> String? {
        if items.isEmpty { return nil }
        for item in items where item.path.isEmpty && item.port == port {
            if item.wildcard ? host.hasSuffix("." + item.host) : host == item.host { return nil }
        }
        return "\(host):\(port) is not under allowed-sources (a tunnel needs an entry without a path for its host and port)"
    }
}
