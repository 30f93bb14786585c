// LocalCA: the daemon's own certificate authority for interception (issue 29), in memory: its certificate and key,
// checked to belong together, and what the log, `imagecached ca` and the status page say of it. Immutable, so
// Sendable; CADirectory reads and writes its files.
//
// The CA certificate (docs/design/issue-29-plan.md, D9):
//   key                ECDSA P-256
//   subject, issuer    CN = imagecached local CA (<hostname>, <yyyy-mm-dd>)
//   serial             random, 128 bits
//   validity           from now - 1 h, ten years
//   basicConstraints   CA:true, pathlen:0 (critical): it signs leaves only
//   keyUsage           keyCertSign, cRLSign (critical)
//   SKI                the SHA-1 of its public key (RFC 5280 4.2.1.2 method 1), which the leaves' AKI name
//   nameConstraints    (critical) CANameConstraints' for the intercept-hosts list, unless it has `*`
// The fingerprint is SHA-256 over the certificate's DER, written as `openssl x509 -fingerprint -sha256` writes it.

public import Foundation
public import ImageCacheHTTP
internal import Crypto
internal import SwiftASN1
public import X509

public struct LocalCA: Sendable {
    public let certificate: Certificate
    /// The key, as X509 signs with it.
    let signingKey: Certificate.PrivateKey
    /// The key as PKCS#8 PEM ("PRIVATE KEY"), as ca.key holds it.
    public let privateKeyPEM: String
    public let certificateDER: [UInt8]
    /// "AB:CD:...": SHA-256 over the DER, upper-case hex in pairs.
    public let fingerprint: String
    /// The name constraints, nil when the CA has none.
    public let nameConstraints: NameConstraints?
    let subjectKeyIdentifier: ArraySlice<UInt8>

    /// How long a CA is valid.
    public static let lifetimeSeconds: Double = 3653 * 86_400

    /// A CA from its certificate and key (PEM): refused unless the key is a P-256 key, the certificate a CA
    /// certificate, and the key the certificate's. `certificatePath` and `keyPath` name the files in errors.
    public init(certificatePEM: String, keyPEM: String, certificatePath: String, keyPath: String) throws(CAError) {
        let key: P256.Signing.PrivateKey
        do {
            key = try P256.Signing.PrivateKey(pemRepresentation: keyPEM)
        } catch {
            throw CAError(path: keyPath, problem: "not an ECDSA P-256 private key in PEM", fix: CAError.replace)
        }
        let certificate: Certificate
        do {
            certificate = try Certificate(pemEncoded: certificatePEM)
        } catch {
            throw CAError(path: certificatePath, problem: "not a certificate in PEM (\(error))", fix: CAError.replace)
        }
        guard certificate.publicKey == Certificate.PublicKey(key.publicKey) else {
            throw CAError(path: keyPath, problem: "not the key of \(certificatePath)", fix: CAError.replace)
        }
        // do/catch, not `try?`, in a typed-throws initialiser (see CADirectory.exists: Swift 6.3.1's optimiser).
        var basicConstraints: BasicConstraints?
        var subjectKeyIdentifier: SubjectKeyIdentifier?
        do {
            basicConstraints = try certificate.extensions.basicConstraints
            subjectKeyIdentifier = try certificate.extensions.subjectKeyIdentifier
        } catch {
            basicConstraints = nil
            subjectKeyIdentifier = nil
        }
        guard case .isCertificateAuthority = basicConstraints, let identifier = subjectKeyIdentifier?.keyIdentifier else {
            throw CAError(path: certificatePath, problem: "not a CA certificate (CA:true and a subject key identifier)",
                          fix: CAError.replace)
        }
        let constraints: NameConstraints?
        do {
            constraints = try certificate.extensions.nameConstraints
        } catch {
            throw CAError(path: certificatePath, problem: "its name constraints do not parse (\(error))", fix: CAError.replace)
        }
        self.init(certificate: certificate, key: key, constraints: constraints, subjectKeyIdentifier: identifier)
    }

    private init(certificate: Certificate, key: P256.Signing.PrivateKey, constraints: NameConstraints?,
                 subjectKeyIdentifier: ArraySlice<UInt8>) {
        self.certificate = certificate
        signingKey = Certificate.PrivateKey(key)
        privateKeyPEM = key.pemRepresentation
        var serializer = DER.Serializer()
        try! serializer.serialize(certificate)   // a parsed or just-made certificate serialises
        certificateDER = serializer.serializedBytes
        fingerprint = LocalCA.fingerprint(der: certificateDER)
        nameConstraints = constraints
        self.subjectKeyIdentifier = subjectKeyIdentifier
    }

