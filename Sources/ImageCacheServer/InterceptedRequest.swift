// The requests inside an intercepted tunnel (CONNECT to a host in intercept-hosts, TLS terminated with a leaf for
// it): each is rewritten into the forward-mode request it stands for, so the proxy handles it exactly as it handles
// `GET https://host:port/path` through the proxy, with the same cache key as `/fetch?url=https://host:port/path`.
// Pure. The rules:
//   - an origin-form target `/a.jpg?x` becomes `https://<authority>/a.jpg?x`;
//   - an absolute-form target must be `https://` and name the tunnel's authority (the port may be left out when it is
//     443), else 421: this connection is for that authority only;
//   - `Host` must name the tunnel's host (and its port, when it gives one), else 421 (the same request cannot mean
//     one host to the cache and another to whoever reads Host);
//   - CONNECT inside the tunnel is refused, 405;
//   - an asterisk-form target (OPTIONS *) is left as it is (the proxy answers it as it would on the plain listener).

public import ImageCacheHTTP

/// The tunnel a connection's requests belong to after an intercepted CONNECT. Confined to the connection's loop
/// thread; shared by its state machine and its parser's body decision.
final class InterceptedAuthority: @unchecked Sendable {   // touched on the loop thread only (the parser runs there)
    var target: ConnectTarget?
}

enum InterceptedRequest {
    /// The forward-mode head `head` stands for inside a tunnel to `target`, or why it is refused.
    static func rewrite(_ head: HTTPRequestHead, for target: ConnectTarget) -> Result<HTTPRequestHead, HTTPParser.ParseError> {
        if head.method == "CONNECT" {
            return .failure(HTTPParser.ParseError(status: 405, reason: "CONNECT is not allowed inside an intercepted tunnel",
                                                  headers: ["Allow": "GET, HEAD, POST, PUT, DELETE, PATCH, OPTIONS"]))
        }
        let misdirected = HTTPParser.ParseError(status: 421, reason: "this connection is for \(target.authority) only")
        if let host = head.headers["Host"], !names(host, target) { return .failure(misdirected) }
        var rewritten = head
        let raw = head.target
        if raw.utf8.first == UInt8(ascii: "/") {
            rewritten.target = "https://" + target.authority + raw
            return .success(rewritten)
        }
        if raw == "*" { return .success(rewritten) }
        let lower = raw.lowercased()
        guard lower.hasPrefix("https://") else { return .failure(misdirected) }
        let rest = raw.dropFirst("https://".count)
        let end = rest.firstIndex { $0 == "/" || $0 == "?" || $0 == "#" } ?? rest.endIndex
        guard names(String(rest[..<end]), target) else { return .failure(misdirected) }
        return .success(rewritten)
    }

    /// Whether `authority` ("host", "host:port", "[v6]:port") names the tunnel's host and port (443 when left out).
    static func names(_ authority: String, _ target: ConnectTarget) -> Bool {
        if authority.isEmpty { return false }
        let parsed: ConnectTarget? = if case let .success(parsed) = ConnectTarget.parse(authority) {
            parsed
        } else if case let .success(parsed) = ConnectTarget.parse(authority.hasPrefix("[") ? authority + ":443" : authority + ":443") {
            parsed
        } else {
            nil
        }
        guard let parsed else { return false }
        return parsed.host == target.host && parsed.port == target.port
    }
}
