internal import ImageCacheHTTP
internal import ImageCacheStatus
internal import ImageCacheConfig
internal import ImageCacheServer
internal import ImageCacheStore
internal import Foundation
internal import ImageCacheTransform
internal import Logging

/// Rules 1-4 above: nil when the request may use the admin endpoints, else the status and reason.
enum AdminGuard {
    static func refusal(_ request: HTTPRequestHead, path: String, client: ClientInfo,
                        configuration: Configuration) -> (status: Int, reason: String, headers: HTTPHeaders)? {
        guard configuration.adminAllow.contains(where: { $0.contains(client.address) }) else {
            return (403, "the /_imagecached/ endpoints answer clients in admin-allow only (\(client.address) is not)", [:])
        }
        let host = request.headers["Host"]
        if let host, !namesDaemon(host, adminHosts: configuration.adminHosts) {
            return (403, "admin requests must name the daemon by an IP address, localhost or a name in admin-hosts, not '\(host.prefix(100))' (DNS rebinding)", [:])
        }
        if let site = request.headers["Sec-Fetch-Site"]?.lowercased(), site == "cross-site" || site == "same-site" {
            return (403, "cross-site admin requests are refused (Sec-Fetch-Site: \(site))", [:])
        }
        if let origin = request.headers["Origin"], !isSameOrigin(origin, host: host) {
            return (403, "cross-site admin requests are refused (Origin: \(origin.prefix(100)))", [:])
        }
        if let token = configuration.adminToken, path != "/_imagecached/health" {
            guard let presented = request.headers["Authorization"].flatMap(presentedToken),
                  URLSigning.constantTimeEqual(presented, Array(token.utf8)) else {
                var headers = HTTPHeaders()
                headers.add("WWW-Authenticate", "Basic realm=\"imagecached\", charset=\"UTF-8\"")
                headers.add("WWW-Authenticate", "Bearer realm=\"imagecached\"")
                return (401, "this daemon needs its admin token: Authorization: Bearer <admin-token> (or Basic, with the token as the password)",
                        headers)
            }
        }
        return nil
    }

    /// The token an Authorization field presents: `Bearer <token>`, or `Basic base64(<any user>:<token>)`.
    static func presentedToken(_ value: String) -> [UInt8]? {
        let parts = value.split(separator: " ", maxSplits: 1)
        guard parts.count == 2 else { return nil }
        let credentials = parts[1].trimmingOWS()
        switch parts[0].lowercased() {
        case "bearer":
            return Array(credentials.utf8)
        case "basic":
            guard let decoded = Data(base64Encoded: String(credentials)), let colon = decoded.firstIndex(of: UInt8(ascii: ":")) else { return nil }
            return Array(decoded[decoded.index(after: colon)...])
        default:
            return nil
        }
    }

    /// The Host's name part is an IP literal, `localhost`, or one of `adminHosts`.
    static func namesDaemon(_ host: String, adminHosts: [String]) -> Bool {
        if host.isEmpty { return true }
        var name = Substring(host)
        if name.hasPrefix("[") { return name.contains("]") }   // an IPv6 literal (the parser checked its syntax)
        if let colon = name.lastIndex(of: ":") { name = name[..<colon] }
        let lowered = name.lowercased()
        return IPAddress(lowered) != nil || lowered == "localhost" || adminHosts.contains(lowered)
    }

    /// `origin` ("http://127.0.0.1:8080") names the same host and port as `host` ("127.0.0.1:8080").
    static func isSameOrigin(_ origin: String, host: String?) -> Bool {
        guard let host, let url = try? UpstreamURL.parse(origin), url.pathAndQuery == "/", url.scheme == "http" else { return false }
        guard let own = try? UpstreamURL.parse("http://" + host) else { return false }
        return own.host == url.host && own.effectivePort == url.effectivePort
    }
}
