// Range requests on a stored full response (RFC 9110 section 14), as a table.

@testable import ImageCacheHTTP
import Testing

@Suite("Range requests (RFC 9110 14)", .timeLimit(.minutes(1)))
struct ByteRangesTests {
    struct Case: CustomTestStringConvertible, Sendable {
        let name: String
        var method = "GET"
        let request: [(String, String)]
        var length = 1000
        /// The stored response's Date (Last-Modified is Tue, 01 Jan 2030 00:00:00 GMT).
        var date: String? = "Tue, 01 Jan 2030 00:00:05 GMT"
        let expected: RangeAnswer
        var testDescription: String { name }
    }

    static let cases: [Case] = [
        Case(name: "no Range: whole", request: [], expected: .whole),
        Case(name: "14.1.2 first-last", request: [("Range", "bytes=0-99")], expected: .part(0...99)),
        Case(name: "14.1.2 first- to the end", request: [("Range", "bytes=900-")], expected: .part(900...999)),
        Case(name: "14.1.2 -suffix: the last bytes", request: [("Range", "bytes=-100")], expected: .part(900...999)),
        Case(name: "14.1.2 a suffix longer than the body: all of it", request: [("Range", "bytes=-5000")], expected: .part(0...999)),
        Case(name: "14.1.2 last past the end is clamped", request: [("Range", "bytes=500-5000")], expected: .part(500...999)),
        Case(name: "a huge last position is clamped", request: [("Range", "bytes=0-99999999999999999999999")], expected: .part(0...999)),
        Case(name: "unit case and white space", request: [("Range", " Bytes=1-1 ")], expected: .part(1...1)),
        Case(name: "14.1.1 first past the end: 416", request: [("Range", "bytes=1000-")], expected: .unsatisfiable),
        Case(name: "14.1.1 a zero suffix: 416", request: [("Range", "bytes=-0")], expected: .unsatisfiable),
        Case(name: "an empty body has no part: 416", request: [("Range", "bytes=0-0")], length: 0, expected: .unsatisfiable),
        Case(name: "14.2 several ranges: whole", request: [("Range", "bytes=0-1,5-6")], expected: .whole),
        Case(name: "5.6.1 empty list elements do not count", request: [("Range", "bytes=, 0-99 ,")], expected: .part(0...99)),
        Case(name: "last before first is invalid: ignored", request: [("Range", "bytes=9-1")], expected: .whole),
        Case(name: "another unit: ignored", request: [("Range", "items=0-1")], expected: .whole),
        Case(name: "not digits: ignored", request: [("Range", "bytes=a-b")], expected: .whole),
        Case(name: "14.2 only GET: a HEAD ignores Range", method: "HEAD", request: [("Range", "bytes=0-1")], expected: .whole),
        Case(name: "14.3 If-Range with the stored tag: the part", request: [("Range", "bytes=0-1"), ("If-Range", "\"v1\"")],
             expected: .part(0...1)),
        Case(name: "14.3 If-Range with another tag: whole", request: [("Range", "bytes=0-1"), ("If-Range", "\"v2\"")], expected: .whole),
        Case(name: "14.3 If-Range with a weak tag never holds", request: [("Range", "bytes=0-1"), ("If-Range", "W/\"v1\"")],
             expected: .whole),
        Case(name: "14.3 If-Range with the Last-Modified date: the part",
             request: [("Range", "bytes=0-1"), ("If-Range", "Tue, 01 Jan 2030 00:00:00 GMT")], expected: .part(0...1)),
        Case(name: "14.3 If-Range with another date: whole",
             request: [("Range", "bytes=0-1"), ("If-Range", "Wed, 02 Jan 2030 00:00:00 GMT")], expected: .whole),
        Case(name: "8.8.2.2 If-Range with the Last-Modified date sent in the same second (weak): whole",
             request: [("Range", "bytes=0-1"), ("If-Range", "Tue, 01 Jan 2030 00:00:00 GMT")],
             date: "Tue, 01 Jan 2030 00:00:00 GMT", expected: .whole),
        Case(name: "8.8.2.2 If-Range with the Last-Modified date one second before Date (strong): the part",
             request: [("Range", "bytes=0-1"), ("If-Range", "Tue, 01 Jan 2030 00:00:00 GMT")],
             date: "Tue, 01 Jan 2030 00:00:01 GMT", expected: .part(0...1)),
        Case(name: "8.8.2.2 If-Range with a date and no stored Date: whole",
             request: [("Range", "bytes=0-1"), ("If-Range", "Tue, 01 Jan 2030 00:00:00 GMT")], date: nil, expected: .whole),
    ]

    @Test("one case per requirement", arguments: cases)
    func evaluate(_ row: Case) {
        #expect(RangeAnswer.evaluate(method: row.method, headers: HTTPHeaders(row.request), length: row.length,
                                     etag: "\"v1\"", lastModified: "Tue, 01 Jan 2030 00:00:00 GMT", date: row.date) == row.expected)
    }
}
