// The local CA: its certificate's fields, its name constraints per intercept-hosts list, and "does it cover a list".

import Crypto
import Foundation
import ImageCacheCertificates
import ImageCacheHTTP
import SwiftASN1
import Testing
import X509

@Suite("The local CA's certificate and name constraints", .timeLimit(.minutes(1)))
struct LocalCATests {
    @Test("the CA certificate: P-256, its CN, a 128-bit serial, ten years, CA:true pathlen:0 and keyCertSign+cRLSign (critical), an SKI, critical name constraints")
    func certificate() throws {
        // Given
        let now = Date(timeIntervalSince1970: 1_795_000_000)   // 2026-11-18
        // When
        let ca = LocalCA.make(hosts: try InterceptHosts.list("images.example.com"), hostname: "shelf", now: now)
        let certificate = ca.certificate
        // Then
        #expect(P256.Signing.PublicKey(certificate.publicKey) != nil)
        #expect(certificate.subject == certificate.issuer)
        #expect(ca.commonName == "imagecached local CA (shelf, 2026-11-18)")
        #expect(certificate.serialNumber.bytes.drop { $0 == 0 }.count >= 14 && certificate.serialNumber.bytes.count <= 17)
        let years = certificate.notValidAfter.timeIntervalSince(now) / (365.25 * 86_400)
        #expect(years > 9.99 && years < 10.01)
        #expect(try certificate.extensions.basicConstraints == .isCertificateAuthority(maxPathLength: 0))
        #expect(certificate.extensions[oid: .X509ExtensionID.basicConstraints]?.critical == true)
        let usage = try #require(try certificate.extensions.keyUsage)
        #expect(usage.keyCertSign && usage.cRLSign && !usage.digitalSignature)
        #expect(certificate.extensions[oid: .X509ExtensionID.keyUsage]?.critical == true)
        #expect(try certificate.extensions.subjectKeyIdentifier != nil)
        #expect(certificate.extensions[oid: .X509ExtensionID.nameConstraints]?.critical == true)
        // and the fingerprint is SHA-256 over the DER, as openssl prints it
        let digest = SHA256.hash(data: ca.certificateDER).map { String(format: "%02X", $0) }.joined(separator: ":")
        #expect(ca.fingerprint == digest && ca.fingerprintHex.count == 64)
    }

