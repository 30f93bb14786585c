import Testing
@testable import ImageCacheHTTP

@Suite("ConnectTarget", .timeLimit(.minutes(1)))
struct ConnectTargetTests {
    @Test("authority forms that can be dialled", arguments: [
        ("images.example.com:443", "images.example.com", 443, false),
        ("Images.Example.COM:8443", "images.example.com", 8443, false),
        ("203.0.113.9:443", "203.0.113.9", 443, true),
        ("[2001:db8::1]:443", "2001:db8::1", 443, true),
        ("my_host-1.internal:1", "my_host-1.internal", 1, false),
        ("xn--bcher-kva.example:65535", "xn--bcher-kva.example", 65535, false),
        ("images.example.com.:443", "images.example.com", 443, false),
    ])
    func accepted(text: String, host: String, port: Int, literal: Bool) throws {
        let target = try ConnectTarget.parse(text).get()
        #expect(target.host == host)
        #expect(target.port == port)
        #expect((target.address != nil) == literal)
    }

    @Test("the authority is written back in its dialled form")
    func authority() throws {
        #expect(try ConnectTarget.parse("[2001:DB8::1]:443").get().authority == "[2001:db8::1]:443")
        #expect(try ConnectTarget.parse("A.example:80").get().authority == "a.example:80")
    }

    @Test("what is not host:port is refused with a reason", arguments: [
        ("images.example.com", "no port"),
        ("images.example.com:", "no valid port"),
        ("images.example.com:0", "no valid port"),
        ("images.example.com:65536", "no valid port"),
        ("images.example.com:44x", "no valid port"),
        ("http://images.example.com:443", "not a URL"),
        ("user@images.example.com:443", "not a host name"),
        ("images.example.com/path:443", "not a URL"),
        ("2001:db8::1:443", "IPv6 address goes in brackets"),
        ("[203.0.113.9]:443", "not an IPv6 address"),
        ("[2001:db8::1]443", "has no port"),
        ("a..b:443", "not a host name"),
        ("b%C3%BCcher.example:443", "not a host name"),
        ("", "empty"),
    ])
    func refused(text: String, reason: String) {
        guard case let .failure(error) = ConnectTarget.parse(text) else {
            Issue.record("\(text) was accepted")
            return
        }
        #expect(error.reason.contains(reason), "\(error.reason)")
    }

    @Test("a label of 64 bytes, or a name over 253, is refused")
    func lengths() {
        #expect((try? ConnectTarget.parse(String(repeating: "a", count: 63) + ".example:443").get()) != nil)
        #expect((try? ConnectTarget.parse(String(repeating: "a", count: 64) + ".example:443").get()) == nil)
        let long = Array(repeating: String(repeating: "a", count: 50), count: 6).joined(separator: ".")
        #expect((try? ConnectTarget.parse(long + ":443").get()) == nil)
    }
}
