// What a TLS server presents: a certificate chain (the leaf first, then any intermediates) and the leaf's private
// key, as OpenSSL objects made once (X509*, EVP_PKEY*), from PEM files or texts, or from DER (a certificate and a
// PKCS#8 key, as minting produces them). A built identity's key matches its leaf: that is checked here, so a
// mismatch is reported with the files' names rather than as a failed handshake later.
//
// Immutable after init and shared by every context built from it: OpenSSL's X509 and EVP_PKEY are reference-
// counted with atomic counts, and a context holds its own references (SSL_CTX_use_certificate takes one).

public import Foundation
internal import COpenSSL

/// A certificate chain and its private key.
public final class TLSIdentity: @unchecked Sendable {
    let chain: X509Chain
    /// EVP_PKEY*; one reference, freed in deinit.
    let privateKey: OpaquePointer

    /// The leaf's SHA-256 fingerprint (of its DER), as `openssl x509 -fingerprint -sha256` prints it without colons:
    /// 64 lower-case hex digits.
    public let fingerprintSHA256: String
    /// The leaf's notAfter: it is not valid after this.
    public let notAfter: Date
    /// The leaf's subject, as one line in OpenSSL's form ("/CN=images.test").
    public let subject: String

    /// The chain as DER, the leaf first (what a client is sent; for checks and the status page).
    public var certificateChainDER: [[UInt8]] { chain.derEncoded }

    // MARK: building

    /// From PEM texts: the chain (the leaf first) and the key (PKCS#8, or a traditional EC or RSA key; not encrypted).
    public convenience init(certificateChainPEM: some Collection<UInt8>, privateKeyPEM: some Collection<UInt8>) throws(TLSError) {
        let chain = try X509Chain.fromPEM(Array(certificateChainPEM), what: "the certificate chain")
        let key = try Self.privateKeyFromPEM(Array(privateKeyPEM), what: "the private key")
        try self.init(chain: chain, privateKey: key)
    }

    /// From PEM files, named in every error.
    public convenience init(certificateChainFile: String, privateKeyFile: String) throws(TLSError) {
        let chainBytes = try Self.read(certificateChainFile)
        let keyBytes = try Self.read(privateKeyFile)
        let chain = try X509Chain.fromPEM(chainBytes, what: certificateChainFile)
        let key = try Self.privateKeyFromPEM(keyBytes, what: privateKeyFile)
        try self.init(chain: chain, privateKey: key)
    }

    /// From DER: the leaf, any intermediates, and the key as PKCS#8 (what step 4's minting produces).
    public convenience init(certificateDER: [UInt8], intermediatesDER: [[UInt8]] = [], privateKeyDER: [UInt8]) throws(TLSError) {
        let chain = try X509Chain.fromDER([certificateDER] + intermediatesDER, what: "the certificate")
        OpenSSLErrorQueue.clear()
        let key: OpaquePointer? = privateKeyDER.withUnsafeBufferPointer { buffer in
            var cursor = buffer.baseAddress
            return d2i_AutoPrivateKey(nil, &cursor, buffer.count)
        }
        guard let key else {
            throw OpenSSLErrorQueue.error(.identity, "d2i_AutoPrivateKey", "the private key is not DER (PKCS#8)")
        }
        try self.init(chain: chain, privateKey: key)
    }

    /// Takes `privateKey`'s reference, and frees it if the key does not match the leaf.
    private init(chain: X509Chain, privateKey: OpaquePointer) throws(TLSError) {
        OpenSSLErrorQueue.clear()
        guard X509_check_private_key(chain.leaf, privateKey) == 1 else {
            EVP_PKEY_free(privateKey)
            throw OpenSSLErrorQueue.error(.identity, "X509_check_private_key", "the private key does not match the certificate")
        }
        self.chain = chain
        self.privateKey = privateKey
        self.fingerprintSHA256 = Self.fingerprint(chain.leaf)
        self.notAfter = Self.notAfter(chain.leaf)
        self.subject = Self.subject(chain.leaf)
    }

    deinit {
        EVP_PKEY_free(privateKey)
    }

    // MARK: reading

    private static func read(_ path: String) throws(TLSError) -> [UInt8] {
        do {
            return try [UInt8](Data(contentsOf: URL(fileURLWithPath: path)))
        } catch {
            throw TLSError(kind: .identity, function: "open", detail: "cannot read \(path): \(error.localizedDescription)")
        }
    }

    private static func privateKeyFromPEM(_ pem: [UInt8], what: String) throws(TLSError) -> OpaquePointer {
        OpenSSLErrorQueue.clear()
        let key: OpaquePointer? = pem.withUnsafeBytes { bytes in
            guard let bio = BIO_new_mem_buf(bytes.baseAddress, Int32(bytes.count)) else { return nil }
            defer { BIO_free(bio) }
            // No passphrase: without a callback OpenSSL would ask for one on the terminal (a reload would hang there).
            return PEM_read_bio_PrivateKey(bio, nil, { _, _, _, _ in -1 }, nil)
        }
        guard let key else {
            throw OpenSSLErrorQueue.error(.identity, "PEM_read_bio_PrivateKey",
                                          "\(what) holds no PEM private key that can be read without a passphrase (encrypted keys are not supported)")
        }
        return key
    }

    private static func fingerprint(_ certificate: OpaquePointer) -> String {
        var digest = [UInt8](repeating: 0, count: Int(EVP_MAX_MD_SIZE))
        var length: UInt32 = 0
        let ok = X509_digest(certificate, EVP_sha256(), &digest, &length)
        precondition(ok == 1, "X509_digest with SHA-256 cannot fail on a parsed certificate")
        return digest.prefix(Int(length)).map { byte in
            let hex = String(byte, radix: 16)
            return hex.count == 1 ? "0" + hex : hex
        }.joined()
    }

    private static func notAfter(_ certificate: OpaquePointer) -> Date {
        var time = tm()
        guard let asn1 = X509_get0_notAfter(certificate), ASN1_TIME_to_tm(asn1, &time) == 1 else {
            return .distantPast
        }
        return Date(timeIntervalSince1970: TimeInterval(timegm(&time)))
    }

    private static func subject(_ certificate: OpaquePointer) -> String {
        var buffer = [CChar](repeating: 0, count: 512)
        guard let name = X509_get_subject_name(certificate), X509_NAME_oneline(name, &buffer, Int32(buffer.count)) != nil else {
            return ""
        }
        return buffer.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
    }
}
