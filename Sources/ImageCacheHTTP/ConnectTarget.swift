// The target of a CONNECT request: authority form, "host:port" or "[v6]:port" (RFC 9110 9.3.6, RFC 9112 3.2.3).
// Pure. The port is required (no default: a CONNECT names where it goes), the host is lower-cased, and only what
// can be dialled is accepted: an IPv4 or IPv6 literal, or a DNS name of letters, digits, '-', '_' and '.'
// (ASCII: an internationalised name arrives as punycode). No userinfo, no path, no percent-encoding.

/// Where a CONNECT tunnel goes.
public struct ConnectTarget: Sendable, Hashable, CustomStringConvertible {
    /// Lower-cased name, or an IP literal without brackets.
    public let host: String
    public let port: Int
    /// Set when `host` is an IP literal.
    public let address: IPAddress?

    /// Longest DNS name (RFC 1035 2.3.4).
    static let maxNameBytes = 253

    /// Parses an authority-form target; nil with the reason in `failure` when it is not one.
    public static func parse(_ text: String) -> Result<ConnectTarget, ConnectTargetError> {
        let utf8 = Array(text.utf8)
        guard !utf8.isEmpty else { return .failure(.init("empty CONNECT target")) }
        if text.contains("/") {
            return .failure(.init("CONNECT target '\(text.prefix(100))' is not a host name with a port: CONNECT takes host:port, not a URL"))
        }
        let hostPart: String
        let portPart: Substring
        if utf8.first == UInt8(ascii: "[") {
            guard let close = text.firstIndex(of: "]") else { return .failure(.init("CONNECT target '\(text.prefix(100))' has no closing ']'")) }
            hostPart = String(text[text.index(after: text.startIndex)..<close])
            let rest = text[text.index(after: close)...]
            guard rest.first == ":" else { return .failure(.init("CONNECT target '\(text.prefix(100))' has no port: use host:port")) }
            portPart = rest.dropFirst()
            guard case .v6? = IPAddress(hostPart) else {
                return .failure(.init("CONNECT target '\(text.prefix(100))' is not an IPv6 address in brackets"))
            }
        } else {
            guard let colon = text.lastIndex(of: ":") else {
                return .failure(.init("CONNECT target '\(text.prefix(100))' has no port: use host:port"))
            }
            hostPart = String(text[..<colon])
            portPart = text[text.index(after: colon)...]
            guard !hostPart.contains(":") else {
                return .failure(.init("CONNECT target '\(text.prefix(100))': an IPv6 address goes in brackets, [v6]:port"))
            }
        }
        guard !portPart.isEmpty, portPart.count <= 5, portPart.utf8.allSatisfy({ $0 >= 48 && $0 <= 57 }),
              let port = Int(portPart), (1...65535).contains(port) else {
            return .failure(.init("CONNECT target '\(text.prefix(100))' has no valid port (1-65535)"))
        }
        // A fully qualified name's trailing dot names the same host ("example.com." is "example.com").
        var host = hostPart.lowercased()
        if host.count > 1, host.hasSuffix("."), !host.hasSuffix("..") { host.removeLast() }
        if let address = IPAddress(host) {
            // A v4 literal must not come in brackets, a v6 one must.
            if case .v4 = address, utf8.first == UInt8(ascii: "[") {
                return .failure(.init("CONNECT target '\(text.prefix(100))' puts an IPv4 address in brackets"))
            }
            return .success(ConnectTarget(host: address.description, port: port, address: address))
        }
        guard isDNSName(host) else {
            return .failure(.init("CONNECT target '\(text.prefix(100))' is not a host name or IP address"))
        }
        return .success(ConnectTarget(host: host, port: port, address: nil))
    }

    /// "host:port", "[v6]:port".
    public var authority: String {
        if case .v6? = address { return "[\(host)]:\(port)" }
        return "\(host):\(port)"
    }

    public var description: String { authority }

    /// Letters, digits, '-', '_' and dots; labels of 1 to 63 bytes; at most 253 bytes (a trailing dot is removed
    /// before this is asked).
    static func isDNSName(_ name: String) -> Bool {
        let bytes = Array(name.utf8)
        guard !bytes.isEmpty, bytes.count <= maxNameBytes else { return false }
        var label = 0
        for byte in bytes {
            switch byte {
            case UInt8(ascii: "."):
                guard label > 0 else { return false }
                label = 0
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "_"):
                label += 1
                guard label <= 63 else { return false }
            default:
                return false
            }
        }
        return label > 0
    }

    private init(host: String, port: Int, address: IPAddress?) {
        self.host = host
        self.port = port
        self.address = address
    }
}

/// Why a CONNECT target was refused (the 400's reason).
public struct ConnectTargetError: Error, Sendable, Equatable {
    public let reason: String
    init(_ reason: String) { self.reason = reason }
}
