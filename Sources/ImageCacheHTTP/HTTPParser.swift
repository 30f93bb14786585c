// An incremental HTTP/1.1 request parser (RFC 9112). Pure value type: no I/O, no Dispatch.
//
// The connection `feed`s it the bytes it reads and calls `next()` when it is ready for a request; `next()`
// returns a whole request (head and body), a `continueExpected` signal, an error carrying the status to
// answer, or nil when more bytes are needed. A request whose body the caller streams (`BodyHandling.stream`) comes
// as `streamedRequest` (its head), then `bodyChunk`s as the bytes arrive, then `bodyEnd`; the limits are the same. Bytes after a request stay buffered for the next one
// (pipelining). The parser never reads ahead of the request it is on, so a connection that handles one
// request at a time just calls `next()` again after each response.
//
// Phases: requestLine -> headers -> (body | chunkSize -> chunkData -> chunkDataEnd ... -> trailers) -> requestLine.
// Any phase can end in `failed`, which is final (the connection answers the status and closes).
//
// Buffering is bounded by the limits: an unterminated request line longer than `maxRequestLineBytes`
// fails with 414 and a header section past `maxHeaderBytes` with 431 as soon as the bytes are seen,
// and body bytes move out of the buffer into the body as they arrive (at most `maxRequestBodyBytes`).
// What the parser does not bound is how much a caller feeds it without calling `next()`: the connection
// stops reading while it holds a full request line and header section it has not asked for yet.
//
// Rules applied (RFC 9112 section numbers): empty lines before a request line are skipped (2.2); lines end in
// CRLF or a bare LF, a bare CR is an error (2.2); obs-fold is rejected (5.2); no whitespace between a field
// name and its colon (5.1); Transfer-Encoding together with Content-Length is rejected, as is any coding
// list whose final coding is not chunked (6.1, 6.3); differing Content-Length values are rejected (6.3);
// HTTP/1.1 requires exactly one Host (RFC 9110 7.2), and a Host must be a host and port (RFC 3986 3.2.2); request
// target bytes outside ASCII are kept as %XX (never decoded into U+FFFD); chunk extensions are ignored and trailers discarded (7.1).

/// An incremental HTTP/1.x request parser.
public struct HTTPParser: Sendable {
    /// The sizes past which a request is refused. Built from `ServerSettings`.
    public struct Limits: Sendable, Equatable {
        /// Longest request line, bytes, without its line ending; longer gets 414.
        public var maxRequestLineBytes: Int
        /// Largest header section (field lines and the empty line), bytes; larger gets 431. Also bounds trailers.
        public var maxHeaderBytes: Int
        /// Most header fields; more gets 431.
        public var maxHeaderCount: Int
        /// Largest request body, bytes; larger gets 413.
        public var maxRequestBodyBytes: Int

        public init(maxRequestLineBytes: Int, maxHeaderBytes: Int, maxHeaderCount: Int, maxRequestBodyBytes: Int) {
            self.maxRequestLineBytes = maxRequestLineBytes
            self.maxHeaderBytes = maxHeaderBytes
            self.maxHeaderCount = maxHeaderCount
            self.maxRequestBodyBytes = maxRequestBodyBytes
        }

    }

    /// Why a request was refused: the status to answer, a one-line reason for the body and the log, and fields the
    /// status calls for (Allow with a 405).
    public struct ParseError: Error, Sendable, Equatable, CustomStringConvertible {
        public var status: Int
        public var reason: String
        public var headers: HTTPHeaders
        public init(status: Int, reason: String, headers: HTTPHeaders = HTTPHeaders()) {
            self.status = status
            self.reason = reason
            self.headers = headers
        }
        public var description: String { "\(status) \(reason)" }
    }

    /// What `next()` found.
    public enum Event: Sendable, Equatable {
        /// A complete request; `body` is empty when it had none.
        case request(HTTPRequestHead, body: [UInt8])
        /// The head of a request whose body is streamed (`bodyLength`: its Content-Length; nil when chunked); its
        /// `bodyChunk`s and `bodyEnd` follow.
        case streamedRequest(HTTPRequestHead, bodyLength: Int?)
        /// Bytes of the streamed body, in order.
        case bodyChunk([UInt8])
        /// The streamed body is complete (the parser then goes on to the next request).
        case bodyEnd
        /// The head asked for `Expect: 100-continue` and its body is acceptable: answer 100 Continue, keep feeding.
        case continueExpected
        /// The request is refused; the parser is now failed and returns this error again on every call.
        case error(ParseError)
    }

