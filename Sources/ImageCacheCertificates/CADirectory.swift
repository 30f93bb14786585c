// CADirectory: the local CA's files (`intercept-ca-dir`), as ssh keeps its keys.
//
//   <dir>/          0700, made with its parents if missing (its mode is set to 0700 when a CA is made in it)
//   <dir>/ca.key    the key, PKCS#8 PEM, 0600, owned by the effective uid; written first
//   <dir>/ca.pem    the certificate, PEM, 0644 (what clients trust; `imagecached ca path` prints it)
//
// Writing: each file is written as <name>.tmp, opened with O_CREAT | O_EXCL | O_NOFOLLOW at its final mode (a stale
// .tmp from a crash is removed first), fsynced, then renamed into place; the directory is fsynced last. The key goes
// first, so a crash leaves at worst a key without a certificate, which loading refuses with the fix.
// Loading: both files or neither (nil: no CA yet). The key must be a regular file owned by the effective uid with no
// group or other bits, and the certificate's key; anything else is a CAError naming the fix (chmod 600, chown,
// `imagecached ca init --replace`). Nothing here is cached: every load reads the files (a reload sees a new CA).

public import Foundation
public import ImageCacheHTTP
internal import ImageCacheSystem
internal import SwiftASN1
internal import X509
#if canImport(Glibc)
internal import Glibc
#endif

public struct CADirectory: Sendable {
    public let path: String

    public init(path: String) {
        self.path = path
    }

    public var certificatePath: String { path + "/ca.pem" }
    public var keyPath: String { path + "/ca.key" }

    /// Mode of ca.key.
    public static let keyMode: mode_t = 0o600
    /// Mode of ca.pem.
    public static let certificateMode: mode_t = 0o644
    /// Mode of the directory.
    public static let directoryMode: mode_t = 0o700

    // MARK: - Loading

    /// The CA in the directory; nil when neither file is there.
    public func load() throws(CAError) -> LocalCA? {
        let hasKey = exists(keyPath), hasCertificate = exists(certificatePath)
        if !hasKey && !hasCertificate { return nil }
        guard hasCertificate else {
            throw CAError(path: keyPath, problem: "a key without its certificate (\(certificatePath) is missing)", fix: CAError.replace)
        }
        guard hasKey else {
            throw CAError(path: certificatePath, problem: "a certificate without its key (\(keyPath) is missing)", fix: CAError.replace)
        }
        let keyPEM = try readKey()
        let certificatePEM: String
        do {
            certificatePEM = try String(contentsOfFile: certificatePath, encoding: .utf8)
        } catch {
            throw CAError(path: certificatePath, problem: "cannot be read (\(error.localizedDescription))",
                          fix: "make it readable by the daemon's user, or " + CAError.replace)
        }
        return try LocalCA(certificatePEM: certificatePEM, keyPEM: keyPEM, certificatePath: certificatePath, keyPath: keyPath)
    }

    /// The certificate alone (what clients trust), without the key: `imagecached ca install` reads it as root, while
    /// the key belongs to the daemon's user. Its PEM as written, and its fingerprint.
    public func readCertificate() throws(CAError) -> (pem: String, fingerprint: String) {
        guard exists(certificatePath) else {
            throw CAError(path: certificatePath, problem: "no CA certificate here",
                          fix: "run imagecached ca init, or start the daemon with intercept-hosts set (or give --intercept-ca-dir)")
        }
        let pem: String
        do {
            pem = try String(contentsOfFile: certificatePath, encoding: .utf8)
        } catch {
            throw CAError(path: certificatePath, problem: "cannot be read (\(error.localizedDescription))", fix: "run this as root")
        }
        do {
            let document = try PEMDocument(pemString: pem)
            guard document.discriminator == "CERTIFICATE" else { throw CAError(path: certificatePath, problem: "", fix: "") }
            _ = try Certificate(derEncoded: document.derBytes)
            return (pem, LocalCA.fingerprint(der: document.derBytes))
        } catch {
            throw CAError(path: certificatePath, problem: "not a certificate in PEM", fix: CAError.replace)
        }
    }

