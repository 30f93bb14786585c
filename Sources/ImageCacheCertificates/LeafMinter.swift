// LeafMinter: one leaf certificate for one intercepted host, signed by the local CA. Pure but for the randomness of
// the key and the serial: the CA, the host and the time in, DER out (the certificate, and its key as PKCS#8), for
// the TLS layer to load once (d2i_X509, d2i_AutoPrivateKey). Leaves live in memory only, never on disk.
//
// A leaf (docs/design/issue-29-plan.md, D9):
//   key                ECDSA P-256, new for each leaf
//   serial             random, 128 bits
//   validity           notBefore = now - 1 h (clocks that are behind), notAfter = now + 72 h, never past the CA's own
//   subject            CN = the host name; empty for an IP address, whose SAN is then critical (RFC 5280 4.2.1.6,
//                      as Let's Encrypt's IP certificates): OpenSSL checks a CN that looks like a DNS name
//                      ("203.0.113.5" does) against the DNS constraints when the leaf has no DNS SAN, and refuses it
//   subjectAltName     a DNS name, or an IP address for an IP literal
//   extendedKeyUsage   serverAuth
//   keyUsage           digitalSignature (critical)
//   basicConstraints   CA:false (critical)
//   AKI                the CA's SKI; SKI of its own key
// A host outside the CA's name constraints is refused before anything is signed: clients would refuse the leaf.

public import Foundation
public import ImageCacheHTTP
internal import Crypto
internal import SwiftASN1
internal import X509

/// A minted leaf: its certificate and key, DER.
public struct MintedLeaf: Sendable {
    public let certificateDER: [UInt8]
    /// PKCS#8 (RFC 5208) PrivateKeyInfo.
    public let privateKeyDER: [UInt8]
    public let notBefore: Date
    public let notAfter: Date
}

public enum LeafMinter {
    /// How long before `now` a leaf's validity starts: clients whose clock is a little behind still take it.
    public static let backdateSeconds: Double = 3600
    /// How long after `now` a leaf is valid.
    public static let lifetimeSeconds: Double = 72 * 3600

    /// A leaf for `host` signed by `ca`, valid from `now` - 1 h to `now` + 72 h (or the CA's expiry, if sooner).
    /// Throws when `host` is not a host or is outside the CA's name constraints.
    public static func mint(host: InterceptHosts.Host, ca: LocalCA, now: Date) throws(CAError) -> MintedLeaf {
        guard CANameConstraints.permits(host, ca.nameConstraints) else {
            throw CAError(path: "\(host)", problem: "outside the local CA's name constraints (\(ca.constraintSummary))",
                          fix: "list it in intercept-hosts and run " + CAError.replace)
        }
        return try mintUnchecked(host: host, ca: ca, now: now)
    }

    /// `mint` without the name constraints check: the tests use it to make the rogue leaves a stolen CA key could
    /// sign, which verifiers must refuse.
    package static func mintUnchecked(host: InterceptHosts.Host, ca: LocalCA, now: Date) throws(CAError) -> MintedLeaf {
        let key = P256.Signing.PrivateKey()
        let notBefore = now.addingTimeInterval(-backdateSeconds)
        let notAfter = min(now.addingTimeInterval(lifetimeSeconds), ca.notAfter)
        do {
            let publicKey = Certificate.PublicKey(key.publicKey)
            let subject: DistinguishedName
            let alternativeNames: SubjectAlternativeNames
            switch host {
            case let .name(name):
                subject = try DistinguishedName { CommonName(name) }
                alternativeNames = SubjectAlternativeNames([.dnsName(name)])
            case let .address(address):
                subject = DistinguishedName()
                alternativeNames = SubjectAlternativeNames([.ipAddress(ASN1OctetString(contentBytes: ArraySlice(address.bytes)))])
            }
            let extensions = try Certificate.Extensions {
                Critical(BasicConstraints.notCertificateAuthority)
                Critical(KeyUsage(digitalSignature: true))
                try ExtendedKeyUsage([.serverAuth])
                if case .address = host {
                    Critical(alternativeNames)
                } else {
                    alternativeNames
                }
                AuthorityKeyIdentifier(keyIdentifier: ca.subjectKeyIdentifier)
                SubjectKeyIdentifier(hash: publicKey)
            }
            let certificate = try Certificate(
                version: .v3, serialNumber: LocalCA.randomSerial(), publicKey: publicKey,
                notValidBefore: notBefore, notValidAfter: notAfter, issuer: ca.certificate.subject, subject: subject,
                signatureAlgorithm: .ecdsaWithSHA256, extensions: extensions, issuerPrivateKey: ca.signingKey)
            var serializer = DER.Serializer()
            try serializer.serialize(certificate)
            return MintedLeaf(certificateDER: serializer.serializedBytes, privateKeyDER: Array(key.derRepresentation),
                              notBefore: notBefore, notAfter: notAfter)
        } catch {
            throw CAError(path: "\(host)", problem: "cannot make its certificate: \(error)", fix: "report this as a bug")
        }
    }
}
