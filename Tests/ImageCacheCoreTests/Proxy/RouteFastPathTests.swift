import Testing
@testable import ImageCacheHTTP
@testable import ImageCacheConfig
@testable import ImageCacheCore

@Suite("Routing: the reverse proxy's fast path", .timeLimit(.minutes(1)))
struct RouteFastPathTests {
    static let targets = [
        "/a.jpg", "/", "/small/img-001.png", "/a/b/c.webp?w=100&h=200", "/a.jpg?", "/?x=1", "/a//b", "/.hidden/x",
        "/a/.../b", "/a/..b/c", "/a/b./c", "/a~b_c-d.e", "/a:b@c!$&'()*+,;=", "/q?a/b?c:d@e", "/x?y=.&z=..",
        // fall back to the full parse
        "/a/./b", "/a/../b", "/..", "/.", "/a/..", "/a/.", "/a%2Fb", "/%7euser", "/a b", "/a#frag", "/a\"b", "/a{b}",
        "/caf\u{e9}.jpg", "/a?b#c", "/a?b c", "/a?%41", "/../../etc/passwd", "/a/%2e%2e/b",
    ]
    static let bases = ["http://Origin.Example", "https://o.example:8443/base/", "http://o.example/base", "http://[::1]:8080/x/y"]

    @Test("a target in normal form gives the same URL as the full parse", arguments: bases)
    func fastEqualsSlow(base: String) throws {
        for target in Self.targets {
            // Given
            let route = try #require(OriginRoute(OriginMapping(prefix: "/", url: base)))
            let pathAndQuery = route.basePath + target
            // When
            let fast = UpstreamURL.withNormalPath(origin: route.base, pathAndQuery)
            let slow = Result { () throws(URLParseError) in
                try UpstreamURL.parse(route.base.scheme + "://" + route.base.authority + pathAndQuery)
            }
            // Then
            if let fast {
                #expect(fast == (try? slow.get()), "\(base) \(target)")
                #expect(fast.string == (try? slow.get())?.string)
            }
        }
    }

    @Test("plain paths take the fast path; escapes, dot segments and odd characters do not")
    func eligibility() throws {
        let base = try UpstreamURL.parse("http://o.example")
        for target in ["/a.jpg", "/a/b/c.png?w=1", "/", "/.hidden", "/a..b"] {
            #expect(UpstreamURL.withNormalPath(origin: base, target) != nil, "\(target)")
        }
        for target in ["", "a.jpg", "/a/./b", "/a/../b", "/..", "/a/.", "/a%20b", "/a b", "/a#b", "/caf\u{e9}", "/a?b c"] {
            #expect(UpstreamURL.withNormalPath(origin: base, target) == nil, "\(target)")
        }
    }

    @Test("the routed reverse URL equals the full parse for every target that routes", arguments: bases)
    func routedEqualsSlow(base: String) throws {
        for prefix in ["/", "/img"] {
            let route = try #require(OriginRoute(OriginMapping(prefix: prefix, url: base)))
            for target in Self.targets.map({ prefix == "/" ? $0 : "/img" + $0 }) + ["/img", "/img?x"] where route.matches(target[...]) {
                // Given
                let rest = target.dropFirst(route.prefix.count)
                let full = route.base.scheme + "://" + route.base.authority + route.basePath
                    + ((rest.isEmpty || rest.first == "?") ? "/" + rest : rest)
                // When
                let routed = Result { () throws(URLParseError) in try route.upstreamURL(for: target) }
                let parsed = try? UpstreamURL.parse(full)
                // Then: the same URL, or refused by both (leaving the base path refuses a parsed URL too)
                switch routed {
                case let .success(url): #expect(url == parsed, "\(base) \(target)")
                case .failure: #expect(parsed == nil || !(parsed!.pathAndQuery.hasPrefix(route.basePath)), "\(base) \(target)")
                }
            }
        }
    }
}
