// What the first bytes on a TLS port are, before OpenSSL sees them. Pure: bytes in, a verdict out.
//
// The rules, in order:
//   no bytes yet                                       -> needMore
//   0x16 (handshake record), then 0x03 and a minor version 0x00...0x04 (SSL 3.0 to TLS 1.3's record version)
//                                                      -> tls (needMore until the three bytes are there)
//   an HTTP method token (1 to 20 token characters) followed by a space
//                                                      -> plainHTTP (needMore while every byte so far fits)
//   anything else                                      -> other
// A TLS listener answers plainHTTP with a 400 in plain text (as nginx does) and closes on other; both count as
// "not TLS". The sniff never decides more than this: a record that passes still goes to OpenSSL, which judges it.

/// What a connection's first bytes look like.
public enum TLSRecordSniff: Sendable, Equatable {
    /// A TLS handshake record header (0x16 and a plausible version).
    case tls
    /// An HTTP request line's beginning: a method token and a space.
    case plainHTTP
    /// Neither.
    case other
    /// Every byte so far fits one of the first two; more are needed to tell.
    case needMore

    /// The longest method token taken as HTTP (`PROPPATCH` has 9, `VERSION-CONTROL` 15).
    static let maxMethodLength = 20

    /// Sniffs the first bytes a peer sent.
    public init(_ bytes: some Collection<UInt8>) {
        guard let first = bytes.first else {
            self = .needMore
            return
        }
        if first == 0x16 {
            self = Self.sniffRecordHeader(bytes)
        } else {
            self = Self.sniffRequestLine(bytes)
        }
    }

    private static func sniffRecordHeader(_ bytes: some Collection<UInt8>) -> TLSRecordSniff {
        var index = bytes.index(after: bytes.startIndex)
        guard index != bytes.endIndex else { return .needMore }
        guard bytes[index] == 0x03 else { return .other }
        index = bytes.index(after: index)
        guard index != bytes.endIndex else { return .needMore }
        return bytes[index] <= 0x04 ? .tls : .other
    }

    private static func sniffRequestLine(_ bytes: some Collection<UInt8>) -> TLSRecordSniff {
        var length = 0
        for byte in bytes {
            if byte == UInt8(ascii: " ") {
                return length > 0 ? .plainHTTP : .other
            }
            guard isTokenCharacter(byte) else { return .other }
            length += 1
            if length > maxMethodLength { return .other }
        }
        return .needMore
    }

    /// RFC 9110 5.6.2 tchar.
    private static func isTokenCharacter(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"):
            return true
        default:
            return "!#$%&'*+-.^_`|~".utf8.contains(byte)
        }
    }
}
