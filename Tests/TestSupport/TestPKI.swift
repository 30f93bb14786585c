// Throwaway certificates for the TLS tests, made at test time with the `openssl` command-line tool (Debian's
// `openssl`, installed by scripts/install-deps --test) in a temporary directory: no key is ever committed, and each
// test process has its own.
//
// The standard set (`TestPKI.standard()`), all ECDSA P-256, valid two days from now:
//   constrainedCA   CN=imagecached test CA, CA:true pathlen:0, keyCertSign, and the critical name constraint
//                   permitted;DNS:images.test (so it may sign images.test and its subdomains only)
//   imagesLeaf      images.test (SAN DNS:images.test), serverAuth, issued by constrainedCA
//   evilLeaf        evil.test, issued by constrainedCA: outside its constraint, so verifiers must refuse it
//   otherCA         CN=another test CA, unconstrained
//   otherLeaf       images.test, issued by otherCA
// `makeCA` and `issueLeaf` make more, for tests that need other names (localhost, 127.0.0.1).

public import Foundation

/// Certificates and keys made with the openssl CLI for tests.
package struct TestPKI: Sendable {
    /// One certificate and its key, in the forms the TLS code reads, and the files they were made in.
    package struct Credential: Sendable {
        package var certificatePEM: [UInt8]
        /// PKCS#8, PEM.
        package var keyPEM: [UInt8]
        package var certificateDER: [UInt8]
        /// PKCS#8, DER (what minting produces).
        package var keyDER: [UInt8]
        package var certificateFile: URL
        package var keyFile: URL
    }

    /// A failed openssl run: its arguments, exit status and standard error.
    package struct Failure: Error, CustomStringConvertible {
        package var description: String
    }

    package var directory: URL
    package var constrainedCA: Credential
    package var imagesLeaf: Credential
    package var evilLeaf: Credential
    package var otherCA: Credential
    package var otherLeaf: Credential

    private static let made = Result { try TestPKI(directory: TestPKI.makeDirectory()) }

    /// The standard set, made once per test process.
    package static func standard() throws -> TestPKI { try made.get() }

    private init(directory: URL) throws {
        self.directory = directory
        constrainedCA = try Self.makeCA(named: "constrained-ca", commonName: "imagecached test CA", permittedDNS: ["images.test"], in: directory)
        imagesLeaf = try Self.issueLeaf(named: "images", dnsNames: ["images.test"], by: constrainedCA, in: directory)
        evilLeaf = try Self.issueLeaf(named: "evil", dnsNames: ["evil.test"], by: constrainedCA, in: directory)
        otherCA = try Self.makeCA(named: "other-ca", commonName: "another test CA", permittedDNS: nil, in: directory)
        otherLeaf = try Self.issueLeaf(named: "other-images", dnsNames: ["images.test"], by: otherCA, in: directory)
    }

    /// A fresh temporary directory for a set of files.
    package static func makeDirectory() throws -> URL {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("imagecached-pki-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        return directory
    }

    /// A self-signed CA (CA:true, pathlen:0, keyCertSign and cRLSign), constrained to `permittedDNS` when given.
    package static func makeCA(named name: String, commonName: String, permittedDNS: [String]?, in directory: URL) throws -> Credential {
        var extensions = [
            "basicConstraints = critical,CA:true,pathlen:0",
            "keyUsage = critical,keyCertSign,cRLSign",
            "subjectKeyIdentifier = hash",
        ]
        if let permittedDNS {
            extensions.append("nameConstraints = critical," + permittedDNS.map { "permitted;DNS:\($0)" }.joined(separator: ","))
        }
        let config = try writeConfig(named: name, commonName: commonName, extensions: extensions, in: directory)
        let files = (certificate: directory.appendingPathComponent("\(name).pem"), key: directory.appendingPathComponent("\(name).key"))
        try openssl(["req", "-x509", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                     "-keyout", files.key.path, "-out", files.certificate.path, "-days", "2",
                     "-config", config.path, "-extensions", "ext"])
        return try credential(certificate: files.certificate, key: files.key)
    }

    /// A server leaf for `dnsNames` and `ipAddresses` (its SAN; the CN is the first name), serverAuth, signed by `ca`.
    package static func issueLeaf(named name: String, dnsNames: [String], ipAddresses: [String] = [], by ca: Credential,
                                  in directory: URL) throws -> Credential {
        let names = dnsNames.map { "DNS:\($0)" } + ipAddresses.map { "IP:\($0)" }
        let extensions = [
            "basicConstraints = critical,CA:false",
            "keyUsage = critical,digitalSignature",
            "extendedKeyUsage = serverAuth",
            "subjectAltName = " + names.joined(separator: ","),
            "authorityKeyIdentifier = keyid",
        ]
        let commonName = dnsNames.first ?? ipAddresses.first ?? name
        let config = try writeConfig(named: name, commonName: commonName, extensions: extensions, in: directory)
        let files = (certificate: directory.appendingPathComponent("\(name).pem"), key: directory.appendingPathComponent("\(name).key"))
        try openssl(["req", "-x509", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                     "-keyout", files.key.path, "-out", files.certificate.path, "-days", "2",
                     "-config", config.path, "-extensions", "ext",
                     "-CA", ca.certificateFile.path, "-CAkey", ca.keyFile.path])
        return try credential(certificate: files.certificate, key: files.key)
    }

    /// What `openssl x509 -fingerprint -sha256` says of a certificate file, as 64 lower-case hex digits.
    package static func fingerprintSHA256(of certificate: URL) throws -> String {
        let output = try openssl(["x509", "-in", certificate.path, "-noout", "-fingerprint", "-sha256"])
        // "sha256 Fingerprint=AB:CD:..."
        let value = output.split(separator: "=", maxSplits: 1).last.map(String.init) ?? ""
        return value.replacingOccurrences(of: ":", with: "").trimmingCharacters(in: .whitespacesAndNewlines).lowercased()
    }

    // MARK: openssl

    private static func writeConfig(named name: String, commonName: String, extensions: [String], in directory: URL) throws -> URL {
        let text = """
            [req]
            distinguished_name = dn
            prompt = no
            [dn]
            CN = \(commonName)
            [ext]
            \(extensions.joined(separator: "\n"))

            """
        let file = directory.appendingPathComponent("\(name).cnf")
        try Data(text.utf8).write(to: file)
        return file
    }

    private static func credential(certificate: URL, key: URL) throws -> Credential {
        let certificateDER = certificate.deletingPathExtension().appendingPathExtension("der")
        let keyDER = key.deletingPathExtension().appendingPathExtension("pk8")
        try openssl(["x509", "-in", certificate.path, "-outform", "DER", "-out", certificateDER.path])
        try openssl(["pkcs8", "-topk8", "-nocrypt", "-in", key.path, "-outform", "DER", "-out", keyDER.path])
        return Credential(certificatePEM: try bytes(certificate), keyPEM: try bytes(key),
                          certificateDER: try bytes(certificateDER), keyDER: try bytes(keyDER),
                          certificateFile: certificate, keyFile: key)
    }

    private static func bytes(_ file: URL) throws -> [UInt8] { [UInt8](try Data(contentsOf: file)) }

    /// Runs `openssl` with `arguments`; its standard output, or a `Failure` with its standard error.
    @discardableResult
    private static func openssl(_ arguments: [String]) throws -> String {
        let result = try Subprocess.run("/usr/bin/env", ["openssl"] + arguments)
        guard result.status == 0 else {
            throw Failure(description: "openssl \(arguments.joined(separator: " ")) exited \(result.exitCode): "
                          + result.errorText + " (the openssl tool is installed by scripts/install-deps --test)")
        }
        return result.outputText
    }
}
