// A small HTTP/1.1 client on a blocking POSIX socket, for talking to the daemon in integration tests.
// It reports exactly what arrived: a response whose body is short of its Content-Length, or that lacks the
// last chunk, is `complete == false` (how a client notices a broken transfer). Every read has a receive
// timeout (SO_RCVTIMEO), so a bug fails a test instead of hanging it.

import Foundation

struct TestResponse: @unchecked Sendable {
    var status: Int
    var headers: [(String, String)]
    var body: [UInt8]
    /// The whole body arrived as framed (Content-Length reached, last chunk seen, or close-delimited end).
    var complete: Bool

    func header(_ name: String) -> String? {
        headers.first { $0.0.lowercased() == name.lowercased() }?.1
    }
    var text: String { String(decoding: body, as: UTF8.self) }
}

struct TestClientError: Error, CustomStringConvertible {
    var description: String
}

/// One client connection.
/// Used from one test at a time; `@unchecked Sendable` so its blocking reads can run off the concurrency pool.
final class TestConnection: @unchecked Sendable {
    let fd: Int32
    private var buffer: [UInt8] = []
    private var closed = false
    /// The peer reset the connection (RST) rather than closing it (FIN).
    private(set) var resetByPeer = false
    /// A read waited longer than the receive timeout: nothing read since is known to be complete.
    private(set) var timedOut = false

    init(port: Int, timeout: Duration = .seconds(60), receiveBuffer: Int? = nil) throws {
        do {
            fd = try connectLoopback(port: port, timeoutSeconds: Int(timeout.components.seconds), receiveBuffer: receiveBuffer)
        } catch {
            throw TestClientError(description: "\(error) (port \(port))")
        }
    }

    deinit { if !closedByUs { Foundation.close(fd) } }

    private var closedByUs = false

    /// Closes the connection now (the client goes away).
    func close() {
        guard !closedByUs else { return }
        closedByUs = true
        Foundation.close(fd)
    }

    func send(_ text: String) throws { try send(Array(text.utf8)) }

    func send(_ bytes: [UInt8]) throws {
        var offset = 0
        while offset < bytes.count {
            let n = bytes[offset...].withUnsafeBytes { Foundation.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            guard n > 0 else { throw TestClientError(description: "send: errno \(errno)") }
            offset += n
        }
    }

    /// Sends a GET (or `method`) request for `target`.
    func request(_ target: String, method: String = "GET", headers: [(String, String)] = [], keepAlive: Bool = true) throws {
        var text = "\(method) \(target) HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        for (name, value) in headers { text += "\(name): \(value)\r\n" }
        if !keepAlive { text += "Connection: close\r\n" }
        try send(text + "\r\n")
    }

    /// Reads more bytes into the buffer; false at end of stream (or reset, or timeout).
    @discardableResult
    private func fill() -> Bool {
        if closed { return false }
        var chunk = [UInt8](repeating: 0, count: 64 << 10)
        var n: Int
        repeat {
            n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
        } while n < 0 && errno == EINTR   // an interrupted read is neither an end nor an error
        if n <= 0 {
            if n < 0 && errno == ECONNRESET { resetByPeer = true }
            if n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) { timedOut = true }
            closed = true
            return false
        }
        buffer.append(contentsOf: chunk[0..<n])
        return true
    }

    /// True when the peer has closed the connection (reads return end of stream).
    func peerClosed() -> Bool {
        if !buffer.isEmpty { return false }
        return !fill()
    }

