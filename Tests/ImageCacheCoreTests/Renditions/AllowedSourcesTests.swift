import Testing
@testable import ImageCacheHTTP
@testable import ImageCacheCore

@Suite("AllowedSources: the URL prefixes sources may come from", .timeLimit(.minutes(1)))
struct AllowedSourcesTests {
    private func allows(_ items: [String], _ url: String) throws -> Bool {
        AllowedSources(items).refusal(try UpstreamURL.parse(url)) == nil
    }

    @Test("no items: every URL is allowed", arguments: [
        "http://example.com/a.jpg", "https://10.0.0.1:8443/x", "http://[::1]/y",
    ])
    func emptyAllowsAll(url: String) throws {
        #expect(AllowedSources([]).items.isEmpty)
        #expect(try allows([], url))
    }

    @Test("a prefix with a path matches at a path boundary, on the normalised URL", arguments: [
        ("https://cdn.example.com/images/a.jpg", true),
        ("https://cdn.example.com/images/sub/b.png?w=1", true),
        ("https://cdn.example.com/images", true),
        ("https://CDN.Example.com:443/images/a.jpg", true),
        ("https://cdn.example.com/x/../images/a.jpg", true),
        ("https://cdn.example.com/images2/a.jpg", false),
        ("https://cdn.example.com/imagesa.jpg", false),
        ("https://cdn.example.com/other/a.jpg", false),
        ("https://cdn.example.com/images/../secret.jpg", false),
        ("https://cdn.example.com/images/%2e%2e/secret.jpg", false),
        ("https://cdn.example.com/", false),
    ])
    func prefix(url: String, allowed: Bool) throws {
        #expect(try allows(["https://cdn.example.com/images"], url) == allowed, "\(url)")
        // A trailing "/" in the item means the same directory.
        #expect(try allows(["https://cdn.example.com/images/"], url) == allowed || url.hasSuffix("/images"), "\(url)")
    }

    @Test("a prefix without a path allows the whole host")
    func wholeHost() throws {
        #expect(try allows(["https://cdn.example.com"], "https://cdn.example.com/any/thing.png?x=1"))
        #expect(try allows(["https://cdn.example.com/"], "https://cdn.example.com/"))
        #expect(try !allows(["https://cdn.example.com"], "https://img.example.com/a.png"))
    }

    @Test("*.example.com matches subdomains at any depth, not example.com itself nor look-alikes", arguments: [
        ("https://a.example.com/x.png", true),
        ("https://A.B.Example.com/x.png", true),
        ("https://example.com/x.png", false),
        ("https://badexample.com/x.png", false),
        ("https://example.com.evil.test/x.png", false),
        ("https://a.example.org/x.png", false),
    ])
    func wildcard(url: String, allowed: Bool) throws {
        #expect(try allows(["https://*.example.com"], url) == allowed, "\(url)")
    }

    @Test("the port and the scheme must match (a default port is the same as none)", arguments: [
        (["http://example.com:8080"], "http://example.com:8080/a.png", true),
        (["http://example.com:8080"], "http://example.com/a.png", false),
        (["http://example.com:8080"], "http://example.com:8081/a.png", false),
        (["http://example.com"], "http://example.com:8080/a.png", false),
        (["https://example.com"], "http://example.com/a.png", false),
        (["http://example.com"], "https://example.com/a.png", false),
        (["https://example.com:443"], "https://example.com/a.png", true),
        (["https://example.com"], "https://example.com:443/a.png", true),
        (["https://example.com"], "https://example.com:80/a.png", false),
        (["https://*.example.com:8443"], "https://a.example.com:8443/a.png", true),
        (["https://*.example.com:8443"], "https://a.example.com/a.png", false),
    ])
    func portAndScheme(items: [String], url: String, allowed: Bool) throws {
        #expect(try allows(items, url) == allowed, "\(items) \(url)")
    }

    @Test("any one item allows; a refusal names the origin")
    func severalItems() throws {
        // Given
        let sources = AllowedSources(["https://a.example.com/img", "http://b.example.com:8080"])
        // Then
        #expect(sources.refusal(try UpstreamURL.parse("https://a.example.com/img/1.png")) == nil)
        #expect(sources.refusal(try UpstreamURL.parse("http://b.example.com:8080/2.png")) == nil)
        let refusal = sources.refusal(try UpstreamURL.parse("https://c.example.com:8443/3.png"))
        #expect(refusal == "https://c.example.com:8443 is not under allowed-sources")
    }

    @Test("a URL whose path is the item's path with a query is under it, as OriginRoute's \"/img?x\" is")
    func pathWithQuery() throws {
        #expect(try allows(["https://cdn.example.com/images"], "https://cdn.example.com/images?v=1"))
    }
}