    @Test("OpenSSL reads the CA as this describes it: pathlen 0, the permitted and excluded subtrees, the fingerprint")
    func asOpenSSLSeesIt() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let ca = LocalCA.make(hosts: try InterceptHosts.list("images.example.com", "*.cdn.example"), hostname: "shelf", now: Date())
        let file = try directory.write(ca.certificatePEM, to: "ca.pem")
        let (status, text) = try Verifiers.run("/usr/bin/openssl", ["x509", "-in", file, "-noout", "-text", "-fingerprint", "-sha256"])
        #expect(status == 0)
        #expect(text.contains("CA:TRUE, pathlen:0"))
        #expect(text.contains("X509v3 Name Constraints: critical"))
        #expect(text.contains("DNS:images.example.com") && text.contains("DNS:cdn.example"))
        #expect(text.contains("IP:0.0.0.0/0.0.0.0") && text.contains("IP:0:0:0:0:0:0:0:0/0:0:0:0:0:0:0:0"))
        #expect(text.contains("Fingerprint=\(ca.fingerprint)"))
    }

    struct ConstraintCase: CustomTestStringConvertible, Sendable {
        let hosts: [String]
        let permittedDNS: [String]
        let excludedDNS: [String]
        let permittedIP: [String]
        let excludedIP: [String]
        var testDescription: String { hosts.joined(separator: ",") }
    }

    @Test("the constraints per intercept-hosts list: names and *.suffix permitted as DNS subtrees, IPs as /32 or /128, IPs excluded unless one is listed, names excluded unless one is",
          arguments: [
            ConstraintCase(hosts: ["images.example.com", "*.cdn.example"], permittedDNS: ["images.example.com", "cdn.example"],
                           excludedDNS: [], permittedIP: [], excludedIP: ["0.0.0.0/0", "::/0"]),
            ConstraintCase(hosts: ["*.example.com", "example.com"], permittedDNS: ["example.com"],
                           excludedDNS: [], permittedIP: [], excludedIP: ["0.0.0.0/0", "::/0"]),
            ConstraintCase(hosts: ["images.example.com", "203.0.113.5", "2001:db8::5"], permittedDNS: ["images.example.com"],
                           excludedDNS: [], permittedIP: ["203.0.113.5/32", "2001:db8::5/128"], excludedIP: []),
            ConstraintCase(hosts: ["203.0.113.5"], permittedDNS: [], excludedDNS: [""], permittedIP: ["203.0.113.5/32"], excludedIP: []),
          ])
    func constraints(_ test: ConstraintCase) throws {
        // When
        let constraints = try #require(CANameConstraints.constraints(for: try InterceptHosts.parse(test.hosts)))
        // Then
        #expect(Array(constraints.permittedDNSDomains) == test.permittedDNS)
        #expect(Array(constraints.excludedDNSDomains) == test.excludedDNS)
        #expect(CANameConstraints.permittedNames(constraints) == test.permittedDNS + test.permittedIP)
        let excludedIP = constraints.excludedIPRanges.map { range -> String in
            let bytes = Array(range.bytes)
            let address = IPAddress(bytes: Array(bytes.prefix(bytes.count / 2)))!
            return "\(address)/\(bytes.suffix(bytes.count / 2).reduce(0) { $0 + $1.nonzeroBitCount })"
        }
        #expect(excludedIP == test.excludedIP)
    }

    @Test("* gives no constraints at all, and the summary warns")
    func wildcardAll() throws {
        let hosts = try InterceptHosts.list("images.example.com", "*")
        #expect(CANameConstraints.constraints(for: hosts) == nil)
        let ca = LocalCA.make(hosts: hosts, hostname: "shelf", now: Date())
        #expect(ca.certificate.extensions[oid: .X509ExtensionID.nameConstraints] == nil)
        #expect(!ca.isConstrained)
        #expect(ca.constraintSummary == "unconstrained: this key can sign for any site")
    }

    @Test("the summary counts the permitted names")
    func summary() throws {
        let ca = LocalCA.make(hosts: try InterceptHosts.list("images.example.com", "*.cdn.example", "203.0.113.5"), hostname: "shelf", now: Date())
        #expect(ca.constraintSummary == "constrained to 3 names (images.example.com, cdn.example, 203.0.113.5/32)")
    }

    @Test("coverage: a CA covers its own list, narrower names and subdomains, and not a new name, a new IP, a parent domain or *",
          arguments: [
            (["images.example.com", "*.cdn.example", "203.0.113.5"], ["images.example.com", "*.cdn.example", "203.0.113.5"], ""),
            (["*.example.com"], ["a.example.com", "*.b.example.com", "example.com"], ""),
            (["images.example.com"], ["a.images.example.com"], ""),
            (["images.example.com"], ["images.example.com", "other.example.com"], "other.example.com"),
            (["images.example.com"], ["example.com", "*.example.com"], "example.com,*.example.com"),
            (["images.example.com"], ["203.0.113.5"], "203.0.113.5"),
            (["203.0.113.5"], ["203.0.113.6", "images.example.com"], "203.0.113.6,images.example.com"),
            (["images.example.com"], ["*"], "*"),
            (["*"], ["*", "anything.test", "198.51.100.1"], ""),
          ])
    func coverage(made: [String], asked: [String], uncovered: String) throws {
        // Given a CA made for `made`
        let ca = LocalCA.make(hosts: try InterceptHosts.parse(made), hostname: "shelf", now: Date())
        // When asked about `asked`
        let outside = ca.uncovered(try InterceptHosts.parse(asked))
        // Then
        #expect(outside.map(\.description).joined(separator: ",") == uncovered)
        if uncovered.isEmpty {
            try ca.check(covers: try InterceptHosts.parse(asked), path: "/ca/ca.pem")
        } else {
            #expect {
                try ca.check(covers: try InterceptHosts.parse(asked), path: "/ca/ca.pem")
            } throws: { error in
                let text = "\(error)"
                return text.contains("/ca/ca.pem: intercept-hosts lists \(outside.map(\.description).joined(separator: ", "))")
                    && text.contains("imagecached ca init --replace")
            }
        }
    }
}
