// The one error type of the local CA: which file, what is wrong with it, and the command that fixes it, in one line
// ("/var/lib/imagecached/ca/ca.key: readable by others (mode 0644); fix: chmod 600 /var/lib/imagecached/ca/ca.key").
// The daemon refuses to start with it (exit 1), a reload is refused with it, and `imagecached ca` prints it.

/// A local CA that cannot be used, made or written.
public struct CAError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The file or directory concerned.
    public var path: String
    /// What is wrong.
    public var problem: String
    /// What to run or do about it.
    public var fix: String

    public init(path: String, problem: String, fix: String) {
        self.path = path
        self.problem = problem
        self.fix = fix
    }

    public var description: String { "\(path): \(problem); fix: \(fix)" }

    /// The fix that replaces the CA: every client must then trust the new one.
    static let replace = "imagecached ca init --replace (then trust the new certificate again: imagecached ca install)"
}
