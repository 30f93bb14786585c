// The head of an HTTP response: what the origin sent (after hop-by-hop removal) or what we send.
// Pure value type; `serialized` renders the status line and fields for the wire.

/// A response status line and header section.
public struct HTTPResponseHead: Sendable, Equatable {
    public var status: Int
    public var reason: String
    public var headers: HTTPHeaders

    public init(status: Int, reason: String? = nil, headers: HTTPHeaders = HTTPHeaders()) {
        self.status = status
        self.reason = reason ?? HTTPResponseHead.standardReason(status)
        self.headers = headers
    }

    /// The bytes of the status line and header section, ending with the empty line.
    public func serialized(version: HTTPVersion = .http1_1) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(64 + headers.count * 40)
        out.append(contentsOf: "HTTP/\(version.major).\(version.minor) \(status) \(reason)\r\n".utf8)
        for field in headers.fields {
            out.append(contentsOf: field.name.utf8)
            out.append(contentsOf: ": ".utf8)
            out.append(contentsOf: field.value.utf8)
            out.append(contentsOf: "\r\n".utf8)
        }
        out.append(contentsOf: "\r\n".utf8)
        return out
    }

    public static func standardReason(_ status: Int) -> String {
        switch status {
        case 100: "Continue"
        case 200: "OK"
        case 203: "Non-Authoritative Information"
        case 204: "No Content"
        case 206: "Partial Content"
        case 301: "Moved Permanently"
        case 302: "Found"
        case 303: "See Other"
        case 304: "Not Modified"
        case 307: "Temporary Redirect"
        case 308: "Permanent Redirect"
        case 400: "Bad Request"
        case 401: "Unauthorized"
        case 403: "Forbidden"
        case 404: "Not Found"
        case 405: "Method Not Allowed"
        case 408: "Request Timeout"
        case 410: "Gone"
        case 411: "Length Required"
        case 412: "Precondition Failed"
        case 413: "Content Too Large"
        case 414: "URI Too Long"
        case 415: "Unsupported Media Type"
        case 416: "Range Not Satisfiable"
        case 422: "Unprocessable Content"
        case 429: "Too Many Requests"
        case 431: "Request Header Fields Too Large"
        case 500: "Internal Server Error"
        case 501: "Not Implemented"
        case 502: "Bad Gateway"
        case 503: "Service Unavailable"
        case 504: "Gateway Timeout"
        case 505: "HTTP Version Not Supported"
        case 508: "Loop Detected"
        default: "Status \(status)"
        }
    }
}

/// Header fields that describe one connection and are never forwarded or stored (RFC 9110 section 7.6.1),
/// plus the fields named in the message's own Connection header.
public enum HopByHop {
    public static let names: [String] = [
        "Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate", "Proxy-Authorization",
        "TE", "Trailer", "Transfer-Encoding", "Upgrade",
    ]

    /// Removes hop-by-hop fields and every field the Connection header names.
    public static func strip(_ headers: inout HTTPHeaders) {
        let named = headers.tokens("Connection").map(String.init)
        headers.removeAll { field in
            names.contains { $0.equalsIgnoringASCIICase(field.name) }
                || named.contains { $0.equalsIgnoringASCIICase(field.name) }
        }
    }
}

/// A response head whose fixed part is rendered once and sent many times (a stored entry's status and fields).
///
/// `bytes` holds the HTTP/1.1 status line and every field of `headers` that the server may send as is, each
/// ending in CRLF, without the empty line that ends the head. Left out: hop-by-hop fields (and the fields the
/// Connection header names), Content-Length (the server sets it), and the `excluded` names (the fields that
/// change per response and travel with it, e.g. Age, Cache-Status, X-Cache). `headers` keeps exactly the fields
/// written in `bytes`, in order, for sinks that cannot use the bytes.
public struct SerializedResponseHead: Sendable, Equatable {
    public let status: Int
    public let reason: String
    /// The fields rendered in `bytes`, in order.
    public let headers: HTTPHeaders
    /// Status line and fields, CRLF after each, no final empty line.
    public let bytes: [UInt8]
    /// Whether `headers` has a Date field (the server adds its own only when it has none).
    public let hasDate: Bool

    public init(_ head: HTTPResponseHead, excluding excluded: [String] = []) {
        var headers = head.headers
        HopByHop.strip(&headers)
        headers.removeAll { field in
            field.name.equalsIgnoringASCIICase("Content-Length") || excluded.contains { $0.equalsIgnoringASCIICase(field.name) }
        }
        status = head.status
        reason = head.reason
        self.headers = headers
        hasDate = headers.contains("Date")
        var full = HTTPResponseHead(status: head.status, reason: head.reason, headers: headers).serialized(version: .http1_1)
        full.removeLast(2)  // the empty line: the server appends the per-response fields first
        bytes = full
    }
}