    /// A new CA for `hosts` (constrained to them unless `*` is listed), named after `hostname` and `now`'s date.
    public static func make(hosts: InterceptHosts, hostname: String, now: Date) -> LocalCA {
        let key = P256.Signing.PrivateKey()
        let publicKey = Certificate.PublicKey(key.publicKey)
        let identifier = SubjectKeyIdentifier(hash: publicKey)
        let constraints = CANameConstraints.constraints(for: hosts)
        do {
            let name = try DistinguishedName { CommonName("imagecached local CA (\(hostname), \(dateText(now)))") }
            let extensions = try Certificate.Extensions {
                Critical(BasicConstraints.isCertificateAuthority(maxPathLength: 0))
                Critical(KeyUsage(keyCertSign: true, cRLSign: true))
                identifier
                if let constraints { Critical(constraints) }
            }
            let certificate = try Certificate(
                version: .v3, serialNumber: randomSerial(), publicKey: publicKey,
                notValidBefore: now.addingTimeInterval(-LeafMinter.backdateSeconds),
                notValidAfter: now.addingTimeInterval(lifetimeSeconds), issuer: name, subject: name,
                signatureAlgorithm: .ecdsaWithSHA256, extensions: extensions, issuerPrivateKey: Certificate.PrivateKey(key))
            return LocalCA(certificate: certificate, key: key, constraints: constraints,
                           subjectKeyIdentifier: identifier.keyIdentifier)
        } catch {
            // Fixed names and extensions that always encode: a failure here is a programming error.
            preconditionFailure("the local CA's certificate cannot be made: \(error)")
        }
    }

    // MARK: - What is said about it

    public var notAfter: Date { certificate.notValidAfter }

    public var certificatePEM: String {
        // A certificate that was serialised once serialises again.
        (try! certificate.serializeAsPEM()).pemString + "\n"
    }

    /// The fingerprint as 64 lower-case hex digits (no colons).
    public var fingerprintHex: String { fingerprint.replacingOccurrences(of: ":", with: "").lowercased() }

    /// "constrained to 2 names (example.com, 203.0.113.9/32)", or "unconstrained: this key can sign for any site".
    public var constraintSummary: String { CANameConstraints.summary(nameConstraints) }

    public var isConstrained: Bool { nameConstraints != nil }

    /// The subject's common name.
    public var commonName: String {
        certificate.subject.flatMap { $0 }.first { $0.type == .RDNAttributeType.commonName }
            .flatMap { String($0.value) } ?? ""
    }

    /// The patterns of `hosts` this CA's constraints do not cover.
    public func uncovered(_ hosts: InterceptHosts) -> [InterceptHosts.Pattern] {
        CANameConstraints.uncovered(hosts, by: nameConstraints)
    }

    /// Refuses `hosts` unless this CA covers all of them; `path` names the CA's certificate in the error.
    public func check(covers hosts: InterceptHosts, path: String) throws(CAError) {
        let outside = uncovered(hosts)
        guard outside.isEmpty else {
            throw CAError(path: path, problem: "intercept-hosts lists \(outside.map(\.description).joined(separator: ", ")), outside this CA's name constraints (\(constraintSummary))",
                          fix: CAError.replace)
        }
    }

    // MARK: - Helpers

    /// SHA-256 over `der`, "AB:CD:..." as `openssl x509 -fingerprint -sha256` writes it.
    public static func fingerprint(der: [UInt8]) -> String {
        SHA256.hash(data: der).map { String(format: "%02X", $0) }.joined(separator: ":")
    }

    /// 128 random bits (X509 writes them as a positive DER INTEGER: a zero byte first when the top bit is set).
    static func randomSerial() -> Certificate.SerialNumber {
        var generator = SystemRandomNumberGenerator()
        return Certificate.SerialNumber(bytes: (0..<16).map { _ in UInt8.random(in: 0...255, using: &generator) })
    }

    /// "2026-11-20" (UTC).
    static func dateText(_ date: Date) -> String {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: "UTC")!
        let parts = calendar.dateComponents([.year, .month, .day], from: date)
        return String(format: "%04d-%02d-%02d", parts.year ?? 0, parts.month ?? 0, parts.day ?? 0)
    }
}
