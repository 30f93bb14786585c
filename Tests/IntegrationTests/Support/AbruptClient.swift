// A client that dies: a raw socket through a CONNECT, a TLS client it drives one step at a time (a ClientHello cut
// short, a handshake with no request, a request with no end), and the ways a socket ends when its process dies or
// gives up (a reset, a FIN, a half-close).

import Foundation
import Glibc
import ImageCacheTLS

/// How a client's socket ends.
enum AbruptEnd: String, CaseIterable, Sendable {
    /// SO_LINGER 0, then close: the daemon gets an RST.
    case reset
    /// close: a FIN, as when a killed process had read everything sent to it.
    case close
    /// shutdown(SHUT_WR): a FIN with the socket still open for reading (the caller closes it later).
    case halfClose

    func apply(to fd: Int32) {
        switch self {
        case .reset:
            var linger = Glibc.linger(l_onoff: 1, l_linger: 0)
            setsockopt(fd, SOL_SOCKET, SO_LINGER, &linger, socklen_t(MemoryLayout<Glibc.linger>.size))
            Glibc.close(fd)
        case .close:
            Glibc.close(fd)
        case .halfClose:
            shutdown(fd, Int32(SHUT_WR))
        }
    }
}

/// A blocking socket to the daemon that sent a CONNECT head and read the answer's head byte by byte, so nothing after
/// it is consumed. The caller owns the descriptor (closes it once, through `AbruptEnd` or `close`).
func rawTunnel(daemonPort: Int, target: String) throws -> (head: String, fd: Int32) {
    let fd = try connectLoopback(port: daemonPort, timeoutSeconds: 10)
    let request = Array("CONNECT \(target) HTTP/1.1\r\nHost: \(target)\r\n\r\n".utf8)
    _ = request.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
    var head: [UInt8] = []
    var byte: UInt8 = 0
    while !head.reversed().starts(with: [10, 13, 10, 13]), recv(fd, &byte, 1, 0) == 1 {
        head.append(byte)
    }
    return (String(decoding: head, as: UTF8.self), fd)
}

/// A TLS client over a connected blocking socket it does not own, driven one step at a time. One thread at a time.
final class SteppedTLSClient: @unchecked Sendable {
    private let fd: Int32
    private let stream: TLSStream

    init(fd: Int32, anchorPEM: [UInt8], serverName: String) throws {
        self.fd = fd
        stream = try TLSStream(client: try TLSContext.client(trust: .anchorsPEM(anchorPEM)), serverName: serverName,
                               alpn: ["http/1.1"])
    }

    /// The first `limit` bytes of the ClientHello (all of it when nil) go out.
    func sendHello(prefix limit: Int? = nil) {
        _ = stream.handshake()
        let hello = takeCiphertext()
        sendAll(limit.map { Array(hello.prefix($0)) } ?? hello)
    }

    /// Waits for the server's first flight (some of it): the server has taken the ClientHello.
    func receiveFirstFlight() throws {
        guard receive() else { throw RawClientError.closedEarly(received: "") }
    }

    /// Completes the handshake (after `sendHello`, or from the start).
    func handshake() throws {
        try stream.completeHandshake(flush: flush, receive: {
            guard receive() else { throw RawClientError.closedEarly(received: "") }
        })
    }

    /// Sends `text` as plaintext.
    func send(_ text: String) throws {
        try stream.writeAll(text, flush: flush)
    }

    /// Sends the pending ciphertext (what the peer does not take is dropped: it may be gone on purpose).
    private func flush() {
        sendAll(takeCiphertext())
    }

    private func takeCiphertext() -> [UInt8] {
        var bytes: [UInt8] = []
        while stream.hasPendingCiphertext {
            let pending = stream.pendingCiphertext()
            bytes += UnsafeRawBufferPointer(pending)
            stream.ciphertextConsumed(pending.count)
        }
        return bytes
    }

    private func sendAll(_ bytes: [UInt8]) {
        var sent = 0
        while sent < bytes.count {
            let count = bytes[sent...].withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            guard count > 0 else { return }
            sent += count
        }
    }

    private func receive() -> Bool {
        let space = stream.networkWriteSpace()
        let count = recv(fd, space.baseAddress, space.count, 0)
        if count > 0 { stream.networkDidWrite(count) }
        if count == 0 { stream.networkDidEnd() }
        return count > 0
    }
}
