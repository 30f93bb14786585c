// A small blocking HTTP/1.1 client for the command line's subcommands (purge, stats, prefetch), which talk to a
// running daemon's /_imagecached/ endpoints on its loopback address. `stream` hands over the body line by line as
// it arrives (prefetch progress), decoding chunked transfer coding.

public import ImageCacheServer
internal import Foundation
#if canImport(Glibc)
internal import Glibc
#endif

public struct AdminResponse: Sendable {
    public var status: Int
    public var body: String
}

public enum AdminClientError: Error, CustomStringConvertible {
    case cannotConnect(String, errno: Int32)
    case broken(String)

    public var description: String {
        switch self {
        case let .cannotConnect(address, code): "cannot reach the daemon at \(address): \(String(cString: strerror(code))) (is it running? see --listen)"
        case let .broken(why): "bad answer from the daemon: \(why)"
        }
    }
}

public enum AdminClient {
    /// Where to reach a daemon listening on `listen`: a wildcard address is reached on loopback.
    public static func address(for listen: ListenAddress) -> ListenAddress {
        switch listen.host {
        case "0.0.0.0", "": ListenAddress(host: "127.0.0.1", port: listen.port)
        case "::": ListenAddress(host: "::1", port: listen.port)
        default: listen
        }
    }

    /// Sends one request and reads the whole response (the daemon closes after it: Connection: close).
    /// `token`: the daemon's admin token, sent as `Authorization: Bearer`. A POST body is sent as `text/uri-list` (the
    /// prefetch list; a type a web page cannot send without a CORS preflight, which the daemon requires).
    public static func send(_ method: String, _ target: String, to address: ListenAddress, body: [UInt8] = [],
                            token: String? = nil, timeoutSeconds: Int = 30) throws(AdminClientError) -> AdminResponse {
        var text: [UInt8] = []
        let status = try stream(method, target, to: address, body: body, token: token, timeoutSeconds: timeoutSeconds) { text.append(contentsOf: $0) }
        return AdminResponse(status: status, body: String(decoding: text, as: UTF8.self))
    }

    /// Sends one request and hands the response body to `onBody` as it arrives (de-chunked). Returns the status.
    public static func stream(_ method: String, _ target: String, to address: ListenAddress, body: [UInt8] = [],
                              token: String? = nil, timeoutSeconds: Int = 30, onBody: ([UInt8]) -> Void) throws(AdminClientError) -> Int {
        let fd = try connect(to: address, timeoutSeconds: timeoutSeconds)
        defer { close(fd) }
        var request = "\(method) \(target) HTTP/1.1\r\nHost: \(address)\r\nConnection: close\r\n"
        if let token { request += "Authorization: Bearer \(token)\r\n" }
        if method == "POST" { request += "Content-Type: text/uri-list\r\n" }
        request += body.isEmpty && method != "POST" ? "\r\n" : "Content-Length: \(body.count)\r\n\r\n"
        var bytes = Array(request.utf8) + body
        while !bytes.isEmpty {
            let n = bytes.withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            guard n > 0 else { throw .broken("send failed: \(String(cString: strerror(errno)))") }
            bytes.removeFirst(n)
        }
        var buffer: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 16 << 10)
        func receive() -> Bool {
            let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n <= 0 { return false }
            buffer.append(contentsOf: chunk[0..<n])
            return true
        }
        func find(_ marker: [UInt8], from start: Int = 0) -> Int? {
            guard buffer.count >= marker.count + start else { return nil }
            for i in start...(buffer.count - marker.count) where buffer[i] == marker[0] && Array(buffer[i..<i + marker.count]) == marker {
                return i
            }
            return nil
        }
        var headEnd = find(Array("\r\n\r\n".utf8))
        while headEnd == nil {
            guard receive() else { throw .broken("no complete response") }
            headEnd = find(Array("\r\n\r\n".utf8))
        }
        let head = String(decoding: buffer[..<headEnd!], as: UTF8.self)
        buffer.removeFirst(headEnd! + 4)
        let lines = head.split(separator: "\r\n")
        let parts = lines.first?.split(separator: " ") ?? []
        guard parts.count >= 2, let status = Int(parts[1]) else { throw .broken("bad status line \(lines.first ?? "")") }
        let chunked = lines.dropFirst().contains { $0.lowercased().hasPrefix("transfer-encoding:") && $0.lowercased().contains("chunked") }
        guard chunked else {
            if !buffer.isEmpty { onBody(buffer) }
            while true {
                buffer = []
                guard receive() else { break }
                onBody(buffer)
            }
            return status
        }
        // Chunked: size line, data, CRLF; a zero size ends the body.
        while true {
            var sizeEnd = find(Array("\r\n".utf8))
            while sizeEnd == nil {
                guard receive() else { throw .broken("the body ended inside a chunk") }
                sizeEnd = find(Array("\r\n".utf8))
            }
            let sizeText = String(decoding: buffer[..<sizeEnd!], as: UTF8.self).split(separator: ";").first ?? ""
            guard let size = Int(sizeText.trimmingCharacters(in: .whitespaces), radix: 16) else { throw .broken("bad chunk size \(sizeText)") }
            if size == 0 { return status }
            while buffer.count < sizeEnd! + 2 + size + 2 {
                guard receive() else { throw .broken("the body ended inside a chunk") }
            }
            onBody(Array(buffer[(sizeEnd! + 2)..<(sizeEnd! + 2 + size)]))
            buffer.removeFirst(sizeEnd! + 2 + size + 2)
        }
    }

    private static func connect(to address: ListenAddress, timeoutSeconds: Int) throws(AdminClientError) -> Int32 {
        var hints = addrinfo()
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var list: UnsafeMutablePointer<addrinfo>?
        guard getaddrinfo(address.host, String(address.port), &hints, &list) == 0, let info = list else {
            throw .cannotConnect(address.description, errno: EINVAL)
        }
        defer { freeaddrinfo(list) }
        let fd = socket(info.pointee.ai_family, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw .cannotConnect(address.description, errno: errno) }
        var timeout = timeval(tv_sec: timeoutSeconds, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        guard Glibc.connect(fd, info.pointee.ai_addr, info.pointee.ai_addrlen) == 0 else {
            let code = errno
            close(fd)
            throw .cannotConnect(address.description, errno: code)
        }
        return fd
    }
}
