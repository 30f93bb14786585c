// The local CA in the daemon process (Daemon+LocalCA.swift): made at the first start with intercept-hosts, loaded at
// the next, shown on the status page and in /metrics; a host outside its constraints stops the start (exit 1) and
// refuses a reload whole; a key open to others stops the start.

import Foundation
import Testing
import ImageCacheCertificates
import ImageCacheHTTP
@testable import ImageCacheStatus
import ImageCacheTestSupport

extension DaemonProcessTests {
    /// A configuration file with intercept-hosts and intercept-ca-dir (and `extra`), beside a CA directory of its own.
    struct InterceptSetup {
        let root: URL
        let config: URL
        var caDirectory: String { root.appendingPathComponent("state/ca").path }

        init() throws {
            root = FileManager.default.temporaryDirectory.appendingPathComponent("imagecached-ca-proc-\(UUID().uuidString)")
            try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
            config = root.appendingPathComponent("imagecached.yaml")
        }

        func write(hosts: String, memoryLimit: String = "16MiB") throws {
            try "listen: 127.0.0.1:0\nmemory-limit: \(memoryLimit)\ndisk-limit: 0\nintercept-ca-dir: \(caDirectory)\nintercept-hosts: \(hosts)\n"
                .write(to: config, atomically: true, encoding: .utf8)
        }

        func remove() { try? FileManager.default.removeItem(at: root) }
    }

    @Test("the first start with intercept-hosts makes the CA and logs its path, fingerprint and how to trust it; the status page and /metrics show it; the next start loads the same CA")
    func firstStartMakesTheCA() async throws {
        // Given a configuration with intercept-hosts and no CA yet
        let setup = try InterceptSetup()
        defer { setup.remove() }
        try setup.write(hosts: "[images.example.com, \"*.cdn.example\"]")
        // When the daemon starts
        let first = try DaemonProcess(["--config", setup.config.path])
        defer { first.kill9() }
        let port = try #require(await first.port(), "\(first.log)")
        let stats = try await DaemonProcessTests.stats(port: port)
        let metrics = try await offPool { try TestClient.get(port: port, "/_imagecached/metrics") }.text
        let page = try await offPool { try TestClient.get(port: port, "/_imagecached/") }.text
        first.send(SIGTERM)
        #expect(await first.waitForExit() == 0)
        // Then the CA is there, as the log and the status say
        let directory = CADirectory(path: setup.caDirectory)
        let certificate = try directory.readCertificate()
        #expect(first.log.contains("local CA made in \(setup.caDirectory): \(directory.certificatePath), SHA-256 \(certificate.fingerprint), constrained to 2 names (images.example.com, cdn.example)"), "\(first.log)")
        #expect(first.log.contains("imagecached ca install"))
        let ca = try #require(stats.interceptCA)
        #expect(ca.certificatePath == directory.certificatePath && ca.fingerprint == certificate.fingerprint && ca.constrained)
        #expect(ca.expirySeconds > 3650 * 86_400 && ca.expirySeconds < 3654 * 86_400)
        #expect(metrics.contains("imagecached_intercept_ca_expiry_seconds "))
        #expect(page.contains("Interception CA") && page.contains(certificate.fingerprint))
        // When it starts again
        let second = try DaemonProcess(["--config", setup.config.path])
        defer { second.kill9() }
        _ = try #require(await second.port(), "\(second.log)")
        // (killed: a SIGTERM this early could come before the daemon listens for it)
        second.kill9()
        _ = await second.waitForExit()
        // Then it loads the same CA
        #expect(second.log.contains("local CA \(directory.certificatePath): SHA-256 \(certificate.fingerprint)"), "\(second.log)")
        #expect(!second.log.contains("local CA made"))
        #expect(try directory.readCertificate().fingerprint == certificate.fingerprint)
    }

    @Test("without intercept-hosts there is no CA: no files, nothing on the status page or in /metrics")
    func noHostsNoCA() async throws {
        let setup = try InterceptSetup()
        defer { setup.remove() }
        try "listen: 127.0.0.1:0\nmemory-limit: 16MiB\ndisk-limit: 0\nintercept-ca-dir: \(setup.caDirectory)\n".write(to: setup.config, atomically: true, encoding: .utf8)
        let process = try DaemonProcess(["--config", setup.config.path])
        defer { process.kill9() }
        let port = try #require(await process.port())
        let stats = try await DaemonProcessTests.stats(port: port)
        let metrics = try await offPool { try TestClient.get(port: port, "/_imagecached/metrics") }.text
        process.send(SIGTERM)
        #expect(await process.waitForExit() == 0)
        #expect(stats.interceptCA == nil && !metrics.contains("intercept_ca"))
        #expect(!FileManager.default.fileExists(atPath: setup.caDirectory))
    }

