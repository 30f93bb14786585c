// Which destination addresses an untrusted upstream transfer may connect to (SSRF guard).
//
// Data model: an `IPAddress` is 4 or 16 raw bytes in network order. `AddressPolicy.refusal(for:)` is a pure
// function: nil when the address may be reached, else a reason naming the address and the refused range.
// No state, no lock, no I/O; CurlEasy calls it from the curl thread at connect time (CURLOPT_OPENSOCKETFUNCTION),
// so it judges the address actually dialled: every DNS answer and every redirect hop.
//
// Refused IPv4: 0.0.0.0/8, 10/8, 100.64/10, 127/8, 169.254/16, 172.16/12, 192.0.0.0/24, 192.168/16,
// 198.18/15, 224/4 (multicast), 240/4 (reserved, including 255.255.255.255).
// Refused IPv6: ::, ::1, fc00::/7 (unique local), fe80::/10 (link-local), fec0::/10 (old site-local),
// ff00::/8 (multicast). Forms that embed an IPv4 address are judged by that address: IPv4-mapped
// ::ffff:a.b.c.d, IPv4-compatible ::a.b.c.d, NAT64 64:ff9b::/96 and 6to4 2002:AABB:CCDD::/48; local-use NAT64
// 64:ff9b:1::/48 and Teredo 2001::/32 are refused whole.

internal import Foundation

/// An IPv4 or IPv6 address as raw network-order bytes.
public enum IPAddress: Sendable, Hashable, CustomStringConvertible {
    case v4(UInt8, UInt8, UInt8, UInt8)
    /// Exactly 16 bytes.
    case v6([UInt8])

    /// Parses dotted IPv4 or textual IPv6 ("::ffff:10.0.0.1"); nil when it is neither.
    public init?(_ text: String) {
        var v4 = in_addr()
        if inet_pton(AF_INET, text, &v4) == 1 {
            self = IPAddress(v4Bytes: withUnsafeBytes(of: &v4) { Array($0) })
            return
        }
        var v6 = in6_addr()
        if inet_pton(AF_INET6, text, &v6) == 1 {
            self = .v6(withUnsafeBytes(of: &v6) { Array($0) })
            return
        }
        return nil
    }

    init(v4Bytes b: [UInt8]) {
        precondition(b.count == 4, "IPv4 address needs 4 bytes")
        self = .v4(b[0], b[1], b[2], b[3])
    }

    public var description: String {
        switch self {
        case let .v4(a, b, c, d):
            return "\(a).\(b).\(c).\(d)"
        case let .v6(bytes):
            var raw = in6_addr()
            withUnsafeMutableBytes(of: &raw) { $0.copyBytes(from: bytes.prefix(16)) }
            var buffer = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN))
            guard inet_ntop(AF_INET6, &raw, &buffer, socklen_t(buffer.count)) != nil else { return "?" }
            return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        }
    }
}

/// The private-network policy for untrusted upstream destinations.
public enum AddressPolicy {
    /// Nil when `address` may be connected to, else why not (names the address).
    public static func refusal(for address: IPAddress) -> String? {
        guard let range = refusedRange(address) else { return nil }
        return "\(address) is in \(range)"
    }

    /// The refused range `address` falls in, or nil.
    static func refusedRange(_ address: IPAddress) -> String? {
        switch address {
        case let .v4(a, b, c, d):
            return refusedRange(v4: (a, b, c, d))
        case let .v6(x):
            precondition(x.count == 16, "IPv6 address needs 16 bytes")
            let first10Zero = x[0..<10].allSatisfy { $0 == 0 }
            let first12Zero = first10Zero && x[10] == 0 && x[11] == 0
            if first12Zero && x[12] == 0 && x[13] == 0 && x[14] == 0 {
                if x[15] == 0 { return "::/128 (unspecified)" }
                if x[15] == 1 { return "::1/128 (loopback)" }
            }
            let embedded = (x[12], x[13], x[14], x[15])
            if first10Zero && x[10] == 0xFF && x[11] == 0xFF {
                return refusedRange(v4: embedded).map { "::ffff:0:0/96 (IPv4-mapped \($0))" }
            }
            if first12Zero {
                return refusedRange(v4: embedded).map { "::/96 (IPv4-compatible \($0))" }
            }
            if x[0] == 0x00 && x[1] == 0x64 && x[2] == 0xFF && x[3] == 0x9B && x[4..<12].allSatisfy({ $0 == 0 }) {
                return refusedRange(v4: embedded).map { "64:ff9b::/96 (NAT64 \($0))" }
            }
            if x[0] == 0x00 && x[1] == 0x64 && x[2] == 0xFF && x[3] == 0x9B && x[4] == 0x00 && x[5] == 0x01 {
                return "64:ff9b:1::/48 (local-use NAT64, RFC 8215)"
            }
            if x[0] == 0x20 && x[1] == 0x01 && x[2] == 0x00 && x[3] == 0x00 {
                return "2001::/32 (Teredo: the embedded client address cannot be judged)"
            }
            if x[0] == 0x20 && x[1] == 0x02 {
                return refusedRange(v4: (x[2], x[3], x[4], x[5])).map { "2002::/16 (6to4 \($0))" }
            }
            if x[0] & 0xFE == 0xFC { return "fc00::/7 (unique local)" }
            if x[0] == 0xFE && x[1] & 0xC0 == 0x80 { return "fe80::/10 (link-local)" }
            if x[0] == 0xFE && x[1] & 0xC0 == 0xC0 { return "fec0::/10 (site-local)" }
            if x[0] == 0xFF { return "ff00::/8 (multicast)" }
            return nil
        }
    }

    private static func refusedRange(v4 x: (UInt8, UInt8, UInt8, UInt8)) -> String? {
        let (a, b, c) = (x.0, x.1, x.2)
        switch a {
        case 0: return "0.0.0.0/8 (this network)"
        case 10: return "10.0.0.0/8 (private)"
        case 100 where b & 0xC0 == 64: return "100.64.0.0/10 (shared address space)"
        case 127: return "127.0.0.0/8 (loopback)"
        case 169 where b == 254: return "169.254.0.0/16 (link-local)"
        case 172 where b & 0xF0 == 16: return "172.16.0.0/12 (private)"
        case 192 where b == 0 && c == 0: return "192.0.0.0/24 (IETF protocol assignments)"
        case 192 where b == 168: return "192.168.0.0/16 (private)"
        case 198 where b & 0xFE == 18: return "198.18.0.0/15 (benchmarking)"
        case 224...239: return "224.0.0.0/4 (multicast)"
        case 240...255: return "240.0.0.0/4 (reserved, broadcast)"
        default: return nil
        }
    }
}
