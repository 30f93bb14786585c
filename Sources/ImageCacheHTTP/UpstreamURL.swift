// UpstreamURL: a parsed, normalised absolute http(s) URL (the cache key's URL, the fetch and reverse-proxy targets).
//
// Data model: a `CacheKey` names one cached resource by its normalised absolute upstream URL. Immutable values,
// shared freely between queues; nothing here is owned or locked.
//
// Normalisation (RFC 3986 section 6.2.2, scheme-based 6.2.3), so that equivalent URLs share one entry:
//   - scheme and host lower-cased; an IPv6 literal is kept without brackets and lower-cased;
//   - the scheme's default port (80 for http, 443 for https) and an empty port are dropped;
//   - an empty path becomes "/"; the fragment is dropped (it never reaches the origin);
//   - percent-escapes get upper-case hex digits, escapes of unreserved characters (ALPHA DIGIT - . _ ~) are decoded;
//   - characters not allowed in a path or query (e.g. `"`, `<`, `{`, non-ASCII) are percent-encoded as browsers do;
//   - dot-segments are removed from the path (RFC 3986 section 5.2.4); the query is kept as sent otherwise
//     (an empty "?" is kept: it is a different URI).
// Refused: other schemes, user credentials, a missing host, bad ports, control characters and spaces, over 8192 bytes.

/// Why a URL was refused; `reason` is one line for logs and error bodies.
public struct URLParseError: Error, Sendable, Equatable, CustomStringConvertible {
    public var reason: String
    public init(reason: String) { self.reason = reason }
    public var description: String { reason }
}

/// A parsed, normalised absolute http(s) URL.
public struct UpstreamURL: Sendable, Hashable, CustomStringConvertible {
    /// "http" or "https".
    public let scheme: String
    /// Lower-cased; an IPv6 literal without brackets.
    public let host: String
    /// nil when it is the scheme's default port.
    public let port: Int?
    /// Starts with "/"; normalised as described above; no fragment.
    public let pathAndQuery: String

    /// Longest URL accepted, bytes.
    public static let maxLength = 8192

    /// "scheme://host[:port]/path?query", IPv6 literals in brackets.
    public var string: String {
        var s = ""
        forEachPart { s += $0 }
        return s
    }

    /// Calls `body` with the pieces of `string`, in order, without building it (the disk tier hashes them).
    package func forEachPart(_ body: (String) -> Void) {
        body(scheme)
        body("://")
        if host.utf8.contains(UInt8(ascii: ":")) {
            body("["); body(host); body("]")
        } else {
            body(host)
        }
        if let port { body(":"); body(String(port)) }
        body(pathAndQuery)
    }

    public var description: String { string }

    /// "host[:port]" as a Host field value.
    public var authority: String {
        let h = host.contains(":") ? "[" + host + "]" : host
        return port.map { h + ":" + String($0) } ?? h
    }

    /// The port connected to, default included.
    public var effectivePort: Int { port ?? (scheme == "https" ? 443 : 80) }

    public static func parse(_ text: String) throws(URLParseError) -> UpstreamURL {
        let bytes = Array(text.utf8)
        guard bytes.count <= maxLength else { throw URLParseError(reason: "URL too long") }
        guard !bytes.contains(where: { $0 <= 0x20 || $0 == 0x7F }) else {
            throw URLParseError(reason: "invalid character in URL")
        }
        let (scheme, colon) = try parseScheme(bytes)

        // "//" authority
        var i = colon + 1
        guard i + 1 < bytes.count, bytes[i] == 0x2F, bytes[i + 1] == 0x2F else { throw URLParseError(reason: "missing host") }
        i += 2
        let authorityStart = i
        while i < bytes.count, bytes[i] != 0x2F, bytes[i] != 0x3F, bytes[i] != 0x23 { i += 1 }
        let authority = bytes[authorityStart..<i]
        guard !authority.contains(0x40) else { throw URLParseError(reason: "user credentials in URLs are not allowed") }
        let (hostBytes, portBytes, isIPv6) = try splitAuthority(authority)
        let host = try parseHost(hostBytes, isIPv6: isIPv6)
        let port = try parsePort(portBytes, scheme: scheme)

        let path = normalisedPathAndQuery(bytes[i...])
        return UpstreamURL(scheme: scheme, host: host, port: port, pathAndQuery: String(decoding: path, as: UTF8.self))
    }

