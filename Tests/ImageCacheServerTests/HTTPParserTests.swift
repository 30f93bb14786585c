import Testing
@testable import ImageCacheHTTP
@testable import ImageCacheServer

@Suite("HTTPParser", .timeLimit(.minutes(1)))
struct HTTPParserTests {
    /// What a run of the parser over some input produced: the requests, then the error if any.
    struct Outcome: Equatable, CustomStringConvertible {
        var requests: [String] = []
        var errorStatus: Int?
        var description: String { "requests: \(requests), error: \(errorStatus.map(String.init) ?? "none")" }
    }

    struct Case: CustomTestStringConvertible, Sendable {
        var name: String
        var input: String
        var requests: [String] = []
        var errorStatus: Int? = nil
        var testDescription: String { name }
    }

    static let limits = HTTPParser.Limits(maxRequestLineBytes: 64, maxHeaderBytes: 256, maxHeaderCount: 8, maxRequestBodyBytes: 32)

    /// Feeds `input` in pieces of `step` bytes and renders each request as "METHOD target version body".
    static func parse(_ input: String, step: Int? = nil) -> Outcome {
        var parser = HTTPParser(limits: limits)
        let bytes = Array(input.utf8)
        var outcome = Outcome()
        var index = 0
        repeat {
            let end = step.map { min(index + $0, bytes.count) } ?? bytes.count
            parser.feed(bytes[index..<end])
            index = end
            while let event = parser.next() {
                switch event {
                case let .request(head, body):
                    outcome.requests.append("\(head.method) \(head.target) \(head.version) \(String(decoding: body, as: UTF8.self))")
                case .continueExpected:
                    outcome.requests.append("100-continue")
                case let .error(error):
                    outcome.errorStatus = error.status
                    return outcome
                case .streamedRequest, .bodyChunk, .bodyEnd:
                    Issue.record("a parser that reads bodies whole streamed one")
                }
            }
        } while index < bytes.count
        return outcome
    }

    static let longTarget = "/" + String(repeating: "a", count: 80)

