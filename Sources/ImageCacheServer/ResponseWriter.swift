// Turning responses into bytes on the wire, and queueing those bytes for a socket.
//
// `ResponseWriter` (pure value, one per response) decides the framing of a response from the request it
// answers (version, method, keep-alive) and the handler's head and body length, renders the head, frames
// body chunks and the end. It is held by `Connection.StateMachine`; it never touches a socket.
// It is also the only place where a refused request (`HTTPParser.ParseError`) becomes an HTTP response.
//
// `WriteQueue` (value, owned by one connection's loop thread) holds the byte arrays waiting to be sent, by
// reference: body arrays are the handler's (shared with the cache), never copied. It hands up to
// `maxBuffersPerWrite` of them to one vectored send, and a file region (FileBody) to sendfile.
//
// `HTTPDateCache` formats the `Date` field once per second for every connection (shared, guarded by a Mutex).

internal import ImageCacheSystem
internal import ImageCacheHTTP
#if canImport(Glibc)
internal import Glibc
#elseif canImport(Darwin)
internal import Darwin
#endif
internal import Synchronization

/// How a response body is delimited on the wire.
enum ResponseFraming: Sendable, Equatable {
    /// No body is sent: a HEAD request, or a 1xx/204/304 status.
    case bodyless
    /// `Content-Length: n` (the remaining byte count travels in the writer).
    case contentLength(Int)
    /// `Transfer-Encoding: chunked` (HTTP/1.1 clients, length unknown).
    case chunked
    /// The body ends when the connection closes (HTTP/1.0 clients, length unknown).
    case closeDelimited
}

/// The framing of one response. Pure value type.
struct ResponseWriter: Sendable, Equatable {
    /// The request this response answers.
    struct Request: Sendable, Equatable {
        var version: HTTPVersion
        var isHEAD: Bool
        /// Whether the client allows another request on this connection (from `HTTPRequestHead.keepAlive`).
        var keepAlive: Bool
    }

    let request: Request
    private(set) var framing: ResponseFraming = .bodyless
    /// Whether the connection may serve another request once this response is complete.
    private(set) var keepAlive: Bool
    /// Body bytes still to send under Content-Length framing.
    private(set) var bytesRemaining = 0

    init(request: Request) {
        self.request = request
        self.keepAlive = request.keepAlive
    }

    /// Renders the response head and fixes the framing. Hop-by-hop fields the handler left in are removed;
    /// Content-Length, Transfer-Encoding, Connection and Date are set here.
    mutating func head(_ head: HTTPResponseHead, bodyLength: Int?, date: String) -> [UInt8] {
        var head = head
        HopByHop.strip(&head.headers)
        head.headers.remove("Content-Length")
        let statusHasBody = !(head.status < 200 || head.status == 204 || head.status == 304)
        if !statusHasBody {
            framing = .bodyless
        } else if let bodyLength {
            head.headers.add("Content-Length", String(bodyLength))
            framing = request.isHEAD ? .bodyless : .contentLength(bodyLength)
            bytesRemaining = request.isHEAD ? 0 : bodyLength
        } else if request.isHEAD {
            framing = .bodyless
        } else if request.version == .http1_0 {
            framing = .closeDelimited
            keepAlive = false
        } else {
            head.headers.add("Transfer-Encoding", "chunked")
            framing = .chunked
        }
        if !head.headers.contains("Date") { head.headers.add("Date", date) }
        if !keepAlive {
            head.headers.add("Connection", "close")
        } else if request.version == .http1_0 {
            head.headers.add("Connection", "keep-alive")
        }
        return head.serialized(version: .http1_1)
    }

    /// Renders a head whose fixed part was serialised once (`prepared`) plus the per-response `extra` fields, for
    /// a body of `bodyLength` bytes. Same framing and fields as `head(_:bodyLength:date:)` for
    /// `prepared.headers` followed by `extra`, and the same bytes; but the prepared bytes are shared, not copied or
    /// re-rendered: the result is `[prepared.bytes, the rest of the head]`. `extra` must hold no hop-by-hop field and
    /// no Content-Length.
    mutating func head(_ prepared: SerializedResponseHead, extra: HTTPHeaders, bodyLength: Int, date: String) -> [[UInt8]] {
        var tail: [UInt8] = []
        tail.reserveCapacity(160)
        for field in extra.fields {
            tail.append(contentsOf: field.name.utf8)
            tail.append(contentsOf: ": ".utf8)
            tail.append(contentsOf: field.value.utf8)
            tail.append(contentsOf: "\r\n".utf8)
        }
        let status = prepared.status
        if status < 200 || status == 204 || status == 304 {
            framing = .bodyless
        } else {
            tail.append(contentsOf: "Content-Length: ".utf8)
            tail.append(contentsOf: String(bodyLength).utf8)
            tail.append(contentsOf: "\r\n".utf8)
            framing = request.isHEAD ? .bodyless : .contentLength(bodyLength)
            bytesRemaining = request.isHEAD ? 0 : bodyLength
        }
        if !prepared.hasDate && !extra.contains("Date") {
            tail.append(contentsOf: "Date: ".utf8)
            tail.append(contentsOf: date.utf8)
            tail.append(contentsOf: "\r\n".utf8)
        }
        if !keepAlive {
            tail.append(contentsOf: "Connection: close\r\n".utf8)
        } else if request.version == .http1_0 {
            tail.append(contentsOf: "Connection: keep-alive\r\n".utf8)
        }
        tail.append(contentsOf: "\r\n".utf8)
        return [prepared.bytes, tail]
    }