    /// scheme ":": the scheme lower-cased (http or https) and the index of its colon.
    private static func parseScheme(_ bytes: [UInt8]) throws(URLParseError) -> (scheme: String, colon: Int) {
        guard let colon = bytes.firstIndex(of: 0x3A), colon > 0, isAlpha(bytes[0]),
              bytes[1..<colon].allSatisfy({ isAlpha($0) || isDigit($0) || $0 == 0x2B || $0 == 0x2D || $0 == 0x2E })
        else { throw URLParseError(reason: "not an absolute URL") }
        let scheme = String(decoding: bytes[..<colon].map(lowercased), as: UTF8.self)
        guard scheme == "http" || scheme == "https" else {
            throw URLParseError(reason: "unsupported scheme \"\(scheme)\" (only http and https)")
        }
        return (scheme, colon)
    }

    /// The authority's host (an IPv6 literal without its brackets) and port (nil: none; may be empty).
    private static func splitAuthority(_ authority: ArraySlice<UInt8>) throws(URLParseError)
        -> (host: ArraySlice<UInt8>, port: ArraySlice<UInt8>?, isIPv6: Bool) {
        if authority.first == 0x5B {  // "[" IPv6 "]"
            guard let close = authority.firstIndex(of: 0x5D) else { throw URLParseError(reason: "invalid host") }
            let host = authority[(authority.startIndex + 1)..<close]
            let rest = authority[(close + 1)...]
            if rest.isEmpty { return (host, nil, true) }
            guard rest.first == 0x3A else { throw URLParseError(reason: "invalid host") }
            return (host, rest.dropFirst(), true)
        } else if let portColon = authority.lastIndex(of: 0x3A) {
            return (authority[..<portColon], authority[(portColon + 1)...], false)
        } else {
            return (authority, nil, false)
        }
    }

    /// The host, checked and lower-cased.
    private static func parseHost(_ hostBytes: ArraySlice<UInt8>, isIPv6: Bool) throws(URLParseError) -> String {
        guard !hostBytes.isEmpty else { throw URLParseError(reason: "missing host") }
        if isIPv6 {
            guard hostBytes.allSatisfy({ isHexDigit($0) || $0 == 0x3A || $0 == 0x2E }), hostBytes.contains(0x3A) else {
                throw URLParseError(reason: "invalid host")
            }
        } else {
            guard hostBytes.allSatisfy({ isAlpha($0) || isDigit($0) || $0 == 0x2D || $0 == 0x2E || $0 == 0x5F || $0 == 0x7E })
            else { throw URLParseError(reason: "invalid host") }
        }
        return String(decoding: hostBytes.map(lowercased), as: UTF8.self)
    }

    /// The port, nil when absent, empty or the scheme's default.
    private static func parsePort(_ portBytes: ArraySlice<UInt8>?, scheme: String) throws(URLParseError) -> Int? {
        guard let portBytes, !portBytes.isEmpty else { return nil }
        guard portBytes.count <= 5, portBytes.allSatisfy(isDigit) else { throw URLParseError(reason: "invalid port") }
        let value = portBytes.reduce(0) { $0 * 10 + Int($1 - 0x30) }
        guard value >= 1, value <= 65_535 else { throw URLParseError(reason: "invalid port") }
        return value == (scheme == "https" ? 443 : 80) ? nil : value
    }

    /// path [ "?" query ] [ "#" fragment ]: the path and query normalised ("/" for an empty path), the fragment
    /// dropped.
    private static func normalisedPathAndQuery(_ rest: ArraySlice<UInt8>) -> [UInt8] {
        var i = rest.startIndex
        while i < rest.endIndex, rest[i] != 0x3F, rest[i] != 0x23 { i += 1 }
        var path = normaliseEscapes(rest[rest.startIndex..<i], allowingQueryCharacters: false)
        path = removeDotSegments(path)
        if path.isEmpty { path = [0x2F] }
        if i < rest.endIndex, rest[i] == 0x3F {
            let queryStart = i
            while i < rest.endIndex, rest[i] != 0x23 { i += 1 }
            path += normaliseEscapes(rest[queryStart..<i], allowingQueryCharacters: true)
        }
        return path
    }