    static let cases: [Case] = [
        Case(name: "simple GET", input: "GET /a.jpg HTTP/1.1\r\nHost: x\r\n\r\n", requests: ["GET /a.jpg HTTP/1.1 "]),
        Case(name: "HEAD", input: "HEAD /a.jpg?w=1 HTTP/1.1\r\nHost: x\r\n\r\n", requests: ["HEAD /a.jpg?w=1 HTTP/1.1 "]),
        Case(name: "absolute-form target", input: "GET http://img.example/a.png HTTP/1.1\r\nHost: img.example\r\n\r\n",
             requests: ["GET http://img.example/a.png HTTP/1.1 "]),
        Case(name: "two pipelined requests in one buffer",
             input: "GET /1 HTTP/1.1\r\nHost: x\r\n\r\nGET /2 HTTP/1.1\r\nHost: x\r\n\r\n",
             requests: ["GET /1 HTTP/1.1 ", "GET /2 HTTP/1.1 "]),
        Case(name: "leading CRLF before the request line", input: "\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n", requests: ["GET / HTTP/1.1 "]),
        Case(name: "bare LF line endings", input: "GET / HTTP/1.1\nHost: x\n\n", requests: ["GET / HTTP/1.1 "]),
        Case(name: "HTTP/1.0 without Host", input: "GET / HTTP/1.0\r\n\r\n", requests: ["GET / HTTP/1.0 "]),
        Case(name: "Content-Length body", input: "POST /p HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello",
             requests: ["POST /p HTTP/1.1 hello"]),
        Case(name: "chunked body with extension and trailer",
             input: "POST /p HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nX-T: 1\r\n\r\n",
             requests: ["POST /p HTTP/1.1 hello world"]),
        Case(name: "Expect 100-continue reported before the body",
             input: "PUT /p HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\nok",
             requests: ["100-continue", "PUT /p HTTP/1.1 ok"]),
        Case(name: "missing Host on HTTP/1.1 is 400", input: "GET / HTTP/1.1\r\n\r\n", errorStatus: 400),
        Case(name: "long request line is 414", input: "GET \(longTarget) HTTP/1.1\r\nHost: x\r\n\r\n", errorStatus: 414),
        Case(name: "unterminated long request line is 414", input: "GET \(longTarget)", errorStatus: 414),
        Case(name: "too many header fields is 431",
             input: "GET / HTTP/1.1\r\nHost: x\r\n" + (1...8).map { "X-\($0): v\r\n" }.joined() + "\r\n", errorStatus: 431),
        Case(name: "header section too large is 431",
             input: "GET / HTTP/1.1\r\nHost: x\r\nX-Big: \(String(repeating: "b", count: 300))\r\n\r\n", errorStatus: 431),
        Case(name: "endless header is 431 before its end arrives",
             input: "GET / HTTP/1.1\r\nHost: x\r\nX-Big: \(String(repeating: "b", count: 300))", errorStatus: 431),
        Case(name: "Content-Length with Transfer-Encoding is 400",
             input: "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n", errorStatus: 400),
        Case(name: "non-numeric Content-Length is 400", input: "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1x\r\n\r\n", errorStatus: 400),
        Case(name: "conflicting Content-Length values are 400",
             input: "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", errorStatus: 400),
        Case(name: "Content-Length over the body limit is 413",
             input: "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 33\r\n\r\n", errorStatus: 413),
        Case(name: "chunked body over the limit is 413",
             input: "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n20\r\n\(String(repeating: "c", count: 32))\r\n1\r\nc\r\n0\r\n\r\n",
             errorStatus: 413),
        Case(name: "obs-fold is 400", input: "GET / HTTP/1.1\r\nHost: x\r\nX-A: 1\r\n  continued\r\n\r\n", errorStatus: 400),
        Case(name: "space before colon is 400", input: "GET / HTTP/1.1\r\nHost : x\r\n\r\n", errorStatus: 400),
        Case(name: "bare CR is 400", input: "GET / HTTP/1.1\rHost: x\r\n\r\n", errorStatus: 400),
        Case(name: "HTTP/2.0 is 505", input: "GET / HTTP/2.0\r\nHost: x\r\n\r\n", errorStatus: 505),
        Case(name: "garbage is 400", input: "\u{01}\u{02}hello world\r\n\r\n", errorStatus: 400),
        Case(name: "Host with a path is 400", input: "GET / HTTP/1.1\r\nHost: example.com/path\r\n\r\n", errorStatus: 400),
        Case(name: "Host with a space is 400", input: "GET / HTTP/1.1\r\nHost: a b\r\n\r\n", errorStatus: 400),
        Case(name: "Host with two ports is 400", input: "GET / HTTP/1.1\r\nHost: a:1:2\r\n\r\n", errorStatus: 400),
        Case(name: "Host with a bad port is 400", input: "GET / HTTP/1.1\r\nHost: a:80x\r\n\r\n", errorStatus: 400),
        Case(name: "Host with userinfo is 400", input: "GET / HTTP/1.1\r\nHost: user@a\r\n\r\n", errorStatus: 400),
        Case(name: "Host of an HTTP/1.0 request is checked too", input: "GET / HTTP/1.0\r\nHost: a/b\r\n\r\n", errorStatus: 400),
        Case(name: "Host name, IPv4, IPv6 literal with port, empty Host",
             input: "GET /1 HTTP/1.1\r\nHost: img.example-1.com:8080\r\n\r\nGET /2 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
                 + "GET /3 HTTP/1.1\r\nHost: [::1]:80\r\n\r\nGET /4 HTTP/1.1\r\nHost:\r\n\r\n",
             requests: ["GET /1 HTTP/1.1 ", "GET /2 HTTP/1.1 ", "GET /3 HTTP/1.1 ", "GET /4 HTTP/1.1 "]),
        Case(name: "unknown transfer coding is 501",
             input: "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", errorStatus: 501),
        // Found by the request-parser fuzz target's check that reads of any size give the same events: a chunk size
        // line over the limit was refused only when it arrived in pieces, not in one read.
        Case(name: "chunk size line (with its extension) of 1024 bytes is read",
             input: "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n1;\(String(repeating: "e", count: 1022))\r\na\r\n0\r\n\r\n",
             requests: ["POST / HTTP/1.1 a"]),
        Case(name: "chunk size line over 1024 bytes is 400, in one read too",
             input: "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n1;\(String(repeating: "e", count: 1023))\r\na\r\n0\r\n\r\n",
             errorStatus: 400),
    ]

