// Leaves minted from the local CA: what they carry, that two independent verifiers (swift-certificates and OpenSSL)
// accept them for their host, and that leaves a stolen CA key could sign outside the name constraints are refused by
// both.

import Crypto
import Foundation
import ImageCacheCertificates
import ImageCacheHTTP
import SwiftASN1
import Testing
import X509

@Suite("Leaf certificates from the local CA", .timeLimit(.minutes(1)))
struct LeafMinterTests {
    static let hosts = ["images.example.com", "*.cdn.example", "203.0.113.5", "2001:db8::5"]

    static func ca(_ items: [String] = LeafMinterTests.hosts) throws -> LocalCA {
        LocalCA.make(hosts: try InterceptHosts.parse(items), hostname: "test-host", now: Date())
    }

    @Test("a leaf is P-256, valid from an hour ago for 72 hours (73 h in all), with the host as SAN (and CN for a name), serverAuth, and not a CA",
          arguments: ["images.example.com", "a.cdn.example", "203.0.113.5", "2001:db8::5"])
    func leafContents(text: String) throws {
        // Given
        let ca = try LeafMinterTests.ca()
        let host = try InterceptHosts.Host.host(text)
        let now = Date()
        // When
        let leaf = try LeafMinter.mint(host: host, ca: ca, now: now)
        let certificate = try Certificate(derEncoded: leaf.certificateDER)
        // Then: the key, and the key handed over as PKCS#8 is the certificate's
        let key = try P256.Signing.PrivateKey(derRepresentation: leaf.privateKeyDER)
        #expect(certificate.publicKey == Certificate.PublicKey(key.publicKey))
        #expect(P256.Signing.PublicKey(certificate.publicKey) != nil)
        // validity
        let lifetime = certificate.notValidAfter.timeIntervalSince(certificate.notValidBefore)
        #expect(lifetime <= 73 * 3600 && lifetime >= 72 * 3600)
        #expect(abs(certificate.notValidBefore.timeIntervalSince(now) + 3600) < 2)
        // names and uses
        let sans = try #require(try certificate.extensions.subjectAlternativeNames)
        switch host {
        case let .name(name):
            #expect(Array(sans) == [.dnsName(name)])
            #expect(certificate.subject.description == "CN=\(name)")
        case let .address(address):
            // An empty subject and a critical SAN: a CN of digits and dots would be judged as a DNS name by OpenSSL
            #expect(Array(sans) == [.ipAddress(ASN1OctetString(contentBytes: ArraySlice(address.bytes)))])
            #expect(certificate.subject.isEmpty)
            #expect(certificate.extensions[oid: .X509ExtensionID.subjectAlternativeName]?.critical == true)
        }
        #expect(try certificate.extensions.extendedKeyUsage == ExtendedKeyUsage([.serverAuth]))
        #expect(try certificate.extensions.basicConstraints == .notCertificateAuthority)
        let keyUsage = try #require(try certificate.extensions.keyUsage)
        #expect(keyUsage.digitalSignature && !keyUsage.keyCertSign)
        #expect(certificate.extensions[oid: .X509ExtensionID.keyUsage]?.critical == true)
        #expect(try certificate.extensions.authorityKeyIdentifier?.keyIdentifier == ca.certificate.extensions.subjectKeyIdentifier?.keyIdentifier)
        #expect(certificate.issuer == ca.certificate.subject)
    }

    @Test("two leaves for one host have different keys and serials")
    func fresh() throws {
        let ca = try LeafMinterTests.ca()
        let host = try InterceptHosts.Host.host("images.example.com")
        let first = try Certificate(derEncoded: LeafMinter.mint(host: host, ca: ca, now: Date()).certificateDER)
        let second = try Certificate(derEncoded: LeafMinter.mint(host: host, ca: ca, now: Date()).certificateDER)
        #expect(first.serialNumber != second.serialNumber)
        #expect(first.publicKey != second.publicKey)
    }

    @Test("a leaf never outlives its CA")
    func clampedToTheCA() throws {
        // Given a CA made ten years ago, a day from its expiry
        let made = Date().addingTimeInterval(-LocalCA.lifetimeSeconds + 86_400)
        let ca = LocalCA.make(hosts: try InterceptHosts.list("images.example.com"), hostname: "test-host", now: made)
        // When
        let leaf = try LeafMinter.mint(host: .host("images.example.com"), ca: ca, now: Date())
        // Then
        #expect(leaf.notAfter == ca.notAfter)
    }

