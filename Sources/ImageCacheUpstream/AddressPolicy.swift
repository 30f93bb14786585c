// Which destination addresses an untrusted upstream transfer may connect to (SSRF guard).
//
// Data model: an `IPAddress` is 4 or 16 raw bytes in network order. `AddressPolicy.refusal(for:)` is a pure
// function: nil when the address may be reached, else a reason naming the address and the refused range.
// No state, no lock, no I/O; CurlEasy calls it from the curl thread for every connection it opens
// (CURLOPT_OPENSOCKETFUNCTION) and every request it sends (CURLOPT_PREREQFUNCTION, reused connections too), so it
// judges the address actually dialled: every DNS answer and every redirect hop.
//
// POLICY, one table per family (`v4Ranges`, `v6Ranges`), each row with its source:
//   - every block of the IANA IPv4 and IPv6 Special-Purpose Address Registries (RFC 6890 and its updates) is
//     refused, the ones the registry marks globally reachable (AS112, AMT, the NAT64 well-known prefix's own
//     block aside) included: no image lives on an anycast service address, and an allowlist of exceptions is where
//     SSRF guards go wrong. Multicast (RFC 5771, RFC 4291) and the deprecated site-local and 6to4-relay blocks too;
//   - IPv6 outside 2000::/3 is refused as a whole (IANA IPv6 Address Space: only 2000::/3 is allocated for global
//     unicast), except the forms that embed an IPv4 address, which are judged by that address: IPv4-mapped
//     ::ffff:a.b.c.d, IPv4-compatible ::a.b.c.d (deprecated), NAT64 64:ff9b::/96 and 6to4 2002:AABB:CCDD::/48;
//   - Teredo (2001::/32) is refused whole: its embedded client address is obfuscated and its server may be anywhere.
// The most specific row wins (rows are tried longest prefix first).

public import ImageCacheHTTP
internal import Foundation

/// The private-network policy for untrusted upstream destinations.
public enum AddressPolicy {
    /// Nil when `address` may be connected to, else why not (names the address).
    public static func refusal(for address: IPAddress) -> String? {
        guard let range = refusedRange(address) else { return nil }
        return "\(address) is in \(range)"
    }

    /// What a row does with an address inside it.
    enum Action {
        case refuse
        /// Judge the IPv4 address at this byte offset instead (IPv6 forms that carry one).
        case judgeEmbeddedIPv4(at: Int)
    }

    /// One block: network bytes (4 or 16, host bits zero), prefix length, what it is and where that is written.
    struct Row {
        let network: [UInt8]
        let prefixLength: Int
        let name: String
        let source: String
        let action: Action

        init(_ cidr: String, _ name: String, _ source: String, _ action: Action = .refuse) {
            let parts = cidr.split(separator: "/")
            let bytes = AddressRange.addressBytes(String(parts[0]))!
            network = bytes
            prefixLength = Int(parts[1])!
            self.name = name
            self.source = source
            self.action = action
        }

        func contains(_ bytes: [UInt8]) -> Bool {
            guard bytes.count == network.count else { return false }
            var bits = prefixLength
            for index in bytes.indices where bits > 0 {
                let mask: UInt8 = bits >= 8 ? 0xFF : UInt8(truncatingIfNeeded: 0xFF << (8 - bits))
                if bytes[index] & mask != network[index] { return false }
                bits -= 8
            }
            return true
        }

        var label: String { "\(cidrText) (\(name), \(source))" }
        private var cidrText: String { "\(IPAddress(bytes: network)!)/\(prefixLength)" }
    }

