// A client and a server TLSStream joined in memory: ciphertext moves between their BIO pairs' network halves as a
// socket would carry it, with no socket. The tests drive both sides on one thread, step by step.

import ImageCacheTestSupport
@testable import ImageCacheTLS

/// A client stream and a server stream whose rings are joined by `pump()`.
final class JoinedStreams {
    let client: TLSStream
    let server: TLSStream

    init(client: TLSStream, server: TLSStream) {
        self.client = client
        self.server = server
    }

    /// A server presenting `identity` (SNI by `rule`) and a client for `serverName`.
    convenience init(server serverContext: TLSContext, rule: TLSServerNameRule = .any, client clientContext: TLSContext,
                     serverName: String? = "images.test", alpn: [String] = [], session: TLSSession? = nil) throws {
        self.init(client: try TLSStream(client: clientContext, serverName: serverName, alpn: alpn, session: session),
                  server: try TLSStream(server: serverContext, serverName: rule))
    }

    /// Moves what each side's outgoing ring holds into the other's incoming ring, as far as there is room; returns
    /// the bytes moved.
    @discardableResult
    func pump() -> Int {
        Self.move(from: client, to: server) + Self.move(from: server, to: client)
    }

    /// Moves ciphertext one way, as far as the receiver's incoming ring has room.
    @discardableResult
    static func move(from sender: TLSStream, to receiver: TLSStream) -> Int {
        var moved = 0
        while true {
            let pending = sender.pendingCiphertext()
            let space = receiver.networkWriteSpace()
            let count = min(pending.count, space.count)
            guard count > 0 else { return moved }
            space.baseAddress!.copyMemory(from: pending.baseAddress!, byteCount: count)
            receiver.networkDidWrite(count)
            sender.ciphertextConsumed(count)
            moved += count
        }
    }

    /// Runs both handshakes until each is done or failed, or neither can go on.
    func handshake() -> (client: TLSStream.HandshakeResult, server: TLSStream.HandshakeResult) {
        var clientResult = TLSStream.HandshakeResult.wantRead
        var serverResult = TLSStream.HandshakeResult.wantRead
        for _ in 0..<50 {
            if !clientResult.isFinal { clientResult = client.handshake() }
            var moved = pump()
            if !serverResult.isFinal { serverResult = server.handshake() }
            moved += pump()
            if clientResult.isFinal && serverResult.isFinal { break }
            if moved == 0 && !client.hasUnreadCiphertext && !server.hasUnreadCiphertext { break }
        }
        return (clientResult, serverResult)
    }

    /// Sends `bytes` from `writer` to `reader` through the rings: the writer writes until OpenSSL answers
    /// WANT_WRITE (its 64 KiB ring is full), the ring is drained into the reader and read, and the write is retried
    /// from where it stopped. Returns what the reader got and how many times the writer had to wait.
    static func transfer(_ bytes: [UInt8], from writer: TLSStream, to reader: TLSStream) -> (received: [UInt8], waits: Int) {
        var received: [UInt8] = []
        received.reserveCapacity(bytes.count)
        var buffer = [UInt8](repeating: 0, count: 16 * 1024)
        var offset = 0
        var waits = 0
        var rounds = 0
        while received.count < bytes.count && rounds < 10_000 {
            rounds += 1
            writing: while offset < bytes.count {
                let result = bytes[offset...].withUnsafeBytes { writer.write($0) }
                switch result {
                case .wrote(let count): offset += count
                case .wantWrite: waits += 1; break writing
                default: return (received, waits)
                }
            }
            repeat {
                move(from: writer, to: reader)
                reading: while true {
                    let result = buffer.withUnsafeMutableBytes { reader.read(into: $0) }
                    guard case .bytes(let count) = result else { break reading }
                    received += buffer[..<count]
                }
                move(from: reader, to: writer)
            } while writer.hasPendingCiphertext
        }
        return (received, waits)
    }

    /// Reads once on `stream` (into a scratch buffer).
    static func read(_ stream: TLSStream) -> TLSStream.ReadResult {
        var buffer = [UInt8](repeating: 0, count: 1024)
        return buffer.withUnsafeMutableBytes { stream.read(into: $0) }
    }
}

extension TLSStream.HandshakeResult {
    var isFinal: Bool {
        switch self {
        case .done, .failed: true
        case .wantRead, .wantWrite: false
        }
    }

    var error: TLSError? {
        if case .failed(let error) = self { return error }
        return nil
    }
}

/// The contexts most tests use, built once from the standard test certificates.
enum Contexts {
    static let pki = Result { try TestPKI.standard() }

    /// A server presenting images.test (issued by the constrained test CA).
    static func server() throws -> TLSContext {
        let pki = try pki.get()
        return try TLSContext.server(identity: TLSIdentity(certificateChainPEM: pki.imagesLeaf.certificatePEM,
                                                           privateKeyPEM: pki.imagesLeaf.keyPEM))
    }

    /// A client trusting the constrained test CA.
    static func verifyingClient(versions: ClosedRange<TLSProtocolVersion> = .tls1_2 ... .tls1_3) throws -> TLSContext {
        try TLSContext.client(trust: .anchorsPEM(pki.get().constrainedCA.certificatePEM), versions: versions)
    }
}