    private enum Phase: Sendable, Equatable {
        case requestLine
        case headers
        case body
        case chunkSize
        case chunkData
        case chunkDataEnd
        case trailers
        case failed(ParseError)
    }

    public let limits: Limits
    /// What to do with a body a head announces.
    public enum BodyHandling: Sendable, Equatable {
        /// Read it whole (within maxRequestBodyBytes) and return it with the request.
        case read
        /// Return the head at once, then the body as it arrives (`bodyChunk`, `bodyEnd`).
        case stream
        /// Refuse the request at once, before a byte of the body is read (routes that take no body).
        case refuse(ParseError)
    }

    /// Asked once a head announces a body (Content-Length above 0, or chunked).
    public typealias BodyDecision = @Sendable (HTTPRequestHead) -> BodyHandling
    private let bodyDecision: BodyDecision

    private var buffer: [UInt8] = []
    /// First byte of `buffer` not consumed yet.
    private var start = 0
    /// Bytes after `start` already searched for a line feed (so byte-by-byte feeding stays linear).
    private var scanned = 0
    private var phase: Phase = .requestLine
    /// Bytes of empty lines skipped before the current request line.
    private var leadingBytes = 0
    /// The head being built (set once the request line has been parsed).
    private var head: HTTPRequestHead?
    /// Bytes of the header section (or of the trailer section) so far.
    private var sectionBytes = 0
    private var body: [UInt8] = []
    /// Bytes left in the fixed-length body or in the current chunk.
    private var remaining = 0
    /// The current request's body is streamed; its head is still to be returned (after a `continueExpected`).
    private var streaming = false
    private var streamHeadPending = false
    /// Body bytes of the current request so far (the limit on a chunked body).
    private var bodyBytes = 0

    public init(limits: Limits, bodyDecision: @escaping BodyDecision = { _ in .read }) {
        self.limits = limits
        self.bodyDecision = bodyDecision
    }


    /// Bytes received and not consumed yet (the rest of the current request and any pipelined ones).
    public var bufferedByteCount: Int { buffer.count - start }

    /// True from the first byte of a request until its head is complete.
    public var isReadingHead: Bool {
        switch phase {
        case .requestLine: bufferedByteCount > 0 || leadingBytes > 0
        case .headers: true
        default: false
        }
    }

    /// True while the head is complete and the body is still arriving.
    public var isReadingBody: Bool {
        switch phase {
        case .body, .chunkSize, .chunkData, .chunkDataEnd, .trailers: true
        default: false
        }
    }

    /// Appends received bytes. Ignored once the parser has failed.
    public mutating func feed<Bytes: Collection>(_ bytes: Bytes) where Bytes.Element == UInt8 {
        if case .failed = phase { return }
        compact()
        buffer.append(contentsOf: bytes)
    }

    /// Hands out the bytes received after the last complete request and empties the parser: what a client sent after
    /// a CONNECT head (an early TLS ClientHello) belongs to the tunnel, not to HTTP. Call only between requests.
    public mutating func takeBuffered() -> [UInt8] {
        precondition(phase == .requestLine, "takeBuffered is for the bytes after a complete request")
        defer {
            buffer = []
            start = 0
            scanned = 0
            leadingBytes = 0
        }
        return Array(buffer[start...])
    }

    /// Parses as far as the buffered bytes allow and returns the next event, or nil when more bytes are needed.
    public mutating func next() -> Event? {
        if streamHeadPending, let head {
            streamHeadPending = false
            return .streamedRequest(head, bodyLength: phase == .body ? remaining : nil)
        }
        while true {
            let step: Step
            switch phase {
            case let .failed(error): return .error(error)
            case .requestLine: step = requestLineStep()
            case .headers: step = headerLineStep()
            case .body: return fixedBodyStep()
            case .chunkSize: step = chunkSizeStep()
            case .chunkData: step = chunkDataStep()
            case .chunkDataEnd: step = chunkDataEndStep()
            case .trailers: step = trailerLineStep()
            }
            if case let .done(event) = step { return event }
        }
    }

    // MARK: - Steps (one per phase)

    /// What one step of `next()` did.
    private enum Step {
        /// It consumed a line or moved to another phase: parse on.
        case proceed
        /// `next()` returns this (nil: more bytes are needed).
        case done(Event?)
    }

