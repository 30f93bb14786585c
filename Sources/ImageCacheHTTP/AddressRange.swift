// Address ranges in CIDR notation ("127.0.0.1/32", "10.0.0.0/8", "::1/128", "fd00::/8"), for `admin-allow` (the
// clients that may use the /_imagecached/ endpoints) and `proxy-allow` (the clients that may use the forward proxy).
// Pure: parsing and matching on bytes, no I/O.
// An IPv4-mapped IPv6 client address (::ffff:a.b.c.d) is matched as the IPv4 address it carries.

#if canImport(Glibc)
internal import Glibc
#elseif canImport(Darwin)
internal import Darwin
#endif

/// One CIDR range.
public struct AddressRange: Sendable, Equatable, CustomStringConvertible {
    /// 4 bytes (IPv4) or 16 (IPv6), host bits zeroed.
    let network: [UInt8]
    let prefixLength: Int

    /// "ADDRESS/PREFIX", or a bare address (a single host).
    public init?(_ text: String) {
        let parts = text.split(separator: "/", maxSplits: 1, omittingEmptySubsequences: false)
        guard let bytes = Self.addressBytes(String(parts[0])) else { return nil }
        let bits = bytes.count * 8
        var length = bits
        if parts.count == 2 {
            guard let parsed = Int(parts[1]), (0...bits).contains(parsed) else { return nil }
            length = parsed
        }
        network = Self.masked(bytes, length)
        prefixLength = length
    }

    public var description: String {
        let family = network.count == 4 ? AF_INET : AF_INET6
        return (Self.text(family, network) ?? "?") + "/\(prefixLength)"
    }

    /// Whether `address` (text, as ClientInfo carries it) is in this range.
    public func contains(_ address: String) -> Bool {
        guard var bytes = Self.addressBytes(address) else { return false }
        if bytes.count == 16, bytes[0..<10].allSatisfy({ $0 == 0 }), bytes[10] == 0xff, bytes[11] == 0xff {
            bytes = Array(bytes[12...])
        }
        return bytes.count == network.count && Self.masked(bytes, prefixLength) == network
    }

    /// Every address in the range is a loopback address: inside 127.0.0.0/8, or ::1/128 itself.
    public var isLoopback: Bool {
        network.count == 4 ? network[0] == 127 && prefixLength >= 8
            : prefixLength == 128 && network[0..<15].allSatisfy { $0 == 0 } && network[15] == 1
    }

    /// The loopback ranges: the default of `admin-allow` and `proxy-allow`.
    public static let loopback: [AddressRange] = [AddressRange("127.0.0.0/8")!, AddressRange("::1/128")!]

    package static func addressBytes(_ text: String) -> [UInt8]? {
        var v4 = in_addr()
        if inet_pton(AF_INET, text, &v4) == 1 { return withUnsafeBytes(of: &v4) { Array($0) } }
        var v6 = in6_addr()
        if inet_pton(AF_INET6, text, &v6) == 1 { return withUnsafeBytes(of: &v6) { Array($0) } }
        return nil
    }

    private static func masked(_ bytes: [UInt8], _ length: Int) -> [UInt8] {
        bytes.enumerated().map { index, byte in
            let keep = min(max(length - index * 8, 0), 8)
            return keep == 8 ? byte : byte & UInt8(truncatingIfNeeded: 0xff << (8 - keep))
        }
    }

    private static func text(_ family: Int32, _ bytes: [UInt8]) -> String? {
        var buffer = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN))
        guard bytes.withUnsafeBytes({ inet_ntop(family, $0.baseAddress, &buffer, socklen_t(buffer.count)) }) != nil else { return nil }
        return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}
