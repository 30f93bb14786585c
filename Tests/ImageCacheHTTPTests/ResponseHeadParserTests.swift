import Foundation
import Testing
@testable import ImageCacheHTTP

@Suite("ResponseHeadParser", .timeLimit(.minutes(1)))
struct ResponseHeadParserTests {
    @Test("parses HTTP/1.1 and HTTP/2 status lines and fields", arguments: [
        (["HTTP/1.1 200 OK", "Content-Type: image/png", "ETag:  \"v1\" "], 200, "OK"),
        (["HTTP/2 200", "content-type: image/png", "etag: \"v1\""], 200, "OK"),
        (["HTTP/1.0 404 Not Found Here", "Content-Type: image/png", "ETag: \"v1\""], 404, "Not Found Here"),
    ])
    func parses(_ lines: [String], status: Int, reason: String) throws {
        // When
        let head = try #require(ResponseHeadParser.parse(lines))
        // Then
        #expect(head.status == status)
        #expect(head.reason == reason)
        #expect(head.headers["Content-Type"] == "image/png")
        #expect(head.headers["etag"] == "\"v1\"")
    }

    @Test("a reason or field value that begins with a combining mark comes back the same once serialised and parsed again (a space and the mark are one Character: lines are split and trimmed by Unicode scalars)")
    func combiningMarkRoundTrips() throws {
        // Given: U+07F0, a combining mark, right after the status code's space and after a field's colon
        let head = try #require(ResponseHeadParser.parse(["HTTP/1.1 199 \u{07F0}#C", "E: \u{07F0}x", "F:\t \u{0301}y "]))
        #expect(head.status == 199 && head.reason == "\u{07F0}#C")
        #expect(head.headers["E"] == "\u{07F0}x" && head.headers["F"] == "\u{0301}y")
        // When: serialised ("HTTP/1.1 199 " + reason, "E: " + value) and parsed again
        let lines = String(decoding: head.serialized(), as: UTF8.self).components(separatedBy: "\r\n").filter { !$0.isEmpty }
        // Then: the same head
        #expect(ResponseHeadParser.parse(lines) == head)
    }

    @Test("refuses a section without a status line")
    func refusesGarbage() {
        #expect(ResponseHeadParser.parse(["Content-Type: x"]) == nil)
        #expect(ResponseHeadParser.parse(["HTTP/1.1 OK"]) == nil)
        #expect(ResponseHeadParser.parse([]) == nil)
    }

    @Test("drops fields that could inject headers: control characters in values, non-token names")
    func dropsInjection() throws {
        let head = try #require(ResponseHeadParser.parse([
            "HTTP/1.1 200 OK\rSet-Cookie: x", "X-A: 1\rSet-Cookie: s=evil", "Bad Name: 1", "X-Nul: a\u{0}b", "X-Good: fine\tvalue",
        ]))
        #expect(head.reason == "OK", "a reason with a CR in it is not kept")
        #expect(head.headers["X-A"] == nil)
        #expect(head.headers["Bad Name"] == nil)
        #expect(head.headers["X-Nul"] == nil)
        #expect(head.headers["X-Good"] == "fine\tvalue")
        // And what is written out has no injected field and no CR outside its line endings
        let bytes = head.serialized()
        let text = String(decoding: bytes, as: UTF8.self)
        #expect(!text.contains("evil") && !text.contains("Set-Cookie"))
        #expect(bytes.indices.allSatisfy { bytes[$0] != 13 || (bytes.index(after: $0) < bytes.endIndex && bytes[$0 + 1] == 10) })
    }

    @Test("Content-Length: one value, agreeing repeats, or an error for conflicting and invalid values (RFC 9112 6.3)", arguments: [
        ([], ResponseHeadParser.ContentLength.absent),
        (["10"], .length(10)),
        (["10", "10"], .length(10)),
        (["10, 10"], .length(10)),
        (["0"], .length(0)),
        (["10", "40"], .invalid("conflicting Content-Length values from upstream (10, 40)")),
        (["10, 40"], .invalid("conflicting Content-Length values from upstream (10, 40)")),
        (["-1"], .invalid("invalid Content-Length '-1' from upstream")),
        (["1e3"], .invalid("invalid Content-Length '1e3' from upstream")),
        ([""], .invalid("invalid Content-Length '' from upstream")),
        (["99999999999999999999"], .invalid("invalid Content-Length '99999999999999999999' from upstream")),
    ] as [([String], ResponseHeadParser.ContentLength)])
    func contentLength(values: [String], expected: ResponseHeadParser.ContentLength) {
        let headers = HTTPHeaders(values.map { ("Content-Length", $0) })
        #expect(ResponseHeadParser.contentLength(headers) == expected)
    }
}