    /// IANA IPv4 Special-Purpose Address Registry, plus multicast.
    static let v4Ranges: [Row] = sorted([
        Row("0.0.0.0/8", "this network", "RFC 791"),
        Row("10.0.0.0/8", "private use", "RFC 1918"),
        Row("100.64.0.0/10", "shared address space", "RFC 6598"),
        Row("127.0.0.0/8", "loopback", "RFC 1122"),
        Row("169.254.0.0/16", "link-local", "RFC 3927"),
        Row("172.16.0.0/12", "private use", "RFC 1918"),
        Row("192.0.0.0/24", "IETF protocol assignments", "RFC 6890"),
        Row("192.0.2.0/24", "documentation, TEST-NET-1", "RFC 5737"),
        Row("192.31.196.0/24", "AS112-v4", "RFC 7535"),
        Row("192.52.193.0/24", "AMT", "RFC 7450"),
        Row("192.88.99.0/24", "6to4 relay anycast, deprecated", "RFC 7526"),
        Row("192.168.0.0/16", "private use", "RFC 1918"),
        Row("192.175.48.0/24", "AS112 direct delegation", "RFC 7534"),
        Row("198.18.0.0/15", "benchmarking", "RFC 2544"),
        Row("198.51.100.0/24", "documentation, TEST-NET-2", "RFC 5737"),
        Row("203.0.113.0/24", "documentation, TEST-NET-3", "RFC 5737"),
        Row("224.0.0.0/4", "multicast", "RFC 5771"),
        Row("240.0.0.0/4", "reserved", "RFC 1112"),
        Row("255.255.255.255/32", "limited broadcast", "RFC 919"),
    ])

    /// IANA IPv6 Special-Purpose Address Registry, plus multicast and the deprecated blocks; the forms that embed an
    /// IPv4 address are judged by it.
    static let v6Ranges: [Row] = sorted([
        Row("::/128", "unspecified", "RFC 4291"),
        Row("::1/128", "loopback", "RFC 4291"),
        Row("::ffff:0:0/96", "IPv4-mapped", "RFC 4291", .judgeEmbeddedIPv4(at: 12)),
        Row("::/96", "IPv4-compatible, deprecated", "RFC 4291", .judgeEmbeddedIPv4(at: 12)),
        Row("64:ff9b::/96", "NAT64 well-known prefix", "RFC 6052", .judgeEmbeddedIPv4(at: 12)),
        Row("64:ff9b:1::/48", "local-use NAT64", "RFC 8215"),
        Row("100::/64", "discard-only", "RFC 6666"),
        Row("100:0:0:1::/64", "dummy prefix", "RFC 9780"),
        Row("2001::/23", "IETF protocol assignments", "RFC 2928"),
        Row("2001::/32", "Teredo: the embedded client address cannot be judged", "RFC 4380"),
        Row("2001:2::/48", "benchmarking", "RFC 5180"),
        Row("2001:db8::/32", "documentation", "RFC 3849"),
        Row("2002::/16", "6to4", "RFC 3056", .judgeEmbeddedIPv4(at: 2)),
        Row("2620:4f:8000::/48", "AS112 direct delegation", "RFC 7534"),
        Row("3fff::/20", "documentation", "RFC 9637"),
        Row("5f00::/16", "SRv6 SIDs", "RFC 9602"),
        Row("fc00::/7", "unique local", "RFC 4193"),
        Row("fe80::/10", "link-local", "RFC 4291"),
        Row("fec0::/10", "site-local, deprecated", "RFC 3879"),
        Row("ff00::/8", "multicast", "RFC 4291"),
    ])

    /// Only this block of IPv6 is allocated for global unicast; the rest is refused unless a row above says otherwise.
    static let v6GlobalUnicast = Row("2000::/3", "global unicast", "IANA IPv6 Address Space")

    private static func sorted(_ rows: [Row]) -> [Row] {
        rows.enumerated().sorted { ($0.element.prefixLength, -$0.offset) > ($1.element.prefixLength, -$1.offset) }.map(\.element)
    }

    /// The refused range `address` falls in, or nil.
    static func refusedRange(_ address: IPAddress) -> String? {
        let bytes = address.bytes
        let rows = bytes.count == 4 ? v4Ranges : v6Ranges
        if let row = rows.first(where: { $0.contains(bytes) }) {
            switch row.action {
            case .refuse:
                return row.label
            case let .judgeEmbeddedIPv4(offset):
                let embedded = IPAddress(v4Bytes: Array(bytes[offset..<offset + 4]))
                return refusedRange(embedded).map { "\(row.label): embedded \(embedded) is in \($0)" }
            }
        }
        if bytes.count == 16, !v6GlobalUnicast.contains(bytes) {
            return "a block outside 2000::/3 (not allocated for global unicast, IANA IPv6 Address Space)"
        }
        return nil
    }
}
