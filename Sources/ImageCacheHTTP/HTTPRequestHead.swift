// The head of an HTTP/1.x request as the parser produced it. Pure value type.

/// HTTP protocol version of a message (1.0 or 1.1 on the client side).
public struct HTTPVersion: Sendable, Equatable, CustomStringConvertible {
    public var major: Int
    public var minor: Int
    public init(major: Int, minor: Int) {
        self.major = major
        self.minor = minor
    }
    public static let http1_0 = HTTPVersion(major: 1, minor: 0)
    public static let http1_1 = HTTPVersion(major: 1, minor: 1)
    public var description: String { "HTTP/\(major).\(minor)" }
}

/// A parsed request line and header section.
public struct HTTPRequestHead: Sendable, Equatable {
    /// The method token exactly as sent ("GET", "HEAD", ...). Methods are case-sensitive (RFC 9110 section 9.1).
    public var method: String
    /// The request target as sent: origin-form ("/a.jpg?x"), absolute-form ("http://h/a.jpg"), authority-form or "*".
    public var target: String
    public var version: HTTPVersion
    public var headers: HTTPHeaders

    public init(method: String, target: String, version: HTTPVersion = .http1_1, headers: HTTPHeaders = HTTPHeaders()) {
        self.method = method
        self.target = target
        self.version = version
        self.headers = headers
    }

    /// Whether the connection may carry another request after this one (RFC 9112 section 9.3).
    public var keepAlive: Bool {
        let connection = headers.tokens("Connection")
        if connection.contains(where: { String($0).equalsIgnoringASCIICase("close") }) { return false }
        if version.major == 1 && version.minor == 0 {
            return connection.contains(where: { String($0).equalsIgnoringASCIICase("keep-alive") })
        }
        return true
    }
}
