// One OpenSSL SSL_CTX: the settings every stream made from it shares, and for a server its identity and its
// session ticket keys. Built whole by `server(identity:)` or `client(trust:...)`, never changed after: a new
// certificate means a new context (the old one lives on in the streams that hold it; SSL_new takes a reference).
//
// The settings (docs/architecture.md, TLS engine; the plan's D1):
//   versions        TLS 1.2 and 1.3 (a test client may be built for older ones, to show a server refuses them)
//   ciphers         OpenSSL's defaults at Debian's security level 2
//   groups          X25519, P-256, P-384: elliptic-curve key exchange only (finite-field DHE costs many times the
//                   CPU per handshake and no current client needs it)
//   options         no renegotiation, no compression; no 0-RTT (max early data 0)
//   modes           ENABLE_PARTIAL_WRITE (SSL_write returns once some records are in the ring),
//                   ACCEPT_MOVING_WRITE_BUFFER (a retried write may come from another address),
//                   RELEASE_BUFFERS (an idle connection holds no read or write buffer)
//   ALPN            the server takes http/1.1 when offered, else answers nothing (never h2); see ALPN
//   SNI             the server's callback judges the name by the stream's TLSServerNameRule
//   resumption      stateless tickets, TLS 1.3 (2 per handshake) and TLS 1.2, under keys OpenSSL makes at random
//                   for this context; no server-side session cache (it would hold every session under one lock
//                   shared by the loops, and tickets make it unnecessary)
//
// Callbacks: OpenSSL calls them on the thread running the stream's handshake. They are plain C functions; what
// they need of the stream comes from the SSL's ex_data slot 0 (`TLSStream` puts itself there, unretained).

internal import COpenSSL
internal import COpenSSLShim

/// What a client context trusts.
public enum TLSClientTrust: Sendable {
    /// The certificates in this PEM text are the trust anchors; the server's chain must lead to one, and its leaf
    /// must name the host the stream connects to.
    case anchorsPEM([UInt8])
    /// No verification at all: for tests and the load generator against a server whose certificate is not the point.
    case noVerification
}

/// An SSL_CTX: the shared, immutable settings of a set of TLS streams.
///
/// Sendable: OpenSSL allows an SSL_CTX to be shared by threads once it is configured (SSL_new only reads it, and
/// what changes inside it afterwards, its reference count and ticket key use, it guards itself). Nothing here
/// changes it after the static builders return.
public final class TLSContext: @unchecked Sendable {
    public enum Role: Sendable {
        case server
        case client
    }

    /// SSL_CTX*; one reference, freed in deinit.
    let context: OpaquePointer
    public let role: Role
    /// The server's identity (nil for a client).
    public let identity: TLSIdentity?
    /// Whether a client context verifies the server (a trust anchor was given).
    let verifiesPeer: Bool

    /// TLS 1.3 tickets sent after each full handshake (and one after each resumption).
    public static let ticketsPerHandshake = 2
    /// The key exchange groups, in the server's order of preference.
    static let groups = "X25519:P-256:P-384"

    private init(context: OpaquePointer, role: Role, identity: TLSIdentity?, verifiesPeer: Bool) {
        self.context = context
        self.role = role
        self.identity = identity
        self.verifiesPeer = verifiesPeer
    }

    deinit {
        SSL_CTX_free(context)
    }

    // MARK: building

    /// A server context presenting `identity`.
    public static func server(identity: TLSIdentity) throws(TLSError) -> TLSContext {
        let context = try makeContext(TLS_server_method(), versions: .tls1_2 ... .tls1_3)
        do {
            try configureServer(context, identity: identity)
        } catch {
            SSL_CTX_free(context)
            throw error
        }
        return TLSContext(context: context, role: .server, identity: identity, verifiesPeer: false)
    }

    /// A client context: for tests and the load generator. `versions` below TLS 1.2 also drop the security level
    /// to 0, without which OpenSSL would not offer them at all (a test uses that to show a server refuses them).
    public static func client(trust: TLSClientTrust,
                              versions: ClosedRange<TLSProtocolVersion> = .tls1_2 ... .tls1_3) throws(TLSError) -> TLSContext {
        let context = try makeContext(TLS_client_method(), versions: versions)
        do {
            try configureClient(context, trust: trust, versions: versions)
        } catch {
            SSL_CTX_free(context)
            throw error
        }
        if case .anchorsPEM = trust {
            return TLSContext(context: context, role: .client, identity: nil, verifiesPeer: true)
        }
        return TLSContext(context: context, role: .client, identity: nil, verifiesPeer: false)
    }

    // MARK: settings (each call converted on its own line)