    /// The buffers that carry `chunk` under the chosen framing; empty when nothing is to be sent.
    /// Bytes past a declared Content-Length are dropped (the handler broke its promise; the length wins).
    mutating func body(_ chunk: [UInt8]) -> [[UInt8]] {
        guard !chunk.isEmpty else { return [] }
        switch framing {
        case .bodyless:
            return []
        case .contentLength:
            guard bytesRemaining > 0 else { return [] }
            if chunk.count <= bytesRemaining {
                bytesRemaining -= chunk.count
                return [chunk]
            }
            let kept = Array(chunk[0..<bytesRemaining])
            bytesRemaining = 0
            return [kept]
        case .chunked:
            return [Array((String(chunk.count, radix: 16) + "\r\n").utf8), chunk, Self.crlf]
        case .closeDelimited:
            return [chunk]
        }
    }

    /// Accounts for a body of `length` bytes sent as one piece (a file region, or a part of a stored array) after a
    /// head that declared exactly that length; false when nothing is to be sent (HEAD, bodyless status).
    mutating func fileBody(_ length: Int) -> Bool {
        guard case .contentLength = framing, length > 0, bytesRemaining >= length else { return false }
        bytesRemaining -= length
        return true
    }

    /// The bytes that end the body. A Content-Length body that fell short cannot be followed by another
    /// response, so the connection is then closed (the client sees a truncated body).
    mutating func end() -> [[UInt8]] {
        switch framing {
        case .chunked:
            return [Self.lastChunk]
        case .contentLength:
            if bytesRemaining > 0 { keepAlive = false }
            return []
        case .closeDelimited:
            keepAlive = false
            return []
        case .bodyless:
            return []
        }
    }

    /// The whole response to a refused request: its status, a one-line plain-text reason, `Connection: close`.
    static func errorResponse(_ error: HTTPParser.ParseError, date: String) -> [UInt8] {
        let body = Array((error.reason + "\n").utf8)
        var headers = error.headers
        let own: HTTPHeaders = [
            "Content-Type": "text/plain; charset=utf-8",
            "X-Content-Type-Options": "nosniff",
            "Cache-Control": "no-store",
            "Content-Length": String(body.count),
            "Date": date,
            "Connection": "close",
        ]
        for field in own { headers.set(field.name, field.value) }
        return HTTPResponseHead(status: error.status, headers: headers).serialized(version: .http1_1) + body
    }

    static let continueResponse: [UInt8] = Array("HTTP/1.1 100 Continue\r\n\r\n".utf8)
    /// The answer to an accepted CONNECT: no Content-Length or Transfer-Encoding (RFC 9110 9.3.6): the tunnel's
    /// bytes follow it.
    static let connectEstablished: [UInt8] = Array("HTTP/1.1 200 Connection established\r\n\r\n".utf8)
    static let lastChunk: [UInt8] = Array("0\r\n\r\n".utf8)
    static let crlf: [UInt8] = [13, 10]
}

/// Byte arrays waiting to be written to one socket, in order, each kept by reference.
///
/// Not bounded: the arrays are shared with the cache, so a queued chunk costs a reference, not a copy.
/// A slow client reading a large streamed body still pins every chunk not yet sent; if that matters,
/// backpressure belongs here (report "full" past a byte budget and let the sink's caller wait).
struct WriteQueue {
    /// Most buffers handed to one vectored send (well under IOV_MAX).
    static let maxBuffersPerWrite = 64

    /// One thing to send: bytes (by reference: an array, or a part of one), or a file region (sent with sendfile).
    private enum Segment {
        case bytes(ArraySlice<UInt8>)
        case file(FileBody)

        var count: Int {
            switch self {
            case let .bytes(bytes): bytes.count
            case let .file(file): file.length
            }
        }
    }

    private var segments: [Segment] = []
    /// Index of the first segment not fully written.
    private var first = 0
    /// Bytes of `segments[first]` already written.
    private var offset = 0

    var isEmpty: Bool { first == segments.count }

