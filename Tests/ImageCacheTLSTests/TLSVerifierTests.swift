// TLSVerifier: OpenSSL's own path validation (as curl, Python and Node use it) against one anchor, including the
// X.509 name constraints the local CA relies on.

import Foundation
import ImageCacheTestSupport
@testable import ImageCacheTLS
import Testing

@Suite("TLSVerifier: chains against one anchor", .timeLimit(.minutes(1)))
struct TLSVerifierTests {
    @Test("a leaf within the CA's name constraint, for its own name, is trusted (PEM and DER)")
    func goodChain() throws {
        let pki = try TestPKI.standard()

        // When the images.test leaf is verified under the constrained CA
        let pem = try TLSVerifier.verify(chainPEM: pki.imagesLeaf.certificatePEM, anchorPEM: pki.constrainedCA.certificatePEM,
                                         hostName: "images.test")
        let der = try TLSVerifier.verify(chainDER: [pki.imagesLeaf.certificateDER], anchorPEM: pki.constrainedCA.certificatePEM,
                                         hostName: "images.test")

        // Then OpenSSL trusts it
        #expect(pem == .trusted)
        #expect(der == .trusted)
    }

    @Test("a leaf under another anchor is rejected: no local issuer")
    func wrongAnchor() throws {
        let pki = try TestPKI.standard()

        // When the images.test leaf is verified under a CA that did not sign it
        let result = try TLSVerifier.verify(chainPEM: pki.imagesLeaf.certificatePEM, anchorPEM: pki.otherCA.certificatePEM)

        // Then
        #expect(result == .rejected(code: 20, reason: "unable to get local issuer certificate"))
    }

    @Test("a leaf the CA signed outside its name constraint is rejected: permitted subtree violation")
    func nameConstraintViolation() throws {
        let pki = try TestPKI.standard()

        // When a leaf for evil.test, signed by the CA constrained to images.test, is verified
        let result = try TLSVerifier.verify(chainPEM: pki.evilLeaf.certificatePEM, anchorPEM: pki.constrainedCA.certificatePEM,
                                            hostName: "evil.test")

        // Then OpenSSL enforces the constraint even though the signature is good
        #expect(result == .rejected(code: 47, reason: "permitted subtree violation"))
    }

    @Test("a trusted leaf for another host name is rejected: hostname mismatch")
    func hostMismatch() throws {
        let pki = try TestPKI.standard()

        // When the images.test leaf is verified for another name
        let result = try TLSVerifier.verify(chainPEM: pki.imagesLeaf.certificatePEM, anchorPEM: pki.constrainedCA.certificatePEM,
                                            hostName: "cdn.images.test")

        // Then
        #expect(result == .rejected(code: 62, reason: "hostname mismatch"))
    }

    @Test("a leaf past its notAfter is rejected: expired")
    func expired() throws {
        let pki = try TestPKI.standard()

        // When verified a week from now (the test leaves last two days)
        let result = try TLSVerifier.verify(chainPEM: pki.imagesLeaf.certificatePEM, anchorPEM: pki.constrainedCA.certificatePEM,
                                            at: Date().addingTimeInterval(7 * 86_400))

        // Then
        #expect(result == .rejected(code: 10, reason: "certificate has expired"))
    }
}
