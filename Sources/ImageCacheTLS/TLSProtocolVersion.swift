// The TLS protocol versions, by their wire numbers. Pure.

/// A TLS protocol version. Servers here accept 1.2 and 1.3 only; the older ones exist so that a test client can
/// show they are refused.
public enum TLSProtocolVersion: Int32, Sendable, Comparable, CustomStringConvertible {
    case tls1_0 = 0x0301
    case tls1_1 = 0x0302
    case tls1_2 = 0x0303
    case tls1_3 = 0x0304

    public static func < (lhs: Self, rhs: Self) -> Bool { lhs.rawValue < rhs.rawValue }

    public var description: String {
        switch self {
        case .tls1_0: "TLSv1"
        case .tls1_1: "TLSv1.1"
        case .tls1_2: "TLSv1.2"
        case .tls1_3: "TLSv1.3"
        }
    }
}
