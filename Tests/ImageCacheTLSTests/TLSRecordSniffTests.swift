// The pure rules beside the engine: the first-bytes sniff, the ALPN choice and the SNI rule.

@testable import ImageCacheTLS
import Testing

@Suite("TLSRecordSniff, ALPN and the SNI rule", .timeLimit(.minutes(1)))
struct TLSRecordSniffTests {
    @Test("first bytes", arguments: [
        ([], TLSRecordSniff.needMore),
        ([0x16], .needMore),
        ([0x16, 0x03], .needMore),
        ([0x16, 0x03, 0x01], .tls),
        ([0x16, 0x03, 0x01, 0x02, 0x00], .tls),
        ([0x16, 0x03, 0x04], .tls),
        ([0x16, 0x03, 0x05], .other),
        ([0x16, 0x02, 0x00], .other),
        ([0x15, 0x03, 0x01], .other),
        (Array("GET / HTTP/1.1\r\n".utf8), .plainHTTP),
        (Array("OPTIONS * HTTP/1.1".utf8), .plainHTTP),
        (Array("CONNECT images.test:443".utf8), .plainHTTP),
        (Array("GE".utf8), .needMore),
        (Array(" GET".utf8), .other),
        (Array("GET\r\n".utf8), .other),
        (Array(String(repeating: "A", count: 21).utf8), .other),
        ([0x00, 0x00, 0x00], .other),
    ] as [([UInt8], TLSRecordSniff)])
    func sniff(bytes: [UInt8], expected: TLSRecordSniff) {
        #expect(TLSRecordSniff(bytes) == expected)
    }

    @Test("ALPN: http/1.1 is found wherever it is offered, never anything else")
    func alpnSelection() {
        let cases: [([String], String?)] = [
            (["http/1.1"], "http/1.1"),
            (["h2", "http/1.1"], "http/1.1"),
            (["http/1.1", "h2"], "http/1.1"),
            (["h2"], nil),
            (["http/1.0", "spdy/3"], nil),
        ]
        for (offered, expected) in cases {
            let wire = ALPN.wireFormat(offered)
            let selected = wire.withUnsafeBytes { list in
                ALPN.selection(in: list).map { String(decoding: list[$0], as: UTF8.self) }
            }
            #expect(selected == expected, "offered \(offered)")
        }
    }

    @Test("ALPN: a malformed list (a length past the end, a zero length) selects nothing")
    func alpnMalformed() {
        for wire in [[0x08] + Array("http/1".utf8), [0x00, 0x08] + Array("http/1.1".utf8)] as [[UInt8]] {
            #expect(wire.withUnsafeBytes { ALPN.selection(in: $0) } == nil, "\(wire)")
        }
    }

    @Test("the SNI rule: any admits all; mustMatch admits the host in any case, and no name, and nothing else")
    func serverNameRule() {
        #expect(TLSServerNameRule.any.admits("anything.test"))
        #expect(TLSServerNameRule.any.admits(nil))
        let rule = TLSServerNameRule.mustMatch("images.test")
        #expect(rule.admits("images.test"))
        #expect(rule.admits("IMAGES.Test"))
        #expect(rule.admits(nil))
        #expect(!rule.admits("evil.test"))
        #expect(!rule.admits("cdn.images.test"))
    }

    @Test("IP literals are told from names (they get no SNI)")
    func ipLiterals() {
        #expect(TLSStream.isIPLiteral("127.0.0.1"))
        #expect(TLSStream.isIPLiteral("::1"))
        #expect(TLSStream.isIPLiteral("2001:db8::5"))
        #expect(!TLSStream.isIPLiteral("images.test"))
        #expect(!TLSStream.isIPLiteral("1.2.3"))
        #expect(!TLSStream.isIPLiteral("1.2.3.4.example"))
    }
}
