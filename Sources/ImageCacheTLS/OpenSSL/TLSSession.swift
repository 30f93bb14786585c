// A TLS session a client kept to resume with (a TLS 1.3 ticket, or a TLS 1.2 ticket or session id), as OpenSSL's
// SSL_SESSION. Owns one reference, freed in deinit. Not Sendable: OpenSSL may update a session while a stream
// uses it, so it stays with the thread that owns its streams.

internal import COpenSSL

/// A resumable client session (`TLSStream.session()`, then `TLSStream(client:...session:)`).
public final class TLSSession {
    /// SSL_SESSION*.
    let session: OpaquePointer

    init(taking session: OpaquePointer) {
        self.session = session
    }

    deinit {
        SSL_SESSION_free(session)
    }

    /// The protocol version the session was made with.
    public var protocolVersion: TLSProtocolVersion? {
        TLSProtocolVersion(rawValue: SSL_SESSION_get_protocol_version(session))
    }
}
