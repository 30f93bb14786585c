// A deliberately small blocking HTTP/1.1 client on a raw POSIX socket, for talking to the server byte by byte.
// Every receive has a timeout (SO_RCVTIMEO), so a server bug fails a test instead of hanging it.

import Glibc  // Linux only, like the daemon

enum RawClientError: Error, CustomStringConvertible {
    case system(String, Int32)
    case timedOut(received: Int)
    case closedEarly(received: String)
    case malformed(String)

    var description: String {
        switch self {
        case let .system(call, code): "\(call) failed: \(String(cString: strerror(code)))"
        case let .timedOut(received): "timed out after receiving \(received) bytes"
        case let .closedEarly(received): "connection closed before a whole response; got \(received.debugDescription)"
        case let .malformed(why): "malformed response: \(why)"
        }
    }
}

/// One parsed response.
struct RawResponse {
    var status: Int
    /// Field names lowercased.
    var headers: [(name: String, value: String)]
    var body: [UInt8]

    func header(_ name: String) -> String? { headers.first { $0.name == name.lowercased() }?.value }
    var bodyText: String { String(decoding: body, as: UTF8.self) }
}

final class RawHTTPClient {
    private let fd: Int32
    /// Bytes received and not yet returned (the start of a pipelined response).
    private var buffer: [UInt8] = []
    private(set) var sawEOF = false

    /// Connects to 127.0.0.1:`port`; receives time out after `timeoutSeconds`.
    init(port: Int, timeoutSeconds: Int = 5) throws {
        do {
            fd = try connectLoopback(port: port, timeoutSeconds: timeoutSeconds)
        } catch {
            throw RawClientError.system(error.function, error.code)
        }
    }

    deinit { Glibc.close(fd) }

    func send(_ text: String) throws { try send(Array(text.utf8)) }

    func send(_ bytes: [UInt8]) throws {
        var sent = 0
        while sent < bytes.count {
            let n = bytes[sent...].withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            guard n > 0 else { throw RawClientError.system("send", errno) }
            sent += n
        }
    }

    /// Closes the socket now (the server sees EOF).
    func shutdownBoth() { Glibc.shutdown(fd, Int32(SHUT_RDWR)) }

    /// Receives once into the buffer; false on EOF.
    @discardableResult
    private func receive() throws -> Bool {
        var chunk = [UInt8](repeating: 0, count: 65_536)
        let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
        if n > 0 {
            buffer.append(contentsOf: chunk[0..<n])
            return true
        }
        if n == 0 { sawEOF = true; return false }
        let code = errno
        if code == EAGAIN || code == EWOULDBLOCK { throw RawClientError.timedOut(received: buffer.count) }
        if code == ECONNRESET { sawEOF = true; return false }
        throw RawClientError.system("recv", code)
    }

    /// Everything until the server closes the connection.
    func readUntilClose() throws -> [UInt8] {
        while try receive() {}
        defer { buffer = [] }
        return buffer
    }

    /// True when the server has closed the connection (EOF or reset) with nothing more to read.
    func isClosedByServer() throws -> Bool {
        if !buffer.isEmpty { return false }
        return try !receive()
    }

    /// Reads one whole response: Content-Length, chunked or close-delimited. `headRequest` means no body follows.
    func readResponse(headRequest: Bool = false) throws -> RawResponse {
        let headEnd = try readUntil([13, 10, 13, 10])
        let headText = String(decoding: buffer[0..<headEnd], as: UTF8.self)
        buffer.removeFirst(headEnd + 4)
        var lines = headText.split(separator: "\r\n", omittingEmptySubsequences: false).map(String.init)
        let statusLine = lines.removeFirst().split(separator: " ")
        guard statusLine.count >= 2, let status = Int(statusLine[1]) else { throw RawClientError.malformed(headText) }
        let headers = lines.map { line -> (name: String, value: String) in
            let colon = line.firstIndex(of: ":")!
            return (String(line[..<colon]).lowercased(), String(line[line.index(after: colon)...]).trimmingCharacters(in: " "))
        }
        var response = RawResponse(status: status, headers: headers, body: [])
        if headRequest || status == 204 || status == 304 || status < 200 { return response }
        if let length = response.header("content-length").flatMap({ Int($0) }) {
            try fill(length)
            response.body = Array(buffer[0..<length])
            buffer.removeFirst(length)
        } else if response.header("transfer-encoding") == "chunked" {
            while true {
                let lineEnd = try readUntil([13, 10])
                let size = Int(String(decoding: buffer[0..<lineEnd], as: UTF8.self), radix: 16) ?? -1
                guard size >= 0 else { throw RawClientError.malformed("chunk size") }
                buffer.removeFirst(lineEnd + 2)
                try fill(size + 2)
                response.body += buffer[0..<size]
                buffer.removeFirst(size + 2)
                if size == 0 { break }
            }
        } else {
            response.body = try readUntilClose()
        }
        return response
    }

    private func fill(_ count: Int) throws {
        while buffer.count < count {
            guard try receive() else { throw RawClientError.closedEarly(received: String(decoding: buffer, as: UTF8.self)) }
        }
    }

    /// The index where `marker` starts in the buffer, receiving until it appears.
    private func readUntil(_ marker: [UInt8]) throws -> Int {
        var from = 0
        while true {
            if buffer.count >= marker.count {
                for index in from...(buffer.count - marker.count) where buffer[index..<index + marker.count].elementsEqual(marker) {
                    return index
                }
                from = buffer.count - marker.count + 1
            }
            guard try receive() else { throw RawClientError.closedEarly(received: String(decoding: buffer, as: UTF8.self)) }
        }
    }
}

extension String {
    fileprivate func trimmingCharacters(in set: Character) -> String {
        var s = Substring(self)
        while s.first == set { s.removeFirst() }
        while s.last == set { s.removeLast() }
        return String(s)
    }
}
