// Certificates as OpenSSL objects (X509*), the leaf first, read from PEM or DER. Owns one reference to each and
// frees them in deinit; immutable after init (OpenSSL caches decoded extensions inside an X509 under its own lock).

internal import COpenSSL

/// One or more certificates, the leaf first.
final class X509Chain: @unchecked Sendable {
    /// X509* each; never empty.
    let certificates: [OpaquePointer]

    var leaf: OpaquePointer { certificates[0] }

    private init(certificates: [OpaquePointer]) {
        precondition(!certificates.isEmpty)
        self.certificates = certificates
    }

    deinit {
        for certificate in certificates { X509_free(certificate) }
    }

    /// Every certificate in a PEM text (`-----BEGIN CERTIFICATE-----` blocks), in order; what lies between blocks
    /// is ignored, as OpenSSL does. `what` names the input in the error ("the certificate chain").
    static func fromPEM(_ pem: [UInt8], what: String) throws(TLSError) -> X509Chain {
        OpenSSLErrorQueue.clear()
        var certificates: [OpaquePointer] = []
        pem.withUnsafeBytes { bytes in
            guard let bio = BIO_new_mem_buf(bytes.baseAddress, Int32(bytes.count)) else { return }
            defer { BIO_free(bio) }
            while let certificate = PEM_read_bio_X509(bio, nil, nil, nil) {
                certificates.append(certificate)
            }
        }
        guard !certificates.isEmpty else {
            throw OpenSSLErrorQueue.error(.identity, "PEM_read_bio_X509", "\(what) holds no PEM certificate")
        }
        OpenSSLErrorQueue.clear()  // the read that ended the loop left "no start line"
        return X509Chain(certificates: certificates)
    }

    /// Certificates in DER, the leaf first.
    static func fromDER(_ ders: [[UInt8]], what: String) throws(TLSError) -> X509Chain {
        OpenSSLErrorQueue.clear()
        var certificates: [OpaquePointer] = []
        for der in ders {
            let certificate: OpaquePointer? = der.withUnsafeBufferPointer { buffer in
                var cursor = buffer.baseAddress
                return d2i_X509(nil, &cursor, buffer.count)
            }
            guard let certificate else {
                for parsed in certificates { X509_free(parsed) }
                throw OpenSSLErrorQueue.error(.identity, "d2i_X509", "\(what): certificate \(certificates.count + 1) is not DER")
            }
            certificates.append(certificate)
        }
        guard !certificates.isEmpty else {
            throw TLSError(kind: .identity, function: "d2i_X509", detail: "\(what) holds no certificate")
        }
        return X509Chain(certificates: certificates)
    }
}
