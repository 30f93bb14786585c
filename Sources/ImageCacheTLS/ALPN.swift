// Application-Layer Protocol Negotiation (RFC 7301) lists, in their wire form: each protocol name as one length
// byte and its bytes. Pure.
//
// The rule a server here follows: it takes `http/1.1` when the client offers it, and otherwise answers nothing
// (OpenSSL's NOACK: the handshake goes on without ALPN and the client decides). It never takes `h2`: the daemon
// speaks HTTP/1.1 only, and a client that offered only h2 must not be told it got it.

/// ALPN lists and the server's choice.
public enum ALPN {
    /// The one protocol a server here selects.
    public static let http11 = "http/1.1"

    /// The wire form of a client's list, in its order of preference. Each name is 1 to 255 bytes.
    public static func wireFormat(_ protocols: [String]) -> [UInt8] {
        var bytes: [UInt8] = []
        for name in protocols {
            let utf8 = Array(name.utf8)
            precondition((1...255).contains(utf8.count), "an ALPN protocol name is 1 to 255 bytes: \(name)")
            bytes.append(UInt8(utf8.count))
            bytes.append(contentsOf: utf8)
        }
        return bytes
    }

    /// Where `http/1.1` sits in a client's offered list (the name's bytes, without the length byte), or nil when it
    /// is not offered or the list is malformed.
    public static func selection(in offered: UnsafeRawBufferPointer) -> Range<Int>? {
        let wanted = Array(http11.utf8)
        var index = 0
        while index < offered.count {
            let length = Int(offered[index])
            let start = index + 1
            let end = start + length
            guard length > 0, end <= offered.count else { return nil }
            if length == wanted.count, offered[start..<end].elementsEqual(wanted) {
                return start..<end
            }
            index = end
        }
        return nil
    }
}
