// One TLS connection's engine: an OpenSSL SSL object and the BIO pair it talks through. It does no I/O of its own:
// the owner (an event loop's connection, or a test) moves ciphertext between the pair's network half and its
// socket, and plaintext in and out through `read` and `write`.
//
// Data model (the plan's D1):
//
//     owner's socket read  --networkWriteSpace/networkDidWrite-->  [incoming ring, 17 KiB: one record]  --> SSL
//     SSL  --> [outgoing ring, 64 KiB]  --pendingCiphertext/ciphertextConsumed-->  owner's socket send
//
// `BIO_new_bio_pair(&internal, 64 KiB, &network, 17 KiB)`: the SSL reads and writes the internal half; each ring is
// the buffer of the half that writes into it. The owner reads the socket straight into the incoming ring
// (BIO_nwrite0 gives the room, BIO_nwrite commits what the read put there) and sends straight from the outgoing one
// (BIO_nread0 gives the bytes, BIO_nread drops what the socket took), so the cipher's own copy is the only one.
// Bytes read before the stream existed (an early ClientHello after a CONNECT head) go in with `feed`.
//
// The calls and what they answer:
//   handshake()  done | wantRead (feed more ciphertext) | wantWrite (drain the outgoing ring) | failed
//   read(into:)  bytes(n) | wantRead | wantWrite | closed (the peer's close_notify) | failed
//   write(_:)    wrote(n) (n may be less than given: partial writes) | wantRead | wantWrite | failed
//                after wantWrite, drain and call again with the same bytes (from the same offset): OpenSSL has
//                taken the first record already and expects them
//   shutdown()   sent (our close_notify is in the ring) | complete (both sides' are) | wantWrite | failed
// After any call, whatever is in the outgoing ring must be sent, a failure's alert included. After `failed` the
// stream is done: the owner drains the ring and closes.
//
// Ownership: confined to the thread that owns the connection (not Sendable). OpenSSL calls the context's callbacks
// (SNI) on that thread, inside `handshake`; they find this object through the SSL's ex_data slot 0, unretained
// (the SSL never outlives it). Everything is freed in deinit.

internal import COpenSSL
internal import COpenSSLShim

/// One TLS connection over a BIO pair whose network side the owner drives. Confined to one thread.
public final class TLSStream {
    public enum HandshakeResult: Sendable, Equatable {
        case done
        case wantRead
        case wantWrite
        case failed(TLSError)
    }

    public enum ReadResult: Sendable, Equatable {
        case bytes(Int)
        case wantRead
        case wantWrite
        /// The peer sent close_notify: no more plaintext will come.
        case closed
        case failed(TLSError)
    }

    public enum WriteResult: Sendable, Equatable {
        case wrote(Int)
        case wantRead
        case wantWrite
        case failed(TLSError)
    }

    public enum ShutdownResult: Sendable, Equatable {
        /// Our close_notify is in the outgoing ring; the peer's has not come.
        case sent
        /// Both sides' close_notify have been sent and seen (or there was no session to close).
        case complete
        case wantWrite
        case failed(TLSError)
    }

    /// The outgoing ring: ciphertext waiting for the socket (at most this much sits in the stream).
    public static let outgoingRingBytes = 64 * 1024
    /// The incoming ring: ciphertext read and not yet decrypted (one record of 16 KiB and its overhead).
    public static let incomingRingBytes = 17 * 1024

    public let role: TLSContext.Role

    // MARK: confined to the owner's thread
    /// SSL*; owns the internal half of the pair.
    private let ssl: OpaquePointer
    /// BIO*: the pair's network half.
    private let network: OpaquePointer
    private let serverNameRule: TLSServerNameRule
    /// Why the SNI callback refused the client's name, for the handshake's error.
    private var serverNameRefusal: String?

    // MARK: building