    /// `origin`'s scheme, host and port with `pathAndQuery`, without a parse, when `pathAndQuery` is already in
    /// normal form: it starts with "/", every byte is one normalisation keeps as it is (no "%", "#", space, control,
    /// non-ASCII or other character that would be escaped) and no path segment is "." or "..". Then the result equals
    /// `parse` of the same absolute URL (the tests check it does); nil otherwise, and the caller parses.
    /// The reverse proxy's hit path: most targets are plain paths.
    package static func withNormalPath(origin: UpstreamURL, _ pathAndQuery: String) -> UpstreamURL? {
        // Conservative length bound: near the limit, the full parse decides.
        guard pathAndQuery.utf8.count + origin.scheme.utf8.count + origin.host.utf8.count + 12 <= maxLength,
              isNormalPathAndQuery(pathAndQuery) else { return nil }
        return UpstreamURL(scheme: origin.scheme, host: origin.host, port: origin.port, pathAndQuery: pathAndQuery)
    }

    /// `origin`'s scheme, host and port with `pathAndQuery`, which the caller found in normal form
    /// (`isNormalPathAndQuery`); nil near the length limit, where the full parse decides.
    package static func withCheckedNormalPath(origin: UpstreamURL, _ pathAndQuery: String) -> UpstreamURL? {
        guard pathAndQuery.utf8.count + origin.scheme.utf8.count + origin.host.utf8.count + 12 <= maxLength else { return nil }
        return UpstreamURL(scheme: origin.scheme, host: origin.host, port: origin.port, pathAndQuery: pathAndQuery)
    }

    /// Whether an origin-form target is already what `parse` would make of its path and query (see `withNormalPath`).
    package static func isNormalPathAndQuery(_ pathAndQuery: String) -> Bool {
        var inQuery = false
        var segmentStart = true
        var segmentDots = 0  // dots seen since the segment started, while it holds nothing else
        var first = true
        for b in pathAndQuery.utf8 {
            if first {
                guard b == 0x2F else { return false }
                first = false
                continue
            }
            if inQuery {
                guard isAllowed(b, query: true) else { return false }
                continue
            }
            if b == 0x2F || b == 0x3F {
                if segmentStart && (segmentDots == 1 || segmentDots == 2) { return false }
                segmentStart = true
                segmentDots = 0
                if b == 0x3F { inQuery = true }
                continue
            }
            guard isAllowed(b, query: false) else { return false }
            if segmentStart && b == 0x2E {
                segmentDots += 1
            } else {
                segmentStart = false
            }
        }
        if first { return false }
        if !inQuery && segmentStart && (segmentDots == 1 || segmentDots == 2) { return false }
        return true
    }

    /// An origin-form target ("/a/./b/../%70ng?x") as `parse` normalises path and query ("/a/png?x"): escapes of
    /// unreserved characters decoded, other escapes upper-cased, disallowed bytes escaped, dot segments removed,
    /// a fragment dropped. Routing decides on this form, so every spelling of a path goes where the path goes.
    package static func normalisedOriginForm(_ target: String) -> String {
        let bytes = Array(target.utf8)
        var i = 0
        while i < bytes.count, bytes[i] != 0x3F, bytes[i] != 0x23 { i += 1 }
        var path = removeDotSegments(normaliseEscapes(bytes[..<i], allowingQueryCharacters: false))
        if path.isEmpty { path = [0x2F] }
        if i < bytes.count, bytes[i] == 0x3F {
            let queryStart = i
            while i < bytes.count, bytes[i] != 0x23 { i += 1 }
            path += normaliseEscapes(bytes[queryStart..<i], allowingQueryCharacters: true)
        }
        return String(decoding: path, as: UTF8.self)
    }

