// A small blocking HTTP/1.1 client for the command line's subcommands (purge now; stats and prefetch later),
// which talk to a running daemon's /_imagecached/ endpoints on its loopback address.

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
    public static func send(_ method: String, _ target: String, to address: ListenAddress, body: [UInt8] = [],
                            timeoutSeconds: Int = 30) throws(AdminClientError) -> AdminResponse {
        var hints = addrinfo()
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var list: UnsafeMutablePointer<addrinfo>?
        guard getaddrinfo(address.host, String(address.port), &hints, &list) == 0, let info = list else {
            throw .cannotConnect(address.description, errno: EINVAL)
        }
        defer { freeaddrinfo(list) }
        let fd = socket(info.pointee.ai_family, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw .cannotConnect(address.description, errno: errno) }
        defer { close(fd) }
        var timeout = timeval(tv_sec: timeoutSeconds, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        guard connect(fd, info.pointee.ai_addr, info.pointee.ai_addrlen) == 0 else {
            throw .cannotConnect(address.description, errno: errno)
        }
        var request = "\(method) \(target) HTTP/1.1\r\nHost: \(address)\r\nConnection: close\r\n"
        request += body.isEmpty ? "\r\n" : "Content-Length: \(body.count)\r\n\r\n"
        var bytes = Array(request.utf8) + body
        while !bytes.isEmpty {
            let n = bytes.withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            guard n > 0 else { throw .broken("send failed: \(String(cString: strerror(errno)))") }
            bytes.removeFirst(n)
        }
        var received: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 16 << 10)
        while true {
            let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n <= 0 { break }
            received.append(contentsOf: chunk[0..<n])
        }
        let text = String(decoding: received, as: UTF8.self)
        guard let headEnd = text.range(of: "\r\n\r\n") else { throw .broken("no complete response") }
        let statusLine = text[..<headEnd.lowerBound].prefix { $0 != "\r" }
        let parts = statusLine.split(separator: " ")
        guard parts.count >= 2, let status = Int(parts[1]) else { throw .broken("bad status line \(statusLine)") }
        return AdminResponse(status: status, body: String(text[headEnd.upperBound...]))
    }
}
