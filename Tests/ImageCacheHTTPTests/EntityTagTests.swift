import ImageCacheHTTP
import Testing

@Suite("EntityTag", .timeLimit(.minutes(1)))
struct EntityTagTests {
    @Test("parses strong and weak tags", arguments: [
        ("\"v1\"", EntityTag(isWeak: false, opaque: "\"v1\"")),
        ("W/\"v1\"", EntityTag(isWeak: true, opaque: "\"v1\"")),
        ("  \"\"  ", EntityTag(isWeak: false, opaque: "\"\"")),
        ("\"a,b\"", EntityTag(isWeak: false, opaque: "\"a,b\"")),
    ])
    func parses(text: String, expected: EntityTag) {
        #expect(EntityTag.parse(text) == expected)
    }

    @Test("refuses what is not an entity tag", arguments: ["", "v1", "\"v1", "w/\"v1\"", "\"v 1\"", "\"v1\"x", "*", "W/"])
    func refuses(text: String) {
        #expect(EntityTag.parse(text) == nil)
    }

    @Test("parses lists leniently")
    func list() {
        // Given / When
        let tags = EntityTag.parseList(" \"a\",W/\"b\" ,, junk, \"c,d\"  ,\"e\"")
        // Then
        #expect(tags.map(\.description) == ["\"a\"", "W/\"b\"", "\"c,d\"", "\"e\""])
        #expect(EntityTag.parseList("*").isEmpty)
    }

    @Test("compares weakly and strongly as RFC 9110 section 8.8.3.2 tabulates", arguments: [
        ("W/\"1\"", "W/\"1\"", false, true),
        ("W/\"1\"", "W/\"2\"", false, false),
        ("W/\"1\"", "\"1\"", false, true),
        ("\"1\"", "\"1\"", true, true),
    ])
    func comparison(a: String, b: String, strong: Bool, weak: Bool) throws {
        let x = try #require(EntityTag.parse(a))
        let y = try #require(EntityTag.parse(b))
        #expect(x.strongMatches(y) == strong)
        #expect(x.weakMatches(y) == weak)
        #expect(y.weakMatches(x) == weak)
    }

    @Test("evaluates If-None-Match with weak comparison", arguments: [
        ("\"v1\"", "\"v1\"", true),
        ("W/\"v1\"", "\"v1\"", true),
        ("\"v1\"", "W/\"v1\"", true),
        ("\"v0\", \"v1\"", "\"v1\"", true),
        ("\"v0\"", "\"v1\"", false),
        ("*", "\"v1\"", true),
        (" * ", nil, true),
        ("\"v1\"", nil, false),
        ("\"v1\"", "garbage", false),
    ] as [(String, String?, Bool)])
    func ifNoneMatch(field: String, etag: String?, matches: Bool) {
        #expect(EntityTag.ifNoneMatch(field, matches: etag) == matches)
    }
}
