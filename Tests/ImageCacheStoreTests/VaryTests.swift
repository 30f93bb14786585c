import ImageCacheHTTP
import ImageCacheStore
import Testing

@Suite("Vary", .timeLimit(.minutes(1)))
struct VaryTests {
    static func response(vary: [String]) -> HTTPResponseHead {
        var headers = HTTPHeaders()
        for v in vary { headers.add("Vary", v) }
        return HTTPResponseHead(status: 200, headers: headers)
    }

    @Test("a response without Vary has no vary key")
    func noVary() {
        #expect(VaryKey.make(response: VaryTests.response(vary: []), request: ["Accept": "image/webp"]) == nil)
    }

    @Test("matches requests with the same normalised values of the nominated fields", arguments: [
        (["Accept"], ["Accept": "image/webp,image/*"], ["accept": "image/webp, image/*"], true),
        (["Accept"], ["Accept": "image/webp,  image/*"], ["ACCEPT": " image/webp ,image/* "], true),
        (["Accept"], ["Accept": "image/webp"], ["Accept": "image/avif"], false),
        (["Accept"], ["Accept": "image/webp"], [:], false),
        (["Accept"], [:], [:], true),
        (["Accept"], [:], ["Accept": ""], false),
        (["accept-encoding, Accept"], ["Accept": "a", "Accept-Encoding": "gzip"], ["Accept-Encoding": "gzip", "Accept": "a"], true),
        (["Accept-Encoding", "Accept"], ["Accept": "a", "Accept-Encoding": "gzip"], ["Accept": "a", "Accept-Encoding": "br"], false),
        (["Accept"], ["Accept": "image/a  b"], ["Accept": "image/a b"], true),
    ] as [([String], HTTPHeaders, HTTPHeaders, Bool)])
    func matching(vary: [String], stored: HTTPHeaders, later: HTTPHeaders, matches: Bool) throws {
        // Given a response stored for the first request
        let key = try #require(VaryKey.make(response: VaryTests.response(vary: vary), request: stored))
        // When / Then
        #expect(key.matches(later) == matches)
        #expect(key.matches(stored))
    }

    @Test("combines repeated request fields before comparing")
    func repeatedFields() throws {
        let key = try #require(VaryKey.make(response: VaryTests.response(vary: ["Accept"]),
                                            request: HTTPHeaders([("Accept", "a"), ("Accept", "b")])))
        #expect(key.matches(["Accept": "a, b"]))
    }

    @Test("Vary: * never matches", arguments: [["*"], ["Accept, *"], ["Accept", "*"]])
    func star(vary: [String]) throws {
        let key = try #require(VaryKey.make(response: VaryTests.response(vary: vary), request: [:]))
        #expect(key.matchesNothing)
        #expect(!key.matches([:]))
    }
}
