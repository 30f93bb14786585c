// The one error type of configuration loading: which key, and why its value was refused.

/// A configuration value that cannot be used. The daemon prints it and exits non-zero.

public struct ConfigError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The key as the user wrote it: a file key ("server.idle-timeout"), a flag ("--memory-limit") or a variable.
    public var key: String
    public var reason: String
    public init(key: String, reason: String) {
        self.key = key
        self.reason = reason
    }
    public var description: String { "configuration error: \(key): \(reason)" }
}
