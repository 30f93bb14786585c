// Fuzz targets of the HTTP layer: the request parser, the response head parser, Cache-Control, Range.

internal import ImageCacheHTTP
internal import RawStructuredFieldValues

enum HTTPFuzz {
    // MARK: - Request parser

    /// Small limits, so that every limit is reached by short inputs.
    static let limits = HTTPParser.Limits(maxRequestLineBytes: 256, maxHeaderBytes: 1024, maxHeaderCount: 16,
                                          maxRequestBodyBytes: 4096)
    /// Limits no re-serialised request reaches (a target with bytes outside ASCII grows as %XX).
    static let roomyLimits = HTTPParser.Limits(maxRequestLineBytes: 1 << 16, maxHeaderBytes: 1 << 20, maxHeaderCount: 1 << 12,
                                               maxRequestBodyBytes: 1 << 20)

    /// The bytes as a connection's stream. Checks: the events do not depend on how the bytes are split into reads;
    /// a streamed body is the body read whole; every request re-serialised (Content-Length framing) parses the same.
    static func requestParser(_ bytes: [UInt8]) {
        let whole = events(bytes, limits: limits, piece: bytes.count, stream: false)
        let piece = 1 + Int(bytes.last ?? 0) % 13
        let split = events(bytes, limits: limits, piece: piece, stream: false)
        expect(refusals(split) == refusals(whole), "reads of \(piece) bytes give other events than one read")
        let streamed = events(bytes, limits: limits, piece: piece, stream: true)
        expect(refusals(collapsed(streamed)) == refusals(whole), "a streamed body differs from the body read whole")

        for case let .request(head, body) in whole {
            var again = HTTPParser(limits: roomyLimits)
            again.feed(serialised(head, body: body))
            var found: [HTTPParser.Event] = []
            while let event = again.next() {
                if event == .continueExpected { continue }
                found.append(event)
                if case .error = event { break }
            }
            let framing: Set<String> = ["transfer-encoding", "content-length"]
            var expectedHead = head
            expectedHead.headers.removeAll { framing.contains($0.name.lowercased()) }
            guard found.count == 1, case let .request(parsed, parsedBody) = found[0] else {
                fatalError("fuzz check failed: a re-serialised request gives \(found), not one request")
            }
            var parsedHead = parsed
            parsedHead.headers.removeAll { framing.contains($0.name.lowercased()) }
            expect(parsedHead == expectedHead && parsedBody == body, "a re-serialised request parses differently: \(parsed) vs \(head)")
        }
    }

    /// The events of a parser fed `bytes` `piece` bytes at a time, asking for events after each read as a connection
    /// does; up to the first error (which is final).
    static func events(_ bytes: [UInt8], limits: HTTPParser.Limits, piece: Int, stream: Bool) -> [HTTPParser.Event] {
        var parser = HTTPParser(limits: limits, bodyDecision: { _ in stream ? .stream : .read })
        var out: [HTTPParser.Event] = []
        var offset = 0
        repeat {
            let end = min(bytes.count, offset + max(piece, 1))
            parser.feed(bytes[offset..<end])
            offset = end
            while let event = parser.next() {
                out.append(event)
                if case .error = event { return out }
            }
        } while offset < bytes.count
        return out
    }

    /// Streamed events as the parser reads them without streaming: a complete streamed body becomes one request; an
    /// unfinished one (more bytes needed, or an error) disappears. Checks that a body has its announced length.
    static func collapsed(_ events: [HTTPParser.Event]) -> [HTTPParser.Event] {
        var out: [HTTPParser.Event] = []
        var open: (head: HTTPRequestHead, length: Int?, body: [UInt8])?
        for event in events {
            switch event {
            case let .streamedRequest(head, length):
                expect(open == nil, "a streamed request starts inside another")
                open = (head, length, [])
            case let .bodyChunk(chunk):
                expect(open != nil && !chunk.isEmpty, "a body chunk outside a streamed request, or empty")
                open?.body += chunk
            case .bodyEnd:
                guard let request = open else { fatalError("fuzz check failed: a body end outside a streamed request") }
                if let length = request.length { expect(request.body.count == length, "a streamed body is not its Content-Length") }
                out.append(.request(request.head, body: request.body))
                open = nil
            default:
                out.append(event)
            }
        }
        return out
    }

    /// Errors compared as errors: their status may depend on where a read ends (a long request line with a bare CR
    /// is 400 when its end is seen, 414 when the limit is passed first), but not whether a request is refused.
    static func refusals(_ events: [HTTPParser.Event]) -> [HTTPParser.Event] {
        events.map { event in
            if case .error = event { return .error(HTTPParser.ParseError(status: 400, reason: "")) }
            return event
        }
    }

    /// A request as a client would send it, with Content-Length framing.
    static func serialised(_ head: HTTPRequestHead, body: [UInt8]) -> [UInt8] {
        var out = Array("\(head.method) \(head.target) HTTP/\(head.version.major).\(head.version.minor)\r\n".utf8)
        for field in head.headers where !["transfer-encoding", "content-length"].contains(field.name.lowercased()) {
            out += Array("\(field.name): \(field.value)\r\n".utf8)
        }
        if !body.isEmpty { out += Array("Content-Length: \(body.count)\r\n".utf8) }
        out += Array("\r\n".utf8)
        return out + body
    }

