// CANameConstraints: the local CA's X.509 name constraints (RFC 5280 4.2.1.10) from the `intercept-hosts` list, and
// whether a CA's constraints cover a list. Pure: values in, values out.
//
// The rules, as a table (the extension is critical):
//
//   intercept-hosts has                 permitted subtrees                 excluded subtrees
//   a name, or *.name                   DNS name (the * dropped)           -
//   an IP literal                       IP address/32 or /128              -
//   no IP literal                       -                                  IP 0.0.0.0/0 and ::/0
//   no name                             -                                  DNS "" (every name)
//   *                                   no extension at all: the CA is unconstrained
//
// Why the exclusions: a name form with no subtree at all is unconstrained (4.2.1.10), so a CA constrained to names
// only could still sign any IP address, and one constrained to addresses only any name. The empty DNS constraint
// matches every name (OpenSSL, Go, swift-certificates). A DNS subtree also covers every name below it: RFC 5280 has
// no "this name only", so the CA for images.example.com could sign a.images.example.com too.
//
// "Covers": every pattern of the list is within the constraints (a name or a suffix inside a permitted DNS subtree and
// outside the excluded ones; an address inside a permitted IP range and outside the excluded ones); `*` is covered only
// by an unconstrained CA.

public import ImageCacheHTTP
public import X509
internal import SwiftASN1

public enum CANameConstraints {
    /// The name constraints of a CA for `hosts`; nil when `*` is listed (unconstrained).
    public static func constraints(for hosts: InterceptHosts) -> NameConstraints? {
        guard !hosts.hasWildcardAll else { return nil }
        var names: [String] = []
        for name in hosts.names where !names.contains(name) { names.append(name) }
        let addresses = hosts.addresses.map { address in
            ASN1OctetString(contentBytes: ArraySlice(address.bytes + [UInt8](repeating: 0xFF, count: address.bytes.count)))
        }
        let everyAddress = [ASN1OctetString(contentBytes: ArraySlice([UInt8](repeating: 0, count: 8))),
                            ASN1OctetString(contentBytes: ArraySlice([UInt8](repeating: 0, count: 32)))]
        return NameConstraints(permittedDNSDomains: names, excludedDNSDomains: names.isEmpty ? [""] : [],
                               permittedIPRanges: addresses, excludedIPRanges: addresses.isEmpty ? everyAddress : [])
    }

    /// The patterns of `hosts` that `constraints` do not cover (nil constraints: an unconstrained CA covers all).
    public static func uncovered(_ hosts: InterceptHosts, by constraints: NameConstraints?) -> [InterceptHosts.Pattern] {
        guard let constraints else { return [] }
        return hosts.patterns.filter { pattern in
            switch pattern {
            case .any: true
            case let .name(name), let .suffix(name): !permits(.name(name), constraints)
            case let .address(address): !permits(.address(address), constraints)
            }
        }
    }

    /// Whether a leaf for `host` is within `constraints` (nil: unconstrained).
    public static func permits(_ host: InterceptHosts.Host, _ constraints: NameConstraints?) -> Bool {
        guard let constraints else { return true }
        switch host {
        case let .name(name):
            let permitted = constraints.permittedDNSDomains
            return (permitted.isEmpty || permitted.contains { within(name, $0) })
                && !constraints.excludedDNSDomains.contains { within(name, $0) }
        case let .address(address):
            let permitted = constraints.permittedIPRanges
            return (permitted.isEmpty || permitted.contains { contains($0, address) })
                && !constraints.excludedIPRanges.contains { contains($0, address) }
        }
    }

    /// The permitted names and ranges, as a person reads them: ["example.com", "203.0.113.9/32"].
    public static func permittedNames(_ constraints: NameConstraints?) -> [String] {
        guard let constraints else { return [] }
        return constraints.permittedSubtrees.compactMap { name in
            switch name {
            case let .dnsName(domain): return domain
            case let .ipAddress(range):
                let bytes = Array(range.bytes)
                guard bytes.count == 8 || bytes.count == 32, let address = IPAddress(bytes: Array(bytes.prefix(bytes.count / 2))) else {
                    return nil
                }
                let prefix = bytes.suffix(bytes.count / 2).reduce(0) { $0 + $1.nonzeroBitCount }
                return "\(address)/\(prefix)"
            default: return nil
            }
        }
    }

    /// "constrained to 2 names (example.com, 203.0.113.9/32)", or the unconstrained warning.
    public static func summary(_ constraints: NameConstraints?) -> String {
        guard constraints != nil else { return unconstrainedWarning }
        let names = permittedNames(constraints)
        return "constrained to \(names.count) name\(names.count == 1 ? "" : "s") (\(names.joined(separator: ", ")))"
    }

    /// What the log, `ca init` and the status page say of a CA without constraints.
    public static let unconstrainedWarning = "unconstrained: this key can sign for any site"

    // MARK: - Matching

    /// RFC 5280: a name is within a DNS subtree when it is the subtree or ends with "." and it; "" is every name.
    static func within(_ name: String, _ subtree: String) -> Bool {
        let subtree = subtree.hasPrefix(".") ? String(subtree.dropFirst()) : subtree
        guard !subtree.isEmpty else { return true }
        let name = name.lowercased(), lowered = subtree.lowercased()
        return name == lowered || name.hasSuffix("." + lowered)
    }

    /// Whether an address/mask pair (8 or 32 bytes) holds `address`; an address of the other family never is.
    static func contains(_ range: ASN1OctetString, _ address: IPAddress) -> Bool {
        let range = Array(range.bytes), bytes = address.bytes
        guard range.count == bytes.count * 2 else { return false }
        let half = bytes.count
        return (0..<half).allSatisfy { bytes[$0] & range[half + $0] == range[$0] & range[half + $0] }
    }
}