    private static func makeContext(_ method: OpaquePointer?, versions: ClosedRange<TLSProtocolVersion>) throws(TLSError) -> OpaquePointer {
        OpenSSLErrorQueue.clear()
        guard let method, let context = SSL_CTX_new(method) else {
            throw OpenSSLErrorQueue.error(.configuration, "SSL_CTX_new")
        }
        do {
            try check(cossl_SSL_CTX_set_min_proto_version(context, versions.lowerBound.rawValue) == 1, "SSL_CTX_set_min_proto_version")
            try check(cossl_SSL_CTX_set_max_proto_version(context, versions.upperBound.rawValue) == 1, "SSL_CTX_set_max_proto_version")
            _ = SSL_CTX_set_options(context, cossl_SSL_OP_NO_RENEGOTIATION | cossl_SSL_OP_NO_COMPRESSION)
            _ = cossl_SSL_CTX_set_mode(context, Int(SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER
                                                    | SSL_MODE_RELEASE_BUFFERS))
            try check(SSL_CTX_set_max_early_data(context, 0) == 1, "SSL_CTX_set_max_early_data")
            try check(cossl_SSL_CTX_set1_groups_list(context, groups) == 1, "SSL_CTX_set1_groups_list")
        } catch {
            SSL_CTX_free(context)
            throw error
        }
        return context
    }

    private static func configureServer(_ context: OpaquePointer, identity: TLSIdentity) throws(TLSError) {
        try check(SSL_CTX_use_certificate(context, identity.chain.leaf) == 1, "SSL_CTX_use_certificate", kind: .identity)
        for intermediate in identity.chain.certificates.dropFirst() {
            try check(cossl_SSL_CTX_add1_chain_cert(context, intermediate) == 1, "SSL_CTX_add1_chain_cert", kind: .identity)
        }
        try check(SSL_CTX_use_PrivateKey(context, identity.privateKey) == 1, "SSL_CTX_use_PrivateKey", kind: .identity)
        try check(SSL_CTX_check_private_key(context) == 1, "SSL_CTX_check_private_key", kind: .identity)
        try check(SSL_CTX_set_num_tickets(context, ticketsPerHandshake) == 1, "SSL_CTX_set_num_tickets")
        _ = cossl_SSL_CTX_set_session_cache_mode(context, Int(SSL_SESS_CACHE_OFF))
        SSL_CTX_set_alpn_select_cb(context, selectALPN, nil)
        _ = cossl_SSL_CTX_set_tlsext_servername_callback(context, judgeServerName)
    }

    private static func configureClient(_ context: OpaquePointer, trust: TLSClientTrust,
                                        versions: ClosedRange<TLSProtocolVersion>) throws(TLSError) {
        if versions.lowerBound < .tls1_2 {
            SSL_CTX_set_security_level(context, 0)
        }
        switch trust {
        case .noVerification:
            SSL_CTX_set_verify(context, SSL_VERIFY_NONE, nil)
        case .anchorsPEM(let pem):
            let anchors = try X509Chain.fromPEM(pem, what: "the trust anchors")
            guard let store = SSL_CTX_get_cert_store(context) else {
                throw OpenSSLErrorQueue.error(.configuration, "SSL_CTX_get_cert_store")
            }
            for anchor in anchors.certificates {
                try check(X509_STORE_add_cert(store, anchor) == 1, "X509_STORE_add_cert", kind: .identity)
            }
            SSL_CTX_set_verify(context, SSL_VERIFY_PEER, nil)
        }
    }

    private static func check(_ succeeded: Bool, _ function: String, kind: TLSError.Kind = .configuration) throws(TLSError) {
        guard succeeded else { throw OpenSSLErrorQueue.error(kind, function) }
    }
}

// MARK: callbacks

/// ALPN: `http/1.1` when the client offers it, else no answer (the handshake goes on without ALPN).
private let selectALPN: @convention(c) (OpaquePointer?, UnsafeMutablePointer<UnsafePointer<UInt8>?>?, UnsafeMutablePointer<UInt8>?,
                                        UnsafePointer<UInt8>?, UInt32, UnsafeMutableRawPointer?) -> Int32 = {
    _, selected, selectedLength, offered, offeredLength, _ in
    guard let selected, let selectedLength, let offered else { return SSL_TLSEXT_ERR_NOACK }
    let list = UnsafeRawBufferPointer(start: offered, count: Int(offeredLength))
    guard let range = ALPN.selection(in: list) else { return SSL_TLSEXT_ERR_NOACK }
    selected.pointee = offered + range.lowerBound  // points into the client's list, which outlives the callback
    selectedLength.pointee = UInt8(range.count)
    return SSL_TLSEXT_ERR_OK
}

/// SNI: the stream's rule decides; a refused name ends the handshake with the unrecognized_name alert.
private let judgeServerName: @convention(c) (OpaquePointer, UnsafeMutablePointer<Int32>, UnsafeMutableRawPointer?) -> Int32 = {
    ssl, alert, _ in
    guard let stream = TLSStream.owning(ssl) else { return SSL_TLSEXT_ERR_OK }
    let sent = SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name).map { String(cString: $0) }
    guard stream.admitServerName(sent) else {
        alert.pointee = SSL_AD_UNRECOGNIZED_NAME
        return SSL_TLSEXT_ERR_ALERT_FATAL
    }
    return SSL_TLSEXT_ERR_OK
}