    // MARK: - Response head

    /// The bytes as curl's header lines. Checks: what is kept is a valid status line and valid fields; the head
    /// serialised and parsed again is the same head; a Content-Length is not negative.
    static func responseHead(_ bytes: [UInt8]) {
        let lines = bytes.split(separator: 10, omittingEmptySubsequences: false).map { String(decoding: $0, as: UTF8.self) }
        guard let head = ResponseHeadParser.parse(lines) else { return }
        expect((100...999).contains(head.status), "status \(head.status)")
        let isFieldValue = { (text: String) in text.utf8.allSatisfy { $0 == 9 || ($0 >= 0x20 && $0 != 0x7F) } }
        expect(isFieldValue(head.reason), "a control character in the reason \(head.reason.debugDescription)")
        for field in head.headers {
            expect(!field.name.isEmpty && field.name.utf8.allSatisfy { $0 > 0x20 && $0 < 0x7F && $0 != UInt8(ascii: ":") },
                   "field name \(field.name.debugDescription)")
            expect(isFieldValue(field.value), "a control character in field \(field.name): \(field.value.debugDescription)")
        }
        let serialised = head.serialized().lines.filter { !$0.isEmpty }
        expect(ResponseHeadParser.parse(serialised) == head, "a serialised head parses differently: \(serialised)")
        if case let .length(length) = ResponseHeadParser.contentLength(head.headers) { expect(length >= 0, "length \(length)") }
    }

    // MARK: - Cache-Control

    /// Each line a Cache-Control field, and the lines a targeted field. Checks: delta-seconds within 0...2^31;
    /// private field names lower-cased, unique, not empty; a targeted field serialised again gives the same directives.
    static func cacheControl(_ bytes: [UInt8]) {
        let lines = bytes.lines
        var headers = HTTPHeaders()
        for line in lines { headers.add("Cache-Control", line) }
        check(CacheControl(headers))
        check(CacheControl(HTTPHeaders([("Pragma", bytes.text)])))
        if let targeted = CacheControl(targeted: lines) {
            check(targeted)
            var parser = StructuredFieldValueParser(Array(lines.joined(separator: ", ").utf8))
            guard let dictionary = try? parser.parseDictionaryFieldValue() else {
                fatalError("fuzz check failed: a targeted field was read, but is not a Dictionary")
            }
            var serializer = StructuredFieldValueSerializer()
            guard let text = try? serializer.writeDictionaryFieldValue(dictionary) else { return }
            expect(CacheControl(targeted: [String(decoding: text, as: UTF8.self)]) == targeted,
                   "a targeted field serialised again gives other directives: \(String(decoding: text, as: UTF8.self))")
        }
    }

    static func check(_ control: CacheControl) {
        let range = 0...CacheControl.deltaSecondsCap
        for (name, value) in [("max-age", control.maxAge), ("s-maxage", control.sMaxAge), ("min-fresh", control.minFresh),
                              ("stale-while-revalidate", control.staleWhileRevalidate), ("stale-if-error", control.staleIfError)] {
            if let value { expect(range.contains(value), "\(name) \(value)") }
        }
        if case let .seconds(seconds) = control.maxStale { expect(range.contains(seconds), "max-stale \(seconds)") }
        expect(Set(control.privateFields).count == control.privateFields.count, "private fields repeat: \(control.privateFields)")
        for name in control.privateFields { expect(!name.isEmpty && name == name.lowercased(), "private field \(name.debugDescription)") }
    }

    // MARK: - Range

    /// Lines: Range, If-Range, the stored length, ETag, Last-Modified, the method (GET when absent), Date. Checks: a part
    /// lies within the body; no part of an empty body; a method other than GET, or no Range, gets the whole.
    static func range(_ bytes: [UInt8]) {
        let lines = bytes.lines
        func line(_ n: Int) -> String? { n < lines.count && !lines[n].isEmpty ? lines[n] : nil }
        var headers = HTTPHeaders()
        if let range = line(0) { headers.add("Range", range) }
        if let ifRange = line(1) { headers.add("If-Range", ifRange) }
        let length = line(2).flatMap { Int($0) }.map { max(0, $0) } ?? 1000
        let method = line(5) ?? "GET"
        let answer = RangeAnswer.evaluate(method: method, headers: headers, length: length, etag: line(3), lastModified: line(4),
                                          date: line(6))
        switch answer {
        case let .part(part):
            expect(part.lowerBound >= 0 && part.upperBound < length, "part \(part) of a \(length)-byte body")
            expect(method == "GET" && headers["Range"] != nil, "a part for \(method) without Range")
        case .unsatisfiable:
            expect(method == "GET" && headers["Range"] != nil, "416 for \(method) without Range")
        case .whole:
            break
        }
    }
}