    private init(scheme: String, host: String, port: Int?, pathAndQuery: String) {
        self.scheme = scheme
        self.host = host
        self.port = port
        self.pathAndQuery = pathAndQuery
    }

    // MARK: - Normalisation helpers

    private static func isAlpha(_ b: UInt8) -> Bool { (b | 0x20) >= 0x61 && (b | 0x20) <= 0x7A }
    private static func isDigit(_ b: UInt8) -> Bool { b >= 0x30 && b <= 0x39 }
    private static func isHexDigit(_ b: UInt8) -> Bool { isDigit(b) || ((b | 0x20) >= 0x61 && (b | 0x20) <= 0x66) }
    private static func lowercased(_ b: UInt8) -> UInt8 { b >= 0x41 && b <= 0x5A ? b | 0x20 : b }
    private static func isUnreserved(_ b: UInt8) -> Bool {
        isAlpha(b) || isDigit(b) || b == 0x2D || b == 0x2E || b == 0x5F || b == 0x7E
    }
    private static func hexValue(_ b: UInt8) -> UInt8 { isDigit(b) ? b - 0x30 : (b | 0x20) - 0x61 + 10 }
    private static let hexDigits = Array("0123456789ABCDEF".utf8)

    /// pchar = unreserved / pct-encoded / sub-delims / ":" / "@"; the query also allows "/" and "?" ("/" is fine in paths).
    private static func isAllowed(_ b: UInt8, query: Bool) -> Bool {
        if isUnreserved(b) { return true }
        switch b {
        case 0x21, 0x24, 0x26, 0x27, 0x28, 0x29, 0x2A, 0x2B, 0x2C, 0x3B, 0x3D: return true  // sub-delims
        case 0x3A, 0x40, 0x2F: return true  // ":" "@" "/"
        case 0x3F: return query
        default: return false
        }
    }

    /// Upper-cases escapes, decodes escaped unreserved characters, escapes characters that are not allowed.
    /// A "%" not followed by two hex digits is escaped as "%25".
    private static func normaliseEscapes(_ input: ArraySlice<UInt8>, allowingQueryCharacters query: Bool) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(input.count)
        var i = input.startIndex
        while i < input.endIndex {
            let b = input[i]
            if b == 0x25, i + 2 < input.endIndex, isHexDigit(input[i + 1]), isHexDigit(input[i + 2]) {
                let decoded = hexValue(input[i + 1]) << 4 | hexValue(input[i + 2])
                if isUnreserved(decoded) {
                    out.append(decoded)
                } else {
                    out.append(contentsOf: [0x25, hexDigits[Int(decoded >> 4)], hexDigits[Int(decoded & 0xF)]])
                }
                i += 3
                continue
            }
            if isAllowed(b, query: query) {
                out.append(b)
            } else {
                out.append(contentsOf: [0x25, hexDigits[Int(b >> 4)], hexDigits[Int(b & 0xF)]])
            }
            i += 1
        }
        return out
    }

    /// RFC 3986 section 5.2.4, on an absolute path (or an empty one).
    static func removeDotSegments(_ path: [UInt8]) -> [UInt8] {
        guard path.contains(0x2E) else { return path }
        // Split into segments after the leading "/"; "." and ".." are dropped/popped, a trailing one leaves a "/".
        var segments: [ArraySlice<UInt8>] = []
        let parts = path.split(separator: 0x2F, omittingEmptySubsequences: false)
        var trailingSlash = false
        for (n, part) in parts.enumerated() where n > 0 || !part.isEmpty {
            let isLast = n == parts.count - 1
            if part.elementsEqual([0x2E]) {
                trailingSlash = isLast
            } else if part.elementsEqual([0x2E, 0x2E]) {
                if !segments.isEmpty { segments.removeLast() }
                trailingSlash = isLast
            } else {
                segments.append(part)
                trailingSlash = false
            }
        }
        var out: [UInt8] = []
        out.reserveCapacity(path.count)
        for segment in segments {
            out.append(0x2F)
            out.append(contentsOf: segment)
        }
        if trailingSlash || out.isEmpty { out.append(0x2F) }
        return out
    }
}