    /// The request line, or an empty line before it.
    @inline(__always)
    private mutating func requestLineStep() -> Step {
        switch nextLine() {
        case let .incomplete(pending):
            if pending > limits.maxRequestLineBytes + 1 { return .done(requestLineTooLong()) }
            return .done(nil)
        case .bareCR:
            return .done(fail(400, "bare CR in request line"))
        case let .complete(line, next):
            consume(upTo: next)
            if line.isEmpty {
                leadingBytes += 2
                if leadingBytes > limits.maxRequestLineBytes { return .done(fail(400, "too many empty lines before the request line")) }
                return .proceed
            }
            if line.count > limits.maxRequestLineBytes { return .done(requestLineTooLong()) }
            if let error = parseRequestLine(line) { return .done(fail(error)) }
            sectionBytes = 0
            phase = .headers
            return .proceed
        }
    }

    /// One header field line, or the empty line that ends the head.
    @inline(__always)
    private mutating func headerLineStep() -> Step {
        switch nextLine() {
        case let .incomplete(pending):
            if sectionBytes + pending > limits.maxHeaderBytes { return .done(headerSectionTooLarge()) }
            return .done(nil)
        case .bareCR:
            return .done(fail(400, "bare CR in header section"))
        case let .complete(line, next):
            sectionBytes += next - start
            if sectionBytes > limits.maxHeaderBytes { return .done(headerSectionTooLarge()) }
            consume(upTo: next)
            if line.isEmpty {
                if let event = finishHead() { return .done(event) }
                return .proceed
            }
            if let error = parseField(line) { return .done(fail(error)) }
            return .proceed
        }
    }

    /// Bytes of a Content-Length body.
    @inline(__always)
    private mutating func fixedBodyStep() -> Event? {
        take(max: remaining)
        if streaming && !body.isEmpty { return .bodyChunk(takeBody()) }
        if remaining > 0 { return nil }
        return complete()
    }

    /// A chunk's size line (the last chunk, size 0, leads to the trailers).
    private mutating func chunkSizeStep() -> Step {
        switch nextLine() {
        case let .incomplete(pending):
            // The limit is the line's, without its line ending (a CR may be pending), whether its end has
            // arrived in the same read or not.
            if pending > Self.maxChunkLineBytes + 1 { return .done(fail(400, "chunk size line too long")) }
            return .done(nil)
        case .bareCR:
            return .done(fail(400, "bare CR in chunk size line"))
        case let .complete(line, next):
            if line.count > Self.maxChunkLineBytes { return .done(fail(400, "chunk size line too long")) }
            consume(upTo: next)
            guard let size = parseChunkSize(line) else { return .done(fail(400, "invalid chunk size")) }
            if size == 0 {
                sectionBytes = 0
                phase = .trailers
            } else {
                if size > limits.maxRequestBodyBytes - bodyBytes { return .done(bodyTooLarge()) }
                remaining = size
                phase = .chunkData
            }
            return .proceed
        }
    }

    /// Bytes of the current chunk.
    private mutating func chunkDataStep() -> Step {
        take(max: remaining)
        if remaining == 0 { phase = .chunkDataEnd }
        if streaming && !body.isEmpty { return .done(.bodyChunk(takeBody())) }
        if remaining > 0 { return .done(nil) }
        return .proceed
    }

    /// The line ending after a chunk's data.
    private mutating func chunkDataEndStep() -> Step {
        switch nextLine() {
        case let .incomplete(pending):
            if pending > 1 { return .done(fail(400, "chunk data not followed by CRLF")) }
            return .done(nil)
        case .bareCR:
            return .done(fail(400, "chunk data not followed by CRLF"))
        case let .complete(line, next):
            if !line.isEmpty { return .done(fail(400, "chunk data not followed by CRLF")) }
            consume(upTo: next)
            phase = .chunkSize
            return .proceed
        }
    }

    /// One trailer field line (discarded), or the empty line that ends the request.
    private mutating func trailerLineStep() -> Step {
        switch nextLine() {
        case let .incomplete(pending):
            if sectionBytes + pending > limits.maxHeaderBytes { return .done(trailerSectionTooLarge()) }
            return .done(nil)
        case .bareCR:
            return .done(fail(400, "bare CR in trailer section"))
        case let .complete(line, next):
            sectionBytes += next - start
            if sectionBytes > limits.maxHeaderBytes { return .done(trailerSectionTooLarge()) }
            consume(upTo: next)
            if line.isEmpty { return .done(complete()) }
            // Trailer fields are discarded.
            return .proceed
        }
    }

