// InterceptHosts: the `intercept-hosts` list, the hosts whose CONNECT tunnels are intercepted (issue 29). Pure.
//
// The rules, as a table:
//
//   item                     pattern      matches (the CONNECT host, lower-cased)          CA name constraint
//   images.example.com       name         images.example.com only                          DNS subtree images.example.com
//   *.example.com            suffix       a.example.com, a.b.example.com; not example.com  DNS subtree example.com
//   203.0.113.9, [2001:db8::1], 2001:db8::1
//                            address      that address, in any spelling of it               IP 203.0.113.9/32, ::/128
//   *                        any          every host                                        none (unconstrained)
//
// Names are ASCII only (an internationalised name is written in punycode, xn--...), lower-cased, and must pass the
// HTTP layer's host check (`HTTPParser.isValidHost`) and the DNS rules of RFC 1123: labels of letters, digits and
// hyphens, 1-63 bytes, no hyphen first or last, at most 253 bytes in all, and a last label that is not all digits
// (such a name would read as an IPv4 address). A trailing dot is dropped. Duplicates are dropped; order is kept.
// A DNS constraint also covers subdomains (RFC 5280 has no "this name only"), so the CA for `images.example.com`
// could sign for `a.images.example.com` too; the matcher never intercepts more than the list says.

/// The parsed `intercept-hosts` list.
public struct InterceptHosts: Sendable, Equatable, CustomStringConvertible {
    /// One host as a CONNECT names it: a DNS name (lower-cased) or an IP literal.
    public enum Host: Sendable, Hashable, CustomStringConvertible {
        case name(String)
        case address(IPAddress)

        /// A host as written in a CONNECT target or a configuration: an IP literal (IPv6 with or without
        /// brackets) or a DNS name by the rules above; nil for anything else.
        public init?(_ text: String) {
            switch InterceptHosts.parseHost(text) {
            case let .success(host): self = host
            case .failure: return nil
            }
        }

        public var description: String {
            switch self {
            case let .name(name): name
            case let .address(address): address.description
            }
        }
    }

    /// One item of the list.
    public enum Pattern: Sendable, Hashable, CustomStringConvertible {
        /// Exactly this name.
        case name(String)
        /// `*.suffix`: any name below `suffix` (one label or more), not `suffix` itself.
        case suffix(String)
        /// Exactly this address.
        case address(IPAddress)
        /// `*`: every host.
        case any

        public var description: String {
            switch self {
            case let .name(name): name
            case let .suffix(suffix): "*." + suffix
            case let .address(address): address.description
            case .any: "*"
            }
        }

        /// Whether this pattern takes `host`.
        public func matches(_ host: Host) -> Bool {
            switch (self, host) {
            case (.any, _): true
            case let (.name(name), .name(other)): name == other
            case let (.suffix(suffix), .name(other)):
                other.utf8.count > suffix.utf8.count + 1 && other.hasSuffix("." + suffix)
            case let (.address(address), .address(other)): address.unmappedIPv4 == other.unmappedIPv4
            default: false
            }
        }
    }

    /// A refused item: its text and why, in one line.
    public struct Refusal: Error, Sendable, Equatable, CustomStringConvertible {
        public let reason: String
        public var description: String { reason }
    }

    /// The patterns, in the order given, without duplicates.
    public let patterns: [Pattern]

    /// No host is intercepted (the default: every tunnel is blind).
    public static let none = InterceptHosts(patterns: [])

    public var isEmpty: Bool { patterns.isEmpty }

    /// `*` is listed: every host is intercepted, and the CA can carry no name constraints.
    public var hasWildcardAll: Bool { patterns.contains(.any) }

    /// The names and addresses the list gives (for the CA's constraints): `*.example.com` as `example.com`.
    public var names: [String] {
        patterns.compactMap {
            switch $0 {
            case let .name(name), let .suffix(name): name
            case .address, .any: nil
            }
        }
    }

    /// The IP literals the list gives.
    public var addresses: [IPAddress] {
        patterns.compactMap { if case let .address(address) = $0 { address } else { nil } }
    }

    /// The list as a configuration would write it: "images.example.com,*.cdn.example,203.0.113.9", or "none".
    public var description: String { isEmpty ? "none" : patterns.map(\.description).joined(separator: ",") }

    init(patterns: [Pattern]) {
        var seen = Set<Pattern>()
        self.patterns = patterns.filter { seen.insert($0).inserted }
    }

