import Testing
@testable import ImageCacheHTTP
@testable import ImageCacheConfig
import ImageCacheServer
@testable import ImageCacheCore

@Suite("URLSigning: signed fetch URLs", .timeLimit(.minutes(1)))
struct URLSigningTests {
    static let key = Array("0123456789abcdef0123".utf8)
    static let otherKey = Array("fedcba9876543210fedc".utf8)
    static let url = "http://img.example/a.jpg"

    /// go-camo's README vectors: key "test", http://golang.org/doc/gopher/frontpage.png.
    static let camo = URLSigning(keys: [Array("test".utf8)])
    static let camoHex = "0f6def1cb147b0e84f39cbddc5ea10c80253a6f3/687474703a2f2f676f6c616e672e6f72672f646f632f676f706865722f66726f6e74706167652e706e67"
    static let camoBase64 = "D23vHLFHsOhPOcvdxeoQyAJTpvM/aHR0cDovL2dvbGFuZy5vcmcvZG9jL2dvcGhlci9mcm9udHBhZ2UucG5n"

    @Test("keys are read as hex, base64 or text, with or without a prefix", arguments: [
        ("hex:30313233343536373839616263646566", Array("0123456789abcdef".utf8)),
        ("30313233343536373839616263646566", Array("0123456789abcdef".utf8)),
        ("base64:MDEyMzQ1Njc4OWFiY2RlZg==", Array("0123456789abcdef".utf8)),
        ("MDEyMzQ1Njc4OWFiY2RlZg", Array("0123456789abcdef".utf8)),
        ("text:0123456789abcdef", Array("0123456789abcdef".utf8)),
    ] as [(String, [UInt8])])
    func keys(text: String, expected: [UInt8]) {
        #expect(URLSigning.decodeKey(text) == expected)
    }

    @Test("go-camo's own URLs verify with the same key, in the hex and the base64 form")
    func camoVectors() throws {
        #expect(try Self.camo.verifyPath(Self.camoHex[...]).get() == "http://golang.org/doc/gopher/frontpage.png")
        #expect(try Self.camo.verifyPath(Self.camoBase64[...]).get() == "http://golang.org/doc/gopher/frontpage.png")
        #expect(URLSigning.looksSigned(Self.camoHex[...]) && URLSigning.looksSigned(Self.camoBase64[...]))
    }

    @Test("a wrong, truncated or undecodable camo digest is refused with a reason", arguments: [
        ("1f6def1cb147b0e84f39cbddc5ea10c80253a6f3/687474703a2f2f676f6c616e672e6f72672f646f632f676f706865722f66726f6e74706167652e706e67", "wrong signature"),
        ("0f6def1cb147b0e84f39cbddc5ea10c80253a6/687474703a2f2f676f6c616e672e6f72672f646f632f676f706865722f66726f6e74706167652e706e67", "truncated"),
        ("0f6def1cb147b0e84f39cbddc5ea10c80253a6f3/687474703a2f2f676f6c616e672e6f72672f646f632f676f706865722f66726f6e74706167652e706e68", "wrong signature"),
        ("zz!/yy", "neither hex nor URL-safe base64"),
        ("onlyone", "a signed path is"),
    ])
    func camoRefusals(path: String, reason: String) {
        guard case let .failure(refusal) = Self.camo.verifyPath(path[...]) else {
            Issue.record("\(path) verified")
            return
        }
        #expect(refusal.reason.contains(reason), "\(refusal.reason)")
    }

    @Test("a sig made with any configured key verifies (rotation); another key's, a truncated or a garbled one does not")
    func rotation() throws {
        let signedWithOld = try #require(URLSigning(keys: [Self.key]).signature(for: Self.url))
        let signedWithNew = try #require(URLSigning(keys: [Self.otherKey]).signature(for: Self.url))
        let both = URLSigning(keys: [Self.otherKey, Self.key])
        #expect(both.verify(sig: signedWithOld, url: Self.url, normalised: Self.url) == nil)
        #expect(both.verify(sig: signedWithNew, url: Self.url, normalised: Self.url) == nil)
        #expect(URLSigning(keys: [Self.otherKey]).verify(sig: signedWithOld, url: Self.url, normalised: Self.url)?.reason.hasPrefix("wrong signature") == true)
        #expect(both.verify(sig: String(signedWithOld.dropLast(4)), url: Self.url, normalised: Self.url)?.reason.contains("truncated") == true)
        #expect(both.verify(sig: "%%%", url: Self.url, normalised: Self.url) != nil)
        #expect(both.verify(sig: signedWithOld, url: Self.url + "?x", normalised: Self.url + "?x")?.reason.hasPrefix("wrong signature") == true)
        #expect(URLSigning().verify(sig: signedWithOld, url: Self.url, normalised: Self.url)?.reason.contains("not configured") == true)
        #expect(signedWithOld.count == 43 && !signedWithOld.contains("="))
    }