    // MARK: - Lines

    private static let maxChunkLineBytes = 1024

    private enum Line {
        /// The line's content (without CR LF) and the index just after its LF.
        case complete(Range<Int>, next: Int)
        /// No LF yet; `pending` bytes of the line are buffered.
        case incomplete(pending: Int)
        /// A CR not followed by LF.
        case bareCR
    }

    private mutating func nextLine() -> Line {
        let from = start + scanned
        guard let lf = buffer[from...].firstIndex(of: 10) else {
            scanned = buffer.count - start
            return .incomplete(pending: buffer.count - start)
        }
        scanned = 0
        var end = lf
        if end > start && buffer[end - 1] == 13 { end -= 1 }
        if buffer[start..<end].contains(13) { return .bareCR }
        return .complete(start..<end, next: lf + 1)
    }

    private mutating func consume(upTo index: Int) {
        start = index
        scanned = 0
    }

    /// Moves up to `max` buffered bytes into the body.
    private mutating func take(max: Int) {
        let count = min(max, buffer.count - start)
        guard count > 0 else { return }
        body.append(contentsOf: buffer[start..<start + count])
        start += count
        remaining -= count
        bodyBytes += count
    }

    /// The streamed body bytes taken so far, handed out.
    private mutating func takeBody() -> [UInt8] {
        defer { body = [] }
        return body
    }

    /// Drops consumed bytes from the front of the buffer when that is cheap relative to what remains.
    private mutating func compact() {
        if start == buffer.count {
            buffer.removeAll(keepingCapacity: buffer.capacity <= 65_536)
            start = 0
        } else if start >= 4096 && start * 2 >= buffer.count {
            buffer.removeSubrange(0..<start)
            start = 0
        }
    }

    // MARK: - Request line and fields

    private mutating func parseRequestLine(_ range: Range<Int>) -> ParseError? {
        let line = buffer[range]
        let parts = line.split(separator: 32, maxSplits: 3, omittingEmptySubsequences: false)
        guard parts.count == 3, !parts[0].isEmpty, !parts[1].isEmpty, !parts[2].isEmpty else {
            return ParseError(status: 400, reason: "malformed request line")
        }
        guard parts[0].allSatisfy(Self.isTokenByte) else {
            return ParseError(status: 400, reason: "invalid method")
        }
        guard parts[1].allSatisfy({ $0 > 32 && $0 != 127 }) else {
            return ParseError(status: 400, reason: "invalid request target")
        }
        let version = Array(parts[2])
        guard version.count == 8, version[0..<5].elementsEqual("HTTP/".utf8),
              Self.isDigit(version[5]), version[6] == 46, Self.isDigit(version[7]) else {
            return ParseError(status: 400, reason: "malformed HTTP version")
        }
        let major = Int(version[5] - 48)
        let minor = Int(version[7] - 48)
        guard major == 1, minor <= 1 else {
            return ParseError(status: 505, reason: "HTTP version \(major).\(minor) not supported (1.0 and 1.1 are)")
        }
        head = HTTPRequestHead(method: String(decoding: parts[0], as: UTF8.self),
                               target: Self.target(parts[1]),
                               version: HTTPVersion(major: major, minor: minor))
        return nil
    }

    /// The request target as text. Bytes outside ASCII (never valid in a target, but sent by some clients) are
    /// percent-encoded as they are, so two different raw targets stay two different targets (decoding them as UTF-8
    /// would turn every invalid byte into U+FFFD and let unrelated targets share one cache key).
    static func target(_ bytes: ArraySlice<UInt8>) -> String {
        guard bytes.contains(where: { $0 >= 0x80 }) else { return String(decoding: bytes, as: UTF8.self) }
        let hex = Array("0123456789ABCDEF".utf8)
        var escaped: [UInt8] = []
        escaped.reserveCapacity(bytes.count * 3)
        for byte in bytes {
            if byte < 0x80 {
                escaped.append(byte)
            } else {
                escaped += [UInt8(ascii: "%"), hex[Int(byte >> 4)], hex[Int(byte & 0x0F)]]
            }
        }
        return String(decoding: escaped, as: UTF8.self)
    }

