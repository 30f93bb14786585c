// Conditional requests evaluated by the cache against the stored response it would serve (RFC 9111 section 4.3.2,
// RFC 9110 section 13.2.2's order):
//   1. If-None-Match: a tag weakly matches the stored ETag, or "*"                            -> 304 (GET, HEAD)
//   2. If-Modified-Since (GET and HEAD, only without If-None-Match): the stored Last-Modified
//      (else its Date, else the time it was received) is not later                            -> 304
//   otherwise                                                                                 -> serve
// If-Match and If-Unmodified-Since are the origin's to evaluate: "not applicable to a cache" and a cache "MUST NOT
// evaluate conditional header fields that only apply to an origin server" (RFC 9111 4.3.2; RFC 9110 13.1.1 and
// 13.1.4 let it ignore them), so a stored copy, which may be stale, never answers 412. A date that is not a valid
// HTTP-date is ignored (RFC 9110 13.1.3). If-Range belongs to Range requests (ByteRanges.swift). Pure.

package import Foundation

package enum Precondition: Sendable, Equatable {
    /// Serve the stored response.
    case serve
    /// 304 Not Modified.
    case notModified

    /// The result for a request (`method`, `headers`) and a stored response with these validators; `received`: when
    /// it was received (the last resort for If-Modified-Since).
    package static func evaluate(method: String, headers: HTTPHeaders, etag: String?, lastModified: String?,
                                 date: String?, received: Date) -> Precondition {
        guard method == "GET" || method == "HEAD" else { return .serve }
        // Most requests carry no conditional field: one scan of the names for "If-" and nothing else (the hit path).
        guard headers.contains(where: isConditional) else { return .serve }
        if let ifNoneMatch = headers.combined("If-None-Match") {
            return EntityTag.ifNoneMatch(ifNoneMatch, matches: etag) ? .notModified : .serve
        }
        guard let since = headers["If-Modified-Since"].flatMap({ HTTPDate.parse($0) }) else { return .serve }
        let modified = lastModified.flatMap { HTTPDate.parse($0) } ?? date.flatMap { HTTPDate.parse($0) } ?? received
        return modified <= since ? .notModified : .serve
    }

    /// A field name that starts with "If-" (any case).
    private static func isConditional(_ field: HTTPHeaders.Field) -> Bool {
        var bytes = field.name.utf8.makeIterator()
        return bytes.next().map { $0 | 0x20 } == UInt8(ascii: "i") && bytes.next().map { $0 | 0x20 } == UInt8(ascii: "f")
            && bytes.next() == UInt8(ascii: "-")
    }
}
