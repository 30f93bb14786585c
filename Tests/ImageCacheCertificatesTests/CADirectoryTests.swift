// The local CA's files: modes and owner as written, a second init refused and --replace, and each broken state
// refused at load with the fix in the message.

import Foundation
import ImageCacheCertificates
import ImageCacheHTTP
import Testing

@Suite("The local CA's directory", .timeLimit(.minutes(1)))
struct CADirectoryTests {
    static func hosts() throws -> InterceptHosts { try InterceptHosts.list("images.example.com") }

    /// A CA directory inside a fresh temporary directory (not made yet).
    static func directory(_ temporary: TemporaryDirectory) -> CADirectory { CADirectory(path: temporary.path + "/state/ca") }

    static func expectRefusal(_ directory: CADirectory, path: String, problem: String, fix: String,
                              sourceLocation: SourceLocation = #_sourceLocation) {
        #expect(sourceLocation: sourceLocation) {
            _ = try directory.load()
        } throws: { error in
            guard let error = error as? CAError else { return false }
            return error.path == path && error.problem.contains(problem) && error.fix.contains(fix)
                && !"\(error)".contains("\n")
        }
    }

    @Test("a new CA: the directory 0700, ca.key 0600 and ca.pem 0644, all this user's, no .tmp left; loading reads the same CA back")
    func modes() throws {
        // Given
        let temporary = try TemporaryDirectory()
        defer { temporary.remove() }
        let directory = CADirectoryTests.directory(temporary)
        // When
        let made = try directory.create(hosts: CADirectoryTests.hosts())
        // Then
        let euid = geteuid()
        #expect(try modeAndOwner(directory.path) == (0o700, euid))
        #expect(try modeAndOwner(directory.keyPath) == (0o600, euid))
        #expect(try modeAndOwner(directory.certificatePath) == (0o644, euid))
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path).sorted() == ["ca.key", "ca.pem"])
        let key = try String(contentsOfFile: directory.keyPath, encoding: .utf8)
        #expect(key.hasPrefix("-----BEGIN PRIVATE KEY-----"))   // PKCS#8
        let loaded = try #require(try directory.load())
        #expect(loaded.fingerprint == made.fingerprint)
        #expect(loaded.constraintSummary == made.constraintSummary)
    }

    @Test("the modes hold under a umask of 077, as systemd's UMask=0077 sets it")
    func umask() throws {
        let temporary = try TemporaryDirectory()
        defer { temporary.remove() }
        let directory = CADirectoryTests.directory(temporary)
        let previous = Foundation.umask(0o077)
        defer { _ = Foundation.umask(previous) }
        try directory.create(hosts: CADirectoryTests.hosts())
        #expect(try modeAndOwner(directory.certificatePath).mode == 0o644)
        #expect(try modeAndOwner(directory.keyPath).mode == 0o600)
    }

    @Test("an empty directory has no CA; loadOrCreate makes one the first time and loads it the second")
    func loadOrCreate() throws {
        let temporary = try TemporaryDirectory()
        defer { temporary.remove() }
        let directory = CADirectoryTests.directory(temporary)
        #expect(try directory.load() == nil)
        let first = try directory.loadOrCreate(hosts: CADirectoryTests.hosts())
        let second = try directory.loadOrCreate(hosts: CADirectoryTests.hosts())
        #expect(first.created && !second.created)
        #expect(first.ca.fingerprint == second.ca.fingerprint)
    }

    @Test("a second init is refused, naming --replace; --replace makes a new CA (a new fingerprint) with the same modes")
    func replace() throws {
        // Given a CA
        let temporary = try TemporaryDirectory()
        defer { temporary.remove() }
        let directory = CADirectoryTests.directory(temporary)
        let first = try directory.create(hosts: CADirectoryTests.hosts())
        // When another is asked for
        #expect {
            try directory.create(hosts: CADirectoryTests.hosts())
        } throws: { error in
            (error as? CAError)?.problem.contains("a CA is already there") == true && "\(error)".contains("imagecached ca init --replace")
        }
        let unchanged = try #require(try directory.load())
        let replaced = try directory.create(hosts: try InterceptHosts.list("images.example.com", "203.0.113.5"), replace: true)
        // Then
        #expect(unchanged.fingerprint == first.fingerprint)
        #expect(replaced.fingerprint != first.fingerprint)
        #expect(try directory.load()?.fingerprint == replaced.fingerprint)
        #expect(try modeAndOwner(directory.keyPath).mode == 0o600)
        #expect(try modeAndOwner(directory.certificatePath).mode == 0o644)
    }

    @Test("init with an empty intercept-hosts is refused, saying what to set")
    func noHosts() throws {
        let temporary = try TemporaryDirectory()
        defer { temporary.remove() }
        #expect {
            try CADirectoryTests.directory(temporary).create(hosts: .none)
        } throws: { error in
            (error as? CAError)?.fix.contains("set intercept-hosts") == true
        }
    }

    @Test("a key that is not the certificate's is refused, naming ca init --replace")
    func mismatchedKey() throws {
        // Given two CAs, and the first one's certificate beside the second one's key
        let temporary = try TemporaryDirectory()
        defer { temporary.remove() }
        let directory = CADirectoryTests.directory(temporary)
        let other = CADirectory(path: temporary.path + "/other")
        try directory.create(hosts: CADirectoryTests.hosts())
        try other.create(hosts: CADirectoryTests.hosts())
        let otherKey = try String(contentsOfFile: other.keyPath, encoding: .utf8)
        try otherKey.write(toFile: directory.keyPath, atomically: false, encoding: .utf8)
        // Then
        CADirectoryTests.expectRefusal(directory, path: directory.keyPath, problem: "not the key of \(directory.certificatePath)",
                                       fix: "imagecached ca init --replace")
    }

    @Test("a key open to others (0644, or 0640) is refused, naming chmod 600", arguments: [0o644, 0o640, 0o604])
    func openKey(mode: Int) throws {
        let temporary = try TemporaryDirectory()
        defer { temporary.remove() }
        let directory = CADirectoryTests.directory(temporary)
        try directory.create(hosts: CADirectoryTests.hosts())
        #expect(chmod(directory.keyPath, mode_t(mode)) == 0)
        CADirectoryTests.expectRefusal(directory, path: directory.keyPath, problem: "open to others (mode 0\(String(mode, radix: 8)))",
                                       fix: "chmod 600 \(directory.keyPath)")
    }

    @Test("a key owned by another user is refused, naming chown (as root only: only root can give a file away)")
    func otherOwner() throws {
        guard geteuid() == 0 else { return }
        let temporary = try TemporaryDirectory()
        defer { temporary.remove() }
        let directory = CADirectoryTests.directory(temporary)
        try directory.create(hosts: CADirectoryTests.hosts())
        #expect(chown(directory.keyPath, 65534, 65534) == 0)
        CADirectoryTests.expectRefusal(directory, path: directory.keyPath, problem: "owned by uid 65534, not by this process's uid 0",
                                       fix: "chown 0 \(directory.keyPath)")
    }

    @Test("a key without its certificate (ca.pem missing) is refused, naming ca init --replace; so is a certificate without its key")
    func missingFile() throws {
        let temporary = try TemporaryDirectory()
        defer { temporary.remove() }
        let directory = CADirectoryTests.directory(temporary)
        try directory.create(hosts: CADirectoryTests.hosts())
        let certificate = try Data(contentsOf: URL(fileURLWithPath: directory.certificatePath))
        try FileManager.default.removeItem(atPath: directory.certificatePath)
        CADirectoryTests.expectRefusal(directory, path: directory.keyPath, problem: "a key without its certificate",
                                       fix: "imagecached ca init --replace")
        // and the other way round
        try certificate.write(to: URL(fileURLWithPath: directory.certificatePath))
        try FileManager.default.removeItem(atPath: directory.keyPath)
        CADirectoryTests.expectRefusal(directory, path: directory.certificatePath, problem: "a certificate without its key",
                                       fix: "imagecached ca init --replace")
    }

    @Test("a key that is a symbolic link, or not a key, is refused")
    func notAKey() throws {
        let temporary = try TemporaryDirectory()
        defer { temporary.remove() }
        let directory = CADirectoryTests.directory(temporary)
        try directory.create(hosts: CADirectoryTests.hosts())
        let elsewhere = temporary.path + "/elsewhere.key"
        try FileManager.default.moveItem(atPath: directory.keyPath, toPath: elsewhere)
        try FileManager.default.createSymbolicLink(atPath: directory.keyPath, withDestinationPath: elsewhere)
        CADirectoryTests.expectRefusal(directory, path: directory.keyPath, problem: "cannot be opened", fix: "symbolic link")
        try FileManager.default.removeItem(atPath: directory.keyPath)
        #expect(FileManager.default.createFile(atPath: directory.keyPath, contents: Data("garbage\n".utf8), attributes: [.posixPermissions: 0o600]))
        CADirectoryTests.expectRefusal(directory, path: directory.keyPath, problem: "not an ECDSA P-256 private key",
                                       fix: "imagecached ca init --replace")
    }
}
