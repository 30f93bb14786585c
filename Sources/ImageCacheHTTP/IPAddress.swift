// IPAddress: an IPv4 or IPv6 address as raw bytes (admin-allow ranges, the SSRF guard, the loop guard). Pure.

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

    /// 4 bytes (IPv4) or 16 (IPv6); nil for any other count.
    package init?(bytes: [UInt8]) {
        switch bytes.count {
        case 4: self.init(v4Bytes: bytes)
        case 16: self = .v6(bytes)
        default: return nil
        }
    }

    /// The raw network-order bytes.
    package var bytes: [UInt8] {
        switch self {
        case let .v4(a, b, c, d): [a, b, c, d]
        case let .v6(bytes): bytes
        }
    }

    package init(v4Bytes b: [UInt8]) {
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

extension IPAddress {
    /// An IPv4-mapped IPv6 address as the IPv4 address it carries; any other address as it is.
    package var unmappedIPv4: IPAddress {
        if case let .v6(x) = self, x[0..<10].allSatisfy({ $0 == 0 }), x[10] == 0xFF, x[11] == 0xFF {
            return IPAddress(v4Bytes: Array(x[12..<16]))
        }
        return self
    }

    /// 127.0.0.0/8 or ::1.
    package var isLoopback: Bool {
        switch self {
        case let .v4(a, _, _, _): a == 127
        case let .v6(x): x[0..<15].allSatisfy { $0 == 0 } && x[15] == 1
        }
    }
}