    /// Parses the list's items (already split and trimmed); the first bad item is refused with its reason.
    public static func parse(_ items: [String]) throws(Refusal) -> InterceptHosts {
        var patterns: [Pattern] = []
        for item in items {
            patterns.append(try pattern(item))
        }
        return InterceptHosts(patterns: patterns)
    }

    /// Whether a tunnel to `host` (a CONNECT target's host, any case, IPv6 with or without brackets) is intercepted.
    public func matches(_ host: String) -> Bool {
        guard let parsed = Host(host) else { return false }
        return matches(parsed)
    }

    public func matches(_ host: Host) -> Bool {
        patterns.contains { $0.matches(host) }
    }

    // MARK: - Parsing

    static func pattern(_ item: String) throws(Refusal) -> Pattern {
        if item == "*" { return .any }
        if item.hasPrefix("*.") {
            switch parseHost(String(item.dropFirst(2))) {
            case let .success(.name(suffix)):
                try refuseTopLevel(suffix, item)
                return .suffix(suffix)
            case .success(.address): throw Refusal(reason: "'\(item)': a wildcard takes a name, not an address")
            case let .failure(refusal): throw Refusal(reason: "'\(item)': \(refusal.reason)")
            }
        }
        if item.contains("*") {
            throw Refusal(reason: "'\(item)': a wildcard is only '*' or '*.' before a name (like *.example.com)")
        }
        switch parseHost(item) {
        case let .success(.name(name)):
            try refuseTopLevel(name, item)
            return .name(name)
        case let .success(.address(address)): return .address(address)
        case let .failure(refusal): throw Refusal(reason: "'\(item)': \(refusal.reason)")
        }
    }

    /// A single label (`com`, `*.com`) would make the CA's DNS constraint cover every name under it, which is no
    /// constraint at all: refused, except `localhost`, which names this machine.
    private static func refuseTopLevel(_ name: String, _ item: String) throws(Refusal) {
        guard !name.contains("."), name != "localhost" else { return }
        throw Refusal(reason: "'\(item)': a single label would let the local CA sign for every name under it; list the hosts (images.example.com, *.cdn.example.com), or * for all")
    }

    static func parseHost(_ text: String) -> Result<Host, Refusal> {
        var text = text
        if text.hasPrefix("[") && text.hasSuffix("]") && text.utf8.count > 2 {
            guard let address = IPAddress(String(text.dropFirst().dropLast())), case .v6 = address else {
                return .failure(Refusal(reason: "not an IPv6 address in brackets"))
            }
            return .success(.address(address))
        }
        if let address = IPAddress(text) { return .success(.address(address)) }
        guard text.utf8.allSatisfy({ $0 < 0x80 }) else {
            return .failure(Refusal(reason: "not ASCII: write an internationalised name in punycode (xn--...)"))
        }
        text = text.lowercased()
        if text.hasSuffix(".") { text.removeLast() }
        guard !text.isEmpty, HTTPParser.isValidHost(text), !text.contains(":") else {
            return .failure(Refusal(reason: "not a host name or an IP address"))
        }
        guard text.utf8.count <= 253 else { return .failure(Refusal(reason: "longer than 253 bytes")) }
        let labels = text.split(separator: ".", omittingEmptySubsequences: false)
        for label in labels {
            let bytes = label.utf8
            guard !bytes.isEmpty, bytes.count <= 63 else {
                return .failure(Refusal(reason: "a label is empty or longer than 63 bytes"))
            }
            guard bytes.allSatisfy({ isLetterOrDigit($0) || $0 == UInt8(ascii: "-") }) else {
                return .failure(Refusal(reason: "a name has only letters, digits, hyphens and dots"))
            }
            guard bytes.first != UInt8(ascii: "-"), bytes.last != UInt8(ascii: "-") else {
                return .failure(Refusal(reason: "a label may not begin or end with a hyphen"))
            }
        }
        if let last = labels.last, last.utf8.allSatisfy({ (0x30...0x39).contains($0) }) {
            return .failure(Refusal(reason: "neither an IP address nor a host name (its last label is all digits)"))
        }
        return .success(.name(text))
    }

    private static func isLetterOrDigit(_ byte: UInt8) -> Bool {
        (0x30...0x39).contains(byte) || (0x61...0x7A).contains(byte) || (0x41...0x5A).contains(byte)
    }
}