    @Test("a host outside the CA's name constraints: the start exits 1 naming ca init --replace, and a reload listing one is refused whole")
    func hostOutsideTheConstraints() async throws {
        // Given a CA made for images.example.com
        let setup = try InterceptSetup()
        defer { setup.remove() }
        let directory = CADirectory(path: setup.caDirectory)
        let made = try directory.create(hosts: try InterceptHosts.parse(["images.example.com"]))
        // When the daemon starts with evil.test listed too
        try setup.write(hosts: "[images.example.com, evil.test]")
        let refused = try DaemonProcess(["--config", setup.config.path])
        defer { refused.kill9() }
        // Then it exits 1, saying which host and what to run
        #expect(await refused.waitForExit() == 1)
        #expect(refused.log.contains("cannot start: \(directory.certificatePath): intercept-hosts lists evil.test, outside this CA's name constraints (constrained to 1 name (images.example.com)); fix: imagecached ca init --replace"), "\(refused.log)")
        #expect(try directory.readCertificate().fingerprint == made.fingerprint)

        // Given a daemon running with the list the CA covers
        try setup.write(hosts: "[images.example.com]")
        let running = try DaemonProcess(["--config", setup.config.path])
        defer { running.kill9() }
        let port = try #require(await running.port(), "\(running.log)")
        let before = try await DaemonProcessTests.stats(port: port)
        #expect(before.interceptCA?.fingerprint == made.fingerprint)
        // When a reload lists evil.test (and a new memory limit)
        try setup.write(hosts: "[images.example.com, evil.test]", memoryLimit: "8MiB")
        running.send(SIGHUP)
        #expect(await running.waitForLog("reload refused"))
        let afterRefusal = try await DaemonProcessTests.stats(port: port)
        // Then nothing of it applies, and it is counted as refused
        #expect(running.log.contains("intercept-hosts lists evil.test, outside this CA's name constraints"))
        #expect(afterRefusal.reloadFailures == 1 && afterRefusal.reloads == 0)
        #expect(afterRefusal.memory.limitBytes == 16 << 20)
        #expect(afterRefusal.interceptCA?.fingerprint == made.fingerprint)

        // When the CA is replaced for the new list (ca init --replace) and the daemon reloads
        let replaced = try directory.create(hosts: try InterceptHosts.parse(["images.example.com", "evil.test"]), replace: true)
        running.send(SIGHUP)
        #expect(await running.waitForLog("reload: a new local CA (SHA-256 \(replaced.fingerprint)"), "\(running.log)")
        // (the CA line comes before the settings are applied: wait for the line that ends the reload)
        #expect(await running.waitForLog("reloaded: memory limit \(8 << 20) bytes"), "\(running.log)")
        let afterReplace = try await DaemonProcessTests.stats(port: port)
        running.send(SIGTERM)
        // Then the reload applies, with the new CA
        #expect(afterReplace.reloads == 1 && afterReplace.memory.limitBytes == 8 << 20)
        #expect(afterReplace.interceptCA?.fingerprint == replaced.fingerprint)
        #expect(await running.waitForExit() == 0)
    }

    @Test("a CA key open to others stops the start with exit 1 and chmod 600 in the message")
    func keyOpenToOthers() async throws {
        let setup = try InterceptSetup()
        defer { setup.remove() }
        let directory = CADirectory(path: setup.caDirectory)
        try directory.create(hosts: try InterceptHosts.parse(["images.example.com"]))
        #expect(chmod(directory.keyPath, 0o644) == 0)
        try setup.write(hosts: "[images.example.com]")
        let process = try DaemonProcess(["--config", setup.config.path])
        defer { process.kill9() }
        #expect(await process.waitForExit() == 1)
        #expect(process.log.contains("cannot start: \(directory.keyPath): open to others (mode 0644); fix: chmod 600 \(directory.keyPath)"), "\(process.log)")
    }
}