    @Test("parses each request or refuses it with the right status", arguments: cases)
    func table(_ testCase: Case) {
        // Given / When
        let outcome = Self.parse(testCase.input)
        // Then
        #expect(outcome == Outcome(requests: testCase.requests, errorStatus: testCase.errorStatus))
    }

    @Test("gives the same result when the input arrives byte by byte", arguments: cases)
    func byteByByte(_ testCase: Case) {
        // Given / When
        let outcome = Self.parse(testCase.input, step: 1)
        // Then
        #expect(outcome == Outcome(requests: testCase.requests, errorStatus: testCase.errorStatus))
    }

    @Test("raw bytes outside ASCII in a target are percent-encoded as they are: two targets never become one")
    func rawTargetBytes() throws {
        // Given two targets that differ only in one invalid UTF-8 byte, and one with valid UTF-8
        func target(_ raw: [UInt8]) throws -> String {
            var parser = HTTPParser(limits: Self.limits)
            parser.feed(Array("GET /a".utf8) + raw + Array(".png HTTP/1.1\r\nHost: x\r\n\r\n".utf8))
            guard case let .request(head, _) = parser.next() else { throw ParseFailure() }
            return head.target
        }
        // Then
        #expect(try target([0xFF]) == "/a%FF.png")
        #expect(try target([0xFE]) == "/a%FE.png")
        #expect(try target([0xC3, 0xA9]) == "/a%C3%A9.png")
    }
    struct ParseFailure: Error {}

    @Test("a head that announces a body is refused at once when the body refusal says so, before any body byte")
    func bodyRefusedAtHead() {
        // Given a parser whose routes take no body on GET
        var parser = HTTPParser(limits: Self.limits, bodyDecision: { head in
            head.method == "GET" ? .refuse(HTTPParser.ParseError(status: 400, reason: "no body here")) : .read
        })
        // When only the head has arrived
        parser.feed(Array("GET /a HTTP/1.1\r\nHost: x\r\nContent-Length: 30\r\n\r\n".utf8))
        // Then
        #expect(parser.next() == .error(HTTPParser.ParseError(status: 400, reason: "no body here")))
        var zero = HTTPParser(limits: Self.limits, bodyDecision: { _ in .refuse(HTTPParser.ParseError(status: 400, reason: "no body here")) })
        zero.feed(Array("GET /a HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n".utf8))
        if case .request = zero.next() {} else { Issue.record("Content-Length: 0 announces no body") }
    }

