// TLSIdentity: loading a certificate and key from PEM (texts and files) and DER, what it reports, and a key that
// does not belong to the certificate.

import Foundation
import ImageCacheTestSupport
@testable import ImageCacheTLS
import Testing

@Suite("TLSIdentity: certificates and keys from PEM and DER", .timeLimit(.minutes(1)))
struct TLSIdentityTests {
    @Test("PEM and DER give the same identity, with openssl's fingerprint and the certificate's expiry")
    func pemAndDER() throws {
        // Given the images.test leaf in both forms
        let pki = try TestPKI.standard()
        let leaf = pki.imagesLeaf

        // When both are loaded
        let fromPEM = try TLSIdentity(certificateChainPEM: leaf.certificatePEM, privateKeyPEM: leaf.keyPEM)
        let fromDER = try TLSIdentity(certificateDER: leaf.certificateDER, privateKeyDER: leaf.keyDER)

        // Then they report the same certificate, as the openssl tool sees it
        let expected = try TestPKI.fingerprintSHA256(of: leaf.certificateFile)
        #expect(fromPEM.fingerprintSHA256 == expected)
        #expect(fromDER.fingerprintSHA256 == expected)
        #expect(fromPEM.subject == "/CN=images.test")
        // made with -days 2, just now
        let twoDays = Date().addingTimeInterval(2 * 86_400)
        #expect(abs(fromPEM.notAfter.timeIntervalSince(twoDays)) < 600)
        #expect(fromDER.notAfter == fromPEM.notAfter)
    }

    @Test("a DER identity serves a handshake that a client trusting its CA accepts")
    func derIdentityServes() throws {
        // Given a server context built from DER, as minting will hand it over
        let pki = try TestPKI.standard()
        let identity = try TLSIdentity(certificateDER: pki.imagesLeaf.certificateDER, privateKeyDER: pki.imagesLeaf.keyDER)
        let streams = try JoinedStreams(server: TLSContext.server(identity: identity), client: Contexts.verifyingClient())

        // When both handshake
        let result = streams.handshake()

        // Then the client verified it
        #expect(result.client == .done && result.server == .done)
    }

    @Test("files load too, and a missing file is named in the error")
    func files() throws {
        // Given the leaf's files, and a path that does not exist
        let pki = try TestPKI.standard()
        let identity = try TLSIdentity(certificateChainFile: pki.imagesLeaf.certificateFile.path,
                                       privateKeyFile: pki.imagesLeaf.keyFile.path)
        #expect(identity.subject == "/CN=images.test")
        let missing = pki.directory.appendingPathComponent("missing.pem").path

        // When the missing one is loaded
        let error = #expect(throws: TLSError.self) {
            try TLSIdentity(certificateChainFile: missing, privateKeyFile: pki.imagesLeaf.keyFile.path)
        }

        // Then the error names it
        #expect(error?.kind == .identity)
        #expect(error?.detail.contains(missing) == true, "\(String(describing: error))")
    }

    @Test("a key that does not match the certificate is refused with a clear error, from PEM and from DER")
    func keyMismatch() throws {
        // Given the images.test certificate and the evil.test key
        let pki = try TestPKI.standard()

        // When they are put together
        let fromPEM = #expect(throws: TLSError.self) {
            try TLSIdentity(certificateChainPEM: pki.imagesLeaf.certificatePEM, privateKeyPEM: pki.evilLeaf.keyPEM)
        }
        let fromDER = #expect(throws: TLSError.self) {
            try TLSIdentity(certificateDER: pki.imagesLeaf.certificateDER, privateKeyDER: pki.evilLeaf.keyDER)
        }

        // Then the error says so, with OpenSSL's reason
        for error in [fromPEM, fromDER] {
            #expect(error?.kind == .identity)
            #expect(error?.function == "X509_check_private_key")
            #expect(error?.description.contains("the private key does not match the certificate") == true, "\(String(describing: error))")
            #expect(error?.detail.contains("key values mismatch") == true, "\(String(describing: error))")
        }
    }

    @Test("an encrypted key is refused with a clear error, never a passphrase prompt")
    func encryptedKey() throws {
        let pki = try TestPKI.standard()
        let encrypted = pki.directory.appendingPathComponent("encrypted-\(UUID().uuidString).key")
        let result = try Subprocess.run("/usr/bin/openssl", ["pkey", "-in", pki.imagesLeaf.keyFile.path, "-aes256", "-passout", "pass:secret",
                                                            "-out", encrypted.path])
        try #require(result.status == 0)
        let error = #expect(throws: TLSError.self) {
            try TLSIdentity(certificateChainFile: pki.imagesLeaf.certificateFile.path, privateKeyFile: encrypted.path)
        }
        #expect(error?.detail.contains("encrypted keys are not supported") == true, "\(String(describing: error))")
    }

    @Test("text that is not PEM is refused, saying what was missing")
    func notPEM() throws {
        // Given a key and text that holds no certificate
        let pki = try TestPKI.standard()

        // When loaded
        let error = #expect(throws: TLSError.self) {
            try TLSIdentity(certificateChainPEM: Array("hello".utf8), privateKeyPEM: pki.imagesLeaf.keyPEM)
        }

        // Then
        #expect(error?.detail.contains("holds no PEM certificate") == true, "\(String(describing: error))")
    }
}
