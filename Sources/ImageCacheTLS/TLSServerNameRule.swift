// What a server stream accepts as the client's Server Name Indication (RFC 6066 3). Pure.
//
//   any              every name, and none
//   mustMatch(host)  no name (a client connecting to an IP literal sends none), or exactly `host`, compared without
//                    regard to ASCII case; any other name fails the handshake with the unrecognized_name alert
// Interception uses mustMatch with the CONNECT host: a leaf minted for one host is never shown to a client that
// asked for another.

/// The server names a server `TLSStream` accepts.
public enum TLSServerNameRule: Sendable, Equatable {
    case any
    case mustMatch(String)

    /// Whether a ClientHello that sent `name` (nil: no SNI) may go on.
    public func admits(_ name: String?) -> Bool {
        switch self {
        case .any:
            return true
        case .mustMatch(let host):
            guard let name else { return true }
            return name.lowercased() == host.lowercased()
        }
    }
}
