// The TLS engine's one error type. A value: which kind of failure, the OpenSSL call that reported it, and OpenSSL's
// own text for it (its error queue, drained and cleared by the call that failed; see OpenSSL/OpenSSLErrorQueue).

/// A TLS failure: a handshake or record the peer got wrong, a certificate or key that cannot be used, a setting
/// OpenSSL refused.
public struct TLSError: Error, Sendable, Equatable, CustomStringConvertible {
    public enum Kind: String, Sendable {
        /// The peer's bytes broke the protocol, or it sent a fatal alert (a version or cipher it cannot share, a
        /// certificate it does not trust, bytes that are not TLS).
        case protocolFailure = "protocol"
        /// The client asked for a server name the stream's `TLSServerNameRule` refuses.
        case serverNameMismatch = "sni_mismatch"
        /// The network ended without a close_notify (a truncated stream, or a peer that hung up mid-handshake).
        case unexpectedEOF = "closed"
        /// A certificate or key that cannot be read, or a key that does not match its certificate.
        case identity
        /// A setting OpenSSL refused while a context or stream was built.
        case configuration
    }

    public var kind: Kind
    /// The OpenSSL call that failed ("SSL_do_handshake", "X509_check_private_key").
    public var function: String
    /// What went wrong: our sentence where we know more, and OpenSSL's error queue text.
    public var detail: String

    public init(kind: Kind, function: String, detail: String) {
        self.kind = kind
        self.function = function
        self.detail = detail
    }

    public var description: String { "\(function) failed: \(detail)" }
}
