// Conditional requests (RFC 9110 section 13.2.2) evaluated by the cache against the stored response it would serve,
// in the RFC's order:
//   1. If-Match: no tag strongly matches the stored ETag ("*" matches any stored response)   -> 412
//   2. If-Unmodified-Since (only without If-Match): the stored Last-Modified is later         -> 412
//   3. If-None-Match: a tag weakly matches the stored ETag, or "*"                            -> 304 (GET, HEAD)
//   4. If-Modified-Since (GET and HEAD, only without If-None-Match): not modified since       -> 304
//   otherwise                                                                                 -> serve
// A date that is not a valid HTTP-date is ignored (13.1.3, 13.1.4), and so is a date condition when the stored
// response has no Last-Modified. If-Range belongs to Range requests. Pure: no I/O, no state.

internal import Foundation

package enum Precondition: Sendable, Equatable {
    /// Serve the stored response.
    case serve
    /// 304 Not Modified.
    case notModified
    /// 412 Precondition Failed, and why (one line).
    case failed(String)

    /// The result for a request (`method`, `headers`) and a stored response with these validators.
    package static func evaluate(method: String, headers: HTTPHeaders, etag: String?, lastModified: String?) -> Precondition {
        // Most requests carry no conditional field: one scan of the names for "If-" and nothing else (the hit path).
        guard headers.contains(where: isConditional) else { return .serve }
        if let ifMatch = headers.combined("If-Match") {
            if !ifMatchHolds(ifMatch, etag: etag) {
                return .failed("If-Match: the stored response's entity tag is \(etag ?? "absent")")
            }
        } else if let since = headers["If-Unmodified-Since"].flatMap({ HTTPDate.parse($0) }),
                  let modified = lastModified.flatMap({ HTTPDate.parse($0) }), modified > since {
            return .failed("If-Unmodified-Since: the stored response was modified at \(lastModified ?? "")")
        }
        let safe = method == "GET" || method == "HEAD"
        if let ifNoneMatch = headers.combined("If-None-Match") {
            guard EntityTag.ifNoneMatch(ifNoneMatch, matches: etag) else { return .serve }
            return safe ? .notModified : .failed("If-None-Match: the stored response's entity tag matches")
        }
        if safe, let since = headers["If-Modified-Since"].flatMap({ HTTPDate.parse($0) }),
           let modified = lastModified.flatMap({ HTTPDate.parse($0) }), modified <= since {
            return .notModified
        }
        return .serve
    }

    /// If-Match holds when the field is "*" (a stored response exists) or a tag in it strongly matches `etag`.
    private static func ifMatchHolds(_ fieldValue: String, etag: String?) -> Bool {
        if fieldValue.trimmingOWS() == "*" { return true }
        guard let etag, let current = EntityTag.parse(etag) else { return false }
        return EntityTag.parseList(fieldValue).contains { $0.strongMatches(current) }
    }

    /// A field name that starts with "If-" (any case).
    private static func isConditional(_ field: HTTPHeaders.Field) -> Bool {
        var bytes = field.name.utf8.makeIterator()
        return bytes.next().map { $0 | 0x20 } == UInt8(ascii: "i") && bytes.next().map { $0 | 0x20 } == UInt8(ascii: "f")
            && bytes.next() == UInt8(ascii: "-")
    }
}