    /// `Host = uri-host [ ":" port ]` (RFC 9110 7.2, RFC 3986 3.2.2): an IP literal in brackets, or a reg-name /
    /// IPv4 address (unreserved, pct-encoded, sub-delims), then digits. Empty is allowed (a target without
    /// authority). "example.com/path", "a b", "host:port:more" and "host:80x" are not hosts.
    package static func isValidHost(_ value: String) -> Bool {
        // Every request asks this: one pass over contiguous bytes, no generic slices.
        if let valid = value.utf8.withContiguousStorageIfAvailable(isValidHost) { return valid }
        return Array(value.utf8).withUnsafeBufferPointer(isValidHost)
    }

    private static func isValidHost(_ bytes: UnsafeBufferPointer<UInt8>) -> Bool {
        var index = 0
        if bytes.first == UInt8(ascii: "[") {
            index = 1
            while index < bytes.count, bytes[index] != UInt8(ascii: "]") {
                let byte = bytes[index]
                guard isHexDigit(byte) || byte == UInt8(ascii: ":") || byte == UInt8(ascii: ".") || byte == UInt8(ascii: "v")
                    || byte == UInt8(ascii: "V") else { return false }
                index += 1
            }
            guard index < bytes.count, index > 1 else { return false }   // no "]", or "[]"
            index += 1
        } else {
            while index < bytes.count, bytes[index] != UInt8(ascii: ":") {
                guard isRegNameByte(bytes[index]) else { return false }
                index += 1
            }
        }
        guard index < bytes.count else { return true }
        guard bytes[index] == UInt8(ascii: ":") else { return false }
        let digits = bytes.count - index - 1
        guard digits <= 5 else { return false }
        for byte in bytes[(index + 1)...] where !isDigit(byte) { return false }
        return true
    }

    /// reg-name bytes: unreserved, "%" (pct-encoded) and sub-delims (RFC 3986 3.2.2).
    private static func isRegNameByte(_ byte: UInt8) -> Bool {
        switch byte {
        case 48...57, 65...90, 97...122: true
        case 45, 46, 95, 126: true                              // - . _ ~
        case 37: true                                           // %
        case 33, 36, 38, 39, 40, 41, 42, 43, 44, 59, 61: true   // ! $ & ' ( ) * + , ; =
        default: false
        }
    }

    private static func isHexDigit(_ byte: UInt8) -> Bool { hexValue(byte) != nil }

    private mutating func parseField(_ range: Range<Int>) -> ParseError? {
        let line = buffer[range]
        if let first = line.first, first == 32 || first == 9 {
            return ParseError(status: 400, reason: "obsolete line folding in header section")
        }
        guard let colon = line.firstIndex(of: 58) else {
            return ParseError(status: 400, reason: "header field without colon")
        }
        let name = line[line.startIndex..<colon]
        guard !name.isEmpty else { return ParseError(status: 400, reason: "empty header field name") }
        if let last = name.last, last == 32 || last == 9 {
            return ParseError(status: 400, reason: "whitespace before colon in header field")
        }
        guard name.allSatisfy(Self.isTokenByte) else {
            return ParseError(status: 400, reason: "invalid header field name")
        }
        var value = line[(colon + 1)...]
        while let c = value.first, c == 32 || c == 9 { value.removeFirst() }
        while let c = value.last, c == 32 || c == 9 { value.removeLast() }
        guard value.allSatisfy({ $0 == 9 || $0 >= 32 && $0 != 127 }) else {
            return ParseError(status: 400, reason: "invalid character in header field value")
        }
        guard (head?.headers.count ?? 0) < limits.maxHeaderCount else {
            return ParseError(status: 431, reason: "too many header fields (limit \(limits.maxHeaderCount))")
        }
        head?.headers.add(String(decoding: name, as: UTF8.self), String(decoding: value, as: UTF8.self))
        return nil
    }