    /// Bytes queued and not written yet.
    var byteCount: Int {
        guard !isEmpty else { return 0 }
        return segments[first...].reduce(0) { $0 + $1.count } - offset
    }

    mutating func append(_ buffer: [UInt8]) {
        guard !buffer.isEmpty else { return }
        segments.append(.bytes(buffer[...]))
    }

    /// A part of a larger array (a Range response's bytes of a stored body): it shares the array's storage.
    mutating func append(_ part: ArraySlice<UInt8>) {
        guard !part.isEmpty else { return }
        segments.append(.bytes(part))
    }

    mutating func append(_ file: FileBody) {
        guard file.length > 0 else { return }
        segments.append(.file(file))
    }

    mutating func removeAll() {
        segments = []
        first = 0
        offset = 0
    }

    /// Sends from the front of the queue with one call and drops the bytes it reports written: `send` with
    /// iovecs over the leading byte arrays (pointing into them, no copy) and whether a file region follows them
    /// (the caller passes MSG_MORE, so a head goes out in the same segments as the start of its file body, as
    /// nginx's tcp_nopush does), or `sendFile` (descriptor, file offset, count) when a file region is first.
    /// Returns that count; errors from either propagate.
    mutating func write(_ send: (UnsafeBufferPointer<iovec>, _ fileFollows: Bool) throws(SystemError) -> Int,
                        sendFile: (Int32, Int, Int) throws(SystemError) -> Int) throws(SystemError) -> Int {
        guard !isEmpty else { return 0 }
        if case let .file(file) = segments[first] {
            let written = try sendFile(file.descriptor, file.offset + offset, file.length - offset)
            consume(written)
            return written
        }
        var last = first + 1
        while last < segments.count, last - first < Self.maxBuffersPerWrite, case .bytes = segments[last] { last += 1 }
        var iovecs: [iovec] = []
        iovecs.reserveCapacity(last - first)
        let fileFollows: Bool
        if last < segments.count, case .file = segments[last] { fileFollows = true } else { fileFollows = false }
        let written = try withIOVecs(index: first, last: last, skip: offset, into: &iovecs) { iovecs throws(SystemError) in
            try send(iovecs, fileFollows)
        }
        consume(written)
        return written
    }

    /// Nests `withUnsafeBytes` over each byte segment so every pointer stays valid for the one send call.
    private func withIOVecs(index: Int, last: Int, skip: Int, into iovecs: inout [iovec],
                            _ send: (UnsafeBufferPointer<iovec>) throws(SystemError) -> Int) throws(SystemError) -> Int {
        guard index < last, case let .bytes(buffer) = segments[index] else {
            return try iovecs.withUnsafeBufferPointer { pointer throws(SystemError) in try send(pointer) }
        }
        let result: Result<Int, SystemError> = buffer.withUnsafeBytes { bytes in
            let base = UnsafeMutableRawPointer(mutating: bytes.baseAddress!) + skip
            iovecs.append(iovec(iov_base: base, iov_len: bytes.count - skip))
            return Result { () throws(SystemError) in
                try withIOVecs(index: index + 1, last: last, skip: 0, into: &iovecs, send)
            }
        }
        return try result.get()
    }

    private mutating func consume(_ written: Int) {
        var left = written
        while left > 0, first < segments.count {
            let available = segments[first].count - offset
            if left >= available {
                left -= available
                segments[first] = .bytes([])   // written: let its bytes go now, not at the next compaction
                first += 1
                offset = 0
            } else {
                offset += left
                left = 0
            }
        }
        if first == segments.count {
            removeAll()
        } else if first >= 32 {
            segments.removeSubrange(0..<first)
            first = 0
        }
    }
}

/// The `Date` field value (IMF-fixdate), formatted at most once per second for the whole process.
/// Shared by every connection; guarded by `state`.
final class HTTPDateCache: Sendable {
    static let shared = HTTPDateCache()

    // MARK: shared, guarded by state
    private let state = Locked<(second: Int, text: String)>((second: -1, text: ""))

    /// The current time as an IMF-fixdate ("Sun, 06 Nov 1994 08:49:37 GMT").
    func current() -> String {
        let now = time(nil)
        return state.withLock { cached in
            if cached.second != now {
                cached = (second: now, text: Self.format(now))
            }
            return cached.text
        }
    }

    static func format(_ seconds: Int) -> String {
        var t = time_t(seconds)
        var parts = tm()
        gmtime_r(&t, &parts)
        let days = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"]
        let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
        func two(_ n: Int32) -> String { n < 10 ? "0\(n)" : "\(n)" }
        return "\(days[Int(parts.tm_wday)]), \(two(parts.tm_mday)) \(months[Int(parts.tm_mon)]) \(parts.tm_year + 1900) "
            + "\(two(parts.tm_hour)):\(two(parts.tm_min)):\(two(parts.tm_sec)) GMT"
    }
}
