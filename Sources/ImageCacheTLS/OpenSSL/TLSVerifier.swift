// Verifies a certificate chain against one trust anchor with OpenSSL's own path validation (X509_verify_cert), as
// OpenSSL clients (curl, Python, Node) do: the signatures, the validity periods, basic constraints, key usage, the
// purpose (a TLS server), name constraints, and optionally the host name. For tests and for `imagecached ca`: it
// shows that what the daemon's CA signs is what clients will accept, and that what it must not sign (a name outside
// its constraints) they refuse.
//
// Stateless: each call builds its store and context and frees them before it returns.

public import Foundation
internal import COpenSSL

/// OpenSSL's verdict on a chain.
public enum TLSVerification: Sendable, Equatable {
    case trusted
    /// OpenSSL's verify error: its code (X509_V_ERR_*) and text ("permitted subtree violation").
    case rejected(code: Int32, reason: String)
}

/// Chain verification against one anchor.
public enum TLSVerifier {
    /// The result for a PEM chain (the leaf first, then intermediates) under the anchors in `anchorPEM`.
    /// `hostName`, when given, must be named by the leaf (a DNS name, or an IP literal for an IP SAN). `time`
    /// replaces the clock (nil: now).
    public static func verify(chainPEM: [UInt8], anchorPEM: [UInt8], hostName: String? = nil,
                              at time: Date? = nil) throws(TLSError) -> TLSVerification {
        let chain = try X509Chain.fromPEM(chainPEM, what: "the chain")
        let anchors = try X509Chain.fromPEM(anchorPEM, what: "the anchor")
        return try verify(chain, anchors: anchors, hostName: hostName, at: time)
    }

    /// The same for DER certificates, the leaf first.
    public static func verify(chainDER: [[UInt8]], anchorPEM: [UInt8], hostName: String? = nil,
                              at time: Date? = nil) throws(TLSError) -> TLSVerification {
        let chain = try X509Chain.fromDER(chainDER, what: "the chain")
        let anchors = try X509Chain.fromPEM(anchorPEM, what: "the anchor")
        return try verify(chain, anchors: anchors, hostName: hostName, at: time)
    }

    private static func verify(_ chain: X509Chain, anchors: X509Chain, hostName: String?,
                               at time: Date?) throws(TLSError) -> TLSVerification {
        OpenSSLErrorQueue.clear()
        guard let store = X509_STORE_new() else { throw OpenSSLErrorQueue.error(.configuration, "X509_STORE_new") }
        defer { X509_STORE_free(store) }
        for anchor in anchors.certificates {
            guard X509_STORE_add_cert(store, anchor) == 1 else {
                throw OpenSSLErrorQueue.error(.identity, "X509_STORE_add_cert")
            }
        }
        guard let untrusted = OPENSSL_sk_new_null() else { throw OpenSSLErrorQueue.error(.configuration, "OPENSSL_sk_new_null") }
        defer { OPENSSL_sk_free(untrusted) }  // the stack only; the certificates stay the chain's
        for intermediate in chain.certificates.dropFirst() {
            guard OPENSSL_sk_push(untrusted, UnsafeRawPointer(intermediate)) > 0 else {
                throw OpenSSLErrorQueue.error(.configuration, "OPENSSL_sk_push")
            }
        }
        guard let context = X509_STORE_CTX_new() else { throw OpenSSLErrorQueue.error(.configuration, "X509_STORE_CTX_new") }
        defer { X509_STORE_CTX_free(context) }
        guard X509_STORE_CTX_init(context, store, chain.leaf, untrusted) == 1 else {
            throw OpenSSLErrorQueue.error(.configuration, "X509_STORE_CTX_init")
        }
        guard X509_STORE_CTX_set_purpose(context, X509_PURPOSE_SSL_SERVER) == 1 else {
            throw OpenSSLErrorQueue.error(.configuration, "X509_STORE_CTX_set_purpose")
        }
        let parameters = X509_STORE_CTX_get0_param(context)
        if let hostName {
            let set = TLSStream.isIPLiteral(hostName)
                ? X509_VERIFY_PARAM_set1_ip_asc(parameters, hostName)
                : X509_VERIFY_PARAM_set1_host(parameters, hostName, hostName.utf8.count)
            guard set == 1 else { throw OpenSSLErrorQueue.error(.configuration, "X509_VERIFY_PARAM_set1_host") }
        }
        if let time {
            X509_VERIFY_PARAM_set_time(parameters, time_t(time.timeIntervalSince1970))
        }
        let verified = X509_verify_cert(context)
        OpenSSLErrorQueue.clear()  // a rejection's reason is the context's error, not the queue's
        guard verified != 1 else { return .trusted }
        let code = X509_STORE_CTX_get_error(context)
        let reason = X509_verify_cert_error_string(Int(code)).map { String(cString: $0) } ?? "error \(code)"
        return .rejected(code: code, reason: reason)
    }
}
