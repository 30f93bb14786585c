// `imagecached ca init | path | install` as a user runs them: what they print, the files they leave, their exits.

import Foundation
import Testing
import ImageCacheCertificates
import ImageCacheHTTP
import ImageCacheTestSupport

extension CLITests {
    /// A temporary directory for one test: the CA's directory and a trust store inside it.
    struct CAScratch {
        let root: String
        var caDirectory: String { root + "/ca" }
        var trustDirectory: String { root + "/trust" }

        init() throws {
            root = FileManager.default.temporaryDirectory.appendingPathComponent("imagecached-ca-cli-\(UUID().uuidString)").path
            try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        }

        /// The environment the binary runs with: intercept-hosts as given, HOME inside the scratch directory.
        func environment(hosts: String?) -> [String: String] {
            var environment = ["PATH": "/usr/bin:/bin", "HOME": root + "/home"]
            if let hosts { environment["IMAGECACHED_INTERCEPT_HOSTS"] = hosts }
            return environment
        }

        func remove() { try? FileManager.default.removeItem(atPath: root) }
    }

    @Test("ca init makes the CA for intercept-hosts and prints its path, fingerprint and constraints; a second init exits 1 naming --replace; --replace makes a new one")
    func caInit() async throws {
        // Given
        let scratch = try CAScratch()
        defer { scratch.remove() }
        let environment = scratch.environment(hosts: "images.example.com,*.cdn.example,203.0.113.5")
        // When
        let (status, stdout, _) = try await CLITests.run(["ca", "init", "--intercept-ca-dir", scratch.caDirectory], environment: environment)
        let again = try await CLITests.run(["ca", "init", "--intercept-ca-dir", scratch.caDirectory], environment: environment)
        let fingerprint = try CADirectory(path: scratch.caDirectory).readCertificate().fingerprint
        let replaced = try await CLITests.run(["ca", "init", "--replace", "--intercept-ca-dir", scratch.caDirectory], environment: environment)
        let newFingerprint = try CADirectory(path: scratch.caDirectory).readCertificate().fingerprint
        // Then
        #expect(status == 0)
        #expect(stdout.contains("certificate: \(scratch.caDirectory)/ca.pem"))
        #expect(stdout.contains("SHA-256:     \(fingerprint)"))
        #expect(stdout.contains("constraints: constrained to 3 names (images.example.com, cdn.example, 203.0.113.5/32)"))
        #expect(again.0 == 1)
        #expect(again.2.contains("a CA is already there") && again.2.contains("imagecached ca init --replace"), "\(again.2)")
        #expect(replaced.0 == 0 && newFingerprint != fingerprint)
        #expect(replaced.1.contains("replaced:    SHA-256 \(fingerprint)"), "\(replaced.1)")
        let key = try FileManager.default.attributesOfItem(atPath: scratch.caDirectory + "/ca.key")
        #expect((key[.posixPermissions] as? Int) == 0o600)
    }

    @Test("ca init reads intercept-hosts from --daemon-config; with none set it exits 1 saying to set it; * warns that the CA is unconstrained")
    func caInitConfiguration() async throws {
        let scratch = try CAScratch()
        defer { scratch.remove() }
        let config = scratch.root + "/imagecached.yaml"
        try "intercept-hosts: [\"*\"]\nintercept-ca-dir: \(scratch.caDirectory)\n".write(toFile: config, atomically: true, encoding: .utf8)
        let none = try await CLITests.run(["ca", "init", "--intercept-ca-dir", scratch.root + "/other"], environment: scratch.environment(hosts: nil))
        let (status, stdout, stderr) = try await CLITests.run(["ca", "init", "--daemon-config", config], environment: scratch.environment(hosts: nil))
        #expect(none.0 == 1 && none.2.contains("set intercept-hosts"), "\(none.2)")
        #expect(status == 0, "\(stderr)")
        #expect(stdout.contains("certificate: \(scratch.caDirectory)/ca.pem"))
        #expect(stdout.contains("constraints: unconstrained: this key can sign for any site"))
    }

    @Test("ca path prints the certificate's path; with no CA it exits 1 naming ca init")
    func caPath() async throws {
        let scratch = try CAScratch()
        defer { scratch.remove() }
        let missing = try await CLITests.run(["ca", "path", "--intercept-ca-dir", scratch.caDirectory], environment: scratch.environment(hosts: nil))
        try CADirectory(path: scratch.caDirectory).create(hosts: .parse(["images.example.com"]))
        let (status, stdout, _) = try await CLITests.run(["ca", "path", "--intercept-ca-dir", scratch.caDirectory], environment: scratch.environment(hosts: nil))
        #expect(missing.0 == 1 && missing.2.contains("imagecached ca init"), "\(missing.2)")
        #expect(status == 0)
        #expect(stdout == scratch.caDirectory + "/ca.pem\n")
    }

    @Test("ca install copies the certificate into the trust directory as imagecached-<8 hex of its SHA-256>.crt (0644) and runs the update command; a failing command exits 1")
    func caInstall() async throws {
        // Given a CA
        let scratch = try CAScratch()
        defer { scratch.remove() }
        let ca = try CADirectory(path: scratch.caDirectory).create(hosts: .parse(["images.example.com"]))
        let arguments = ["ca", "install", "--intercept-ca-dir", scratch.caDirectory, "--trust-dir", scratch.trustDirectory]
        // When
        let (status, stdout, stderr) = try await CLITests.run(arguments + ["--update-command", "/bin/true"], environment: scratch.environment(hosts: nil))
        let failing = try await CLITests.run(arguments + ["--update-command", "/bin/false"], environment: scratch.environment(hosts: nil))
        // Then
        let name = "imagecached-" + ca.fingerprintHex.prefix(8) + ".crt"
        let installed = scratch.trustDirectory + "/" + name
        #expect(status == 0, "\(stderr)")
        #expect(stdout.contains("installed \(scratch.caDirectory)/ca.pem as \(installed)"))
        #expect(try String(contentsOfFile: installed, encoding: .utf8) == String(contentsOfFile: scratch.caDirectory + "/ca.pem", encoding: .utf8))
        #expect((try FileManager.default.attributesOfItem(atPath: installed)[.posixPermissions] as? Int) == 0o644)
        #expect(try FileManager.default.contentsOfDirectory(atPath: scratch.trustDirectory) == [name])
        #expect(failing.0 == 1 && failing.2.contains("/bin/false failed (exit 1)"), "\(failing.2)")
    }
}
