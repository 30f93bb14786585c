// The far end of a blind tunnel: a raw TCP listener on 127.0.0.1 whose connections the test reads and writes byte by
// byte (an echo or a scripted peer), with timeouts on every call so a daemon bug fails a test instead of hanging it.

import Foundation
import Glibc

final class TunnelPeer: @unchecked Sendable {
    let port: Int
    private let listenFD: Int32

    init() throws {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw POSIXError(.init(rawValue: errno) ?? .EIO) }
        var one: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        var timeout = timeval(tv_sec: 10, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))   // accept's timeout
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0, listen(fd, 64) == 0 else {
            let code = errno
            close(fd)
            throw POSIXError(.init(rawValue: code) ?? .EIO)
        }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        listenFD = fd
        port = Int(UInt16(bigEndian: address.sin_port))
    }

    deinit { close(listenFD) }

    /// The next connection (waits up to 10 s).
    func accept(sendTimeoutSeconds: Int = 10) throws -> PeerSocket {
        let fd = Glibc.accept(listenFD, nil, nil)
        guard fd >= 0 else { throw POSIXError(.init(rawValue: errno) ?? .EIO) }
        _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
        return PeerSocket(fd: fd, sendTimeoutSeconds: sendTimeoutSeconds)
    }
}

/// One blocking socket with timeouts: the test's side of a tunnel (the peer's, or a raw client's after its CONNECT).
final class PeerSocket: @unchecked Sendable {
    let fd: Int32
    private var buffer: [UInt8] = []

    init(fd: Int32, sendTimeoutSeconds: Int = 10, receiveTimeoutSeconds: Int = 10) {
        self.fd = fd
        var receive = timeval(tv_sec: receiveTimeoutSeconds, tv_usec: 0)
        var send = timeval(tv_sec: sendTimeoutSeconds, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &receive, socklen_t(MemoryLayout<timeval>.size))
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &send, socklen_t(MemoryLayout<timeval>.size))
    }

    deinit { close(fd) }

    /// Sends all of `bytes`; returns how many went before the send timed out or failed.
    @discardableResult
    func send(_ bytes: [UInt8]) -> Int {
        var sent = 0
        while sent < bytes.count {
            let n = bytes[sent...].withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            guard n > 0 else { return sent }
            sent += n
        }
        return sent
    }

    func send(_ text: String) { send(Array(text.utf8)) }

    /// Sends `bytes` until one send call takes only part of what it was given (it waited the whole send timeout for
    /// room: the receiver has stopped taking bytes); returns how many went.
    func sendUntilStalled(_ bytes: [UInt8]) -> Int {
        var sent = 0
        while sent < bytes.count {
            let asked = bytes.count - sent
            let n = bytes[sent...].withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            guard n > 0 else { return sent }
            sent += n
            if n < asked { return sent }
        }
        return sent
    }

    /// Exactly `count` bytes (fewer only if the other side closed or the receive timed out).
    func read(_ count: Int) -> [UInt8] {
        while buffer.count < count, receive() {}
        let taken = Array(buffer.prefix(count))
        buffer.removeFirst(taken.count)
        return taken
    }

    /// Everything until the other side closes (or the receive times out: then `closed` is false).
    func readUntilClose() -> (bytes: [UInt8], closed: Bool) {
        while receive() {}
        defer { buffer = [] }
        return (buffer, sawEnd)
    }

    /// Reads a response head ("...\r\n\r\n") and returns it as text; the bytes after it stay buffered.
    func readHead() -> String {
        while true {
            if let end = buffer.firstRange(of: [13, 10, 13, 10]) {
                let head = String(decoding: buffer[..<end.upperBound], as: UTF8.self)
                buffer.removeFirst(end.upperBound)
                return head
            }
            guard receive() else { return String(decoding: buffer, as: UTF8.self) }
        }
    }

    func shutdownWrite() { shutdown(fd, Int32(SHUT_WR)) }

    private(set) var sawEnd = false

    private func receive() -> Bool {
        var chunk = [UInt8](repeating: 0, count: 65_536)
        let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
        if n > 0 {
            buffer.append(contentsOf: chunk[0..<n])
            return true
        }
        if n == 0 || errno == ECONNRESET { sawEnd = true }
        return false
    }
}

/// A raw client socket to the daemon that sends a CONNECT head (and `early` bytes right behind it, unasked) and reads
/// the daemon's answer head.
func openTunnel(daemonPort: Int, target: String, early: [UInt8] = [], receiveBuffer: Int? = nil) throws -> (head: String, socket: PeerSocket) {
    let fd = try connectLoopback(port: daemonPort, timeoutSeconds: 10, receiveBuffer: receiveBuffer)
    let socket = PeerSocket(fd: fd)
    socket.send(Array("CONNECT \(target) HTTP/1.1\r\nHost: \(target)\r\n\r\n".utf8) + early)
    return (socket.readHead(), socket)
}
