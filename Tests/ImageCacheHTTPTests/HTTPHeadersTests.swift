import Testing
@testable import ImageCacheHTTP

@Suite("HTTPHeaders", .timeLimit(.minutes(1)))
struct HTTPHeadersTests {
    @Test("combined joins every field of a name in order, ignoring the name's case", arguments: [
        ([], nil),
        ([("Accept", "image/webp")], "image/webp"),
        ([("Accept", "image/webp"), ("X", "y"), ("accept", "image/avif")], "image/webp, image/avif"),
    ] as [([(String, String)], String?)])
    func combined(fields: [(String, String)], expected: String?) {
        #expect(HTTPHeaders(fields).combined("ACCEPT") == expected)
    }

    @Test("a request without Cache-Control or Pragma has no directives; Pragma: no-cache alone means no-cache")
    func cacheControlDefaults() {
        #expect(CacheControl(HTTPHeaders([("Accept", "*/*")])) == CacheControl())
        #expect(CacheControl(HTTPHeaders([("Pragma", "no-cache")])).noCache)
        #expect(!CacheControl(HTTPHeaders([("Pragma", "no-cache"), ("Cache-Control", "max-age=5")])).noCache)
    }
}
