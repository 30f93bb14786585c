internal import ImageCacheSystem
internal import ImageCacheHTTP
internal import ImageCacheConfig
internal import ImageCacheServer
internal import ImageCacheStore
internal import ImageCacheUpstream
internal import Dispatch
internal import Foundation
internal import Logging
internal import Synchronization

enum PassthroughRules {
    /// Methods the cache answers (reverse mode passes every other one through).
    static func isCached(_ method: String) -> Bool { method == "GET" || method == "HEAD" }

    /// Safe methods (RFC 9110 9.2.1); a response to any other one invalidates (rule 2).
    static func isSafe(_ method: String) -> Bool { ["GET", "HEAD", "OPTIONS", "TRACE"].contains(method) }

    /// Rule 2: the stored URIs a response invalidates.
    static func invalidated(method: String, status: Int, target: UpstreamURL, response: HTTPHeaders) -> [UpstreamURL] {
        guard !isSafe(method), (200..<400).contains(status) else { return [] }
        var urls = [target]
        for name in ["Location", "Content-Location"] {
            guard let value = response[name], let url = resolve(value, against: target),
                  url.scheme == target.scheme, url.host == target.host, url.effectivePort == target.effectivePort,
                  !urls.contains(url) else { continue }
            urls.append(url)
        }
        return urls
    }

    /// An absolute URL, or an absolute path on `base`'s origin; nil for other references.
    static func resolve(_ reference: String, against base: UpstreamURL) -> UpstreamURL? {
        let text = reference.trimmingOWS()
        if text.hasPrefix("//") { return try? UpstreamURL.parse(base.scheme + ":" + text) }
        if text.hasPrefix("/") { return try? UpstreamURL.parse(base.scheme + "://" + base.authority + text) }
        if text.contains("://") { return try? UpstreamURL.parse(String(text)) }
        return nil
    }

    enum Hops: Equatable {
        /// Send it on with this Max-Forwards value (nil: none).
        case forward(maxForwards: String?)
        /// Max-Forwards is 0: the daemon is the final recipient.
        case answerHere
    }

    /// Rule 3.
    static func hops(method: String, headers: HTTPHeaders) -> Hops {
        guard let value = headers["Max-Forwards"] else { return .forward(maxForwards: nil) }
        guard method == "OPTIONS" || method == "TRACE" else { return .forward(maxForwards: value) }
        guard let count = Int(value.trimmingOWS()), count >= 0 else { return .forward(maxForwards: nil) }
        return count == 0 ? .answerHere : .forward(maxForwards: String(min(count - 1, 255)))
    }

    /// The methods named in Allow (405 to a TRACE, an OPTIONS answered here); any other method is passed too.
    static let allowedWithoutTrace = "GET, HEAD, POST, PUT, DELETE, PATCH, OPTIONS"

    /// Fields a TRACE echo leaves out (RFC 9110 9.3.8: likely sensitive).
    static let notEchoed = ["Authorization", "Proxy-Authorization", "Cookie"]
}
