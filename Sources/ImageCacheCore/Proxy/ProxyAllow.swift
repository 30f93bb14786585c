// WHO MAY USE THE DAEMON AS A PROXY (`proxy-allow`), stated once. Pure.
//
//   1. A proxy request is one in absolute form (`GET http://host/x HTTP/1.1`: forward mode, `curl -x`,
//      `http_proxy=...`) or a CONNECT (a tunnel). Origin-form requests (reverse mode, /fetch, transform URLs, the
//      daemon's own endpoints) are not: their own rules apply.
//   2. A proxy request is answered only for a client whose address is in `proxy-allow` (CIDR ranges; default
//      loopback: 127.0.0.0/8, ::1/128; an IPv4-mapped client address counts as the IPv4 address it carries). Any
//      other client gets 403 with a reason naming the key, before anything else about the request is looked at
//      (its target, signatures, allowed-sources, its method), so that passing every method through forward mode
//      never widens who may use it.
//   3. An open proxy is a mistake worth a warning: a range outside loopback in `proxy-allow` while the daemon listens
//      on an address that is not loopback (or on sockets systemd passed, whose addresses it does not judge) is logged
//      at start and on every reload that keeps it.
//
// Proxy.handle applies rules 1 and 2 to every request, the daemon rule 3; a CONNECT's policy asks rule 2 too.

package import ImageCacheHTTP
package import ImageCacheServer

/// The forward proxy's client allowlist (the rules above).
package struct ProxyAllow: Sendable, Equatable {
    /// The ranges of `proxy-allow`.
    package let ranges: [AddressRange]

    package init(_ ranges: [AddressRange]) { self.ranges = ranges }

    /// Rule 1: the request asks the daemon to act as a proxy (absolute form, or CONNECT).
    package static func isProxyRequest(_ request: HTTPRequestHead) -> Bool {
        // One byte tells an origin-form request (the common case, never a CONNECT's authority form) from the rest.
        guard request.target.utf8.first != UInt8(ascii: "/") else { return false }
        return request.method == "CONNECT" || request.target.contains("://")
    }

    /// Rule 2: nil when `client` may use the proxy, else the reason for its 403.
    package func refusal(_ client: ClientInfo) -> String? {
        if ranges.contains(where: { $0.contains(client.address) }) { return nil }
        return "the forward proxy answers clients in proxy-allow only (\(client.address) is not)"
    }

    /// Rule 3: the warning to log when the daemon is an open proxy, else nil. `listenHost`: the host of `listen`, nil
    /// when systemd passed the listening sockets.
    package func openProxyWarning(listenHost: String?) -> String? {
        let open = ranges.filter { !$0.isLoopback }
        guard !open.isEmpty else { return nil }
        if let listenHost, Self.isLoopbackHost(listenHost) { return nil }
        let ranges = open.map(\.description).joined(separator: ", ")
        return "open proxy: proxy-allow lets \(ranges) use the forward proxy and the daemon listens on \(listenHost ?? "sockets from systemd"): any client there may fetch any URL through it (narrow proxy-allow to your own network)"
    }

    /// "localhost", or an IP literal (brackets allowed) in a loopback range.
    static func isLoopbackHost(_ host: String) -> Bool {
        var name = Substring(host)
        if name.hasPrefix("["), name.hasSuffix("]") { name = name.dropFirst().dropLast() }
        return name == "localhost" || (IPAddress(String(name))?.isLoopback ?? false)
    }
}
