import ImageCacheHTTP
import ImageCacheStore
import Testing

@Suite("UpstreamURL", .timeLimit(.minutes(1)))
struct UpstreamURLTests {
    @Test("normalises equivalent URLs to one form", arguments: [
        ("http://example.com", "http://example.com/"),
        ("HTTP://Example.COM/A.jpg", "http://example.com/A.jpg"),
        ("http://example.com:80/a", "http://example.com/a"),
        ("https://example.com:443/a", "https://example.com/a"),
        ("https://example.com:80/a", "https://example.com:80/a"),
        ("http://example.com:8080/a", "http://example.com:8080/a"),
        ("http://example.com:/a", "http://example.com/a"),
        ("http://example.com/a/./b/../c", "http://example.com/a/c"),
        ("http://example.com/../../a", "http://example.com/a"),
        ("http://example.com/a/b/..", "http://example.com/a/"),
        ("http://example.com/a/.", "http://example.com/a/"),
        ("http://example.com/a//b", "http://example.com/a//b"),
        ("http://example.com/%7euser/%2e%2E/x", "http://example.com/x"),
        ("http://example.com/a%2fb%3a", "http://example.com/a%2Fb%3A"),
        ("http://example.com/%41%42?q=%7e%2f", "http://example.com/AB?q=~%2F"),
        ("http://example.com/a%20b", "http://example.com/a%20b"),
        ("http://example.com/caf\u{e9}", "http://example.com/caf%C3%A9"),
        ("http://example.com/a\"b{c}", "http://example.com/a%22b%7Bc%7D"),
        ("http://example.com/100%", "http://example.com/100%25"),
        ("http://example.com/a?b/../c?d", "http://example.com/a?b/../c?d"),
        ("http://example.com/a?", "http://example.com/a?"),
        ("http://example.com/a#frag", "http://example.com/a"),
        ("http://example.com#frag", "http://example.com/"),
        ("http://example.com?x=1", "http://example.com/?x=1"),
        ("http://[2001:DB8::1]/a", "http://[2001:db8::1]/a"),
        ("http://[::1]:8080/a", "http://[::1]:8080/a"),
        ("https://[::1]:443", "https://[::1]/"),
    ])
    func normalises(input: String, expected: String) throws {
        // Given / When
        let url = try UpstreamURL.parse(input)
        // Then
        #expect(url.string == expected)
        #expect(CacheKey(url).description == expected)
    }

    @Test("splits into components")
    func components() throws {
        let url = try UpstreamURL.parse("HTTPS://[FE80::1]:8443/img/a.png?w=10#x")
        #expect(url.scheme == "https")
        #expect(url.host == "fe80::1")
        #expect(url.port == 8443)
        #expect(url.pathAndQuery == "/img/a.png?w=10")
        #expect(url.authority == "[fe80::1]:8443")
    }

    @Test("equivalent URLs give equal cache keys")
    func keysEqual() throws {
        let a = CacheKey(try UpstreamURL.parse("http://EXAMPLE.com:80/%7Ea/./b.jpg"))
        let b = CacheKey(try UpstreamURL.parse("http://example.com/~a/b.jpg"))
        #expect(a == b)
        #expect(a.hashValue == b.hashValue)
    }

    @Test("refuses unusable URLs with a one-line reason", arguments: [
        ("ftp://example.com/a", "unsupported scheme \"ftp\" (only http and https)"),
        ("FILE:///etc/passwd", "unsupported scheme \"file\" (only http and https)"),
        ("/just/a/path", "not an absolute URL"),
        ("example.com/a", "not an absolute URL"),
        ("", "not an absolute URL"),
        ("http://", "missing host"),
        ("http:///a", "missing host"),
        ("http:example.com", "missing host"),
        ("http://:80/a", "missing host"),
        ("http://user:pw@example.com/", "user credentials in URLs are not allowed"),
        ("http://user@example.com/", "user credentials in URLs are not allowed"),
        ("http://example.com:0/", "invalid port"),
        ("http://example.com:65536/", "invalid port"),
        ("http://example.com:8o/", "invalid port"),
        ("http://example.com/a b", "invalid character in URL"),
        ("http://example.com/a\tb", "invalid character in URL"),
        ("http://example.com/a\u{7f}", "invalid character in URL"),
        ("http://exa mple.com/", "invalid character in URL"),
        ("http://exa<mple.com/", "invalid host"),
        ("http://[::1/", "invalid host"),
        ("http://[::1]x/", "invalid host"),
        ("http://" + String(repeating: "a", count: 8200) + ".com/", "URL too long"),
    ])
    func refuses(input: String, reason: String) {
        #expect(throws: URLParseError(reason: reason)) { try UpstreamURL.parse(input) }
    }
}