    private init(context: TLSContext, serverNameRule: TLSServerNameRule) throws(TLSError) {
        OpenSSLErrorQueue.clear()
        guard let ssl = SSL_new(context.context) else {
            throw OpenSSLErrorQueue.error(.configuration, "SSL_new")
        }
        var internalHalf: OpaquePointer?
        var networkHalf: OpaquePointer?
        guard BIO_new_bio_pair(&internalHalf, Self.outgoingRingBytes, &networkHalf, Self.incomingRingBytes) == 1,
              let internalHalf, let networkHalf else {
            SSL_free(ssl)
            throw OpenSSLErrorQueue.error(.configuration, "BIO_new_bio_pair")
        }
        SSL_set_bio(ssl, internalHalf, internalHalf)  // the SSL owns the internal half from here
        self.ssl = ssl
        self.network = networkHalf
        self.role = context.role
        self.serverNameRule = serverNameRule
        SSL_set_ex_data(ssl, 0, Unmanaged.passUnretained(self).toOpaque())
    }

    /// A server stream on a server context that has an identity. `serverName` is the rule for the client's SNI.
    public convenience init(server context: TLSContext, serverName: TLSServerNameRule = .any) throws(TLSError) {
        precondition(context.role == .server, "a server stream needs a server context")
        precondition(!context.needsStreamIdentity, "a server context without an identity needs TLSStream(server:identity:serverName:)")
        try self.init(context: context, serverNameRule: serverName)
        SSL_set_accept_state(ssl)
    }

    /// A server stream presenting its own `identity` on a context made with `TLSContext.server()` (interception:
    /// the context of a CA generation, the leaf of one host). Sessions are bound to the host: the stream's session
    /// id context is a digest of the name `serverName` must match (of the leaf's fingerprint under `.any`), so a
    /// ticket issued for one host is never resumed on a stream for another (a full handshake instead), while a ticket
    /// issued under an earlier leaf of the same host still resumes.
    public convenience init(server context: TLSContext, identity: TLSIdentity, serverName: TLSServerNameRule) throws(TLSError) {
        precondition(context.role == .server, "a server stream needs a server context")
        try self.init(context: context, serverNameRule: serverName)
        try check(SSL_use_certificate(ssl, identity.chain.leaf) == 1, "SSL_use_certificate", kind: .identity)
        for intermediate in identity.chain.certificates.dropFirst() {
            try check(cossl_SSL_add1_chain_cert(ssl, intermediate) == 1, "SSL_add1_chain_cert", kind: .identity)
        }
        try check(SSL_use_PrivateKey(ssl, identity.privateKey) == 1, "SSL_use_PrivateKey", kind: .identity)
        let sessionContext: String
        switch serverName {
        case .mustMatch(let host): sessionContext = "host " + host.lowercased()
        case .any: sessionContext = "leaf " + identity.fingerprintSHA256
        }
        let digest = try Self.sha256(Array(sessionContext.utf8))
        try check(SSL_set_session_id_context(ssl, digest, UInt32(digest.count)) == 1, "SSL_set_session_id_context")
        SSL_set_accept_state(ssl)
    }