    @Test("a streamed body: the head at once, then the bytes as they arrive (Content-Length and chunked, after a 100-continue too), then the end; the limit holds on a chunked body; the next request follows")
    func streamedBody() {
        let streams: HTTPParser.BodyDecision = { _ in .stream }
        var fixed = HTTPParser(limits: Self.limits, bodyDecision: streams)
        fixed.feed(Array("PUT /a HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabcd".utf8))
        #expect(fixed.next() == .streamedRequest(HTTPRequestHead(method: "PUT", target: "/a", headers: ["Host": "x", "Content-Length": "10"]), bodyLength: 10))
        #expect(fixed.next() == .bodyChunk(Array("abcd".utf8)))
        #expect(fixed.next() == nil)
        fixed.feed(Array("efghijGET /b HTTP/1.1\r\nHost: x\r\n\r\n".utf8))
        #expect(fixed.next() == .bodyChunk(Array("efghij".utf8)))
        #expect(fixed.next() == .bodyEnd)
        if case let .request(head, body)? = fixed.next() { #expect(head.target == "/b" && body.isEmpty) } else { Issue.record("no next request") }

        var chunked = HTTPParser(limits: Self.limits, bodyDecision: streams)
        chunked.feed(Array("POST /c HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nExpect: 100-continue\r\n\r\n3\r\nabc\r\n".utf8))
        #expect(chunked.next() == .continueExpected)
        guard case .streamedRequest(_, bodyLength: nil)? = chunked.next() else {
            Issue.record("no streamed head")
            return
        }
        #expect(chunked.next() == .bodyChunk(Array("abc".utf8)))
        chunked.feed(Array("2\r\nde\r\n0\r\n\r\n".utf8))
        #expect(chunked.next() == .bodyChunk(Array("de".utf8)))
        #expect(chunked.next() == .bodyEnd)

        var limited = HTTPParser(limits: HTTPParser.Limits(maxRequestLineBytes: 100, maxHeaderBytes: 1000, maxHeaderCount: 10,
                                                          maxRequestBodyBytes: 5), bodyDecision: streams)
        limited.feed(Array("POST /c HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n3\r\n".utf8))
        guard case .streamedRequest? = limited.next() else {
            Issue.record("no streamed head")
            return
        }
        #expect(limited.next() == .bodyChunk(Array("abc".utf8)))
        #expect(limited.next() == .error(HTTPParser.ParseError(status: 413, reason: "request body too large (limit 5 bytes)")))
    }

    @Test("keeps bytes after a request buffered for the next one")
    func pipelinedBytesStayBuffered() throws {
        // Given
        var parser = HTTPParser(limits: Self.limits)
        parser.feed(Array("GET /1 HTTP/1.1\r\nHost: x\r\n\r\nGET /2 HT".utf8))
        // When
        let first = parser.next()
        // Then
        guard case let .request(head, _) = first else { Issue.record("expected a request, got \(String(describing: first))"); return }
        #expect(head.target == "/1")
        #expect(parser.bufferedByteCount == 9)
        #expect(parser.next() == nil)
        #expect(parser.isReadingHead)
    }

    @Test("never buffers an endless header much beyond the header limit")
    func endlessHeaderIsBounded() {
        // Given
        var parser = HTTPParser(limits: Self.limits)
        parser.feed(Array("GET / HTTP/1.1\r\nHost: x\r\nX: ".utf8))
        #expect(parser.next() == nil)
        // When: 16 bytes at a time, asking for the next event after each read as the connection does
        var status: Int?
        for _ in 0..<100 where status == nil {
            parser.feed([UInt8](repeating: 65, count: 16))
            if case let .error(error) = parser.next() { status = error.status }
            #expect(parser.bufferedByteCount <= Self.limits.maxHeaderBytes + 16)
        }
        // Then
        #expect(status == 431)
    }

    @Test("reports the limit in the reason of a refused request")
    func reasonNamesTheLimit() {
        // Given
        var parser = HTTPParser(limits: HTTPParser.Limits(ServerSettings()))
        // When
        parser.feed(Array(("GET /" + String(repeating: "x", count: 9000) + " HTTP/1.1\r\n").utf8))
        // Then
        #expect(parser.next() == .error(HTTPParser.ParseError(status: 414, reason: "request line too long (limit 8192 bytes)")))
    }

    @Test("Host is host[:port]: names, IPv4, bracketed IPv6 and IPvFuture literals, escapes and sub-delims pass; paths, spaces, extra colons, bad ports and broken brackets do not",
          arguments: [
              ("x", true), ("", true), ("img.example:8080", true), ("127.0.0.1", true), ("[::1]:8080", true),
              ("[2001:db8::1]", true), ("[v1.fe]", true), ("a%20b.example", true), ("a!$&'()*+,;=b", true), ("h:", true),
              ("h:65535", true), ("example.com/path", false), ("a b", false), ("host:port:more", false), ("host:80x", false),
              ("h:123456", false), ("[::1", false), ("[]", false), ("[::1]x", false), ("[::1]:8x", false), ("[g::1]", false),
              ("h\u{e9}", false), ("a@b", false),
          ] as [(String, Bool)])
    func hostValues(value: String, valid: Bool) {
        #expect(HTTPParser.isValidHost(value) == valid)
        // And the parser answers 400 for the invalid ones, on HTTP/1.0 as on 1.1
        let outcome = Self.parse("GET / HTTP/1.0\r\nHost: \(value)\r\n\r\n")
        #expect(outcome == (valid ? Outcome(requests: ["GET / HTTP/1.0 "]) : Outcome(errorStatus: 400)))
    }
}