    /// Reads a status line and header section.
    func readHead() throws -> (status: Int, headers: [(String, String)]) {
        while true {
            if let end = findHeadEnd() {
                let text = String(decoding: buffer[0..<end], as: UTF8.self)
                buffer.removeFirst(end + 4)
                var lines = text.components(separatedBy: "\r\n")
                let statusLine = lines.removeFirst()
                let parts = statusLine.split(separator: " ", maxSplits: 2)
                guard parts.count >= 2, let status = Int(parts[1]) else {
                    throw TestClientError(description: "bad status line: \(statusLine)")
                }
                let headers = lines.compactMap { line -> (String, String)? in
                    guard let colon = line.firstIndex(of: ":") else { return nil }
                    return (String(line[..<colon]), line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces))
                }
                return (status, headers)
            }
            guard fill() else { throw TestClientError(description: "connection closed before a complete response head") }
        }
    }

    private func findHeadEnd() -> Int? {
        guard buffer.count >= 4 else { return nil }
        for i in 0...(buffer.count - 4) where buffer[i] == 13 && buffer[i + 1] == 10 && buffer[i + 2] == 13 && buffer[i + 3] == 10 {
            return i
        }
        return nil
    }

    /// Reads at least `count` raw bytes of what follows (for streaming tests); fewer if the stream ends.
    func readRaw(atLeast count: Int) -> [UInt8] {
        while buffer.count < count && fill() {}
        let out = Array(buffer.prefix(max(count, buffer.count)))
        buffer.removeFirst(out.count)
        return out
    }

    /// Reads a whole response (head and framed body).
    func readResponse(forHEAD: Bool = false) throws -> TestResponse {
        let (status, headers) = try readHead()
        return readBody(status: status, headers: headers, forHEAD: forHEAD)
    }

    /// Reads the body that follows a head read with `readHead`, as framed.
    func readBody(status: Int, headers: [(String, String)], forHEAD: Bool = false) -> TestResponse {
        func header(_ name: String) -> String? { headers.first { $0.0.lowercased() == name }?.1 }
        if forHEAD || status == 304 || status == 204 || (100..<200).contains(status) {
            return TestResponse(status: status, headers: headers, body: [], complete: true)
        }
        if let length = header("content-length").flatMap({ Int($0) }) {
            while buffer.count < length && fill() {}
            let body = Array(buffer.prefix(length))
            buffer.removeFirst(body.count)
            return TestResponse(status: status, headers: headers, body: body, complete: body.count == length)
        }
        if header("transfer-encoding")?.lowercased() == "chunked" {
            var body: [UInt8] = []
            while true {
                guard let line = readLine(), let size = Int(line.split(separator: ";")[0], radix: 16) else {
                    return TestResponse(status: status, headers: headers, body: body, complete: false)
                }
                if size == 0 {
                    _ = readLine()  // the CRLF after the last chunk (no trailers)
                    return TestResponse(status: status, headers: headers, body: body, complete: true)
                }
                while buffer.count < size + 2 && fill() {}
                guard buffer.count >= size + 2 else {
                    body.append(contentsOf: buffer)
                    return TestResponse(status: status, headers: headers, body: body, complete: false)
                }
                body.append(contentsOf: buffer[0..<size])
                buffer.removeFirst(size + 2)
            }
        }
        // Close-delimited: the end of the connection ends the body, unless it was a reset.
        while fill() {}
        let body = buffer
        buffer = []
        // A receive timeout is not an end: only a clean close (FIN) ends a close-delimited body.
        return TestResponse(status: status, headers: headers, body: body, complete: !resetByPeer && !timedOut)
    }

    private func readLine() -> String? {
        while true {
            if let i = buffer.firstIndex(of: 10), i > 0, buffer[i - 1] == 13 {
                let line = String(decoding: buffer[0..<(i - 1)], as: UTF8.self)
                buffer.removeFirst(i + 1)
                return line
            }
            guard fill() else { return nil }
        }
    }
}

enum TestClient {
    /// One request on a new connection.
    static func get(port: Int, _ target: String, method: String = "GET", headers: [(String, String)] = []) throws -> TestResponse {
        let connection = try TestConnection(port: port)
        try connection.request(target, method: method, headers: headers)
        return try connection.readResponse(forHEAD: method == "HEAD")
    }
}