    /// The key's text, after its type, owner and mode are checked on the open descriptor.
    private func readKey() throws(CAError) -> String {
        let fd = open(keyPath, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)
        guard fd >= 0 else {
            let code = errno
            throw CAError(path: keyPath, problem: "cannot be opened (\(String(cString: strerror(code))))",
                          fix: code == ELOOP ? "replace the symbolic link with the file" : "make it the daemon user's, or " + CAError.replace)
        }
        defer { closeDescriptor(fd) }
        let ownership: FileOwnership
        do {
            ownership = try FileOwnership.of(fd)
        } catch {
            throw CAError(path: keyPath, problem: "cannot be examined (\(error))", fix: CAError.replace)
        }
        guard ownership.isRegularFile else {
            throw CAError(path: keyPath, problem: "not a regular file", fix: CAError.replace)
        }
        let euid = geteuid()
        guard ownership.uid == euid else {
            throw CAError(path: keyPath, problem: "owned by uid \(ownership.uid), not by this process's uid \(euid)",
                          fix: "chown \(euid) \(keyPath)")
        }
        let mode = ownership.permissions & 0o777
        guard mode & 0o077 == 0 else {
            throw CAError(path: keyPath, problem: "open to others (mode \(String(mode, radix: 8).leftPadded(to: 4)))",
                          fix: "chmod 600 \(keyPath)")
        }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        while bytes.count < 1 << 20 {
            let n = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if n < 0 && errno == EINTR { continue }
            guard n >= 0 else { throw CAError(path: keyPath, problem: "cannot be read", fix: CAError.replace) }
            if n == 0 { break }
            bytes.append(contentsOf: chunk[0..<n])
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    // MARK: - Making

    /// Makes a new CA for `hosts` and writes it; refuses when a CA (or either file) is there, unless `replace`.
    @discardableResult
    public func create(hosts: InterceptHosts, hostname: String = CADirectory.hostname(), now: Date = Date(),
                       replace: Bool = false) throws(CAError) -> LocalCA {
        if !replace && (exists(keyPath) || exists(certificatePath)) {
            throw CAError(path: path, problem: "a CA is already there (\(certificatePath))",
                          fix: "keep it, or make a new one with " + CAError.replace)
        }
        guard !hosts.isEmpty else {
            throw CAError(path: path, problem: "intercept-hosts is empty, and the CA is made for its hosts",
                          fix: "set intercept-hosts (names, *.suffix, IP addresses, or * for an unconstrained CA) first")
        }
        try makeDirectory()
        let ca = LocalCA.make(hosts: hosts, hostname: hostname, now: now)
        try write(Array(ca.privateKeyPEM.utf8), to: keyPath, mode: Self.keyMode)
        try write(Array(ca.certificatePEM.utf8), to: certificatePath, mode: Self.certificateMode)
        syncDirectory()
        return ca
    }

    /// The CA in the directory, or a new one for `hosts` when there is none (`created` says which).
    public func loadOrCreate(hosts: InterceptHosts, hostname: String = CADirectory.hostname(),
                             now: Date = Date()) throws(CAError) -> (ca: LocalCA, created: Bool) {
        if let ca = try load() { return (ca, false) }
        return (try create(hosts: hosts, hostname: hostname, now: now), true)
    }

    /// This machine's name, for the CA's common name.
    public static func hostname() -> String {
        var buffer = [CChar](repeating: 0, count: 256)
        guard gethostname(&buffer, buffer.count - 1) == 0 else { return "localhost" }
        let name = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        return name.isEmpty ? "localhost" : name
    }

    private func makeDirectory() throws(CAError) {
        do {
            try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true,
                                                    attributes: [.posixPermissions: Int(Self.directoryMode)])
        } catch {
            throw CAError(path: path, problem: "cannot be made (\(error.localizedDescription))",
                          fix: "make it writable by the daemon's user, or set intercept-ca-dir")
        }
        guard chmod(path, Self.directoryMode) == 0 else {
            throw CAError(path: path, problem: "cannot be set to mode 0700 (\(String(cString: strerror(errno))))",
                          fix: "make it the daemon user's, or set intercept-ca-dir")
        }
    }

    /// Writes `bytes` to `<destination>.tmp` (created exclusively at `mode`), then renames it to `destination`.
    private func write(_ bytes: [UInt8], to destination: String, mode: mode_t) throws(CAError) {
        let temporary = destination + ".tmp"
        unlink(temporary)   // a stale one from a crash
        func failure(_ call: String) -> CAError {
            let code = errno
            unlink(temporary)
            return CAError(path: destination, problem: "cannot be written (\(call): \(String(cString: strerror(code))))",
                           fix: "make \(path) writable by the daemon's user")
        }
        let fd = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode)
        guard fd >= 0 else { throw failure("open") }
        // The umask may have taken bits from `mode` (0644 under UMask=0077): set it exactly.
        guard fchmod(fd, mode) == 0 else {
            closeDescriptor(fd)
            throw failure("fchmod")
        }
        var written = 0
        while written < bytes.count {
            let n = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress! + written, $0.count - written) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else {
                closeDescriptor(fd)
                throw failure("write")
            }
            written += n
        }
        guard fsync(fd) == 0 else {
            closeDescriptor(fd)
            throw failure("fsync")
        }
        closeDescriptor(fd)
        guard rename(temporary, destination) == 0 else { throw failure("rename") }
    }

    private func syncDirectory() {
        let fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { return }
        _ = fsync(fd)
        closeDescriptor(fd)
    }

    /// Whether `file` is there (a link counts, as itself: it is not followed). faccessat(2), not `try?` around
    /// FileManager: inlined into the typed-throws callers, Swift 6.3.1's optimiser let the `try?`'s error escape as
    /// theirs in release builds, so a first start with interception on crashed printing a garbage CAError.
    private func exists(_ file: String) -> Bool {
        faccessat(AT_FDCWD, file, F_OK, AT_SYMLINK_NOFOLLOW) == 0
    }
}

private extension String {
    func leftPadded(to width: Int) -> String {
        count >= width ? self : String(repeating: "0", count: width - count) + self
    }
}
