// A blocking HTTPS client on ImageCacheTLS's TLSStream, for tests that need what curl cannot show: one connection
// kept across a reload, a session resumed by this process, the server's certificate as it arrived.

import Foundation
import Glibc
import ImageCacheTLS

/// Used by one thread at a time (the test hands it between blocking sections, never to two at once).
final class TLSTestClient: @unchecked Sendable {
    private let socket: PeerSocket
    let stream: TLSStream

    /// Connects to 127.0.0.1:`port` and completes the handshake, trusting `anchorPEM`, naming `serverName` (SNI and
    /// the name the leaf must carry), resuming `session` if given.
    init(port: Int, anchorPEM: [UInt8], serverName: String = "localhost", session: TLSSession? = nil) throws {
        let fd = try connectLoopback(port: port, timeoutSeconds: 10)
        socket = PeerSocket(fd: fd)
        let context = try TLSContext.client(trust: .anchorsPEM(anchorPEM))
        stream = try TLSStream(client: context, serverName: serverName, alpn: ["http/1.1"], session: session)
        try stream.completeHandshake(flush: flush, receive: receive)
    }

    /// Sends `text` through the stream.
    func send(_ text: String) throws {
        try stream.writeAll(text, flush: flush)
    }

    /// Reads one response with a Content-Length body: its head as text and its body.
    func readResponse() throws -> (head: String, body: [UInt8]) {
        var buffer: [UInt8] = []
        while true {
            if let end = buffer.firstRange(of: [13, 10, 13, 10]) {
                let head = String(decoding: buffer[..<end.lowerBound], as: UTF8.self)
                let length = head.split(separator: "\r\n").first { $0.lowercased().hasPrefix("content-length:") }
                    .flatMap { Int($0.split(separator: ":")[1].trimmingCharacters(in: .whitespaces)) } ?? 0
                while buffer.count < end.upperBound + length { try readMore(into: &buffer) }
                return (head, Array(buffer[end.upperBound..<end.upperBound + length]))
            }
            try readMore(into: &buffer)
        }
    }

    /// The session to resume later (after a response was read, so TLS 1.3 tickets have arrived), then a clean close.
    func close() throws -> TLSSession? {
        let session = stream.session()
        _ = stream.shutdown()
        try? flush()
        return session
    }

    private func readMore(into buffer: inout [UInt8]) throws {
        var chunk = [UInt8](repeating: 0, count: 16_384)
        while true {
            let result = chunk.withUnsafeMutableBytes { stream.read(into: $0) }
            switch result {
            case let .bytes(count):
                buffer += chunk[0..<count]
                return
            case .wantRead:
                try flush()
                try receive()
            case .wantWrite:
                try flush()
            case .closed:
                throw RawClientError.closedEarly(received: String(decoding: buffer, as: UTF8.self))
            case let .failed(error):
                throw error
            }
        }
    }

    private func flush() throws {
        while stream.hasPendingCiphertext {
            let pending = stream.pendingCiphertext()
            let sent = Glibc.send(socket.fd, pending.baseAddress, pending.count, Int32(MSG_NOSIGNAL))
            guard sent > 0 else { throw RawClientError.system("send", errno) }
            stream.ciphertextConsumed(sent)
        }
    }

    private func receive() throws {
        let space = stream.networkWriteSpace()
        let count = recv(socket.fd, space.baseAddress, space.count, 0)
        if count > 0 {
            stream.networkDidWrite(count)
        } else if count == 0 {
            stream.networkDidEnd()
        } else {
            throw RawClientError.timedOut(received: 0)
        }
    }
}

/// The blocking loops both test clients drive a TLSStream with (TLSTestClient, AbruptClient's SteppedTLSClient): `flush`
/// sends the stream's pending ciphertext, `receive` feeds it what the socket has (it throws when the peer is gone).
extension TLSStream {
    /// Runs the handshake to its end.
    func completeHandshake(flush: () throws -> Void, receive: () throws -> Void) throws {
        while true {
            switch handshake() {
            case .done:
                try flush()
                return
            case .wantWrite:
                try flush()
            case .wantRead:
                try flush()
                try receive()
            case let .failed(error):
                throw error
            }
        }
    }

    /// Writes `text` as plaintext, flushing the ciphertext as it goes.
    func writeAll(_ text: String, flush: () throws -> Void) throws {
        var bytes = Array(text.utf8)[...]
        while !bytes.isEmpty {
            switch bytes.withUnsafeBytes({ write($0) }) {
            case let .wrote(count): bytes = bytes.dropFirst(count)
            case .wantWrite, .wantRead: break
            case let .failed(error): throw error
            }
            try flush()
        }
    }
}