    /// A client stream on a client context: `serverName` is sent as SNI (unless it is an IP literal) and, when the
    /// context verifies, must be named by the server's leaf; `alpn` is offered in this order; `session` is resumed
    /// if the server still takes it.
    public convenience init(client context: TLSContext, serverName: String?, alpn: [String] = [],
                            session: TLSSession? = nil) throws(TLSError) {
        precondition(context.role == .client, "a client stream needs a client context")
        try self.init(context: context, serverNameRule: .any)
        SSL_set_connect_state(ssl)
        if let serverName {
            let isIPLiteral = Self.isIPLiteral(serverName)
            if !isIPLiteral {
                try check(cossl_SSL_set_tlsext_host_name(ssl, serverName) == 1, "SSL_set_tlsext_host_name")
            }
            if context.verifiesPeer {
                if isIPLiteral {
                    try check(X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), serverName) == 1, "X509_VERIFY_PARAM_set1_ip_asc")
                } else {
                    try check(SSL_set1_host(ssl, serverName) == 1, "SSL_set1_host")
                }
            }
        }
        if !alpn.isEmpty {
            let wire = ALPN.wireFormat(alpn)
            try check(SSL_set_alpn_protos(ssl, wire, UInt32(wire.count)) == 0, "SSL_set_alpn_protos")  // 0 is success
        }
        if let session {
            try check(SSL_set_session(ssl, session.session) == 1, "SSL_set_session")
        }
    }

    deinit {
        SSL_free(ssl)  // frees the internal half
        BIO_free(network)
    }

    /// The stream an SSL belongs to, for the context's callbacks.
    static func owning(_ ssl: OpaquePointer) -> TLSStream? {
        guard let pointer = SSL_get_ex_data(ssl, 0) else { return nil }
        return Unmanaged<TLSStream>.fromOpaque(pointer).takeUnretainedValue()
    }

    /// The SNI callback's question: may a client that sent `name` go on? A refusal is kept for the error.
    func admitServerName(_ name: String?) -> Bool {
        guard case .mustMatch(let host) = serverNameRule, !serverNameRule.admits(name) else { return true }
        serverNameRefusal = "the client asked for \(name ?? "no name"); this connection is for \(host)"
        return false
    }

    // MARK: the network side (ciphertext)

    /// Room in the incoming ring for ciphertext from the socket: one contiguous piece (after the ring wraps there
    /// may be more: ask again after `networkDidWrite`). Empty when the ring is full: stop reading the socket until
    /// `handshake` or `read` has taken some.
    public func networkWriteSpace() -> UnsafeMutableRawBufferPointer {
        var pointer: UnsafeMutablePointer<CChar>?
        let count = BIO_nwrite0(network, &pointer)
        guard count > 0, let pointer else {
            OpenSSLErrorQueue.clear()
            return UnsafeMutableRawBufferPointer(start: nil, count: 0)
        }
        return UnsafeMutableRawBufferPointer(start: pointer, count: Int(count))
    }

    /// Commits `count` bytes the owner put at the start of the last `networkWriteSpace()`.
    public func networkDidWrite(_ count: Int) {
        guard count > 0 else { return }
        var pointer: UnsafeMutablePointer<CChar>?
        let committed = BIO_nwrite(network, &pointer, Int32(count))
        precondition(committed == count, "networkDidWrite(\(count)) past the room networkWriteSpace() gave")
    }

    /// Copies ciphertext read elsewhere (an early ClientHello after a CONNECT head) into the incoming ring; returns
    /// how many bytes it took (fewer than given when the ring fills: give the rest after a `handshake`).
    public func feed(_ bytes: UnsafeRawBufferPointer) -> Int {
        var taken = 0
        while taken < bytes.count {
            let space = networkWriteSpace()
            guard !space.isEmpty else { break }
            let count = min(space.count, bytes.count - taken)
            space.baseAddress!.copyMemory(from: bytes.baseAddress! + taken, byteCount: count)
            networkDidWrite(count)
            taken += count
        }
        return taken
    }

    /// The peer's end of the stream (the socket read 0): after what the incoming ring holds, the SSL sees the end.
    /// Without a close_notify before it, the next `read` fails as `.unexpectedEOF`.
    public func networkDidEnd() {
        _ = cossl_BIO_shutdown_wr(network)
    }

    /// Ciphertext waiting for the socket: one contiguous piece of the outgoing ring (after `ciphertextConsumed`
    /// there may be more). Empty when nothing waits.
    public func pendingCiphertext() -> UnsafeRawBufferPointer {
        var pointer: UnsafeMutablePointer<CChar>?
        let count = BIO_nread0(network, &pointer)
        guard count > 0, let pointer else {
            OpenSSLErrorQueue.clear()
            return UnsafeRawBufferPointer(start: nil, count: 0)
        }
        return UnsafeRawBufferPointer(start: pointer, count: Int(count))
    }

    /// Drops `count` bytes the socket took from the start of the last `pendingCiphertext()`.
    public func ciphertextConsumed(_ count: Int) {
        guard count > 0 else { return }
        var pointer: UnsafeMutablePointer<CChar>?
        let consumed = BIO_nread(network, &pointer, Int32(count))
        precondition(consumed == count, "ciphertextConsumed(\(count)) past what pendingCiphertext() gave")
    }

    /// Whether ciphertext waits in the outgoing ring.
    public var hasPendingCiphertext: Bool { BIO_ctrl_pending(network) > 0 }

    /// Whether ciphertext the owner wrote in has not been taken by the SSL yet.
    /// (Asked of the SSL's read half, not as the room left in the network half: once the network side has ended, that
    /// half reports no room at all, which would read as "unread bytes" forever.)
    public var hasUnreadCiphertext: Bool {
        guard let readHalf = SSL_get_rbio(ssl) else { return false }
        return BIO_ctrl_pending(readHalf) > 0
    }

    // MARK: the TLS side

    /// Runs the handshake as far as the bytes in the incoming ring allow.
    public func handshake() -> HandshakeResult {
        OpenSSLErrorQueue.clear()
        let result = SSL_do_handshake(ssl)
        if result == 1 { return .done }
        switch outcome(of: result, "SSL_do_handshake") {
        case .wantRead: return .wantRead
        case .wantWrite: return .wantWrite
        case .closed: return .failed(TLSError(kind: .unexpectedEOF, function: "SSL_do_handshake", detail: "the peer closed during the handshake"))
        case .failed(let error): return .failed(error)
        }
    }

    /// Decrypts plaintext into `buffer` (not empty). Also runs the handshake if it is not done.
    public func read(into buffer: UnsafeMutableRawBufferPointer) -> ReadResult {
        precondition(!buffer.isEmpty, "read into an empty buffer")
        OpenSSLErrorQueue.clear()
        var count = 0
        if SSL_read_ex(ssl, buffer.baseAddress, buffer.count, &count) == 1 { return .bytes(count) }
        switch outcome(of: 0, "SSL_read_ex") {
        case .wantRead: return .wantRead
        case .wantWrite: return .wantWrite
        case .closed: return .closed
        case .failed(let error): return .failed(error)
        }
    }

    /// Encrypts plaintext into the outgoing ring: records until the ring is full (partial writes).
    public func write(_ bytes: UnsafeRawBufferPointer) -> WriteResult {
        guard !bytes.isEmpty else { return .wrote(0) }
        OpenSSLErrorQueue.clear()
        var count = 0
        if SSL_write_ex(ssl, bytes.baseAddress, bytes.count, &count) == 1 { return .wrote(count) }
        switch outcome(of: 0, "SSL_write_ex") {
        case .wantRead: return .wantRead
        case .wantWrite: return .wantWrite
        case .closed: return .failed(TLSError(kind: .unexpectedEOF, function: "SSL_write_ex", detail: "the peer has closed"))
        case .failed(let error): return .failed(error)
        }
    }

    /// Sends close_notify (once) and reports whether the peer's has come. Before the handshake is done there is no
    /// session to close: `complete`.
    public func shutdown() -> ShutdownResult {
        guard SSL_is_init_finished(ssl) == 1 else { return .complete }
        OpenSSLErrorQueue.clear()
        let result = SSL_shutdown(ssl)
        if result == 1 { return .complete }
        if result == 0 { return .sent }
        switch outcome(of: result, "SSL_shutdown") {
        case .wantRead: return .sent
        case .wantWrite: return .wantWrite
        case .closed: return .complete
        case .failed(let error): return .failed(error)
        }
    }

    // MARK: what was negotiated

    /// Whether the handshake has finished.
    public var isHandshakeDone: Bool { SSL_is_init_finished(ssl) == 1 }

    /// Whether decrypted or undecrypted record bytes sit inside OpenSSL (SSL_has_pending): a `read` may return
    /// plaintext without any new byte from the socket.
    public var hasPendingPlaintext: Bool { SSL_has_pending(ssl) == 1 }

    /// The protocol ALPN agreed on (nil: none).
    public var negotiatedALPN: String? {
        var pointer: UnsafePointer<UInt8>?
        var length: UInt32 = 0
        SSL_get0_alpn_selected(ssl, &pointer, &length)
        guard let pointer, length > 0 else { return nil }
        return String(decoding: UnsafeBufferPointer(start: pointer, count: Int(length)), as: UTF8.self)
    }

    /// The server name the client sent (SNI), on either side; nil if none was sent.
    public var serverName: String? {
        SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name).map { String(cString: $0) }
    }

    /// Whether the handshake resumed a session (a ticket) instead of a full key exchange.
    public var isResumed: Bool { SSL_session_reused(ssl) == 1 }

    /// The protocol version in use, once the handshake is done.
    public var protocolVersion: TLSProtocolVersion? {
        guard isHandshakeDone else { return nil }
        return TLSProtocolVersion(rawValue: SSL_version(ssl))
    }

    /// A client's session to resume later, once it can be resumed. Under TLS 1.3 the server's tickets come after
    /// the handshake: a `read` must have processed them first. The stream must end with `shutdown()` (our
    /// close_notify sent): OpenSSL marks the session of a connection freed without it as not resumable.
    public func session() -> TLSSession? {
        guard let session = SSL_get1_session(ssl) else { return nil }
        guard SSL_SESSION_is_resumable(session) == 1 else {
            SSL_SESSION_free(session)
            return nil
        }
        return TLSSession(taking: session)
    }

    // MARK: errors

    private enum Outcome {
        case wantRead
        case wantWrite
        case closed
        case failed(TLSError)
    }

    /// What a failed SSL call's result means (SSL_get_error), the error queue drained into the failure.
    private func outcome(of result: Int32, _ function: String) -> Outcome {
        switch SSL_get_error(ssl, result) {
        case SSL_ERROR_WANT_READ:
            return .wantRead
        case SSL_ERROR_WANT_WRITE:
            return .wantWrite
        case SSL_ERROR_ZERO_RETURN:
            return .closed
        case SSL_ERROR_SYSCALL:
            // A BIO pair has no errno: the network half was shut with no close_notify before it.
            return .failed(OpenSSLErrorQueue.error(.unexpectedEOF, function, "the network ended without close_notify"))
        default:
            return .failed(failure(function))
        }
    }

    private func failure(_ function: String) -> TLSError {
        if let serverNameRefusal {
            OpenSSLErrorQueue.clear()  // "callback failed": the refusal says more
            return TLSError(kind: .serverNameMismatch, function: function, detail: serverNameRefusal)
        }
        let drained = OpenSSLErrorQueue.drain()
        var detail = drained?.text ?? "no reason given"
        let verify = SSL_get_verify_result(ssl)
        if role == .client, verify != X509_V_OK, let text = X509_verify_cert_error_string(verify) {
            detail = "the server's certificate: \(String(cString: text)): " + detail
        }
        let kind: TLSError.Kind = drained.map { $0.firstLibrary == ERR_LIB_SSL && $0.firstReason == SSL_R_UNEXPECTED_EOF_WHILE_READING } == true
            ? .unexpectedEOF : .protocolFailure
        return TLSError(kind: kind, function: function, detail: detail)
    }

    private func check(_ succeeded: Bool, _ function: String, kind: TLSError.Kind = .configuration) throws(TLSError) {
        guard succeeded else { throw OpenSSLErrorQueue.error(kind, function) }
    }

    /// SHA-256 of `bytes`: 32 bytes, SSL_MAX_SID_CTX_LENGTH exactly.
    private static func sha256(_ bytes: [UInt8]) throws(TLSError) -> [UInt8] {
        var digest = [UInt8](repeating: 0, count: Int(EVP_MAX_MD_SIZE))
        var length: UInt32 = 0
        guard EVP_Digest(bytes, bytes.count, &digest, &length, EVP_sha256(), nil) == 1 else {
            throw OpenSSLErrorQueue.error(.configuration, "EVP_Digest")
        }
        return Array(digest.prefix(Int(length)))
    }

    /// Whether a host is an IPv4 or IPv6 literal (sent as no SNI, verified as an IP SAN).
    static func isIPLiteral(_ host: String) -> Bool {
        if host.contains(":") { return true }
        let parts = host.split(separator: ".", omittingEmptySubsequences: false)
        return parts.count == 4 && parts.allSatisfy { part in !part.isEmpty && part.count <= 3 && part.allSatisfy(\.isASCII) && part.allSatisfy(\.isNumber) }
    }
}
