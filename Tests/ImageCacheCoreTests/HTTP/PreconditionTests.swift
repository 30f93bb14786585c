// Conditional requests against a stored response (RFC 9110 13.2.2), as a table in the RFC's terms.

@testable import ImageCacheHTTP
import Testing

@Suite("Preconditions (RFC 9110 13.2.2)", .timeLimit(.minutes(1)))
struct PreconditionTests {
    struct Case: CustomTestStringConvertible, Sendable {
        let name: String
        var method = "GET"
        let request: [(String, String)]
        var etag: String? = "\"v1\""
        var lastModified: String? = "Tue, 01 Jan 2030 00:00:00 GMT"
        let expected: String
        var testDescription: String { name }
    }

    static let earlier = "Mon, 31 Dec 2029 00:00:00 GMT", later = "Wed, 02 Jan 2030 00:00:00 GMT"

    static let cases: [Case] = [
        Case(name: "no conditional field: serve", request: [("Accept", "image/png")], expected: "serve"),
        Case(name: "13.1.1 If-Match with the stored tag: serve", request: [("If-Match", "\"v0\", \"v1\"")], expected: "serve"),
        Case(name: "13.1.1 If-Match with another tag: 412", request: [("If-Match", "\"v2\"")], expected: "412"),
        Case(name: "13.1.1 If-Match compares strongly: a weak tag never matches", request: [("If-Match", "W/\"v1\"")], expected: "412"),
        Case(name: "13.1.1 If-Match: * matches a stored response", request: [("If-Match", "*")], expected: "serve"),
        Case(name: "13.1.1 If-Match without a stored ETag: 412", request: [("If-Match", "\"v1\"")], etag: nil, expected: "412"),
        Case(name: "13.1.4 If-Unmodified-Since before the stored Last-Modified: 412",
             request: [("If-Unmodified-Since", earlier)], expected: "412"),
        Case(name: "13.1.4 If-Unmodified-Since after it: serve", request: [("If-Unmodified-Since", later)], expected: "serve"),
        Case(name: "13.1.4 an invalid date is ignored", request: [("If-Unmodified-Since", "yesterday")], expected: "serve"),
        Case(name: "13.1.4 no stored Last-Modified: ignored", request: [("If-Unmodified-Since", earlier)], lastModified: nil,
             expected: "serve"),
        Case(name: "13.2.2 If-Match present: If-Unmodified-Since is not evaluated",
             request: [("If-Match", "\"v1\""), ("If-Unmodified-Since", earlier)], expected: "serve"),
        Case(name: "13.1.2 If-None-Match with the stored tag: 304", request: [("If-None-Match", "\"v1\"")], expected: "304"),
        Case(name: "13.1.2 If-None-Match compares weakly", request: [("If-None-Match", "W/\"v1\"")], expected: "304"),
        Case(name: "13.1.2 If-None-Match: *", request: [("If-None-Match", "*")], expected: "304"),
        Case(name: "13.1.2 If-None-Match with other tags: serve", request: [("If-None-Match", "\"v2\", \"v3\"")], expected: "serve"),
        Case(name: "13.1.2 If-None-Match on a HEAD: 304", method: "HEAD", request: [("If-None-Match", "\"v1\"")], expected: "304"),
        Case(name: "13.2.2 step 1 before step 3: a failed If-Match wins over a matching If-None-Match",
             request: [("If-Match", "\"v2\""), ("If-None-Match", "\"v1\"")], expected: "412"),
        Case(name: "13.1.3 If-Modified-Since at or after Last-Modified: 304", request: [("If-Modified-Since", later)], expected: "304"),
        Case(name: "13.1.3 If-Modified-Since before it: serve", request: [("If-Modified-Since", earlier)], expected: "serve"),
        Case(name: "13.2.2 If-None-Match present: If-Modified-Since is not evaluated",
             request: [("If-None-Match", "\"v2\""), ("If-Modified-Since", later)], expected: "serve"),
        Case(name: "field names in any case", request: [("if-none-match", "\"v1\"")], expected: "304"),
    ]

    @Test("one case per requirement", arguments: cases)
    func evaluate(_ row: Case) {
        let result = Precondition.evaluate(method: row.method, headers: HTTPHeaders(row.request), etag: row.etag,
                                           lastModified: row.lastModified)
        switch result {
        case .serve: #expect(row.expected == "serve")
        case .notModified: #expect(row.expected == "304")
        case let .failed(why):
            #expect(row.expected == "412")
            #expect(why.hasPrefix("If-"), "the reason names the field: \(why)")
        }
    }
}