    @Test("a leaf verifies under swift-certificates' Verifier and under OpenSSL, for names and IP addresses, constrained or not",
          arguments: [
            (LeafMinterTests.hosts, "images.example.com"), (LeafMinterTests.hosts, "deep.a.cdn.example"),
            (LeafMinterTests.hosts, "203.0.113.5"), (LeafMinterTests.hosts, "2001:db8::5"),
            (["images.example.com"], "images.example.com"), (["203.0.113.5"], "203.0.113.5"),
            (["*"], "anything.test"), (["*"], "198.51.100.7"),
          ])
    func verifies(list: [String], text: String) async throws {
        // Given
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let ca = try LeafMinterTests.ca(list)
        let host = try InterceptHosts.Host.host(text)
        // When
        let leaf = try LeafMinter.mint(host: host, ca: ca, now: Date())
        // Then
        let swiftVerdict = try await Verifiers.swiftCertificates(leafDER: leaf.certificateDER, ca: ca, host: host)
        #expect(swiftVerdict == nil)
        let openSSLVerdict = try Verifiers.openSSL(leafDER: leaf.certificateDER, ca: ca, host: host, in: directory)
        #expect(openSSLVerdict == nil)
    }

    @Test("the minter refuses a host outside the CA's constraints, naming ca init --replace",
          arguments: ["evil.test", "example.com", "cdn.example.evil", "203.0.113.9", "2001:db8::9"])
    func refusesOutside(text: String) throws {
        let ca = try LeafMinterTests.ca()
        #expect {
            _ = try LeafMinter.mint(host: .host(text), ca: ca, now: Date())
        } throws: { error in
            (error as? CAError)?.fix.contains("imagecached ca init --replace") == true
        }
    }

    @Test("rogue leaves a stolen key could sign (evil.test, 203.0.113.9, 2001:db8::9) are refused by swift-certificates and by OpenSSL",
          arguments: [
            (["images.example.com"], "evil.test", "permitted subtree violation"),
            (["images.example.com"], "203.0.113.9", "excluded subtree violation"),
            (["images.example.com"], "2001:db8::9", "excluded subtree violation"),
            (["images.example.com", "203.0.113.5"], "203.0.113.9", "permitted subtree violation"),
            (["images.example.com", "203.0.113.5"], "2001:db8::9", "permitted subtree violation"),
            (["203.0.113.5"], "evil.test", "excluded subtree violation"),
          ])
    func rogue(list: [String], text: String, openSSLReason: String) async throws {
        // Given a CA constrained to `list`, and a leaf for a host outside it signed with its key
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let ca = try LeafMinterTests.ca(list)
        let host = try InterceptHosts.Host.host(text)
        let rogue = try LeafMinter.mintUnchecked(host: host, ca: ca, now: Date())
        // When each verifier judges it for its own host
        let swiftVerdict = try await Verifiers.swiftCertificates(leafDER: rogue.certificateDER, ca: ca, host: host)
        let openSSLVerdict = try Verifiers.openSSL(leafDER: rogue.certificateDER, ca: ca, host: host, in: directory)
        // Then both refuse it, for its name
        let swiftReason = try #require(swiftVerdict, "swift-certificates accepted a leaf for \(text)")
        #expect(swiftReason.localizedCaseInsensitiveContains("constraint") || swiftReason.contains("subtree"), "\(swiftReason)")
        let openSSLOutput = try #require(openSSLVerdict, "OpenSSL accepted a leaf for \(text)")
        #expect(openSSLOutput.contains(openSSLReason), "\(openSSLOutput)")
    }

    @Test("the same rogue leaf is accepted from an unconstrained CA (*): the constraints are what refuse it")
    func unconstrainedAcceptsAnything() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let ca = try LeafMinterTests.ca(["*"])
        let host = try InterceptHosts.Host.host("evil.test")
        let leaf = try LeafMinter.mint(host: host, ca: ca, now: Date())
        #expect(try await Verifiers.swiftCertificates(leafDER: leaf.certificateDER, ca: ca, host: host) == nil)
        #expect(try Verifiers.openSSL(leafDER: leaf.certificateDER, ca: ca, host: host, in: directory) == nil)
    }
}