    @Test("a signature over a URL verifies for every spelling that normalises to the same key")
    func normalisedSpellings() throws {
        let signing = URLSigning(keys: [Self.key])
        let spelled = "http://IMG.example:80/x/../a.jpg"
        let normal = try UpstreamURL.parse(spelled).string
        #expect(normal == Self.url)
        let overNormal = try #require(signing.signature(for: normal))
        let overSpelled = try #require(signing.signature(for: spelled))
        #expect(signing.verify(sig: overNormal, url: spelled, normalised: normal) == nil)
        #expect(signing.verify(sig: overSpelled, url: spelled, normalised: normal) == nil)
        let camo = try #require(signing.camoPath(for: normal))
        #expect(try signing.verifyPath(camo[...]).get() == normal)
    }

    @Test("routing: unsigned fetch and forward requests are refused when signatures are required; signed ones pass; the path form is at /fetch/ always and at / only without origins")
    func routing() throws {
        let signing = URLSigning(keys: [Self.key], required: true)
        func route(_ target: String, origins: [OriginMapping] = []) -> Route {
            Route.resolve(HTTPRequestHead(method: "GET", target: target, headers: ["Host": "x"]), origins: origins, signing: signing)
        }
        let sig = try #require(signing.signature(for: Self.url))
        let camo = try #require(signing.camoPath(for: Self.url))
        let expected = Route.upstream(try UpstreamURL.parse(Self.url), mode: .fetch, trusted: false)
        #expect(route("/fetch?url=http%3A%2F%2Fimg.example%2Fa.jpg&sig=" + sig) == expected)
        #expect(route("/fetch/" + camo) == expected)
        #expect(route("/" + camo) == expected)
        #expect(route("/fetch/" + camo, origins: [OriginMapping(prefix: "/", url: "http://o")]) == expected)
        guard case .upstream(_, .reverse, _) = route("/" + camo, origins: [OriginMapping(prefix: "/", url: "http://o")]) else {
            Issue.record("with an origin on /, a path at / is the origin's")
            return
        }
        guard case .error(403, _) = route("/fetch?url=http%3A%2F%2Fimg.example%2Fa.jpg"),
              case .error(403, _) = route(Self.url) else {
            Issue.record("unsigned requests passed")
            return
        }
        // Not required: unsigned passes, a wrong signature still does not.
        let optional = URLSigning(keys: [Self.key], required: false)
        let unsigned = Route.resolve(HTTPRequestHead(method: "GET", target: "/fetch?url=http%3A%2F%2Fimg.example%2Fa.jpg", headers: ["Host": "x"]),
                                     origins: [OriginMapping](), signing: optional)
        let wrong = Route.resolve(HTTPRequestHead(method: "GET", target: "/fetch?url=http%3A%2F%2Fimg.example%2Fb.jpg&sig=" + sig, headers: ["Host": "x"]),
                                  origins: [OriginMapping](), signing: optional)
        #expect(unsigned == expected)
        guard case .error(403, _) = wrong else {
            Issue.record("a wrong signature passed when signatures are optional")
            return
        }
    }

    @Test("require-signature: auto is on for a listen address that is not loopback; keys are at least 16 bytes, never a flag")
    func configuration() throws {
        var loopback = Configuration()
        loopback.listen = ListenAddress(host: "127.0.0.1", port: 8080)
        var everywhere = Configuration()
        everywhere.listen = ListenAddress(host: "0.0.0.0", port: 8080)
        #expect(!loopback.signaturesRequired)
        #expect(everywhere.signaturesRequired)
        everywhere.requireSignature = false
        #expect(!everywhere.signaturesRequired)
        let loaded = try Configuration.load(file: nil, environment: ["IMAGECACHED_SIGNING_KEYS": "text:0123456789abcdef, hex:30313233343536373839616263646566",
                                                                      "IMAGECACHED_REQUIRE_SIGNATURE": "true"], flags: [])
        #expect(loaded.signingKeys.count == 2)
        #expect(loaded.signaturesRequired)
        #expect(throws: ConfigError.self) { try Configuration.load(file: nil, environment: ["IMAGECACHED_SIGNING_KEYS": "text:short"], flags: []) }
        #expect(throws: ConfigError.self) {
            try Configuration.load(file: nil, environment: [:], flags: [ConfigSetting(key: "signing-keys", value: .scalar("text:0123456789abcdef"), source: "--signing-keys")])
        }
    }
}