    /// Validates framing once the header section is complete; returns the event to report, or nil to keep parsing the body.
    private mutating func finishHead() -> Event? {
        guard let head else { return fail(400, "missing request line") }
        let headers = head.headers
        let hosts = headers.values("Host")
        if head.version == .http1_1 {
            if hosts.isEmpty { return fail(400, "missing Host header") }
            if hosts.count > 1 { return fail(400, "more than one Host header") }
        }
        if let host = hosts.first, !Self.isValidHost(host) {
            return fail(400, "invalid Host header '\(host.prefix(100))'")
        }
        let transferEncoding = headers.values("Transfer-Encoding")
        let contentLength = headers.values("Content-Length")
        var hasBody = false
        bodyBytes = 0
        streaming = false
        if !transferEncoding.isEmpty || (!contentLength.isEmpty && headers.tokens("Content-Length").contains(where: { $0 != "0" })) {
            switch bodyDecision(head) {
            case let .refuse(refusal): return fail(refusal)
            case .stream: streaming = true
            case .read: break
            }
        }
        if !transferEncoding.isEmpty {
            if !contentLength.isEmpty { return fail(400, "both Transfer-Encoding and Content-Length") }
            if head.version == .http1_0 { return fail(400, "Transfer-Encoding in an HTTP/1.0 request") }
            let codings = headers.tokens("Transfer-Encoding")
            guard let last = codings.last, String(last).equalsIgnoringASCIICase("chunked") else {
                return fail(400, "chunked is not the final transfer coding")
            }
            if codings.count > 1 { return fail(501, "transfer coding not supported") }
            body = []
            phase = .chunkSize
            hasBody = true
        } else if !contentLength.isEmpty {
            var length: Int?
            for element in headers.tokens("Content-Length") {
                guard !element.isEmpty, element.utf8.allSatisfy(Self.isDigit) else { return fail(400, "invalid Content-Length") }
                guard element.utf8.count <= 18, let value = Int(element) else { return bodyTooLarge() }
                if let length, length != value { return fail(400, "conflicting Content-Length values") }
                length = value
            }
            guard let length else { return fail(400, "invalid Content-Length") }
            if length > limits.maxRequestBodyBytes { return bodyTooLarge() }
            body = []
            if !streaming { body.reserveCapacity(length) }
            remaining = length
            phase = .body
            hasBody = length > 0
        } else {
            return complete()
        }
        streamHeadPending = streaming
        if hasBody, head.version == .http1_1,
           headers.tokens("Expect").contains(where: { String($0).equalsIgnoringASCIICase("100-continue") }) {
            return .continueExpected
        }
        return streaming ? next() : nil
    }

    private func parseChunkSize(_ range: Range<Int>) -> Int? {
        var line = buffer[range]
        if let semicolon = line.firstIndex(of: 59) { line = line[line.startIndex..<semicolon] }  // extensions ignored
        while let c = line.last, c == 32 || c == 9 { line.removeLast() }
        guard !line.isEmpty, line.count <= 15 else { return nil }
        var size = 0
        for byte in line {
            guard let digit = Self.hexValue(byte) else { return nil }
            size = size << 4 | digit
        }
        return size
    }

    // MARK: - Outcomes

    private mutating func complete() -> Event {
        let event: Event = streaming ? .bodyEnd : .request(head!, body: body)
        streaming = false
        head = nil
        body = []
        remaining = 0
        leadingBytes = 0
        sectionBytes = 0
        phase = .requestLine
        return event
    }

    private mutating func fail(_ status: Int, _ reason: String) -> Event {
        fail(ParseError(status: status, reason: reason))
    }

    private mutating func fail(_ error: ParseError) -> Event {
        phase = .failed(error)
        head = nil
        body = []
        buffer = []
        start = 0
        scanned = 0
        return .error(error)
    }

    private mutating func requestLineTooLong() -> Event {
        fail(414, "request line too long (limit \(limits.maxRequestLineBytes) bytes)")
    }

    private mutating func headerSectionTooLarge() -> Event {
        fail(431, "header section too large (limit \(limits.maxHeaderBytes) bytes)")
    }

    private mutating func trailerSectionTooLarge() -> Event {
        fail(431, "trailer section too large (limit \(limits.maxHeaderBytes) bytes)")
    }

    private mutating func bodyTooLarge() -> Event {
        fail(413, "request body too large (limit \(limits.maxRequestBodyBytes) bytes)")
    }

    // MARK: - Bytes

    private static func isDigit(_ byte: UInt8) -> Bool { byte >= 48 && byte <= 57 }

    private static func hexValue(_ byte: UInt8) -> Int? {
        switch byte {
        case 48...57: Int(byte - 48)
        case 65...70: Int(byte - 55)
        case 97...102: Int(byte - 87)
        default: nil
        }
    }

    /// tchar (RFC 9110 section 5.6.2).
    private static func isTokenByte(_ byte: UInt8) -> Bool {
        switch byte {
        case 48...57, 65...90, 97...122: true
        case 33, 35, 36, 37, 38, 39, 42, 43, 45, 46, 94, 95, 96, 124, 126: true
        default: false
        }
    }
}
