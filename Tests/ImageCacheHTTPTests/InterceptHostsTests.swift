// The `intercept-hosts` list (InterceptHosts.swift): what each item matches, and the items refused, as tables.

import ImageCacheHTTP
import Testing

@Suite("The intercept-hosts list", .timeLimit(.minutes(1)))
struct InterceptHostsTests {
    static func hosts(_ items: String...) throws -> InterceptHosts {
        try InterceptHosts.parse(items)
    }

    @Test("each kind of item intercepts exactly what it names", arguments: [
        // (list, host, intercepted)
        ("images.example.com", "images.example.com", true),
        ("images.example.com", "IMAGES.Example.COM", true),
        ("images.example.com", "images.example.com.", true),
        ("images.example.com", "a.images.example.com", false),
        ("images.example.com", "example.com", false),
        ("*.example.com", "a.example.com", true),
        ("*.example.com", "a.b.example.com", true),
        ("*.example.com", "example.com", false),
        ("*.example.com", "badexample.com", false),
        ("*.example.com", "example.com.evil.test", false),
        ("203.0.113.9", "203.0.113.9", true),
        ("203.0.113.9", "203.0.113.10", false),
        ("203.0.113.9", "::ffff:203.0.113.9", true),
        ("2001:db8::1", "[2001:db8:0::1]", true),
        ("[2001:db8::1]", "2001:db8::1", true),
        ("2001:db8::1", "2001:db8::2", false),
        ("*", "anything.test", true),
        ("*", "198.51.100.1", true),
        ("images.example.com", "203.0.113.9", false),
        ("images.example.com", "not a host", false),
    ])
    func matching(list: String, host: String, intercepted: Bool) throws {
        // Given
        let hosts = try InterceptHosts.parse([list])
        // Then
        #expect(hosts.matches(host) == intercepted, "\(list) and \(host)")
    }

    @Test("items are lower-cased, de-duplicated and kept in order; * is the wildcard for all")
    func normalised() throws {
        // Given
        let hosts = try InterceptHostsTests.hosts("Images.Example.com", "*.CDN.example", "images.example.com", "203.0.113.9", "[::1]")
        // Then
        #expect(hosts.description == "images.example.com,*.cdn.example,203.0.113.9,::1")
        #expect(hosts.names == ["images.example.com", "cdn.example"])
        #expect(hosts.addresses.map(\.description) == ["203.0.113.9", "::1"])
        #expect(!hosts.hasWildcardAll)
        #expect(try InterceptHostsTests.hosts("a.test", "*").hasWildcardAll)
        #expect(InterceptHosts.none.isEmpty && InterceptHosts.none.description == "none")
    }

    @Test("a bad item is refused with its text and the reason", arguments: [
        ("bücher.example", "not ASCII: write an internationalised name in punycode"),
        ("*example.com", "a wildcard is only '*' or '*.' before a name"),
        ("a.*.example.com", "a wildcard is only '*' or '*.'"),
        ("*.203.0.113.9", "a wildcard takes a name, not an address"),
        ("com", "a single label would let the local CA sign for every name under it"),
        ("*.com", "a single label would let the local CA sign for every name under it"),
        ("images.example.com:443", "not a host name or an IP address"),
        ("a..example.com", "a label is empty"),
        ("-a.example.com", "may not begin or end with a hyphen"),
        ("a_b.example.com", "only letters, digits, hyphens and dots"),
        ("1.2.3", "its last label is all digits"),
        ("[203.0.113.9]", "not an IPv6 address in brackets"),
        ("", "not a host name or an IP address"),
        (String(repeating: "a", count: 64) + ".test", "longer than 63 bytes"),
        (Array(repeating: String(repeating: "a", count: 60), count: 5).joined(separator: "."), "longer than 253 bytes"),
    ])
    func refused(item: String, reason: String) {
        #expect {
            _ = try InterceptHosts.parse([item])
        } throws: { error in
            let text = (error as? InterceptHosts.Refusal)?.reason ?? ""
            return text.contains("'\(item)'") && text.contains(reason)
        }
    }

    @Test("punycode names are taken as they are")
    func punycode() throws {
        let hosts = try InterceptHostsTests.hosts("xn--bcher-kva.example")
        #expect(hosts.matches("xn--bcher-kva.example"))
    }
}
