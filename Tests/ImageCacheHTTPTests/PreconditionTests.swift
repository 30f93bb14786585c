// Conditional requests against a stored response (RFC 9111 4.3.2, RFC 9110 13.2.2), as a table in the RFCs' terms.

@testable import ImageCacheHTTP
import Testing

@Suite("Preconditions at a cache (RFC 9111 4.3.2)", .timeLimit(.minutes(1)))
struct PreconditionTests {
    struct Case: CustomTestStringConvertible, Sendable {
        let name: String
        var method = "GET"
        let request: [(String, String)]
        var etag: String? = "\"v1\""
        var lastModified: String? = "Tue, 01 Jan 2030 00:00:00 GMT"
        var date: String? = nil
        let expected: String
        var testDescription: String { name }
    }

    static let earlier = "Mon, 31 Dec 2029 00:00:00 GMT", later = "Wed, 02 Jan 2030 00:00:00 GMT"

    static let cases: [Case] = [
        Case(name: "no conditional field: serve", request: [("Accept", "image/png")], expected: "serve"),
        Case(name: "RFC 9111 4.3.2: If-Match is the origin's, a cache ignores it", request: [("If-Match", "\"v2\"")], expected: "serve"),
        Case(name: "RFC 9111 4.3.2: If-Unmodified-Since too", request: [("If-Unmodified-Since", earlier)], expected: "serve"),
        Case(name: "13.1.2 If-None-Match with the stored tag: 304", request: [("If-None-Match", "\"v1\"")], expected: "304"),
        Case(name: "13.1.2 If-None-Match compares weakly", request: [("If-None-Match", "W/\"v1\"")], expected: "304"),
        Case(name: "13.1.2 If-None-Match: *", request: [("If-None-Match", "*")], expected: "304"),
        Case(name: "13.1.2 If-None-Match with other tags: serve", request: [("If-None-Match", "\"v2\", \"v3\"")], expected: "serve"),
        Case(name: "13.1.2 If-None-Match on a HEAD: 304", method: "HEAD", request: [("If-None-Match", "\"v1\"")], expected: "304"),
        Case(name: "13.1.2 If-None-Match on another method: not the cache's", method: "POST", request: [("If-None-Match", "\"v1\"")],
             expected: "serve"),
        Case(name: "13.1.3 If-Modified-Since at or after Last-Modified: 304", request: [("If-Modified-Since", later)], expected: "304"),
        Case(name: "13.1.3 If-Modified-Since before it: serve", request: [("If-Modified-Since", earlier)], expected: "serve"),
        Case(name: "13.1.3 an invalid date is ignored", request: [("If-Modified-Since", "yesterday")], expected: "serve"),
        Case(name: "RFC 9111 4.3.2: without Last-Modified, the stored Date stands in", request: [("If-Modified-Since", later)],
             lastModified: nil, date: "Tue, 01 Jan 2030 00:00:00 GMT", expected: "304"),
        Case(name: "RFC 9111 4.3.2: without either, the time it was received", request: [("If-Modified-Since", earlier)],
             lastModified: nil, expected: "serve"),
        Case(name: "13.2.2 If-None-Match present: If-Modified-Since is not evaluated",
             request: [("If-None-Match", "\"v2\""), ("If-Modified-Since", later)], expected: "serve"),
        Case(name: "field names in any case", request: [("if-none-match", "\"v1\"")], expected: "304"),
    ]

    @Test("one case per requirement", arguments: cases)
    func evaluate(_ row: Case) {
        // Received at the Last-Modified moment (2030-01-01T00:00:00Z).
        let received = HTTPDate.parse("Tue, 01 Jan 2030 00:00:00 GMT")!
        let result = Precondition.evaluate(method: row.method, headers: HTTPHeaders(row.request), etag: row.etag,
                                           lastModified: row.lastModified, date: row.date, received: received)
        #expect(result == (row.expected == "304" ? .notModified : .serve))
    }
}
